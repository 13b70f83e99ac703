//! Containers held by keepers (`--live-restore`, see `crate::keeper`): starting an instance in
//! the run's keeper (started at the first), the exits keepers tell and their end, and the
//! keepers taken over from the runs before.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use podvisor_core::clock::Instant;
use podvisor_core::lifecycle::{Input, InstanceId, Survivor};
use podvisor_core::record::{PodRecord, ProcessRecord, StateRecord};

use super::{PidOwner, Supervisor, TOKEN_KEEPER};
use crate::keeper::protocol::{self, ExitNote, Hello, Lines, StartRequest};
use crate::keeper::{free_slot, KeeperArgs};
use crate::process::sys::{self, ContainerIo, Exec, Forked, EV_READ};
use crate::state::{StateError, StateFile, RESET_REMEDY};

/// The keepers a run knows: the one it started (the only one it starts containers in),
/// connections to all of them, and which holds each live instance.
#[derive(Debug, Default)]
pub(super) struct Keepers {
    /// The keeper this run started: its pid and control channel.
    own: Option<(i32, Lines)>,
    /// Connections that tell exits (the own keeper's events channel and those taken over),
    /// by slot (the epoll token's); the keeper's pid with each.
    conns: Vec<Option<(i32, Lines)>>,
    /// The keeper (pid) of each live instance.
    held: HashMap<InstanceId, i32>,
}

impl Keepers {
    /// The run's end: its keeper hears that nothing more will start (it ends once it holds
    /// nothing). Returns its pid when it holds nothing already (it is ending: wait for it).
    pub(super) fn close(&mut self) -> Option<i32> {
        self.conns.clear();
        let (pid, _control) = self.own.take()?;
        (!self.held.values().any(|&k| k == pid)).then_some(pid)
    }
}

/// A running container found held by a keeper when the run began.
#[derive(Debug)]
pub struct Adopted {
    pub container: usize,
    pub instance: u32,
    pub keeper: i32,
    pub process: ProcessRecord,
}

/// What was found of the containers a record says were running.
#[derive(Debug, Default)]
pub struct Found {
    pub survivors: std::collections::BTreeMap<String, Survivor>,
    pub adopted: Vec<Adopted>,
    /// The keepers found running (pid, connection after its hello).
    pub keepers: Vec<(i32, Lines)>,
    /// Containers a keeper holds that the record does not know (started just before the run
    /// before was killed, never saved): killed once the pod is taken up.
    pub strays: Vec<i32>,
    /// Exit records read and sockets of keepers gone: removed once the pod is taken up.
    pub stale_files: Vec<PathBuf>,
}

/// The keeper binary beside this one, opened now (`podvisor-keeper`), so that the keepers
/// this run starts are of its release even once the files on disk are replaced; `None` where
/// it is missing (keepers then run as `podvisor keeper`).
pub fn keeper_exe() -> Option<File> {
    let exe = std::env::current_exe().ok()?;
    File::open(exe.with_file_name("podvisor-keeper")).ok()
}

/// How long a keeper has to answer a start request.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// A number the tests set in the environment (`protocol::TEST_*_ENV`).
fn test_setting<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok()?.parse().ok()
}

/// How long a keeper has to say hello.
const HELLO_PATIENCE: Duration = Duration::from_secs(2);

/// Looks for the keeper of each container `record` says was running: alive (a keeper that
/// speaks a protocol this podvisor adopts holds it), ended with the exit recorded, or neither
/// (lost). A keeper of an unknown protocol, or a record that cannot be read, refuses the run:
/// nothing is touched, nothing killed.
pub fn find(state_dir: &Path, record: &PodRecord, names: &[String]) -> Result<Found, StateError> {
    let mut found = Found::default();
    // No keeper ever ran here (no --live-restore).
    if !protocol::dir(state_dir).is_dir() {
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
        if name.ends_with(".exit") && (record.restarting_all || !running.contains(&name)) {
            found.stale_files.push(e.path());
        }
    }
    // Every keeper alive, and what it holds.
    let mut holds: HashMap<(String, u32), (i32, i32)> = HashMap::new();
    for socket in protocol::sockets(state_dir) {
        let refuse = |message: String| StateError::Mismatch {
            path: socket.display().to_string(),
            message,
            remedy: KEEPER_REMEDY,
        };
        let Ok(conn) = UnixStream::connect(&socket) else {
            // Its keeper is gone (killed: it removes its socket when it ends).
            found.stale_files.push(socket.clone());
            continue;
        };
        let (hello, conn) = read_hello(conn).map_err(|e| refuse(format!("a keeper: {e}")))?;
        if !protocol::ADOPTS.contains(&hello.protocol) {
            return Err(refuse(format!(
                "the pod's containers are held by a keeper (pid {}) that speaks protocol {}; this podvisor adopts protocols {}..={}",
                hello.keeper,
                hello.protocol,
                protocol::ADOPTS.start(),
                protocol::ADOPTS.end()
            )));
        }
        for (name, instance, pid) in &hello.holds {
            holds.insert((name.clone(), *instance), (hello.keeper, *pid));
        }
        found.keepers.push((hello.keeper, conn));
    }
    for c in &record.containers {
        let (StateRecord::Running(_), Some(process), false) =
            (&c.state, c.process, record.restarting_all)
        else {
            continue;
        };
        let Some(index) = names.iter().position(|n| *n == c.name) else {
            continue;
        };
        if let Some((keeper, pid)) = holds.remove(&(c.name.clone(), c.instance)) {
            if pid != process.pid {
                return Err(StateError::Mismatch {
                    path: protocol::socket(state_dir, keeper).display().to_string(),
                    message: format!(
                        "container {}'s keeper holds pid {pid}, the saved state says pid {}",
                        c.name, process.pid
                    ),
                    remedy: KEEPER_REMEDY,
                });
            }
            found.survivors.insert(c.name.clone(), Survivor::Running);
            found.adopted.push(Adopted {
                container: index,
                instance: c.instance,
                keeper,
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
            found.stale_files.push(file.path().to_path_buf());
        }
    }
    found.strays = holds.into_values().map(|(_, pid)| pid).collect();
    Ok(found)
}

const KEEPER_REMEDY: &str = "run the podvisor release that started the pod (or a newer one) on this state dir, or stop the pod with it (podvisor stop) first";

fn read_hello(conn: UnixStream) -> Result<(Hello, Lines), String> {
    conn.set_read_timeout(Some(HELLO_PATIENCE))
        .map_err(|e| e.to_string())?;
    let mut lines = Lines::new(conn);
    let hello = protocol::read_hello(&mut lines)
        .map_err(|e| format!("no greeting within {HELLO_PATIENCE:?}: {e}"))?;
    Ok((hello, lines))
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
    /// Starts `argv` as instance `id` in this run's keeper (started first if there is none),
    /// which writes its log file: the container's pid.
    pub(super) fn start_kept(
        &mut self,
        id: InstanceId,
        argv: &[OsString],
        io: ContainerIo,
        cgroups: Vec<PathBuf>,
        oom_file: Option<PathBuf>,
    ) -> io::Result<i32> {
        let text = |v: OsString| {
            v.into_string()
                .map_err(|v| io::Error::other(format!("{v:?} is not UTF-8")))
        };
        let request = StartRequest {
            container: self.plan.pod.containers[id.container].name.clone(),
            instance: id.instance,
            argv: argv.iter().cloned().map(text).collect::<io::Result<_>>()?,
            env: io.env.into_iter().map(text).collect::<io::Result<_>>()?,
            working_dir: io.working_dir,
            working_dir_optional: io.working_dir_optional,
            mounts: io.mounts,
            root: io.root,
            cgroups,
            oom_file,
            blocked: (1..=libc::SIGRTMAX())
                .filter(|&s| self.inherited.mask.contains(s))
                .collect(),
        };
        let json = serde_json::to_string(&request).map_err(io::Error::other)?;
        if self.keepers.own.is_none() {
            self.start_keeper()?;
        }
        let Some((keeper, control)) = self.keepers.own.as_mut() else {
            return Err(io::Error::other("no keeper"));
        };
        let keeper = *keeper;
        let asked = control
            .stream
            .write_all(format!("start {json}\n").as_bytes())
            .and_then(|()| control.read_line());
        let line = match asked {
            Ok(Some(line)) => line,
            failed => {
                // It is gone (its reaping reports what it held) or stuck: the next start gets
                // a new one.
                self.keepers.own = None;
                let why = match failed {
                    Err(e) => {
                        // Stuck: it goes, with what it holds (reported when it is reaped), so
                        // that nothing it may still start runs unknown to us.
                        let _ = sys::send_signal(keeper, libc::SIGKILL);
                        format!("the keeper (pid {keeper}) did not answer: {e}")
                    }
                    _ => format!("the keeper (pid {keeper}) ended before it answered"),
                };
                return Err(io::Error::other(format!("start it in its keeper: {why}")));
            }
        };
        let (what, rest) = line.split_once(' ').unwrap_or((&line, ""));
        match what {
            "pid" => match rest.parse() {
                Ok(pid) => {
                    self.keepers.held.insert(id, keeper);
                    Ok(pid)
                }
                Err(_) => Err(io::Error::other(format!(
                    "start it in its keeper: it said {line:?}"
                ))),
            },
            "errno" => Err(io::Error::from_raw_os_error(
                rest.parse().unwrap_or(libc::EIO),
            )),
            _ => Err(io::Error::other(rest.to_string())),
        }
    }

    /// Forks and execs this run's keeper, with its control and events channels.
    fn start_keeper(&mut self) -> io::Result<()> {
        std::fs::create_dir_all(protocol::dir(&self.state_dir))?;
        let protocol = test_setting(protocol::TEST_PROTOCOL_ENV).unwrap_or(protocol::PROTOCOL);
        let (control, control_end) = UnixStream::pair()?;
        let (events, events_end) = UnixStream::pair()?;
        let args = KeeperArgs {
            state_dir: self.state_dir.clone(),
            control: control_end.as_raw_fd(),
            events: events_end.as_raw_fd(),
            protocol,
            limits: self.log_limits,
        };
        let exec = keeper_exec(&args, self.keeper_exe.as_ref())?;
        match sys::fork()? {
            Forked::Child => sys::exit_now(become_keeper(&args, &exec)),
            Forked::Parent(pid) => {
                drop((control_end, events_end));
                self.pids.insert(pid, PidOwner::Keeper);
                events.set_nonblocking(true)?;
                let fd = events.as_raw_fd();
                let slot = free_slot(&mut self.keepers.conns);
                self.keepers.conns[slot] = Some((pid, Lines::new(events)));
                self.epoll.add(fd, TOKEN_KEEPER | slot as u64, EV_READ)?;
                // A keeper answers a start at once; one that does not is given up on.
                let patience = test_setting(protocol::TEST_START_PATIENCE_ENV)
                    .map_or(START_PATIENCE, Duration::from_millis);
                control.set_read_timeout(Some(patience))?;
                self.keepers.own = Some((pid, Lines::new(control)));
                Ok(())
            }
        }
    }

    /// Keeper `pid` ended (reaped, or its connection closed): each container it held ended
    /// as it recorded, or is lost when it recorded nothing.
    pub(super) fn keeper_gone(&mut self, pid: i32) -> io::Result<()> {
        if self.keepers.own.as_ref().is_some_and(|(k, _)| *k == pid) {
            self.keepers.own = None;
        }
        // A keeper that was killed could not remove its socket.
        let _ = std::fs::remove_file(protocol::socket(&self.state_dir, pid));
        for slot in self.keepers.conns.iter_mut() {
            if slot.as_ref().is_some_and(|(k, _)| *k == pid) {
                if let Some((_, conn)) = slot.take() {
                    let _ = self.epoll.delete(conn.stream.as_raw_fd());
                }
            }
        }
        let mut ids: Vec<InstanceId> = (self.keepers.held.iter())
            .filter(|(_, &k)| k == pid)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_by_key(|id| id.container);
        for id in ids {
            self.instance_gone(id)?;
        }
        Ok(())
    }

    /// Instance `id` has ended under its keeper: its exit as recorded, or lost when the keeper
    /// recorded none (it ended, and the container went with it).
    fn instance_gone(&mut self, id: InstanceId) -> io::Result<()> {
        let Some(keeper) = self.keepers.held.remove(&id) else {
            return Ok(());
        };
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
                    "its keeper (pid {keeper}) ended without recording an exit; the container went with it"
                ),
            ),
            Err(e) => Input::Lost(id, format!("its keeper's {e}")),
        };
        self.feed(input)
    }

    /// A keeper's connection (`slot`) is readable: the exits it tells, or its end.
    pub(super) fn keeper_readable(&mut self, slot: usize) -> io::Result<()> {
        let Some((keeper, conn)) = self.keepers.conns.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        let keeper = *keeper;
        let open = conn.fill_ready();
        let mut exited = Vec::new();
        while let Some(line) = conn.take_line() {
            if let Some((name, instance)) = protocol::parse_exited(&line) {
                exited.push((name.to_string(), instance));
            }
        }
        for (name, instance) in exited {
            match self.plan.pod.containers.iter().position(|c| c.name == name) {
                Some(container) => {
                    let id = InstanceId {
                        container,
                        instance,
                    };
                    self.instance_gone(id)?;
                }
                // Not ours (a stray killed at take-up): its record goes.
                None => {
                    let dir = protocol::dir(&self.state_dir);
                    let _ = std::fs::remove_file(dir.join(protocol::exit_file(&name, instance)));
                }
            }
        }
        if !open {
            self.keeper_gone(keeper)?;
        }
        Ok(())
    }

    /// Takes over the containers found running under keepers: their process, group, cgroup,
    /// namespaces and environment as a start would have set them, and the keepers'
    /// connections. What a keeper holds that the record does not know is killed.
    pub(super) fn adopt(&mut self, found: &mut super::keep::Found) -> io::Result<()> {
        for pid in found.strays.drain(..) {
            let _ = sys::send_signal(-pid, libc::SIGKILL);
        }
        for (keeper, conn) in found.keepers.drain(..) {
            conn.stream.set_nonblocking(true)?;
            conn.stream.set_read_timeout(None)?;
            let fd = conn.stream.as_raw_fd();
            let slot = free_slot(&mut self.keepers.conns);
            self.keepers.conns[slot] = Some((keeper, conn));
            self.epoll.add(fd, TOKEN_KEEPER | slot as u64, EV_READ)?;
        }
        for a in found.adopted.drain(..) {
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
            self.keepers.held.insert(id, a.keeper);
            self.groups.insert(id, pid);
            self.instance_pids.insert((id.container, id.instance), pid);
            self.processes.insert(id, a.process);
        }
        Ok(())
    }
}

/// The keeper's exec: `podvisor-keeper` (opened when the run began) or, where it is missing,
/// `podvisor keeper`, with `args`.
fn keeper_exec(args: &KeeperArgs, exe: Option<&File>) -> io::Result<Exec> {
    match exe {
        Some(exe) => {
            let mut argv: Vec<OsString> = vec!["podvisor-keeper".into()];
            argv.extend(args.to_args());
            Exec::open_file(exe, &argv)
        }
        None => {
            let mut argv: Vec<OsString> = vec!["podvisor".into(), "keeper".into()];
            argv.extend(args.to_args());
            Exec::this_binary(&argv)
        }
    }
}

/// The forked child: becomes the keeper (system calls only, see `Exec`). Returns the exit
/// code when it cannot.
fn become_keeper(args: &KeeperArgs, exec: &Exec) -> i32 {
    // Its own session: a terminal's signals and hang-up never reach it.
    let _ = sys::new_session();
    if sys::set_child_subreaper().is_err() {
        return 1;
    }
    let kept = [args.control, args.events]
        .into_iter()
        .try_for_each(sys::keep_across_exec);
    if kept.is_err() {
        return 1;
    }
    let _ = exec.run();
    1
}
