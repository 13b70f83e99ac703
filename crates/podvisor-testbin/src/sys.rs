//! The testbin's only `unsafe`: fork, signal masks, waits and inotify, which std does not offer.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;

pub fn full_set() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises the set.
    unsafe {
        libc::sigfillset(set.as_mut_ptr());
        set.assume_init()
    }
}

/// Blocks every signal but the fault signals and returns the blocked set.
pub fn block_all_but_faults() -> libc::sigset_t {
    let mut set = full_set();
    for sig in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGABRT,
        libc::SIGTRAP,
    ] {
        // SAFETY: valid initialised set.
        unsafe { libc::sigdelset(&mut set, sig) };
    }
    // SAFETY: valid pointers.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
    set
}

/// Takes `sig` out of `set` and unblocks it.
pub fn unblock(set: &mut libc::sigset_t, sig: i32) {
    // SAFETY: valid initialised set; a bad number only makes the calls fail.
    unsafe {
        libc::sigdelset(set, sig);
        let mut one = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(one.as_mut_ptr());
        libc::sigaddset(one.as_mut_ptr(), sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, one.as_ptr(), std::ptr::null_mut());
    }
}

/// Waits for one signal of `set`, returning its number and the sender's pid.
pub fn wait_signal(set: &libc::sigset_t) -> io::Result<(i32, i32)> {
    // SAFETY: zeroed siginfo is a valid output buffer.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers.
        let sig = unsafe { libc::sigwaitinfo(set, &mut info) };
        if sig == -1 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        // SAFETY: the kernel filled in the siginfo for this signal.
        let pid = unsafe { info.si_pid() };
        return Ok((sig, pid));
    }
}

/// Adds `sig` to the blocked set.
pub fn block(sig: i32) {
    // SAFETY: a set initialised by sigemptyset; a bad number only makes the calls fail.
    unsafe {
        let mut one = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(one.as_mut_ptr());
        libc::sigaddset(one.as_mut_ptr(), sig);
        libc::pthread_sigmask(libc::SIG_BLOCK, one.as_ptr(), std::ptr::null_mut());
    }
}

pub fn ignore(sig: i32) {
    // SAFETY: installing SIG_IGN runs no code of ours.
    unsafe { libc::signal(sig, libc::SIG_IGN) };
}

/// Forks; the child runs `f` and leaves with `_exit(code)` without running destructors or
/// flushing the parent's buffers. Returns the child's pid in the parent.
pub fn fork_then(f: impl FnOnce() -> i32) -> io::Result<i32> {
    // SAFETY: the testbin is single-threaded when it forks, so the child may run ordinary code.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            let code = f();
            // SAFETY: _exit ends the child at once.
            unsafe { libc::_exit(code) }
        }
        pid => Ok(pid),
    }
}

pub fn wait_pid(pid: i32) -> io::Result<i32> {
    let mut status = 0;
    // SAFETY: valid pointer.
    let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(status)
}

pub fn raise_default(sig: i32) -> ! {
    // SAFETY: restoring the default action and raising the signal; if it does not kill us we
    // exit plainly.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, set.as_ptr(), std::ptr::null_mut());
        libc::raise(sig);
        libc::_exit(120)
    }
}

pub fn ids() -> (i32, i32, i32, i32) {
    // SAFETY: these getters cannot fail.
    unsafe {
        (
            libc::getpid(),
            libc::getppid(),
            libc::getpgrp(),
            libc::getsid(0),
        )
    }
}

/// The foreground process group of the terminal on stdin, or -1.
pub fn foreground_group() -> i32 {
    // SAFETY: tcgetpgrp only reads.
    unsafe { libc::tcgetpgrp(0) }
}

/// execvp, without std's Command, which sets SIGPIPE back to its default in the child.
pub fn exec(cmd: &[String]) -> io::Error {
    let args: Vec<std::ffi::CString> = match cmd
        .iter()
        .map(|a| std::ffi::CString::new(a.as_bytes()))
        .collect()
    {
        Ok(args) => args,
        Err(e) => return io::Error::new(io::ErrorKind::InvalidInput, e),
    };
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: argv is a null-terminated array of pointers to NUL-terminated strings that
    // outlive the call; execvp returns only on failure.
    unsafe { libc::execvp(argv[0], argv.as_ptr()) };
    io::Error::last_os_error()
}

/// `keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_THREAD_KEYRING, 0)`: harmless, and refused by a
/// runtime's default seccomp profile.
pub fn keyctl_thread_keyring() -> io::Result<()> {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_THREAD_KEYRING: libc::c_long = -1;
    // SAFETY: keyctl with plain integer arguments.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_THREAD_KEYRING,
            0 as libc::c_long,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An inotify descriptor watching `dir` for files made in it or moved into it.
pub fn watch_made(dir: &str) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let path =
        std::ffi::CString::new(dir).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: inotify_init1 takes flags only.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by inotify_init1 and nothing else owns it.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: fd is an inotify descriptor, path a NUL-terminated string outliving the call.
    let wd = unsafe {
        libc::inotify_add_watch(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            path.as_ptr(),
            libc::IN_CREATE | libc::IN_MOVED_TO,
        )
    };
    if wd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The names in the inotify events read from `buf` (as many bytes as a read returned).
pub fn event_names(buf: &[u8]) -> Vec<String> {
    let header = std::mem::size_of::<libc::inotify_event>();
    let mut names = Vec::new();
    let mut at = 0;
    while at + header <= buf.len() {
        // SAFETY: at least a whole header lies at `at`; read_unaligned copes with any
        // alignment of the buffer.
        let event: libc::inotify_event =
            unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
        let len = event.len as usize;
        let name = &buf[(at + header).min(buf.len())..(at + header + len).min(buf.len())];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        names.push(String::from_utf8_lossy(&name[..end]).into_owned());
        at += header + len;
    }
    names
}
