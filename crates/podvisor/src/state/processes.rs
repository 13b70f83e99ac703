//! Processes a run left behind when it died, found by pid *and* start time (a pid alone may
//! have been reused), never by name; and the kernel's boot id, which says whether pids and
//! start times from a saved record still mean anything.
//!
//! When `podvisor run` is killed, each container's main process gets SIGKILL from the kernel
//! (its parent-death signal), but what the container started in its process group may live
//! on. A container's process group is its main process's pid, so the leftovers are the
//! processes of that group that started no earlier than the main process did.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::process::stat::{parent_of, pids, ProcStat};
use crate::process::sys;

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), or "" if it cannot be read. It
/// cannot change while a process lives: read once per process.
pub fn boot_id() -> String {
    static BOOT_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        })
        .clone()
}

/// (process group, start time in clock ticks since boot, zombie) of `pid`, from
/// /proc/PID/stat.
pub fn stat(pid: i32) -> Option<(i32, u64, bool)> {
    let s = ProcStat::read(pid)?;
    Some((s.pgrp, s.start_ticks, s.zombie()))
}

/// Whether a `podvisor run` of this user began less than `within` ago and holds no state dir
/// yet, or a process the caller's shell forked just now has not yet become the program it
/// runs: a client waits for them before it looks for pods (`run … &` then a client at once).
pub fn run_starting(within: Duration) -> bool {
    let Ok(me) = std::env::current_exe() else {
        return false;
    };
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let ticks = crate::process::sys::clock_ticks() as f64;
    let age = |pid: i32| start_ticks(pid).map(|t| uptime - t as f64 / ticks);
    let uid = crate::process::sys::getuid();
    let mine = |pid: &i32| {
        std::fs::metadata(format!("/proc/{pid}"))
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == uid)
    };
    let exe = |pid: i32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let me_pid = std::process::id() as i32;
    let parent = parent_of(me_pid);
    let parent_exe = parent.and_then(exe);
    pids().filter(|pid| *pid != me_pid && mine(pid)).any(|pid| {
        let Some(age) = age(pid) else {
            return false;
        };
        let Some(its_exe) = exe(pid) else {
            return false;
        };
        if its_exe == me {
            return age < within.as_secs_f64() && run_here(pid) && !holds_a_state_dir(pid);
        }
        // A sibling still running our shell's program: `cmd &` forks and then execs, and the
        // shell may start us before its child has exec'd. Such a fork lives a moment only.
        age < FORK_TO_EXEC
            && parent.is_some()
            && parent_of(pid) == parent
            && Some(its_exe) == parent_exe
    })
}

/// How long a shell's fork is taken for one that is about to exec (see `run_starting`).
const FORK_TO_EXEC: f64 = 1.0;

/// Whether `pid` is a `podvisor run` that makes its pod under the base this process looks in
/// (not one with `--state-dir`, nor one under another base).
fn run_here(pid: i32) -> bool {
    let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut args = argv.split(|&b| b == 0);
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let base_of = |env: &[u8]| -> Option<Vec<u8>> {
        env.split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(b"PODVISOR_STATE_BASE=".as_slice()))
            .map(<[u8]>::to_vec)
    };
    let ours = std::env::var_os("PODVISOR_STATE_BASE")
        .map(|b| std::os::unix::ffi::OsStrExt::as_bytes(b.as_os_str()).to_vec());
    args.nth(1) == Some(b"run".as_slice())
        && !args.any(|a| a == b"--state-dir" || a.starts_with(b"--state-dir="))
        && base_of(&env) == ours
}

/// Whether `pid` has a state dir's lock open (a run holds it from then on until it ends).
fn holds_a_state_dir(pid: i32) -> bool {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten();
    fds.filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| target.file_name() == Some(std::ffi::OsStr::new(super::LOCK)))
}

/// The start time of `pid` in clock ticks since boot.
pub fn start_ticks(pid: i32) -> Option<u64> {
    stat(pid).map(|(_, t, _)| t)
}

/// SIGKILLs what is left of each (process group, start ticks) and waits (up to `patience`)
/// until none of it runs. Returns how many processes were found in each group, in the order
/// given. /proc is read once for all the groups: a pod of 100 containers on a host of a few
/// hundred processes would otherwise read some 10,000 stat files before it starts again.
pub fn kill_leftovers(groups: &[(i32, u64)], patience: Duration) -> Vec<usize> {
    let index: HashMap<i32, (usize, u64)> = (groups.iter().enumerate())
        .map(|(i, &(pgid, ticks))| (pgid, (i, ticks)))
        .collect();
    let mut found = vec![0; groups.len()];
    let mut left: Vec<(i32, u64)> = Vec::new();
    for pid in pids() {
        let Some((pgrp, start, zombie)) = stat(pid) else {
            continue;
        };
        // Of the group, and no older than its main process (a pid alone may have been reused).
        if let Some(&(i, ticks)) = index.get(&pgrp).filter(|_| !zombie) {
            if start >= ticks {
                found[i] += 1;
                left.push((pid, start));
            }
        }
    }
    for &(pid, _) in &left {
        let _ = sys::send_signal(pid, libc::SIGKILL);
    }
    let give_up = Instant::now() + patience;
    // Not our children: they are gone once /proc no longer shows them alive (a zombie waits
    // for its own parent, and runs nothing).
    while !left.is_empty() && Instant::now() < give_up {
        left.retain(|&(pid, t)| stat(pid).is_some_and(|(_, start, zombie)| start == t && !zombie));
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};

    /// A shell leading a process group of its own, with `n` sleeps in it; the group is
    /// killed when dropped, also when the test fails.
    struct Group(Child);

    impl Group {
        fn start(n: usize) -> Group {
            let child = Command::new("sh")
                .arg("-c")
                .arg(format!("for i in $(seq {n}); do sleep 100 & done; wait"))
                .process_group(0)
                .spawn()
                .expect("sh");
            let group = Group(child);
            let give_up = Instant::now() + Duration::from_secs(20);
            while group.members() < n + 1 {
                assert!(Instant::now() < give_up, "the group's sleeps did not start");
                std::thread::sleep(Duration::from_millis(5));
            }
            group
        }

        fn pgid(&self) -> i32 {
            self.0.id() as i32
        }

        fn members(&self) -> usize {
            let pgid = self.pgid();
            pids()
                .filter(|&pid| stat(pid).is_some_and(|(g, _, zombie)| g == pgid && !zombie))
                .count()
        }
    }

    impl Drop for Group {
        fn drop(&mut self) {
            let _ = sys::send_signal(-self.pgid(), libc::SIGKILL);
            let _ = self.0.wait();
        }
    }

    #[test]
    fn leftovers_are_counted_per_group_killed_and_waited_for() {
        let (two, three) = (Group::start(2), Group::start(3));
        let ticks = |g: &Group| start_ticks(g.pgid()).expect("the shell runs");
        let groups = [
            (three.pgid(), ticks(&three)),
            // A group whose leader started later than these did: a reused pid, not a leftover.
            (two.pgid(), ticks(&two) + 1_000_000),
            // No such group.
            (i32::MAX, 0),
        ];
        assert_eq!(kill_leftovers(&groups, Duration::from_secs(10)), [4, 0, 0]);
        assert_eq!(
            three.members(),
            0,
            "kill_leftovers returned before they were gone"
        );
        assert_eq!(two.members(), 3, "a group that started later was killed");
        let groups = [(two.pgid(), ticks(&two))];
        assert_eq!(kill_leftovers(&groups, Duration::from_secs(10)), [2 + 1]);
        assert_eq!(two.members(), 0);
    }
}
