//! The only place in podvisor with `unsafe`: thin, safe wrappers over the Linux syscalls that
//! supervision needs (signal masks, waiting for signals, reaping, prctl, terminal ownership, and
//! what the child does between fork and exec). `spawn.rs` holds the clone-and-exec path
//! (`clone.rs` the clone itself),
//! `fd.rs` the descriptor-based ones (signalfd, epoll, pipes, sockets, inotify, locks).
//!
//! Each wrapper returns `io::Result` with the raw errno preserved, so callers match
//! `libc::ECHILD` and friends, never message strings. Nothing here decides policy.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

#[cfg(test)]
mod alloc_count;
mod child;
mod clone;
mod creds;
#[cfg(feature = "full")]
mod devcg;
mod fd;
#[cfg(feature = "full")]
mod files;
mod fork;
mod heap;
mod inroot;
mod namespaces;
mod newroot;
mod passing;
mod program;
mod rootfs;
mod spawn;

#[cfg(test)]
pub use alloc_count::allocations;
pub use creds::{BpfInstruction, Credentials};
#[cfg(feature = "full")]
pub use devcg::attach_device_program;
pub use fd::*;
#[cfg(feature = "full")]
pub use files::{get_xattr, lchown, make_node, set_mtime, set_xattr};
pub use fork::*;
pub use heap::{give_back_free_heap, one_heap};
pub use namespaces::{
    command_in_user_namespace, make_pod_namespaces, mapped_user_namespace, open_namespace,
    open_namespace_path, pidfd_open, recursive_read_only_mounts, setns_joins_processes, IdMapLine,
    PodNamespaceFds,
};
pub use passing::{recv_fd, recv_with_fds, send_with_fds, MAX_PASSED};
#[cfg(test)]
pub(crate) use program::ONE_AT_A_TIME;
pub use program::{forget_loaded_read_only_pages, forget_read_only_pages, forget_relocations};
pub use rootfs::{host_devices, BindMount, Device, PrivateRoot, Rootless, TopEntry};
pub use spawn::*;

/// Highest signal number on Linux (`SIGRTMAX`).
pub const MAX_SIGNAL: i32 = 64;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A set of signals (`sigset_t`).
#[derive(Clone, Copy)]
pub struct SigSet(libc::sigset_t);

impl std::fmt::Debug for SigSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members: Vec<i32> = (1..=MAX_SIGNAL).filter(|&s| self.contains(s)).collect();
        f.debug_tuple("SigSet").field(&members).finish()
    }
}

impl SigSet {
    pub fn empty() -> SigSet {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the whole set it is given; it cannot fail for a valid
        // pointer.
        unsafe { libc::sigemptyset(set.as_mut_ptr()) };
        // SAFETY: initialised just above.
        SigSet(unsafe { set.assume_init() })
    }

    /// Every signal glibc lets a program handle (it leaves out the two it reserves for threads).
    pub fn full() -> SigSet {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigfillset initialises the whole set it is given.
        unsafe { libc::sigfillset(set.as_mut_ptr()) };
        // SAFETY: initialised just above.
        SigSet(unsafe { set.assume_init() })
    }

    pub fn add(&mut self, sig: i32) {
        // SAFETY: the set is initialised; an out-of-range number only makes sigaddset fail.
        unsafe { libc::sigaddset(&mut self.0, sig) };
    }

    pub fn remove(&mut self, sig: i32) {
        // SAFETY: as for `add`.
        unsafe { libc::sigdelset(&mut self.0, sig) };
    }

    pub fn contains(&self, sig: i32) -> bool {
        // SAFETY: the set is initialised; sigismember only reads it.
        unsafe { libc::sigismember(&self.0, sig) == 1 }
    }
}

/// Replaces this thread's signal mask, returning the previous one.
pub fn set_signal_mask(set: &SigSet) -> io::Result<SigSet> {
    let mut old = SigSet::empty();
    // SAFETY: both pointers are to valid, initialised sigset_t values.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set.0, &mut old.0) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(old)
}

/// A saved signal disposition, to give back to the child what podvisor inherited.
#[derive(Clone, Copy)]
pub struct SigAction {
    signal: i32,
    action: libc::sigaction,
}

impl std::fmt::Debug for SigAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigAction")
            .field("signal", &self.signal)
            .field("handler", &self.action.sa_sigaction)
            .finish()
    }
}

/// The default disposition for each signal this process ignores (as whoever started it left
/// it: a shell ignores SIGINT and SIGQUIT for a command it runs in the background): what a
/// container's process is given back, as a runtime, itself a daemon's child, starts it with
/// no signal ignored.
pub fn defaults_for_ignored() -> Vec<SigAction> {
    let mut out = Vec::new();
    for signal in 1..=libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: an all-zero sigaction is a valid value (empty mask, no flags, SIG_DFL).
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the disposition into `old`.
        let read = unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) };
        if read == 0 && old.sa_sigaction == libc::SIG_IGN {
            // SAFETY: as above: SIG_DFL, no mask, no flags.
            let action: libc::sigaction = unsafe { std::mem::zeroed() };
            out.push(SigAction { signal, action });
        }
    }
    out
}

/// Sets `signal` to be ignored and returns its previous disposition.
pub fn ignore_signal(signal: i32) -> io::Result<SigAction> {
    set_disposition(signal, libc::SIG_IGN)
}

fn set_disposition(signal: i32, handler: libc::sighandler_t) -> io::Result<SigAction> {
    // SAFETY: an all-zero sigaction is a valid value (empty mask, no flags, SIG_DFL).
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to initialised structs; SIG_IGN / SIG_DFL install no code.
    check(unsafe { libc::sigaction(signal, &new, &mut old) })?;
    Ok(SigAction {
        signal,
        action: old,
    })
}

/// Waits for one signal of `set` (which must be blocked), for at most `timeout` if given.
/// `Ok(None)` means the timeout passed or the wait was interrupted.
pub fn wait_signal(set: &SigSet, timeout: Option<Duration>) -> io::Result<Option<i32>> {
    let ret = match timeout {
        None => {
            // SAFETY: `set` is initialised; a null siginfo pointer is allowed.
            unsafe { libc::sigwaitinfo(&set.0, std::ptr::null_mut()) }
        }
        Some(t) => {
            let ts = libc::timespec {
                tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            };
            // SAFETY: as above, with a valid timespec.
            unsafe { libc::sigtimedwait(&set.0, std::ptr::null_mut(), &ts) }
        }
    };
    match check(ret) {
        Ok(sig) => Ok(Some(sig)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// How a process ended, from its wait status: the core's `ExitStatus` (an exit code, or the
/// signal that killed it).
pub use podvisor_core::lifecycle::ExitStatus as Exit;

/// One result of `reap_one`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaped {
    Exited {
        pid: i32,
        exit: Exit,
    },
    /// Children exist but none has exited.
    NoneReady,
    /// No children at all.
    NoChildren,
}

/// `waitpid(-1, WNOHANG)`: collects one exited child, if any. The one reaper calls this in a
/// loop; while it runs, nothing else in podvisor waits for processes.
pub fn reap_one() -> io::Result<Reaped> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: a valid pointer to a c_int; WNOHANG never blocks.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid == 0 {
            return Ok(Reaped::NoneReady);
        }
        if pid == -1 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ECHILD) => return Ok(Reaped::NoChildren),
                Some(libc::EINTR) => continue,
                _ => return Err(err),
            }
        }
        match exit_of(status) {
            Some(exit) => return Ok(Reaped::Exited { pid, exit }),
            // Without WUNTRACED/WCONTINUED only exits are reported; keep looking.
            None => continue,
        }
    }
}

/// `waitpid(pid, WNOHANG)`: collects that child if it has exited. `Ok(None)` when it has not,
/// or is not (or no longer) our child.
pub fn reap_pid(pid: i32) -> io::Result<Option<Exit>> {
    if pid <= 0 {
        return Ok(None);
    }
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: a valid pointer to a c_int; WNOHANG never blocks.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == -1 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ECHILD) => return Ok(None),
                Some(libc::EINTR) => continue,
                _ => return Err(err),
            }
        }
        return Ok(if got == 0 { None } else { exit_of(status) });
    }
}

/// `waitpid(pid, 0)`: waits for our own child `pid` to end, through EINTR, and says how it
/// ended. For the short-lived helpers podvisor forks or clones and waits for at once (nobody
/// else knows their pids), never for a container or a command of the user's.
pub(super) fn wait_for(pid: i32) -> io::Result<Exit> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: a valid pointer to a c_int.
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        if got == -1 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        // Without WUNTRACED/WCONTINUED only its end is reported; keep waiting otherwise.
        if let Some(exit) = exit_of(status) {
            return Ok(exit);
        }
    }
}

/// How a process ended, from a wait status; `None` for a stop or continue.
pub(super) fn exit_of(status: libc::c_int) -> Option<Exit> {
    if libc::WIFEXITED(status) {
        Some(Exit::Code(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(Exit::Signal(libc::WTERMSIG(status)))
    } else {
        None
    }
}

/// `kill(2)`: `pid` > 0 is one process, `pid` < -1 the process group -pid.
pub fn send_signal(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill has no memory effects.
    check(unsafe { libc::kill(pid, signal) })?;
    Ok(())
}

/// Whether this process leads its session (`getsid(0) == getpid()`).
pub fn is_session_leader() -> bool {
    // SAFETY: getsid and getpid have no memory effects.
    unsafe { libc::getsid(0) == libc::getpid() }
}

/// `strsignal(3)`: the C library's words for a signal (`Terminated`, `User defined signal 1`,
/// `Real-time signal 2`), as tini prints them. podvisor never calls `setlocale`, so they are
/// the C locale's.
pub fn signal_description(sig: i32) -> String {
    // SAFETY: strsignal returns a NUL-terminated string that stays valid until the next call
    // from this thread (a static one for known signals, a per-thread buffer for unknown ones);
    // it is copied before anything else runs here.
    unsafe {
        let text = libc::strsignal(sig);
        if text.is_null() {
            return format!("Unknown signal {sig}");
        }
        std::ffi::CStr::from_ptr(text)
            .to_string_lossy()
            .into_owned()
    }
}

pub fn getpid() -> i32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// Registers this process as a child subreaper (PR_SET_CHILD_SUBREAPER, Linux ≥ 3.4).
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) })?;
    Ok(())
}

pub fn is_child_subreaper() -> io::Result<bool> {
    let mut flag: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int through the pointer we pass.
    check(unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut flag as *mut libc::c_int) })?;
    Ok(flag != 0)
}

/// Asks the kernel to send `signal` to this process when its parent dies (PR_SET_PDEATHSIG).
pub fn set_parent_death_signal(signal: i32) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) })?;
    Ok(())
}

/// Gives up the controlling terminal (TIOCNOTTY on stdin), as dumb-init does before it starts
/// its child in a new session. Failure (no terminal) is normal and returned for logging only.
pub fn detach_controlling_tty() -> io::Result<()> {
    // SAFETY: TIOCNOTTY takes no argument.
    check(unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCNOTTY) })?;
    Ok(())
}

/// The host's name, for the downward API's `spec.nodeName`.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes.
    let ret = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if ret != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Logical CPUs and physical memory in bytes.
pub fn cpus_and_memory() -> (u64, u64) {
    // SAFETY: sysconf has no memory effects.
    let (cpus, pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (
        cpus.max(1) as u64,
        (pages.max(0) as u64) * (page.max(0) as u64),
    )
}

/// Raises the soft limit on open files to the hard limit: every container takes two pipes and
/// every probe in flight a socket or pipe, so a large pod needs more than the usual 1024.
pub fn raise_open_files_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through the pointer.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads one rlimit through the pointer.
        check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    }
    Ok(lim.rlim_cur)
}

/// Runs `f` with the file-mode creation mask set to `mask`, then restores it. The mask is the
/// process's: call it before other threads that create files start (the run's and the keeper's
/// sockets are bound before their starters make anything, and a starter's child sets its own).
pub fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
    // SAFETY: umask has no memory effects.
    let old = unsafe { libc::umask(mask as libc::mode_t) };
    let out = f();
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    out
}

/// Gives this process a mount namespace of its own whose mounts do not propagate back to the
/// host (root only): what podvisor mounts for its pod is seen by the containers it starts,
/// never by the host, and goes when the last of them ends. Only the calling thread moves: the
/// threads it starts after this are in the new namespace, those it started before are not.
pub fn private_mount_namespace() -> io::Result<()> {
    // SAFETY: unshare(2) and mount(2) on this process, with static C strings.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) == -1 {
            return Err(io::Error::last_os_error());
        }
        let none = std::ptr::null();
        let flags = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(none, c"/".as_ptr(), none, flags, std::ptr::null()) == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Mounts a fresh tmpfs (mode 0777, as the kubelet's emptyDir) on `target`.
pub fn mount_tmpfs(target: &std::path::Path) -> io::Result<()> {
    let target = c_string(target.as_os_str().as_encoded_bytes())?;
    let tmpfs = c"tmpfs".as_ptr();
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    // SAFETY: mount(2) with C strings that live across the call.
    if unsafe {
        libc::mount(
            tmpfs,
            target.as_ptr(),
            tmpfs,
            flags,
            c"mode=0777".as_ptr().cast(),
        )
    } == -1
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this process may make user namespaces (rootless containers): a child is made in
/// one and waited for.
pub fn user_namespaces_work() -> bool {
    extern "C" fn child(_: *mut libc::c_void) -> libc::c_int {
        // SAFETY: _exit ends the child at once, touching nothing shared.
        unsafe { libc::_exit(0) }
    }
    let mut stack: Vec<u8> = Vec::with_capacity(16 * 1024);
    // SAFETY: the stack grows down from its 16-byte aligned top, inside the allocation.
    let top = unsafe { stack.as_mut_ptr().add(stack.capacity()) };
    let top = (top as usize & !15) as *mut libc::c_void;
    let flags = libc::CLONE_NEWUSER | libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: the child only calls _exit on its own stack; with CLONE_VFORK we wait for that.
    let pid = unsafe { libc::clone(child, top, flags, std::ptr::null_mut()) };
    if pid == -1 {
        return false;
    }
    let _ = wait_for(pid);
    drop(stack);
    true
}

pub fn getgid() -> u32 {
    // SAFETY: getgid cannot fail.
    unsafe { libc::getgid() }
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of /proc's start times.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as u64
    } else {
        100
    }
}

pub fn getuid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// This process's supplementary groups (empty if they cannot be read).
pub fn getgroups() -> Vec<u32> {
    // SAFETY: with a size of 0, getgroups only counts the groups.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut groups = vec![0; usize::try_from(n).unwrap_or(0)];
    // SAFETY: `groups` has room for the `n` entries the call may write.
    let got = unsafe { libc::getgroups(n.max(0), groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(got).unwrap_or(0));
    groups
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a string contains a NUL byte"))
}
