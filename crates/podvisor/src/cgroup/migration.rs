//! On cgroup v1, a container process joins its cgroups by writing to their `cgroup.procs`
//! files, and each such write is a migration. Every migration takes one lock of the kernel's
//! for all cgroups (`cgroup_threadgroup_rwsem`). Its writers wait for an RCU grace period
//! (6 to 30 ms on a 2-core machine) unless another writer took the lock less than a grace
//! period before. So a container started after a pause waits that long before it runs, and
//! a pod whose containers start a few milliseconds apart pays the wait again and again.
//!
//! A thread of podvisor's keeps that lock warm when a start comes: every 3 ms (every 1 ms on a
//! host whose grace periods turn out shorter than that) it writes "0" into the `cgroup.procs`
//! of the cgroup podvisor runs in. That moves nothing (podvisor is there already) but takes
//! the lock, so that it never goes cold between two starts. It begins when the pod's cgroups
//! are made (the first start's wait then overlaps the pod's preparation), and `LEAD` before
//! each restart the back-off has scheduled; it stops once no container has started for
//! `HOLD`. On a host whose hierarchies are mounted with `favordynmods` the lock is never cold,
//! and on cgroup v2 podvisor clones each process into its cgroup (`CLONE_INTO_CGROUP`), with
//! no migration: there is nothing to keep warm then.
//!
//! Writing "0" would move podvisor back into that cgroup if something else (an admin, a
//! rules daemon) had moved it elsewhere since. So before each write the thread reads
//! `/proc/self/cgroup` and checks that podvisor is still where it started; once it is not, the
//! thread ends, and the starts wait as they would without it.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long after the last start the lock is kept warm: longer than the gap between two
/// starts of a burst, so that the burst never waits again. (Each write costs 20 to 30 µs of
/// CPU, its wakeup included.)
const HOLD: Duration = Duration::from_millis(30);

/// How long before a scheduled restart the lock is taken first: longer than a grace period.
const LEAD: Duration = Duration::from_millis(40);

/// How long the lock is kept warm once the pod's cgroups are made: its preparation (volumes,
/// images there already) until its first containers start.
const PREPARATION: Duration = Duration::from_millis(500);

/// How often the lock is taken while warm: within the shortest grace period seen (6 ms on a
/// 2-core machine at 250 Hz; about half that is possible at 1000 Hz). Each write costs CPU (a
/// wakeup, a read of `/proc/self/cgroup`, the write), so not more often than needed...
const PERIOD: Duration = Duration::from_millis(3);

/// ... unless a grace period here turns out shorter: when writes that came a period after the
/// one before keep finding the lock cold (they waited longer than `COLD`), half or more of the
/// last `RECENT`, the thread takes it every `PERIOD_SHORT` from then on. A cold write now and
/// then is something else: a write that waited behind other cgroup operations or was
/// preempted, which a busy machine does to a few in a hundred.
const PERIOD_SHORT: Duration = Duration::from_millis(1);

/// A write that takes longer than this waited for a grace period (a warm one takes
/// microseconds).
const COLD: Duration = Duration::from_millis(1);

/// How many of the last writes are looked at (the bits of `Period::recent`).
const RECENT: u32 = u8::BITS;

/// How often the thread takes the lock while warm (see `PERIOD`), from what its writes found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Period {
    every: Duration,
    /// Which of the last `RECENT` writes that came a period after the one before found the
    /// lock cold (a bit each, the latest lowest).
    recent: u8,
    /// Whether the last write came a period ago (the thread has not paused since).
    again: bool,
}

impl Default for Period {
    fn default() -> Period {
        Period {
            every: PERIOD,
            recent: 0,
            again: false,
        }
    }
}

impl Period {
    /// A write that took `took`. The first after a pause finds the lock cold by design: only
    /// the others tell.
    fn wrote(&mut self, took: Duration) {
        if self.again {
            self.recent = self.recent << 1 | u8::from(took > COLD);
            if self.recent.count_ones() * 2 >= RECENT {
                self.every = PERIOD_SHORT;
            }
        }
        self.again = true;
    }

    /// The thread paused (nothing to keep warm for a while).
    fn paused(&mut self) {
        self.again = false;
    }
}

#[derive(Debug, Default)]
struct Wanted {
    /// Warm until then (a start now).
    until: Option<Instant>,
    /// The next start the backoff has scheduled: warm from `LEAD` before it to `HOLD` after.
    expected: Option<Instant>,
    /// The pod's cgroups are going: the thread ends.
    done: bool,
}

impl Wanted {
    /// Whether the lock is to be kept warm at `now`; else when it is next, if known.
    fn warm_at(&self, now: Instant) -> Result<(), Option<Instant>> {
        if self.until.is_some_and(|u| now < u) {
            return Ok(());
        }
        match self.expected {
            Some(at) if now + LEAD < at => Err(Some(at - LEAD)),
            Some(at) if now < at + HOLD => Ok(()),
            _ => Err(None),
        }
    }
}

/// The thread that keeps the migration lock warm while containers start (see the module).
#[derive(Debug)]
pub struct Warmer {
    wanted: Arc<(Mutex<Wanted>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Warmer {
    /// A warmer writing into `procs`, the `cgroup.procs` of the v1 cgroup this process is in
    /// in the hierarchy of `controller` (`memory`), already warming (the pod's first
    /// containers start soon).
    pub fn start(procs: &Path, controller: &str) -> io::Result<Warmer> {
        let file = std::fs::OpenOptions::new().write(true).open(procs)?;
        let here = Membership::of_self(controller)?;
        let wanted: Arc<(Mutex<Wanted>, Condvar)> = Arc::default();
        let theirs = wanted.clone();
        let thread = std::thread::Builder::new()
            .name("cgroup-warmer".into())
            .spawn(move || warm(&file, here, &theirs))?;
        let warmer = Warmer {
            wanted,
            thread: Some(thread),
        };
        warmer.warm_for(PREPARATION);
        Ok(warmer)
    }

    /// A container is about to start: the lock stays warm until `HOLD` after now.
    pub fn starting(&self) {
        self.warm_for(HOLD);
    }

    /// The lock stays warm for `time` from now (or longer, if it was to be already).
    fn warm_for(&self, time: Duration) {
        let (lock, wake) = &*self.wanted;
        let mut wanted = lock.lock().unwrap_or_else(|e| e.into_inner());
        let until = Instant::now() + time;
        wanted.until = Some(wanted.until.map_or(until, |u| u.max(until)));
        wake.notify_one();
    }

    /// The next restart the pod's backoff has scheduled (`None`: none): the lock is warm
    /// from `LEAD` before it.
    pub fn expect(&self, at: Option<Instant>) {
        let (lock, wake) = &*self.wanted;
        let mut wanted = lock.lock().unwrap_or_else(|e| e.into_inner());
        if wanted.expected != at {
            wanted.expected = at;
            wake.notify_one();
        }
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        let (lock, wake) = &*self.wanted;
        lock.lock().unwrap_or_else(|e| e.into_inner()).done = true;
        wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Where this process is in one v1 hierarchy: its line of `/proc/self/cgroup`
/// (`4:memory:/user.slice`), with that file kept open to read it again.
struct Membership {
    file: File,
    line: String,
    buf: Vec<u8>,
}

impl Membership {
    /// This process's line for `controller`, as it is now.
    fn of_self(controller: &str) -> io::Result<Membership> {
        let mut me = Membership {
            file: File::open("/proc/self/cgroup")?,
            line: String::new(),
            buf: vec![0; 4096],
        };
        let text = String::from_utf8_lossy(me.read()?).into_owned();
        let named = |cs: &str| cs.split(',').any(|c| c == controller);
        me.line = super::membership(&text, &named)
            .ok_or_else(|| io::Error::other(format!("not in a {controller} cgroup")))?
            .0
            .to_string();
        Ok(me)
    }

    /// `/proc/self/cgroup` now.
    fn read(&mut self) -> io::Result<&[u8]> {
        read_from_start(&self.file, &mut self.buf)
    }

    /// Whether this process is still where it was (no allocation: it runs every few
    /// milliseconds while warm).
    fn still(&mut self) -> bool {
        let Membership { file, line, buf } = self;
        read_from_start(file, buf)
            .is_ok_and(|text| text.split(|b| *b == b'\n').any(|l| l == line.as_bytes()))
    }
}

/// A `/proc` file's text, read from its start again (the kernel writes it anew), into `buf`.
fn read_from_start<'b>(file: &File, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    loop {
        let n = file.read_at(buf, 0)?;
        if n < buf.len() {
            return Ok(&buf[..n]);
        }
        buf.resize(buf.len() * 2, 0);
    }
}

/// The thread: takes the lock every period while wanted, sleeps otherwise. A write that
/// fails (the cgroup is gone), or podvisor moved elsewhere, ends it: the starts wait as they
/// would without it.
fn warm(mut procs: &File, mut here: Membership, wanted: &(Mutex<Wanted>, Condvar)) {
    let (lock, wake) = wanted;
    let mut period = Period::default();
    let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if state.done {
            return;
        }
        state = match state.warm_at(Instant::now()) {
            Ok(()) => {
                drop(state);
                if !here.still() {
                    return;
                }
                let before = Instant::now();
                if procs.write_all(b"0").is_err() {
                    return;
                }
                period.wrote(before.elapsed());
                std::thread::sleep(period.every);
                lock.lock().unwrap_or_else(|e| e.into_inner())
            }
            Err(Some(next)) => {
                period.paused();
                let wait = next.saturating_duration_since(Instant::now());
                let (state, _) = wake
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|e| e.into_inner());
                state
            }
            Err(None) => {
                period.paused();
                wake.wait(state).unwrap_or_else(|e| e.into_inner())
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_after_a_start_and_ahead_of_a_scheduled_one() {
        let t0 = Instant::now();
        let ms = |n| Duration::from_millis(n);
        let mut w = Wanted::default();
        assert_eq!(w.warm_at(t0), Err(None));
        w.until = Some(t0 + HOLD);
        assert_eq!(w.warm_at(t0 + HOLD - ms(1)), Ok(()));
        assert_eq!(w.warm_at(t0 + HOLD), Err(None));
        w.expected = Some(t0 + ms(10_000));
        assert_eq!(w.warm_at(t0 + HOLD - ms(1)), Ok(()));
        assert_eq!(w.warm_at(t0 + HOLD), Err(Some(t0 + ms(10_000) - LEAD)));
        assert_eq!(w.warm_at(t0 + ms(10_000) - LEAD), Ok(()));
        assert_eq!(w.warm_at(t0 + ms(10_000) + HOLD - ms(1)), Ok(()));
        assert_eq!(w.warm_at(t0 + ms(10_000) + HOLD), Err(None));
    }

    #[test]
    fn the_period_shortens_once_writes_a_period_apart_keep_finding_the_lock_cold() {
        let us = Duration::from_micros;
        let (warm, cold) = (us(40), us(5_000));
        let mut p = Period::default();
        assert_eq!(p.every, PERIOD);
        // Fast writes, and the first write after a pause however slow: nothing changes.
        p.wrote(cold);
        p.wrote(warm);
        p.paused();
        p.wrote(us(20_000));
        assert_eq!((p.every, p.recent), (PERIOD, 0));
        // A cold write now and then (a busy machine): the period stays.
        for n in 0..200 {
            p.wrote(if n % 5 == 0 { cold } else { warm });
            assert_eq!(p.every, PERIOD, "write {n}");
        }
        // Every other one cold (a grace period about as long as the period): it shortens.
        let mut p = Period::default();
        p.wrote(warm);
        for _ in 0..RECENT / 2 - 1 {
            p.wrote(cold);
            p.wrote(warm);
        }
        assert_eq!(p.every, PERIOD);
        p.wrote(cold);
        assert_eq!(p.every, PERIOD_SHORT);
        // Every one cold: it shortens at the fourth, and stays so, pauses or not.
        let mut p = Period::default();
        p.wrote(warm);
        for _ in 0..RECENT / 2 - 1 {
            p.wrote(cold);
        }
        assert_eq!(p.every, PERIOD);
        p.wrote(cold);
        assert_eq!(p.every, PERIOD_SHORT);
        p.paused();
        for _ in 0..20 {
            p.wrote(warm);
        }
        assert_eq!(p.every, PERIOD_SHORT);
    }
}
