//! Reconciling, as the kubelet's SyncPod: what should run is compared with what runs, and
//! containers are started, restarted or left backing off, or the pod restarts or gives up.
//!
//! `decide` is the one place that answers "what happens next to this container": its restart
//! policy and exit-code rules (pkg/kubelet/container/helpers.go, pkg/api/v1/pod/util.go), a
//! failed init container under `Never`
//! (docs/kubelet.md: Init containers), the escalation rules of `Supervision.spec.podRestart`,
//! and CrashLoopBackOff (docs/kubelet.md: Restarts).
//! Reconciling, the phase, the deadlines and the probe-kill message all use its answer.

use std::time::Duration;

use crate::clock::Instant;
use crate::duration::format_duration;
use crate::escalation::Escalate;
use crate::restart::{outcome, should_restart, DecidedBy, Then};
use crate::stage::{Stage, Verdict, CLEAR_AFTER_RESTARTS};

use super::container::{Next, Process};
use super::{
    set_exit_code, ContainerState, Effect, EventType, InstanceId, Kind, Phase, Pod, WaitingReason,
};

/// How long the kubelet's pod worker waits before it tries a pod again after a failed sync
/// (`backOffPeriod`, pkg/kubelet; the kubelet adds up to half of it again as jitter).
pub(super) const CONFIG_RETRY: Duration = Duration::from_secs(10);

/// What happens next to a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NextStart {
    /// It runs or is being started (or the pod is stopping): nothing to decide.
    Busy,
    /// A first start of this pod run, or one asked for by `podvisor restart CONTAINER`.
    Now { manual: bool },
    /// Restarted by its policy after the exit that finished at `finished_at`; `wait`: the
    /// CrashLoopBackOff delay and when it ends, if its backoff entry is live; `all`: with every
    /// other container, in place (a `RestartAllContainers` rule, KEP-5532).
    Restart {
        finished_at: Instant,
        wait: Option<(Duration, Instant)>,
        all: Option<RestartAll>,
    },
    /// Not started again: it completed, or its policy says no.
    Never,
    /// A regular init container failed under `restartPolicy: Never`: the pod fails.
    FailPod,
    /// Escalation: it was restarted `restarts` times within the window; the whole pod restarts.
    RestartPod { restarts: u32, terms: Terms },
    /// Escalation past `maxPodRestarts`: the pod is Failed (GaveUp).
    GiveUp { restarts: u32, terms: Terms },
}

/// Which rule of the container restarts every container, on which exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RestartAll {
    rule: usize,
    exit_code: i32,
}

/// The `podRestart` terms an escalation message quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Terms {
    within: Duration,
    max: u32,
}

impl Pod {
    /// Whether the restart policy (pod, container, exit-code rules) restarts container `i`
    /// after an exit with `exit_code`.
    pub(super) fn policy_restarts(&self, i: usize, exit_code: i32) -> bool {
        should_restart(
            self.plan.restart_policy,
            &self.plan.containers[i].restart,
            exit_code,
            false,
        )
    }

    /// Whether sidecar `i`, down while the pod terminates, is to be started again (KEP-4438,
    /// with its gate): the stop was asked for (not a pod restart), the sidecar was not
    /// stopped by it (no SIGTERM sent yet: its turn has not come), a main container still
    /// runs, and the grace is not over.
    pub(super) fn restarts_in_termination(&self, i: usize) -> bool {
        let Some(s) = self.stopping else {
            return false;
        };
        let c = &self.containers[i];
        let mains_running = (self.containers.iter().zip(&self.plan.containers))
            .any(|(c, p)| p.kind != Kind::Sidecar && c.busy());
        self.plan.sidecars_restart_in_termination
            && s.requested
            && !s.restart
            && self.plan.containers[i].kind == Kind::Sidecar
            && !c.busy()
            && c.kill.is_none_or(|k| k.term_at.is_none() && !k.kill_sent)
            && self.last_now < s.began + s.grace
            && mains_running
    }

    /// What happens next to container `i` (see `NextStart`).
    pub(super) fn decide(&self, i: usize) -> NextStart {
        let c = &self.containers[i];
        let terminating = self.stopping.is_some();
        if c.busy() || (terminating && !self.restarts_in_termination(i)) {
            return NextStart::Busy;
        }
        match c.next {
            Next::First => return NextStart::Now { manual: false },
            Next::Now => return NextStart::Now { manual: true },
            Next::ByPolicy => {}
        }
        let Some(&ContainerState::Terminated {
            exit_code,
            finished_at,
            ..
        }) = c.last_exit()
        else {
            return NextStart::Never;
        };
        let plan = &self.plan.containers[i];
        let outcome = outcome(
            self.plan.restart_policy,
            &plan.restart,
            plan.kind == Kind::Init,
            exit_code,
        );
        let all = match (outcome.then, outcome.by) {
            (Then::Completes | Then::Stays, _) => return NextStart::Never,
            (Then::FailsPod, _) => return NextStart::FailPod,
            // Once the pod terminates, nothing restarts the whole pod.
            (Then::RestartsAll, DecidedBy::Rule(rule)) if !terminating => {
                Some(RestartAll { rule, exit_code })
            }
            _ => None,
        };
        if let Some(policy) = self.plan.pod_restart.as_ref().filter(|_| !terminating) {
            let restarts = c.window.count(finished_at, policy.within);
            let terms = Terms {
                within: policy.within,
                max: policy.max_pod_restarts,
            };
            match policy.on_exit(&c.window, finished_at, self.pod_restarts) {
                Escalate::No => {}
                Escalate::RestartPod => return NextStart::RestartPod { restarts, terms },
                Escalate::GiveUp => return NextStart::GiveUp { restarts, terms },
            }
        }
        let wait = c
            .backoff
            .retry_at(&self.plan.backoff, finished_at)
            .zip(c.backoff.current_delay())
            .map(|(until, delay)| (delay, until));
        NextStart::Restart {
            finished_at,
            wait,
            all,
        }
    }

    pub(super) fn reconcile(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        self.drive_kills(now, fx);
        if self.stopping.is_some() {
            self.reconcile_stop(now, fx);
            for i in 0..self.containers.len() {
                if self.restarts_in_termination(i) {
                    self.act(i, now, fx);
                }
            }
            return;
        }
        self.judge(now, fx);
        self.ensure_unmounted_volume_images(now, fx);
        // Restarts asked for by `podvisor restart CONTAINER`, once the container is down.
        for i in 0..self.containers.len() {
            if self.decide(i) == (NextStart::Now { manual: true }) && !self.act(i, now, fx) {
                return;
            }
        }
        // Init containers and sidecars, in order: each regular init container must complete,
        // each sidecar must be running, before the next one starts (docs/kubelet.md: Sidecars, Init containers).
        let mut init_done = true;
        for i in 0..self.containers.len() {
            match self.plan.containers[i].kind {
                Kind::Main => continue,
                Kind::Init => {
                    if matches!(
                        self.containers[i].state,
                        ContainerState::Terminated { exit_code: 0, .. }
                    ) && !matches!(self.decide(i), NextStart::Restart { all: Some(_), .. })
                    {
                        continue;
                    }
                    if !self.act(i, now, fx) {
                        return;
                    }
                    init_done = false;
                    break;
                }
                Kind::Sidecar => {
                    if !self.act(i, now, fx) {
                        return;
                    }
                    // A sidecar that is not running holds back what follows it only until it
                    // has first started (running, its startup probe passed: a start that
                    // failed is not one); later it restarts on its own.
                    if !self.containers[i].ever_started {
                        init_done = false;
                        break;
                    }
                }
            }
        }
        if init_done {
            for i in 0..self.containers.len() {
                if self.plan.containers[i].kind == Kind::Main && !self.act(i, now, fx) {
                    return;
                }
            }
        }
        self.phase = self.compute_phase();
        if self.phase.is_terminal() {
            // The main containers are done: stop what still runs (sidecars), then finish.
            self.begin_stop(now, false);
            self.reconcile_stop(now, fx);
        }
    }

    /// Carries out `decide(i)`. `false` when the pod as a whole took over (it restarts, gives
    /// up or fails), so reconciling must not go on.
    fn act(&mut self, i: usize, now: Instant, fx: &mut Vec<Effect>) -> bool {
        let decision = self.decide(i);
        let starts = match decision {
            NextStart::Now { .. } => true,
            NextStart::Restart { wait, .. } => wait.is_none_or(|(_, until)| now >= until),
            _ => false,
        };
        let blocked = |pod: &mut Pod, fx: &mut Vec<Effect>| {
            pod.config_blocks(i, now, fx)
                || pod.volume_images_block(i, now, fx)
                || pod.image_blocks(i, now, fx)
        };
        if starts && blocked(self, fx) {
            return true;
        }
        match decision {
            NextStart::Busy | NextStart::Never => {}
            NextStart::Now { manual } => {
                let c = &mut self.containers[i];
                if manual {
                    if let ContainerState::Terminated { .. } = c.state {
                        c.last_state = Some(c.state.clone());
                    }
                    c.restart_count += 1;
                } else if c.instance > c.skipped {
                    // Started again by a whole-pod restart: restartCount only ever grows.
                    c.restart_count += 1;
                }
                self.start(i, fx);
            }
            NextStart::Restart {
                finished_at,
                wait,
                all,
            } => match wait {
                Some((delay, until)) if now < until => self.back_off(i, delay, fx),
                _ => {
                    // Its backoff spaces its restarts (and repeated restarts of everything that
                    // it triggers), and its restart window counts them for `podRestart`.
                    let backoff = self.plan.backoff;
                    let window = self.plan.pod_restart;
                    let c = &mut self.containers[i];
                    c.backoff.record_restart(&backoff, finished_at, now);
                    if let Some(policy) = &window {
                        c.window.record(now, policy);
                    }
                    let Some(RestartAll { rule, exit_code }) = all else {
                        c.last_state = c.last_exit().cloned();
                        c.restart_count += 1;
                        self.start(i, fx);
                        return true;
                    };
                    let name = c.name.clone();
                    let kind = if exit_code == 0 {
                        EventType::Normal
                    } else {
                        EventType::Warning
                    };
                    let mut e = self.pod_event(
                        kind,
                        "RestartingAllContainers",
                        format!(
                            "Container {name} exited with code {exit_code}, matching its \
                             restartPolicyRules[{rule}] (RestartAllContainers): every container is \
                             killed without preStop or grace and the pod starts again from its \
                             first init container; volumes are kept"
                        ),
                    );
                    set_exit_code(&mut e, exit_code);
                    fx.push(e);
                    self.begin_restart_all(now);
                    self.reconcile_stop(now, fx);
                    return false;
                }
            },
            NextStart::FailPod => {
                // A failed init container fails the pod under Never.
                self.phase = Phase::Failed;
                self.begin_stop(now, false);
                self.reconcile_stop(now, fx);
                return false;
            }
            NextStart::RestartPod { restarts, terms } => {
                let (name, within, max) = self.escalation_terms(i, terms);
                let n = self.pod_restarts + 1;
                fx.push(self.pod_event(
                    EventType::Warning,
                    "PodRestarting",
                    format!(
                        "Container {name} was restarted {restarts} times within {within}: \
                         restarting the whole pod (pod restart {n} of {max}): every container \
                         stops, emptyDir volumes are wiped, init containers run again"
                    ),
                ));
                self.begin_pod_restart(now);
                self.reconcile_stop(now, fx);
                return false;
            }
            NextStart::GiveUp { restarts, terms } => {
                let (name, within, max) = self.escalation_terms(i, terms);
                let message = format!(
                    "Container {name} was restarted {restarts} times within {within}, and the \
                     whole pod has been restarted {max} times already (maxPodRestarts): giving up"
                );
                fx.push(self.pod_event(EventType::Warning, "GaveUp", message.clone()));
                self.phase = Phase::Failed;
                self.failure = Some(("GaveUp".to_string(), message));
                self.begin_stop(now, false);
                self.reconcile_stop(now, fx);
                return false;
            }
        }
        true
    }

    /// The kubelet's `CreateContainerConfigError`: container `i`'s configuration cannot be made
    /// (`runAsNonRoot` and a root user, a `subPathExpr` with no value), so nothing is created, no restart is counted, and the
    /// start is tried again after the pod worker's backoff. `true` while it is held back.
    fn config_blocks(&mut self, i: usize, now: Instant, fx: &mut Vec<Effect>) -> bool {
        let c = &self.containers[i];
        if c.config_retry.is_some_and(|at| now < at) {
            return true;
        }
        let plan = &self.plan.containers[i];
        let pod = format!(
            "{}_{}({})",
            self.plan.name, self.plan.namespace, self.plan.uid
        );
        let failed = match (&plan.config_error, plan.non_root.as_ref()) {
            (Some(error), _) => Some(error.clone()),
            (None, Some(n)) => n.verify(&pod, &c.name).err(),
            (None, None) => None,
        };
        let Some(message) = failed else {
            self.containers[i].config_retry = None;
            return false;
        };
        self.changed = true;
        let c = &mut self.containers[i];
        c.config_retry = Some(now + CONFIG_RETRY);
        c.state = ContainerState::Waiting {
            reason: WaitingReason::CreateContainerConfigError,
            message: Some(message.clone()),
        };
        fx.push(self.container_event(i, EventType::Warning, "Failed", format!("Error: {message}")));
        true
    }

    /// The container's name, the window and the pod-restart limit, for escalation messages.
    fn escalation_terms(&self, i: usize, terms: Terms) -> (String, String, u32) {
        (
            self.containers[i].name.clone(),
            format_duration(terms.within),
            terms.max,
        )
    }

    /// Marks container `i` CrashLoopBackOff (once per wait: later steps change nothing, so a
    /// pod of many crash-looping containers does not rebuild their messages on every step).
    fn back_off(&mut self, i: usize, delay: Duration, fx: &mut Vec<Effect>) {
        let pod = &self.plan.name;
        let c = &mut self.containers[i];
        if c.backing_off() {
            return;
        }
        let name = c.name.clone();
        c.last_state = c.last_exit().cloned();
        self.changed = true;
        c.state = ContainerState::Waiting {
            reason: WaitingReason::CrashLoopBackOff,
            message: Some(format!(
                "back-off {} restarting failed container={name} pod={pod}",
                format_duration(delay)
            )),
        };
        let message = format!("Back-off restarting failed container {name} in pod {pod}");
        fx.push(self.container_event(i, EventType::Warning, "BackOff", message));
    }

    /// Starts a new instance of container `i`, in the stage its restart count gives.
    pub(super) fn start(&mut self, i: usize, fx: &mut Vec<Effect>) {
        let staging = self.plan.staging.filter(|_| self.plan.containers[i].staged);
        self.changed = true;
        let c = &mut self.containers[i];
        c.next = Next::ByPolicy;
        c.instance += 1;
        c.process = Process::Spawning;
        c.kill = None;
        c.probes.clear();
        c.state = ContainerState::Waiting {
            reason: WaitingReason::ContainerCreating,
            message: None,
        };
        let stage = staging.map(|s| s.policy.stage(c.restart_count));
        let previous = c.stage;
        if stage.is_some() {
            c.stage = stage;
        }
        let verdict = stage.and_then(|s| c.judgement.on_start(s, c.restart_count));
        let (name, restarts, instance) = (c.name.clone(), c.restart_count, c.instance);
        if let (Some(old), Some(new)) = (previous, stage) {
            if old != new {
                let message = format!(
                    "Instrumentation stage {old} → {new} at restart {restarts} of container {name}"
                );
                fx.push(self.container_event(i, EventType::Warning, "StageChanged", message));
            }
        }
        if verdict == Some(Verdict::Cleared) {
            let since = self.containers[i].judgement.disabled_at.unwrap_or(restarts);
            let message = format!(
                "app crashes without the add-on too ({CLEAR_AFTER_RESTARTS} restarts since it \
                 was disabled at restart {since}): look at the app"
            );
            fx.push(self.container_event(i, EventType::Normal, "InstrumentationCleared", message));
        }
        // The next start makes sure of its image again (the kubelet does at each start).
        self.containers[i].image.ready = false;
        fx.push(self.container_event(
            i,
            EventType::Normal,
            "Created",
            format!("Created container {name}"),
        ));
        fx.push(Effect::Spawn(
            InstanceId {
                container: i,
                instance,
            },
            stage,
        ));
    }

    /// When a running Disabled instance earns its add-on the blame (the earliest such time).
    pub(super) fn next_blame(&self) -> Option<Instant> {
        let staging = self.plan.staging?;
        self.containers
            .iter()
            .filter(|c| c.stage == Some(Stage::Disabled))
            .filter_map(|c| c.judgement.blame_at(c.up_since()?, staging.verdict_after))
            .min()
    }

    /// Blames the add-on of each Disabled container that has run `verdictAfter` cleanly.
    fn judge(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        let Some(staging) = self.plan.staging else {
            return;
        };
        for i in 0..self.containers.len() {
            let c = &mut self.containers[i];
            let due = c.stage == Some(Stage::Disabled)
                && c.up_since()
                    .and_then(|since| c.judgement.blame_at(since, staging.verdict_after))
                    .is_some_and(|at| at <= now);
            if !due {
                continue;
            }
            c.judgement.blame();
            self.changed = true;
            let at = c.judgement.disabled_at.unwrap_or_default();
            let message = format!(
                "app ran {} cleanly after the add-on was disabled at restart {at}: the add-on \
                 is the likely cause",
                format_duration(staging.verdict_after)
            );
            fx.push(self.container_event(i, EventType::Warning, "InstrumentationBlamed", message));
        }
    }
}
