//! The only place in podvisor with `unsafe`: thin, safe wrappers over the Linux syscalls that
//! supervision needs (signal masks, waiting for signals, reaping, prctl, terminal ownership, and
//! what the child does between fork and exec).
//!
//! Each wrapper returns `io::Result` with the raw errno preserved, so callers match
//! `libc::ECHILD` and friends, never message strings. Nothing here decides policy.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

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

impl SigAction {
    /// Whether the disposition is "ignore" (which, unlike a handler, survives exec).
    pub fn is_ignore(&self) -> bool {
        self.action.sa_sigaction == libc::SIG_IGN
    }
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

fn restore_action(saved: &SigAction) -> io::Result<()> {
    // SAFETY: `saved.action` came from the kernel through sigaction; giving it back reinstates
    // exactly what was there. Async-signal-safe (a syscall).
    check(unsafe { libc::sigaction(saved.signal, &saved.action, std::ptr::null_mut()) })?;
    Ok(())
}

/// Whether SIGPIPE is ignored in this process now. podvisor's binary is `no_main`, so Rust's
/// start-up has not touched SIGPIPE and this is the disposition podvisor inherited.
fn sigpipe_ignored() -> bool {
    // SAFETY: an all-zero sigaction is valid; a null new action only queries.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: querying with a null new action changes nothing.
    let ret = unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) };
    ret == 0 && old.sa_sigaction == libc::SIG_IGN
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

/// How a process ended, from its wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// The shell's convention: the exit code, or 128+N for death by signal N.
    pub fn shell_code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }
}

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
/// loop; nothing else in podvisor waits for processes.
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
        let exit = if libc::WIFEXITED(status) {
            Exit::Code(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            // Without WUNTRACED/WCONTINUED only exits are reported; keep looking.
            continue;
        };
        return Ok(Reaped::Exited { pid, exit });
    }
}

/// `kill(2)`: `pid` > 0 is one process, `pid` < -1 the process group -pid.
pub fn send_signal(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill has no memory effects.
    check(unsafe { libc::kill(pid, signal) })?;
    Ok(())
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

/// What the child does between fork and exec.
#[derive(Debug, Clone)]
pub enum ChildSetup {
    /// tini: a new process group that takes the terminal's foreground, if there is a terminal.
    ProcessGroup,
    /// dumb-init: a new session that adopts stdin's terminal as its controlling terminal.
    Session,
}

/// The state to give back to the child before exec.
#[derive(Debug, Clone)]
pub struct Inherited {
    pub mask: SigSet,
    pub actions: Vec<SigAction>,
}

/// Spawns `argv` (PATH lookup as execvp) with stdio inherited, and returns its pid. An exec
/// failure comes back as the `io::Error` of execvp, for the caller to map to 127 / 126.
///
/// The child is reaped by the caller's reaper (`reap_one`), never through `Child::wait`.
pub fn spawn(argv: &[OsString], setup: ChildSetup, inherited: &Inherited) -> io::Result<i32> {
    match setup {
        ChildSetup::ProcessGroup => spawn_process_group(argv, inherited),
        ChildSetup::Session => spawn_session(argv, inherited),
    }
}

/// tini's set-up through posix_spawn, which glibc runs as vfork + exec: no copy of our address
/// space, and exec errors come back as the return value. This is what keeps `init -- true` as
/// fast as tini.
fn spawn_process_group(argv: &[OsString], inherited: &Inherited) -> io::Result<i32> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    let to_c = |s: &OsString| {
        CString::new(s.as_bytes()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte")
        })
    };
    let args: Vec<CString> = argv.iter().map(to_c).collect::<io::Result<_>>()?;
    if args.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    }
    let mut ptrs: Vec<*mut libc::c_char> = args.iter().map(|a| a.as_ptr() as *mut _).collect();
    ptrs.push(std::ptr::null_mut());

    // Signals to set back to their default action in the child: those we changed from their
    // default. Ones that were ignored when we started stay ignored, as inherited.
    let mut to_default = SigSet::empty();
    for saved in &inherited.actions {
        if !saved.is_ignore() {
            to_default.add(saved.signal);
        }
    }
    let on_terminal = {
        // SAFETY: isatty only inspects the descriptor.
        unsafe { libc::isatty(libc::STDIN_FILENO) == 1 }
    };

    extern "C" {
        static environ: *const *mut libc::c_char;
    }
    let mut attr = MaybeUninit::<libc::posix_spawnattr_t>::uninit();
    let mut actions = MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
    let mut pid: libc::pid_t = 0;
    // SAFETY: attr and actions are initialised before use and destroyed on every path; every
    // pointer handed to posix_spawnp (path, argv, environ) outlives the call, and argv is
    // NUL-terminated. glibc validates the flags and reports errors as return values.
    let ret = unsafe {
        let attr = attr.as_mut_ptr();
        let actions = actions.as_mut_ptr();
        libc::posix_spawnattr_init(attr);
        libc::posix_spawn_file_actions_init(actions);
        let mut flags = libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK;
        libc::posix_spawnattr_setpgroup(attr, 0);
        libc::posix_spawnattr_setsigmask(attr, &inherited.mask.0);
        if (1..=MAX_SIGNAL).any(|s| to_default.contains(s)) {
            flags |= libc::POSIX_SPAWN_SETSIGDEF;
            libc::posix_spawnattr_setsigdefault(attr, &to_default.0);
        }
        libc::posix_spawnattr_setflags(attr, flags as libc::c_short);
        // The new group takes the terminal's foreground, as under tini, so that Ctrl-C reaches
        // the child. glibc does this while every signal is still blocked in the child, which
        // makes it legal from a background group.
        if on_terminal {
            libc::posix_spawn_file_actions_addtcsetpgrp_np(actions, libc::STDIN_FILENO);
        }
        let ret = libc::posix_spawnp(&mut pid, ptrs[0], actions, attr, ptrs.as_ptr(), environ);
        libc::posix_spawn_file_actions_destroy(actions);
        libc::posix_spawnattr_destroy(attr);
        ret
    };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(pid)
}

/// dumb-init's set-up: a new session that adopts stdin's terminal. posix_spawn cannot issue
/// TIOCSCTTY, so this goes through fork and a pre-exec hook.
fn spawn_session(argv: &[OsString], inherited: &Inherited) -> io::Result<i32> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    let inherited = inherited.clone();
    // std's Command sets SIGPIPE back to its default in the child; put back what we inherited.
    let sigpipe_ignored = sigpipe_ignored();
    // SAFETY: the closure runs in the forked child before exec and makes only async-signal-safe
    // calls (setsid, ioctl, sigaction, pthread_sigmask: plain syscalls); it allocates nothing
    // (`inherited` was cloned before the fork) and touches no lock. std has already reset the
    // mask and SIGPIPE by then, so ours comes last and wins.
    unsafe {
        cmd.pre_exec(move || {
            check(libc::setsid())?;
            // Adopting stdin's terminal fails when there is none, or when it is still another
            // session's: dumb-init carries on in both cases.
            libc::ioctl(libc::STDIN_FILENO, libc::TIOCSCTTY, 0);
            for action in &inherited.actions {
                restore_action(action)?;
            }
            if sigpipe_ignored {
                let mut ign: libc::sigaction = std::mem::zeroed();
                ign.sa_sigaction = libc::SIG_IGN;
                check(libc::sigaction(libc::SIGPIPE, &ign, std::ptr::null_mut()))?;
            }
            let ret =
                libc::pthread_sigmask(libc::SIG_SETMASK, &inherited.mask.0, std::ptr::null_mut());
            if ret != 0 {
                return Err(io::Error::from_raw_os_error(ret));
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    // Dropping `Child` neither waits nor kills: the reaper collects it.
    Ok(child.id() as i32)
}
