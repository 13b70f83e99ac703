//! Time as the core sees it: a monotonic instant passed in by the caller, and the `Clock` trait
//! the shell implements with the real clock and tests implement with a fake one.
//!
//! The core never reads a clock (clippy's `disallowed-methods` enforces it in this crate): every
//! function that depends on time takes `now: Instant`.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point on a monotonic timeline, as time elapsed since an origin the caller chooses (the
/// supervisor's start, or zero in tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The origin of the timeline.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    pub fn from_origin(elapsed: Duration) -> Instant {
        Instant(elapsed)
    }

    pub fn from_millis(ms: u64) -> Instant {
        Instant(Duration::from_millis(ms))
    }

    /// Time since the origin.
    pub fn since_origin(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0 + d)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturating at the origin.
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an instant before `other` gives zero rather than a panic.
    fn sub(self, other: Instant) -> Duration {
        self.saturating_since(other)
    }
}

/// A source of `now`.
pub trait Clock {
    fn now(&self) -> Instant;
}

/// A clock that moves only when told to, for tests of timing rules in milliseconds.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: std::cell::Cell<Instant>,
}

impl FakeClock {
    pub fn new() -> FakeClock {
        FakeClock::default()
    }

    pub fn advance(&self, d: Duration) {
        self.now.set(self.now.get() + d);
    }

    pub fn set(&self, at: Instant) {
        self.now.set(at);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.now.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_told() {
        let clock = FakeClock::new();
        assert_eq!(clock.now(), Instant::ZERO);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now(), Instant::from_millis(1500));
        assert_eq!(
            clock.now() - Instant::from_millis(500),
            Duration::from_secs(1)
        );
        assert_eq!(Instant::from_millis(500) - clock.now(), Duration::ZERO);
    }
}
