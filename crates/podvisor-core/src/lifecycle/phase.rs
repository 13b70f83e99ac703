//! The pod's phase and conditions, computed from the containers (`getPhase` in
//! pkg/kubelet/kubelet_pods.go, pkg/kubelet/status/generate.go; docs/kubelet.md, Pod phase).

use super::container::Next;
use super::reconcile::NextStart;
use super::{ContainerState, Kind, Phase, Pod};

impl Pod {
    /// `getPhase`, for the containers as they stand.
    pub(super) fn compute_phase(&self) -> Phase {
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
                    if !c.ever_started {
                        init_pending = true;
                    }
                }
                Kind::Main => {
                    // Started in this run of the pod: a whole-pod restart (or an in-place
                    // restart of every container) that is initializing again is Pending.
                    if c.instance > 0 && c.ever_started() && c.next != Next::First {
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
            let restarting = (0..self.containers.len()).any(|i| {
                self.plan.containers[i].kind == Kind::Main
                    && !matches!(
                        self.decide(i),
                        NextStart::Never | NextStart::FailPod | NextStart::GiveUp { .. }
                    )
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
    /// 0, else Failed (as a deleted pod's final phase in `getPhase`).
    pub(super) fn compute_phase_after_stop(&self) -> Phase {
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
    /// computes them (pkg/kubelet/status/generate.go; docs/kubelet.md, Pod conditions), for a
    /// pod whose readiness gates' conditions nobody set.
    pub fn conditions(&self) -> Vec<Condition> {
        self.conditions_given(&[])
    }

    /// The conditions, given those set from outside (`others`: type and status, `True`,
    /// `False` or `Unknown`), which the pod's `readinessGates` wait for: Ready is `True` only
    /// once every gate's condition is `True` too (else `ReadinessGatesNotReady`).
    pub fn conditions_given(&self, others: &[(String, String)]) -> Vec<Condition> {
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
                Kind::Sidecar => !c.ever_started,
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
        let gates: Vec<String> = (self.plan.readiness_gates.iter())
            .filter_map(|gate| match others.iter().find(|(kind, _)| kind == gate) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {gate:?} does not exist."
                )),
                Some((_, status)) if status != "True" => Some(format!(
                    "the status of pod readiness gate {gate:?} is not \"True\", but {status}"
                )),
                Some(_) => None,
            })
            .collect();
        let ready = |kind| match self.phase {
            Phase::Succeeded => cond(kind, false, Some("PodCompleted"), None),
            Phase::Failed => cond(kind, false, Some("PodFailed"), None),
            _ if unready.is_empty() && kind == "Ready" && !gates.is_empty() => cond(
                kind,
                false,
                Some("ReadinessGatesNotReady"),
                Some(gates.join(", ")),
            ),
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
        let mut conditions = vec![
            cond("PodScheduled", true, None, None),
            initialized,
            ready("ContainersReady"),
            ready("Ready"),
        ];
        // Only a pod with a `RestartAllContainers` rule has it
        // (`GenerateAllContainersRestartingCondition` in pkg/kubelet/status/generate.go).
        if self
            .plan
            .containers
            .iter()
            .any(|c| c.restart.restarts_all())
        {
            let kind = "AllContainersRestarting";
            conditions.push(match self.phase {
                Phase::Succeeded => cond(kind, false, Some("PodCompleted"), None),
                Phase::Failed => cond(kind, false, Some("PodFailed"), None),
                _ if self.restarting_all() => cond(
                    kind,
                    true,
                    Some("RestartAllContainersStarted"),
                    Some("container exited with restart policy rule".into()),
                ),
                _ => cond(kind, false, None, None),
            });
        }
        conditions
    }
}
