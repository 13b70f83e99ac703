//! The event loop of `podvisor run`: feeds inputs to the lifecycle core and carries out its
//! effects.
//!
//! One thread, one `poll` over a signalfd (SIGCHLD, SIGTERM, SIGINT), the containers' log pipes
//! and the core's next deadline: nothing wakes podvisor while nothing happens. The one reaper
//! runs on SIGCHLD and routes each exit by pid to its container instance. Each container is a
//! session (process group) of its own; SIGTERM and SIGKILL go to the whole group, and when a
//! container's main process exits, whatever it left in its group is killed, as a container
//! runtime tears down the container's cgroup. podvisor is a child subreaper, so orphans come
//! back to it and are reaped too.

pub mod events;
mod logs;

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::SystemTime;

use podvisor_core::clock::{Clock, Instant};
use podvisor_core::lifecycle::{Effect, ExitStatus, Input, InstanceId, Phase, Pod, Signal};
use podvisor_core::spec::plan::RunPlan;

use crate::process::sys::{
    self, ChildSetup, ContainerIo, Exit, Inherited, Reaped, SigSet, SignalFd,
};
use events::EventSink;
use logs::LogStream;

/// The monotonic clock of the shell: time since the supervisor started.
#[derive(Debug)]
pub struct RealClock(std::time::Instant);

impl RealClock {
    pub fn new() -> RealClock {
        RealClock(std::time::Instant::now())
    }
}

impl Default for RealClock {
    fn default() -> Self {
        RealClock::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::from_origin(self.0.elapsed())
    }
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub phase: Phase,
    /// Stopped by SIGTERM / SIGINT rather than by finishing.
    pub stopped: bool,
}

/// Runs the pod until it finishes or is stopped.
pub fn run(plan: RunPlan, state_dir: PathBuf, events: EventSink) -> io::Result<Outcome> {
    let mut set = SigSet::empty();
    for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT] {
        set.add(sig);
    }
    let mask = sys::set_signal_mask(&set)?;
    let signals = SignalFd::new(&set)?;
    // Orphans of containers come back to us (and are reaped) rather than to the host's init.
    sys::set_child_subreaper()?;
    std::fs::create_dir_all(state_dir.join("logs"))?;
    let _lock = lock_state_dir(&state_dir)?;
    let mut sup = Supervisor {
        pod: Pod::new(plan.pod.clone()),
        plan,
        clock: RealClock::new(),
        inherited: Inherited {
            mask,
            actions: Vec::new(),
        },
        pids: HashMap::new(),
        groups: HashMap::new(),
        logs: Vec::new(),
        state_dir,
        events,
        signals,
        stopped: false,
        finished: None,
    };
    sup.run()
}

struct Supervisor {
    pod: Pod,
    plan: RunPlan,
    clock: RealClock,
    inherited: Inherited,
    /// Live container processes: pid → instance.
    pids: HashMap<i32, InstanceId>,
    /// Process group of each live instance.
    groups: HashMap<InstanceId, i32>,
    logs: Vec<LogStream>,
    state_dir: PathBuf,
    events: EventSink,
    signals: SignalFd,
    stopped: bool,
    finished: Option<Phase>,
}

impl Supervisor {
    fn run(&mut self) -> io::Result<Outcome> {
        self.feed(Input::Admit)?;
        while self.finished.is_none() {
            let deadline = self.pod.next_deadline();
            let timeout = deadline.map(|d| d - self.clock.now());
            let mut fds = vec![self.signals.as_raw_fd()];
            fds.extend(self.logs.iter().map(|l| l.fd()));
            let ready = sys::poll_readable(&fds, timeout)?;
            // Logs first, so that a container's last lines precede its exit event.
            for &i in ready.iter().filter(|&&i| i > 0).rev() {
                if !self.logs[i - 1].drain()? {
                    self.logs.remove(i - 1);
                }
            }
            if ready.contains(&0) {
                while let Some(sig) = self.signals.read()? {
                    match sig {
                        libc::SIGCHLD => self.reap()?,
                        _ => self.stop_requested()?,
                    }
                }
            }
            if deadline.is_some_and(|d| self.clock.now() >= d) {
                self.feed(Input::Tick)?;
            }
        }
        // Everything has exited: take what is left in the pipes.
        for mut log in std::mem::take(&mut self.logs) {
            log.finish()?;
        }
        Ok(Outcome {
            phase: self.finished.unwrap_or(Phase::Failed),
            stopped: self.stopped,
        })
    }

    fn stop_requested(&mut self) -> io::Result<()> {
        if self.stopped {
            // A second request does not wait for the grace period.
            for &pgid in self.groups.values() {
                let _ = sys::send_signal(-pgid, libc::SIGKILL);
            }
            return Ok(());
        }
        self.stopped = true;
        self.feed(Input::Stop)
    }

    fn reap(&mut self) -> io::Result<()> {
        loop {
            match sys::reap_one()? {
                Reaped::Exited { pid, exit } => {
                    let Some(id) = self.pids.remove(&pid) else {
                        continue; // an adopted orphan
                    };
                    if let Some(pgid) = self.groups.remove(&id) {
                        // What the container left in its group goes with it.
                        let _ = sys::send_signal(-pgid, libc::SIGKILL);
                    }
                    let status = match exit {
                        Exit::Code(c) => ExitStatus::Code(c),
                        Exit::Signal(s) => ExitStatus::Signal(s),
                    };
                    self.feed(Input::Exited(id, status))?;
                }
                Reaped::NoneReady | Reaped::NoChildren => return Ok(()),
            }
        }
    }

    /// Feeds an input and carries out the effects, including those of the inputs they cause.
    fn feed(&mut self, input: Input) -> io::Result<()> {
        let mut queue: VecDeque<Input> = VecDeque::from([input]);
        while let Some(input) = queue.pop_front() {
            let now = self.clock.now();
            for effect in self.pod.step(now, input) {
                match effect {
                    Effect::Spawn(id) => queue.push_back(self.spawn(id)?),
                    Effect::Signal(id, signal) => {
                        if let Some(&pgid) = self.groups.get(&id) {
                            let sig = match signal {
                                Signal::Term => libc::SIGTERM,
                                Signal::Kill => libc::SIGKILL,
                            };
                            let _ = sys::send_signal(-pgid, sig);
                        }
                    }
                    Effect::Event(event) => {
                        let restarts = self
                            .pod
                            .containers()
                            .iter()
                            .find(|c| c.name == event.object)
                            .map(|c| c.restart_count);
                        self.events.emit(SystemTime::now(), &event, restarts);
                    }
                    Effect::Finished(phase) => self.finished = Some(phase),
                }
            }
        }
        Ok(())
    }

    /// Starts an instance; returns the input that reports how it went.
    fn spawn(&mut self, id: InstanceId) -> io::Result<Input> {
        let exec = &self.plan.exec[id.container];
        let name = &self.plan.pod.containers[id.container].name;
        let dir = self.state_dir.join("logs").join(name);
        std::fs::create_dir_all(&dir)?;
        let log_path = dir.join(format!("{}.log", id.instance));
        let (out_read, out_write) = sys::pipe()?;
        let (err_read, err_write) = sys::pipe()?;
        let io = ContainerIo {
            stdout: out_write.as_raw_fd(),
            stderr: err_write.as_raw_fd(),
            working_dir: exec.working_dir.as_ref().map(PathBuf::from),
            env: container_env(&self.plan.pod.name, &exec.env),
        };
        let argv: Vec<OsString> = exec.argv.iter().map(OsString::from).collect();
        let result = sys::spawn(&argv, ChildSetup::Container(io), &self.inherited);
        // Our copies of the write ends must go, or the pipes never reach end-of-file.
        drop((out_write, err_write));
        match result {
            Ok(pid) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log_path)?;
                self.logs
                    .push(LogStream::new(out_read, "stdout", file.try_clone()?));
                self.logs.push(LogStream::new(err_read, "stderr", file));
                self.pids.insert(pid, id);
                self.groups.insert(id, pid);
                Ok(Input::Started(id))
            }
            Err(e) => {
                let what = match e.raw_os_error() {
                    Some(libc::ENOENT) => "executable file not found",
                    Some(libc::EACCES) => "permission denied",
                    _ => "cannot start it",
                };
                let msg = format!(
                    "exec: {:?}: {what}: {}",
                    exec.argv.first().cloned().unwrap_or_default(),
                    e
                );
                Ok(Input::StartFailed(id, msg))
            }
        }
    }
}

/// Why `run` refused to start.
#[derive(Debug, thiserror::Error)]
#[error("{dir}: in use by another podvisor run (pid {pid}): one pod per state dir; pass another --state-dir")]
pub struct StateDirInUse {
    pub dir: String,
    pub pid: String,
}

/// One pod per state dir: an exclusive lock on `STATE_DIR/podvisor.lock`, holding our pid, for
/// as long as the run lasts (the kernel drops it when podvisor dies, however it dies).
fn lock_state_dir(dir: &std::path::Path) -> io::Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    let path = dir.join("podvisor.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)?;
    if !sys::try_lock(&file)? {
        let mut pid = String::new();
        let _ = file.read_to_string(&mut pid);
        let err = StateDirInUse {
            dir: dir.display().to_string(),
            pid: pid.trim().to_string(),
        };
        return Err(io::Error::new(io::ErrorKind::AddrInUse, err));
    }
    file.set_len(0)?;
    file.rewind()?;
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

/// A container's environment: what a container runtime provides (PATH, HOME, HOSTNAME = the
/// pod's name), then the container's own variables, which win.
fn container_env(pod: &str, env: &[(String, String)]) -> Vec<OsString> {
    let mut out: Vec<(String, String)> = Vec::new();
    let path = std::env::var("PATH")
        .unwrap_or_else(|_| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    out.push(("PATH".into(), path));
    if let Ok(home) = std::env::var("HOME") {
        out.push(("HOME".into(), home));
    }
    out.push(("HOSTNAME".into(), pod.to_string()));
    for (k, v) in env {
        match out.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out.into_iter()
        .map(|(k, v)| OsString::from(format!("{k}={v}")))
        .collect()
}
