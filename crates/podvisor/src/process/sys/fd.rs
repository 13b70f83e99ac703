//! Descriptor-based wrappers: signalfd, poll, pipes, epoll, non-blocking TCP connects,
//! peer credentials, inotify and flock.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use super::{c_string, check, SigSet};

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

    /// Every pending signal with the pid of its sender, in as few reads as it takes (usually
    /// one: a standard signal is pending at most once).
    pub fn read_all(&self) -> io::Result<Vec<(i32, i32)>> {
        const BATCH: usize = 8;
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let mut signals = Vec::new();
        loop {
            // SAFETY: all-zero siginfos are a valid buffer of the size signalfd writes.
            let mut infos: [libc::signalfd_siginfo; BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: reading at most the array's size into it.
            let n = unsafe {
                libc::read(
                    self.0.as_raw_fd(),
                    infos.as_mut_ptr() as *mut libc::c_void,
                    size * BATCH,
                )
            };
            if n == -1 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(signals),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            let got = n as usize / size;
            signals.extend(
                infos[..got]
                    .iter()
                    .map(|i| (i.ssi_signo as i32, i.ssi_pid as i32)),
            );
            if got < BATCH {
                return Ok(signals);
            }
        }
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

/// Whether the other end of the stream socket `fd` has closed (or shut down its writing),
/// asked without waiting: `poll(2)` reports it (POLLHUP, POLLRDHUP) even while what it wrote
/// before closing is still to be read.
pub fn hung_up(fd: RawFd) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout returns at once.
    let ret = unsafe { libc::poll(&mut pfd, 1, 0) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(pfd.revents & (libc::POLLHUP | libc::POLLRDHUP) != 0)
}

/// Marks every descriptor above stderr close-on-exec. What podvisor inherited (a shell's, a
/// test runner's, a service manager's) then never reaches a container or a probe, which get
/// 0, 1 and 2 only, as runc gives a container.
pub fn cloexec_inherited() -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC closes nothing; it sets a flag on our own
    // descriptors.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if done == 0 {
        return Ok(());
    }
    // Linux before 5.11: each descriptor in /proc/self/fd.
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: F_SETFD on a descriptor number; one that was the directory's, now closed,
        // only makes the call fail.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// A pipe whose ends close on exec, both blocking: (read, write).
pub fn blocking_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2(2) fills the two-element array.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors were just made and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A pipe whose ends close on exec: (read end, non-blocking; write end).
pub fn pipe() -> io::Result<(std::fs::File, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the two-element array.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Only our end is non-blocking: the write end goes to the child, which expects an ordinary
    // blocking descriptor. A new pipe's read end has no other status flag to keep.
    // SAFETY: fcntl on a descriptor we own.
    check(unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) })?;
    Ok((std::fs::File::from(read), write))
}

/// Makes reads and writes of `fd` non-blocking (its other status flags kept).
pub fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller holds.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    Ok(())
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
/// With EV_READ or EV_WRITE: one readiness, then the descriptor is not watched until `modify`.
pub const EV_ONESHOT: u32 = libc::EPOLLONESHOT as u32;

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

/// Checks a non-blocking connect without waiting: a peer (`getpeername`) means it is done, a
/// pending error (`SO_ERROR`) that it failed. On loopback the handshake often completes within
/// `connect` itself, and this saves a trip through epoll; the peer is asked first, as that is
/// the common case and then one call is enough.
pub fn connect_state(stream: &std::net::TcpStream) -> ConnectState {
    match stream.peer_addr() {
        Ok(_) => return ConnectState::Connected,
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {}
        Err(e) => return ConnectState::Failed(e),
    }
    let err = match socket_option::<libc::c_int>(stream.as_raw_fd(), libc::SO_ERROR) {
        Ok(err) => err,
        Err(e) => return ConnectState::Failed(e),
    };
    if err != 0 {
        return ConnectState::Failed(io::Error::from_raw_os_error(err));
    }
    ConnectState::Connecting
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

/// The user id of the process at the other end of a unix socket (`SO_PEERCRED`).
pub fn peer_uid(stream: &std::os::unix::net::UnixStream) -> io::Result<u32> {
    let cred: libc::ucred = socket_option(stream.as_raw_fd(), libc::SO_PEERCRED)?;
    Ok(cred.uid)
}

/// A socket-level option (`SOL_SOCKET`) of a socket, of type `T` (a plain C value: an int,
/// a `ucred`).
fn socket_option<T: Copy>(fd: RawFd, option: libc::c_int) -> io::Result<T> {
    let mut value = std::mem::MaybeUninit::<T>::zeroed();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for getsockopt to write `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            value.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    // SAFETY: zeroed, then written by the kernel; every T used here (C ints and structs of
    // them) is valid when zeroed.
    Ok(unsafe { value.assume_init() })
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

/// Sets the size of the terminal of `fd` (a pseudo-terminal's master: its foreground process
/// group gets SIGWINCH).
pub fn set_terminal_size(fd: RawFd, rows: u16, cols: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads the winsize on our stack.
    check(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &size) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    use super::*;

    /// The keeper's check before each start: a peer that wrote and then closed has hung up,
    /// while what it wrote is still there to read.
    #[test]
    fn a_closed_peer_has_hung_up_with_its_words_still_to_read() {
        let (mut run, mut keeper) = UnixStream::pair().unwrap();
        assert!(!hung_up(keeper.as_raw_fd()).unwrap());
        run.write_all(b"start\n").unwrap();
        assert!(!hung_up(keeper.as_raw_fd()).unwrap());
        drop(run);
        assert!(hung_up(keeper.as_raw_fd()).unwrap());
        let mut got = String::new();
        keeper.read_to_string(&mut got).unwrap();
        assert_eq!(got, "start\n");
    }
}
