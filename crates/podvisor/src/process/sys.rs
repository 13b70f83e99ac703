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
/// The child is made with `clone(CLONE_VM | CLONE_VFORK)`, as glibc's posix_spawn does, but
/// without posix_spawn's reset of all 64 signal handlers (we install none): podvisor is
/// suspended until the child has exec'd, nothing of its memory is copied, and an exec error is
/// simply read back. This is what keeps `init -- true` as fast as tini's fork.
///
/// The child is reaped by the caller's reaper (`reap_one`), never waited for here.
pub fn spawn(argv: &[OsString], setup: ChildSetup, inherited: &Inherited) -> io::Result<i32> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    let args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte"))?;
    if args.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    }
    let mut argv_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut plan = ChildPlan {
        argv: argv_ptrs.as_ptr(),
        session: matches!(setup, ChildSetup::Session),
        // SAFETY: isatty only inspects the descriptor.
        on_terminal: unsafe { libc::isatty(libc::STDIN_FILENO) == 1 },
        mask: inherited.mask.0,
        actions: inherited.actions.as_ptr(),
        action_count: inherited.actions.len(),
        errno: 0,
    };
    // The child's stack: execvp's PATH search and script fallback use a few KiB of it.
    let mut stack = vec![0u8; 128 * 1024];
    // SAFETY: the stack grows down from its 16-byte aligned top, inside `stack`.
    let top = unsafe { stack.as_mut_ptr().add(stack.len()) };
    let top = (top as usize & !15) as *mut libc::c_void;
    // SAFETY: with CLONE_VFORK this thread is suspended until the child execs or exits, so the
    // child has sole use of `plan`, `args`, `argv_ptrs` and `stack`, which all outlive the call.
    // The child runs `child_main` only, which makes plain syscalls and execvp (no allocation,
    // no lock) and never returns into our frames. Every signal is still blocked in the child
    // (our mask is inherited) and we install no handlers, so nothing can run on its behalf
    // while it shares our memory.
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &mut plan as *mut ChildPlan as *mut libc::c_void,
        )
    };
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    if plan.errno != 0 {
        // The child has already exited (127); as we are about to exit too, nothing reaps it.
        return Err(io::Error::from_raw_os_error(plan.errno));
    }
    drop(stack);
    Ok(pid)
}

/// What the vfork-style child needs, prepared by the parent before the clone.
struct ChildPlan {
    argv: *const *const libc::c_char,
    session: bool,
    on_terminal: bool,
    mask: libc::sigset_t,
    actions: *const SigAction,
    action_count: usize,
    /// Set by the child when a step fails: the errno of that step.
    errno: libc::c_int,
}

/// The child between clone and exec. It shares podvisor's memory, so it only reads `plan`,
/// writes `plan.errno`, and leaves by exec or `_exit`.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildPlan` the suspended parent handed to clone.
    let plan = unsafe { &mut *(arg as *mut ChildPlan) };
    let fail = |plan: &mut ChildPlan| -> ! {
        // SAFETY: __errno_location is this thread's errno; _exit ends the child at once.
        unsafe {
            plan.errno = *libc::__errno_location();
            libc::_exit(127)
        }
    };
    // SAFETY: plain syscalls on our own process; pointers come from the parent's live data.
    unsafe {
        if plan.session {
            // dumb-init: a new session, which adopts stdin's terminal if there is one that is
            // free; failing that is normal, as for dumb-init.
            if libc::setsid() == -1 {
                fail(plan);
            }
            libc::ioctl(libc::STDIN_FILENO, libc::TIOCSCTTY, 0);
        } else {
            // tini: a new process group that takes the terminal's foreground, so that Ctrl-C
            // reaches the child. Legal from a background group: SIGTTOU is still blocked.
            if libc::setpgid(0, 0) == -1 {
                fail(plan);
            }
            if plan.on_terminal && libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp()) == -1 {
                let errno = *libc::__errno_location();
                if errno != libc::ENOTTY && errno != libc::ENXIO {
                    fail(plan);
                }
            }
        }
        for i in 0..plan.action_count {
            let saved = &*plan.actions.add(i);
            if libc::sigaction(saved.signal, &saved.action, std::ptr::null_mut()) == -1 {
                fail(plan);
            }
        }
        // Last, so that no signal is delivered before exec.
        let ret = libc::pthread_sigmask(libc::SIG_SETMASK, &plan.mask, std::ptr::null_mut());
        if ret != 0 {
            *libc::__errno_location() = ret;
            fail(plan);
        }
        libc::execvp(*plan.argv, plan.argv);
        fail(plan)
    }
}
