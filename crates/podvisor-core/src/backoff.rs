//! CrashLoopBackOff: how long a container that exited must wait before its next start.
//!
//! Reproduces the kubelet (`doBackOff` in pkg/kubelet/kuberuntime/kuberuntime_manager.go and
//! client-go's flowcontrol backoff, with the kubelet's 600 s expiry): the first restart is
//! immediate; each later one waits `initial`, then twice the previous delay, capped at `max`,
//! counted from the moment the failed instance finished. An instance that finishes more than
//! `reset_after` after the previous restart decision (it ran cleanly for about 10 minutes) finds
//! its entry expired: the restart is immediate again and the sequence starts over.

use std::time::Duration;

use crate::clock::Instant;

/// The kubelet's defaults (`initialCrashLoopBackOff`, `MaxContainerBackOff`, and the expiry
/// override in `newCrashLoopBackOff`).
pub const DEFAULT_INITIAL: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX: Duration = Duration::from_secs(300);
pub const RESET_AFTER: Duration = Duration::from_secs(600);

/// The backoff bounds: `--backoff-initial` and `--backoff-max` of `podvisor run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct BackoffPolicy {
    pub initial: Duration,
    pub max: Duration,
    pub reset_after: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy::new(DEFAULT_INITIAL, DEFAULT_MAX)
    }
}

impl BackoffPolicy {
    /// As the kubelet's `KubeletCrashLoopBackOffMax` does, an initial delay above the max is
    /// lowered to the max.
    pub fn new(initial: Duration, max: Duration) -> BackoffPolicy {
        BackoffPolicy {
            initial: initial.min(max),
            max,
            reset_after: RESET_AFTER,
        }
    }
}

/// One container's backoff entry. `None` until its first restart decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backoff {
    entry: Option<Entry>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    delay: Duration,
    last_update: Instant,
}

/// What to do with a container whose last instance finished at some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start it now (and call `record_restart`).
    StartNow,
    /// Still in back-off: the current delay, and when it ends.
    Wait { delay: Duration, until: Instant },
}

impl Backoff {
    /// The entry, unless it expired: the kubelet measures expiry from the exit being judged
    /// (`finished_at`), not from now, so a wait in progress never expires half-way.
    fn live_entry(&self, policy: &BackoffPolicy, finished_at: Instant) -> Option<Entry> {
        self.entry
            .filter(|e| finished_at - e.last_update <= policy.reset_after)
    }

    /// When a container whose last instance finished at `finished_at` may start again, or
    /// `None` if it may start at once (no live entry).
    pub fn retry_at(&self, policy: &BackoffPolicy, finished_at: Instant) -> Option<Instant> {
        self.live_entry(policy, finished_at)
            .map(|e| finished_at + e.delay)
    }

    /// Whether the container, whose last instance finished at `finished_at`, may start at `now`.
    pub fn decide(&self, policy: &BackoffPolicy, finished_at: Instant, now: Instant) -> Decision {
        match (self.retry_at(policy, finished_at), self.entry) {
            (Some(until), Some(e)) if now < until => Decision::Wait {
                delay: e.delay,
                until,
            },
            _ => Decision::StartNow,
        }
    }

    /// Records a restart at `now` of the container whose instance finished at `finished_at`:
    /// the next delay becomes `initial` if there was no live entry, else twice the current one,
    /// capped at `max`.
    pub fn record_restart(&mut self, policy: &BackoffPolicy, finished_at: Instant, now: Instant) {
        let delay = match self.live_entry(policy, finished_at) {
            None => policy.initial,
            Some(e) => (e.delay * 2).min(policy.max),
        };
        self.entry = Some(Entry {
            delay,
            last_update: now,
        });
    }

    /// The delay the next failure will wait, for messages (`back-off 20s restarting ...`).
    pub fn current_delay(&self) -> Option<Duration> {
        self.entry.map(|e| e.delay)
    }

    /// The entry as it stands: (current delay, last update), for the saved record.
    pub fn entry(&self) -> Option<(Duration, Instant)> {
        self.entry.map(|e| (e.delay, e.last_update))
    }

    /// An entry taken back from a saved record.
    pub fn restore(delay: Duration, last_update: Instant) -> Backoff {
        Backoff {
            entry: Some(Entry { delay, last_update }),
        }
    }

    /// Forgets the entry, as a changed container spec does in the kubelet.
    pub fn reset(&mut self) {
        self.entry = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    /// Crashes a container that runs `run` each time, restarting as soon as allowed, and
    /// returns the waits between each exit and the next start.
    fn waits(policy: BackoffPolicy, runs: &[Duration]) -> Vec<Duration> {
        let mut b = Backoff::default();
        let mut now = Instant::ZERO;
        let mut out = Vec::new();
        for run in runs {
            now = now + *run; // the instance runs, then exits
            let finished = now;
            let start = match b.decide(&policy, finished, now) {
                Decision::StartNow => now,
                Decision::Wait { until, .. } => {
                    // Nothing changes until the deadline; just before it, still waiting.
                    let just_before = until - Duration::from_millis(1);
                    assert!(matches!(
                        b.decide(&policy, finished, just_before),
                        Decision::Wait { .. }
                    ));
                    assert_eq!(b.decide(&policy, finished, until), Decision::StartNow);
                    until
                }
            };
            out.push(start - finished);
            now = start;
            b.record_restart(&policy, finished, now);
        }
        out
    }

    #[test]
    fn the_kubelet_schedule() {
        let crash = vec![Duration::from_millis(100); 9];
        assert_eq!(
            waits(BackoffPolicy::default(), &crash),
            vec![
                S(0),
                S(10),
                S(20),
                S(40),
                S(80),
                S(160),
                S(300),
                S(300),
                S(300)
            ]
        );
    }

    #[test]
    fn flags_change_both_bounds() {
        let crash = vec![Duration::from_millis(10); 6];
        let policy = BackoffPolicy::new(Duration::from_millis(100), Duration::from_millis(500));
        let ms = Duration::from_millis;
        assert_eq!(
            waits(policy, &crash),
            vec![ms(0), ms(100), ms(200), ms(400), ms(500), ms(500)]
        );
        // An initial above the max is lowered to it.
        assert_eq!(BackoffPolicy::new(S(60), S(30)).initial, S(30));
    }

    #[test]
    fn ten_minutes_of_clean_running_resets() {
        // Three quick crashes, then a run of 10 min + 1 s, then quick crashes again.
        let q = Duration::from_millis(100);
        let runs = [q, q, q, S(601), q, q];
        assert_eq!(
            waits(BackoffPolicy::default(), &runs),
            vec![S(0), S(10), S(20), S(0), S(10), S(20)]
        );
        // Exactly 600 s since the last decision is not yet expired (the kubelet uses `>`).
        let runs = [q, q, S(600), q];
        let w = waits(BackoffPolicy::default(), &runs);
        assert_eq!(w[2], S(20), "{w:?}");
        // The reset stays at a fixed 10 minutes whatever the maximum (KEP-5593): with a 3 s
        // maximum, 9 minutes of running still find the entry, 10 minutes and a second do not.
        let three = BackoffPolicy::new(S(3), S(3));
        assert_eq!(
            waits(three, &[q, q, S(540), q]),
            vec![S(0), S(3), S(3), S(3)]
        );
        assert_eq!(
            waits(three, &[q, q, S(601), q]),
            vec![S(0), S(3), S(0), S(3)]
        );
    }

    #[test]
    fn the_delay_counts_from_the_exit_not_the_decision() {
        let policy = BackoffPolicy::default();
        let mut b = Backoff::default();
        b.record_restart(&policy, Instant::ZERO, Instant::ZERO); // first restart, immediate
                                                                 // The instance then ran 4 s and exited at t=4 s; checked at t=9 s: 5 s left.
        let d = b.decide(
            &policy,
            Instant::from_millis(4_000),
            Instant::from_millis(9_000),
        );
        assert_eq!(
            d,
            Decision::Wait {
                delay: S(10),
                until: Instant::from_millis(14_000)
            }
        );
        // An instance that ran longer than the delay restarts at once.
        let d = b.decide(
            &policy,
            Instant::from_millis(30_000),
            Instant::from_millis(30_000),
        );
        assert_eq!(
            d,
            Decision::Wait {
                delay: S(10),
                until: Instant::from_millis(40_000)
            }
        );
        let d = b.decide(
            &policy,
            Instant::from_millis(30_000),
            Instant::from_millis(40_000),
        );
        assert_eq!(d, Decision::StartNow);
    }

    #[test]
    fn reset_forgets() {
        let policy = BackoffPolicy::default();
        let mut b = Backoff::default();
        b.record_restart(&policy, Instant::ZERO, Instant::ZERO);
        b.record_restart(&policy, Instant::ZERO, Instant::ZERO);
        assert_eq!(b.current_delay(), Some(S(20)));
        b.reset();
        assert_eq!(b.current_delay(), None);
        assert_eq!(
            b.decide(&policy, Instant::ZERO, Instant::ZERO),
            Decision::StartNow
        );
    }
}
