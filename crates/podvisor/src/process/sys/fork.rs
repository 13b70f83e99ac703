//! What starting a keeper needs: a plain fork, a session of its own, descriptors handed across
//! exec, and an exec prepared before the fork.

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

/// `fork(2)`. The child must make system calls only until it execs or exits (no allocation,
/// no lock: a thread of the parent may have held one; prepare an `Exec` before).
pub fn fork() -> io::Result<Forked> {
    // SAFETY: fork has no memory effects on the caller; the child, which gets a copy of the
    // calling thread only, keeps to system calls (above).
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
