//! Containers held by keepers (`--live-restore`, see `crate::keeper`): starting an instance in
//! the run's keeper (started with a fresh pod, or at the first start), the exits keepers tell
//! and their end, and the keepers taken over from the runs before.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use podvisor_core::clock::Instant;
use podvisor_core::lifecycle::{Event, EventType, Input, InstanceId, Survivor};
use podvisor_core::record::{PodRecord, ProcessRecord, StateRecord};
use podvisor_core::spec::plan::StdioPlan;
use slab::Slab;

use super::instance::Instance;
use super::{PidOwner, Supervisor, TOKEN_KEEPER};
use crate::process::failpoint;
use crate::process::sys::{self, ContainerIo, Exec, Namespaces, PidSetup, EV_READ};
use crate::state::keeper::{
    self, Channel, ExitNote, InstanceName, KeeperArgs, KeptNamespaces, Message, StartRequest,
};
use crate::state::logs::LogLimits;
use crate::state::{StateDir, StateError, StateFile, RESET_REMEDY};

/// The keepers a run knows: the one it started (the only one it starts containers in), and
/// connections to all of them. Which keeper holds an instance is the instance's
/// (`Instance::keeper`).
#[derive(Debug, Default)]
pub(super) struct Keepers {
    /// The keeper this run started: its pid and control channel.
    own: Option<(i32, Channel)>,
    /// Connections that tell exits (the own keeper's events channel and those taken over),
    /// by slot (the epoll token's); the keeper's pid with each.
    conns: Slab<(i32, Channel)>,
    /// The exits the own keeper told (`ended`) and the saved record does not count yet (its
    /// notes, written once this run's end closes, go with a deleted pod's record).
    pub(super) told: Vec<InstanceName>,
}

impl Keepers {
    /// The run's end: its keeper hears that nothing more will start (it ends once it holds
    /// nothing). Returns its pid (it ends once what it holds has ended).
    pub(super) fn close(&mut self, instances: &super::instance::Instances) -> Option<i32> {
        self.conns.clear();
        let (pid, _control) = self.own.take()?;
        instances.held_by(pid).is_empty().then_some(pid)
    }

    /// The record just saved counts the exits the own keeper told: it writes no note of them.
    /// A keeper that cannot hear it writes the notes when this run's end closes.
    pub(super) fn say_counted(&mut self) {
        let told = std::mem::take(&mut self.told);
        if told.is_empty() {
            return;
        }
        failpoint::hit("run.exit.saved");
        if let Some((_, control)) = self.own.as_mut() {
            for name in told {
                if control.send(&Message::Counted(name)).is_err() {
                    break;
                }
            }
        }
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

/// A container instance a keeper holds that the record does not know.
#[derive(Debug)]
pub struct Stray {
    pub container: String,
    pub instance: u32,
    pub pid: i32,
}

/// What was found of the containers a record says were running.
#[derive(Debug, Default)]
pub struct Found {
    pub survivors: std::collections::BTreeMap<String, Survivor>,
    pub adopted: Vec<Adopted>,
    /// The keepers found running (pid, connection after its hello).
    pub keepers: Vec<(i32, Channel)>,
    /// Containers a keeper holds that the record does not know (started just before the run
    /// before was killed, never saved): killed once the pod is taken up.
    pub strays: Vec<Stray>,
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

/// What a run under live restore (`settings.live_restore`) opens and starts as it begins: the
/// keeper binary (`keeper_exe`) and, for a pod that starts afresh (nothing `taken_over`), its
/// keeper, after the pod's cgroups (the keeper is in the run's): the keeper's exec and start
/// overlap the pod's preparation instead of coming before its first container. One that
/// cannot be started now is tried again at the first start, which reports why.
pub(super) fn at_run_start(
    dir: &StateDir,
    settings: &super::Settings,
    taken_over: bool,
) -> (Option<File>, Option<SpawnedKeeper>) {
    if !settings.live_restore {
        return (None, None);
    }
    let exe = keeper_exe();
    let keeper = match taken_over {
        true => None,
        false => spawn_keeper(dir, settings.logs, exe.as_ref()).ok(),
    };
    (exe, keeper)
}

/// A keeper just forked and exec'd, told nothing yet: its pid, the control channel the run
/// asks for starts on, and the events channel it tells exits on.
pub(super) struct SpawnedKeeper {
    pid: i32,
    control: UnixStream,
    events: Channel,
}

/// Forks and execs a keeper for the pod of `dir`, with its control and events channels.
pub(super) fn spawn_keeper(
    dir: &StateDir,
    limits: LogLimits,
    exe: Option<&File>,
) -> io::Result<SpawnedKeeper> {
    std::fs::create_dir_all(dir.keepers_dir())?;
    let protocol = test_setting(keeper::TEST_PROTOCOL_ENV).unwrap_or(keeper::PROTOCOL);
    let (control, control_end) = UnixStream::pair()?;
    let (events, events_end) = UnixStream::pair()?;
    let args = KeeperArgs {
        state_dir: dir.path().to_path_buf(),
        control: control_end.as_raw_fd(),
        events: events_end.as_raw_fd(),
        protocol,
        limits,
    };
    let exec = keeper_exec(&args, exe)?;
    let pid = sys::spawn_detached(&exec, &[args.control, args.events])?;
    drop((control_end, events_end));
    failpoint::hit("run.keeper.spawned");
    Ok(SpawnedKeeper {
        pid,
        control,
        events: Channel::speaking(events, protocol),
    })
}

impl SpawnedKeeper {
    /// The run ends before it took this keeper: the keeper hears so (its channels close) and
    /// ends, holding nothing, and is reaped; one that does not end within a second is killed.
    pub(super) fn dismiss(self) {
        let pid = self.pid;
        // Readable once the keeper has ended (Linux 5.3 and later; before, a look every ms).
        let ended = sys::pidfd_open(pid).ok();
        drop(self);
        for kill in [false, true] {
            if kill {
                let _ = sys::send_signal(pid, libc::SIGKILL);
            }
            let give_up = std::time::Instant::now() + Duration::from_secs(1);
            loop {
                match sys::reap_pid(pid) {
                    Ok(None) => {}
                    Ok(Some(_)) | Err(_) => return,
                }
                let now = std::time::Instant::now();
                if now >= give_up {
                    break;
                }
                match &ended {
                    Some(fd) => {
                        let _ = sys::poll_readable(&[fd.as_raw_fd()], Some(give_up - now));
                    }
                    None => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }
    }
}

/// How long a keeper has to answer a start request.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// A number the tests set in the environment (`keeper::TEST_*_ENV`).
pub(super) fn test_setting<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok()?.parse().ok()
}

/// How long a keeper has to say hello.
const HELLO_PATIENCE: Duration = Duration::from_secs(2);

/// Looks for the keeper of each container `record` says was running: alive (a keeper that
/// speaks a protocol this podvisor adopts holds it), ended with the exit recorded, or neither
/// (lost). A keeper of an unknown protocol, or a record that cannot be read, refuses the run:
/// nothing is touched, nothing killed.
pub fn find(dir: &StateDir, record: &PodRecord, names: &[String]) -> Result<Found, StateError> {
    let mut found = Found::default();
    // No keeper ever ran here (no --live-restore).
    if !dir.keepers_dir().is_dir() {
        return Ok(found);
    }
    // Exit notes no run will read (an instance the record no longer counts as running, as
    // after a restart of everything): removed with the others once the pod is taken up.
    let running: Vec<String> = record
        .containers
        .iter()
        .filter(|c| matches!(c.state, StateRecord::Running(_)))
        .map(|c| keeper::exit_note_name(&c.name, c.instance))
        .collect();
    for (name, path) in dir.exit_notes() {
        if record.restarting_all || !running.contains(&name) {
            found.stale_files.push(path);
        }
    }
    let mut holds = keepers_alive(dir, &mut found)?;
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
                    path: dir.keeper_socket(keeper).display().to_string(),
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
        let file = dir.exit_note(&c.name, c.instance)?;
        let note = read_note(&file).map_err(|message| StateError::Mismatch {
            path: file.path().display().to_string(),
            message: format!("container {}'s {message}", c.name),
            remedy: RESET_REMEDY,
        })?;
        if let Some(note) = note {
            let exit = lifecycle_exit(&note, false, None);
            let finished_at = Instant::from_millis(note.finished);
            let found_exit = Survivor::Exited { exit, finished_at };
            found.survivors.insert(c.name.clone(), found_exit);
            found.stale_files.push(file.path().to_path_buf());
        }
    }
    found.strays = (holds.into_iter())
        .map(|((container, instance), (_, pid))| Stray {
            container,
            instance,
            pid,
        })
        .collect();
    Ok(found)
}

impl Found {
    /// A stray's instance number is used (its exit note and log file carry it): the next
    /// instance of its container is numbered after it, never the same (the numbers skipped
    /// are no starts: they count no restart).
    pub fn number_after_strays(&self, record: &mut PodRecord) {
        for s in &self.strays {
            if let Some(c) = record.containers.iter_mut().find(|c| c.name == s.container) {
                if s.instance > c.instance {
                    c.skipped += s.instance - c.instance;
                    c.instance = s.instance;
                }
            }
        }
    }
}

/// What the keepers alive hold: (container, instance) → (keeper, pid).
type Holds = HashMap<(String, u32), (i32, i32)>;

/// Every keeper alive in the state dir (its connection kept in `found`), and what each holds.
/// Sockets of keepers gone go to `found.stale_files`.
fn keepers_alive(dir: &StateDir, found: &mut Found) -> Result<Holds, StateError> {
    let mut holds = HashMap::new();
    for socket in dir.keeper_sockets() {
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
        if !keeper::ADOPTS.contains(&hello.protocol) {
            return Err(refuse(format!(
                "the pod's containers are held by a keeper (pid {}) that speaks protocol {}; this podvisor adopts protocols {}..={}",
                hello.keeper,
                hello.protocol,
                keeper::ADOPTS.start(),
                keeper::ADOPTS.end()
            )));
        }
        for held in hello.holds {
            holds.insert((held.container, held.instance), (hello.keeper, held.pid));
        }
        found.keepers.push((hello.keeper, conn));
    }
    Ok(holds)
}

const KEEPER_REMEDY: &str = "run the podvisor release that started the pod (or a newer one) on this state dir, or stop the pod with it (podvisor stop) first";

fn read_hello(conn: UnixStream) -> Result<(keeper::Hello, Channel), String> {
    conn.set_read_timeout(Some(HELLO_PATIENCE))
        .map_err(|e| e.to_string())?;
    let mut channel = Channel::new(conn);
    let hello = channel
        .read_hello()
        .map_err(|e| format!("no greeting within {HELLO_PATIENCE:?}: {e}"))?;
    Ok((hello, channel))
}

/// What an exit note holds, if it is there; `Err` says why it cannot be read.
fn read_note(file: &StateFile) -> Result<Option<ExitNote>, String> {
    let text = file.read().map_err(|e| format!("exit note: {e}"))?;
    text.map(|t| ExitNote::decode(&t))
        .transpose()
        .map_err(|e| format!("exit note: {e}"))
}

/// A recorded exit as the core takes it; `oom`: the cgroup also says OOM killer.
fn lifecycle_exit(
    note: &ExitNote,
    oom: bool,
    message: Option<String>,
) -> podvisor_core::lifecycle::Exit {
    podvisor_core::lifecycle::Exit {
        status: note.exit,
        oom_killed: note.oom_killed || oom,
        message,
    }
}

impl Supervisor {
    /// Asks the run's keeper (started now if there is none yet) to start instance `id`,
    /// without waiting for its answer (`keeper_answer`): returns the keeper's pid. A keeper that cannot be
    /// asked is left as it is (the error names it), for the caller to read the answers it
    /// gave before (`keeper_failed`).
    pub(super) fn ask_keeper(
        &mut self,
        id: InstanceId,
        argv: &[OsString],
        io: ContainerIo,
        stdio: StdioPlan,
        cgroups: Vec<PathBuf>,
        oom_file: Option<PathBuf>,
    ) -> Result<i32, (Option<i32>, io::Error)> {
        let text = |v: OsString| {
            v.into_string()
                .map_err(|v| io::Error::other(format!("{v:?} is not UTF-8")))
        };
        let strings = (|| -> io::Result<_> {
            Ok((
                argv.iter().cloned().map(text).collect::<io::Result<_>>()?,
                (io.env.vars())
                    .map(|v| text(v.to_os_string()))
                    .collect::<io::Result<_>>()?,
            ))
        })();
        let (argv, env) = strings.map_err(|e| (None, e))?;
        let request = StartRequest {
            container: self.plan.pod.containers[id.container].name.clone(),
            instance: id.instance,
            argv,
            env,
            working_dir: io.working_dir,
            working_dir_optional: io.working_dir_optional,
            mounts: io.mounts,
            root: io.root,
            cgroups,
            oom_file,
            blocked: (1..=libc::SIGRTMAX())
                .filter(|&s| self.inherited.mask.contains(s))
                .collect(),
            credentials: io.credentials,
            namespaces: kept_namespaces(&io.namespaces),
            stdio: (stdio != StdioPlan::default()).then_some(stdio),
        };
        if self.keepers.own.is_none() {
            self.start_keeper().map_err(|e| (None, e))?;
        }
        let Some((keeper, control)) = self.keepers.own.as_mut() else {
            return Err((None, io::Error::other("no keeper")));
        };
        let keeper = *keeper;
        control
            .send(&Message::Start(Box::new(request)))
            .map_err(|e| (Some(keeper), e))?;
        failpoint::hit("run.start.asked");
        Ok(keeper)
    }

    /// The answer of `keeper` to the oldest start asked of it and not yet answered: the
    /// container's pid.
    pub(super) fn keeper_answer(&mut self, keeper: i32) -> io::Result<i32> {
        let control = match self.keepers.own.as_mut() {
            Some((pid, control)) if *pid == keeper => control,
            _ => {
                return Err(io::Error::other(format!(
                    "start it in its keeper: the keeper (pid {keeper}) ended before it answered"
                )))
            }
        };
        match control.recv() {
            Ok(Message::Started { pid }) => {
                failpoint::hit("run.start.answered");
                Ok(pid)
            }
            Ok(Message::Failed(why)) => Err(why.into_error()),
            Ok(other) => Err(io::Error::other(format!(
                "start it in its keeper: it said {other:?}"
            ))),
            Err(e) => Err(self.keeper_failed(keeper, e)),
        }
    }

    /// Asking or hearing `keeper` failed with `e`: it is gone (its reaping reports what it
    /// held) or stuck, and the next start gets a new one. Returns the start's error.
    pub(super) fn keeper_failed(&mut self, keeper: i32, e: io::Error) -> io::Error {
        if self.keepers.own.as_ref().is_some_and(|(k, _)| *k == keeper) {
            self.keepers.own = None;
        }
        let why = if matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe
        ) {
            format!("the keeper (pid {keeper}) ended before it answered")
        } else {
            // Stuck: it goes, with what it holds (reported when it is reaped), so that
            // nothing it may still start runs unknown to us.
            let _ = sys::send_signal(keeper, libc::SIGKILL);
            format!("the keeper (pid {keeper}) did not answer: {e}")
        };
        io::Error::other(format!("start it in its keeper: {why}"))
    }

    /// Forks and execs this run's keeper (`spawn_keeper`), and takes it as its own.
    fn start_keeper(&mut self) -> io::Result<()> {
        let spawned = spawn_keeper(&self.dir, self.log_limits, self.keeper_exe.as_ref())?;
        self.take_keeper(spawned)
    }

    /// Takes `spawned` as this run's keeper: it hears its exits, and asks it for starts.
    pub(super) fn take_keeper(&mut self, spawned: SpawnedKeeper) -> io::Result<()> {
        let SpawnedKeeper {
            pid,
            control,
            events,
        } = spawned;
        self.pids.insert(pid, PidOwner::Keeper);
        self.listen_to_keeper(pid, events)?;
        // A keeper answers a start at once, and takes the starts asked ahead as it makes
        // them; one that does neither is given up on.
        let patience = test_setting(keeper::TEST_START_PATIENCE_ENV)
            .map_or(START_PATIENCE, Duration::from_millis);
        control.set_read_timeout(Some(patience))?;
        control.set_write_timeout(Some(patience))?;
        self.keepers.own = Some((pid, Channel::new(control)));
        Ok(())
    }

    /// Reads the exits keeper `pid` tells on `conn` from now on.
    fn listen_to_keeper(&mut self, pid: i32, conn: Channel) -> io::Result<()> {
        conn.stream.set_nonblocking(true)?;
        conn.stream.set_read_timeout(None)?;
        let fd = conn.stream.as_raw_fd();
        let slot = self.keepers.conns.insert((pid, conn));
        self.epoll.add(fd, TOKEN_KEEPER | slot as u64, EV_READ)
    }

    /// Keeper `pid` ended (reaped, or its connection closed): each container it held ended
    /// as it recorded, or is lost when it recorded nothing.
    pub(super) fn keeper_gone(&mut self, pid: i32) -> io::Result<()> {
        if self.keepers.own.as_ref().is_some_and(|(k, _)| *k == pid) {
            self.keepers.own = None;
        }
        // A keeper that was killed could not remove its socket.
        let _ = std::fs::remove_file(self.dir.keeper_socket(pid));
        let slots: Vec<usize> = (self.keepers.conns.iter())
            .filter(|(_, (k, _))| *k == pid)
            .map(|(slot, _)| slot)
            .collect();
        for slot in slots {
            let (_, conn) = self.keepers.conns.remove(slot);
            let _ = self.epoll.delete(conn.stream.as_raw_fd());
        }
        for id in self.instances.held_by(pid) {
            self.instance_gone(id)?;
        }
        Ok(())
    }

    /// Instance `id` has ended under its keeper: its exit as recorded, or lost when the keeper
    /// recorded none (it ended, and the container went with it).
    fn instance_gone(&mut self, id: InstanceId) -> io::Result<()> {
        if self.instances.get(id).and_then(|i| i.keeper).is_none() {
            return Ok(());
        }
        let name = &self.plan.pod.containers[id.container].name;
        let note = self
            .dir
            .exit_note(name, id.instance)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                let note = read_note(&f);
                self.notes_read.push(id);
                note
            });
        self.instance_ended_as(id, note)
    }

    /// Instance `id` has ended under its keeper, as `note` (told with the message, or read
    /// from its file) says.
    fn instance_ended_as(
        &mut self,
        id: InstanceId,
        note: Result<Option<ExitNote>, String>,
    ) -> io::Result<()> {
        let Some(keeper) = self.instances.get(id).and_then(|i| i.keeper) else {
            return Ok(());
        };
        let message = match &note {
            Ok(Some(n)) => self.termination_message(id, n.exit.code())?,
            _ => None,
        };
        let oom = self.instance_ended(id);
        let input = match note {
            Ok(Some(n)) => Input::Exited(id, lifecycle_exit(&n, oom, message)),
            Ok(None) => Input::Lost(
                id,
                format!(
                    "its keeper (pid {keeper}) ended without recording an exit; the container went with it"
                ),
            ),
            Err(e) => Input::Lost(id, format!("its keeper's {e}")),
        };
        self.feed(input)?;
        failpoint::hit("run.exit.told");
        Ok(())
    }

    /// A keeper's connection (`slot`) is readable: the exits it tells, or its end.
    pub(super) fn keeper_readable(&mut self, slot: usize) -> io::Result<()> {
        let Some((keeper, conn)) = self.keepers.conns.get_mut(slot) else {
            return Ok(());
        };
        let keeper = *keeper;
        let open = conn.fill_ready();
        let (mut exited, mut logs) = (Vec::new(), Vec::new());
        while let Some(message) = conn.take() {
            // What this run does not know (a newer keeper's message) is passed over.
            match message {
                Ok(Message::Exited(instance)) => exited.push((instance, None)),
                Ok(Message::Ended(ending)) => exited.push((ending.name(), Some(ending.note()))),
                Ok(Message::Log(report)) => logs.push(report),
                _ => {}
            }
        }
        for report in logs {
            let container =
                (self.plan.pod.containers.iter()).position(|c| c.name == report.container);
            if let Some(container) = container {
                self.tell_log_news(container, vec![report.news]);
            }
        }
        for (name, told) in exited {
            let id = (self.plan.pod.containers.iter())
                .position(|c| c.name == name.container)
                .map(|container| InstanceId {
                    container,
                    instance: name.instance,
                });
            match (id.filter(|id| self.instances.get(*id).is_some()), told) {
                (Some(id), None) => self.instance_gone(id)?,
                (Some(id), Some(note)) => {
                    // Our own keeper hears when the record counts it.
                    if self.keepers.own.as_ref().is_some_and(|(k, _)| *k == keeper) {
                        self.keepers.told.push(name);
                    }
                    self.instance_ended_as(id, Ok(Some(note)))?;
                }
                // Not ours (a stray killed at take-up): its note goes.
                (None, None) => self.dir.remove_exit_note(&name.container, name.instance),
                // Not ours, and told without a note (one that is written later is stale
                // for the next run).
                (None, Some(_)) => {}
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
    pub(super) fn adopt(&mut self, found: &mut Found) -> io::Result<()> {
        for stray in found.strays.drain(..) {
            let _ = sys::send_signal(-stray.pid, libc::SIGKILL);
            let restart_count = (self.pod.containers().iter())
                .find(|c| c.name == stray.container)
                .map(|c| c.restart_count);
            let event = Event {
                kind: EventType::Warning,
                reason: "Killing".into(),
                message: format!(
                    "Killed container {} (pid {}): the previous run started it after it last saved the pod's state, and was killed before it could; it starts again as a new instance",
                    stray.container, stray.pid
                ),
                object: stray.container,
                exit_code: None,
                restart_count,
                stage: None,
            };
            self.pending.push((std::time::SystemTime::now(), event));
        }
        failpoint::hit("run.adopt.greeted");
        for (keeper, conn) in found.keepers.drain(..) {
            self.listen_to_keeper(keeper, conn)?;
        }
        for a in found.adopted.drain(..) {
            let id = InstanceId {
                container: a.container,
                instance: a.instance,
            };
            let stage = self.pod.containers()[a.container].stage;
            let name = &self.plan.pod.containers[a.container].name;
            // It was started with this environment, so it can be made again.
            match self.instance_env(a.container, stage) {
                Ok(env) => self.envs[a.container] = env,
                Err(e) => eprintln!("podvisor: container {name}: cannot {e}"),
            }
            let cgroup = match self
                .cgroups
                .pod
                .as_ref()
                .map(|pod| pod.reopen(name, a.instance))
            {
                Some(Ok(cg)) => Some(cg),
                Some(Err(e)) => {
                    eprintln!("podvisor: {e}");
                    None
                }
                None => None,
            };
            let mut instance = Instance::adopted(a.process, cgroup, a.keeper);
            instance.open_namespaces(false);
            self.instances.hold(id, instance);
        }
        failpoint::hit("run.adopt.held");
        Ok(())
    }
}

/// A container's namespaces as its keeper opens them: the pod's by our descriptors' paths.
fn kept_namespaces(ns: &Namespaces) -> KeptNamespaces {
    let ours = |fd: Option<std::os::fd::RawFd>| {
        fd.map(|fd| PathBuf::from(format!("/proc/{}/fd/{fd}", sys::getpid())))
    };
    KeptNamespaces {
        join_uts: ours(ns.join_uts),
        join_ipc: ours(ns.join_ipc),
        new_uts: ns.new_uts.clone(),
        new_ipc: ns.new_ipc,
        // A shared PID namespace is refused under live restore (see `sandbox`).
        new_pid: ns.pid == PidSetup::New,
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
