//! A mount point inside a private root, looked up and made with the root as `/` (openat2's
//! RESOLVE_IN_ROOT), as runc's securejoin does: what the child does first for a mount inside
//! a root (`newroot::place_mount` then mounts on what it found), with plain syscalls on the
//! parent's strings and buffers on the child's stack.

/// What `InRoot::make` returns where the kernel has no openat2(2) (before Linux 5.6).
pub(super) const NO_OPENAT2: libc::c_int = -4;

/// The root and the path of a mount point in it, as the lookup left them.
pub(super) struct InRoot {
    /// The root, open (O_PATH); -1 before `make`.
    root: libc::c_int,
    /// The mount point's path relative to the root, a C string (links it went through
    /// replaced by what they name).
    path: [u8; libc::PATH_MAX as usize],
    len: usize,
}

/// `path` (relative) opened with `root` as `/`: symbolic links on the way, absolute or with
/// `..`, stay inside it (openat2's RESOLVE_IN_ROOT). -1 on error (errno set).
///
/// # Safety
/// `path` is a C string.
unsafe fn open_in_root(
    root: libc::c_int,
    path: *const libc::c_char,
    flags: libc::c_int,
) -> libc::c_int {
    // SAFETY: open_how is plain data; openat2(2) reads it and the C string.
    unsafe {
        let mut how: libc::open_how = std::mem::zeroed();
        how.flags = (flags | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
        let size = std::mem::size_of::<libc::open_how>();
        loop {
            let fd = libc::syscall(libc::SYS_openat2, root, path, &how, size) as libc::c_int;
            // EAGAIN: a rename or mount elsewhere raced the lookup; it is tried again.
            if fd != -1 || *libc::__errno_location() != libc::EAGAIN {
                return fd;
            }
        }
    }
}

/// `/proc/self/fd/N` of descriptor `fd`, as a C string in `buf`: the path through which a
/// mount lands on what `fd` is, whatever is at its name now.
pub(super) fn fd_path(fd: libc::c_int, buf: &mut [u8; 32]) -> *const libc::c_char {
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 10];
    let (mut n, mut count) = (fd.max(0) as u32, 0);
    loop {
        digits[count] = b'0' + (n % 10) as u8;
        count += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..count {
        buf[prefix.len() + i] = digits[count - 1 - i];
    }
    buf[prefix.len() + count] = 0;
    buf.as_ptr().cast()
}

/// `path[..len]` with the link at `path[start..end]` (in directory `dir`; `path[end]` is 0)
/// replaced by what it names: from the root for an absolute link, else from the directory
/// the link is in. False (errno set) where it cannot be read or the result does not fit.
///
/// # Safety
/// `dir` is an open directory.
unsafe fn through_link(
    path: &mut [u8; libc::PATH_MAX as usize],
    len: &mut usize,
    start: usize,
    end: usize,
    dir: libc::c_int,
) -> bool {
    // SAFETY: readlinkat(2) into a buffer of ours, of its length.
    unsafe {
        let mut link = [0u8; libc::PATH_MAX as usize];
        let name = path[start..].as_ptr().cast::<libc::c_char>();
        let n = libc::readlinkat(dir, name, link.as_mut_ptr().cast(), link.len());
        if n <= 0 {
            return false;
        }
        let link = &link[..n as usize];
        let mut next = [0u8; libc::PATH_MAX as usize];
        let mut at = 0;
        let mut push = |bytes: &[u8]| {
            let fits = at + bytes.len() < next.len();
            if fits {
                next[at..at + bytes.len()].copy_from_slice(bytes);
                at += bytes.len();
            }
            fits
        };
        let fits = match link.strip_prefix(b"/") {
            Some(absolute) => push(absolute),
            None => push(&path[..start]) && push(link),
        } && (end >= *len || (push(b"/") && push(&path[end + 1..*len])));
        if !fits || at == 0 {
            *libc::__errno_location() = libc::ENAMETOOLONG;
            return false;
        }
        path[..at].copy_from_slice(&next[..at]);
        path[at..].fill(0);
        *len = at;
        true
    }
}

impl InRoot {
    pub(super) const fn new() -> InRoot {
        InRoot {
            root: -1,
            path: [0; libc::PATH_MAX as usize],
            len: 0,
        }
    }

    /// Opens `root` and, inside it, `in_root` (relative): each directory on the way is looked
    /// up with the root as `/` and made where it is missing, the last one too (an empty file
    /// with `file`); a link that names what is not there yet is followed to it, made in the
    /// root. Returns the mount point open (O_PATH; the caller closes it), `NO_OPENAT2` where
    /// the kernel has no openat2, -1 on error (errno set).
    ///
    /// # Safety
    /// `root` and `in_root` are C strings.
    pub(super) unsafe fn make(
        &mut self,
        root: *const libc::c_char,
        in_root: *const libc::c_char,
        file: bool,
    ) -> libc::c_int {
        // SAFETY: open(2), openat2(2), mkdirat(2), openat(2), readlinkat(2), dup(2) and
        // close(2) on the parent's strings, a copy of one here, and descriptors opened here.
        unsafe {
            self.root = libc::open(root, libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
            if self.root == -1 {
                return -1;
            }
            self.len = libc::strlen(in_root);
            if self.len == 0 || self.len >= self.path.len() {
                *libc::__errno_location() = libc::ENAMETOOLONG;
                return -1;
            }
            std::ptr::copy_nonoverlapping(in_root.cast::<u8>(), self.path.as_mut_ptr(), self.len);
            self.walk(file)
        }
    }

    /// The mount point looked up again: once a mount is made on it, what shows there now.
    /// O_PATH, or -1 (errno set).
    pub(super) fn reopen(&self) -> libc::c_int {
        // SAFETY: `path` is a C string (zeroed past `len`).
        unsafe { open_in_root(self.root, self.path.as_ptr().cast(), libc::O_PATH) }
    }

    pub(super) fn close(&mut self) {
        if self.root != -1 {
            // SAFETY: a descriptor opened by `make`.
            unsafe { libc::close(self.root) };
            self.root = -1;
        }
    }

    /// `make`'s lookup, from the root to the mount point.
    ///
    /// # Safety
    /// `make`'s, with the root open.
    unsafe fn walk(&mut self, file: bool) -> libc::c_int {
        // SAFETY: as `make`'s.
        unsafe {
            let (root, path, len) = (self.root, &mut self.path, &mut self.len);
            let at = |p: &[u8]| p.as_ptr().cast::<libc::c_char>();
            // Each directory on the way, then the target: its prefix of `path` opened in the
            // root, made in the directory before it (itself opened in the root) if missing.
            let mut parent = libc::dup(root);
            let mut start = 0;
            let mut links = 0;
            while start < *len {
                let end = (start..*len).find(|&i| path[i] == b'/').unwrap_or(*len);
                let last = end == *len;
                if end == start {
                    start += 1;
                    continue;
                }
                let kept = path[end];
                path[end] = 0;
                let dir = if last && file { 0 } else { libc::O_DIRECTORY };
                let mut fd = open_in_root(root, at(&path[..]), libc::O_PATH | dir);
                // No openat2 in this kernel, or a seccomp filter (podvisor's own container's)
                // that refuses it.
                if fd == -1 && matches!(*libc::__errno_location(), libc::ENOSYS | libc::EPERM) {
                    libc::close(parent);
                    return NO_OPENAT2;
                }
                if fd == -1 && *libc::__errno_location() == libc::ENOENT {
                    let name = at(&path[start..]);
                    let made = if last && file {
                        let flags =
                            libc::O_CREAT | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
                        let f = libc::openat(parent, name, flags, 0o644);
                        if f != -1 {
                            libc::close(f);
                        }
                        f
                    } else {
                        libc::mkdirat(parent, name, 0o755)
                    };
                    // EEXIST, ELOOP: a link is there (one that names nothing yet, see below).
                    let errno = *libc::__errno_location();
                    if made == -1 && !matches!(errno, libc::EEXIST | libc::ELOOP) {
                        libc::close(parent);
                        return -1;
                    }
                    fd = open_in_root(root, at(&path[..]), libc::O_PATH | dir);
                    if fd == -1 && *libc::__errno_location() == libc::ENOENT {
                        // A link that names what is not there yet (an image's /etc/resolv.conf ->
                        // /run/...): the way goes on through what it names, made in the root,
                        // as runc makes it; at most the kernel's 40 links.
                        links += 1;
                        let followed = links <= 40 && through_link(path, len, start, end, parent);
                        libc::close(parent);
                        if !followed {
                            return -1;
                        }
                        parent = libc::dup(root);
                        start = 0;
                        continue;
                    }
                }
                path[end] = kept;
                libc::close(parent);
                if fd == -1 {
                    return -1;
                }
                parent = fd;
                start = end + 1;
            }
            parent
        }
    }
}
