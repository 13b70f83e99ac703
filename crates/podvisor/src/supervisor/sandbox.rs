//! The pod's sandbox, as a container runtime makes one for a Kubernetes pod: the UTS
//! namespace (its hostname) and the IPC namespace its containers share, held by descriptors
//! here, and with `shareProcessNamespace` the pod's PID namespace, whose PID 1 is a small
//! process of podvisor's own (`podvisor pause`, the pause container's part: it reaps what
//! the containers orphan). Each container otherwise gets a PID namespace of its own, in
//! which its main process is PID 1.
//!
//! As root the pod's namespaces are made once and joined by each container; rootless, a
//! container's namespaces are owned by the user namespace it is born in, so each gets a UTS
//! and an IPC namespace of its own with the pod's hostname (not shared between containers),
//! and a shared PID namespace is refused. Without root or user namespaces (the host's root),
//! containers stay in the host's namespaces, as the `HostRoot` warning says.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use podvisor_core::namespaces::{PidNamespace, PodNamespaces};

use crate::cgroup::Unenforceable;
use crate::process::sys::{
    self, ChildSetup, ContainerIo, Inherited, Namespaces, PidSetup, PodNamespaceFds, Reaped, SigSet,
};

/// How this run can give containers namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Power {
    /// As root: the pod's namespaces, joined.
    Root,
    /// In user namespaces: each container's own.
    Rootless,
    /// Neither: the host's.
    None,
}

/// The pod's namespaces while the run lasts.
#[derive(Debug)]
pub(super) struct Sandbox {
    plan: PodNamespaces,
    power: Power,
    fds: PodNamespaceFds,
    pause: Option<Pause>,
}

/// The PID 1 of the pod's shared PID namespace.
#[derive(Debug)]
struct Pause {
    pid: i32,
    pid_ns: OwnedFd,
}

impl Sandbox {
    /// The pod's UTS and IPC namespaces (with its sysctls set there), made, or taken from
    /// `running`, a container of the pod found running (a run taking over from keepers).
    pub(super) fn make(
        plan: &PodNamespaces,
        power: Power,
        running: Option<i32>,
        live_restore: bool,
    ) -> Result<Sandbox, Unenforceable> {
        refuse_what_cannot_be(plan, power, live_restore)?;
        let fds = match (power, running) {
            (Power::Root, Some(pid)) => PodNamespaceFds {
                uts: plan
                    .hostname
                    .as_ref()
                    .and_then(|_| sys::open_namespace(pid, "uts").ok()),
                ipc: plan
                    .own_ipc
                    .then(|| sys::open_namespace(pid, "ipc").ok())
                    .flatten(),
            },
            (Power::Root, None) => {
                let sysctls: Vec<(String, String)> = plan
                    .sysctls
                    .iter()
                    .map(|(k, v)| (k.replace('.', "/"), v.clone()))
                    .collect();
                sys::make_pod_namespaces(plan.hostname.as_deref(), plan.own_ipc, &sysctls).map_err(
                    |e| Unenforceable {
                        container: String::new(),
                        field: "",
                        needs: "its own UTS and IPC namespaces",
                        why: e.to_string(),
                    },
                )?
            }
            _ => PodNamespaceFds::default(),
        };
        Ok(Sandbox {
            plan: plan.clone(),
            power,
            fds,
            pause: None,
        })
    }

    /// The namespaces of a new container instance (`user_ns`: rootless, it is born in a user
    /// namespace of its own, without which it gets none); with a shared PID namespace its
    /// PID 1 is started first if it is not running (its pid is returned, to be reaped as
    /// ours).
    pub(super) fn for_container(
        &mut self,
        inherited: &Inherited,
        user_ns: bool,
    ) -> io::Result<(Namespaces, Option<i32>)> {
        if self.power == Power::Rootless && !user_ns {
            return Ok((Namespaces::default(), None));
        }
        let mut started = None;
        let pid = match (self.power, self.plan.pid) {
            (Power::None, _) | (_, PidNamespace::Host) => PidSetup::Inherit,
            (_, PidNamespace::Container) => PidSetup::New,
            (_, PidNamespace::Pod) => {
                if self.pause.is_none() {
                    let pause = self.start_pause(inherited)?;
                    started = Some(pause.pid);
                    self.pause = Some(pause);
                }
                PidSetup::Join(self.pause.as_ref().map_or(-1, |p| p.pid_ns.as_raw_fd()))
            }
        };
        let ns = match self.power {
            Power::Root => Namespaces {
                join_uts: self.fds.uts.as_ref().map(AsRawFd::as_raw_fd),
                join_ipc: self.fds.ipc.as_ref().map(AsRawFd::as_raw_fd),
                pid,
                ..Namespaces::default()
            },
            Power::Rootless => Namespaces {
                new_uts: self.plan.hostname.clone(),
                new_ipc: self.plan.own_ipc,
                pid,
                ..Namespaces::default()
            },
            Power::None => Namespaces::default(),
        };
        Ok((ns, started))
    }

    /// The pod's PID 1 in a PID namespace of its own, in the pod's UTS and IPC namespaces.
    fn start_pause(&self, inherited: &Inherited) -> io::Result<Pause> {
        let null = std::fs::File::options().write(true).open("/dev/null")?;
        let io = ContainerIo {
            terminal: None,
            stdin: None,
            stdout: null.as_raw_fd(),
            stderr: null.as_raw_fd(),
            working_dir: Some("/".into()),
            working_dir_optional: false,
            env: sys::Environment::new(crate::process::failpoint::stall_environment())?,
            mounts: Vec::new(),
            join_mounts: None,
            join_user: None,
            cgroups: Vec::new(),
            root: None,
            credentials: None,
            namespaces: Namespaces {
                join_uts: self.fds.uts.as_ref().map(AsRawFd::as_raw_fd),
                join_ipc: self.fds.ipc.as_ref().map(AsRawFd::as_raw_fd),
                pid: PidSetup::New,
                ..Namespaces::default()
            },
        };
        let argv: Vec<OsString> = vec!["/proc/self/exe".into(), "pause".into()];
        let pid = sys::spawn(&argv, ChildSetup::Container(Box::new(io)), inherited)?;
        let pid_ns = sys::open_namespace(pid, "pid")?;
        Ok(Pause { pid, pid_ns })
    }

    /// Whether `pid` was the pod's PID 1 (now gone: the next container start makes another,
    /// as the kubelet makes a new sandbox).
    pub(super) fn pause_exited(&mut self, pid: i32) -> bool {
        if self.pause.as_ref().is_some_and(|p| p.pid == pid) {
            self.pause = None;
            return true;
        }
        false
    }

    /// Ends the pod's PID 1 (the run's end); its pid, to be reaped.
    pub(super) fn end(&mut self) -> Option<i32> {
        let pause = self.pause.take()?;
        let _ = sys::send_signal(pause.pid, libc::SIGKILL);
        Some(pause.pid)
    }

    /// What `describe` says of the pod's namespaces.
    pub(super) fn note(&self) -> String {
        let uts = match (&self.plan.hostname, self.power) {
            (_, Power::None) => "host's".to_string(),
            (None, _) => "host's (hostNetwork)".to_string(),
            (Some(h), Power::Root) => format!("pod's (hostname {h})"),
            (Some(h), Power::Rootless) => format!("per container (hostname {h})"),
        };
        let ipc = match (self.plan.own_ipc, self.power) {
            (_, Power::None) | (false, _) => "host's",
            (true, Power::Root) => "pod's",
            (true, Power::Rootless) => "per container",
        };
        let pid = match (self.plan.pid, self.power) {
            (_, Power::None) | (PidNamespace::Host, _) => "host's",
            (PidNamespace::Container, _) => "per container",
            (PidNamespace::Pod, _) => "pod's (shareProcessNamespace)",
        };
        format!("uts {uts}, ipc {ipc}, pid {pid}, network host's")
    }
}

/// What the pod asks and this run cannot give, refused by field before anything starts.
fn refuse_what_cannot_be(
    plan: &PodNamespaces,
    power: Power,
    live_restore: bool,
) -> Result<(), Unenforceable> {
    let refuse = |field: &'static str, needs: &'static str, why: &str| {
        Err(Unenforceable {
            container: String::new(),
            field,
            needs,
            why: why.to_string(),
        })
    };
    if !plan.sysctls.is_empty() && power != Power::Root {
        return refuse(
            "securityContext.sysctls",
            "root",
            "sysctls are set in the pod's namespaces, which only root can make here",
        );
    }
    if plan.pid == PidNamespace::Pod {
        if power != Power::Root {
            return refuse(
                "shareProcessNamespace",
                "root",
                "the pod's shared PID namespace is joined by containers born in user namespaces of their own, which rootless cannot do",
            );
        }
        if live_restore {
            return refuse(
                "shareProcessNamespace",
                "a PID 1 that outlives the run",
                "with --live-restore the containers outlive the run, but the PID 1 of the pod's shared PID namespace is the run's child and ends with it; run without --live-restore",
            );
        }
    }
    Ok(())
}

/// `podvisor pause`: the PID 1 of a pod's shared PID namespace. It reaps whatever is
/// orphaned into it and ends on SIGTERM, SIGINT or SIGHUP (podvisor ends it with SIGKILL).
pub fn pause_main() -> i32 {
    // One per pod, for the pod's life: the code it ran to start goes, with what only the loader
    // read (from here on it runs only its loop, which faults its own pages back in). Where
    // `/proc` cannot tell its pages apart, at least the loader's tables go.
    crate::process::failpoint::stall("pause.settle");
    if sys::forget_read_only_pages().is_err() {
        let _ = sys::forget_relocations();
    }
    let mut set = SigSet::empty();
    for s in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        set.add(s);
    }
    if sys::set_signal_mask(&set).is_err() {
        return 1;
    }
    loop {
        match sys::wait_signal(&set, None) {
            Ok(Some(libc::SIGCHLD)) => while let Ok(Reaped::Exited { .. }) = sys::reap_one() {},
            Ok(Some(_)) => return 0,
            Ok(None) => {}
            Err(_) => return 1,
        }
    }
}
