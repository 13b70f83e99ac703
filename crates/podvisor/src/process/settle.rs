//! What a process that holds containers for months (`run`, a keeper) gives back once a stretch
//! of work is over: the pages its heap freed (`sys::give_back_free_heap`) and the pages of its
//! own code and constants (`sys::forget_read_only_pages`), so that what it took to read, plan
//! and start its pod does not stay resident while only its loop runs. Its own pages go at most
//! once a minute: a pod in a crash loop settles between restarts, and each restart would fault
//! the same code back in.

use std::time::{Duration, Instant};

use crate::process::{failpoint, sys};

/// How long a process goes without work before it gives memory back.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The least time between two givings back of the program's own pages.
pub const CODE_SETTLE: Duration = Duration::from_secs(60);

/// Whether memory was given back since the last work, and when the program's own pages last
/// were.
#[derive(Debug, Default)]
pub struct Settling {
    settled: bool,
    code_given: Option<Instant>,
}

impl Settling {
    /// Work came (events): memory is given back again once it is over.
    pub fn work(&mut self) {
        self.settled = false;
    }

    /// Whether memory is to be given back at the next idle moment.
    pub fn pending(&self) -> bool {
        !self.settled
    }

    /// Nothing to do for `SETTLE` at `now`: gives back what the last stretch of work freed in
    /// the heap and, unless they went less than `CODE_SETTLE` ago, the program's own pages
    /// (both after the debug builds' stall point `point`). Whether the program's pages went.
    pub fn idle(&mut self, now: Instant, point: &str) -> bool {
        if self.settled {
            return false;
        }
        self.settled = true;
        failpoint::stall(point);
        sys::give_back_free_heap();
        if self
            .code_given
            .is_some_and(|at| now.saturating_duration_since(at) < CODE_SETTLE)
        {
            return false;
        }
        let _ = sys::forget_read_only_pages();
        self.code_given = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_goes_back_once_per_stretch_of_work_and_code_at_most_once_a_minute() {
        let _one = sys::ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = Settling::default();
        let t0 = Instant::now();
        assert!(s.pending());
        assert!(s.idle(t0, "test.settle"), "the first idle moment");
        assert!(!s.pending());
        assert!(!s.idle(t0 + SETTLE, "test.settle"), "no work since");
        s.work();
        assert!(s.pending());
        assert!(!s.idle(t0 + Duration::from_secs(10), "test.settle"));
        assert!(!s.pending(), "the heap went back");
        s.work();
        assert!(s.idle(t0 + CODE_SETTLE, "test.settle"), "a minute after");
    }
}
