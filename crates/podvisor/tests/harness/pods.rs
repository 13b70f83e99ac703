//! A `podvisor run` with its own state dir and events file, the pod manifests the lifecycle
//! tests run, and what they read back (events, logs, the saved record).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{podvisor, Output, Run, TempDir};

/// A run with its own state dir and JSON events file.
pub struct PodRun {
    pub dir: TempDir,
}

impl PodRun {
    pub fn new(manifest: &str) -> PodRun {
        let dir = TempDir::new();
        std::fs::write(dir.file("pod.yaml"), manifest).unwrap();
        PodRun { dir }
    }

    pub fn cmd(&self, extra: &[&str]) -> Run {
        self.cmd_under(&[], extra)
    }

    /// `cmd`, run by `wrapper` (`setpriv …`, `systemd-run …`) when it is not empty.
    pub fn cmd_under(&self, wrapper: &[&str], extra: &[&str]) -> Run {
        let run = match wrapper.split_first() {
            Some((program, args)) => Run::new(program).args(args).arg(podvisor()),
            None => Run::new(podvisor()),
        };
        run.args(["run", "-q", "--state-dir"])
            .arg(self.dir.file("state"))
            .arg("--events")
            .arg(self.dir.file("events.json"))
            .args(extra)
            .arg(self.dir.file("pod.yaml"))
    }

    /// Events as (reason, object, exitCode).
    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.file("events.json"))
            .unwrap_or_default()
            .split_inclusive('\n')
            // A line still being written is read next time.
            .filter(|l| l.ends_with('\n'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn reasons(&self, object: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["object"] == object)
            .map(|e| e["reason"].as_str().unwrap().to_string())
            .collect()
    }

    pub fn log(&self, container: &str, instance: u32) -> String {
        let path = self
            .dir
            .file("state")
            .join("logs")
            .join(container)
            .join(format!("{instance}.log"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| {
            // What there is instead, and what happened to the container, say why.
            let dir = path.parent().unwrap();
            let files: Vec<_> = (std::fs::read_dir(dir).into_iter().flatten().flatten())
                .map(|e| e.file_name())
                .collect();
            let events: Vec<_> = (self.events().into_iter())
                .filter(|e| e["object"] == container)
                .collect();
            panic!(
                "{}: {e}\nin {}: {files:?}\nevents of {container}: {events:#?}",
                path.display(),
                dir.display()
            )
        })
    }

    /// The lines a container instance wrote, without the CRI log's time, stream and tag.
    pub fn log_lines(&self, container: &str, instance: u32) -> Vec<String> {
        self.log(container, instance)
            .lines()
            .map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default().to_string())
            .collect()
    }
}

impl Drop for PodRun {
    /// A run killed with -9 leaves its cgroups for the next run on its state dir to remove;
    /// a test has no next run, so what the record lists goes here (its processes killed).
    fn drop(&mut self) {
        let record = self.dir.file("state").join("cgroups");
        for line in std::fs::read_to_string(record).unwrap_or_default().lines() {
            let dir = Path::new(line);
            if !dir.starts_with("/sys/fs/cgroup") {
                continue;
            }
            remove_cgroup_tree(dir);
        }
    }
}

/// Removes a cgroup directory and those below it, deepest first, killing what runs in them
/// (waiting up to 15 s each for it to go): what a test leaves in cgroups, it takes back.
pub fn remove_cgroup_tree(dir: &Path) {
    let mut dirs = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        for e in std::fs::read_dir(&dirs[i]).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
        i += 1;
    }
    for d in dirs.iter().rev() {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
            if std::fs::remove_dir(d).is_ok() || !d.exists() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A pod whose containers share the host's root (`podvisor.io/host-root: writable`): the
/// tests of the lifecycle hand their containers host paths (markers, logs, health files);
/// `tests/rootfs.rs` tests the private layer itself.
pub fn pod(policy: &str, containers: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, labels: {{tier: web}}, annotations: {{podvisor.io/root-from: host, podvisor.io/host-root: writable}}}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n{containers}")
}

/// `podvisor ARGS --state-dir DIR` run to completion, against a run's state dir.
pub fn client(r: &PodRun, args: &[&str]) -> Output {
    Run::new(podvisor())
        .args(args)
        .arg("--state-dir")
        .arg(r.dir.file("state"))
        .output()
}

/// A saved state file of podvisor (`podvisor.state`, `podvisor-init.state`): its JSON,
/// between its header line (`podvisor-state 3 KIND`) and its checksum line.
pub fn saved_record(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("podvisor-state 3 "), "{text}");
    assert!(lines.last().unwrap().starts_with("checksum "), "{text}");
    serde_json::from_str(&lines[1..lines.len() - 1].join("\n")).unwrap()
}

/// A tmpfs mounted on a directory for the length of a test, unmounted on drop, also when the
/// test fails. On drop the cgroups a state dir on it records go first (a run killed by a
/// failing test leaves them, and the record is on this tmpfs), then the tmpfs.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs on `dir` (made if missing), of `size` (e.g. `1m`) or the default size.
    pub fn mount(dir: &Path, size: Option<&str>) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let mut mount = Command::new("mount");
        mount.args(["-t", "tmpfs"]);
        if let Some(size) = size {
            mount.args(["-o", &format!("size={size}")]);
        }
        let ok = mount.arg("tmpfs").arg(dir).status().unwrap().success();
        assert!(ok, "cannot mount a tmpfs on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    pub fn remount(&self, option: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{option}")])
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot remount {} {option}", self.0.display());
    }

    /// Unmounts it now (a test whose run must find it gone), failing the test if that fails.
    pub fn unmount(self) {
        let out = Command::new("umount").arg(&self.0).output().unwrap();
        assert!(
            out.status.success(),
            "cannot unmount {}: {out:?}",
            self.0.display()
        );
        std::mem::forget(self);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let record = std::fs::read_to_string(self.0.join("cgroups")).unwrap_or_default();
        for line in record
            .lines()
            .filter(|l| Path::new(l).starts_with("/sys/fs/cgroup"))
        {
            remove_cgroup_tree(Path::new(line));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
