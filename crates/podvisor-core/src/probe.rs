//! The probe worker: when a probe runs and what its outcomes publish, per container instance.
//!
//! Reproduces pkg/kubelet/prober/worker.go in its newer, instance-bound form
//! (docs/kubelet.md, Probes): a worker per probe of a container instance; initial results
//! readiness Failure, liveness Success, startup Unknown; nothing runs before
//! `initialDelaySeconds` after the start; then every `periodSeconds`; liveness and readiness
//! idle until startup has succeeded, and readiness runs at once when it does; equal results in
//! a row are counted, Failure is published at `failureThreshold`, Success at
//! `successThreshold`; a probe *error* is thrown away uncounted; after a published liveness
//! Failure the worker holds (the container is being killed), and the startup worker holds after
//! any published result. Pure: the shell runs the probe and reports the outcome.

use std::time::Duration;

use crate::clock::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    /// As Kubernetes writes it in events ("Liveness probe failed: ...").
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }
}

/// A published result. `Unknown` exists only as the startup probe's initial value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure,
    Unknown,
}

/// What one attempt gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(String),
    /// Success with something to say (an HTTP redirect not followed): a `ProbeWarning` event.
    Warning(String),
    /// The probe could not be run (e.g. a named port that does not resolve): not counted.
    Error(String),
}

/// A probe's timing with the API defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct ProbeTiming {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Default for ProbeTiming {
    /// `SetDefaults_Probe`: period 10 s, timeout 1 s, success 1, failure 3, no initial delay.
    fn default() -> Self {
        ProbeTiming {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: 1,
            failure_threshold: 3,
        }
    }
}

/// A change of the published result, for events and container status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub result: ProbeResult,
    /// The failing attempt's message (for the `Unhealthy` event), when it is a Failure.
    pub message: Option<String>,
}

/// One probe of one container instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub kind: ProbeKind,
    timing: ProbeTiming,
    result: ProbeResult,
    last: Option<bool>,
    run: u32,
    on_hold: bool,
    next_run: Instant,
    /// For liveness and readiness: whether startup has succeeded (or there is no startup
    /// probe).
    started: bool,
    started_at: Instant,
}

impl Worker {
    /// A worker for an instance that started at `started_at`. `gated`: liveness or readiness
    /// of a container with a startup probe, which wait until it succeeds.
    pub fn new(kind: ProbeKind, timing: ProbeTiming, started_at: Instant, gated: bool) -> Worker {
        let result = match kind {
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Startup => ProbeResult::Unknown,
        };
        Worker {
            kind,
            timing,
            result,
            last: None,
            run: 0,
            on_hold: false,
            next_run: started_at + timing.initial_delay,
            started: !(gated && kind != ProbeKind::Startup),
            started_at,
        }
    }

    pub fn result(&self) -> ProbeResult {
        self.result
    }

    /// When the next attempt is due, or `None` while the worker idles or holds.
    pub fn next_run(&self) -> Option<Instant> {
        (!self.on_hold && self.started).then_some(self.next_run)
    }

    /// Delays the first attempt to at least `jitter` after the start (probe spreading).
    pub fn delay_first(&mut self, jitter: Duration) {
        if self.last.is_none() {
            self.next_run = self.next_run.max(self.started_at + jitter);
        }
    }

    /// The startup probe succeeded: liveness and readiness begin; readiness runs at once.
    pub fn startup_succeeded(&mut self, now: Instant) {
        if self.started {
            return;
        }
        self.started = true;
        self.next_run = match self.kind {
            // At once (not waiting out a first-probe jitter), but never before the initial
            // delay.
            ProbeKind::Readiness => now.max(self.started_at + self.timing.initial_delay),
            _ => self.next_run.max(now),
        };
    }

    /// Whether an attempt should start at `now` (and, if so, schedules the next one).
    pub fn due(&mut self, now: Instant) -> bool {
        match self.next_run() {
            Some(at) if now >= at => {
                // A ticker: the next attempt one period after this one was due, skipping
                // periods missed entirely.
                let mut next = at + self.timing.period;
                while next <= now {
                    next = next + self.timing.period;
                }
                self.next_run = next;
                true
            }
            _ => false,
        }
    }

    /// Records an attempt's outcome; returns the newly published result, if it changed.
    pub fn report(&mut self, outcome: Outcome) -> Option<Published> {
        if self.on_hold {
            return None;
        }
        let (ok, message) = match outcome {
            Outcome::Success | Outcome::Warning(_) => (true, None),
            Outcome::Failure(m) => (false, Some(m)),
            Outcome::Error(_) => return None,
        };
        if self.last == Some(ok) {
            self.run += 1;
        } else {
            self.last = Some(ok);
            self.run = 1;
        }
        let threshold = if ok {
            self.timing.success_threshold
        } else {
            self.timing.failure_threshold
        };
        if self.run < threshold {
            return None;
        }
        let result = if ok {
            ProbeResult::Success
        } else {
            ProbeResult::Failure
        };
        let changed = result != self.result;
        self.result = result;
        let hold = match self.kind {
            ProbeKind::Liveness => !ok,
            ProbeKind::Startup => true,
            ProbeKind::Readiness => false,
        };
        if hold {
            self.on_hold = true;
            self.run = 0;
        }
        // A liveness Failure always acts (it kills), even if the published value was already
        // Failure; others only on a change.
        (changed || (self.kind == ProbeKind::Liveness && !ok)).then_some(Published {
            result,
            message: message.filter(|_| !ok),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn timing(delay: u64, period: u64, success: u32, failure: u32) -> ProbeTiming {
        ProbeTiming {
            initial_delay: Duration::from_secs(delay),
            period: Duration::from_secs(period),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    #[test]
    fn initial_results() {
        let w = |k| Worker::new(k, ProbeTiming::default(), t(0), false).result();
        assert_eq!(w(ProbeKind::Readiness), ProbeResult::Failure);
        assert_eq!(w(ProbeKind::Liveness), ProbeResult::Success);
        assert_eq!(w(ProbeKind::Startup), ProbeResult::Unknown);
    }

    #[test]
    fn initial_delay_then_every_period() {
        let mut w = Worker::new(ProbeKind::Readiness, timing(5, 2, 1, 3), t(1_000), false);
        assert!(!w.due(t(5_999)));
        assert!(w.due(t(6_000)));
        assert!(!w.due(t(7_999)));
        assert!(w.due(t(8_000)));
        // A late tick skips the periods it missed rather than bursting.
        assert!(w.due(t(15_500)));
        assert_eq!(w.next_run(), Some(t(16_000)));
    }

    #[test]
    fn thresholds_count_equal_results_in_a_row() {
        let mut w = Worker::new(ProbeKind::Readiness, timing(0, 1, 2, 3), t(0), false);
        assert_eq!(w.report(Outcome::Success), None);
        assert_eq!(w.report(Outcome::Failure("x".into())), None);
        assert_eq!(w.report(Outcome::Success), None);
        assert_eq!(
            w.report(Outcome::Success),
            Some(Published {
                result: ProbeResult::Success,
                message: None
            })
        );
        assert_eq!(w.report(Outcome::Failure("a".into())), None);
        // An error is not counted and does not break the run.
        assert_eq!(w.report(Outcome::Error("port".into())), None);
        assert_eq!(w.report(Outcome::Failure("b".into())), None);
        let p = w.report(Outcome::Failure("c".into()));
        assert_eq!(
            p,
            Some(Published {
                result: ProbeResult::Failure,
                message: Some("c".into())
            })
        );
        // Readiness keeps probing and comes back.
        assert_eq!(w.report(Outcome::Success), None);
        assert!(w.report(Outcome::Success).is_some());
    }

    #[test]
    fn liveness_holds_after_a_published_failure() {
        let mut w = Worker::new(ProbeKind::Liveness, timing(0, 1, 1, 2), t(0), false);
        assert_eq!(w.report(Outcome::Failure("1".into())), None);
        assert_eq!(
            w.report(Outcome::Failure("2".into())).map(|p| p.result),
            Some(ProbeResult::Failure)
        );
        assert_eq!(w.next_run(), None, "holds until the new instance");
        assert!(!w.due(t(100_000)));
        assert_eq!(w.report(Outcome::Failure("3".into())), None);
    }

    #[test]
    fn startup_gates_liveness_and_readiness() {
        let mut startup = Worker::new(ProbeKind::Startup, timing(0, 1, 1, 3), t(0), true);
        let mut ready = Worker::new(ProbeKind::Readiness, timing(0, 10, 1, 3), t(0), true);
        let mut live = Worker::new(ProbeKind::Liveness, timing(0, 10, 1, 3), t(0), true);
        assert!(
            !ready.due(t(50_000)) && !live.due(t(50_000)),
            "idle until started"
        );
        assert!(startup.due(t(0)));
        assert_eq!(
            startup.report(Outcome::Success).map(|p| p.result),
            Some(ProbeResult::Success)
        );
        assert_eq!(
            startup.next_run(),
            None,
            "startup is done for this instance"
        );
        ready.startup_succeeded(t(3_500));
        live.startup_succeeded(t(3_500));
        assert!(ready.due(t(3_500)), "readiness runs at once");
        assert!(live.due(t(3_500)));
        assert_eq!(ready.next_run(), Some(t(13_500)));
    }
}
