//! Stopping: one container (`killContainer`: preStop, SIGTERM, grace, SIGKILL) or the whole
//! pod (every container at once, sidecars last), and a whole-pod restart once all is down.

use std::time::Duration;

use crate::clock::Instant;

use super::{
    initial_waiting, ContainerState, Effect, EventType, Hook, InstanceId, Kind, Phase, Pod, Signal,
};

/// Grace between SIGTERM and SIGKILL never goes below this (`minimumGracePeriodInSeconds`).
pub const MIN_GRACE: Duration = Duration::from_secs(2);

/// A kill in progress (`killContainer`): preStop, SIGTERM, grace, SIGKILL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kill {
    pub(super) began: Instant,
    pub(super) grace: Duration,
    /// Part of a pod stop: sidecars wait for their turn.
    pub(super) pod_stop: bool,
    pub(super) pre_stop_running: bool,
    pub(super) term_at: Option<Instant>,
    pub(super) kill_sent: bool,
}

impl Kill {
    /// SIGKILL falls due once the grace left when SIGTERM went has passed; whole seconds spent
    /// in preStop and waiting come off the grace, and what is left never goes below 2 s.
    pub(super) fn kill_at(&self) -> Option<Instant> {
        let term_at = self.term_at?;
        let spent = Duration::from_secs((term_at - self.began).as_secs());
        Some(term_at + self.grace.saturating_sub(spent).max(MIN_GRACE))
    }

    /// When preStop is abandoned and the wait for a sidecar's turn ends.
    pub(super) fn grace_end(&self) -> Instant {
        self.began + self.grace
    }
}

/// A pod stop in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stopping {
    pub(super) began: Instant,
    /// `Stop` was requested (as opposed to the pod having finished by itself).
    pub(super) requested: bool,
    /// A whole-pod restart: once everything is down, start again.
    pub(super) restart: bool,
    /// The restart is in place (`RestartAllContainers`): every container is killed at once
    /// without preStop or grace, volumes stay, restart windows go on.
    pub(super) in_place: bool,
    /// The grace of every container's kill: the pod's, or an override (an eviction's 0).
    pub(super) grace: Duration,
}

impl Pod {
    pub(super) fn begin_stop(&mut self, now: Instant, requested: bool) {
        self.stopping = Some(Stopping {
            began: now,
            requested,
            restart: false,
            in_place: false,
            grace: self.plan.grace,
        });
        // A container waiting to restart will not: its last exit becomes its state again.
        for c in &mut self.containers {
            if matches!(c.state, ContainerState::Waiting { .. }) && !c.live() {
                if let Some(last) = c.last_state.take() {
                    c.state = last;
                }
            }
        }
    }

    /// A whole-pod restart: every container stops gracefully; once all are down, emptyDir
    /// volumes are wiped and the pod starts again from its init containers.
    pub(super) fn begin_pod_restart(&mut self, now: Instant) {
        self.pod_restarts += 1;
        self.begin_stop(now, false);
        if let Some(s) = &mut self.stopping {
            s.restart = true;
        }
    }

    /// An in-place restart of every container (`RestartAllContainers`, KEP-5532): all are
    /// killed at once with a grace of 0 and no preStop (the 2 s floor between SIGTERM and
    /// SIGKILL of every kill still applies) in no particular order; once all are down the pod
    /// starts again from its first init container, volumes and their contents kept.
    pub(super) fn begin_restart_all(&mut self, now: Instant) {
        self.restarts_all += 1;
        self.begin_stop(now, false);
        if let Some(s) = &mut self.stopping {
            s.restart = true;
            s.in_place = true;
            s.grace = Duration::ZERO;
        }
    }

    /// Whether an in-place restart of every container is tearing the pod down (the
    /// condition `AllContainersRestarting`).
    pub fn restarting_all(&self) -> bool {
        self.stopping.is_some_and(|s| s.in_place)
    }

    /// Starts killing container `i` (`killContainer`): a `Killing` event, then preStop (if the
    /// container has one and there is grace), then SIGTERM and SIGKILL as `drive_kills` times.
    pub(super) fn begin_kill(
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
        if !c.live() || c.kill.is_some() {
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
        let instance = c.instance;
        fx.push(self.container_event(i, EventType::Normal, "Killing", message));
        if pre_stop {
            let id = InstanceId {
                container: i,
                instance,
            };
            fx.push(Effect::RunHook(id, Hook::PreStop));
        }
    }

    /// Sends SIGTERM to each container being killed once its preStop is over (or abandoned at
    /// the end of the grace) and, in a pod stop, its turn has come; SIGKILL when due (`killContainer` in
    /// pkg/kubelet/kuberuntime/kuberuntime_container.go).
    pub(super) fn drive_kills(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        // Sidecars wait for every main container and the sidecars after them to be gone.
        let mains_running = self
            .containers
            .iter()
            .zip(&self.plan.containers)
            .any(|(c, p)| p.kind != Kind::Sidecar && c.busy());
        for i in 0..self.containers.len() {
            let c = &self.containers[i];
            let Some(k) = c.kill else {
                continue;
            };
            if !c.live() || k.kill_sent {
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
                        self.plan.containers[j].kind != Kind::Sidecar || !self.containers[j].live()
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

    /// Stopping: every running container is killed at once with the pod's grace, counted from
    /// the stop; sidecars get SIGTERM once no main container runs, last sidecar first
    /// (pkg/kubelet/kuberuntime/kuberuntime_termination_order.go).
    pub(super) fn reconcile_stop(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        let Some(stopping) = self.stopping else {
            return;
        };
        for i in 0..self.containers.len() {
            if self.containers[i].live() && self.containers[i].kill.is_none() {
                let name = &self.containers[i].name;
                let message = if stopping.in_place {
                    format!("Stopping container {name} to restart all containers")
                } else {
                    format!("Stopping container {name}")
                };
                let pod_stop = !stopping.in_place;
                self.begin_kill(i, stopping.began, stopping.grace, message, pod_stop, fx);
            }
        }
        self.drive_kills(now, fx);
        let anything_left = self.containers.iter().any(|c| c.busy());
        if !anything_left && stopping.restart {
            self.stopping = None;
            for i in 0..self.containers.len() {
                let waiting = initial_waiting(&self.plan, i);
                self.containers[i].start_over(waiting, !stopping.in_place);
            }
            if !stopping.in_place {
                self.refresh_volume_images();
                fx.push(Effect::WipeVolumes);
            }
            self.reconcile(now, fx);
            return;
        }
        if !anything_left {
            self.finished = true;
            self.changed = true;
            if stopping.requested && !matches!(self.phase, Phase::Failed | Phase::Succeeded) {
                self.phase = self.compute_phase_after_stop();
            }
        }
    }
}
