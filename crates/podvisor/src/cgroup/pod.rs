//! The pod's cgroup and its container instances' cgroups below it: made with the limits the
//! kubelet sets, joined by a container's process before exec, read back for usage and OOM
//! kills, and removed (killing what is left) when the instance or the pod ends. Every pod
//! cgroup made is recorded in the state dir first, so that the next run on that state dir
//! removes what a run killed with -9 left. Cgroups do not outlive the machine: the record is
//! written atomically but not synced, and names the boot it was written in; a record of
//! another boot lists nothing that still exists, whatever a power loss left in it.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use podvisor_core::devices;
use podvisor_core::spec::resources::{cpu_quota, cpu_shares, cpu_weight, Resources, CPU_PERIOD_US};

use super::fs::{procs_of, write_file};
use super::{io_err, unified, CgroupError, Controller, Version};
use crate::process::sys;
use crate::state::StateFile;

/// The file that records the pod cgroups a run made, in its state dir: a line `boot ID`
/// (`StateFile::write_for_this_boot`), then one line per cgroup directory.
const RECORD: &str = "cgroups";

/// The file of an instance cgroup that a child writes "0" into to join it before exec.
///
/// On cgroup v1 that is `tasks`, which moves only the writing thread: the child is a single
/// thread (it has not exec'd yet), so that moves the whole process, and the kernel takes no
/// lock beyond its cgroup mutex for a thread that moves itself. A write into `cgroup.procs`
/// moves a whole thread group and takes the kernel's one lock over all thread groups
/// (`cgroup_threadgroup_rwsem`), whose writer waits for an RCU grace period unless another
/// writer took it moments before: 5 to 30 ms here, on the path of every start. On cgroup v2
/// a process moves through `cgroup.procs` only (`cgroup.threads` moves threads within one
/// threaded subtree); it is born in its cgroup there (`CLONE_INTO_CGROUP`) where the kernel
/// allows, and only moved where clone3 is refused.
fn join_file(version: Version) -> &'static str {
    match version {
        Version::V1 => "tasks",
        Version::V2 => "cgroup.procs",
    }
}

/// The join file of the instance cgroup `dir`, open for writing (`InstanceCgroup::joins`).
fn open_join(dir: &Path, version: Version) -> Result<File, CgroupError> {
    let path = dir.join(join_file(version));
    let file = std::fs::OpenOptions::new().write(true).open(&path);
    file.map_err(io_err(&path, "open"))
}

/// How long to wait for a killed cgroup's processes to go before giving up on removing it.
pub(super) const PATIENCE: Duration = Duration::from_secs(5);

/// The pod's cgroup.
#[derive(Debug)]
pub struct PodCgroup {
    version: Version,
    dirs: Vec<(Controller, PathBuf)>,
    /// Instance cgroups whose processes had not all gone when their instance ended.
    pending: Vec<InstanceCgroup>,
}

impl PodCgroup {
    /// Removes what an earlier run on `state_dir` left (killing its processes), then makes
    /// the pod's cgroup as `at` places it, recorded there first, with the pod's limits and
    /// `pids_max`. On v2, `at.enabled` controllers are enabled for the pod's children. With
    /// `keep` (instance cgroup names of containers taken over from the run before), the pod's
    /// cgroup stays and only its other instance cgroups go.
    pub(super) fn create(
        version: Version,
        at: &super::Placement,
        state_dir: &Path,
        pod: &Resources,
        pids_max: Option<u64>,
        keep: &[String],
    ) -> Result<PodCgroup, CgroupError> {
        let record = StateFile::new(state_dir, RECORD)?;
        let controllers = &at.enabled;
        let dirs: Vec<_> = at
            .parents
            .iter()
            .map(|(c, p)| (*c, p.join(&at.name)))
            .collect();
        let mut text = String::new();
        for (_, d) in &dirs {
            text.push_str(&format!("{}\n", d.display()));
        }
        if keep.is_empty() {
            clean_recorded(&record)?;
        }
        record.write_for_this_boot(&text)?;
        let pod_cgroup = PodCgroup {
            version,
            dirs,
            pending: Vec::new(),
        };
        for (c, dir) in &pod_cgroup.dirs {
            if !keep.is_empty() && dir.exists() {
                // Containers taken over from the run before live in it: only what no
                // adopted instance uses goes.
                for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                    let kept = keep.iter().any(|k| e.file_name() == k.as_str());
                    if e.file_type().is_ok_and(|t| t.is_dir()) && !kept {
                        remove_tree(&e.path())?;
                    }
                }
                apply(*c, dir, pod, pids_max, Level::Pod)?;
                continue;
            }
            remove_tree(dir)?;
            if version == Version::V2 {
                unified::create_below_parent(dir, controllers)?;
                apply(*c, dir, pod, pids_max, Level::Pod)?;
                unified::enable(dir, controllers)?;
            } else {
                std::fs::create_dir(dir).map_err(io_err(dir, "create"))?;
                apply(*c, dir, pod, pids_max, Level::Pod)?;
            }
        }
        Ok(pod_cgroup)
    }

    /// The cgroup of an instance taken over from the run before (see `create`'s `keep`).
    pub fn reopen(&self, container: &str, instance: u32) -> Result<InstanceCgroup, CgroupError> {
        let mut dirs = Vec::new();
        let mut joins = Vec::new();
        for (c, pod_dir) in &self.dirs {
            let dir = pod_dir.join(instance_dir(container, instance));
            if *c == Controller::Devices && !dir.exists() {
                // Started by a podvisor that gave containers no device cgroup: it goes on
                // without one (its next instance gets it).
                continue;
            }
            joins.push(open_join(&dir, self.version)?);
            dirs.push((*c, dir));
        }
        Ok(InstanceCgroup {
            version: self.version,
            dirs,
            joins,
        })
    }

    /// Makes the cgroup of one container instance, limits and device rules (`privileged`:
    /// every device) set, ready to be joined.
    pub fn instance(
        &mut self,
        container: &str,
        instance: u32,
        r: &Resources,
        privileged: bool,
    ) -> Result<InstanceCgroup, CgroupError> {
        self.retry_pending();
        let mut dirs = Vec::new();
        let mut joins = Vec::new();
        let made = (|| {
            for (c, pod_dir) in &self.dirs {
                let dir = pod_dir.join(instance_dir(container, instance));
                remove_tree(&dir)?;
                std::fs::create_dir(&dir).map_err(io_err(&dir, "create"))?;
                dirs.push((*c, dir.clone()));
                apply(*c, &dir, r, None, Level::Instance { privileged })?;
                joins.push(open_join(&dir, self.version)?);
            }
            Ok(())
        })();
        crate::process::failpoint::hit("cgroup.created");
        let cg = InstanceCgroup {
            version: self.version,
            dirs,
            joins,
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
        crate::process::failpoint::hit("cgroup.removed");
    }

    fn retry_pending(&mut self) {
        self.pending.retain(|cg| cg.remove().is_err());
    }

    /// Changes the pod cgroup's limits of `what` to those of `r`, in place (a resize).
    pub fn update(&self, r: &Resources, what: Resource) -> Result<(), CgroupError> {
        update_all(&self.dirs, r, what)
    }

    /// The memory the pod's processes use now (`memory.current`, `memory.usage_in_bytes`).
    pub fn memory_usage(&self) -> Option<u64> {
        memory_usage(self.version, &self.dirs)
    }

    /// Removes the pod's cgroup and the record of it: what is still in it is killed first.
    pub fn remove(mut self, state_dir: &Path) -> Result<(), CgroupError> {
        for cg in std::mem::take(&mut self.pending) {
            cg.kill_all();
        }
        // Every hierarchy is tried; the first failure is reported, and the record kept, so
        // that the next run on this state dir removes what is left.
        let mut first_error = None;
        for (_, dir) in &self.dirs {
            match remove_tree(dir) {
                Ok(()) if self.version == Version::V2 => unified::remove_parent_if_empty(dir),
                Ok(()) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let record = StateFile::new(state_dir, RECORD)?;
        record.remove_for_this_boot()?;
        Ok(())
    }
}

/// Whether an `oom_file` (memory.events, memory.oom_control) counts an OOM kill.
pub fn oom_kills_in(file: &Path) -> bool {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| keyed(&t, "oom_kill"))
        .is_some_and(|n| n > 0)
}

/// The directory name of a container instance's cgroup in its pod's.
pub fn instance_dir(container: &str, instance: u32) -> String {
    format!("{container}-{instance}")
}

/// One container instance's cgroup.
#[derive(Debug)]
pub struct InstanceCgroup {
    version: Version,
    dirs: Vec<(Controller, PathBuf)>,
    /// Its files to join through (`join_file`), open for the child to write "0" into before
    /// exec.
    joins: Vec<File>,
}

/// What the cgroup says the instance uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub cpu_seconds: f64,
    /// Usage minus inactive file pages, as cAdvisor's `container_memory_working_set_bytes`.
    pub working_set: u64,
}

/// The directories an instance's usage is read from (`InstanceCgroup::usage_files`).
#[derive(Debug, Clone)]
pub struct UsageFiles {
    version: Version,
    cpu: Option<PathBuf>,
    memory: Option<PathBuf>,
}

impl UsageFiles {
    /// CPU time and working set; `None` once the cgroup is gone (its instance ended).
    pub fn read(&self) -> Option<Usage> {
        // (file, key in it or the whole file) of CPU time and its unit per second, then of
        // memory usage and of the inactive-file key of memory.stat, for each version.
        let (cpu, per_second, usage, inactive) = match self.version {
            Version::V1 => (
                ("cpuacct.usage", None),
                1e9,
                ("memory.usage_in_bytes", None),
                ("memory.stat", Some("total_inactive_file")),
            ),
            Version::V2 => (
                ("cpu.stat", Some("usage_usec")),
                1e6,
                ("memory.current", None),
                ("memory.stat", Some("inactive_file")),
            ),
        };
        let number = |dir: &Option<PathBuf>, (file, key): (&str, Option<&str>)| -> Option<u64> {
            let text = std::fs::read_to_string(dir.as_ref()?.join(file)).ok()?;
            match key {
                Some(k) => keyed(&text, k),
                None => text.trim().parse().ok(),
            }
        };
        let cpu_seconds = number(&self.cpu, cpu)? as f64 / per_second;
        let memory = number(&self.memory, usage).unwrap_or(0);
        let inactive = number(&self.memory, inactive).unwrap_or(0);
        Some(Usage {
            cpu_seconds,
            working_set: memory.saturating_sub(inactive),
        })
    }
}

impl InstanceCgroup {
    /// An instance cgroup to read from only (its usage), at `dirs`.
    pub(super) fn reading(version: Version, dirs: Vec<(Controller, PathBuf)>) -> InstanceCgroup {
        InstanceCgroup {
            version,
            dirs,
            joins: Vec::new(),
        }
    }

    /// The files of `join_fds` (a keeper opens them itself).
    pub fn join_paths(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|(_, d)| d.join(join_file(self.version)))
            .collect()
    }

    /// Descriptors a spawned child writes "0" into to join.
    pub fn join_fds(&self) -> Vec<RawFd> {
        self.joins.iter().map(|f| f.as_raw_fd()).collect()
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
        self.oom_file().is_some_and(|f| oom_kills_in(&f))
    }

    /// The file whose `oom_kill` line counts the OOM kills in it (a keeper reads it).
    pub fn oom_file(&self) -> Option<PathBuf> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        self.dir(Controller::Memory).map(|d| d.join(file))
    }

    /// CPU time and working set, from the cgroup.
    pub fn usage(&self) -> Usage {
        self.usage_files().read().unwrap_or_default()
    }

    /// Where its CPU time and working set are read, apart from it: metrics scrapes and
    /// `status` read them off the run loop.
    pub fn usage_files(&self) -> UsageFiles {
        UsageFiles {
            version: self.version,
            cpu: self.dir(Controller::CpuAcct).map(Path::to_path_buf),
            memory: self.dir(Controller::Memory).map(Path::to_path_buf),
        }
    }

    /// The instance's limits of `what` made those of `r`, in place: a resize of a running
    /// container.
    pub fn update(&self, r: &Resources, what: Resource) -> Result<(), CgroupError> {
        update_all(&self.dirs, r, what)
    }

    /// The memory the instance's processes use now.
    pub fn memory_usage(&self) -> Option<u64> {
        memory_usage(self.version, &self.dirs)
    }

    /// SIGKILL to every process in it: what the container started outside its process group
    /// (a daemon that called setsid) goes with it too.
    pub fn kill_all(&self) {
        for (_, dir) in &self.dirs {
            kill(dir);
        }
    }

    /// Removes the directories, killing what is left in them; `Err` while a process is still
    /// there. Once its process has ended an instance's cgroup is usually empty: then it goes
    /// at once (the kernel refuses to remove a cgroup that holds a process), and nothing is
    /// read or killed.
    fn remove(&self) -> io::Result<()> {
        if self.remove_dirs().is_ok() {
            return Ok(());
        }
        self.kill_all();
        self.remove_dirs()
    }

    fn remove_dirs(&self) -> io::Result<()> {
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
pub(super) fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// SIGKILL to every process in the cgroup `dir`: one write of `cgroup.kill` where the kernel
/// has it (v2, 5.14+; it takes the whole subtree, also a process forking meanwhile), else a
/// signal to each process listed.
fn kill(dir: &Path) {
    let file = dir.join("cgroup.kill");
    if file.exists() && write_file(&file, "1").is_ok() {
        return;
    }
    for pid in procs_of(dir) {
        let _ = sys::send_signal(pid, libc::SIGKILL);
    }
}

/// The files of one cgroup directory.
struct Files<'a>(&'a Path);

impl Files<'_> {
    fn set(&self, file: &str, value: &str) -> Result<(), CgroupError> {
        let path = self.0.join(file);
        write_file(&path, value).map_err(io_err(&path, "write"))
    }

    fn exists(&self, file: &str) -> bool {
        self.0.join(file).exists()
    }
}

/// What a resize changes in a cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Cpu,
    Memory,
}

/// The memory charged to the cgroup of `dirs` now.
fn memory_usage(version: Version, dirs: &[(Controller, PathBuf)]) -> Option<u64> {
    let (want, file) = match version {
        Version::V1 => (Controller::Memory, "memory.usage_in_bytes"),
        Version::V2 => (Controller::Unified, "memory.current"),
    };
    let (_, dir) = dirs.iter().find(|(c, _)| *c == want)?;
    std::fs::read_to_string(dir.join(file))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn update_all(
    dirs: &[(Controller, PathBuf)],
    r: &Resources,
    what: Resource,
) -> Result<(), CgroupError> {
    for (c, dir) in dirs {
        update(*c, dir, r, what)?;
    }
    Ok(())
}

/// Writes `what` of `r` into the existing cgroup `dir` of hierarchy `c` (the runtime's
/// `UpdateContainerResources`). A limit `r` does not set is left as it is: a resize never
/// removes one.
fn update(c: Controller, dir: &Path, r: &Resources, what: Resource) -> Result<(), CgroupError> {
    let f = Files(dir);
    let (shares, quota) = (cpu_shares(r.cpu_request), cpu_quota(r.cpu_limit));
    match (c, what) {
        (Controller::Memory, Resource::Memory) => {
            let Some(limit) = r.memory_limit else {
                return Ok(());
            };
            // memory+swap may never be below memory: raised first when growing, lowered
            // after when shrinking.
            let now: u64 = std::fs::read_to_string(dir.join("memory.limit_in_bytes"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(u64::MAX);
            let swap = f.exists("memory.memsw.limit_in_bytes");
            if limit > now && swap {
                f.set("memory.memsw.limit_in_bytes", &limit.to_string())?;
            }
            f.set("memory.limit_in_bytes", &limit.to_string())?;
            if limit <= now && swap {
                f.set("memory.memsw.limit_in_bytes", &limit.to_string())?;
            }
        }
        (Controller::Cpu, Resource::Cpu) => {
            f.set("cpu.shares", &shares.to_string())?;
            if let Some(q) = quota {
                f.set("cpu.cfs_quota_us", &q.to_string())?;
            }
        }
        (Controller::Unified, Resource::Memory) => {
            if let Some(limit) = r.memory_limit {
                f.set("memory.max", &limit.to_string())?;
            }
        }
        (Controller::Unified, Resource::Cpu) => {
            if f.exists("cpu.weight") {
                f.set("cpu.weight", &cpu_weight(shares).to_string())?;
            }
            if let Some(q) = quota {
                f.set("cpu.max", &format!("{q} {CPU_PERIOD_US}"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Which cgroup `apply` writes: the pod's or a container instance's (`privileged`: it may
/// use every device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Pod,
    Instance { privileged: bool },
}

/// Writes the limits of `r` (and `pids_max`) into a new cgroup of hierarchy `c`.
fn apply(
    c: Controller,
    dir: &Path,
    r: &Resources,
    pids_max: Option<u64>,
    level: Level,
) -> Result<(), CgroupError> {
    let f = Files(dir);
    let (shares, quota) = (cpu_shares(r.cpu_request), cpu_quota(r.cpu_limit));
    match c {
        Controller::Memory => {
            if let Some(limit) = r.memory_limit {
                f.set("memory.limit_in_bytes", &limit.to_string())?;
                // No swap for a limited container, as runc does when memory-swap = memory.
                if f.exists("memory.memsw.limit_in_bytes") {
                    f.set("memory.memsw.limit_in_bytes", &limit.to_string())?;
                }
            }
        }
        Controller::Cpu => {
            f.set("cpu.shares", &shares.to_string())?;
            if let Some(q) = quota {
                f.set("cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                f.set("cpu.cfs_quota_us", &q.to_string())?;
            }
        }
        Controller::CpuAcct => {}
        Controller::Devices => {
            if let Level::Instance { privileged } = level {
                // Everything denied, then what the rules allow, as runc writes them.
                f.set("devices.deny", "a")?;
                for rule in devices::rules(privileged) {
                    f.set("devices.allow", &rule.v1_line())?;
                }
            }
        }
        Controller::Pids => {
            if let Some(n) = pids_max {
                f.set("pids.max", &n.to_string())?;
            }
        }
        Controller::Unified => {
            // The files of a controller exist only where it is enabled; placement made sure
            // that those a limit needs are.
            if let Some(limit) = r.memory_limit {
                f.set("memory.max", &limit.to_string())?;
            }
            if let Level::Instance { privileged } = level {
                // The device rules, as a program the kernel asks (only root may load one; a
                // rootless container, in a user namespace, cannot make a device node, nor open
                // one its user may not).
                if sys::getuid() == 0 {
                    let program = devices::bpf_program(devices::rules(privileged));
                    sys::attach_device_program(dir, &program)
                        .map_err(io_err(dir, "attach its device program (bpf)"))?;
                }
                // The kubelet's defaults on v2: no swap (its NoSwap behaviour), and an OOM
                // kill takes the whole container, not one of its processes.
                if f.exists("memory.swap.max") {
                    f.set("memory.swap.max", "0")?;
                }
                if f.exists("memory.oom.group") {
                    f.set("memory.oom.group", "1")?;
                }
            }
            if f.exists("cpu.weight") {
                f.set("cpu.weight", &cpu_weight(shares).to_string())?;
            }
            if let Some(q) = quota {
                f.set("cpu.max", &format!("{q} {CPU_PERIOD_US}"))?;
            }
            if let Some(n) = pids_max {
                f.set("pids.max", &n.to_string())?;
            }
        }
    }
    Ok(())
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
            kill(d);
            match std::fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) if Instant::now() < deadline && e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(CgroupError::Held {
                        path: d.display().to_string(),
                        held_by: held_by(d),
                    });
                }
                Err(e) => return Err(io_err(d, "remove")(e)),
            }
        }
    }
    Ok(())
}

/// What still holds cgroup `dir` after it was killed: its processes, each with its state
/// (`D`: waiting in the kernel, which no signal ends), or that the kernel has not let go of
/// one that exited.
fn held_by(dir: &Path) -> String {
    let procs = procs_of(dir);
    if procs.is_empty() {
        return "no process is listed in it any more (one that was killed is still exiting)".into();
    }
    let described: Vec<String> = procs
        .iter()
        .map(|pid| match crate::process::stat::ProcStat::read(*pid) {
            Some(s) => format!("{pid} ({}, state {})", s.comm, s.state),
            None => format!("{pid} (?, state ?)"),
        })
        .collect();
    format!("process {}", described.join(", "))
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            collect_dirs(&e.path(), out);
        }
    }
}

/// What the last run on `state_dir` left of its pod's cgroups (a run killed with -9, or one
/// under live restore whose keepers hold nothing), as `podvisor delete` removes an ended pod:
/// what is still in them is killed, and they go with their record. On v2, podvisor's parent
/// cgroup too when no other pod is in it.
pub fn remove_left(state_dir: &Path) -> Result<(), CgroupError> {
    let record = StateFile::new(state_dir, RECORD)?;
    let dirs = clean_recorded(&record)?;
    for dir in dirs {
        unified::remove_parent_if_empty(&dir);
    }
    Ok(())
}

/// The processes still in the pod cgroups the last run on `state_dir` recorded in this boot
/// and did not remove (a run killed with -9 leaves there what a container started in the
/// background, which no parent-death signal reaches, until `podvisor delete` or the next run
/// ends it), in pid order. Only for what a client tells the user: a record that cannot be
/// read counts as none.
pub fn left_processes(state_dir: &Path) -> Vec<i32> {
    let text = StateFile::new(state_dir, RECORD).map(|r| r.read_of_this_boot());
    let Ok(Ok(Some(text))) = text else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    for dir in recorded_dirs(&text).filter(|d| d.is_dir()) {
        collect_dirs(dir, &mut dirs);
    }
    // On v1 a process is in a cgroup of each hierarchy.
    let mut pids: Vec<i32> = dirs.iter().flat_map(|d| procs_of(d)).collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Removes the pod cgroups an earlier run on this state dir recorded in this boot, and the
/// record, and says which they were; a record of another boot, or one that is not text, goes
/// unread (see the module's comment). A record of a podvisor of before 2026-12 (no boot line)
/// is read as it is.
fn clean_recorded(record: &StateFile) -> Result<Vec<PathBuf>, CgroupError> {
    let mut removed = Vec::new();
    if let Some(text) = record.read_of_this_boot()? {
        for dir in recorded_dirs(&text) {
            remove_tree(dir)?;
            removed.push(dir.to_path_buf());
        }
    }
    record.remove_for_this_boot()?;
    Ok(removed)
}

/// The pod cgroups a record's text lists, one per line: only cgroup directories, whatever
/// else the file may hold.
fn recorded_dirs(text: &str) -> impl Iterator<Item = &Path> {
    (text.lines().map(Path::new)).filter(|dir| dir.starts_with("/sys/fs/cgroup"))
}

#[cfg(test)]
mod tests {
    use super::held_by;
    use crate::testing::TempDir;

    #[test]
    fn a_held_cgroup_names_its_processes_and_their_states() {
        let dir = TempDir::new("held");
        let me = std::process::id();
        std::fs::write(dir.join("cgroup.procs"), format!("{me}\n")).unwrap();
        let held = held_by(&dir);
        // The test binary's main thread: waiting (S) or running (R), as the other tests go.
        assert!(held.starts_with(&format!("process {me} (")), "{held}");
        let state = held.rsplit_once(", state ").map(|(_, s)| s);
        assert!(matches!(state, Some("S)" | "R)")), "{held}");
        std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        assert_eq!(
            held_by(&dir),
            "no process is listed in it any more (one that was killed is still exiting)"
        );
    }
}
