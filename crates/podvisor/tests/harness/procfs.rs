//! What the tests read of processes in /proc (their state, parents, children, mounts and
//! resident code), and signals sent with kill(1), so that tests need no `unsafe`.

use std::path::Path;
use std::process::{Command, Stdio};

use super::{Output, Run};

/// Sends a signal with kill(1), so that tests need no `unsafe`.
pub fn send(pid: i32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

pub(super) fn stat(pid: i32) -> Option<(String, String, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let mut f = s[close + 1..].split_whitespace();
    let state = f.next()?.to_string();
    let ppid = f.next()?.parse().ok()?;
    Some((s[open + 1..close].to_string(), state, ppid))
}

pub fn is_zombie(pid: i32) -> bool {
    stat(pid).is_some_and(|(_, state, _)| state == "Z")
}

pub(super) fn ppid(pid: i32) -> Option<i32> {
    stat(pid).map(|(_, _, p)| p)
}

pub(super) fn describe(pid: i32) -> String {
    match stat(pid) {
        Some((name, state, ppid)) => format!("{pid} {name} state {state} ppid {ppid}"),
        None => format!("{pid} (gone)"),
    }
}

/// The mount points of this process's mount namespace (`/proc/self/mountinfo`'s fifth field;
/// none where it cannot be read).
pub fn mount_points() -> Vec<String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let points = mountinfo.lines().filter_map(|l| l.split(' ').nth(4));
    points.map(String::from).collect()
}

/// `sh -c script` in the mount namespace of process `pid` (nsenter): a mount made or taken
/// away there only.
pub fn sh_in_mounts_of(pid: i32, script: &str) -> Output {
    Run::new("nsenter")
        .arg(format!("--mount=/proc/{pid}/ns/mnt"))
        .args(["sh", "-c", script])
        .output()
}

/// The signal numbers recorded in a testbin `signals --out` file.
pub fn recorded_signals(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("signal "))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The children of `pid` with their command names, from /proc.
pub fn children_of(pid: i32) -> Vec<(i32, String)> {
    child_pids(pid)
        .into_iter()
        .map(|c| (c, stat(c).map(|(name, _, _)| name).unwrap_or_default()))
        .collect()
}

/// The children of process `pid`, whichever of its threads made them (a run's and a keeper's
/// starters make containers: `/proc/PID/task/TID/children` lists a thread's own).
pub fn child_pids(pid: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok()),
        );
    }
    pids
}

/// The resident size of the code of process `pid`'s program (its file's executable
/// mappings), KiB.
pub fn code_kib(pid: i32) -> u64 {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    file_code_kib(pid, |file| file == exe).unwrap_or(0)
}

/// The resident size of the executable mappings of process `pid` of the files `which` picks,
/// KiB; `None` where it maps none of them.
pub fn file_code_kib(pid: i32, which: impl Fn(&Path) -> bool) -> Option<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut code = false;
    let mut kib = None;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            let perms = fields.get(1).copied().unwrap_or("");
            code = perms.contains('x') && fields.get(5).is_some_and(|f| which(Path::new(f)));
        } else if let Some(v) = line.strip_prefix("Rss:").filter(|_| code) {
            let v = v.trim().trim_end_matches("kB").trim();
            *kib.get_or_insert(0) += v.parse::<u64>().unwrap_or(0);
        }
    }
    kib
}
