//! The only place in podvisor with `unsafe`: thin, safe wrappers over the Linux syscalls that
//! supervision needs (signal masks, waiting for signals, reaping, prctl, terminal ownership, and
//! what the child does between fork and exec).
//!
//! Each wrapper returns `io::Result` with the raw errno preserved, so callers match
//! `libc::ECHILD` and friends, never message strings. Nothing here decides policy.
#![allow(unsafe_code)]

use std::ffi::{CString, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
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
    /// A container of `podvisor run`: a new session (so its whole process group can be
    /// signalled), stdin from /dev/null, stdout and stderr to the given descriptors, its own
    /// working directory and environment.
    Container(ContainerIo),
}

/// Descriptors and environment of a container's process.
#[derive(Debug, Clone)]
pub struct ContainerIo {
    pub stdout: RawFd,
    pub stderr: RawFd,
    pub working_dir: Option<std::path::PathBuf>,
    /// The whole environment, `NAME=value`.
    pub env: Vec<OsString>,
    /// Volumes: bind mounts in a private mount namespace of the process (root only).
    pub mounts: Vec<BindMount>,
    /// Join this mount namespace instead (an exec probe or hook in its container).
    pub join_mounts: Option<RawFd>,
}

/// `source` bound at `target`, read-only or not.
#[derive(Debug, Clone)]
pub struct BindMount {
    pub source: std::path::PathBuf,
    pub target: std::path::PathBuf,
    pub read_only: bool,
}

/// A bind mount as the child reads it.
struct MountSpec {
    source: *const libc::c_char,
    target: *const libc::c_char,
    read_only: bool,
}

/// The state to give back to the child before exec.
#[derive(Debug, Clone)]
pub struct Inherited {
    pub mask: SigSet,
    pub actions: Vec<SigAction>,
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a string contains a NUL byte"))
}

/// Spawns `argv` (PATH lookup as execvp) and returns its pid. An exec failure comes back as
/// the `io::Error` of execvp, for the caller to map to 127 / 126 or a StartError.
///
/// The child is made with `clone(CLONE_VM | CLONE_VFORK)`, as glibc's posix_spawn does, but
/// without posix_spawn's reset of all 64 signal handlers (we install none): the caller is
/// suspended until the child has exec'd, nothing of its memory is copied, and an exec error is
/// simply read back. This is what keeps `init -- true` as fast as tini's fork.
///
/// The child is reaped by the caller's reaper (`reap_one`), never waited for here.
pub fn spawn(argv: &[OsString], setup: ChildSetup, inherited: &Inherited) -> io::Result<i32> {
    let args: Vec<CString> = argv
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<_>>()?;
    if args.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    }
    let mut argv_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());

    // Everything the child needs is prepared here, before the clone: the child allocates
    // nothing.
    let mut env_strings: Vec<CString> = Vec::new();
    let mut env_ptrs: Vec<*const libc::c_char> = Vec::new();
    let mut cwd: Option<CString> = None;
    let mut devnull: Option<std::fs::File> = None;
    let mut io_fds = None;
    let mut mount_strings: Vec<(CString, CString, bool)> = Vec::new();
    let mut join_mounts: RawFd = -1;
    let mode = match &setup {
        ChildSetup::ProcessGroup => Mode::ProcessGroup,
        ChildSetup::Session => Mode::TerminalSession,
        ChildSetup::Container(io) => {
            env_strings = io
                .env
                .iter()
                .map(|e| c_string(e.as_bytes()))
                .collect::<io::Result<_>>()?;
            env_ptrs = env_strings.iter().map(|e| e.as_ptr()).collect();
            env_ptrs.push(std::ptr::null());
            cwd = io
                .working_dir
                .as_ref()
                .map(|d| c_string(d.as_os_str().as_bytes()))
                .transpose()?;
            // std opens it with O_CLOEXEC: only the dup2'd copy reaches the program.
            devnull = Some(std::fs::File::open("/dev/null")?);
            io_fds = Some((io.stdout, io.stderr));
            mount_strings = io
                .mounts
                .iter()
                .map(|m| {
                    Ok((
                        c_string(m.source.as_os_str().as_bytes())?,
                        c_string(m.target.as_os_str().as_bytes())?,
                        m.read_only,
                    ))
                })
                .collect::<io::Result<_>>()?;
            join_mounts = io.join_mounts.unwrap_or(-1);
            Mode::Container
        }
    };
    let mounts: Vec<MountSpec> = mount_strings
        .iter()
        .map(|(s, t, ro)| MountSpec {
            source: s.as_ptr(),
            target: t.as_ptr(),
            read_only: *ro,
        })
        .collect();
    let mut plan = ChildPlan {
        mounts: mounts.as_ptr(),
        mount_count: mounts.len(),
        join_mounts,
        argv: argv_ptrs.as_ptr(),
        mode,
        // SAFETY: isatty only inspects the descriptor.
        on_terminal: unsafe { libc::isatty(libc::STDIN_FILENO) == 1 },
        mask: inherited.mask.0,
        actions: inherited.actions.as_ptr(),
        action_count: inherited.actions.len(),
        envp: if env_ptrs.is_empty() {
            std::ptr::null()
        } else {
            env_ptrs.as_ptr()
        },
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        stdin: devnull.as_ref().map_or(-1, |f| f.as_raw_fd()),
        stdout: io_fds.map_or(-1, |f| f.0),
        stderr: io_fds.map_or(-1, |f| f.1),
        errno: 0,
    };
    // The child's stack: execvp's PATH search and script fallback use a few KiB of it. Left
    // uninitialised (nothing reads it before the child writes it) and under malloc's mmap
    // threshold, so that only the pages the child touches are ever faulted in.
    let mut stack: Vec<u8> = Vec::with_capacity(64 * 1024);
    // SAFETY: the stack grows down from its 16-byte aligned top, inside the allocation.
    let top = unsafe { stack.as_mut_ptr().add(stack.capacity()) };
    let top = (top as usize & !15) as *mut libc::c_void;
    // SAFETY: with CLONE_VFORK this thread is suspended until the child execs or exits, so the
    // child has sole use of `plan` and everything it points to (`args`, `argv_ptrs`,
    // `env_strings`, `env_ptrs`, `cwd`, `devnull`, `stack`), which all outlive the call. The
    // child runs `child_main` only, which makes plain syscalls and execvp/execvpe (no
    // allocation, no lock) and never returns into our frames. Every signal is still blocked in
    // the child (our mask is inherited) and we install no handlers, so nothing can run on its
    // behalf while it shares our memory.
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
        // The child has exited (127). Reap it here: nobody else knows its pid.
        let mut status = 0;
        // SAFETY: waiting for our own, already exited child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(plan.errno));
    }
    drop((stack, env_strings, cwd, devnull, mounts, mount_strings));
    Ok(pid)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    ProcessGroup,
    TerminalSession,
    Container,
}

/// What the vfork-style child needs, prepared by the parent before the clone.
struct ChildPlan {
    mounts: *const MountSpec,
    mount_count: usize,
    /// A mount namespace to join (-1: none).
    join_mounts: RawFd,
    argv: *const *const libc::c_char,
    mode: Mode,
    on_terminal: bool,
    mask: libc::sigset_t,
    actions: *const SigAction,
    action_count: usize,
    /// The environment to exec with; null: inherit ours.
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
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
        match plan.mode {
            Mode::TerminalSession => {
                // dumb-init: a new session, which adopts stdin's terminal if there is one that
                // is free; failing that is normal, as for dumb-init.
                if libc::setsid() == -1 {
                    fail(plan);
                }
                libc::ioctl(libc::STDIN_FILENO, libc::TIOCSCTTY, 0);
            }
            Mode::ProcessGroup => {
                // tini: a new process group that takes the terminal's foreground, so that
                // Ctrl-C reaches the child. Legal from a background group: SIGTTOU is blocked.
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
            Mode::Container => {
                if libc::setsid() == -1 {
                    fail(plan);
                }
                // If podvisor itself is killed outright, the container's main process goes too
                // (its group is killed with it by podvisor only while podvisor lives).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                    fail(plan);
                }
                if plan.join_mounts >= 0 {
                    if libc::setns(plan.join_mounts, libc::CLONE_NEWNS) == -1 {
                        fail(plan);
                    }
                } else if plan.mount_count > 0 {
                    // Volumes: a mount namespace of its own, not propagating back to the host.
                    if libc::unshare(libc::CLONE_NEWNS) == -1 {
                        fail(plan);
                    }
                    let root = c"/".as_ptr();
                    let none = std::ptr::null();
                    let private = libc::MS_REC | libc::MS_PRIVATE;
                    if libc::mount(none, root, none, private, std::ptr::null()) == -1 {
                        fail(plan);
                    }
                    for i in 0..plan.mount_count {
                        let m = &*plan.mounts.add(i);
                        let bind = libc::MS_BIND | libc::MS_REC;
                        if libc::mount(m.source, m.target, none, bind, std::ptr::null()) == -1 {
                            fail(plan);
                        }
                        if m.read_only {
                            let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
                            if libc::mount(none, m.target, none, ro, std::ptr::null()) == -1 {
                                fail(plan);
                            }
                        }
                    }
                }
                for (from, to) in [(plan.stdin, 0), (plan.stdout, 1), (plan.stderr, 2)] {
                    if libc::dup2(from, to) == -1 {
                        fail(plan);
                    }
                }
                if !plan.cwd.is_null() && libc::chdir(plan.cwd) == -1 {
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
        if plan.envp.is_null() {
            libc::execvp(*plan.argv, plan.argv);
        } else {
            libc::execvpe(*plan.argv, plan.argv, plan.envp);
        }
        fail(plan)
    }
}

/// A signalfd: the blocked signals of `set`, read as data so that one `poll` waits for signals,
/// pipes and timeouts together.
#[derive(Debug)]
pub struct SignalFd(OwnedFd);

impl SignalFd {
    pub fn new(set: &SigSet) -> io::Result<SignalFd> {
        // SAFETY: a valid, initialised set; -1 asks for a new descriptor.
        let fd =
            check(unsafe { libc::signalfd(-1, &set.0, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })?;
        // SAFETY: signalfd returned a new descriptor that nothing else owns.
        Ok(SignalFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The next pending signal, or `None` when there is none.
    pub fn read(&self) -> io::Result<Option<i32>> {
        // SAFETY: an all-zero siginfo is a valid buffer of the size signalfd writes.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading at most `size` bytes into `info`.
        let n = unsafe {
            libc::read(
                self.0.as_raw_fd(),
                &mut info as *mut _ as *mut libc::c_void,
                size,
            )
        };
        if n == -1 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        Ok((n as usize == size).then_some(info.ssi_signo as i32))
    }

    pub fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `poll(2)` on `fds` (each with POLLIN) for at most `timeout`; returns which are readable
/// (or hung up), by index.
pub fn poll_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<usize>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms: libc::c_int = match timeout {
        None => -1,
        // Round up, so that a deadline 0.3 ms away does not spin.
        Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
    };
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs.
    let ret = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if ret == -1 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(Vec::new());
        }
        return Err(e);
    }
    Ok(pfds
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents != 0)
        .map(|(i, _)| i)
        .collect())
}

/// A pipe whose ends close on exec: (read end, non-blocking; write end).
pub fn pipe() -> io::Result<(std::fs::File, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the two-element array.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The write end goes to the child, which expects an ordinary blocking descriptor.
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(write.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok((std::fs::File::from(read), write))
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

/// Takes an exclusive, non-blocking `flock` on `file`. `Ok(false)` when another process holds
/// it. The lock lasts as long as the file stays open, and goes with the process.
pub fn try_lock(file: &std::fs::File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor we own.
    match check(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

/// Readiness flags of `Epoll::wait`.
pub const EV_READ: u32 = libc::EPOLLIN as u32;
pub const EV_WRITE: u32 = libc::EPOLLOUT as u32;

/// An epoll instance: the run loop waits on it for signals, log pipes and probe sockets, so
/// that a wake-up costs in proportion to what happened, not to how many descriptors there are.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; returns a new descriptor or -1.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: epoll_create1 returned a new descriptor that nothing else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: interest,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        check(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    /// Watches `fd` for `interest` (EV_READ, EV_WRITE); hang-ups and errors always count.
    pub fn add(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    pub fn modify(&self, fd: RawFd, token: u64, interest: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    /// Stops watching `fd` (closing it does too; this is for descriptors that stay open).
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits at most `timeout` (rounded up to the millisecond, so that a deadline 0.3 ms away
    /// does not spin) and appends the tokens that are ready.
    pub fn wait(&self, out: &mut Vec<u64>, timeout: Option<Duration>) -> io::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 256];
        let ms: libc::c_int = match timeout {
            None => -1,
            Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: `events` is a valid array of `events.len()` entries for the kernel to fill.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                ms,
            )
        };
        if n == -1 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(events[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }
}

/// Starts a non-blocking TCP connect. The stream is writable once the connect has ended;
/// `connect_state` then tells how.
pub fn tcp_connect_start(addr: &std::net::SocketAddr) -> io::Result<std::net::TcpStream> {
    let (family, storage, len) = sockaddr(addr);
    // SAFETY: no pointers; returns a new descriptor or -1.
    let fd = check(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: socket returned a new descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `storage` holds a sockaddr of `len` bytes for `family`.
    let ret = unsafe { libc::connect(fd, &storage as *const _ as *const libc::sockaddr, len) };
    if ret == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(std::net::TcpStream::from(owned))
}

/// Where a non-blocking connect stands.
#[derive(Debug)]
pub enum ConnectState {
    Connecting,
    Connected,
    Failed(io::Error),
}

/// Checks a non-blocking connect without waiting: a pending error (`SO_ERROR`) means it
/// failed, a peer (`getpeername`) that it is done. On loopback the handshake often completes
/// within `connect` itself, and this saves a trip through epoll.
pub fn connect_state(stream: &std::net::TcpStream) -> ConnectState {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` and `len` are valid for getsockopt to write an int.
    let ret = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if ret == -1 {
        return ConnectState::Failed(io::Error::last_os_error());
    }
    if err != 0 {
        return ConnectState::Failed(io::Error::from_raw_os_error(err));
    }
    match stream.peer_addr() {
        Ok(_) => ConnectState::Connected,
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => ConnectState::Connecting,
        Err(e) => ConnectState::Failed(e),
    }
}

fn sockaddr(addr: &std::net::SocketAddr) -> (libc::c_int, libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            (
                libc::AF_INET,
                storage,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            (
                libc::AF_INET6,
                storage,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
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

/// Runs `f` with the file-mode creation mask set to `mask`, then restores it (podvisor's run
/// loop is single-threaded, so nothing else creates files meanwhile).
pub fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
    // SAFETY: umask has no memory effects.
    let old = unsafe { libc::umask(mask as libc::mode_t) };
    let out = f();
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    out
}

/// The user id of the process at the other end of a unix socket (`SO_PEERCRED`).
pub fn peer_uid(stream: &std::os::unix::net::UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for getsockopt to write one ucred.
    check(unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok(cred.uid)
}

pub fn getuid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// inotify event bits used by `logs -f`.
pub const IN_MODIFY: u32 = libc::IN_MODIFY;
pub const IN_CREATE: u32 = libc::IN_CREATE;
pub const IN_MOVED_TO: u32 = libc::IN_MOVED_TO;
pub const IN_CLOSE_WRITE: u32 = libc::IN_CLOSE_WRITE;

/// An inotify instance: `logs -f` sleeps in `read` until a log file changes.
#[derive(Debug)]
pub struct Inotify(std::fs::File);

impl Inotify {
    pub fn new() -> io::Result<Inotify> {
        // SAFETY: no pointers; returns a new descriptor or -1.
        let fd = check(unsafe { libc::inotify_init1(libc::IN_CLOEXEC) })?;
        // SAFETY: inotify_init1 returned a new descriptor that nothing else owns.
        Ok(Inotify(std::fs::File::from(unsafe {
            OwnedFd::from_raw_fd(fd)
        })))
    }

    /// Watches `path` for `mask`; returns the watch descriptor.
    pub fn watch(&self, path: &std::path::Path, mask: u32) -> io::Result<i32> {
        let c = c_string(path.as_os_str().as_bytes())?;
        // SAFETY: a valid NUL-terminated path.
        check(unsafe { libc::inotify_add_watch(self.0.as_raw_fd(), c.as_ptr(), mask) })
    }

    /// Blocks until events come; returns (watch descriptor, mask, name) of each.
    pub fn read(&mut self) -> io::Result<Vec<(i32, u32, String)>> {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        let n = loop {
            match self.0.read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        let mut out = Vec::new();
        let mut at = 0;
        let head = std::mem::size_of::<libc::inotify_event>();
        while at + head <= n {
            // SAFETY: the kernel wrote whole events; read_unaligned copes with the byte buffer.
            let ev: libc::inotify_event = unsafe {
                std::ptr::read_unaligned(buf[at..].as_ptr() as *const libc::inotify_event)
            };
            let name_bytes = &buf[at + head..(at + head + ev.len as usize).min(n)];
            let end = name_bytes
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_bytes.len());
            out.push((
                ev.wd,
                ev.mask,
                String::from_utf8_lossy(&name_bytes[..end]).into_owned(),
            ));
            at += head + ev.len as usize;
        }
        Ok(out)
    }
}

/// Whether some process holds the `flock` on the file at `path` (a run on its state dir).
pub fn lock_is_held(path: &std::path::Path) -> io::Result<bool> {
    let file = std::fs::File::open(path)?;
    // Taking it for a moment tells; closing the file gives it back.
    Ok(!try_lock(&file)?)
}
