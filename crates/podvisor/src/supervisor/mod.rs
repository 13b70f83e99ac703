//! The event loop of `podvisor run`: feeds inputs to the lifecycle core and carries out its
//! effects.
//!
//! One thread, one epoll over a signalfd (SIGCHLD, SIGTERM, SIGINT), the containers' log pipes
//! and the sockets and pipes of probes and hooks in flight, with a timeout at the next deadline
//! (the core's, or a probe's timeout): nothing wakes podvisor while nothing happens. The one
//! reaper runs on SIGCHLD and routes each exit by pid to its container instance or exec task. Each container is a
//! session (process group) of its own; SIGTERM and SIGKILL go to the whole group, and when a
//! container's main process exits, whatever it left in its group is killed, as a container
//! runtime tears down the container's cgroup. podvisor is a child subreaper, so orphans come
//! back to it and are reaped too.

pub mod events;
pub mod logs;
mod volumes;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::SystemTime;

use podvisor_core::clock::{Clock, Instant};
use podvisor_core::lifecycle::{
    Effect, ExitStatus, Hook, Input, InstanceId, Kind, Phase, Pod, Signal,
};
use podvisor_core::probe::Outcome as ProbeOutcome;
use podvisor_core::spec::plan::RunPlan;

use crate::api::metrics::{render, ContainerSample, Counters};
use crate::api::status::{pod_json, PodInfo};
use crate::api::{Request, Server};
use crate::probe::{Done, ExecContext, Owner, Tasks};
use crate::process::sys::{
    self, ChildSetup, ContainerIo, Epoll, Exit, Inherited, Reaped, SigSet, SignalFd, EV_READ,
};
use events::EventSink;
use logs::{LogFile, LogLimits, LogStream};
use volumes::Volumes;

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
/// How `run` is set up beyond the pod itself.
#[derive(Debug, Default)]
pub struct Settings {
    pub logs: LogLimits,
    /// Serve Prometheus metrics here (`--metrics-addr`).
    pub metrics: Option<std::net::TcpListener>,
}

pub fn run(
    mut plan: RunPlan,
    info: PodInfo,
    state_dir: PathBuf,
    events: EventSink,
    settings: Settings,
) -> io::Result<Outcome> {
    // First probes of the containers started now spread over their period (see PodPlan).
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    plan.pod.probe_jitter_seed = Some(nanos ^ u64::from(std::process::id()).rotate_left(32));
    let _ = sys::raise_open_files_limit();
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
    let epoll = Epoll::new()?;
    epoll.add(signals.as_raw_fd(), TOKEN_SIGNALS, EV_READ)?;
    let api = Server::bind(&state_dir, &epoll, TOKEN_API_LISTEN, TOKEN_API)?;
    let volumes = Volumes::prepare(&state_dir, &plan.volumes)?;
    let metrics = match settings.metrics {
        Some(l) => Some(Server::metrics(
            l,
            &epoll,
            TOKEN_METRICS_LISTEN,
            TOKEN_METRICS,
        )?),
        None => None,
    };
    let envs = plan
        .exec
        .iter()
        .map(|e| container_env(&plan.pod.name, &e.env))
        .collect();
    let mut sup = Supervisor {
        pod: Pod::new(plan.pod.clone()),
        plan,
        clock: RealClock::new(),
        wall_origin: SystemTime::now(),
        info,
        api,
        condition_times: BTreeMap::new(),
        instance_pids: HashMap::new(),
        log_limits: settings.logs,
        volumes,
        mount_ns: HashMap::new(),
        metrics,
        counters: Counters::default(),
        inherited: Inherited {
            mask,
            actions: Vec::new(),
        },
        pids: HashMap::new(),
        groups: HashMap::new(),
        logs: Vec::new(),
        free_logs: Vec::new(),
        tasks: Tasks::default(),
        envs,
        epoll,
        state_dir,
        events,
        signals,
        stopped: false,
        finished: None,
    };
    sup.run()
}

/// Epoll tokens: the kind in the high bits, a slot in the low ones.
const TOKEN_SIGNALS: u64 = 0;
const TOKEN_LOG: u64 = 1 << 32;
const TOKEN_TASK: u64 = 2 << 32;
const TOKEN_API_LISTEN: u64 = 3 << 32;
const TOKEN_API: u64 = 4 << 32;
const TOKEN_METRICS_LISTEN: u64 = 5 << 32;
const TOKEN_METRICS: u64 = 6 << 32;
const SLOT_MASK: u64 = (1 << 32) - 1;

/// Who a child process is.
#[derive(Debug, Clone, Copy)]
enum PidOwner {
    Container(InstanceId),
    /// An exec probe or hook, by task slot.
    Task(usize),
}

struct Supervisor {
    pod: Pod,
    plan: RunPlan,
    clock: RealClock,
    /// Wall-clock time at the clock's origin, for API timestamps.
    wall_origin: SystemTime,
    info: PodInfo,
    api: Server,
    /// Each pod condition's status and when it last changed.
    condition_times: BTreeMap<&'static str, (bool, SystemTime)>,
    /// The pid each container instance ran as (its containerID).
    instance_pids: HashMap<(usize, u32), i32>,
    log_limits: LogLimits,
    volumes: Volumes,
    /// Mount namespaces of running instances that have volumes.
    mount_ns: HashMap<InstanceId, std::fs::File>,
    metrics: Option<Server>,
    counters: Counters,
    inherited: Inherited,
    /// Live container and exec-task processes.
    pids: HashMap<i32, PidOwner>,
    /// Process group of each live instance.
    groups: HashMap<InstanceId, i32>,
    /// Log streams by slot (the epoll token); `None` once finished.
    logs: Vec<Option<LogStream>>,
    free_logs: Vec<usize>,
    tasks: Tasks,
    /// Each container's environment, `NAME=value`, made once.
    envs: Vec<Vec<OsString>>,
    epoll: Epoll,
    state_dir: PathBuf,
    events: EventSink,
    signals: SignalFd,
    stopped: bool,
    finished: Option<Phase>,
}

impl Supervisor {
    fn run(&mut self) -> io::Result<Outcome> {
        self.feed(Input::Admit)?;
        let mut ready = Vec::new();
        while self.finished.is_none() {
            let core = self.pod.next_deadline();
            let deadline = match (core, self.tasks.next_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Wake on a millisecond grid of the clock (not relative to now): deadlines within
            // the same millisecond (hundreds of probes a second) share one wake-up.
            let timeout = deadline.map(|d| coalesce(d) - self.clock.now());
            ready.clear();
            self.epoll.wait(&mut ready, timeout)?;
            // Logs first, so that a container's last lines precede its exit event.
            for &token in ready.iter().filter(|&&t| t & !SLOT_MASK == TOKEN_LOG) {
                let slot = (token & SLOT_MASK) as usize;
                if let Some(log) = self.logs.get_mut(slot).and_then(Option::as_mut) {
                    if !log.drain()? {
                        self.logs[slot] = None;
                        self.free_logs.push(slot);
                    }
                }
            }
            for &token in ready.iter().filter(|&&t| t & !SLOT_MASK == TOKEN_TASK) {
                let slot = (token & SLOT_MASK) as usize;
                let now = self.clock.now();
                if let Some(done) = self.tasks.on_ready(slot, &self.epoll, TOKEN_TASK, now) {
                    self.task_done(done)?;
                }
            }
            if ready.contains(&TOKEN_API_LISTEN) {
                self.api.accept(&self.epoll);
            }
            for &token in ready.iter().filter(|&&t| t & !SLOT_MASK == TOKEN_API) {
                let slot = (token & SLOT_MASK) as usize;
                if let Some(request) = self.api.on_ready(slot, &self.epoll) {
                    self.serve(slot, request)?;
                }
            }
            if let Some(mut m) = self.metrics.take() {
                if ready.contains(&TOKEN_METRICS_LISTEN) {
                    m.accept(&self.epoll);
                }
                for &token in ready.iter().filter(|&&t| t & !SLOT_MASK == TOKEN_METRICS) {
                    let slot = (token & SLOT_MASK) as usize;
                    if m.on_ready(slot, &self.epoll).is_some() {
                        let text = self.metrics_text();
                        m.reply(slot, 200, &text, &self.epoll);
                    }
                }
                self.metrics = Some(m);
            }
            if ready.contains(&TOKEN_SIGNALS) {
                while let Some(sig) = self.signals.read()? {
                    match sig {
                        libc::SIGCHLD => self.reap()?,
                        _ => self.stop_requested()?,
                    }
                }
            }
            let now = self.clock.now();
            for done in self.tasks.expire(now) {
                self.task_done(done)?;
            }
            if core.is_some_and(|d| now >= d) {
                self.feed(Input::Tick)?;
            }
        }
        // Everything has exited: take what is left in the pipes, end what probes still run.
        for mut log in std::mem::take(&mut self.logs).into_iter().flatten() {
            log.finish()?;
        }
        self.reap_tasks();
        self.volumes.clean_up();
        self.api.shut_down(&self.epoll);
        if let Some(m) = &mut self.metrics {
            m.shut_down(&self.epoll);
        }
        Ok(Outcome {
            phase: self.finished.unwrap_or(Phase::Failed),
            stopped: self.stopped,
        })
    }

    /// Kills the exec tasks still running and reaps them, so that nothing outlives the run.
    fn reap_tasks(&mut self) {
        let mut left: Vec<i32> = self.tasks.cancel_all();
        left.retain(|pid| self.pids.contains_key(pid));
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !left.is_empty() && std::time::Instant::now() < give_up {
            match sys::reap_one() {
                Ok(Reaped::Exited { pid, .. }) => left.retain(|&p| p != pid),
                Ok(Reaped::NoneReady) => std::thread::sleep(std::time::Duration::from_millis(1)),
                Ok(Reaped::NoChildren) | Err(_) => break,
            }
        }
    }

    /// Answers an API request.
    fn serve(&mut self, slot: usize, request: Request) -> io::Result<()> {
        match request {
            Request::Status => {
                let body = format!("{}\n", self.status_json());
                self.api.reply(slot, 200, &body, &self.epoll);
            }
            Request::WatchStatus => {
                let line = self.status_json();
                self.api.seen_status(&line);
                self.api
                    .watch(slot, false, &format!("{line}\n"), &self.epoll);
            }
            Request::Events => {
                let body = self.api.recent_events();
                self.api.reply(slot, 200, &body, &self.epoll);
            }
            Request::WatchEvents => {
                let first = self.api.recent_events();
                self.api.watch(slot, true, &first, &self.epoll);
            }
            Request::Stop => {
                self.api
                    .reply(slot, 202, "{\"stopping\":true}\n", &self.epoll);
                if !self.stopped {
                    self.stopped = true;
                    self.feed(Input::Stop)?;
                }
            }
            Request::Metrics => {
                let text = self.metrics_text();
                self.api.reply(slot, 200, &text, &self.epoll);
            }
            Request::RestartPod => {
                if self.stopped || self.pod.phase().is_terminal() {
                    self.api
                        .reply(slot, 409, "the pod is stopping\n", &self.epoll);
                } else {
                    self.api
                        .reply(slot, 202, "{\"restarting\":\"pod\"}\n", &self.epoll);
                    self.counters.pod_restarts += 1;
                    self.feed(Input::RestartPod)?;
                }
            }
            Request::RestartContainer(name) => {
                let found = self.pod.containers().iter().position(|c| c.name == name);
                match found {
                    None => {
                        let names: Vec<&str> = self
                            .pod
                            .containers()
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect();
                        let msg = format!(
                            "no container {name:?} in pod {}; its containers: {}\n",
                            self.info.name,
                            names.join(", ")
                        );
                        self.api.reply(slot, 404, &msg, &self.epoll);
                    }
                    Some(_) if self.stopped || self.pod.phase().is_terminal() => {
                        self.api
                            .reply(slot, 409, "the pod is stopping\n", &self.epoll);
                    }
                    Some(i) if self.plan.pod.containers[i].kind == Kind::Init => {
                        let msg = format!(
                            "{name} is an init container: it runs once per pod start; restart the whole pod (podvisor restart) to run it again\n"
                        );
                        self.api.reply(slot, 409, &msg, &self.epoll);
                    }
                    Some(i) => {
                        let body = format!("{}\n", serde_json::json!({"restarting": name}));
                        self.api.reply(slot, 202, &body, &self.epoll);
                        self.feed(Input::RestartContainer(i))?;
                    }
                }
            }
        }
        Ok(())
    }

    fn metrics_text(&self) -> String {
        let samples: Vec<ContainerSample<'_>> = self
            .pod
            .containers()
            .iter()
            .enumerate()
            .map(|(i, c)| ContainerSample {
                name: &c.name,
                restarts: c.restart_count,
                pgid: self
                    .groups
                    .get(&InstanceId {
                        container: i,
                        instance: c.instance,
                    })
                    .copied(),
            })
            .collect();
        render(
            &self.info.name,
            &self.info.namespace,
            &self.counters,
            &samples,
        )
    }

    /// The pod as a v1 Pod object, on one line.
    fn status_json(&self) -> String {
        let origin = self.wall_origin;
        let wall = move |t: Instant| origin + t.since_origin();
        let times: BTreeMap<&'static str, SystemTime> = self
            .condition_times
            .iter()
            .map(|(k, (_, t))| (*k, *t))
            .collect();
        let pids = &self.instance_pids;
        let id = |i: usize, n: u32| pids.get(&(i, n)).map(|p| format!("podvisor://{p}"));
        pod_json(&self.pod, &self.info, &wall, &times, &id).to_string()
    }

    /// After a step with events: condition transition times, and the status watchers.
    fn after_changes(&mut self) {
        let now = SystemTime::now();
        for c in self.pod.conditions() {
            let entry = self
                .condition_times
                .entry(c.kind)
                .or_insert((c.status, now));
            if entry.0 != c.status {
                *entry = (c.status, now);
            }
        }
        if self.api.status_watched() {
            let line = self.status_json();
            self.api.status(line, &self.epoll);
        }
    }

    fn task_done(&mut self, (owner, outcome, took): Done) -> io::Result<()> {
        if let (Owner::Probe(id, kind), Some(_)) = (owner, &self.metrics) {
            let name = &self.plan.pod.containers[id.container].name;
            self.counters.probe(name, kind, &outcome, took);
        }
        let input = match owner {
            Owner::Probe(id, kind) => Input::Probed(id, kind, outcome),
            Owner::Hook(id, hook) => Input::HookDone(id, hook, hook_result(outcome)),
        };
        self.feed(input)
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
                    let id = match self.pids.remove(&pid) {
                        None => continue, // an adopted orphan, or a timed-out exec task
                        Some(PidOwner::Task(slot)) => {
                            let now = self.clock.now();
                            if let Some(done) = self.tasks.on_exit(slot, pid, exit, now) {
                                self.task_done(done)?;
                            }
                            continue;
                        }
                        Some(PidOwner::Container(id)) => id,
                    };
                    // Its probes and hooks end with it, as they would in its container.
                    self.tasks.cancel_instance(id);
                    self.mount_ns.remove(&id);
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
        let mut changed = false;
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
                        let line = self.events.emit(SystemTime::now(), &event, restarts);
                        self.api.event(line, &self.epoll);
                        changed = true;
                    }
                    Effect::WipeVolumes => self.volumes.wipe()?,
                    Effect::Finished(phase) => self.finished = Some(phase),
                    Effect::RunProbe(id, kind, due) => {
                        self.counters.probe_start(self.clock.now() - due);
                        let plan = &self.plan.exec[id.container];
                        let timeout = self.plan.pod.containers[id.container]
                            .probes
                            .get(kind)
                            .map(|p| p.timing.timeout);
                        if let Some(handler) = plan.probe(kind) {
                            let owner = Owner::Probe(id, kind);
                            if let Some(input) = self.start_task(owner, handler.clone(), timeout) {
                                queue.push_back(input);
                            }
                        }
                    }
                    Effect::RunHook(id, hook) => {
                        let plan = &self.plan.exec[id.container];
                        let handler = match hook {
                            Hook::PostStart => plan.post_start.clone(),
                            Hook::PreStop => plan.pre_stop.clone(),
                        };
                        match handler {
                            Some(handler) => {
                                let owner = Owner::Hook(id, hook);
                                if let Some(input) = self.start_task(owner, handler, None) {
                                    queue.push_back(input);
                                }
                            }
                            None => queue.push_back(Input::HookDone(id, hook, Ok(()))),
                        }
                    }
                }
            }
        }
        if changed {
            self.after_changes();
        }
        Ok(())
    }

    /// Starts a probe attempt or hook; the input to feed when it ended at once.
    fn start_task(
        &mut self,
        owner: Owner,
        handler: podvisor_core::spec::plan::Handler,
        timeout: Option<std::time::Duration>,
    ) -> Option<Input> {
        let i = owner.instance().container;
        let ctx = ExecContext {
            env: &self.envs[i],
            working_dir: self.plan.exec[i].working_dir.as_ref().map(PathBuf::from),
            inherited: &self.inherited,
            mounts: self.mount_ns.get(&owner.instance()).map(|f| f.as_raw_fd()),
        };
        let now = self.clock.now();
        match self
            .tasks
            .start(owner, &handler, timeout, now, &ctx, &self.epoll, TOKEN_TASK)
        {
            Ok(Some((pid, slot))) => {
                self.pids.insert(pid, PidOwner::Task(slot));
                None
            }
            Ok(None) => None,
            Err((owner, outcome, took)) => Some(match owner {
                Owner::Probe(id, kind) => {
                    if self.metrics.is_some() {
                        let name = &self.plan.pod.containers[id.container].name;
                        self.counters.probe(name, kind, &outcome, took);
                    }
                    Input::Probed(id, kind, outcome)
                }
                Owner::Hook(id, hook) => Input::HookDone(id, hook, hook_result(outcome)),
            }),
        }
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
        let mounts = match self.volumes.mounts_for(exec) {
            Ok(m) => m,
            Err(why) => return Ok(Input::StartFailed(id, why)),
        };
        let io = ContainerIo {
            stdout: out_write.as_raw_fd(),
            stderr: err_write.as_raw_fd(),
            working_dir: exec.working_dir.as_ref().map(PathBuf::from),
            env: self.envs[id.container].clone(),
            join_mounts: None,
            mounts,
        };
        let has_mounts = !io.mounts.is_empty();
        let argv: Vec<OsString> = exec.argv.iter().map(OsString::from).collect();
        let result = sys::spawn(&argv, ChildSetup::Container(io), &self.inherited);
        // Our copies of the write ends must go, or the pipes never reach end-of-file.
        drop((out_write, err_write));
        match result {
            Ok(pid) => {
                let file = LogFile::create(log_path, self.log_limits)?;
                let out = LogStream::new(out_read, "stdout", file.clone());
                self.add_log(out)?;
                self.add_log(LogStream::new(err_read, "stderr", file))?;
                self.pids.insert(pid, PidOwner::Container(id));
                if has_mounts {
                    // Its probes and hooks run in its mount namespace, as `exec` in a container.
                    if let Ok(ns) = std::fs::File::open(format!("/proc/{pid}/ns/mnt")) {
                        self.mount_ns.insert(id, ns);
                    }
                }
                self.instance_pids.insert((id.container, id.instance), pid);
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

impl Supervisor {
    fn add_log(&mut self, log: LogStream) -> io::Result<()> {
        let slot = match self.free_logs.pop() {
            Some(s) => s,
            None => {
                self.logs.push(None);
                self.logs.len() - 1
            }
        };
        self.epoll.add(log.fd(), TOKEN_LOG | slot as u64, EV_READ)?;
        self.logs[slot] = Some(log);
        Ok(())
    }
}

/// Wake-ups are grouped on this grid.
const WAKE_GRID_MS: u128 = 1;

/// `d` rounded up to the wake-up grid.
fn coalesce(d: Instant) -> Instant {
    let ms = d.since_origin().as_micros().div_ceil(1000 * WAKE_GRID_MS) * WAKE_GRID_MS;
    Instant::from_millis(ms as u64)
}

/// A hook's result from its handler's outcome: the output of a failure says why.
fn hook_result(outcome: ProbeOutcome) -> Result<(), String> {
    match outcome {
        ProbeOutcome::Success | ProbeOutcome::Warning(_) => Ok(()),
        ProbeOutcome::Failure(why) | ProbeOutcome::Error(why) => Err(why),
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
