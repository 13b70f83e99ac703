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

/// A pidfd of process `pid` (Linux 5.3 and later): readable (epoll) once it has exited, and,
/// from Linux 5.8, what a child joins its namespaces through (`setns_joins_processes`).
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = check(fd as i32)?;
    // SAFETY: a descriptor just made, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether `setns(2)` takes a pidfd (Linux 5.8 and later), from the kernel's release: a
/// child then joins a container's mount namespace through a pidfd of its process, which
/// holds the process and not its namespace; before, through the namespace itself.
///
/// Through the process, the namespace goes with the process's exit, as a container's does
/// under runc: its mounts (a private root's overlay, volumes) are taken down by that exit,
/// not by whoever closes the last descriptor on it (two RCU grace periods, about 0.3 ms).
/// A child joins the namespace the process is in when it joins, as `runc exec` does, and
/// fails once the process has ended.
pub fn setns_joins_processes() -> bool {
    static JOINS: OnceLock<bool> = OnceLock::new();
    *JOINS.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        release_at_least(&release, (5, 8))
    })
}

/// Whether this kernel makes a mount read-only with everything below it (mount_setattr(2)
/// with `AT_RECURSIVE`, Linux 5.12), as `recursiveReadOnly` asks.
pub fn recursive_read_only_mounts() -> bool {
    static CAN: OnceLock<bool> = OnceLock::new();
    *CAN.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        release_at_least(&release, (5, 12))
    })
}

/// Whether kernel release `release` ("6.1.0-18-amd64") is `at_least` (major, minor).
fn release_at_least(release: &str, at_least: (u32, u32)) -> bool {
    let mut parts = release.trim().split(['.', '-']);
    let mut number = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (number(), number()) {
        (Some(major), Some(minor)) => (major, minor) >= at_least,
        _ => false,
    }
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

/// One line of a user namespace's `uid_map` or `gid_map`: ids `inside..inside+count` are
/// `outside..outside+count` outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMapLine {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// A user namespace whose maps are written by the setuid helpers `newuidmap` and `newgidmap`
/// (shadow-utils), which check them against `/etc/subuid` and `/etc/subgid`, as rootless
/// podman and buildah make theirs: a child is made in a new user namespace and waits while
/// the helpers write its maps; the namespace is then held by the descriptor returned and
/// the child ends. `Err` says which helper failed, with what it printed.
pub fn mapped_user_namespace(uids: &[IdMapLine], gids: &[IdMapLine]) -> io::Result<OwnedFd> {
    let (ready_r, ready_w) = super::fd::blocking_pipe()?;
    let (go_r, go_w) = super::fd::blocking_pipe()?;
    let fds = [ready_r.as_raw_fd(), go_w.as_raw_fd()];
    // SAFETY: the child keeps to system calls (close, unshare, prctl, write, read, _exit).
    let pid = unsafe { super::fork::fork() }?;
    if pid == 0 {
        // SAFETY: system calls on descriptors this process holds, then _exit.
        let code = unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::unshare(libc::CLONE_NEWUSER) == -1 {
                1
            } else {
                let mut byte = 0u8;
                libc::write(ready_w.as_raw_fd(), (&raw const byte).cast(), 1);
                // Until the parent closes its end: EOF.
                libc::read(go_r.as_raw_fd(), (&raw mut byte).cast(), 1);
                0
            }
        };
        super::fork::exit_now(code);
    }
    drop((ready_w, go_r));
    let made = (|| {
        let mut byte = [0u8; 1];
        let mut ready = std::fs::File::from(ready_r);
        if std::io::Read::read(&mut ready, &mut byte)? != 1 {
            return Err(io::Error::other(
                "the child could not make a user namespace",
            ));
        }
        for (helper, lines) in [("newuidmap", uids), ("newgidmap", gids)] {
            let mut cmd = std::process::Command::new(helper);
            cmd.arg(pid.to_string());
            for l in lines {
                cmd.args([l.inside, l.outside, l.count].map(|n| n.to_string()));
            }
            let out = cmd
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| io::Error::new(e.kind(), format!("{helper}: {e}")))?;
            if !out.status.success() {
                let said = String::from_utf8_lossy(&out.stderr);
                return Err(io::Error::other(format!(
                    "{helper} {}: {}",
                    out.status,
                    said.trim()
                )));
            }
        }
        open_namespace(pid, "user")
    })();
    drop(go_w);
    let _ = super::wait_for(pid);
    made
}

/// Makes `cmd` join the user namespace `ns` before it runs its program (setns(2) in the
/// child, which is single-threaded there, as setns into a user namespace needs): it runs as
/// root of that namespace, with its capabilities over what the namespace maps.
pub fn command_in_user_namespace(cmd: &mut std::process::Command, ns: &OwnedFd) {
    use std::os::unix::process::CommandExt;
    let fd = ns.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and only makes one system
    // call on a descriptor the parent keeps open until the child has been spawned.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWUSER) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::release_at_least;

    #[test]
    fn kernel_releases_are_compared_by_major_then_minor() {
        assert!(release_at_least("5.8.0", (5, 8)));
        assert!(release_at_least("6.1.0-18-amd64\n", (5, 8)));
        assert!(release_at_least("5.10-rc1", (5, 8)));
        assert!(!release_at_least("5.4.0-150-generic", (5, 8)));
        assert!(!release_at_least("4.19.0", (5, 8)));
        assert!(!release_at_least("", (5, 8)));
        assert!(!release_at_least("six.one", (5, 8)));
    }
}
