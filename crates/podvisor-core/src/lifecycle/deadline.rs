//! `activeDeadlineSeconds`, as the kubelet's active deadline handler
//! (pkg/kubelet/active_deadline.go): once the pod has been active that long since it started
//! (its `status.startTime`, kept across podvisor's own restarts), it fails with reason
//! `DeadlineExceeded` and its containers are stopped, gracefully, as a pod that failed.

use super::{Effect, EventType, Instant, Phase, Pod};

/// The kubelet's reason and message.
pub const REASON: &str = "DeadlineExceeded";
pub const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

impl Pod {
    /// When the deadline falls, while it still can: the pod has one, has started, and is
    /// neither over nor stopping.
    pub(super) fn active_deadline(&self) -> Option<Instant> {
        let limit = self.plan.active_deadline?;
        if self.phase.is_terminal() || self.stopping.is_some() {
            return None;
        }
        Some(self.active_since? + limit)
    }

    /// Past the deadline: the pod fails (`DeadlineExceeded`, a Normal event as the kubelet
    /// records it) and every container is stopped with the pod's grace.
    pub(super) fn check_active_deadline(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        if self.active_deadline().is_none_or(|at| now < at) {
            return;
        }
        fx.push(self.pod_event(EventType::Normal, REASON, MESSAGE.to_string()));
        self.phase = Phase::Failed;
        self.failure = Some((REASON.to_string(), MESSAGE.to_string()));
        self.begin_stop(now, false);
    }
}
