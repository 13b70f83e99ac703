//! Whole-pod restart and giving up (docs/escalation.md): when restarting one container does not help,
//! refresh the pod's shared context; past a limit, stop trying.
//!
//! A leaf shared by `podvisor run` and the cluster controller. A container that exits having
//! been restarted `after_container_restarts` times since the last whole-pod restart, all of
//! them within `within` before the exit, restarts the whole pod instead of itself; once the
//! pod has been restarted `max_pod_restarts` times, the next such exit gives up.

use std::collections::VecDeque;
use std::time::Duration;

use crate::clock::Instant;

/// `spec.podRestart` of a Supervision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct PodRestartPolicy {
    pub after_container_restarts: u32,
    pub within: Duration,
    pub max_pod_restarts: u32,
}

/// A number that cannot be used, with its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodRestartPolicyError {
    #[error("afterContainerRestarts: Invalid value: 0: must be at least 1")]
    AfterZero,
    #[error("maxPodRestarts: Invalid value: 0: must be at least 1")]
    MaxZero,
    #[error("within: Invalid value: \"0s\": must be longer than zero")]
    WithinZero,
}

impl PodRestartPolicyError {
    /// The field (under `spec.podRestart`) the problem is about.
    pub fn field(&self) -> &'static str {
        match self {
            PodRestartPolicyError::AfterZero => "afterContainerRestarts",
            PodRestartPolicyError::MaxZero => "maxPodRestarts",
            PodRestartPolicyError::WithinZero => "within",
        }
    }
}

impl PodRestartPolicy {
    /// The policy, or its first problem (`problems` has them all).
    pub fn new(
        after_container_restarts: u32,
        within: Duration,
        max_pod_restarts: u32,
    ) -> Result<PodRestartPolicy, PodRestartPolicyError> {
        if let Some(e) = Self::problems(after_container_restarts, within, max_pod_restarts)
            .into_iter()
            .next()
        {
            return Err(e);
        }
        Ok(PodRestartPolicy {
            after_container_restarts,
            within,
            max_pod_restarts,
        })
    }

    /// Every value that cannot be used.
    pub fn problems(
        after_container_restarts: u32,
        within: Duration,
        max_pod_restarts: u32,
    ) -> Vec<PodRestartPolicyError> {
        let mut out = Vec::new();
        if after_container_restarts == 0 {
            out.push(PodRestartPolicyError::AfterZero);
        }
        if within.is_zero() {
            out.push(PodRestartPolicyError::WithinZero);
        }
        if max_pod_restarts == 0 {
            out.push(PodRestartPolicyError::MaxZero);
        }
        out
    }

    /// What an exit at `exit_at` of a container whose policy would restart it leads to.
    pub fn on_exit(&self, window: &RestartWindow, exit_at: Instant, pod_restarts: u32) -> Escalate {
        if window.count(exit_at, self.within) < self.after_container_restarts {
            Escalate::No
        } else if pod_restarts < self.max_pod_restarts {
            Escalate::RestartPod
        } else {
            Escalate::GiveUp
        }
    }
}

/// What escalation makes of a container exit that its policy would restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escalate {
    /// Restart the container, as usual.
    No,
    /// Restart the whole pod instead.
    RestartPod,
    /// The pod has been restarted `max_pod_restarts` times already: it fails.
    GiveUp,
}

/// When one container was restarted since the last whole-pod restart: only the newest
/// `after_container_restarts` matter, so no more are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartWindow {
    times: VecDeque<Instant>,
}

impl RestartWindow {
    /// A restart at `at`.
    pub fn record(&mut self, at: Instant, policy: &PodRestartPolicy) {
        self.times.push_back(at);
        while self.times.len() > policy.after_container_restarts as usize {
            self.times.pop_front();
        }
    }

    /// Forgets every restart (a whole-pod restart happened).
    pub fn clear(&mut self) {
        self.times.clear();
    }

    /// Restarts no more than `within` before `exit_at`.
    pub fn count(&self, exit_at: Instant, within: Duration) -> u32 {
        self.times
            .iter()
            .filter(|t| exit_at.saturating_since(**t) <= within)
            .count() as u32
    }

    /// The restart times kept, oldest first (for the saved record).
    pub fn times(&self) -> impl Iterator<Item = Instant> + '_ {
        self.times.iter().copied()
    }

    /// A window from saved times.
    pub fn from_times(times: impl IntoIterator<Item = Instant>) -> RestartWindow {
        RestartWindow {
            times: times.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Instant {
        Instant::from_millis(n * 1000)
    }

    #[test]
    fn restarts_within_the_window_escalate() {
        let p = PodRestartPolicy::new(3, Duration::from_secs(60), 2).unwrap();
        let mut w = RestartWindow::default();
        for t in [0, 10, 20] {
            assert_eq!(p.on_exit(&w, s(t), 0), Escalate::No);
            w.record(s(t), &p);
        }
        // Third restart at 20 s; an exit at 30 s has 3 within the minute.
        assert_eq!(p.on_exit(&w, s(30), 0), Escalate::RestartPod);
        assert_eq!(p.on_exit(&w, s(30), 1), Escalate::RestartPod);
        assert_eq!(p.on_exit(&w, s(30), 2), Escalate::GiveUp);
        // An exit at 61 s: the restart at 0 s is out of the window (60 s is still in).
        assert_eq!(p.on_exit(&w, s(60), 0), Escalate::RestartPod);
        assert_eq!(p.on_exit(&w, s(61), 0), Escalate::No);
        // A whole-pod restart starts the count again.
        w.clear();
        assert_eq!(p.on_exit(&w, s(62), 0), Escalate::No);
    }

    #[test]
    fn only_the_newest_restarts_are_kept() {
        let p = PodRestartPolicy::new(2, Duration::from_secs(10), 1).unwrap();
        let mut w = RestartWindow::default();
        for t in 0..100 {
            w.record(s(t), &p);
        }
        assert_eq!(w.times().collect::<Vec<_>>(), [s(98), s(99)]);
        let again = RestartWindow::from_times(w.times());
        assert_eq!(again, w);
    }

    #[test]
    fn zero_numbers_are_refused_with_their_field() {
        let d = Duration::from_secs(1);
        assert_eq!(
            PodRestartPolicy::new(0, d, 1).unwrap_err().field(),
            "afterContainerRestarts"
        );
        assert_eq!(
            PodRestartPolicy::new(1, d, 0).unwrap_err().field(),
            "maxPodRestarts"
        );
        assert_eq!(
            PodRestartPolicy::new(1, Duration::ZERO, 1)
                .unwrap_err()
                .field(),
            "within"
        );
    }
}
