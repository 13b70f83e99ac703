//! Starters: threads that make containers' processes, two at once, so that the starts of a
//! batch (a pod's start, restarts due together) overlap. A start spends most of its time in its
//! child, before the exec (mounts, pivot_root, seccomp; the kernel waits there too, for an RCU
//! grace period as the host's root is unmounted), and the thread that clones the child waits
//! for its exec (`sys::spawn`, `CLONE_VFORK`): one thread made the children of a batch one after
//! the other, with a core idle beside them.
//!
//! The thread that owns the starters (the keeper's, or a run's without a keeper) prepares each
//! start (pipes, cgroup files, namespaces) and hands it here; a starter spawns it and puts the
//! outcome in `done`. The keeper is woken through `wake` (its epoll: `Starters::polled`), a run
//! waits for the start it answers next (`wait`, no wake socket: `Starters::new`): either answers
//! in the order it asked. Starters live as long as the process: a container's parent-death
//! signal follows the thread that cloned it. They inherit the signal mask of the thread that
//! starts them, which must block what a signalfd reads.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};

use crate::process::sys::{self, ChildSetup, Inherited};

/// How many children are made at once.
pub const STARTERS: usize = 2;

/// A start to make: what `sys::spawn` takes, and the number it is answered by.
pub struct Job {
    pub seq: u64,
    pub argv: Vec<OsString>,
    pub setup: ChildSetup,
    pub inherited: Inherited,
    /// The keeper's end of the control channel of the run that asked: a start is not made
    /// once that run is gone (`keeper::Keeper::control_readable`). A run's own starts have none.
    pub asker: Option<Arc<UnixStream>>,
}

#[derive(Default)]
struct Shared {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
    done: Mutex<Vec<(u64, io::Result<i32>)>>,
    made: Condvar,
}

pub struct Starters {
    shared: Arc<Shared>,
    /// Of `polled` starters: readable when a start is made, a byte for each (the keeper's epoll
    /// watches it).
    pub wake: Option<UnixStream>,
}

impl Starters {
    /// Starts the starters of a thread that waits for its starts (`wait`).
    ///
    /// Start them early (a run's before its pod starts), so that their own start is not on the
    /// first container's. Idle, they wait without waking. `stall` names the point where a test
    /// can hold a start (debug builds).
    pub fn new(stall: &'static str) -> io::Result<Starters> {
        Starters::started(stall, None)
    }

    /// Starts the starters of a thread that polls for its starts (the keeper's, as it starts):
    /// `wake` is readable when one is made.
    pub fn polled(stall: &'static str) -> io::Result<Starters> {
        let (wake, wake_write) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        // A full socket already has a wakeup waiting: a starter never blocks on it.
        wake_write.set_nonblocking(true)?;
        let mut made = Starters::started(stall, Some(wake_write))?;
        made.wake = Some(wake);
        Ok(made)
    }

    fn started(stall: &'static str, wake_write: Option<UnixStream>) -> io::Result<Starters> {
        let shared = Arc::new(Shared::default());
        for n in 0..STARTERS {
            let shared = Arc::clone(&shared);
            let wake = wake_write.as_ref().map(UnixStream::try_clone).transpose()?;
            std::thread::Builder::new()
                .name(format!("starter-{n}"))
                .spawn(move || starter(&shared, wake, stall))?;
        }
        Ok(Starters { shared, wake: None })
    }

    /// Hands a start to the starters.
    pub fn start(&mut self, job: Job) {
        let mut jobs = self.shared.jobs.lock().unwrap_or_else(|e| e.into_inner());
        jobs.push_back(job);
        self.shared.ready.notify_one();
    }

    /// The starts made since the last call, by number.
    pub fn take_done(&mut self) -> Vec<(u64, io::Result<i32>)> {
        self.drain_wake();
        let mut done = self.shared.done.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *done)
    }

    /// Waits until start `seq` is made: its outcome.
    pub fn wait(&mut self, seq: u64) -> io::Result<i32> {
        self.drain_wake();
        let mut done = self.shared.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(i) = done.iter().position(|(s, _)| *s == seq) {
                return done.swap_remove(i).1;
            }
            done = self
                .shared
                .made
                .wait(done)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    fn drain_wake(&mut self) {
        let Some(wake) = self.wake.as_mut() else {
            return;
        };
        let mut sink = [0u8; 64];
        while matches!(wake.read(&mut sink), Ok(n) if n > 0) {}
    }
}

/// A starter's life: the next job, spawned, its outcome told.
fn starter(shared: &Shared, mut wake: Option<UnixStream>, stall: &str) {
    loop {
        let job = {
            let mut jobs = shared.jobs.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                match jobs.pop_front() {
                    Some(job) => break job,
                    None => jobs = shared.ready.wait(jobs).unwrap_or_else(|e| e.into_inner()),
                }
            }
        };
        // A test holds a start here to see the next one made beside it (debug builds).
        crate::process::failpoint::stall(stall);
        let gone = match &job.asker {
            Some(asker) => !matches!(sys::hung_up(asker.as_raw_fd()), Ok(false)),
            None => false,
        };
        let result = match gone {
            false => sys::spawn(&job.argv, job.setup, &job.inherited),
            true => Err(io::Error::other("the run that asked for it is gone")),
        };
        shared
            .done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((job.seq, result));
        shared.made.notify_all();
        if let Some(wake) = wake.as_mut() {
            let _ = wake.write(&[1]);
        }
    }
}
