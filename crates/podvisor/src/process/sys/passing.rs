//! Descriptors passed over a unix socket (`SCM_RIGHTS`): how `podvisor exec` hands its
//! terminal or pipes to the run, which starts the command in the container with them, as
//! `nsenter` would with its own.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// At most this many descriptors are taken from one message; more are closed.
pub const MAX_PASSED: usize = 3;

/// Room for the control message of `MAX_PASSED` descriptors (CMSG_SPACE, 8-aligned).
const CONTROL_LEN: usize = 64;

/// Sends `bytes` with `fds` attached; returns how many bytes went (the descriptors go with
/// the first byte).
pub fn send_with_fds(socket: &impl AsRawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    assert!(fds.len() <= MAX_PASSED && !bytes.is_empty());
    let mut control = [0u64; CONTROL_LEN / 8];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is valid (no name, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let data_len = std::mem::size_of_val(fds) as u32;
    if !fds.is_empty() {
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `control`, which is CONTROL_LEN bytes, more than
        // CMSG_SPACE of MAX_PASSED descriptors; CMSG_FIRSTHDR is then non-null and CMSG_DATA
        // has room for `fds`.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        }
    }
    // SAFETY: msg points at live buffers for the length of the call.
    let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Reads into `buf` and takes the descriptors that came with the bytes (close-on-exec), at
/// most `MAX_PASSED` of them in `fds`; any beyond are closed. `Ok(0)`: end of stream.
pub fn recv_with_fds(socket: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    let mut control = [0u64; CONTROL_LEN / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid (no name, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_LEN as _;
    // SAFETY: msg points at live buffers for the length of the call.
    let n = unsafe { libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG macros walk only
    // within it, and each SCM_RIGHTS message holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors
    // that are now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data: *const RawFd = libc::CMSG_DATA(cmsg).cast();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if fds.len() < MAX_PASSED {
                        fds.push(fd);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(n as usize)
}

/// The one descriptor a process sends with one byte on `socket` (a terminal's master on a
/// console socket); `None` when none came (the stream ended: it never sent one).
pub fn recv_fd(socket: &impl AsRawFd) -> io::Result<Option<OwnedFd>> {
    let mut fds = Vec::new();
    recv_with_fds(socket.as_raw_fd(), &mut [0u8; 1], &mut fds)?;
    Ok(fds.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn descriptors_travel_with_the_bytes() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (mut read, write) = super::super::pipe().unwrap();
        let sent = send_with_fds(&a, b"hi", &[write.as_raw_fd(), write.as_raw_fd()]).unwrap();
        assert_eq!(sent, 2);
        drop(write);
        let mut buf = [0u8; 8];
        let mut fds = Vec::new();
        assert_eq!(recv_with_fds(b.as_raw_fd(), &mut buf, &mut fds).unwrap(), 2);
        assert_eq!(&buf[..2], b"hi");
        assert_eq!(fds.len(), 2);
        let mut out = std::fs::File::from(fds.remove(0));
        std::io::Write::write_all(&mut out, b"through").unwrap();
        drop((out, fds));
        let mut text = String::new();
        read.read_to_string(&mut text).unwrap();
        assert_eq!(text, "through");
    }
}
