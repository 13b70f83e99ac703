//! What unpacking an image layer needs beyond std: device nodes and fifos, the overlay's
//! whiteouts (a 0/0 character device) and opaque directories (an xattr), owners of symlinks,
//! and times without following links.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{c_string, check};

fn c_path(p: &Path) -> io::Result<std::ffi::CString> {
    c_string(p.as_os_str().as_bytes())
}

/// Makes a character device (`kind` 'c'), block device ('b') or fifo ('p') at `path`.
pub fn make_node(path: &Path, kind: char, mode: u32, major: u32, minor: u32) -> io::Result<()> {
    let file_type = match kind {
        'c' => libc::S_IFCHR,
        'b' => libc::S_IFBLK,
        _ => libc::S_IFIFO,
    };
    let path = c_path(path)?;
    let dev = libc::makedev(major, minor);
    // SAFETY: `path` is a NUL-terminated string that lives across the call.
    check(unsafe { libc::mknod(path.as_ptr(), file_type | (mode & 0o7777), dev) }).map(drop)
}

/// Sets the extended attribute `name` of `path` (not following a symlink) to `value`.
pub fn set_xattr(path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let path = c_path(path)?;
    let name = c_string(name.as_bytes())?;
    // SAFETY: both strings are NUL-terminated and live across the call; `value` is a valid
    // slice of `value.len()` bytes.
    check(unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
    .map(drop)
}

/// Sets the owner of `path` itself (a symlink's own owner, not its target's).
pub fn lchown(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let path = c_path(path)?;
    // SAFETY: `path` is a NUL-terminated string that lives across the call.
    check(unsafe { libc::lchown(path.as_ptr(), uid, gid) }).map(drop)
}

/// Sets the modification (and access) time of `path` itself, not following a symlink.
pub fn set_mtime(path: &Path, seconds: i64) -> io::Result<()> {
    let path = c_path(path)?;
    let t = libc::timespec {
        tv_sec: seconds,
        tv_nsec: 0,
    };
    let times = [t, t];
    // SAFETY: `path` is NUL-terminated, `times` is an array of two timespecs; both live across
    // the call.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// The value of the extended attribute `name` of `path` (not following a symlink), up to 64
/// bytes; `None` when it has none.
pub fn get_xattr(path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    let path = c_path(path)?;
    let name = c_string(name.as_bytes())?;
    let mut value = [0u8; 64];
    // SAFETY: both strings are NUL-terminated and live across the call; `value` is a writable
    // buffer of `value.len()` bytes.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    // (At most 64 or -1: it fits.)
    match check(n as libc::c_int) {
        Ok(n) => Ok(Some(value[..n as usize].to_vec())),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}
