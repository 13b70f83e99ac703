//! cgroups of `podvisor run`: one per pod, under the cgroup podvisor itself runs in (the part
//! of the tree that was delegated to it), and one per container instance under that, with the
//! limits the kubelet would set (numbers from `podvisor_core::spec::resources`). cgroup v2
//! when `/sys/fs/cgroup` is the unified hierarchy, v1 (a hierarchy per controller: memory,
//! cpu, cpuacct, pids) otherwise, found at start from /proc/self/mountinfo and
//! /proc/self/cgroup, as runc's `IsCgroup2UnifiedMode` decides.
//!
//! A container process joins its instance's cgroup before exec (the spawned child writes to
//! the `cgroup.procs` files opened here), so nothing it allocates escapes the limit. An OOM
//! kill is read from the instance cgroup's counter (v1 `memory.oom_control`, v2
//! `memory.events`), as containerd reports `OOMKilled` from the cgroup's OOM event. Every pod
//! cgroup made is recorded in the state dir first, so that the next run on that state dir
//! removes what a run killed with -9 left.
//!
//! Never: a cgroup outside podvisor's own, or a process that is not the pod's touched.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use podvisor_core::spec::resources::{cpu_quota, cpu_shares, cpu_weight, Resources, CPU_PERIOD_US};

use crate::mountinfo::{self, Mount};
use crate::process::sys;
use crate::state::{StateError, StateFile};

/// Which cgroup interface the host has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// One hierarchy podvisor uses: v1 has one per controller, v2 one for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controller {
    Memory,
    Cpu,
    CpuAcct,
    Pids,
    Unified,
}

impl Controller {
    fn v1_name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::CpuAcct => "cpuacct",
            Controller::Pids => "pids",
            Controller::Unified => "",
        }
    }
}

/// podvisor's own cgroup in each hierarchy it uses.
#[derive(Debug, Clone)]
pub struct Layout {
    pub version: Version,
    roots: Vec<(Controller, PathBuf)>,
}

impl fmt::Display for Layout {
    /// `v1 (memory, cpu, cpuacct, pids)` or `v2 (memory cpu pids)`, for `describe`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.version {
            Version::V1 => {
                let names: Vec<_> = self.roots.iter().map(|(c, _)| c.v1_name()).collect();
                write!(f, "v1 ({})", names.join(", "))
            }
            Version::V2 => write!(f, "v2 ({})", self.roots[0].1.display()),
        }
    }
}

/// Why the pod cannot have cgroups.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup hierarchy with the memory and cpu controllers is mounted")]
    NotMounted,
    #[error("cgroup {path}: cannot {what}: {error}")]
    Io {
        path: String,
        what: &'static str,
        error: io::Error,
    },
    #[error(transparent)]
    State(#[from] StateError),
}

fn io_err(path: &Path, what: &'static str) -> impl FnOnce(io::Error) -> CgroupError {
    let path = path.display().to_string();
    move |error| CgroupError::Io { path, what, error }
}

impl Layout {
    /// The host's cgroups as this process sees them; `NotMounted` when there are none that
    /// podvisor can use.
    pub fn detect() -> Result<Layout, CgroupError> {
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(io_err(Path::new("/proc/self/cgroup"), "read"))?;
        layout_from(&mountinfo::read(), &own).ok_or(CgroupError::NotMounted)
    }

    fn dirs(&self, name: &Path) -> Vec<(Controller, PathBuf)> {
        self.roots
            .iter()
            .map(|(c, root)| (*c, root.join(name)))
            .collect()
    }
}

/// The layout from /proc/self/mountinfo and /proc/self/cgroup.
fn layout_from(mounts: &[Mount], own: &str) -> Option<Layout> {
    let own_path = |pred: &dyn Fn(&str) -> bool| -> Option<&str> {
        own.lines().find_map(|l| {
            let mut it = l.splitn(3, ':');
            let (_, controllers, path) = (it.next()?, it.next()?, it.next()?);
            pred(controllers).then_some(path)
        })
    };
    // Our cgroup's directory: the mount point plus our path below the mount's root.
    let under = |m: &Mount, path: &str| -> PathBuf {
        let path = Path::new(path);
        let rel = path.strip_prefix(&m.root).unwrap_or(path);
        m.point.join(rel.strip_prefix("/").unwrap_or(rel))
    };
    let unified = mounts
        .iter()
        .find(|m| m.fs_type == "cgroup2" && m.point == Path::new("/sys/fs/cgroup"));
    if let Some(m) = unified {
        let path = own_path(&|c| c.is_empty())?;
        return Some(Layout {
            version: Version::V2,
            roots: vec![(Controller::Unified, under(m, path))],
        });
    }
    let mut roots = Vec::new();
    for c in [
        Controller::Memory,
        Controller::Cpu,
        Controller::CpuAcct,
        Controller::Pids,
    ] {
        let name = c.v1_name();
        let has = |opts: &str| opts.split(',').any(|o| o == name);
        let Some(m) = mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && has(&m.super_options))
        else {
            continue;
        };
        let Some(path) = own_path(&|cs| cs.split(',').any(|x| x == name)) else {
            continue;
        };
        roots.push((c, under(m, path)));
    }
    let has = |c| roots.iter().any(|(x, _)| *x == c);
    (has(Controller::Memory) && has(Controller::Cpu)).then_some(Layout {
        version: Version::V1,
        roots,
    })
}

/// The file that records the pod cgroups a run made, in its state dir.
const RECORD: &str = "cgroups";

/// How long to wait for a killed cgroup's processes to go before giving up on removing it.
const PATIENCE: Duration = Duration::from_secs(5);

/// The pod's cgroup.
#[derive(Debug)]
pub struct PodCgroup {
    layout: Layout,
    dirs: Vec<(Controller, PathBuf)>,
    /// Instance cgroups whose processes had not all gone when their instance ended.
    pending: Vec<InstanceCgroup>,
}

impl PodCgroup {
    /// Removes what an earlier run on `state_dir` left (killing its processes), then makes
    /// the pod's cgroup, recorded there first, with the pod's limits and `pids_max`.
    pub fn create(
        layout: &Layout,
        state_dir: &Path,
        name: &str,
        pod: &Resources,
        pids_max: Option<u64>,
    ) -> Result<PodCgroup, CgroupError> {
        let record = StateFile::new(state_dir, RECORD)?;
        clean_recorded(&record)?;
        let name = PathBuf::from(name);
        let dirs = layout.dirs(&name);
        let text: String = dirs
            .iter()
            .map(|(_, d)| format!("{}\n", d.display()))
            .collect();
        record.write(&text)?;
        if layout.version == Version::V2 {
            enable_controllers(&layout.roots[0].1)?;
        }
        for (c, dir) in &dirs {
            remove_tree(dir)?;
            std::fs::create_dir(dir).map_err(io_err(dir, "create"))?;
            apply(*c, dir, pod, pids_max)?;
        }
        Ok(PodCgroup {
            layout: layout.clone(),
            dirs,
            pending: Vec::new(),
        })
    }

    /// Makes the cgroup of one container instance, limits set, ready to be joined.
    pub fn instance(
        &mut self,
        container: &str,
        instance: u32,
        r: &Resources,
    ) -> Result<InstanceCgroup, CgroupError> {
        self.retry_pending();
        let mut dirs = Vec::new();
        let mut procs = Vec::new();
        let made = (|| {
            for (c, pod_dir) in &self.dirs {
                let dir = pod_dir.join(format!("{container}-{instance}"));
                remove_tree(&dir)?;
                std::fs::create_dir(&dir).map_err(io_err(&dir, "create"))?;
                dirs.push((*c, dir.clone()));
                apply(*c, &dir, r, None)?;
                let path = dir.join("cgroup.procs");
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err(&path, "open"))?;
                procs.push(f);
            }
            Ok(())
        })();
        let cg = InstanceCgroup {
            version: self.layout.version,
            dirs,
            procs,
        };
        match made {
            Ok(()) => Ok(cg),
            Err(e) => {
                let _ = cg.remove();
                Err(e)
            }
        }
    }

    /// An instance has ended: its cgroup goes (now, or once its last processes have).
    pub fn release(&mut self, cg: InstanceCgroup) {
        if cg.remove().is_err() {
            self.pending.push(cg);
        }
    }

    fn retry_pending(&mut self) {
        self.pending.retain(|cg| cg.remove().is_err());
    }

    /// Removes the pod's cgroup and the record of it: what is still in it is killed first.
    pub fn remove(mut self, state_dir: &Path) -> Result<(), CgroupError> {
        for cg in std::mem::take(&mut self.pending) {
            cg.kill_all();
        }
        for (_, dir) in &self.dirs {
            remove_tree(dir)?;
        }
        let record = StateFile::new(state_dir, RECORD)?;
        record.remove()?;
        Ok(())
    }
}

/// One container instance's cgroup.
#[derive(Debug)]
pub struct InstanceCgroup {
    version: Version,
    dirs: Vec<(Controller, PathBuf)>,
    /// Its `cgroup.procs` files, open for the child to write "0" into before exec.
    procs: Vec<File>,
}

/// What the cgroup says the instance uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub cpu_seconds: f64,
    /// Usage minus inactive file pages, as cAdvisor's `container_memory_working_set_bytes`.
    pub working_set: u64,
}

impl InstanceCgroup {
    /// Descriptors a spawned child writes "0" into to join.
    pub fn join_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(|f| f.as_raw_fd()).collect()
    }

    fn dir(&self, c: Controller) -> Option<&Path> {
        let want = if self.version == Version::V2 {
            Controller::Unified
        } else {
            c
        };
        self.dirs
            .iter()
            .find(|(x, _)| *x == want)
            .map(|(_, d)| d.as_path())
    }

    /// Whether the kernel's OOM killer killed a process of this instance.
    pub fn oom_killed(&self) -> bool {
        let (file, key) = match self.version {
            Version::V1 => ("memory.oom_control", "oom_kill"),
            Version::V2 => ("memory.events", "oom_kill"),
        };
        self.dir(Controller::Memory)
            .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
            .and_then(|t| keyed(&t, key))
            .is_some_and(|n| n > 0)
    }

    /// CPU time and working set, from the cgroup.
    pub fn usage(&self) -> Usage {
        let read = |c, file: &str| {
            self.dir(c)
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
        };
        // (hierarchy, file, key in it or the whole file) of CPU time, its unit per second,
        // memory usage, and the inactive-file key of memory.stat, for each version.
        let (cpu, per_second, usage, inactive) = match self.version {
            Version::V1 => (
                (Controller::CpuAcct, "cpuacct.usage", None),
                1e9,
                (Controller::Memory, "memory.usage_in_bytes", None),
                (
                    Controller::Memory,
                    "memory.stat",
                    Some("total_inactive_file"),
                ),
            ),
            Version::V2 => (
                (Controller::Unified, "cpu.stat", Some("usage_usec")),
                1e6,
                (Controller::Unified, "memory.current", None),
                (Controller::Unified, "memory.stat", Some("inactive_file")),
            ),
        };
        let number = |(c, file, key): (Controller, &str, Option<&str>)| -> u64 {
            read(c, file)
                .and_then(|t| match key {
                    Some(k) => keyed(&t, k),
                    None => t.trim().parse().ok(),
                })
                .unwrap_or(0)
        };
        Usage {
            cpu_seconds: number(cpu) as f64 / per_second,
            working_set: number(usage).saturating_sub(number(inactive)),
        }
    }

    /// SIGKILL to every process in it: what the container started outside its process group
    /// (a daemon that called setsid) goes with it too.
    pub fn kill_all(&self) {
        for (_, dir) in &self.dirs {
            for pid in procs_of(dir) {
                let _ = sys::send_signal(pid, libc::SIGKILL);
            }
        }
    }

    /// Kills what is left and removes the directories; `Err` while a process is still there.
    fn remove(&self) -> io::Result<()> {
        self.kill_all();
        let mut result = Ok(());
        for (_, dir) in &self.dirs {
            match std::fs::remove_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => result = Err(e),
            }
        }
        result
    }
}

/// `key N` from a flat-keyed cgroup file.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn procs_of(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Writes the limits of `r` (and `pids_max`) into a new cgroup of hierarchy `c`.
fn apply(
    c: Controller,
    dir: &Path,
    r: &Resources,
    pids_max: Option<u64>,
) -> Result<(), CgroupError> {
    let set = |file: &str, value: &str| -> Result<(), CgroupError> {
        let path = dir.join(file);
        write_file(&path, value).map_err(io_err(&path, "write"))
    };
    let exists = |file: &str| dir.join(file).exists();
    let shares = cpu_shares(r.cpu_request);
    let quota = cpu_quota(r.cpu_limit);
    match c {
        Controller::Memory => {
            if let Some(limit) = r.memory_limit {
                set("memory.limit_in_bytes", &limit.to_string())?;
                // No swap for a limited container, as runc does when memory-swap = memory.
                if exists("memory.memsw.limit_in_bytes") {
                    set("memory.memsw.limit_in_bytes", &limit.to_string())?;
                }
            }
        }
        Controller::Cpu => {
            set("cpu.shares", &shares.to_string())?;
            if let Some(q) = quota {
                set("cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                set("cpu.cfs_quota_us", &q.to_string())?;
            }
        }
        Controller::CpuAcct => {}
        Controller::Pids => {
            if let Some(n) = pids_max {
                set("pids.max", &n.to_string())?;
            }
        }
        Controller::Unified => {
            if let Some(limit) = r.memory_limit {
                set("memory.max", &limit.to_string())?;
                if exists("memory.swap.max") {
                    set("memory.swap.max", "0")?;
                }
            }
            set("cpu.weight", &cpu_weight(shares).to_string())?;
            if let Some(q) = quota {
                set("cpu.max", &format!("{q} {CPU_PERIOD_US}"))?;
            }
            if let Some(n) = pids_max {
                set("pids.max", &n.to_string())?;
            }
        }
    }
    Ok(())
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

/// v2: the controllers podvisor sets must be enabled for the children of its own cgroup.
fn enable_controllers(own: &Path) -> Result<(), CgroupError> {
    let path = own.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&path).map_err(io_err(&path, "read"))?;
    let missing: Vec<String> = ["memory", "cpu", "pids"]
        .iter()
        .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    write_file(&path, &missing.join(" ")).map_err(io_err(&path, "enable controllers in"))
}

/// Removes a cgroup directory and its children, deepest first, killing what runs in them and
/// waiting (boundedly) for those processes to go.
fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
    if !dir.exists() {
        return Ok(());
    }
    let mut all = Vec::new();
    collect_dirs(dir, &mut all);
    let deadline = Instant::now() + PATIENCE;
    for d in all.iter().rev() {
        loop {
            for pid in procs_of(d) {
                let _ = sys::send_signal(pid, libc::SIGKILL);
            }
            match std::fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) if Instant::now() < deadline && e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(io_err(d, "remove")(e)),
            }
        }
    }
    Ok(())
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect_dirs(&e.path(), out);
        }
    }
}

/// Removes the pod cgroups an earlier run on this state dir recorded.
fn clean_recorded(record: &StateFile) -> Result<(), CgroupError> {
    let Some(text) = record.read()? else {
        return Ok(());
    };
    for line in text.lines().filter(|l| !l.is_empty()) {
        let dir = Path::new(line);
        // Only a cgroup directory is ever removed.
        if dir.starts_with("/sys/fs/cgroup") {
            remove_tree(dir)?;
        }
    }
    record.remove()?;
    Ok(())
}

/// The pod's cgroups, or why it has none.
#[derive(Debug)]
pub struct PodCgroups {
    pub pod: Option<PodCgroup>,
    /// For `describe`: the layout used, or why there is none.
    pub note: String,
}

/// A limit podvisor cannot enforce: the run is refused rather than run without it.
#[derive(Debug, thiserror::Error)]
#[error("container {container:?}: {field} needs {needs}, which podvisor cannot make here: {why}")]
pub struct Unenforceable {
    pub container: String,
    pub field: &'static str,
    pub needs: &'static str,
    pub why: String,
}

impl PodCgroups {
    /// The pod's cgroups. Without cgroups a pod that sets no limit runs anyway (its `describe`
    /// says why); one whose limit cannot be enforced is refused, naming the field.
    pub fn set_up(
        plan: &podvisor_core::spec::plan::RunPlan,
        state_dir: &Path,
        pids_max: Option<u64>,
    ) -> Result<PodCgroups, Unenforceable> {
        let made = Layout::detect().and_then(|layout| {
            let name = pod_cgroup_name(&plan.namespace, &plan.pod.name, state_dir);
            let pod = PodCgroup::create(&layout, state_dir, &name, &plan.pod_resources, pids_max)?;
            Ok((layout, pod))
        });
        match made {
            Ok((layout, pod)) => Ok(PodCgroups {
                pod: Some(pod),
                note: layout.to_string(),
            }),
            Err(e) => {
                let why = e.to_string();
                let needs = plan
                    .exec
                    .iter()
                    .zip(&plan.pod.containers)
                    .find_map(|(x, c)| {
                        let field = if x.resources.memory_limit.is_some() {
                            "resources.limits.memory"
                        } else if x.resources.cpu_limit.is_some() {
                            "resources.limits.cpu"
                        } else {
                            return None;
                        };
                        Some((c.name.clone(), field))
                    });
                let why = format!("{why} (run as root, or in a cgroup delegated to this user)");
                if let Some((container, field)) = needs {
                    return Err(Unenforceable {
                        container,
                        field,
                        needs: "cgroups",
                        why,
                    });
                }
                if pids_max.is_some() {
                    return Err(Unenforceable {
                        container: String::new(),
                        field: "--pod-max-pids",
                        needs: "cgroups",
                        why,
                    });
                }
                Ok(PodCgroups {
                    pod: None,
                    note: format!("none: {why}"),
                })
            }
        }
    }
}

/// The pod cgroup's name: the pod, and a hash of its state dir (two runs of the same pod name
/// on two state dirs do not share one).
pub fn pod_cgroup_name(namespace: &str, pod: &str, state_dir: &Path) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in state_dir.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100000001b3);
    }
    format!("podvisor-{namespace}_{pod}-{:08x}", h as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_hybrid_with_a_nested_own_cgroup() {
        let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        let own = "8:pids:/\n4:memory:/a/b\n2:cpuacct:/\n1:cpu:/\n0::/\n";
        let l = layout_from(&mountinfo::parse(mountinfo), own).unwrap();
        assert_eq!(l.version, Version::V1);
        assert_eq!(l.to_string(), "v1 (memory, cpu, cpuacct, pids)");
        assert_eq!(
            l.dirs(Path::new("p")),
            vec![
                (
                    Controller::Memory,
                    PathBuf::from("/sys/fs/cgroup/memory/a/b/p")
                ),
                (Controller::Cpu, PathBuf::from("/sys/fs/cgroup/cpu/p")),
                (
                    Controller::CpuAcct,
                    PathBuf::from("/sys/fs/cgroup/cpuacct/p")
                ),
                (Controller::Pids, PathBuf::from("/sys/fs/cgroup/pids/p")),
            ]
        );
    }

    #[test]
    fn v1_comounted_and_v2_unified() {
        let mountinfo = "\
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 /ns /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
        let own = "3:cpu,cpuacct:/x\n4:memory:/ns/y\n";
        let l = layout_from(&mountinfo::parse(mountinfo), own).unwrap();
        let dirs = l.dirs(Path::new("p"));
        assert!(dirs.contains(&(
            Controller::Memory,
            PathBuf::from("/sys/fs/cgroup/memory/y/p")
        )));
        assert!(dirs.contains(&(
            Controller::CpuAcct,
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/x/p")
        )));
        let v2 = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let l = layout_from(&mountinfo::parse(v2), "0::/user.slice/s\n").unwrap();
        assert_eq!(l.version, Version::V2);
        assert_eq!(
            l.dirs(Path::new("p")),
            vec![(
                Controller::Unified,
                PathBuf::from("/sys/fs/cgroup/user.slice/s/p")
            )]
        );
        assert!(layout_from(&[], "").is_none());
    }

    #[test]
    fn flat_keyed_files() {
        assert_eq!(
            keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill"),
            Some(2)
        );
        assert_eq!(keyed("low 0\noom 1\n", "oom_kill"), None);
    }
}
