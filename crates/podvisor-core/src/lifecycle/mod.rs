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
//! `lastState`, `restartCount`; pod phase and conditions. Not yet: probes and hooks (so a
//! container is ready as soon as it runs).
//!
//! Rules are those of pkg/kubelet (see ../shared/KUBELET.md §3–§4), each cited where applied.

mod state;
#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::backoff::{Backoff, BackoffPolicy, Decision};
use crate::clock::Instant;
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

/// One container as the state machine needs it (the spec layer builds these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPlan {
    pub name: String,
    pub kind: Kind,
    pub restart: ContainerRestart,
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
    /// A deadline from `next_deadline` has passed.
    Tick,
    /// Stop the pod gracefully (SIGTERM to podvisor, `podvisor stop`).
    Stop,
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
    Event(Event),
    /// The pod reached a terminal phase and nothing runs any more.
    Finished(Phase),
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
    /// Whether the current instance's process is alive (spawned and not yet exited).
    live: bool,
    /// A spawn was requested and neither `Started` nor `StartFailed` has come back.
    spawning: bool,
    backoff: Backoff,
    /// When SIGTERM went to the current instance, if it did.
    term_sent: bool,
    kill_sent: bool,
}

/// A stop in progress: when SIGKILL is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stopping {
    kill_at: Instant,
    /// `Stop` was requested (as opposed to the pod having finished by itself).
    requested: bool,
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
                live: false,
                spawning: false,
                backoff: Backoff::default(),
                term_sent: false,
                kill_sent: false,
            })
            .collect();
        Pod {
            plan,
            containers,
            phase: Phase::Pending,
            admitted: false,
            stopping: None,
            finished: false,
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

    /// The earliest time at which a `Tick` can change something: a backoff ending or a SIGKILL
    /// falling due.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut consider = |t: Instant| at = Some(at.map_or(t, |a| a.min(t)));
        if let Some(s) = self.stopping {
            if self.containers.iter().any(|c| c.live && !c.kill_sent) {
                consider(s.kill_at);
            }
            // Sidecars waiting for their turn get SIGTERM once the mains are gone, which an
            // `Exited` input triggers; nothing to time.
        } else {
            for c in &self.containers {
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
                if let Some(c) = self.current(id) {
                    c.spawning = false;
                    c.live = true;
                    c.state = ContainerState::Running { started_at: now };
                    let name = c.name.clone();
                    fx.push(event(
                        EventType::Normal,
                        "Started",
                        &name,
                        format!("Started container {name}"),
                    ));
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
                    let started_at = match c.state {
                        ContainerState::Running { started_at } => Some(started_at),
                        _ => None,
                    };
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
            Input::Tick => {}
            Input::Stop => {
                if self.stopping.is_none() {
                    self.begin_stop(now, true);
                }
            }
        }
        if self.admitted {
            self.reconcile(now, &mut fx);
        }
        fx
    }

    /// The container's status if `id` is its current instance.
    fn current(&mut self, id: InstanceId) -> Option<&mut ContainerStatus> {
        self.containers
            .get_mut(id.container)
            .filter(|c| c.instance == id.instance)
    }

    fn begin_stop(&mut self, now: Instant, requested: bool) {
        self.stopping = Some(Stopping {
            kill_at: now + self.plan.grace.max(MIN_GRACE),
            requested,
        });
        // A container waiting to restart will not: its last exit becomes its state again.
        for c in &mut self.containers {
            if matches!(c.state, ContainerState::Waiting { .. }) {
                if let Some(last) = c.last_state.take() {
                    c.state = last;
                }
            }
        }
    }

    fn reconcile(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if self.stopping.is_some() {
            self.reconcile_stop(now, fx);
            return;
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
                        ContainerState::Waiting { .. }
                            if !c.spawning && c.last_state.is_none() && c.instance == 0 =>
                        {
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
                        ContainerState::Running { .. } => continue,
                        ContainerState::Terminated { .. } => self.try_restart(i, now, fx),
                        ContainerState::Waiting {
                            reason: WaitingReason::CrashLoopBackOff,
                            ..
                        } => self.try_restart(i, now, fx),
                        ContainerState::Waiting { .. } if !c.spawning && c.instance == 0 => {
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
                    ContainerState::Waiting { .. } if !c.spawning && c.instance == 0 => {
                        self.spawn(i, fx)
                    }
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
        let pod = self.plan.name.clone();
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
                let name = c.name.clone();
                c.last_state = Some(last);
                c.state = ContainerState::Waiting {
                    reason: WaitingReason::CrashLoopBackOff,
                    message: Some(format!(
                        "back-off {} restarting failed container={name} pod={pod}",
                        crate::duration::format_duration(delay)
                    )),
                };
                if !already {
                    fx.push(event(
                        EventType::Warning,
                        "BackOff",
                        &name,
                        format!("Back-off restarting failed container {name} in pod {pod}"),
                    ));
                }
            }
        }
    }

    fn spawn(&mut self, i: usize, fx: &mut Vec<Effect>) {
        let c = &mut self.containers[i];
        c.instance += 1;
        c.spawning = true;
        c.term_sent = false;
        c.kill_sent = false;
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

    /// Stopping: SIGTERM to every running main and init container at once; sidecars once no
    /// main container runs, last sidecar first; SIGKILL to all at the deadline (§4.2).
    fn reconcile_stop(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        let Some(stopping) = self.stopping else {
            return;
        };
        let kill = now >= stopping.kill_at;
        let mains_running = self
            .containers
            .iter()
            .zip(&self.plan.containers)
            .any(|(c, p)| p.kind != Kind::Sidecar && (c.live || c.spawning));
        // Sidecars in reverse order: each waits for the ones after it.
        let sidecars: Vec<usize> = (0..self.containers.len())
            .filter(|&i| self.plan.containers[i].kind == Kind::Sidecar)
            .collect();
        for i in 0..self.containers.len() {
            let kind = self.plan.containers[i].kind;
            let c = &self.containers[i];
            if !c.live {
                continue;
            }
            let id = InstanceId {
                container: i,
                instance: c.instance,
            };
            let turn = match kind {
                Kind::Sidecar => {
                    !mains_running
                        && sidecars
                            .iter()
                            .filter(|&&j| j > i)
                            .all(|&j| !self.containers[j].live)
                }
                _ => true,
            };
            let name = c.name.clone();
            if kill && !c.kill_sent {
                self.containers[i].kill_sent = true;
                fx.push(Effect::Signal(id, Signal::Kill));
            } else if turn && !c.term_sent && !c.kill_sent {
                self.containers[i].term_sent = true;
                fx.push(event(
                    EventType::Normal,
                    "Killing",
                    &name,
                    format!("Stopping container {name}"),
                ));
                fx.push(Effect::Signal(id, Signal::Term));
            }
        }
        let anything_left = self.containers.iter().any(|c| c.live || c.spawning);
        if !anything_left {
            self.finished = true;
            if stopping.requested && !matches!(self.phase, Phase::Failed | Phase::Succeeded) {
                self.phase = self.compute_phase_after_stop();
            }
            fx.push(Effect::Finished(self.phase));
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
    /// Whether container `i` is ready: running and started (readiness probes will refine it).
    pub fn is_ready(&self, i: usize) -> bool {
        matches!(self.containers[i].state, ContainerState::Running { .. })
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
        matches!(self.state, ContainerState::Running { .. })
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
