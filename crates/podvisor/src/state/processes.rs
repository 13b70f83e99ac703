//! Processes a run left behind when it died, found by pid *and* start time (a pid alone may
//! have been reused), never by name; and the kernel's boot id, which says whether pids and
//! start times from a saved record still mean anything.
//!
//! When `podvisor run` is killed, each container's main process gets SIGKILL from the kernel
//! (its parent-death signal), but what the container started in its process group may live
//! on. A container's process group is its main process's pid, so the leftovers are the
//! processes of that group that started no earlier than the main process did.

use std::time::{Duration, Instant};

use crate::process::sys;

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), or "" if it cannot be read.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// (process group, start time in clock ticks since boot, zombie) of `pid`, from
/// /proc/PID/stat.
pub fn stat(pid: i32) -> Option<(i32, u64, bool)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command, which ends with the last ')': state is field 3.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let zombie = f.first()? == &"Z";
    let pgrp = f.get(2)?.parse().ok()?;
    let start = f.get(19)?.parse().ok()?;
    Some((pgrp, start, zombie))
}

/// The start time of `pid` in clock ticks since boot.
pub fn start_ticks(pid: i32) -> Option<u64> {
    stat(pid).map(|(_, t, _)| t)
}

/// Live (not zombie) processes of the process group `pgid` that started at `ticks` or later.
pub fn group_members(pgid: i32, ticks: u64) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((pgrp, start, zombie)) = stat(pid) {
            if pgrp == pgid && start >= ticks && !zombie {
                found.push(pid);
            }
        }
    }
    found
}

/// SIGKILLs what is left of each (process group, start ticks) and waits (up to `patience`)
/// until none of it runs. Returns how many processes were found.
pub fn kill_leftovers(groups: &[(i32, u64)], patience: Duration) -> usize {
    let mut left: Vec<(i32, u64)> = Vec::new();
    for &(pgid, ticks) in groups {
        for pid in group_members(pgid, ticks) {
            if let Some(t) = start_ticks(pid) {
                left.push((pid, t));
            }
        }
    }
    let found = left.len();
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
