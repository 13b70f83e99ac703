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
//! Rules are those of pkg/kubelet (docs/kubelet.md: Restarts, Lifecycle), each cited where
//! applied.
//!
//! One file per concern: `plan` (what runs), `io` (inputs and effects), `container` (one
//! container's status), `reconcile` (starts and restarts), `probes`, `hooks`, `stop` (kills and
//! pod stops), `phase` (phase and conditions); `mod.rs` holds the `Pod` and its `step`.

mod adopt;
mod container;
mod deadline;
mod hooks;
mod image;
mod image_volume;
mod io;
mod phase;
mod plan;
mod probes;
mod reconcile;
mod resume;
mod state;
mod stop;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use std::time::Duration;

use crate::clock::Instant;
use crate::duration::format_duration;
use crate::probe::ProbeKind;
use crate::stage::Stage;

pub use adopt::Survivor;
pub use container::ContainerStatus;
use container::{Next, Process};
pub use io::{
    Effect, Event, EventType, Exit, ExitStatus, ImageFailure, ImageReport, Input, InstanceId,
    Signal, LOG_TAIL_LINES,
};
pub use phase::Condition;
pub use plan::{ContainerPlan, Hook, Kind, PodPlan, ProbePlan, Probes, Staging};
pub use resume::ResumeError;
pub use state::{ContainerState, Phase, TerminatedReason, WaitingReason};
use stop::Stopping;
pub use stop::MIN_GRACE;

/// The pod state machine.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Shared with the shell, which reads it too; the one change the core makes to it (an
    /// image's user found to be non-root) makes the core a copy of its own first.
    plan: Arc<PodPlan>,
    containers: Vec<ContainerStatus>,
    phase: Phase,
    /// When the pod was admitted (`Input::Admit`); `None` before.
    admitted_at: Option<Instant>,
    /// When the pod started (its `status.startTime`): its first admission, or the record's
    /// creation time of a pod resumed; `activeDeadlineSeconds` counts from it.
    active_since: Option<Instant>,
    stopping: Option<Stopping>,
    finished: bool,
    /// Whole-pod restarts so far (asked for, or by escalation).
    pod_restarts: u32,
    /// In-place restarts of every container so far (`RestartAllContainers` rules).
    restarts_all: u32,
    /// `status.reason` and `status.message` of a pod that failed as a whole (`GaveUp`).
    failure: Option<(String, String)>,
    /// When probes fall due: (time, container, instance, kind), checked against the worker
    /// when popped (entries of replaced instances or rescheduled workers are dropped then).
    probe_due: BinaryHeap<Reverse<(Instant, usize, u32, ProbeKind)>>,
    /// The earliest backoff end, kill step or verdict, computed after each full step; `None`
    /// inside: nothing.
    slow_deadline: Option<Option<Instant>>,
    /// Taken up from a saved record: announced when admitted.
    resumed: Option<resume::Resumed>,
    /// Containers that outlived the last run, taken over at admission (see `adopt`).
    adopted: Vec<(usize, Survivor)>,
    /// Containers a resume could not locate (told at admission, see `adopt`).
    unlocated: Vec<usize>,
    /// Something the saved record holds has changed (see `take_changed`).
    changed: bool,
    /// The `now` of the latest step.
    last_now: Instant,
    /// Where each image volume's image stands (`PodPlan::image_volumes`).
    volume_images: Vec<image_volume::VolumePull>,
}

impl Pod {
    pub fn new(plan: impl Into<Arc<PodPlan>>) -> Pod {
        let plan: Arc<PodPlan> = plan.into();
        let containers = (0..plan.containers.len())
            .map(|i| ContainerStatus::new(&plan.containers[i].name, initial_waiting(&plan, i)))
            .collect();
        let volume_images = vec![image_volume::VolumePull::default(); plan.image_volumes.len()];
        Pod {
            plan,
            containers,
            phase: Phase::Pending,
            admitted_at: None,
            active_since: None,
            stopping: None,
            finished: false,
            pod_restarts: 0,
            restarts_all: 0,
            failure: None,
            probe_due: BinaryHeap::new(),
            slow_deadline: None,
            resumed: None,
            adopted: Vec::new(),
            unlocated: Vec::new(),
            changed: true,
            last_now: Instant::ZERO,
            volume_images,
        }
    }

    /// Whether a stop was asked for (rather than the pod ending by itself).
    pub fn stop_requested(&self) -> bool {
        self.stopping.is_some_and(|s| s.requested)
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

    /// Whole-pod restarts so far.
    pub fn pod_restarts(&self) -> u32 {
        self.pod_restarts
    }

    /// In-place restarts of every container so far (`RestartAllContainers` rules).
    pub fn restarts_all(&self) -> u32 {
        self.restarts_all
    }

    /// `status.reason` and `status.message` when the pod failed as a whole (`GaveUp`).
    pub fn failure(&self) -> Option<(&str, &str)> {
        self.failure.as_ref().map(|(r, m)| (r.as_str(), m.as_str()))
    }

    /// Whether every process has exited after a terminal phase or a stop.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The earliest time at which a `Tick` can change something: a backoff ending, a probe
    /// falling due, a preStop to abandon, a SIGKILL falling due or a verdict.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        match self.next_deadlines() {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// `next_deadline` in two: the next probe falling due, and the earliest of the rest. A
    /// shell may wake for probes on a coarser grid than for the rest (hundreds of probes a
    /// second share its wake-ups).
    pub fn next_deadlines(&mut self) -> (Option<Instant>, Option<Instant>) {
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
        (probe, slow)
    }

    fn compute_slow_deadline(&self) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut consider = |t: Instant| at = Some(at.map_or(t, |a| a.min(t)));
        for c in &self.containers {
            if let Some(k) = &c.kill {
                if c.live() && !k.kill_sent {
                    consider(k.kill_at().unwrap_or_else(|| k.grace_end()));
                }
            }
        }
        if let Some(t) = self.active_deadline() {
            consider(t);
        }
        if self.stopping.is_some() {
            return at;
        }
        for i in 0..self.containers.len() {
            // Only a container already marked CrashLoopBackOff: one held back by an init
            // container that has not completed is not due, whatever its backoff says.
            if !self.containers[i].backing_off() {
                continue;
            }
            if let reconcile::NextStart::Restart {
                wait: Some((_, until)),
                ..
            } = self.decide(i)
            {
                consider(until);
            }
        }
        for c in &self.containers {
            if let Some(t) = c.config_retry {
                consider(t);
            }
            if let Some(t) = c.image.deadline() {
                consider(t);
            }
        }
        for v in &self.volume_images {
            if let Some(t) = v.pull.deadline() {
                consider(t);
            }
            for t in v.unmountable.iter().filter_map(|u| u.retry_at) {
                consider(t);
            }
        }
        if let Some(t) = self.next_blame() {
            consider(t);
        }
        at
    }

    /// Feeds one input and returns the effects to carry out, in order.
    pub fn step(&mut self, now: Instant, input: Input) -> Vec<Effect> {
        let mut fx = Vec::new();
        if self.finished {
            return fx;
        }
        self.last_now = now;
        // Probe results and timer ticks change the record only through what they lead to
        // (starts, exits, verdicts), which mark it themselves.
        if !matches!(input, Input::Probed(..) | Input::Tick) {
            self.changed = true;
        }
        match input {
            Input::Admit => {
                self.admitted_at.get_or_insert(now);
                self.active_since.get_or_insert(now);
                fx.extend(self.resumed_event(now));
                self.admit_survivors(now, &mut fx);
            }
            Input::Started(id, at) => self.started(at.min(now), id, &mut fx),
            Input::HookDone(id, hook, result) => self.hook_done(now, id, hook, result, &mut fx),
            Input::Probed(id, kind, outcome) => {
                // Most attempts change nothing published: then nothing else needs a look.
                if !self.probed(now, id, kind, outcome, &mut fx) {
                    return fx;
                }
            }
            Input::StartFailed(id, message) => self.start_failed(now, id, message, &mut fx),
            Input::Exited(id, exit) => self.exited(now, id, exit, &mut fx),
            Input::Lost(id, why) => self.lost(now, id, why, &mut fx),
            Input::Tick => {
                self.run_due_probes(now, &mut fx);
                let slow_due = matches!(self.slow_deadline, Some(Some(d)) if d <= now)
                    || self.slow_deadline.is_none();
                if !slow_due {
                    return fx;
                }
            }
            Input::Evict(message) => self.evict(now, message, &mut fx),
            Input::Stop => match &mut self.stopping {
                None => self.begin_stop(now, true),
                // A stop during a whole-pod restart ends it there.
                Some(s) => {
                    s.restart = false;
                    s.in_place = false;
                    s.requested = true;
                }
            },
            Input::RestartContainer(i) => {
                let message = |name: &str| format!("Stopping container {name} to restart it");
                self.restart_container(now, i, &message, &mut fx)
            }
            Input::ResizeRestart(i) => {
                let message = |name: &str| format!("Container {name} resize requires restart");
                self.restart_container(now, i, &message, &mut fx)
            }
            Input::RestartPod => self.restart_pod(now, &mut fx),
            Input::Image(i, report) => self.image_report(now, i, report, &mut fx),
            Input::VolumeImage(v, report) => self.volume_image_report(now, v, report, &mut fx),
        }
        self.check_active_deadline(now, &mut fx);
        self.slow_deadline = None;
        self.settle(now, &mut fx);
        fx
    }

    /// The process of instance `id` runs, since `at`: `Started`, then postStart or Running.
    fn started(&mut self, at: Instant, id: InstanceId, fx: &mut Vec<Effect>) {
        let post_start = self.plan.containers[id.container].post_start;
        if let Some(c) = self.current(id) {
            c.process = Process::Up {
                since: at,
                post_start,
            };
            let message = format!("Started container {}", c.name);
            fx.push(self.container_event(id.container, EventType::Normal, "Started", message));
            if post_start {
                // Not Running until postStart completes.
                fx.push(Effect::RunHook(id, Hook::PostStart));
            } else {
                self.become_running(id.container);
            }
        }
    }

    /// The process could not be started: containerd's exit code 128, reason StartError.
    fn start_failed(
        &mut self,
        now: Instant,
        id: InstanceId,
        message: String,
        fx: &mut Vec<Effect>,
    ) {
        if let Some(c) = self.current(id) {
            c.process = Process::Down;
            // containerd reports a failed start as exit code 128, reason StartError.
            c.state = ContainerState::Terminated {
                exit_code: 128,
                signal: None,
                reason: TerminatedReason::StartError,
                message: Some(message.clone()),
                started_at: None,
                finished_at: now,
            };
            let text = format!("Error: failed to start container {}: {message}", c.name);
            let mut e = self.container_event(id.container, EventType::Warning, "Failed", text);
            set_exit_code(&mut e, 128);
            fx.push(e);
        }
    }

    /// The process of instance `id` ended: its terminated state and events (and in stage
    /// Debug, how it ended and its log's tail).
    fn exited(&mut self, now: Instant, id: InstanceId, exit: Exit, fx: &mut Vec<Effect>) {
        let Exit {
            status,
            oom_killed,
            message,
        } = exit;
        if let Some(c) = self.current(id) {
            let started_at = c.up_since();
            c.process = Process::Down;
            c.probes.clear();
            let code = status.code();
            let reason = if oom_killed {
                TerminatedReason::OOMKilled
            } else if code == 0 {
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
                message: message.filter(|m| !m.is_empty()),
                started_at,
                finished_at: now,
            };
            let debug = c.stage == Some(Stage::Debug);
            let name = c.name.clone();
            let kind = if code == 0 {
                EventType::Normal
            } else {
                EventType::Warning
            };
            let message = format!("Container {name} exited with code {code}");
            let mut e = self.container_event(id.container, kind, reason.as_str(), message);
            set_exit_code(&mut e, code);
            fx.push(e);
            if debug {
                // What helps to diagnose a crash while the add-on logs (the
                // Debug stage): how the instance ended, after how long, and its log.
                let ran = now.saturating_since(started_at.unwrap_or(now));
                let how = match status {
                    ExitStatus::Code(c) => format!("exited with code {c}"),
                    ExitStatus::Signal(s) => format!("was killed by signal {s}"),
                };
                let message = format!(
                    "Container {name} {how} after {} in stage Debug",
                    format_duration(Duration::from_millis(ran.as_millis() as u64))
                );
                let mut e = self.container_event(id.container, kind, "DebugExit", message);
                set_exit_code(&mut e, code);
                fx.push(e);
                fx.push(Effect::LogTail(id));
            }
        }
    }

    /// The pod is evicted: Failed, every container killed at once.
    fn evict(&mut self, now: Instant, message: String, fx: &mut Vec<Effect>) {
        if !matches!(self.phase, Phase::Succeeded | Phase::Failed) {
            fx.push(self.pod_event(EventType::Warning, "Evicted", message.clone()));
            self.phase = Phase::Failed;
            self.failure = Some(("Evicted".to_string(), message));
            let requested = self.stopping.is_some_and(|s| s.requested);
            self.begin_stop(now, requested);
            if let Some(s) = &mut self.stopping {
                s.grace = Duration::ZERO;
            }
        }
    }

    /// A user asked to restart container `i` (not a regular init container: that takes a
    /// pod restart).
    fn restart_container(
        &mut self,
        now: Instant,
        i: usize,
        message: &dyn Fn(&str) -> String,
        fx: &mut Vec<Effect>,
    ) {
        // A regular init container runs once per pod start: restart the pod for that.
        let restartable = self
            .plan
            .containers
            .get(i)
            .is_some_and(|p| p.kind != Kind::Init);
        if self.stopping.is_none() && restartable {
            let c = &mut self.containers[i];
            c.next = Next::Now;
            let message = message(&c.name);
            let grace = self.plan.grace;
            self.begin_kill(i, now, grace, message, false, fx);
        }
    }

    /// A user asked to restart the whole pod.
    fn restart_pod(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if self.stopping.is_none() && !self.phase.is_terminal() {
            fx.push(self.pod_event(
                EventType::Normal,
                "PodRestarting",
                "Restarting the pod: every container stops, emptyDir volumes are wiped, init containers run again".into(),
            ));
            self.begin_pod_restart(now);
        }
    }

    /// After an input: readiness, what reconciling does about it, readiness again, and the
    /// end of the pod as the step's last effect.
    fn settle(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if self.admitted_at.is_some() {
            // Readiness flips caused by the input come before what reconciling does about it.
            self.update_started();
            self.update_ready(fx);
            self.reconcile(now, fx);
            self.update_started();
            self.update_ready(fx);
            // Announced once the last readiness flips are out, so that it is the step's last
            // effect (a finished pod takes no more steps).
            if self.finished {
                fx.push(Effect::Finished(self.phase));
            }
        }
    }

    /// The container's status if `id` is its current instance.
    fn current(&mut self, id: InstanceId) -> Option<&mut ContainerStatus> {
        self.containers
            .get_mut(id.container)
            .filter(|c| c.instance == id.instance)
    }

    /// An event about container `i`, with its restart count and stage as they are now.
    fn container_event(&self, i: usize, kind: EventType, reason: &str, message: String) -> Effect {
        event_of(&self.containers[i], kind, reason, message)
    }

    /// An event about the pod.
    fn pod_event(&self, kind: EventType, reason: &str, message: String) -> Effect {
        Effect::Event(Event {
            kind,
            reason: reason.into(),
            object: "pod".into(),
            message,
            exit_code: None,
            restart_count: None,
            stage: None,
        })
    }
}

/// An event about container `c`, with its restart count and stage as they are now.
fn event_of(c: &ContainerStatus, kind: EventType, reason: &str, message: String) -> Effect {
    Effect::Event(Event {
        kind,
        reason: reason.into(),
        object: c.name.clone(),
        message,
        exit_code: None,
        restart_count: Some(c.restart_count),
        stage: c.stage,
    })
}

fn set_exit_code(effect: &mut Effect, code: i32) {
    if let Effect::Event(e) = effect {
        e.exit_code = Some(code);
    }
}

/// A container's state before its first start: `PodInitializing` for the main containers of a
/// pod with init containers, else `ContainerCreating`.
fn initial_waiting(plan: &PodPlan, i: usize) -> ContainerState {
    let has_init = plan.containers.iter().any(|c| c.kind != Kind::Main);
    ContainerState::Waiting {
        reason: if has_init && plan.containers[i].kind == Kind::Main {
            WaitingReason::PodInitializing
        } else {
            WaitingReason::ContainerCreating
        },
        message: None,
    }
}
