//! What the run holds of each running container instance, in one place: its process, the
//! record of where it started, its cgroup, the namespaces its probes and hooks join, and the
//! keeper that holds it. An `Instance` is made when a start succeeds or a container is
//! adopted (`Instances::hold`) and goes when its process has ended (`Instances::end`).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;

use podvisor_core::lifecycle::InstanceId;
use podvisor_core::record::ProcessRecord;

use crate::cgroup::InstanceCgroup;
use crate::process::sys::{self, Namespaces, PidSetup};
use crate::state::processes;

/// A running container instance.
#[derive(Debug)]
pub(super) struct Instance {
    /// Its main process, which leads its process group: the containerID's pid.
    pub pid: i32,
    /// Where its main process started, for the record (a reused pid is never mistaken for it).
    pub process: Option<ProcessRecord>,
    pub cgroup: Option<InstanceCgroup>,
    /// A pidfd of its main process: watched for its exit when this run is its parent
    /// (`watch_exit`), and what its probes and hooks join its mount namespace through where
    /// the kernel allows (`sys::setns_joins_processes`), so that the namespace goes with it.
    pidfd: Option<OwnedFd>,
    /// Whether this run is its parent and watches `pidfd` for its exit.
    watched: bool,
    /// How its probes and hooks join its mount namespace, when it has one of its own
    /// (volumes, a private root).
    mount: MountJoin,
    /// Its user namespace, when it has one of its own (rootless).
    user_ns: Option<File>,
    /// Its UTS, IPC and PID namespaces, when not ours.
    uts_ns: Option<File>,
    ipc_ns: Option<File>,
    pid_ns: Option<File>,
    /// The keeper that holds it (`--live-restore`), by pid.
    pub keeper: Option<i32>,
    /// The write end of its stdin (`stdin: true`), held while it runs: its reads wait.
    pub stdin: Option<OwnedFd>,
}

impl Instance {
    /// The instance whose main process is `pid` (started just now, or found running).
    pub fn new(pid: i32, cgroup: Option<InstanceCgroup>, keeper: Option<i32>) -> Instance {
        let process =
            processes::start_ticks(pid).map(|start_ticks| ProcessRecord { pid, start_ticks });
        Instance {
            pid,
            process,
            cgroup,
            pidfd: None,
            watched: false,
            mount: MountJoin::Shared,
            user_ns: None,
            uts_ns: None,
            ipc_ns: None,
            pid_ns: None,
            keeper,
            stdin: None,
        }
    }

    /// The instance `pid` of a record, found running (adopted).
    pub fn adopted(
        process: ProcessRecord,
        cgroup: Option<InstanceCgroup>,
        keeper: i32,
    ) -> Instance {
        Instance {
            process: Some(process),
            ..Instance::new(process.pid, cgroup, Some(keeper))
        }
    }

    /// Opens the namespaces of its own that its probes and hooks run in, as `exec` in a
    /// container does: its mount, UTS, IPC and PID namespaces and, rootless, its user
    /// namespace. Those it shares with this process are left alone. With `watch_exit` (this
    /// run is its parent), a pidfd of its process too, for its exit (`exit_watch`).
    pub fn open_namespaces(&mut self, watch_exit: bool) {
        let own_mount = has_own(self.pid, "mnt");
        let through_pid = sys::setns_joins_processes();
        if watch_exit || (own_mount && through_pid) {
            self.pidfd = sys::pidfd_open(self.pid).ok();
        }
        self.watched = watch_exit && self.pidfd.is_some();
        self.mount = match (own_mount, through_pid && self.pidfd.is_some()) {
            (false, _) => MountJoin::Shared,
            (true, true) => MountJoin::Process,
            (true, false) => match sys::open_namespace(self.pid, "mnt") {
                Ok(ns) => MountJoin::Namespace(ns),
                Err(_) => MountJoin::Shared,
            },
        };
        self.user_ns = own_namespace(self.pid, "user");
        self.uts_ns = own_namespace(self.pid, "uts");
        self.ipc_ns = own_namespace(self.pid, "ipc");
        self.pid_ns = own_namespace(self.pid, "pid");
    }

    /// The pidfd that says when its process has exited, when this run is its parent.
    pub fn exit_watch(&self) -> Option<RawFd> {
        self.pidfd
            .as_ref()
            .filter(|_| self.watched)
            .map(AsRawFd::as_raw_fd)
    }

    /// The UTS, IPC and PID namespaces its probes and hooks enter (rootless, its PID
    /// namespace through its user namespace, see `process::sys::spawn`).
    pub fn exec_namespaces(&self) -> Namespaces {
        let fd = |f: &Option<File>| f.as_ref().map(AsRawFd::as_raw_fd);
        let pid = match fd(&self.pid_ns) {
            Some(pid) => PidSetup::Join(pid),
            None => PidSetup::Inherit,
        };
        Namespaces {
            join_uts: fd(&self.uts_ns),
            join_ipc: fd(&self.ipc_ns),
            pid,
            ..Namespaces::default()
        }
    }

    /// What a child `setns`es to join its mount namespace: a pidfd, or the namespace itself.
    pub fn mount_join(&self) -> Option<RawFd> {
        match &self.mount {
            MountJoin::Shared => None,
            MountJoin::Process => self.pidfd.as_ref().map(AsRawFd::as_raw_fd),
            MountJoin::Namespace(ns) => Some(ns.as_raw_fd()),
        }
    }

    pub fn user_ns(&self) -> Option<RawFd> {
        self.user_ns.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The `cgroup.procs` files (open) its probes and hooks join.
    pub fn cgroup_fds(&self) -> Vec<RawFd> {
        self.cgroup
            .as_ref()
            .map(InstanceCgroup::join_fds)
            .unwrap_or_default()
    }
}

/// How an instance's probes and hooks join its mount namespace.
#[derive(Debug)]
enum MountJoin {
    /// They do not: it is this process's.
    Shared,
    /// Through its process (`Instance::pidfd`).
    Process,
    /// Through the namespace itself, held (before Linux 5.8).
    Namespace(OwnedFd),
}

/// Namespace `kind` of `pid`, opened, when it is not this process's own.
fn own_namespace(pid: i32, kind: &str) -> Option<File> {
    if !has_own(pid, kind) {
        return None;
    }
    File::open(format!("/proc/{pid}/ns/{kind}")).ok()
}

/// Whether `pid` is in a namespace `kind` other than this process's.
fn has_own(pid: i32, kind: &str) -> bool {
    let theirs = std::fs::metadata(format!("/proc/{pid}/ns/{kind}"));
    let ours = std::fs::metadata(format!("/proc/self/ns/{kind}"));
    match (theirs, ours) {
        (Ok(theirs), Ok(ours)) => theirs.ino() != ours.ino(),
        _ => false,
    }
}

/// The running instances, and the main pids of each container's latest instances (the
/// containerIDs its status shows for its state and its last state). Looked up for every
/// container of every status line, so without hashing: the instances in order, the pids by
/// container.
#[derive(Debug, Default)]
pub(super) struct Instances {
    live: BTreeMap<InstanceId, Instance>,
    /// Per container (by index), (instance, pid) of its two latest instances, newest first.
    ids: Vec<[Option<(u32, i32)>; 2]>,
}

impl Instances {
    /// Holds instance `id`, just started or adopted.
    pub fn hold(&mut self, id: InstanceId, instance: Instance) {
        if self.ids.len() <= id.container {
            self.ids.resize(id.container + 1, [None; 2]);
        }
        let ids = &mut self.ids[id.container];
        if ids[0].is_some_and(|(n, _)| n != id.instance) {
            ids[1] = ids[0];
        }
        ids[0] = Some((id.instance, instance.pid));
        self.live.insert(id, instance);
    }

    /// Lets go of instance `id`, whose process has ended.
    pub fn end(&mut self, id: InstanceId) -> Option<Instance> {
        self.live.remove(&id)
    }

    pub fn get(&self, id: InstanceId) -> Option<&Instance> {
        self.live.get(&id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (InstanceId, &Instance)> {
        self.live.iter().map(|(&id, i)| (id, i))
    }

    /// The main pid instance `instance` of container `container` ran as, if it is one of its
    /// two latest.
    pub fn pid_of(&self, container: usize, instance: u32) -> Option<i32> {
        let ids = self.ids.get(container)?;
        ids.iter()
            .flatten()
            .find(|(n, _)| *n == instance)
            .map(|&(_, pid)| pid)
    }

    /// The instances keeper `keeper` holds, in container order.
    pub fn held_by(&self, keeper: i32) -> Vec<InstanceId> {
        self.iter()
            .filter(|(_, i)| i.keeper == Some(keeper))
            .map(|(id, _)| id)
            .collect()
    }

    /// Every running instance's cgroup, taken (the run's end).
    pub fn take_cgroups(&mut self) -> Vec<InstanceCgroup> {
        self.live
            .values_mut()
            .filter_map(|i| i.cgroup.take())
            .collect()
    }
}
