//! What starting a keeper needs: a plain fork of the (single-threaded) supervisor, a session
//! of its own, descriptors handed across exec, and the exec of this same binary.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use super::check;

/// Which side of a `fork` this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forked {
    Child,
    Parent(i32),
}

/// `fork(2)`. Only for a single-threaded caller (the supervisor is one thread): the child may
/// then use what the parent had, locks included, until it execs or exits.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: fork has no memory effects on the caller; the child gets a copy of a
    // single-threaded process, so no lock is held by a thread that does not exist in it.
    let pid = check(unsafe { libc::fork() })?;
    Ok(if pid == 0 {
        Forked::Child
    } else {
        Forked::Parent(pid)
    })
}

/// `setsid(2)`: a session (and process group) of its own, without a controlling terminal, so
/// that a terminal's Ctrl-C or hang-up never reaches it.
pub fn new_session() -> io::Result<()> {
    // SAFETY: setsid has no memory effects.
    check(unsafe { libc::setsid() })?;
    Ok(())
}

/// Lets descriptor `fd` through the next exec (clears FD_CLOEXEC).
pub fn keep_across_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl F_GETFD/F_SETFD on a descriptor number has no memory effects.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) })?;
    Ok(())
}

/// Execs this binary again (`/proc/self/exe`, which stays the binary this process runs even
/// after a newer one replaced it on disk) with `args` (`argv[0]` included). Returns only on error.
pub fn exec_self(args: &[OsString]) -> io::Error {
    exec_path(c"/proc/self/exe", args)
}

/// Execs the program open at `file` (a binary opened earlier, so that replacing it on disk
/// changes nothing) with `args` (`argv[0]` included). Returns only on error.
pub fn exec_file(file: &std::fs::File, args: &[OsString]) -> io::Error {
    use std::os::fd::AsRawFd;
    match CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        Ok(path) => exec_path(&path, args),
        Err(_) => io::Error::from_raw_os_error(libc::EINVAL),
    }
}

fn exec_path(path: &std::ffi::CStr, args: &[OsString]) -> io::Error {
    let c: Result<Vec<CString>, _> = args
        .iter()
        .map(|a| CString::new(a.as_bytes().to_vec()))
        .collect();
    let Ok(c) = c else {
        return io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte");
    };
    let mut argv: Vec<*const libc::c_char> = c.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: a NUL-terminated array of pointers to NUL-terminated strings that live until the
    // call returns (it returns only on failure).
    unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
    io::Error::last_os_error()
}

/// Ends this process at once with `code`, running nothing of the parent's (a forked child
/// that could not exec).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no memory of ours.
    unsafe { libc::_exit(code) }
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
