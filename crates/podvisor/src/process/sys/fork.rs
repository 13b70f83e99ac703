//! What starting a keeper needs: a fork whose child only execs (`spawn_detached`), with a
//! session of its own, descriptors handed across exec, and an exec prepared before the fork;
//! and a fork whose child does a piece of work and hands back its result (`run_in_child`).

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use super::check;

/// Starts `exec` as a detached daemon of this process (a keeper): forked, in a session of its
/// own (a terminal's Ctrl-C or hang-up never reaches it), a child subreaper (the orphans of
/// what it starts come back to it), with the descriptors `keep` let through the exec. Returns
/// its pid; a child that cannot get that far exits with 1 (the caller reaps it).
///
/// Everything the child needs is prepared before the fork (`Exec`), so that the child makes
/// system calls only: a thread of this process (a D-Bus client's, under the systemd cgroup
/// driver) may hold the allocator's lock at the fork, and the child has a copy of that lock,
/// held forever.
pub fn spawn_detached(exec: &Exec, keep: &[RawFd]) -> io::Result<i32> {
    // SAFETY: the child runs `detached_child` only, which keeps to system calls (see `fork`).
    let pid = unsafe { fork() }?;
    if pid == 0 {
        exit_now(detached_child(exec, keep));
    }
    Ok(pid)
}

/// The child side of `spawn_detached`: system calls only. Returns the exit code when the exec
/// could not happen.
fn detached_child(exec: &Exec, keep: &[RawFd]) -> i32 {
    // SAFETY: setsid has no memory effects.
    unsafe { libc::setsid() };
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) } == -1 {
        return 1;
    }
    if keep.iter().any(|&fd| keep_across_exec(fd).is_err()) {
        return 1;
    }
    let _ = exec.run();
    1
}

/// `fork(2)`: 0 in the child, the child's pid in the parent.
///
/// # Safety
///
/// The child gets a copy of the calling thread only, with every lock other threads held at
/// the fork held forever: until it execs or exits it must make system calls only (no
/// allocation, no `std` I/O or locking, no drop of anything that frees), and it must leave
/// with `exit_now`, never by returning into the caller's code.
pub(super) unsafe fn fork() -> io::Result<i32> {
    // SAFETY: fork has no memory effects on the caller; the caller keeps the child to system
    // calls (this function's contract).
    check(unsafe { libc::fork() })
}

/// Lets descriptor `fd` through the next exec (clears FD_CLOEXEC).
fn keep_across_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl F_GETFD/F_SETFD on a descriptor number has no memory effects.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) })?;
    Ok(())
}

/// An `execv` made ready before a fork: the child then makes system calls only, and
/// allocates nothing (a thread of the parent, such as a D-Bus client's, may have held the
/// allocator's lock when it forked).
#[derive(Debug)]
pub struct Exec {
    path: CString,
    /// What `argv` points into.
    _args: Vec<CString>,
    argv: Vec<*const libc::c_char>,
}

impl Exec {
    /// This binary again (`/proc/self/exe`, which stays the binary this process runs even
    /// after a newer one replaced it on disk) with `args` (`argv[0]` included).
    pub fn this_binary(args: &[OsString]) -> io::Result<Exec> {
        Exec::new(c"/proc/self/exe".to_owned(), args)
    }

    /// The program open at `file` (a binary opened earlier, so that replacing it on disk
    /// changes nothing; the descriptor must still be open in the child) with `args`.
    pub fn open_file(file: &std::fs::File, args: &[OsString]) -> io::Result<Exec> {
        use std::os::fd::AsRawFd;
        let path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        Exec::new(path, args)
    }

    fn new(path: CString, args: &[OsString]) -> io::Result<Exec> {
        let args = args
            .iter()
            .map(|a| CString::new(a.as_bytes().to_vec()))
            .collect::<Result<Vec<CString>, _>>()?;
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        Ok(Exec {
            path,
            _args: args,
            argv,
        })
    }

    /// Execs. Returns only on error.
    pub fn run(&self) -> io::Error {
        // SAFETY: `argv` is a NUL-terminated array of pointers into `_args`, NUL-terminated
        // strings that live as long as `self`.
        unsafe { libc::execv(self.path.as_ptr(), self.argv.as_ptr()) };
        io::Error::last_os_error()
    }
}

/// Ends this process at once with `code`, running nothing of the parent's (a forked child
/// that could not exec).
pub(super) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no memory of ours.
    unsafe { libc::_exit(code) }
}

/// What a child made by `run_in_child` wrote to its pipe, and how it ended.
#[derive(Debug)]
pub struct ChildWork {
    pub output: Vec<u8>,
    pub exit: super::Exit,
}

/// Runs `work` in a forked child of this process and returns what the child wrote to the pipe
/// `work` is given, and how it ended: the memory and the code pages the work takes go with the
/// child, and this process never held them. A fork's child may run any code only when the
/// parent had one thread (a lock another thread held at the fork stays held in the child): with
/// more threads, without /proc to count them, with SIGCHLD ignored (the child could not be
/// waited for), or when the pipe or the fork cannot be made, `None`, and the caller does the
/// work itself. The child leaves with `_exit` once `work` returns its exit code (101 after a
/// panic, as a Rust program's), std's stdout flushed first.
pub fn run_in_child(work: impl FnOnce(&mut std::fs::File) -> i32) -> Option<io::Result<ChildWork>> {
    use std::io::{Read, Write};
    if std::fs::read_dir("/proc/self/task").ok()?.count() != 1 || sigchld_ignored() {
        return None;
    }
    let (read, write) = super::fd::blocking_pipe().ok()?;
    // SAFETY: this process has one thread (counted above; nothing since started another), so
    // no lock is held at the fork and the child may run any code; it leaves with `exit_now`,
    // never by returning into the caller's code.
    let pid = check(unsafe { libc::fork() }).ok()?;
    if pid == 0 {
        drop(read);
        let mut out = std::fs::File::from(write);
        let work = std::panic::AssertUnwindSafe(|| work(&mut out));
        let code = std::panic::catch_unwind(work).unwrap_or(101);
        drop(out);
        let _ = std::io::stdout().flush();
        exit_now(code);
    }
    drop(write);
    let mut output = Vec::new();
    // Read to the end before waiting: a child whose output fills the pipe waits for the read.
    let read = std::fs::File::from(read).read_to_end(&mut output);
    let exit = super::wait_for(pid);
    Some(read.and(exit).map(|exit| ChildWork { output, exit }))
}

/// Whether SIGCHLD is ignored (inherited so): the kernel then reaps children itself.
fn sigchld_ignored() -> bool {
    // SAFETY: a sigaction is plain data, for which all zeroes is a valid value.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: with a null new action, sigaction only writes the current one into `old`.
    let got = unsafe { libc::sigaction(libc::SIGCHLD, std::ptr::null(), &mut old) };
    got == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// Blocks `signals` for this thread (added to the mask), so that they are read from a signalfd
/// or, for SIGPIPE, turn into EPIPE.
pub fn block_signals(signals: &[i32]) -> io::Result<()> {
    let mut set = super::SigSet::empty();
    for &s in signals {
        set.add(s);
    }
    // SAFETY: pthread_sigmask with a valid set and a null old-set pointer.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set.0, std::ptr::null_mut()) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(())
}

/// Takes ownership of descriptor `fd`, handed over across exec by the process that started
/// this one (a keeper's channels), after checking that it is open; it is closed on exec again,
/// so that what this process starts does not inherit it. Call it once per descriptor.
pub fn take_handed_fd(fd: RawFd) -> io::Result<std::fs::File> {
    if fd <= 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("descriptor {fd} is not one handed over"),
        ));
    }
    // SAFETY: F_GETFD has no memory effects; it tells whether the descriptor is open.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: F_SETFD on an open descriptor has no memory effects.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    // SAFETY: the descriptor is open and was handed to this process to own; nothing else in
    // it refers to it (the caller takes each once).
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}
