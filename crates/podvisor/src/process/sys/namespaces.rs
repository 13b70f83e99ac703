//! A pod's namespaces: made on a thread of their own (namespaces belong to a thread; when the
//! thread ends, the descriptors keep them), opened from a process, and the PID namespace a
//! spawning thread's next child is born in.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use super::{c_string, check};

/// The pod's UTS and IPC namespaces, each held by a descriptor.
#[derive(Debug, Default)]
pub struct PodNamespaceFds {
    pub uts: Option<OwnedFd>,
    pub ipc: Option<OwnedFd>,
}

/// Makes a UTS namespace named `hostname` (when given) and an IPC namespace (when `ipc`),
/// with `sysctls` (`/proc/sys` paths relative, and values) written inside them, on a
/// short-lived thread: the rest of podvisor stays in its own.
pub fn make_pod_namespaces(
    hostname: Option<&str>,
    ipc: bool,
    sysctls: &[(String, String)],
) -> io::Result<PodNamespaceFds> {
    let hostname = hostname.map(str::to_string);
    let sysctls = sysctls.to_vec();
    std::thread::spawn(move || -> io::Result<PodNamespaceFds> {
        let mut flags = 0;
        if hostname.is_some() {
            flags |= libc::CLONE_NEWUTS;
        }
        if ipc {
            flags |= libc::CLONE_NEWIPC;
        }
        if flags == 0 {
            return Ok(PodNamespaceFds::default());
        }
        // SAFETY: unshare(2) on this thread only, which ends right after.
        check(unsafe { libc::unshare(flags) })?;
        if let Some(h) = &hostname {
            // SAFETY: sethostname(2) with a live buffer and its length.
            check(unsafe { libc::sethostname(h.as_ptr().cast(), h.len()) })?;
        }
        for (path, value) in &sysctls {
            std::fs::write(std::path::Path::new("/proc/sys").join(path), value)
                .map_err(|e| io::Error::new(e.kind(), format!("sysctl {path}: {e}")))?;
        }
        let open = |kind: &str| open_namespace_path(&format!("/proc/thread-self/ns/{kind}"));
        Ok(PodNamespaceFds {
            uts: hostname.is_some().then(|| open("uts")).transpose()?,
            ipc: ipc.then(|| open("ipc")).transpose()?,
        })
    })
    .join()
    .map_err(|_| io::Error::other("the namespaces' thread panicked"))?
}

/// The namespace `kind` (`uts`, `ipc`, `pid`, `mnt`, `user`) process `pid` is in.
pub fn open_namespace(pid: i32, kind: &str) -> io::Result<OwnedFd> {
    open_namespace_path(&format!("/proc/{pid}/ns/{kind}"))
}

/// A namespace by path (`/proc/PID/ns/KIND`, or `/proc/PID/fd/N` of a descriptor that holds
/// one).
pub fn open_namespace_path(path: &str) -> io::Result<OwnedFd> {
    let c = c_string(path.as_bytes())?;
    // SAFETY: open(2) on a C string we own.
    let fd = check(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
    // SAFETY: a descriptor just opened, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// podvisor's own PID namespace, opened once (a process's active PID namespace never
/// changes; only the one its threads' children are born in does).
fn own_pid_namespace() -> io::Result<RawFd> {
    static OWN: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = OWN.get() {
        return Ok(fd.as_raw_fd());
    }
    let fd = open_namespace_path("/proc/self/ns/pid")?;
    Ok(OWN.get_or_init(|| fd).as_raw_fd())
}

/// While this lives, the calling thread's children are born in another PID namespace.
pub(super) struct ChildrenIn(());

impl ChildrenIn {
    /// The PID namespace of `fd` for this thread's next children (setns(2): only the
    /// thread's children change namespace, not the thread).
    pub(super) fn pid_namespace(fd: RawFd) -> io::Result<ChildrenIn> {
        own_pid_namespace()?;
        // SAFETY: setns(2) on a descriptor the caller holds, for this thread's children.
        check(unsafe { libc::setns(fd, libc::CLONE_NEWPID) })?;
        Ok(ChildrenIn(()))
    }
}

impl Drop for ChildrenIn {
    fn drop(&mut self) {
        let back = own_pid_namespace().and_then(|own| {
            // SAFETY: setns(2) back to our own PID namespace, for this thread's children.
            check(unsafe { libc::setns(own, libc::CLONE_NEWPID) })
        });
        // A thread whose children would be born in a container's namespace must not go on.
        if let Err(e) = back {
            eprintln!("podvisor: cannot return to its own PID namespace: {e}");
            std::process::abort();
        }
    }
}
