//! The event loop of `podvisor run`: feeds inputs to the lifecycle core and carries out its
//! effects.
//!
//! One thread, one epoll over a signalfd (SIGCHLD, SIGTERM, SIGINT), the containers' log pipes
//! and the sockets and pipes of probes and hooks in flight, with a timeout at the next deadline
//! (the core's, or a probe's timeout): nothing wakes podvisor while nothing happens. The one
//! reaper (`reap.rs`) runs when a container's pidfd or a SIGCHLD says a child has exited, and
//! routes each exit by pid to its container instance or exec task. Each container is a
//! session (process group) of its own; SIGTERM and SIGKILL go to the whole group, and when a
//! container's main process exits, whatever it left in its group is killed, as a container
//! runtime tears down the container's cgroup. podvisor is a child subreaper, so orphans come
//! back to it and are reaped too.

mod conditions;
mod control;
mod effects;
pub mod events;
mod exec;
mod images;
mod instance;
pub mod keep;
mod logs;
pub mod persist;
mod prepare;
mod reap;
mod resize;
mod rootfs;
mod scrape;
pub use rootfs::RootlessOverlay;
pub mod sandbox;
mod setup;
mod spawn;
mod tasks;
mod termination;
mod volumes;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use slab::Slab;

use podvisor_core::clock::{Clock, Instant};
use podvisor_core::lifecycle::{EventType, Input, InstanceId, Phase, Pod};
use podvisor_core::probe::ProbeKind;
use podvisor_core::spec::plan::RunPlan;

use crate::api::metrics::Counters;
use crate::api::Server;
use crate::cgroup::{PodCgroups, Unenforceable};
use crate::probe::{Done, Tasks};
use crate::process::settle::{self, Settling};
use crate::process::starters::Starters;
use crate::process::sys::{self, Epoll, Exit, Inherited, SignalFd, EV_READ};
use crate::state::logs::{LogLimits, LogStream};
use crate::state::processes::boot_id;
use crate::state::{LockError, StateDir, StateDirInUse, StateError, StateFile};
use crate::status::PodInfo;
use events::EventSink;
use instance::Instances;
use rootfs::{MountGate, RootLayer};
use setup::{isolate, take_process};
use volumes::Volumes;

/// The clock of the shell: monotonic, anchored to the Unix epoch when the run starts, so that
/// the times the saved record holds mean the same to the next run (even after a reboot).
#[derive(Debug)]
pub struct RealClock {
    epoch: std::time::Duration,
    start: std::time::Instant,
}

impl RealClock {
    pub fn new() -> RealClock {
        RealClock {
            epoch: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
            start: std::time::Instant::now(),
        }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        RealClock::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::from_origin(self.epoch + self.start.elapsed())
    }
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub phase: Phase,
    /// Stopped by SIGTERM / SIGINT rather than by finishing.
    pub stopped: bool,
    /// Live restore: the run ended and left the containers to their keepers.
    pub detached: bool,
}

/// How `run` is set up beyond the pod itself.
#[derive(Debug, Default)]
pub struct Settings {
    pub logs: LogLimits,
    /// Serve Prometheus metrics here (`--metrics-addr`).
    pub metrics: Option<std::net::TcpListener>,
    /// `--reset-state`: a saved state that cannot be used is set aside instead of refused.
    pub reset_state: bool,
    /// `--pod-max-pids`: the pod cgroup's pids limit (the kubelet's `podPidsLimit`).
    pub pod_max_pids: Option<u64>,
    /// `--cgroup-driver`.
    pub cgroup_driver: crate::cgroup::Driver,
    /// `--live-restore`: containers start under keepers and outlive the run.
    pub live_restore: bool,
    /// `--seccomp-profile-root`: where `Localhost` seccomp profiles are.
    pub seccomp_profiles: PathBuf,
    /// `--registry-config`: the registries' `hosts.toml` files.
    pub registry_config: PathBuf,
    /// `--rootless-overlay`: what mounts an image's layers without root.
    pub rootless_overlay: rootfs::RootlessOverlay,
}

/// Why a run did not start or ended early.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    InUse(#[from] StateDirInUse),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Unenforceable(#[from] Unenforceable),
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<LockError> for RunError {
    fn from(e: LockError) -> RunError {
        match e {
            LockError::InUse(e) => RunError::InUse(e),
            LockError::Io(e) => RunError::Io(e),
        }
    }
}

impl RunError {
    /// A problem with what the user gave (the state dir), as opposed to a failure of the run.
    pub fn is_usage(&self) -> bool {
        !matches!(self, RunError::Io(_))
    }
}

/// Runs the pod until it finishes or is stopped.
pub fn run(
    mut plan: RunPlan,
    mut info: PodInfo,
    dir: StateDir,
    mut events: EventSink,
    mut settings: Settings,
) -> Result<Outcome, RunError> {
    let (mask, signals) = take_process(&mut plan)?;
    dir.create()?;
    let _lock = dir.lock()?;
    let state = dir.record()?;
    persist::forget_last_word(&dir)?;
    events.keep_in(&dir.events_path())?;
    let mut taken = persist::take_up(&dir, &state, &mut plan, &mut info, settings.reset_state)?;
    if !taken.resumed {
        dir.clear_logs()?;
    }
    // A resumed pod keeps the resources its resizes allocated, and its conditions set from
    // outside (readiness gates').
    let resized = resize::take_up(&dir, &mut info, &mut plan, taken.resumed)?;
    let outside = conditions::take_up(&dir, &mut taken, settings.reset_state)?;
    let epoll = Epoll::new()?;
    epoll.add(signals.as_raw_fd(), TOKEN_SIGNALS, EV_READ)?;
    let api = Server::bind(&dir.socket(), &epoll, TOKEN_API_LISTEN, TOKEN_API)?;
    // After the dead run's leftovers are gone (take_up): its cgroups go too, new ones come.
    let (root_layer, mut cgroups) = isolate(&plan, &dir, &settings, &mut info, &mut taken)?;
    let taken_over = !taken.found.adopted.is_empty();
    let (keeper_exe, keeper) = keep::at_run_start(&dir, &settings, taken_over);
    let prepared = prepare::prepare(
        &plan,
        &dir,
        &mut settings,
        &mut info,
        &taken,
        root_layer.as_ref(),
        &epoll,
    );
    let prepare::Prepared {
        credentials,
        images,
        sandbox,
        volumes,
        metrics,
    } = match prepared {
        Ok(p) => p,
        Err(e) => {
            if let Some(k) = keeper {
                k.dismiss();
            }
            if !taken_over {
                prepare::remove_pod_cgroup(&mut cgroups, &dir);
            }
            return Err(e);
        }
    };
    // After the mount namespace of the pod's tmpfs volumes (`isolate`): a thread keeps the one
    // it was started in.
    let starters = setup::starters(settings.live_restore);
    let base_envs = spawn::container_envs(&plan);
    // Each is made at its instance's start (or adoption), before any probe or hook runs.
    let envs = vec![sys::Environment::default(); base_envs.len()];
    let counters = Counters::new(&info.namespace, &info.name);
    let applied = plan.exec.iter().map(|x| x.resources).collect();
    let containers = plan.exec.len();
    let resizing = resize::Resizing::new(&info.spec, (applied, plan.pod_resources), resized);
    let mut sup = Supervisor {
        pod: taken.pod,
        plan,
        clock: RealClock::new(),
        state,
        boot: boot_id(),
        save_failing: false,
        notes_read: Vec::new(),
        probe_tries: HashMap::new(),
        info,
        api,
        condition_times: BTreeMap::new(),
        status_lines: Default::default(),
        status_sent: None,
        instances: Instances::default(),
        credentials,
        images,
        sandbox,
        log_limits: settings.logs,
        volumes,
        cgroups,
        root_layer,
        cwd: std::env::current_dir().ok(),
        mount_gate: None,
        size_check_at: None,
        metrics,
        counters,
        scraper: None,
        // Containers start with no signal ignored, whatever this run was started with.
        inherited: Inherited {
            mask,
            actions: sys::defaults_for_ignored(),
        },
        pids: HashMap::new(),
        logs: Slab::new(),
        log_scratch: Vec::new(),
        tasks: Tasks::default(),
        base_envs,
        envs,
        epoll,
        dir,
        events,
        signals,
        live_restore: settings.live_restore,
        detached: false,
        keepers: keep::Keepers::default(),
        starters,
        starts_asked: 0,
        keeper_exe,
        pending: Vec::new(),
        settling: Settling::default(),
        stopped: false,
        deleted: false,
        finished: None,
        scan_due: None,
        scan_delay: keep::test_setting(reap::TEST_SCAN_DELAY_ENV)
            .map_or(reap::REAP_SCAN_DELAY, std::time::Duration::from_millis),
        resizing,
        outside,
        log_failing: vec![false; containers],
    };
    if let Some(k) = keeper {
        sup.take_keeper(k)?;
    }
    if let Err(e) = sup.take_up(&taken.notes, &mut taken.found) {
        sup.refused(taken_over);
        return Err(e);
    }
    Ok(sup.run()?)
}

/// Epoll tokens: the kind in the high bits, a slot in the low ones.
const TOKEN_SIGNALS: u64 = 0;
const TOKEN_LOG: u64 = 1 << 32;
const TOKEN_TASK: u64 = 2 << 32;
const TOKEN_API_LISTEN: u64 = 3 << 32;
const TOKEN_API: u64 = 4 << 32;
const TOKEN_METRICS_LISTEN: u64 = 5 << 32;
const TOKEN_METRICS: u64 = 6 << 32;
const TOKEN_KEEPER: u64 = 7 << 32;
const TOKEN_IMAGE: u64 = 8 << 32;
const TOKEN_SCRAPE: u64 = 9 << 32;
/// A container's pidfd (`Instance::exit_watch`), by its pid.
const TOKEN_EXIT: u64 = 10 << 32;
const SLOT_MASK: u64 = (1 << 32) - 1;

/// Who a child process is.
#[derive(Debug, Clone, Copy)]
enum PidOwner {
    Container(InstanceId),
    /// An exec probe or hook, by task slot.
    Task(usize),
    /// This run's keeper (`--live-restore`).
    Keeper,
    /// The PID 1 of the pod's shared PID namespace.
    Pause,
    /// A command of `podvisor exec`, by its client's API slot.
    Exec(usize),
}

struct Supervisor {
    pod: Pod,
    plan: RunPlan,
    clock: RealClock,
    /// The saved record's file, and the boot it is written in.
    state: StateFile,
    boot: String,
    /// The last write of the record failed (reported once until one succeeds).
    save_failing: bool,
    /// Exit notes of keepers that were read into the pod: removed once the record that
    /// counts their exits is saved (or removed), never before, so that a crash between
    /// leaves the note for the next run to read. By instance, not as open files: a disk that
    /// stays full keeps them waiting, and must not cost a descriptor each.
    notes_read: Vec<InstanceId>,
    /// Tries so far of probe attempts that errored (see `task_finished`).
    probe_tries: HashMap<(InstanceId, ProbeKind), u32>,
    info: PodInfo,
    api: Server,
    /// Each pod condition's status and when it last changed.
    condition_times: BTreeMap<&'static str, (bool, SystemTime)>,
    /// What the last status line serialized (`status_json` writes only what changed).
    status_lines: std::cell::RefCell<crate::status::LineCache>,
    /// The status the watchers were sent last (what their next patch is from).
    status_sent: Option<crate::status::LineParts>,
    /// The running container instances.
    instances: Instances,
    /// What each container's processes run as and may do (made when the run began; for a
    /// container of an image, again once its image is there).
    credentials: Vec<sys::Credentials>,
    /// A pod of images: their pulls.
    images: Option<images::Images>,
    /// The pod's namespaces.
    sandbox: sandbox::Sandbox,
    log_limits: LogLimits,
    volumes: Volumes,
    /// The pod's cgroup.
    cgroups: PodCgroups,
    /// Where containers' private roots are built (root only).
    root_layer: Option<RootLayer>,
    /// The directory podvisor was started in: containers without `workingDir` start there.
    cwd: Option<PathBuf>,
    /// The pod waits for its volumes (a hostPath type check failed): when to try again.
    mount_gate: Option<MountGate>,
    /// When emptyDir volumes are next measured against their `sizeLimit`.
    size_check_at: Option<Instant>,
    metrics: Option<Server>,
    counters: Counters,
    /// The thread that makes metrics scrapes' texts, once one came.
    scraper: Option<scrape::Scraper>,
    inherited: Inherited,
    /// Live container and exec-task processes.
    pids: HashMap<i32, PidOwner>,
    /// Log streams by slot (the epoll token).
    logs: Slab<LogStream>,
    /// Where every stream's lines are put together (`LogStream::drain`).
    log_scratch: Vec<u8>,
    tasks: Tasks,
    /// Each container's environment before staged instrumentation, made once.
    base_envs: Vec<Vec<(String, String)>>,
    /// Each container's environment as its current instance has it, `NAME=value` (its probes
    /// and hooks get it too).
    envs: Vec<sys::Environment>,
    epoll: Epoll,
    dir: StateDir,
    events: EventSink,
    signals: SignalFd,
    /// `--live-restore`: new instances start under keepers, a stop signal ends only this run.
    live_restore: bool,
    /// The run ended by a stop signal under live restore: the containers run on.
    detached: bool,
    /// Keepers (`--live-restore`): the one this run started, those taken over, and which
    /// holds each live instance.
    keepers: keep::Keepers,
    /// Without a keeper: the threads that make this run's containers, two at once (none
    /// where they could not be started: the starts are made one after the other).
    starters: Option<Starters>,
    /// How many starts were handed to the starters (each start's number).
    starts_asked: u64,
    /// The keeper binary, opened when the run began (see `keep::keeper_exe`).
    keeper_exe: Option<std::fs::File>,
    /// Events of this turn, sent out once its record is saved (see `announce`).
    pending: Vec<(SystemTime, podvisor_core::lifecycle::Event)>,
    /// Whether the memory the last events' work took was given back (`settle_memory`).
    settling: Settling,
    stopped: bool,
    /// `podvisor stop` asked for the stop: the pod is deleted (its record goes at the end).
    deleted: bool,
    finished: Option<Phase>,
    /// When to look through all children for exits that no SIGCHLD of their own announced
    /// (see `reap`).
    scan_due: Option<Instant>,
    /// How long after a SIGCHLD that scan comes (`reap::REAP_SCAN_DELAY`; tests stretch it).
    scan_delay: std::time::Duration,
    /// In-place resizes: what each container's cgroup has, and the resize conditions.
    resizing: resize::Resizing,
    /// The pod's conditions set from outside (`PATCH /status`).
    outside: conditions::Outside,
    /// Which containers' logs cannot be written now (said once, see `drain_log`).
    log_failing: Vec<bool>,
}

impl Supervisor {
    /// What the last run left, taken into this one before anything starts: its notes, the
    /// containers its keepers hold, and the record written at once (a state dir that cannot
    /// hold it stops the run here).
    fn take_up(
        &mut self,
        notes: &[podvisor_core::lifecycle::Event],
        found: &mut keep::Found,
    ) -> Result<(), RunError> {
        for note in notes {
            let line = self.events.emit(SystemTime::now(), note);
            self.api.event(line);
        }
        self.adopt(found)?;
        self.admit_waiting_resize()?;
        self.save()?;
        // The exits the keepers recorded are in the pod now (and in the record just written).
        for f in &found.stale_files {
            let _ = std::fs::remove_file(f);
        }
        Ok(())
    }

    fn run(&mut self) -> io::Result<Outcome> {
        let outcome = self.turns().and_then(|()| self.end());
        if outcome.is_err() && !self.live_restore {
            // The containers die with the run (each by its parent-death signal), and what they
            // started in their own PID namespaces with them, but not what they started in the
            // host's (hostPID): all of it is killed now, and the pod's cgroups and mount points
            // go. The record stays, and a run started again resumes the pod, as after a crash.
            // Under live restore the keepers hold the containers on for the next run.
            self.release_pod();
        }
        outcome
    }

    /// The loop of the run's turns, until the pod has finished (or the run detached from it).
    fn turns(&mut self) -> io::Result<()> {
        self.try_admit()?;
        let mut ready = Vec::new();
        while self.finished.is_none() {
            // Before sleeping, the record first, then what the last turn announces: nothing
            // a reader has seen (a `Started` event) is missing from the state that a run
            // after a kill -9 takes up.
            self.save_if_changed();
            self.announce();
            let (probe, rest) = self.pod.next_deadlines();
            let core = [probe, rest].into_iter().flatten().min();
            let mount_retry = self.mount_gate.as_ref().map(|g| g.retry_at);
            let deadline = [
                probe.map(|d| coalesce(d, PROBE_GRID_MS)),
                rest,
                self.tasks.next_deadline(),
                self.scan_due,
                mount_retry,
                self.size_check_at,
                self.resizing.retry_at,
                self.clients_expire_at(),
            ]
            .into_iter()
            .flatten()
            .min();
            // Wake on a grid of the clock (not relative to now): deadlines within the same
            // millisecond share one wake-up, and probes falling due within the same few
            // milliseconds (hundreds a second) share one.
            let timeout = deadline.map(|d| coalesce(d, WAKE_GRID_MS) - self.clock.now());
            self.settle_memory(timeout);
            self.api.flush_watchers(&self.epoll);
            ready.clear();
            self.epoll.wait(&mut ready, timeout)?;
            self.ready(&ready)?;
            self.due(core)?;
        }
        Ok(())
    }

    /// What the epoll said is ready, in order: logs first, so that a container's last lines
    /// precede its exit event.
    fn ready(&mut self, ready: &[u64]) -> io::Result<()> {
        let slots = |kind: u64| {
            (ready.iter())
                .filter(move |&&t| t & !SLOT_MASK == kind)
                .map(|&t| (t & SLOT_MASK) as usize)
        };
        for slot in slots(TOKEN_LOG) {
            self.drain_log(slot)?;
        }
        for slot in slots(TOKEN_TASK) {
            let now = self.clock.now();
            if let Some(done) = self.tasks.on_ready(slot, &self.epoll, TOKEN_TASK, now) {
                self.task_done(done)?;
            }
        }
        for slot in slots(TOKEN_KEEPER) {
            self.keeper_readable(slot)?;
        }
        if ready.contains(&TOKEN_IMAGE) {
            for input in self.pulls_done() {
                self.feed(input)?;
            }
        }
        if ready.contains(&TOKEN_API_LISTEN) {
            self.api.accept(&self.epoll);
        }
        for slot in slots(TOKEN_API) {
            if let Some(request) = self.api.on_ready(slot, &self.epoll) {
                self.serve(slot, request)?;
            }
        }
        self.kill_abandoned_execs();
        for message in self.api.take_dropped() {
            self.note(EventType::Warning, "WatcherDropped", message);
        }
        if let Some(m) = self
            .metrics
            .as_mut()
            .filter(|_| ready.contains(&TOKEN_METRICS_LISTEN))
        {
            m.accept(&self.epoll);
        }
        for slot in slots(TOKEN_METRICS) {
            let m = self.metrics.as_mut();
            if m.and_then(|m| m.on_ready(slot, &self.epoll)).is_some() {
                self.scrape(scrape::Via::Metrics, slot);
            }
        }
        if ready.contains(&TOKEN_SCRAPE) {
            self.scrapes_done();
        }
        for pid in slots(TOKEN_EXIT) {
            self.exit_ready(pid as i32)?;
        }
        if ready.contains(&TOKEN_SIGNALS) {
            for (sig, sender) in self.signals.read_all()? {
                match sig {
                    libc::SIGCHLD => self.reap(sender)?,
                    _ => self.stop_requested()?,
                }
            }
        }
        Ok(())
    }

    /// What is due now: the mount retry, the size check, the look for exits, the probes'
    /// timeouts and the core's deadline (`core`).
    fn due(&mut self, core: Option<Instant>) -> io::Result<()> {
        let now = self.clock.now();
        if self.mount_gate.as_ref().is_some_and(|g| now >= g.retry_at) {
            self.try_admit()?;
        }
        if self.size_check_at.is_some_and(|d| now >= d) {
            self.check_sizes()?;
        }
        if self.scan_due.is_some_and(|d| now >= d) {
            self.scan_children()?;
        }
        self.retry_resize()?;
        self.expire_clients();
        for done in self.tasks.expire(now) {
            self.task_done(done)?;
        }
        if core.is_some_and(|d| now >= d) {
            self.feed(Input::Tick)?;
        }
        Ok(())
    }

    /// The run's end, once the pod has finished (or the run detached from it).
    fn end(&mut self) -> io::Result<Outcome> {
        // The last word of a pod that ended by itself: the next run is a new pod.
        self.save_if_changed();
        self.announce();
        // Everything has exited: take what is left in the pipes, end what probes still run.
        for (_, mut log) in std::mem::take(&mut self.logs) {
            log.finish(&mut self.log_scratch)?;
        }
        // This run's keeper starts nothing more: it ends once it holds nothing, and is waited
        // for with the exec tasks when it holds nothing already.
        let idle_keeper = self.keepers.close(&self.instances);
        let pause = self.sandbox.end();
        // Commands of `podvisor exec` end with the pod, as with a container runtime.
        let execs = self.running_execs();
        for &(pid, _) in &execs {
            let _ = sys::send_signal(-pid, libc::SIGKILL);
        }
        let ending = idle_keeper.into_iter().chain(pause);
        self.reap_children(ending.chain(execs.iter().map(|e| e.0)).collect());
        for (pid, slot) in execs {
            self.exec_exited(slot, pid, Exit::Signal(libc::SIGKILL));
        }
        // Under live restore a stop signal leaves the pod to its keepers: its volumes and
        // cgroups stay for the next run.
        if !self.detached {
            self.release_pod();
        }
        if !self.detached {
            self.write_last_word();
        }
        self.api.shut_down(&self.epoll);
        if let Some(m) = &mut self.metrics {
            m.shut_down(&self.epoll);
        }
        Ok(Outcome {
            phase: self.finished.unwrap_or(Phase::Failed),
            stopped: self.stopped,
            detached: self.detached,
        })
    }

    fn task_done(&mut self, done: Done) -> io::Result<()> {
        match self.task_finished(done) {
            Some(input) => self.feed(input),
            None => Ok(()),
        }
    }

    fn stop_requested(&mut self) -> io::Result<()> {
        if self.mount_gate.is_some() {
            // Nothing has started: the run ends here, the pod still Pending.
            self.stopped = true;
            self.finished = Some(self.pod.phase());
            return Ok(());
        }
        if self.live_restore && !self.stopped {
            // Live restore: the supervisor goes, the keepers keep the containers.
            self.detached = true;
            self.finished = Some(self.pod.phase());
            self.stopped = true;
            return Ok(());
        }
        if self.stopped {
            // A second request does not wait for the grace period.
            for (_, instance) in self.instances.iter() {
                let _ = sys::send_signal(-instance.pid, libc::SIGKILL);
            }
            return Ok(());
        }
        self.stopped = true;
        // What happened before the stop is kept; the stop itself is not (see `persist`).
        self.save_if_changed();
        self.feed(Input::Stop)
    }

    /// Kills what is left of the pod's processes and removes its cgroups and the mount
    /// points made for it (a second call finds nothing left to do).
    fn release_pod(&mut self) {
        self.volumes.clean_up();
        for cg in self.instances.take_cgroups() {
            cg.kill_all();
        }
        prepare::remove_pod_cgroup(&mut self.cgroups, &self.dir);
    }

    /// The run is refused as it takes the pod up: the keeper it started (holding nothing)
    /// ends as it hears the run close, and the pod cgroup goes unless it holds containers
    /// taken over.
    fn refused(&mut self, taken_over: bool) {
        if let Some(pid) = self.keepers.close(&self.instances) {
            self.reap_children(vec![pid]);
        }
        if !taken_over {
            prepare::remove_pod_cgroup(&mut self.cgroups, &self.dir);
        }
    }

    /// Sends out the events of this turn (to stderr, the events file and the API's
    /// watchers), with their own times, and the status to its watchers. Called after the
    /// record of the same turn is saved.
    fn announce(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        for (at, event) in std::mem::take(&mut self.pending) {
            let line = self.events.emit(at, &event);
            self.api.event(line);
        }
        self.settling.work();
        self.after_changes();
    }

    /// Once the work that events tell of is over (nothing due for a while), the memory it took
    /// goes back (`process::settle`): what a run took to read and start its pod is not kept
    /// for as long as it holds it.
    fn settle_memory(&mut self, timeout: Option<std::time::Duration>) {
        if self.settling.pending() && timeout.is_none_or(|t| t >= settle::SETTLE) {
            self.settling.idle(std::time::Instant::now(), "run.settle");
        }
    }
}

/// Wake-ups are grouped on this grid.
const WAKE_GRID_MS: u128 = 1;

/// Wake-ups for probes falling due are grouped on this coarser grid: a probe starts at most
/// this late, and the probes of a pod of 1,000 probed containers (2,000 a second, spread
/// over the second as their containers' starts were) share a wake-up, and the answers of
/// those started together another, instead of waking podvisor once or twice each.
const PROBE_GRID_MS: u128 = 4;

/// `d` rounded up to a grid of `grid_ms` milliseconds.
fn coalesce(d: Instant, grid_ms: u128) -> Instant {
    let ms = d.since_origin().as_micros().div_ceil(1000 * grid_ms) * grid_ms;
    Instant::from_millis(ms as u64)
}
