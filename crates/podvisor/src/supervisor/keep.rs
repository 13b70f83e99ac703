//! Containers held by keepers (`--live-restore`, see `crate::keeper`): starting an instance
//! through a new keeper, a keeper's end, and keepers taken over from the run before.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use podvisor_core::clock::Instant;
use podvisor_core::lifecycle::{Input, InstanceId, Survivor};
use podvisor_core::record::{PodRecord, ProcessRecord, StateRecord};

use super::{Supervisor, TOKEN_KEEPER};
use crate::keeper::protocol::{self, ExitNote, Hello};
use crate::keeper::KeeperArgs;
use crate::process::sys::{self, ChildSetup, ContainerIo, Forked, Inherited, EV_READ};
use crate::state::{StateError, StateFile, RESET_REMEDY};

/// A keeper the supervisor knows: its pid and, for one taken over, the connection whose end
/// says that it ended (it is not our child).
#[derive(Debug)]
pub(super) struct Keeper {
    pub pid: i32,
    pub conn: Option<UnixStream>,
}

/// A running container found held by a keeper when the run began.
#[derive(Debug)]
pub struct Adopted {
    pub container: usize,
    pub instance: u32,
    pub hello: Hello,
    pub conn: UnixStream,
    pub process: ProcessRecord,
}

/// What was found of the containers a record says were running.
#[derive(Debug, Default)]
pub struct Found {
    pub survivors: std::collections::BTreeMap<String, Survivor>,
    pub adopted: Vec<Adopted>,
    /// Exit records read (removed once the pod is taken up).
    pub exit_files: Vec<PathBuf>,
}

/// The keeper binary beside this one, opened now (`podvisor-keeper`), so that the keepers
/// this run starts are of its release even once the files on disk are replaced; `None` where
/// it is missing (keepers then run as `podvisor keeper`).
pub fn keeper_exe() -> Option<File> {
    let exe = std::env::current_exe().ok()?;
    File::open(exe.with_file_name("podvisor-keeper")).ok()
}

/// How long a keeper has to say hello.
const HELLO_PATIENCE: Duration = Duration::from_secs(2);

/// Looks for the keeper of each container `record` says was running: alive (it says hello in
/// a protocol this podvisor adopts), ended with the exit recorded, or neither (lost). A keeper
/// of an unknown protocol, or a record that cannot be read, refuses the run: nothing is
/// touched, nothing killed.
pub fn find(state_dir: &Path, record: &PodRecord, names: &[String]) -> Result<Found, StateError> {
    let mut found = Found::default();
    // No keeper ever ran here (no --live-restore), or a restart of everything was under way.
    if record.restarting_all || !protocol::dir(state_dir).is_dir() {
        return Ok(found);
    }
    // Exit records no run will read (an instance the record no longer counts as running, as
    // after a restart of everything): removed with the others once the pod is taken up.
    let running: Vec<String> = record
        .containers
        .iter()
        .filter(|c| matches!(c.state, StateRecord::Running(_)))
        .map(|c| protocol::exit_file(&c.name, c.instance))
        .collect();
    for e in std::fs::read_dir(protocol::dir(state_dir))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".exit") && !running.contains(&name) {
            found.exit_files.push(e.path());
        }
    }
    for c in &record.containers {
        let (StateRecord::Running(_), Some(process)) = (&c.state, c.process) else {
            continue;
        };
        let Some(index) = names.iter().position(|n| *n == c.name) else {
            continue;
        };
        let socket = protocol::socket(state_dir, &c.name, c.instance);
        let refuse = |message: String| StateError::Mismatch {
            path: socket.display().to_string(),
            message,
            remedy: KEEPER_REMEDY,
        };
        if let Ok(conn) = UnixStream::connect(&socket) {
            let hello = read_hello(&conn)
                .map_err(|e| refuse(format!("container {}'s keeper: {e}", c.name)))?;
            if !protocol::ADOPTS.contains(&hello.protocol) {
                return Err(refuse(format!(
                    "container {} is held by a keeper (pid {}) that speaks protocol {}; this podvisor adopts protocols {}..={}",
                    c.name,
                    hello.keeper,
                    hello.protocol,
                    protocol::ADOPTS.start(),
                    protocol::ADOPTS.end()
                )));
            }
            if hello.pid != process.pid {
                return Err(refuse(format!(
                    "container {}'s keeper holds pid {}, the saved state says pid {}",
                    c.name, hello.pid, process.pid
                )));
            }
            found.survivors.insert(c.name.clone(), Survivor::Running);
            found.adopted.push(Adopted {
                container: index,
                instance: c.instance,
                hello,
                conn,
                process,
            });
            continue;
        }
        let file = exit_record(state_dir, &c.name, c.instance)?;
        let note = read_note(&file).map_err(|message| StateError::Mismatch {
            path: file.path().display().to_string(),
            message: format!("container {}'s {message}", c.name),
            remedy: RESET_REMEDY,
        })?;
        if let Some(note) = note {
            let exit = lifecycle_exit(&note, false);
            let finished_at = Instant::from_millis(note.finished);
            let found_exit = Survivor::Exited { exit, finished_at };
            found.survivors.insert(c.name.clone(), found_exit);
            found.exit_files.push(file.path().to_path_buf());
        }
    }
    Ok(found)
}

const KEEPER_REMEDY: &str = "run the podvisor release that started the pod (or a newer one) on this state dir, or stop the pod with it (podvisor stop) first";

fn read_hello(conn: &UnixStream) -> Result<Hello, String> {
    conn.set_read_timeout(Some(HELLO_PATIENCE))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(conn)
        .read_line(&mut line)
        .map_err(|e| format!("no greeting within {HELLO_PATIENCE:?}: {e}"))?;
    protocol::parse_hello(line.trim_end())
}

/// The exit record of a container instance's keeper.
fn exit_record(state_dir: &Path, container: &str, instance: u32) -> Result<StateFile, StateError> {
    StateFile::new(
        &protocol::dir(state_dir),
        &protocol::exit_file(container, instance),
    )
}

/// What an exit record holds, if it is there; `Err` says why it cannot be read.
fn read_note(file: &StateFile) -> Result<Option<ExitNote>, String> {
    let text = file.read().map_err(|e| format!("exit record: {e}"))?;
    text.map(|t| ExitNote::decode(&t))
        .transpose()
        .map_err(|e| format!("exit record: {e}"))
}

/// A recorded exit as the core takes it; `oom`: the cgroup also says OOM killer.
fn lifecycle_exit(note: &ExitNote, oom: bool) -> podvisor_core::lifecycle::Exit {
    podvisor_core::lifecycle::Exit {
        status: super::exit_status(note.exit),
        oom_killed: note.oom_killed || oom,
    }
}

impl Supervisor {
    /// Starts `argv` as instance `id` under a new keeper, which takes the pipes' read ends
    /// (`out`, `err`) and writes the log file: (keeper pid, container pid).
    pub(super) fn start_kept(
        &self,
        id: InstanceId,
        argv: &[OsString],
        io: ContainerIo,
        out: &File,
        err: &File,
        oom_file: Option<PathBuf>,
    ) -> io::Result<(i32, i32)> {
        std::fs::create_dir_all(protocol::dir(&self.state_dir))?;
        let protocol = std::env::var(protocol::TEST_PROTOCOL_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(protocol::PROTOCOL);
        let args = KeeperArgs {
            state_dir: self.state_dir.clone(),
            container: self.plan.pod.containers[id.container].name.clone(),
            instance: id.instance,
            pid: 0,
            stdout: out.as_raw_fd(),
            stderr: err.as_raw_fd(),
            protocol,
            limits: self.log_limits,
            oom_file,
        };
        let (mut report, child_end) = UnixStream::pair()?;
        match sys::fork()? {
            Forked::Child => {
                drop(report);
                let exe = self.keeper_exe.as_ref();
                sys::exit_now(keeper_child(
                    child_end,
                    argv,
                    io,
                    &self.inherited,
                    args,
                    exe,
                ))
            }
            Forked::Parent(keeper) => {
                drop(child_end);
                // One line: the container's pid once it runs (its exec done), or why it could
                // not start. The keeper's own exec is not waited for: a keeper that cannot
                // exec kills the container and ends without a record, which reports it lost.
                let mut line = String::new();
                BufReader::new(&mut report).read_line(&mut line)?;
                let (what, rest) = line
                    .trim_end()
                    .split_once(' ')
                    .unwrap_or((line.trim_end(), ""));
                match what {
                    "pid" => match rest.parse() {
                        Ok(pid) => Ok((keeper, pid)),
                        Err(_) => Err(io::Error::other(format!(
                            "start its keeper: it said {line:?}"
                        ))),
                    },
                    "errno" => Err(io::Error::from_raw_os_error(
                        rest.parse().unwrap_or(libc::EIO),
                    )),
                    "" => Err(io::Error::other(
                        "start its keeper: the keeper ended before it said anything",
                    )),
                    _ => Err(io::Error::other(rest.to_string())),
                }
            }
        }
    }

    /// Instance `id`'s keeper ended (reaped, or its connection closed): the container's exit
    /// as it recorded it, or the container lost when it recorded none.
    pub(super) fn keeper_ended(&mut self, id: InstanceId) -> io::Result<()> {
        let Some(keeper) = self.keepers.remove(&id) else {
            return Ok(());
        };
        if let Some(conn) = keeper.conn {
            let _ = self.epoll.delete(conn.as_raw_fd());
        }
        let name = &self.plan.pod.containers[id.container].name;
        let note = exit_record(&self.state_dir, name, id.instance)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                let note = read_note(&f);
                let _ = f.remove();
                note
            });
        let oom = self.instance_ended(id);
        let input = match note {
            Ok(Some(n)) => Input::Exited(id, lifecycle_exit(&n, oom)),
            Ok(None) => Input::Lost(
                id,
                format!(
                    "its keeper (pid {}) ended without recording an exit; the container went with it",
                    keeper.pid
                ),
            ),
            Err(e) => Input::Lost(id, format!("its keeper's {e}")),
        };
        self.feed(input)
    }

    /// The connection to container `i`'s keeper (one taken over) is readable: it ends when
    /// the keeper does.
    pub(super) fn keeper_readable(&mut self, i: usize) -> io::Result<()> {
        let Some((&id, conn)) = self
            .keepers
            .iter_mut()
            .find_map(|(id, k)| Some((id, k.conn.as_mut()?)).filter(|(id, _)| id.container == i))
        else {
            return Ok(());
        };
        let mut buf = [0u8; 256];
        let ended = match conn.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != io::ErrorKind::WouldBlock,
        };
        if ended {
            self.keeper_ended(id)?;
        }
        Ok(())
    }

    /// Takes over the containers found running under keepers: their process, group, cgroup,
    /// namespaces and environment as a start would have set them, and the keeper's connection.
    pub(super) fn adopt(&mut self, adopted: Vec<Adopted>) -> io::Result<()> {
        for a in adopted {
            let id = InstanceId {
                container: a.container,
                instance: a.instance,
            };
            let stage = self.pod.containers()[a.container].stage;
            self.envs[a.container] = self.instance_env(a.container, stage);
            let pid = a.process.pid;
            let name = self.plan.pod.containers[a.container].name.clone();
            if let Some(pod) = self.cgroups.pod.as_ref() {
                match pod.reopen(&name, a.instance) {
                    Ok(cg) => {
                        self.instance_cgroups.insert(id, cg);
                    }
                    Err(e) => eprintln!("podvisor: {e}"),
                }
            }
            for (kind, map) in [("mnt", &mut self.mount_ns), ("user", &mut self.user_ns)] {
                let theirs = std::fs::metadata(format!("/proc/{pid}/ns/{kind}"));
                let ours = std::fs::metadata(format!("/proc/self/ns/{kind}"));
                if let (Ok(t), Ok(o)) = (theirs, ours) {
                    use std::os::unix::fs::MetadataExt;
                    if t.ino() != o.ino() {
                        if let Ok(f) = File::open(format!("/proc/{pid}/ns/{kind}")) {
                            map.insert(id, f);
                        }
                    }
                }
            }
            a.conn.set_nonblocking(true)?;
            a.conn.set_read_timeout(None)?;
            // One live instance per container: its index is the token's slot.
            let token = TOKEN_KEEPER | a.container as u64;
            self.epoll.add(a.conn.as_raw_fd(), token, EV_READ)?;
            self.keepers.insert(
                id,
                Keeper {
                    pid: a.hello.keeper,
                    conn: Some(a.conn),
                },
            );
            self.groups.insert(id, pid);
            self.instance_pids.insert((id.container, id.instance), pid);
            self.processes.insert(id, a.process);
        }
        Ok(())
    }
}

/// The forked child: starts the container (its parent from now on), then becomes the keeper.
/// Returns the exit code when it cannot.
fn keeper_child(
    mut report: UnixStream,
    argv: &[OsString],
    io: ContainerIo,
    inherited: &Inherited,
    mut args: KeeperArgs,
    exe: Option<&File>,
) -> i32 {
    // Its own session: a terminal's signals and hang-up never reach it.
    let _ = sys::new_session();
    if let Err(e) = sys::set_child_subreaper() {
        let _ = writeln!(report, "error start its keeper: {e}");
        return 1;
    }
    let pid = match sys::spawn(argv, ChildSetup::Container(Box::new(io)), inherited) {
        Ok(pid) => pid,
        Err(e) => {
            let _ = match e.raw_os_error() {
                Some(n) => writeln!(report, "errno {n}"),
                None => writeln!(report, "error {e}"),
            };
            return 0;
        }
    };
    let _ = writeln!(report, "pid {pid}");
    args.pid = pid;
    let kept = [args.stdout, args.stderr]
        .into_iter()
        .try_for_each(sys::keep_across_exec);
    let e = match (kept, exe) {
        (Ok(()), Some(exe)) => {
            let mut argv: Vec<OsString> = vec!["podvisor-keeper".into()];
            argv.extend(args.to_args());
            sys::exec_file(exe, &argv)
        }
        (Ok(()), None) => {
            let mut argv: Vec<OsString> = vec!["podvisor".into(), "keeper".into()];
            argv.extend(args.to_args());
            sys::exec_self(&argv)
        }
        (Err(e), _) => e,
    };
    let _ = writeln!(report, "error start its keeper: {e}");
    // The container must not run without its keeper.
    let _ = sys::send_signal(pid, libc::SIGKILL);
    1
}
