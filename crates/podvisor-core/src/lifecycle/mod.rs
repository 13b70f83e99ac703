//! The pod and container state machines of `podvisor run`: inputs in, effects out.
//!
//! `Pod::step(now, input)` records what happened and then reconciles, as the kubelet's SyncPod
//! does: it compares what runs with what should run and returns the effects (spawn, signal,
//! events) for the shell to carry out. Nothing here spawns, signals or reads a clock; the shell
//! feeds back `Started`, `Exited` and timer `Tick`s, and asks `next_deadline` when to tick.
//!
//! Covered: init containers one at a time in order; sidecars (init containers with
//! `restartPolicy: Always`) started in order, always restarted, stopped after the main
//! containers; main containers; restart policies and exit-code rules; CrashLoopBackOff;
//! graceful termination (SIGTERM, grace, SIGKILL); container states with the kubelet's reasons,
//! `lastState`, `restartCount`; pod phase and conditions; startup, liveness and readiness
//! probes (one `probe::Worker` per probe of the running instance; the shell runs the attempts);
//! postStart and preStop hooks; readiness as `ready`, conditions and Ready/NotReady events.
//!
//! Rules are those of pkg/kubelet (see ../shared/KUBELET.md §3–§4), each cited where applied.

mod state;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::backoff::{Backoff, BackoffPolicy, Decision};
use crate::clock::Instant;
use crate::probe::{Outcome, ProbeKind, ProbeResult, ProbeTiming, Worker};
use crate::restart::{should_restart, ContainerRestart, RestartPolicy};

pub use state::{ContainerState, Phase, TerminatedReason, WaitingReason};

/// Grace between SIGTERM and SIGKILL never goes below this (`minimumGracePeriodInSeconds`).
pub const MIN_GRACE: Duration = Duration::from_secs(2);

/// What kind of container, which decides its place in the start and stop order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular init container: runs to completion, one at a time, before anything after it.
    Init,
    /// An init container with `restartPolicy: Always`.
    Sidecar,
    Main,
}

/// One probe of a container: its timing and the probe-level `terminationGracePeriodSeconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbePlan {
    pub timing: ProbeTiming,
    pub grace: Option<Duration>,
}

/// The probes a container has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probes {
    pub startup: Option<ProbePlan>,
    pub liveness: Option<ProbePlan>,
    pub readiness: Option<ProbePlan>,
}

impl Probes {
    pub fn get(&self, kind: ProbeKind) -> Option<&ProbePlan> {
        match kind {
            ProbeKind::Startup => self.startup.as_ref(),
            ProbeKind::Liveness => self.liveness.as_ref(),
            ProbeKind::Readiness => self.readiness.as_ref(),
        }
    }
}

/// A lifecycle hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    PostStart,
    PreStop,
}

/// One container as the state machine needs it (the spec layer builds these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPlan {
    pub name: String,
    pub kind: Kind,
    pub restart: ContainerRestart,
    pub probes: Probes,
    pub post_start: bool,
    pub pre_stop: bool,
}

impl ContainerPlan {
    /// A container with no probes and no hooks; sidecars restart `Always`.
    pub fn new(name: &str, kind: Kind) -> ContainerPlan {
        ContainerPlan {
            name: name.to_string(),
            kind,
            restart: ContainerRestart {
                policy: (kind == Kind::Sidecar).then_some(RestartPolicy::Always),
                rules: Vec::new(),
            },
            probes: Probes::default(),
            post_start: false,
            pre_stop: false,
        }
    }
}

/// The pod as the state machine needs it. Containers: init containers (and sidecars) in spec
/// order, then the main containers in spec order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    pub name: String,
    pub restart_policy: RestartPolicy,
    pub grace: Duration,
    pub containers: Vec<ContainerPlan>,
    pub backoff: BackoffPolicy,
    /// Spreads first probes: a container started less than one probe period after the clock's
    /// origin (podvisor's own start) has its first probe delayed by a pseudo-random fraction of
    /// the period derived from this seed, as the kubelet does right after it starts, so that a
    /// pod of many containers does not probe them all at the same instant. `None`: no jitter.
    pub probe_jitter_seed: Option<u64>,
}

/// Identifies one run of one container: inputs about an older instance are stale and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId {
    pub container: usize,
    pub instance: u32,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    /// 128+N for death by signal N, as Kubernetes reports it.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }
}

/// What the shell tells the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The pod is admitted: begin.
    Admit,
    /// The instance's process runs.
    Started(InstanceId),
    /// The instance's process could not be started (exec failed): `message` says why.
    StartFailed(InstanceId, String),
    Exited(InstanceId, ExitStatus),
    /// A probe attempt asked for by `Effect::RunProbe` ended.
    Probed(InstanceId, ProbeKind, Outcome),
    /// A hook asked for by `Effect::RunHook` ended: `Err` says why it failed.
    HookDone(InstanceId, Hook, Result<(), String>),
    /// A deadline from `next_deadline` has passed.
    Tick,
    /// Stop the pod gracefully (SIGTERM to podvisor, `podvisor stop`).
    Stop,
    /// `podvisor restart CONTAINER`: stop that container gracefully (if it runs) and start it
    /// again at once, whatever its policy; its restartCount grows, its backoff is untouched.
    /// Ignored for a regular init container (only a pod restart runs those again).
    RestartContainer(usize),
    /// `podvisor restart`: stop every container gracefully, then start the pod again from its
    /// init containers (a whole-pod restart, event `PodRestarting`).
    RestartPod,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event as SPEC.md describes them; the shell adds time, restart count and stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventType,
    pub reason: String,
    /// `pod` or the container's name.
    pub object: String,
    pub message: String,
    pub exit_code: Option<i32>,
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Spawn(InstanceId),
    Signal(InstanceId, Signal),
    /// Run one attempt of this probe (bounded by its timeout) and report `Input::Probed`. The
    /// instant is when the attempt was due (the shell may measure how late it starts).
    RunProbe(InstanceId, ProbeKind, Instant),
    /// Run the hook and report `Input::HookDone`.
    RunHook(InstanceId, Hook),
    Event(Event),
    /// The pod reached a terminal phase and nothing runs any more.
    Finished(Phase),
    /// A whole-pod restart has stopped everything: the shell wipes the emptyDir volumes before
    /// the init containers run again.
    WipeVolumes,
}

/// One container's status and bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStatus {
    pub name: String,
    pub state: ContainerState,
    pub last_state: Option<ContainerState>,
    pub restart_count: u32,
    /// The current (or last) instance number; 0 before the first start.
    pub instance: u32,
    /// The API's `ready`: running, started, and its readiness probe (if any) succeeded.
    pub ready: bool,
    /// The API's `started`: running and its startup probe (if any) succeeded.
    pub started: bool,
    /// Whether the current instance's process is alive (spawned and not yet exited).
    live: bool,
    /// A spawn was requested and neither `Started` nor `StartFailed` has come back.
    spawning: bool,
    /// Some instance of this container has been started (in the `started` sense).
    ever_started: bool,
    /// The postStart hook of the current instance is running.
    post_start_running: bool,
    /// When the current instance's process started (postStart may still be running).
    process_started_at: Instant,
    backoff: Backoff,
    /// The probe workers of the running instance.
    probes: Vec<ProbeSlot>,
    /// The current instance is being killed.
    kill: Option<Kill>,
    /// To be started as a first run (pod start, or after a whole-pod restart).
    fresh: bool,
    /// `RestartContainer` asked for a start as soon as it is down.
    restart_now: bool,
}

/// One probe worker and whether an attempt is out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProbeSlot {
    worker: Worker,
    in_flight: bool,
    /// A period came while an attempt was out: run again as soon as it ends (a Go ticker keeps
    /// one tick).
    tick_kept: bool,
}

/// A kill in progress (`killContainer`): preStop, SIGTERM, grace, SIGKILL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kill {
    began: Instant,
    grace: Duration,
    /// Part of a pod stop: sidecars wait for their turn.
    pod_stop: bool,
    pre_stop_running: bool,
    term_at: Option<Instant>,
    kill_sent: bool,
}

impl Kill {
    /// SIGKILL falls due once the grace left when SIGTERM went has passed; whole seconds spent
    /// in preStop and waiting come off the grace, and what is left never goes below 2 s.
    fn kill_at(&self) -> Option<Instant> {
        let term_at = self.term_at?;
        let spent = Duration::from_secs((term_at - self.began).as_secs());
        Some(term_at + self.grace.saturating_sub(spent).max(MIN_GRACE))
    }

    /// When preStop is abandoned and the wait for a sidecar's turn ends.
    fn grace_end(&self) -> Instant {
        self.began + self.grace
    }
}

/// A pod stop in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stopping {
    began: Instant,
    /// `Stop` was requested (as opposed to the pod having finished by itself).
    requested: bool,
    /// A whole-pod restart: once everything is down, start again.
    restart: bool,
}

/// The pod state machine.
#[derive(Debug, Clone)]
pub struct Pod {
    plan: PodPlan,
    containers: Vec<ContainerStatus>,
    phase: Phase,
    admitted: bool,
    stopping: Option<Stopping>,
    finished: bool,
    /// When probes fall due: (time, container, instance, kind), checked against the worker
    /// when popped (entries of replaced instances or rescheduled workers are dropped then).
    probe_due: BinaryHeap<Reverse<(Instant, usize, u32, ProbeKind)>>,
    /// The earliest backoff end or kill step, computed after each full step; `None` inside:
    /// nothing.
    slow_deadline: Option<Option<Instant>>,
}

impl Pod {
    pub fn new(plan: PodPlan) -> Pod {
        let has_init = plan.containers.iter().any(|c| c.kind != Kind::Main);
        let containers = plan
            .containers
            .iter()
            .map(|c| ContainerStatus {
                name: c.name.clone(),
                state: ContainerState::Waiting {
                    // `PodInitializing` for main containers of a pod with init containers.
                    reason: if has_init && c.kind == Kind::Main {
                        WaitingReason::PodInitializing
                    } else {
                        WaitingReason::ContainerCreating
                    },
                    message: None,
                },
                last_state: None,
                restart_count: 0,
                instance: 0,
                ready: false,
                started: false,
                live: false,
                spawning: false,
                ever_started: false,
                post_start_running: false,
                process_started_at: Instant::ZERO,
                backoff: Backoff::default(),
                probes: Vec::new(),
                kill: None,
                fresh: true,
                restart_now: false,
            })
            .collect();
        Pod {
            plan,
            containers,
            phase: Phase::Pending,
            admitted: false,
            stopping: None,
            finished: false,
            probe_due: BinaryHeap::new(),
            slow_deadline: None,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn containers(&self) -> &[ContainerStatus] {
        &self.containers
    }

    pub fn plan(&self) -> &PodPlan {
        &self.plan
    }

    /// Whether every process has exited after a terminal phase or a stop.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The earliest time at which a `Tick` can change something: a backoff ending, a probe
    /// falling due, a preStop to abandon or a SIGKILL falling due.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse(entry)) = self.probe_due.peek() {
            if self.probe_entry_live(entry) {
                break;
            }
            self.probe_due.pop();
        }
        let probe = self.probe_due.peek().map(|Reverse(e)| e.0);
        let slow = match self.slow_deadline {
            Some(d) => d,
            None => {
                let d = self.compute_slow_deadline();
                self.slow_deadline = Some(d);
                d
            }
        };
        match (probe, slow) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a `probe_due` entry still stands for a worker's next run.
    fn probe_entry_live(&self, (at, i, instance, kind): (Instant, usize, u32, ProbeKind)) -> bool {
        let c = &self.containers[i];
        if c.instance != instance || !c.live {
            return false;
        }
        if self.stopping.is_some() && kind != ProbeKind::Readiness {
            return false;
        }
        c.probes
            .iter()
            .any(|s| s.worker.kind == kind && s.worker.next_run() == Some(at))
    }

    fn compute_slow_deadline(&self) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut consider = |t: Instant| at = Some(at.map_or(t, |a| a.min(t)));
        let stopping = self.stopping.is_some();
        for c in &self.containers {
            if let Some(k) = &c.kill {
                if c.live && !k.kill_sent {
                    consider(k.kill_at().unwrap_or_else(|| k.grace_end()));
                }
            }
            if stopping {
                continue;
            }
            let backing_off = matches!(
                c.state,
                ContainerState::Waiting {
                    reason: WaitingReason::CrashLoopBackOff,
                    ..
                }
            );
            if let (true, Some(ContainerState::Terminated { finished_at, .. })) =
                (backing_off, &c.last_state)
            {
                if let Some(until) = c.backoff.retry_at(&self.plan.backoff, *finished_at) {
                    consider(until);
                }
            }
        }
        at
    }

    /// Feeds one input and returns the effects to carry out, in order.
    pub fn step(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut fx = Vec::new();
        if self.finished {
            return fx;
        }
        match input {
            Input::Admit => self.admitted = true,
            Input::Started(id) => {
                let post_start = self.plan.containers[id.container].post_start;
                if let Some(c) = self.current(id) {
                    c.spawning = false;
                    c.live = true;
                    c.process_started_at = now;
                    let name = c.name.clone();
                    fx.push(event(
                        EventType::Normal,
                        "Started",
                        &name,
                        format!("Started container {name}"),
                    ));
                    if post_start {
                        // Not Running until postStart completes.
                        c.post_start_running = true;
                        fx.push(Effect::RunHook(id, Hook::PostStart));
                    } else {
                        self.become_running(id.container);
                    }
                }
            }
            Input::HookDone(id, hook, result) => self.hook_done(now, id, hook, result, &mut fx),
            Input::Probed(id, kind, outcome) => {
                // Most attempts change nothing published: then nothing else needs a look.
                if !self.probed(now, id, kind, outcome, &mut fx) {
                    return fx;
                }
            }
            Input::StartFailed(id, message) => {
                if let Some(c) = self.current(id) {
                    c.spawning = false;
                    // containerd reports a failed start as exit code 128, reason StartError.
                    let name = c.name.clone();
                    c.state = ContainerState::Terminated {
                        exit_code: 128,
                        signal: None,
                        reason: TerminatedReason::StartError,
                        message: Some(message.clone()),
                        started_at: None,
                        finished_at: now,
                    };
                    fx.push(Effect::Event(Event {
                        kind: EventType::Warning,
                        reason: "Failed".into(),
                        object: name.clone(),
                        message: format!("Error: failed to start container {name}: {message}"),
                        exit_code: Some(128),
                    }));
                }
            }
            Input::Exited(id, status) => {
                if let Some(c) = self.current(id) {
                    c.live = false;
                    c.post_start_running = false;
                    c.probes.clear();
                    let started_at = Some(c.process_started_at);
                    let code = status.code();
                    let reason = if code == 0 {
                        TerminatedReason::Completed
                    } else {
                        TerminatedReason::Error
                    };
                    c.state = ContainerState::Terminated {
                        exit_code: code,
                        signal: match status {
                            ExitStatus::Signal(s) => Some(s),
                            ExitStatus::Code(_) => None,
                        },
                        reason,
                        message: None,
                        started_at,
                        finished_at: now,
                    };
                    let name = c.name.clone();
                    fx.push(Effect::Event(Event {
                        kind: if code == 0 {
                            EventType::Normal
                        } else {
                            EventType::Warning
                        },
                        reason: reason.as_str().into(),
                        object: name.clone(),
                        message: format!("Container {name} exited with code {code}"),
                        exit_code: Some(code),
                    }));
                }
            }
            Input::Tick => {
                self.run_due_probes(now, &mut fx);
                let slow_due = matches!(self.slow_deadline, Some(Some(d)) if d <= now)
                    || self.slow_deadline.is_none();
                if !slow_due {
                    return fx;
                }
            }
            Input::Stop => match &mut self.stopping {
                None => self.begin_stop(now, true),
                // A stop during a whole-pod restart ends it there.
                Some(s) => {
                    s.restart = false;
                    s.requested = true;
                }
            },
            Input::RestartContainer(i) => {
                // A regular init container runs once per pod start: restart the pod for that.
                let restartable = self
                    .plan
                    .containers
                    .get(i)
                    .is_some_and(|p| p.kind != Kind::Init);
                if self.stopping.is_none() && restartable {
                    let c = &mut self.containers[i];
                    c.restart_now = true;
                    let message = format!("Stopping container {} to restart it", c.name);
                    let grace = self.plan.grace;
                    self.begin_kill(i, now, grace, message, false, &mut fx);
                }
            }
            Input::RestartPod => {
                if self.stopping.is_none() && !self.phase.is_terminal() {
                    fx.push(event(
                        EventType::Normal,
                        "PodRestarting",
                        "pod",
                        "Restarting the pod: every container stops, emptyDir volumes are wiped, init containers run again".into(),
                    ));
                    self.begin_stop(now, true);
                    if let Some(s) = &mut self.stopping {
                        s.restart = true;
                    }
                }
            }
        }
        self.slow_deadline = None;
        if self.admitted {
            // Readiness flips caused by the input come before what reconciling does about it.
            self.update_started();
            self.update_ready(&mut fx);
            self.reconcile(now, &mut fx);
            self.update_started();
            self.update_ready(&mut fx);
            // Announced once the last readiness flips are out, so that it is the step's last
            // effect (a finished pod takes no more steps).
            if self.finished {
                fx.push(Effect::Finished(self.phase));
            }
        }
        fx
    }

    /// The instance runs (its postStart, if any, completed): its probe workers begin.
    fn become_running(&mut self, i: usize) {
        let probes = self.plan.containers[i].probes;
        let gated = probes.startup.is_some();
        let seed = self.plan.probe_jitter_seed;
        let c = &mut self.containers[i];
        let started_at = c.process_started_at;
        let instance = c.instance;
        c.state = ContainerState::Running { started_at };
        c.probes = [
            ProbeKind::Startup,
            ProbeKind::Liveness,
            ProbeKind::Readiness,
        ]
        .into_iter()
        .filter_map(|kind| {
            let p = probes.get(kind)?;
            let mut worker = Worker::new(kind, p.timing, started_at, gated);
            if let Some(seed) = seed {
                if started_at.since_origin() < p.timing.period {
                    worker.delay_first(jitter(seed, i, kind, p.timing.period));
                }
            }
            Some(ProbeSlot {
                worker,
                in_flight: false,
                tick_kept: false,
            })
        })
        .collect();
        for s in &c.probes {
            if let Some(at) = s.worker.next_run() {
                self.probe_due
                    .push(Reverse((at, i, instance, s.worker.kind)));
            }
        }
    }

    fn hook_done(
        &mut self,
        now: Instant,
        id: InstanceId,
        hook: Hook,
        result: Result<(), String>,
        fx: &mut Vec<Effect>,
    ) {
        let grace = self.plan.grace;
        let Some(c) = self.current(id) else {
            return;
        };
        let name = c.name.clone();
        match hook {
            Hook::PostStart => {
                if !(c.live && c.post_start_running) {
                    return;
                }
                c.post_start_running = false;
                match result {
                    Ok(()) => self.become_running(id.container),
                    Err(message) => {
                        // The hook's output stays out of the event (it may hold secrets).
                        fx.push(event(
                            EventType::Warning,
                            "FailedPostStartHook",
                            &name,
                            "PostStartHook failed".into(),
                        ));
                        c.state = ContainerState::Waiting {
                            reason: WaitingReason::PostStartHookError,
                            message: Some(message),
                        };
                        self.begin_kill(
                            id.container,
                            now,
                            grace,
                            "FailedPostStartHook".into(),
                            false,
                            fx,
                        );
                    }
                }
            }
            Hook::PreStop => {
                let Some(k) = c.kill.as_mut().filter(|k| k.pre_stop_running) else {
                    return;
                };
                k.pre_stop_running = false;
                if result.is_err() {
                    fx.push(event(
                        EventType::Warning,
                        "FailedPreStopHook",
                        &name,
                        "PreStopHook failed".into(),
                    ));
                }
            }
        }
    }

    /// Records an attempt; `true` when a published result changed (a full step must follow).
    fn probed(
        &mut self,
        now: Instant,
        id: InstanceId,
        kind: ProbeKind,
        outcome: Outcome,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let stopping = self.stopping.is_some();
        let plan = &self.plan.containers[id.container];
        let probe_grace = plan.probes.get(kind).and_then(|p| p.grace);
        let restartable = should_restart(self.plan.restart_policy, &plan.restart, 1, false);
        let pod_grace = self.plan.grace;
        let Some(c) = self
            .containers
            .get_mut(id.container)
            .filter(|c| c.instance == id.instance)
        else {
            return false;
        };
        let Some(slot) = c.probes.iter_mut().find(|s| s.worker.kind == kind) else {
            return false;
        };
        slot.in_flight = false;
        // On pod termination liveness and startup end (a terminating container is never
        // probe-killed); readiness goes on.
        if (stopping && kind != ProbeKind::Readiness) || slot.worker.next_run().is_none() {
            return false;
        }
        let name = &c.name;
        let what = kind.as_str();
        match &outcome {
            Outcome::Success => {}
            Outcome::Failure(out) => fx.push(event(
                EventType::Warning,
                "Unhealthy",
                name,
                format!("{what} probe failed: {out}"),
            )),
            Outcome::Warning(out) => fx.push(event(
                EventType::Warning,
                "ProbeWarning",
                name,
                format!("{what} probe warning: {out}"),
            )),
            Outcome::Error(err) => fx.push(event(
                EventType::Warning,
                "Unhealthy",
                name,
                format!("{what} probe errored: {err}"),
            )),
        }
        let published = slot.worker.report(outcome);
        if std::mem::take(&mut slot.tick_kept) && slot.worker.next_run().is_some() {
            slot.in_flight = true;
            fx.push(Effect::RunProbe(id, kind, now));
        }
        let Some(published) = published else {
            return false;
        };
        let name = name.clone();
        match (kind, published.result) {
            (ProbeKind::Startup, ProbeResult::Success) => {
                for s in &mut c.probes {
                    s.worker.startup_succeeded(now);
                    if let Some(at) = s.worker.next_run() {
                        self.probe_due.push(Reverse((
                            at,
                            id.container,
                            id.instance,
                            s.worker.kind,
                        )));
                    }
                }
            }
            (ProbeKind::Startup | ProbeKind::Liveness, ProbeResult::Failure) => {
                let mut message = format!("Container {name} failed {} probe", what.to_lowercase());
                if restartable {
                    message.push_str(", will be restarted");
                }
                let grace = probe_grace.unwrap_or(pod_grace);
                self.begin_kill(id.container, now, grace, message, false, fx);
            }
            _ => {}
        }
        true
    }

    /// Asks for the probe attempts that are due.
    fn run_due_probes(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        while let Some(&Reverse(entry)) = self.probe_due.peek() {
            if entry.0 > now {
                break;
            }
            self.probe_due.pop();
            if !self.probe_entry_live(entry) {
                continue;
            }
            let (due, i, instance, kind) = entry;
            let c = &mut self.containers[i];
            let Some(slot) = c.probes.iter_mut().find(|s| s.worker.kind == kind) else {
                continue;
            };
            if !slot.worker.due(now) {
                continue;
            }
            if let Some(next) = slot.worker.next_run() {
                self.probe_due.push(Reverse((next, i, instance, kind)));
            }
            if slot.in_flight {
                slot.tick_kept = true;
            } else {
                slot.in_flight = true;
                fx.push(Effect::RunProbe(
                    InstanceId {
                        container: i,
                        instance,
                    },
                    kind,
                    due,
                ));
            }
        }
    }

    /// `started`: running, and the startup probe (if any) succeeded.
    fn update_started(&mut self) {
        for c in &mut self.containers {
            c.started = matches!(c.state, ContainerState::Running { .. })
                && c.probes
                    .iter()
                    .filter(|s| s.worker.kind == ProbeKind::Startup)
                    .all(|s| s.worker.result() == ProbeResult::Success);
            c.ever_started |= c.started;
        }
    }

    /// `ready`, with a `Ready` / `NotReady` event when it flips.
    fn update_ready(&mut self, fx: &mut Vec<Effect>) {
        for i in 0..self.containers.len() {
            if self.plan.containers[i].kind == Kind::Init {
                continue;
            }
            let c = &self.containers[i];
            let ready = c.started
                && c.probes
                    .iter()
                    .filter(|s| s.worker.kind == ProbeKind::Readiness)
                    .all(|s| s.worker.result() == ProbeResult::Success);
            if ready != c.ready {
                let name = c.name.clone();
                self.containers[i].ready = ready;
                fx.push(if ready {
                    event(
                        EventType::Normal,
                        "Ready",
                        &name,
                        format!("Container {name} is ready"),
                    )
                } else {
                    event(
                        EventType::Normal,
                        "NotReady",
                        &name,
                        format!("Container {name} is not ready"),
                    )
                });
            }
        }
    }

    /// The container's status if `id` is its current instance.
    fn current(&mut self, id: InstanceId) -> Option<&mut ContainerStatus> {
        self.containers
            .get_mut(id.container)
            .filter(|c| c.instance == id.instance)
    }

    fn begin_stop(&mut self, now: Instant, requested: bool) {
        self.stopping = Some(Stopping {
            began: now,
            requested,
            restart: false,
        });
        // A container waiting to restart will not: its last exit becomes its state again.
        for c in &mut self.containers {
            if matches!(c.state, ContainerState::Waiting { .. }) && !c.live {
                if let Some(last) = c.last_state.take() {
                    c.state = last;
                }
            }
        }
    }

    /// Starts killing container `i` (`killContainer`): a `Killing` event, then preStop (if the
    /// container has one and there is grace), then SIGTERM and SIGKILL as `drive_kills` times.
    fn begin_kill(
        &mut self,
        i: usize,
        began: Instant,
        grace: Duration,
        message: String,
        pod_stop: bool,
        fx: &mut Vec<Effect>,
    ) {
        let pre_stop = self.plan.containers[i].pre_stop && grace > Duration::ZERO;
        let c = &mut self.containers[i];
        if !c.live || c.kill.is_some() {
            return;
        }
        c.kill = Some(Kill {
            began,
            grace,
            pod_stop,
            pre_stop_running: pre_stop,
            term_at: None,
            kill_sent: false,
        });
        let name = c.name.clone();
        fx.push(event(EventType::Normal, "Killing", &name, message));
        if pre_stop {
            let id = InstanceId {
                container: i,
                instance: c.instance,
            };
            fx.push(Effect::RunHook(id, Hook::PreStop));
        }
    }

    /// Sends SIGTERM to each container being killed once its preStop is over (or abandoned at
    /// the end of the grace) and, in a pod stop, its turn has come; SIGKILL when due (§4.2).
    fn drive_kills(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        // Sidecars wait for every main container and the sidecars after them to be gone.
        let mains_running = self
            .containers
            .iter()
            .zip(&self.plan.containers)
            .any(|(c, p)| p.kind != Kind::Sidecar && (c.live || c.spawning));
        for i in 0..self.containers.len() {
            let c = &self.containers[i];
            let Some(k) = c.kill else {
                continue;
            };
            if !c.live || k.kill_sent {
                continue;
            }
            let id = InstanceId {
                container: i,
                instance: c.instance,
            };
            if let Some(kill_at) = k.kill_at() {
                if now >= kill_at {
                    self.containers[i].kill = Some(Kill {
                        kill_sent: true,
                        ..k
                    });
                    fx.push(Effect::Signal(id, Signal::Kill));
                }
                continue;
            }
            let expired = now >= k.grace_end();
            let turn = !k.pod_stop
                || self.plan.containers[i].kind != Kind::Sidecar
                || expired
                || (!mains_running
                    && (i + 1..self.containers.len()).all(|j| {
                        self.plan.containers[j].kind != Kind::Sidecar || !self.containers[j].live
                    }));
            if (!k.pre_stop_running || expired) && turn {
                self.containers[i].kill = Some(Kill {
                    term_at: Some(now),
                    pre_stop_running: false,
                    ..k
                });
                fx.push(Effect::Signal(id, Signal::Term));
            }
        }
    }

    fn reconcile(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        self.drive_kills(now, fx);
        if self.stopping.is_some() {
            self.reconcile_stop(now, fx);
            return;
        }
        // Restarts asked for by `podvisor restart CONTAINER`, once the container is down.
        for i in 0..self.containers.len() {
            let c = &mut self.containers[i];
            if c.restart_now && !c.live && !c.spawning {
                c.restart_now = false;
                if let ContainerState::Terminated { .. } = c.state {
                    c.last_state = Some(c.state.clone());
                }
                c.restart_count += 1;
                self.spawn(i, fx);
            }
        }
        // Init containers and sidecars, in order: each regular init container must complete,
        // each sidecar must be running, before the next one starts (KUBELET.md §3.6, §4.3).
        let mut init_done = true;
        for i in 0..self.containers.len() {
            match self.plan.containers[i].kind {
                Kind::Main => continue,
                Kind::Init => {
                    let c = &self.containers[i];
                    match c.state {
                        ContainerState::Terminated { exit_code: 0, .. } => continue,
                        ContainerState::Terminated { .. } => {
                            if self.plan.restart_policy == RestartPolicy::Never {
                                // A failed init container fails the pod under Never.
                                self.phase = Phase::Failed;
                                self.begin_stop(now, false);
                                self.reconcile_stop(now, fx);
                                return;
                            }
                            self.try_restart(i, now, fx);
                        }
                        ContainerState::Waiting { .. } if !c.spawning && c.fresh => {
                            self.spawn(i, fx)
                        }
                        ContainerState::Waiting {
                            reason: WaitingReason::CrashLoopBackOff,
                            ..
                        } => self.try_restart(i, now, fx),
                        _ => {}
                    }
                    init_done = false;
                    break;
                }
                Kind::Sidecar => {
                    let c = &self.containers[i];
                    match c.state {
                        // Running is not enough: it must have *started* (startup probe).
                        ContainerState::Running { .. } => {}
                        ContainerState::Terminated { .. } => self.try_restart(i, now, fx),
                        ContainerState::Waiting {
                            reason: WaitingReason::CrashLoopBackOff,
                            ..
                        } => self.try_restart(i, now, fx),
                        ContainerState::Waiting { .. } if !c.spawning && c.fresh => {
                            self.spawn(i, fx)
                        }
                        _ => {}
                    }
                    // A sidecar that is not running holds back what follows it only until it
                    // has first started; later it restarts on its own.
                    if !self.containers[i].ever_started() {
                        init_done = false;
                        break;
                    }
                }
            }
        }
        if init_done {
            for i in 0..self.containers.len() {
                if self.plan.containers[i].kind != Kind::Main {
                    continue;
                }
                let c = &self.containers[i];
                match c.state {
                    ContainerState::Waiting {
                        reason: WaitingReason::CrashLoopBackOff,
                        ..
                    } => self.try_restart(i, now, fx),
                    ContainerState::Waiting { .. } if !c.spawning && c.fresh => self.spawn(i, fx),
                    ContainerState::Terminated { exit_code, .. } => {
                        let restart = should_restart(
                            self.plan.restart_policy,
                            &self.plan.containers[i].restart,
                            exit_code,
                            false,
                        );
                        if restart {
                            self.try_restart(i, now, fx);
                        }
                    }
                    _ => {}
                }
            }
        }
        self.phase = self.compute_phase();
        if matches!(self.phase, Phase::Succeeded | Phase::Failed) {
            // The main containers are done: stop what still runs (sidecars), then finish.
            self.begin_stop(now, false);
            self.reconcile_stop(now, fx);
        }
    }

    /// Restarts container `i` now if its backoff allows, else marks it CrashLoopBackOff.
    fn try_restart(&mut self, i: usize, now: Instant, fx: &mut Vec<Effect>) {
        let policy = self.plan.backoff;
        let pod = &self.plan.name;
        let c = &mut self.containers[i];
        let last = match &c.state {
            ContainerState::Terminated { .. } => c.state.clone(),
            _ => match &c.last_state {
                Some(last) => last.clone(),
                None => return,
            },
        };
        let ContainerState::Terminated { finished_at, .. } = last else {
            return;
        };
        match c.backoff.decide(&policy, finished_at, now) {
            Decision::StartNow => {
                c.backoff.record_restart(&policy, finished_at, now);
                c.last_state = Some(last);
                c.restart_count += 1;
                self.spawn(i, fx);
            }
            Decision::Wait { delay, .. } => {
                let already = matches!(
                    c.state,
                    ContainerState::Waiting {
                        reason: WaitingReason::CrashLoopBackOff,
                        ..
                    }
                );
                if already {
                    // Still waiting, as decided before: nothing changes (and a pod of many
                    // crash-looping containers does not rebuild their messages on every step).
                    return;
                }
                let name = c.name.clone();
                c.last_state = Some(last);
                c.state = ContainerState::Waiting {
                    reason: WaitingReason::CrashLoopBackOff,
                    message: Some(format!(
                        "back-off {} restarting failed container={name} pod={pod}",
                        crate::duration::format_duration(delay)
                    )),
                };
                fx.push(event(
                    EventType::Warning,
                    "BackOff",
                    &name,
                    format!("Back-off restarting failed container {name} in pod {pod}"),
                ));
            }
        }
    }

    fn spawn(&mut self, i: usize, fx: &mut Vec<Effect>) {
        let c = &mut self.containers[i];
        if c.fresh && c.instance > 0 {
            // Started again by a whole-pod restart: restartCount only ever grows.
            c.restart_count += 1;
        }
        c.fresh = false;
        c.instance += 1;
        c.spawning = true;
        c.kill = None;
        c.probes.clear();
        c.state = ContainerState::Waiting {
            reason: WaitingReason::ContainerCreating,
            message: None,
        };
        let name = c.name.clone();
        fx.push(event(
            EventType::Normal,
            "Created",
            &name,
            format!("Created container {name}"),
        ));
        fx.push(Effect::Spawn(InstanceId {
            container: i,
            instance: c.instance,
        }));
    }

    /// Stopping: every running container is killed at once with the pod's grace, counted from
    /// the stop; sidecars get SIGTERM once no main container runs, last sidecar first (§4.2).
    fn reconcile_stop(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        let Some(stopping) = self.stopping else {
            return;
        };
        for i in 0..self.containers.len() {
            if self.containers[i].live && self.containers[i].kill.is_none() {
                let name = &self.containers[i].name;
                let message = format!("Stopping container {name}");
                self.begin_kill(i, stopping.began, self.plan.grace, message, true, fx);
            }
        }
        self.drive_kills(now, fx);
        let anything_left = self.containers.iter().any(|c| c.live || c.spawning);
        if !anything_left && stopping.restart {
            self.stopping = None;
            let has_init = self.plan.containers.iter().any(|c| c.kind != Kind::Main);
            for (c, p) in self.containers.iter_mut().zip(&self.plan.containers) {
                if let ContainerState::Terminated { .. } = c.state {
                    c.last_state = Some(c.state.clone());
                }
                c.state = ContainerState::Waiting {
                    reason: if has_init && p.kind == Kind::Main {
                        WaitingReason::PodInitializing
                    } else {
                        WaitingReason::ContainerCreating
                    },
                    message: None,
                };
                c.fresh = true;
                c.restart_now = false;
            }
            fx.push(Effect::WipeVolumes);
            self.reconcile(now, fx);
            return;
        }
        if !anything_left {
            self.finished = true;
            if stopping.requested && !matches!(self.phase, Phase::Failed | Phase::Succeeded) {
                self.phase = self.compute_phase_after_stop();
            }
        }
    }

    /// §4.6, for the containers as they stand.
    fn compute_phase(&self) -> Phase {
        if self.phase.is_terminal() {
            return self.phase;
        }
        let mut init_pending = false;
        let mut any_main_started = false;
        let (mut running, mut stopped, mut succeeded, mut waiting) = (0, 0, 0, 0);
        for (c, p) in self.containers.iter().zip(&self.plan.containers) {
            match p.kind {
                Kind::Init => {
                    if !matches!(c.state, ContainerState::Terminated { exit_code: 0, .. }) {
                        init_pending = true;
                    }
                }
                Kind::Sidecar => {
                    if !c.ever_started() {
                        init_pending = true;
                    }
                }
                Kind::Main => {
                    if c.instance > 0 && c.ever_started() {
                        any_main_started = true;
                    }
                    match (&c.state, &c.last_state) {
                        (ContainerState::Running { .. }, _) => running += 1,
                        (ContainerState::Terminated { exit_code, .. }, _) => {
                            stopped += 1;
                            if *exit_code == 0 {
                                succeeded += 1;
                            }
                        }
                        (
                            ContainerState::Waiting { .. },
                            Some(ContainerState::Terminated { exit_code, .. }),
                        ) => {
                            stopped += 1;
                            if *exit_code == 0 {
                                succeeded += 1;
                            }
                        }
                        (ContainerState::Waiting { .. }, _) => waiting += 1,
                    }
                }
            }
        }
        let mains = self
            .plan
            .containers
            .iter()
            .filter(|p| p.kind == Kind::Main)
            .count();
        if (init_pending && !any_main_started) || waiting > 0 {
            return Phase::Pending;
        }
        if running > 0 {
            return Phase::Running;
        }
        if stopped == mains {
            // A main container that will still restart keeps the pod Running.
            let restarting = self
                .containers
                .iter()
                .zip(&self.plan.containers)
                .any(|(c, p)| {
                    p.kind == Kind::Main
                        && matches!(
                            c.state,
                            ContainerState::Waiting { .. } | ContainerState::Terminated { .. }
                        )
                        && match c.state {
                            ContainerState::Terminated { exit_code, .. } => should_restart(
                                self.plan.restart_policy,
                                &p.restart,
                                exit_code,
                                false,
                            ),
                            _ => true,
                        }
                });
            if restarting {
                return Phase::Running;
            }
            return if succeeded == mains {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        Phase::Pending
    }

    /// After a requested stop, the pod ends Succeeded if every main container's last exit was
    /// 0, else Failed (as a deleted pod's final phase, §4.6 rule 4).
    fn compute_phase_after_stop(&self) -> Phase {
        let all_zero = self
            .containers
            .iter()
            .zip(&self.plan.containers)
            .filter(|(_, p)| p.kind == Kind::Main)
            .all(|(c, _)| matches!(c.state, ContainerState::Terminated { exit_code: 0, .. }));
        if all_zero {
            Phase::Succeeded
        } else {
            Phase::Failed
        }
    }
}

/// A pod condition (`status.conditions[]`), without its transition time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub kind: &'static str,
    pub status: bool,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Pod {
    /// Whether container `i` is ready: a regular init container once it exited 0, others as
    /// their `ready`.
    pub fn is_ready(&self, i: usize) -> bool {
        let c = &self.containers[i];
        match self.plan.containers[i].kind {
            Kind::Init => matches!(c.state, ContainerState::Terminated { exit_code: 0, .. }),
            _ => c.ready,
        }
    }

    /// PodScheduled, Initialized, ContainersReady and Ready, as pkg/kubelet/status/generate.go
    /// computes them (KUBELET.md §4.3, §4.7).
    pub fn conditions(&self) -> Vec<Condition> {
        let cond = |kind, status, reason: Option<&str>, message: Option<String>| Condition {
            kind,
            status,
            reason: reason.map(String::from),
            message,
        };
        let kinds = || self.plan.containers.iter().map(|p| p.kind);
        let incomplete: Vec<&str> = self
            .containers
            .iter()
            .zip(kinds())
            .filter(|(c, k)| match k {
                Kind::Init => !matches!(c.state, ContainerState::Terminated { exit_code: 0, .. }),
                Kind::Sidecar => !c.ever_started(),
                Kind::Main => false,
            })
            .map(|(c, _)| c.name.as_str())
            .collect();
        // Once a regular container has started, Initialized stays True.
        let main_started = self
            .containers
            .iter()
            .zip(kinds())
            .any(|(c, k)| k == Kind::Main && c.ever_started());
        let initialized = if incomplete.is_empty() || main_started {
            cond("Initialized", true, None, None)
        } else {
            cond(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: [{}]",
                    incomplete.join(" ")
                )),
            )
        };
        let unready: Vec<&str> = (0..self.containers.len())
            .filter(|&i| self.plan.containers[i].kind != Kind::Init && !self.is_ready(i))
            .map(|i| self.containers[i].name.as_str())
            .collect();
        let ready = |kind| match self.phase {
            Phase::Succeeded => cond(kind, false, Some("PodCompleted"), None),
            Phase::Failed => cond(kind, false, Some("PodFailed"), None),
            _ if unready.is_empty() => cond(kind, true, None, None),
            _ => cond(
                kind,
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
            ),
        };
        vec![
            cond("PodScheduled", true, None, None),
            initialized,
            ready("ContainersReady"),
            ready("Ready"),
        ]
    }
}

impl ContainerStatus {
    fn ever_started(&self) -> bool {
        self.ever_started
            || self.restart_count > 0
            || matches!(
                self.state,
                ContainerState::Terminated {
                    started_at: Some(_),
                    ..
                }
            )
    }
}

fn event(kind: EventType, reason: &str, object: &str, message: String) -> Effect {
    Effect::Event(Event {
        kind,
        reason: reason.into(),
        object: object.into(),
        message,
        exit_code: None,
    })
}

/// A pseudo-random fraction of `period` for the first probe of container `i`'s `kind` probe
/// (SplitMix64 of the seed and the probe's identity).
fn jitter(seed: u64, i: usize, kind: ProbeKind, period: Duration) -> Duration {
    let mut z = seed ^ ((i as u64) << 8) ^ (kind as u64);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let fraction = (z >> 11) as f64 / (1u64 << 53) as f64;
    period.mul_f64(fraction)
}
