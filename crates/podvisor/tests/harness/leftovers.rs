//! What a test may not leave behind, found and taken back: processes carrying its tag (zombies
//! too), and the cgroups and mounts of a pod whose run ended it.

use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{describe, is_zombie, mount_points, ppid, remove_cgroup_tree, send, Proc};

/// Where a `podvisor run` keeps its pod's state: what names its cgroups (their names end
/// with a hash of the state dir), so that a test can look for the ones it left.
#[derive(Debug, Default, Clone)]
pub(super) struct StateDirs {
    /// `--state-dir DIR`.
    dirs: Vec<PathBuf>,
    /// `PODVISOR_STATE_BASE`: a state dir per pod under it (`BASE/NAMESPACE/POD`).
    base: Option<PathBuf>,
}

impl Proc {
    /// Fails the test if any process carrying this run's tag is still there (zombies too),
    /// after giving the kernel a moment to finish tearing down.
    pub fn assert_no_leftovers(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = tagged(&self.tag);
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                let described: Vec<String> = left.iter().map(|p| describe(*p)).collect();
                panic!("processes left behind: {described:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // A run that ended its pod leaves none of the pod's cgroups or mounts either. (One
        // killed by a signal leaves them to the next run on its state dir, which removes them
        // first.)
        self.running();
        let Some(state) = &self.pod_state else {
            return;
        };
        if self.ended.is_some_and(|s| s.signal().is_some()) {
            return;
        }
        loop {
            let left = leftover_cgroups(state);
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                // Removed here, so that a failing test leaves nothing either.
                for dir in &left {
                    remove_cgroup_tree(dir);
                }
                panic!(
                    "cgroups left behind: {left:?} (the run's stderr: {:?})",
                    self.stderr
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mounts = leftover_mounts(state);
        if !mounts.is_empty() {
            for m in &mounts {
                let _ = Command::new("umount").arg("-l").arg(m).status();
            }
            panic!(
                "mounts left behind: {mounts:?} (the run's stderr: {:?})",
                self.stderr
            );
        }
    }
}

/// Whether a process holds the flock on `file`, asked with flock(1), so that tests need no
/// `unsafe`.
fn lock_is_held(file: &Path) -> bool {
    file.exists()
        && !Command::new("flock")
            .args(["-n", "-E", "75"])
            .arg(file)
            .arg("true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The state dirs of `cmd` when it is a `podvisor run` that ends its pod when it ends (not
/// `--live-restore`, whose keepers hold the pod's cgroups for the next run).
pub(super) fn ends_a_pod(cmd: &Command) -> Option<StateDirs> {
    let args: Vec<&OsStr> = cmd.get_args().collect();
    let program = std::iter::once(cmd.get_program()).chain(args.iter().copied());
    let at = program.collect::<Vec<_>>().windows(2).position(|w| {
        Path::new(w[0]).file_name() == Some(OsStr::new("podvisor")) && w[1] == "run"
    })?;
    if args.iter().any(|a| *a == "--live-restore") {
        return None;
    }
    let mut state = StateDirs::default();
    for pair in args[at..].windows(2) {
        if pair[0] == "--state-dir" {
            state.dirs.push(PathBuf::from(pair[1]));
        }
    }
    state.base = cmd
        .get_envs()
        .find(|(k, _)| *k == "PODVISOR_STATE_BASE")
        .and_then(|(_, v)| v.map(PathBuf::from));
    (!state.dirs.is_empty() || state.base.is_some()).then_some(state)
}

/// The cgroups (pod and container cgroups, systemd scopes) of pods kept in `state`'s dirs:
/// their names end with the hash of the state dir (`podvisor::cgroup::pod_cgroup_name`).
fn leftover_cgroups(state: &StateDirs) -> Vec<PathBuf> {
    cgroups_of_state_dirs(&ended_state_dirs(state))
}

/// The cgroups of the pods kept in state dirs `dirs`, whatever the runs on them are doing.
pub fn cgroups_of_state_dirs(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let suffixes: Vec<String> = dirs
        .iter()
        .map(|d| {
            let name = podvisor::cgroup::pod_cgroup_name("ns", "pod", d);
            name.rsplit('-').next().unwrap_or_default().to_string()
        })
        .collect();
    let mut found = Vec::new();
    let mut todo = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = todo.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let name = name.strip_suffix(".scope").unwrap_or(&name);
            if name.starts_with("podvisor-")
                && suffixes.iter().any(|h| name.ends_with(&format!("-{h}")))
            {
                found.push(e.path());
            } else if depth < 6 {
                todo.push((e.path(), depth + 1));
            }
        }
    }
    found
}

/// Mounts this test's mount namespace (the host's) has below `state`'s dirs: a pod's mounts
/// are made in its containers' (or the run's own) namespaces, and end with them.
fn leftover_mounts(state: &StateDirs) -> Vec<PathBuf> {
    let dirs = ended_state_dirs(state);
    mount_points()
        .into_iter()
        // Spaces and the like are octal escapes (`\040`); state dirs have none.
        .map(PathBuf::from)
        // The state dir itself may be a test's own mount (a small tmpfs, a read-only one).
        .filter(|m| dirs.iter().any(|d| m.starts_with(d) && m != d))
        .collect()
}

/// The state dirs of `state` that no run holds now (a state dir a run holds, of another pod
/// under the same base or of the run that turned this one away, rightly has its cgroups).
fn ended_state_dirs(state: &StateDirs) -> Vec<PathBuf> {
    let mut dirs = state.dirs.clone();
    if let Some(base) = &state.base {
        // BASE/NAMESPACE/POD.
        for ns in std::fs::read_dir(base).into_iter().flatten().flatten() {
            for pod in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
                dirs.push(pod.path());
            }
        }
    }
    dirs.retain(|d| !lock_is_held(&d.join("podvisor.lock")));
    dirs
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Kill the whole tree, whatever happened to the test: the namespace's init (which
        // takes its namespace with it), our direct child, and anything else with our tag.
        if self.in_namespace && self.running() {
            send(self.init_pid(), "KILL");
        }
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        for pid in tagged(&self.tag) {
            send(pid, "KILL");
        }
        let _ = self.child.wait();
    }
}

/// Pids of processes whose environment carries `PODVISOR_TEST_TAG=tag`.
fn tagged(tag: &str) -> Vec<i32> {
    let needle = format!("PODVISOR_TEST_TAG={tag}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(pid);
            }
        } else if is_zombie(pid) {
            // A zombie's environ is unreadable; its parent's tag decides.
            if let Some(ppid) = ppid(pid) {
                if std::fs::read(format!("/proc/{ppid}/environ"))
                    .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
                {
                    found.push(pid);
                }
            }
        }
    }
    found
}
