//! cgroups of `podvisor run`: one per pod and one per container instance under it, with the
//! limits the kubelet would set (numbers from `podvisor_core::spec::resources`). cgroup v2
//! when `/sys/fs/cgroup` is the unified hierarchy, v1 (a hierarchy per controller: memory,
//! cpu, cpuacct, pids) otherwise, found at start from /proc/self/mountinfo and
//! /proc/self/cgroup, as runc's `IsCgroup2UnifiedMode` decides.
//!
//! Where the pod cgroup goes: on v1, under the cgroup podvisor runs in (the part of each
//! hierarchy delegated to it); on v2, where `unified` places it (below a podvisor parent at the
//! top of the writable tree, never below a cgroup that holds a process).
//!
//! A container process joins its instance's cgroup before exec (the spawned child writes to
//! the `cgroup.procs` files opened here), so nothing it allocates escapes the limit. An OOM
//! kill is read from the instance cgroup's counter (v1 `memory.oom_control`, v2
//! `memory.events`), as containerd reports `OOMKilled` from the cgroup's OOM event.
//!
//! Never: a process that is not the pod's touched (podvisor moves only itself).

mod fs;
mod pod;
pub mod systemd;
pub mod unified;

use std::io;
use std::path::{Path, PathBuf};

pub use pod::{
    instance_dir, left_processes, oom_kills_in, remove_left, InstanceCgroup, PodCgroup, Resource,
    Usage, UsageFiles,
};

use crate::mountinfo::{self, Mount};
use crate::process::sys;
use crate::state::StateError;

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
    /// v1's device controller: what a container may open (`podvisor_core::devices`). On v2
    /// a program attached to the instance's cgroup does it.
    Devices,
    Unified,
}

impl Controller {
    fn v1_name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::CpuAcct => "cpuacct",
            Controller::Pids => "pids",
            Controller::Devices => "devices",
            Controller::Unified => "",
        }
    }
}

/// podvisor's own cgroup in each hierarchy it uses.
#[derive(Debug, Clone)]
pub struct Layout {
    pub version: Version,
    roots: Vec<(Controller, PathBuf)>,
    /// v2: where the unified hierarchy is mounted.
    mount: PathBuf,
}

/// Where the pod's cgroup goes: `name` under a directory per hierarchy, with (v2) the
/// controllers enabled for its children; and for `describe`, how it was placed.
#[derive(Debug)]
struct Placement {
    parents: Vec<(Controller, PathBuf)>,
    enabled: Vec<&'static str>,
    name: String,
    note: String,
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
    #[error("cgroup {path}: the {controller} controller is not available here (cgroup.controllers: \"{offered}\"): {fix}")]
    ControllerMissing {
        path: String,
        controller: &'static str,
        offered: String,
        fix: &'static str,
    },
    #[error("cgroup {path}: not delegated to uid {uid} (its files belong to uid {owner}): run podvisor in a cgroup delegated to this user (systemd-run --user --scope -p Delegate=yes), with --cgroup-driver systemd, or as root")]
    NotDelegated { path: String, uid: u32, owner: u32 },
    #[error("cgroup {path}: holds other processes ({pids}), so cgroup v2 allows no controllers for its children: start podvisor in a cgroup of its own (systemd-run --scope), with --cgroup-driver systemd, or as root")]
    Busy { path: String, pids: String },
    #[error("cgroup {path}: still in use {} s after every process in it was killed: {held_by}; the next run on this state dir removes it", pod::PATIENCE.as_secs())]
    Held { path: String, held_by: String },
    #[error("cgroup {path}: the cgroup filesystem is read-only here: mount /sys/fs/cgroup read-write (a container needs its own writable cgroup namespace), or run the pod without limits")]
    ReadOnly { path: String },
    #[error("systemd: cannot {what}: {error} (or use --cgroup-driver cgroupfs)")]
    Systemd { what: &'static str, error: String },
    #[error("--cgroup-driver systemd: {why}: use --cgroup-driver cgroupfs")]
    NoSystemd { why: &'static str },
    #[error(transparent)]
    State(#[from] StateError),
}

/// Who manages the pods' cgroups (`--cgroup-driver`), as the kubelet's `cgroupDriver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Driver {
    /// systemd where it is PID 1 (and, for a user, where that user's manager answers) on
    /// cgroup v2; cgroupfs otherwise.
    #[default]
    Auto,
    /// A transient scope unit per pod, with `Delegate=yes`, asked for over D-Bus.
    Systemd,
    /// podvisor writes the cgroup tree itself.
    Cgroupfs,
}

impl Driver {
    /// The driver to use here: never `Auto`.
    fn resolve(self, layout: &Layout, uid: u32) -> Result<Driver, CgroupError> {
        let v2 = layout.version == Version::V2;
        let unavailable = || systemd::unavailable(uid);
        match self {
            Driver::Cgroupfs => Ok(Driver::Cgroupfs),
            Driver::Auto if v2 && unavailable().is_none() => Ok(Driver::Systemd),
            Driver::Auto => Ok(Driver::Cgroupfs),
            Driver::Systemd if !v2 => Err(CgroupError::NoSystemd {
                why: "this host has cgroup v1, and podvisor's systemd driver needs cgroup v2",
            }),
            Driver::Systemd => match unavailable() {
                Some(why) => Err(CgroupError::NoSystemd { why }),
                None => Ok(Driver::Systemd),
            },
        }
    }
}

impl CgroupError {
    /// Whether the message already says what to do about it.
    fn says_the_fix(&self) -> bool {
        matches!(
            self,
            CgroupError::ControllerMissing { .. }
                | CgroupError::NotDelegated { .. }
                | CgroupError::Busy { .. }
                | CgroupError::ReadOnly { .. }
                | CgroupError::Systemd { .. }
                | CgroupError::NoSystemd { .. }
        )
    }
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

    #[cfg(test)]
    fn dirs(&self, name: &Path) -> Vec<(Controller, PathBuf)> {
        self.roots
            .iter()
            .map(|(c, root)| (*c, root.join(name)))
            .collect()
    }

    /// Where the pod cgroup `name` goes for a process of `uid` with `driver`, made ready.
    /// `need`: the controllers the pod's limits cannot do without.
    fn place(
        &self,
        driver: Driver,
        uid: u32,
        need: &[&'static str],
        name: String,
        description: &str,
    ) -> Result<Placement, CgroupError> {
        match (driver.resolve(self, uid)?, self.version) {
            (Driver::Systemd, _) => {
                let unit = systemd::unit_name(&name);
                let scope = systemd::start_scope(uid, &unit, description, need)?;
                Ok(Placement {
                    note: format!(
                        "v2, systemd driver ({unit} in {}; {})",
                        systemd::SLICE,
                        scope.enabled.join(" ")
                    ),
                    parents: vec![(Controller::Unified, scope.dir)],
                    enabled: scope.enabled,
                    name: "pod".to_string(),
                })
            }
            (_, Version::V1) => {
                // The devices hierarchy is root's: a user (whose cgroups are delegated) cannot
                // make a device node, nor open one its user may not.
                let parents: Vec<_> = (self.roots.iter())
                    .filter(|(c, _)| *c != Controller::Devices || uid == 0)
                    .cloned()
                    .collect();
                let names: Vec<_> = parents.iter().map(|(c, _)| c.v1_name()).collect();
                Ok(Placement {
                    note: format!("v1 ({})", names.join(", ")),
                    parents,
                    enabled: Vec::new(),
                    name,
                })
            }
            (_, Version::V2) => {
                let (parent, enabled) = unified::place(&self.mount, &self.roots[0].1, uid, need)?;
                Ok(Placement {
                    note: format!(
                        "v2, cgroupfs driver ({}; {})",
                        parent.display(),
                        enabled.join(" ")
                    ),
                    parents: vec![(Controller::Unified, parent)],
                    enabled,
                    name,
                })
            }
        }
    }
}

/// The layout from /proc/self/mountinfo and /proc/self/cgroup.
/// The cgroup of process `pid` (a container instance's), to read its usage from (for
/// `podvisor top`, without asking the supervisor). `None` when the process is gone or is not in
/// a pod's cgroup (caught before it joined, or after its cgroup went: its parent's would report
/// much more). `mounts`: this process's mount table (`mountinfo::read`), read once for many.
pub fn instance_of(pid: i32, mounts: &[Mount]) -> Option<InstanceCgroup> {
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let layout = layout_from(mounts, &own)?;
    let in_pod = |d: &Path| {
        d.components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with("podvisor-"))
    };
    // (A user's containers stay in the root of v1's devices hierarchy: see `place`.)
    let counted = |c: &Controller| *c != Controller::Devices;
    if !(layout.roots.iter()).all(|(c, d)| !counted(c) || in_pod(d)) {
        return None;
    }
    Some(InstanceCgroup::reading(layout.version, layout.roots))
}

/// The line of a `/proc/PID/cgroup` text whose controllers (`memory`, `cpu,cpuacct`; empty
/// on the unified hierarchy) `pred` accepts, and its path.
fn membership<'a>(own: &'a str, pred: &dyn Fn(&str) -> bool) -> Option<(&'a str, &'a str)> {
    own.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, controllers, path) = (it.next()?, it.next()?, it.next()?);
        pred(controllers).then_some((l, path))
    })
}

fn layout_from(mounts: &[Mount], own: &str) -> Option<Layout> {
    let own_path = |pred: &dyn Fn(&str) -> bool| membership(own, pred).map(|(_, path)| path);
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
            mount: m.point.clone(),
        });
    }
    let mut roots = Vec::new();
    for c in [
        Controller::Memory,
        Controller::Cpu,
        Controller::CpuAcct,
        Controller::Pids,
        Controller::Devices,
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
        mount: PathBuf::from("/sys/fs/cgroup"),
    })
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
#[error("{}: {}needs {needs}, which podvisor cannot make here: {why}", whose(.container), named(.field))]
pub struct Unenforceable {
    pub container: String,
    /// The field that asks for it, named from the pod spec or the container (a Deployment's pod
    /// spec is under `spec.template.spec`, so no `spec.` prefix); empty when the pod as a whole
    /// does (its sandbox).
    pub field: &'static str,
    pub needs: &'static str,
    pub why: String,
}

/// Whose field it is: a container's, or (no name) the pod's.
fn whose(container: &str) -> String {
    match container {
        "" => "the pod".to_string(),
        c => format!("container {c:?}"),
    }
}

/// The field's name and a space, or nothing for the pod as a whole.
fn named(field: &str) -> String {
    match field {
        "" => String::new(),
        f => format!("{f} "),
    }
}

impl PodCgroups {
    /// The pod's cgroups. Without cgroups a pod that sets no limit runs anyway (its `describe`
    /// says why); one whose limit cannot be enforced is refused, naming the field.
    pub fn set_up(
        plan: &podvisor_core::spec::plan::RunPlan,
        state_dir: &Path,
        pids_max: Option<u64>,
        driver: Driver,
        keep: &[String],
    ) -> Result<PodCgroups, Unenforceable> {
        let mut need = Vec::new();
        let limits = plan.exec.iter().map(|x| &x.resources);
        let limits: Vec<_> = limits.chain([&plan.pod_resources]).collect();
        if limits.iter().any(|r| r.memory_limit.is_some()) {
            need.push("memory");
        }
        if limits.iter().any(|r| r.cpu_limit.is_some()) {
            need.push("cpu");
        }
        if pids_max.is_some() {
            need.push("pids");
        }
        let pod_level = |needs: &'static str, why: String| Unenforceable {
            container: String::new(),
            field: "resources",
            needs,
            why,
        };
        if plan.pod_level_resources {
            // As the kubelet, which admits such a pod only on a cgroup v2 node (KEP-2837).
            match Layout::detect() {
                Ok(l) if l.version == Version::V1 => {
                    return Err(pod_level(
                        "cgroup v2",
                        "this host mounts cgroup v1, on which the kubelet does not admit a pod with pod-level resources".into(),
                    ))
                }
                Err(e) => return Err(pod_level("cgroups", e.to_string())),
                Ok(_) => {}
            }
        }
        let made = Layout::detect().and_then(|layout| {
            let name = pod_cgroup_name(&plan.namespace, &plan.pod.name, state_dir);
            let description = format!("podvisor pod {}/{}", plan.namespace, plan.pod.name);
            let at = layout.place(driver, sys::getuid(), &need, name, &description)?;
            let pod = PodCgroup::create(
                layout.version,
                &at,
                state_dir,
                &plan.pod_resources,
                pids_max,
                keep,
            )?;
            Ok((at.note, pod))
        });
        match made {
            Ok((note, pod)) => Ok(PodCgroups {
                pod: Some(pod),
                note,
            }),
            Err(e) => {
                let why = if e.says_the_fix() {
                    e.to_string()
                } else {
                    format!("{e} (run as root, or in a cgroup delegated to this user)")
                };
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
                if let Some((container, field)) = needs {
                    return Err(Unenforceable {
                        container,
                        field,
                        needs: "cgroups",
                        why,
                    });
                }
                if plan.pod_level_resources {
                    return Err(pod_level("cgroups", why));
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
    use super::pod::keyed;
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
        let at = l
            .place(Driver::Auto, 0, &["memory"], "p".into(), "")
            .unwrap();
        assert_eq!(at.note, "v1 (memory, cpu, cpuacct, pids)");
        assert_eq!(at.parents, l.roots);
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
