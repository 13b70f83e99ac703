//! The child's side of a container's own root (`child.rs` calls these in order): the
//! private layer and its overlay, its `/dev`, each bind mount, the pivot into it, and, rootless,
//! the uid and gid maps and the root built in a user namespace; and the plans of them it
//! reads, which the parent prepares.

/// A bind mount as the child reads it.
pub(super) struct MountSpec {
    pub(super) source: *const libc::c_char,
    pub(super) target: *const libc::c_char,
    pub(super) read_only: bool,
    /// Directories to make first (in order; one that exists is fine), then, with
    /// `make_file`, the target itself as an empty file: a mount point inside a private root.
    pub(super) make_dirs: *const *const libc::c_char,
    pub(super) make_dir_count: usize,
    pub(super) make_file: bool,
    /// Recursive bind; read-only applies to everything below it too (a carried host mount).
    pub(super) recursive_read_only: bool,
    /// A host mount carried into the root: where it is gone (ENOENT: unmounted and its mount
    /// point removed since the run read the host's mounts, as a container engine does with
    /// a network namespace's), it is left out rather than failing the start.
    pub(super) carried: bool,
    /// Not null: an overlay with these options (`lowerdir=…`, no upper layer, so read-only)
    /// is mounted at `target` instead (an image volume of several layers).
    pub(super) overlay: *const libc::c_char,
    /// Not null: the overlay's `lowerdir` names are relative to this directory.
    pub(super) overlay_base: *const libc::c_char,
    /// Not null: fuse-overlayfs's argv (null-terminated), which mounts the overlay where
    /// the kernel will not, or, with `fuse_only`, instead of it (rootless).
    pub(super) fuse_argv: *const *const libc::c_char,
    pub(super) fuse_only: bool,
    /// Not null: the target is inside a private root, this directory, as `in_root` (relative
    /// to it): the mount point is looked up and made there with the root as `/` (openat2's
    /// RESOLVE_IN_ROOT), so that a symbolic link on the way (an image's `/var/run -> /run`, or
    /// one a container left in a volume) leads where the container will see it, never to the
    /// host's files; `make_dirs` and `target` are the way of kernels without openat2.
    pub(super) root: *const libc::c_char,
    pub(super) in_root: *const libc::c_char,
}

/// One step of building a rootless root, as the child reads it.
pub(super) struct RootlessStep {
    /// 0: overlay (mkdir upper, work and target, mount with `source` as its options) of the
    /// host's directory `lower`, or a read-only bind of it where the kernel refuses the
    /// overlay for mounts made below it since the run read the host's; 5: the same for an
    /// image's layers, which fuse-overlayfs may mount instead (`fuse_argv`); 1: recursive bind
    /// of the directory `source` at `target` (read-only when `flag`); 2: symlink `source` at
    /// `target`; 3: as 1, for a file; 4: an empty directory.
    pub(super) kind: u8,
    pub(super) source: *const libc::c_char,
    pub(super) target: *const libc::c_char,
    pub(super) upper: *const libc::c_char,
    pub(super) work: *const libc::c_char,
    pub(super) lower: *const libc::c_char,
    pub(super) flag: bool,
}

/// The private root as the child reads it.
pub(super) struct RootSpec {
    pub(super) layer_dir: *const libc::c_char,
    pub(super) upper: *const libc::c_char,
    pub(super) work: *const libc::c_char,
    pub(super) merged: *const libc::c_char,
    pub(super) overlay_options: *const libc::c_char,
    /// Not null: the image's `lowerdir` names are relative to this directory.
    pub(super) lower_base: *const libc::c_char,
    pub(super) tmp: *const libc::c_char,
    pub(super) read_only: bool,
    /// Rootless: the maps to write, the upper layers' tmpfs and the steps (null: as root).
    pub(super) uid_map: *const libc::c_char,
    pub(super) gid_map: *const libc::c_char,
    pub(super) upper_dir: *const libc::c_char,
    /// Rootless in a user namespace already mapped (entered before the clone, see
    /// `via_user_namespace`): the maps are not written.
    pub(super) mapped: bool,
    pub(super) steps: *const RootlessStep,
    pub(super) step_count: usize,
    /// Not null: fuse-overlayfs's argv (null-terminated), which mounts the image's layers
    /// (step 5) where the kernel will not, or, with `fuse_only`, instead of it.
    pub(super) fuse_argv: *const *const libc::c_char,
    pub(super) fuse_only: bool,
}

/// A container's own /dev as the child reads it: pointers into `DevStrings`.
pub(super) struct DevSpec {
    pub(super) dir: *const libc::c_char,
    /// (path, major, minor)
    pub(super) nodes: *const (*const libc::c_char, u32, u32),
    pub(super) node_count: usize,
    /// (target, path)
    pub(super) links: *const (*const libc::c_char, *const libc::c_char),
    pub(super) link_count: usize,
    pub(super) pts: *const libc::c_char,
    pub(super) shm: *const libc::c_char,
    pub(super) mqueue: *const libc::c_char,
    pub(super) null: *const libc::c_char,
    pub(super) masked: *const *const libc::c_char,
    pub(super) masked_count: usize,
    pub(super) read_only: *const *const libc::c_char,
    pub(super) read_only_count: usize,
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// In the child, in its new mount namespace: the layer's tmpfs, its directories and the
/// overlay of `/` at `merged`, with a fresh /tmp unless the root is read-only. -1 on error
/// (errno set); rootless, `OVERLAY_IN_USER_NAMESPACE_FAILED` when an overlay could not be
/// mounted (errno set), `FUSE_OVERLAYFS_FAILED` when fuse-overlayfs did not mount one.
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
pub(super) unsafe fn build_root(r: &RootSpec) -> libc::c_int {
    // Relative layer names are read from their directory, as root and rootless alike
    // (`enter_root` moves on).
    // SAFETY: chdir(2) on a path the parent prepared.
    if !r.lower_base.is_null() && unsafe { libc::chdir(r.lower_base) } == -1 {
        return -1;
    }
    if !r.uid_map.is_null() {
        // SAFETY: as below, on the parent's prepared paths.
        return unsafe { build_rootless_root(r) };
    }
    // SAFETY: mount(2), mkdir(2) on the parent's prepared paths.
    unsafe {
        if libc::mount(
            c"tmpfs".as_ptr(),
            r.layer_dir,
            c"tmpfs".as_ptr(),
            0,
            c"mode=0755".as_ptr().cast(),
        ) == -1
        {
            return -1;
        }
        for d in [r.upper, r.work, r.merged] {
            if libc::mkdir(d, 0o755) == -1 {
                return -1;
            }
        }
        let overlay = c"overlay".as_ptr();
        if libc::mount(overlay, r.merged, overlay, 0, r.overlay_options.cast()) == -1 {
            return -1;
        }
        if !r.read_only && !r.tmp.is_null() {
            let flags = libc::MS_NOSUID | libc::MS_NODEV;
            let tmpfs = c"tmpfs".as_ptr();
            if libc::mount(tmpfs, r.tmp, tmpfs, flags, c"mode=1777".as_ptr().cast()) == -1 {
                return -1;
            }
        }
    }
    0
}

/// In the child, in its new root: a /dev of its own, as runc makes one for a container that
/// is not privileged. -1 on error (errno set).
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
pub(super) unsafe fn build_dev(d: &DevSpec) -> libc::c_int {
    let tmpfs = c"tmpfs".as_ptr();
    // SAFETY: mount(2), mknod(2), chmod(2), symlink(2), mkdir(2) on the parent's paths.
    unsafe {
        let flags = libc::MS_NOSUID | libc::MS_STRICTATIME;
        if libc::mount(
            tmpfs,
            d.dir,
            tmpfs,
            flags,
            c"mode=755,size=65536k".as_ptr().cast(),
        ) == -1
        {
            return -1;
        }
        for i in 0..d.node_count {
            let (path, major, minor) = *d.nodes.add(i);
            let dev = libc::makedev(major, minor);
            // The mode after mknod, whatever the umask.
            if libc::mknod(path, libc::S_IFCHR | 0o666, dev) == -1 || libc::chmod(path, 0o666) == -1
            {
                return -1;
            }
        }
        for i in 0..d.link_count {
            let (target, path) = *d.links.add(i);
            if libc::symlink(target, path) == -1 {
                return -1;
            }
        }
        let hidden = libc::MS_NOSUID | libc::MS_NOEXEC;
        let pts = c"devpts".as_ptr();
        let shm_flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let mqueue = c"mqueue".as_ptr();
        if libc::mkdir(d.pts, 0o755) == -1
            || libc::mount(
                pts,
                d.pts,
                pts,
                hidden,
                c"newinstance,ptmxmode=0666,mode=0620,gid=5".as_ptr().cast(),
            ) == -1
            || libc::mkdir(d.shm, 0o1777) == -1
            || libc::mount(
                tmpfs,
                d.shm,
                tmpfs,
                shm_flags,
                c"mode=1777,size=65536k".as_ptr().cast(),
            ) == -1
            || libc::mkdir(d.mqueue, 0o755) == -1
            || libc::mount(mqueue, d.mqueue, mqueue, shm_flags, std::ptr::null()) == -1
        {
            return -1;
        }
    }
    0
}

/// In the child: one bind mount, its mount point made first when it is inside a private
/// root. -1 on error (errno set); `FUSE_OVERLAYFS_FAILED` when fuse-overlayfs did not mount
/// an image volume's overlay.
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
pub(super) unsafe fn place_mount(m: &MountSpec) -> libc::c_int {
    let none = std::ptr::null();
    // SAFETY: mkdir(2), open(2), mount(2), mount_setattr(2) on the parent's prepared paths;
    // `place_in_root` on the same.
    unsafe {
        if !m.root.is_null() {
            match place_in_root(m) {
                NO_OPENAT2 => {}
                ret => return ret,
            }
        }
        for j in 0..m.make_dir_count {
            let d = *m.make_dirs.add(j);
            if libc::mkdir(d, 0o755) == -1 && *libc::__errno_location() != libc::EEXIST {
                return -1;
            }
        }
        if m.make_file {
            let fd = libc::open(
                m.target,
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644,
            );
            if fd == -1 {
                return -1;
            }
            libc::close(fd);
        }
        if !m.overlay.is_null() {
            let fuse = !m.fuse_argv.is_null();
            if (fuse && m.fuse_only) || mount_overlay_volume(m) == -1 {
                if !fuse {
                    return -1;
                }
                return match mount_with_fuse(m.fuse_argv) {
                    0 => 0,
                    _ => FUSE_OVERLAYFS_FAILED,
                };
            }
            return 0;
        }
        let bind = libc::MS_BIND | libc::MS_REC;
        if libc::mount(m.source, m.target, none, bind, std::ptr::null()) == -1 {
            let gone = m.carried && *libc::__errno_location() == libc::ENOENT;
            return if gone { 0 } else { -1 };
        }
        if m.read_only {
            let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
            if libc::mount(none, m.target, none, ro, std::ptr::null()) == -1 {
                return -1;
            }
        }
        if m.recursive_read_only && read_only_below(m.target) == -1 {
            return -1;
        }
    }
    0
}

/// What `place_in_root` returns where the kernel has no openat2(2) (before Linux 5.6).
const NO_OPENAT2: libc::c_int = -4;

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
fn fd_path(fd: libc::c_int, buf: &mut [u8; 32]) -> *const libc::c_char {
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

/// `place_mount` of a mount point inside a private root: each directory on the way to it is
/// looked up with the root as `/` and made where it is missing, the target too (an empty file
/// for a file's mount), and the mount lands on what the lookup found (by its descriptor).
/// `NO_OPENAT2` where the kernel has no openat2; -1 on error (errno set).
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn place_in_root(m: &MountSpec) -> libc::c_int {
    // SAFETY: open(2), openat2(2), mkdirat(2), openat(2), mount(2) and close(2) on the
    // parent's strings, a copy of one on the stack, and descriptors opened here.
    unsafe {
        let root = libc::open(m.root, libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
        if root == -1 {
            return -1;
        }
        let ret = place_below(m, root);
        libc::close(root);
        ret
    }
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

/// `place_in_root` with the root open as `root`.
///
/// # Safety
/// As `place_in_root`; `root` is an open directory.
unsafe fn place_below(m: &MountSpec, root: libc::c_int) -> libc::c_int {
    // SAFETY: as `place_in_root`.
    unsafe {
        let mut len = libc::strlen(m.in_root);
        let mut path = [0u8; libc::PATH_MAX as usize];
        if len == 0 || len >= path.len() {
            *libc::__errno_location() = libc::ENAMETOOLONG;
            return -1;
        }
        std::ptr::copy_nonoverlapping(m.in_root.cast::<u8>(), path.as_mut_ptr(), len);
        let at = |p: &[u8]| p.as_ptr().cast::<libc::c_char>();
        // Each directory on the way, then the target: its prefix of `path` opened in the
        // root, made in the directory before it (itself opened in the root) if missing.
        let mut parent = libc::dup(root);
        let mut start = 0;
        let mut links = 0;
        while start < len {
            let end = (start..len).find(|&i| path[i] == b'/').unwrap_or(len);
            let last = end == len;
            if end == start {
                start += 1;
                continue;
            }
            let kept = path[end];
            path[end] = 0;
            let dir = if last && m.make_file {
                0
            } else {
                libc::O_DIRECTORY
            };
            let mut fd = open_in_root(root, at(&path), libc::O_PATH | dir);
            // No openat2 in this kernel, or a seccomp filter (podvisor's own container's)
            // that refuses it.
            if fd == -1 && matches!(*libc::__errno_location(), libc::ENOSYS | libc::EPERM) {
                libc::close(parent);
                return NO_OPENAT2;
            }
            if fd == -1 && *libc::__errno_location() == libc::ENOENT {
                let name = at(&path[start..]);
                let made = if last && m.make_file {
                    let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
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
                fd = open_in_root(root, at(&path), libc::O_PATH | dir);
                if fd == -1 && *libc::__errno_location() == libc::ENOENT {
                    // A link that names what is not there yet (an image's /etc/resolv.conf ->
                    // /run/...): the way goes on through what it names, made in the root,
                    // as runc makes it; at most the kernel's 40 links.
                    links += 1;
                    let followed =
                        links <= 40 && through_link(&mut path, &mut len, start, end, parent);
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
        // `parent` is the target now.
        let mut buf = [0u8; 32];
        let target = fd_path(parent, &mut buf);
        let none = std::ptr::null();
        let ret = if !m.overlay.is_null() && m.fuse_argv.is_null() {
            let data = m.overlay.cast::<libc::c_void>();
            match m.overlay_base.is_null() {
                true => libc::mount(
                    c"overlay".as_ptr(),
                    target,
                    c"overlay".as_ptr(),
                    libc::MS_RDONLY,
                    data,
                ),
                // Relative layer names: the way of kernels without openat2 handles them.
                false => NO_OPENAT2,
            }
        } else if !m.overlay.is_null() {
            // fuse-overlayfs mounts at the path it was given: the mount point is made now.
            NO_OPENAT2
        } else {
            libc::mount(
                m.source,
                target,
                none,
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            )
        };
        libc::close(parent);
        if ret != 0 || !m.read_only {
            return ret;
        }
        // Read-only: the mount just made, found again by the same lookup.
        let fd = open_in_root(root, at(&path), libc::O_PATH);
        if fd == -1 {
            return -1;
        }
        let target = fd_path(fd, &mut buf);
        let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
        let ret = libc::mount(none, target, none, ro, std::ptr::null());
        libc::close(fd);
        ret
    }
}

/// A read-only overlay at `m.target`; with relative layer names, mounted from their
/// directory, and back in the working directory it was in after (on the host's root, the
/// program may start there). -1 on error (errno set).
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn mount_overlay_volume(m: &MountSpec) -> libc::c_int {
    let overlay = c"overlay".as_ptr();
    let data = m.overlay.cast::<libc::c_void>();
    // SAFETY: open(2), chdir(2), mount(2), fchdir(2), close(2) on prepared paths and the
    // descriptor opened here.
    unsafe {
        if m.overlay_base.is_null() {
            return libc::mount(overlay, m.target, overlay, libc::MS_RDONLY, data);
        }
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let here = libc::open(c".".as_ptr(), flags);
        if here == -1 {
            return -1;
        }
        let ret = match libc::chdir(m.overlay_base) {
            0 => libc::mount(overlay, m.target, overlay, libc::MS_RDONLY, data),
            e => e,
        };
        let back = libc::fchdir(here);
        libc::close(here);
        if ret == -1 || back == -1 {
            return -1;
        }
    }
    0
}

/// In the child: the read-only switch, then `pivot_root(".", ".")` into the new root and the
/// old one detached (runc's way, with no directory for the old root). -1 on error.
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
pub(super) unsafe fn enter_root(r: &RootSpec) -> libc::c_int {
    let none = std::ptr::null();
    // SAFETY: mount(2), chdir(2), pivot_root(2), umount2(2) on prepared paths.
    unsafe {
        if r.read_only {
            let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
            if libc::mount(none, r.merged, none, ro, std::ptr::null()) == -1 {
                return -1;
            }
        }
        let dot = c".".as_ptr();
        if libc::chdir(r.merged) == -1
            || libc::syscall(libc::SYS_pivot_root, dot, dot) == -1
            || libc::umount2(dot, libc::MNT_DETACH) == -1
            || libc::chdir(c"/".as_ptr()) == -1
        {
            return -1;
        }
    }
    0
}

/// In a rootless child, first thing in its new user namespace: it is root there, as our uid
/// and gid (setgroups denied first, as an unprivileged gid map requires). -1 on error.
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
pub(super) unsafe fn map_ids(r: &RootSpec) -> libc::c_int {
    // SAFETY: open(2), write(2), close(2) on /proc/self files with prepared strings.
    unsafe {
        for (file, text) in [
            (c"/proc/self/setgroups".as_ptr(), c"deny".as_ptr()),
            (c"/proc/self/uid_map".as_ptr(), r.uid_map),
            (c"/proc/self/gid_map".as_ptr(), r.gid_map),
        ] {
            let fd = libc::open(file, libc::O_WRONLY | libc::O_CLOEXEC);
            if fd == -1 {
                return -1;
            }
            let len = libc::strlen(text);
            let n = libc::write(fd, text.cast(), len);
            libc::close(fd);
            if n != len as isize {
                return -1;
            }
        }
    }
    0
}

/// What `build_root` returns when a rootless root's overlay could not be mounted.
pub(super) const OVERLAY_IN_USER_NAMESPACE_FAILED: libc::c_int = -2;

/// What `build_root` and `place_mount` return when fuse-overlayfs did not mount an image's
/// layers.
pub(super) const FUSE_OVERLAYFS_FAILED: libc::c_int = -3;

/// In a rootless child: fuse-overlayfs (`argv`) mounts an image's layers (its root, or an
/// image volume), and stays as the overlay's daemon (it exits once the mount is in place, leaving its daemon behind, in this
/// child's PID namespace: it ends with the container). 0 when it has, -1 otherwise.
///
/// # Safety
/// `argv` is a null-terminated array of C strings the suspended parent keeps alive.
unsafe fn mount_with_fuse(argv: *const *const libc::c_char) -> libc::c_int {
    // SAFETY: a copy of this process (clone without CLONE_VM: its own copy of the memory),
    // which only resets its signals and descriptors and execs; waitpid(2) for it.
    unsafe {
        let flags = libc::SIGCHLD as libc::c_ulong;
        let zero = 0 as libc::c_ulong;
        let pid = libc::syscall(libc::SYS_clone, flags, zero, zero, zero, zero) as libc::pid_t;
        if pid == -1 {
            return -1;
        }
        if pid == 0 {
            // What podvisor's handlers and mask were must not reach fuse-overlayfs.
            for sig in 1..=64 {
                libc::signal(sig, libc::SIG_DFL);
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            // Nothing of the container's (its log, the report pipe) is held by the daemon;
            // what it prints goes nowhere (1.10 warns of an option at every mount).
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null == -1 {
                libc::_exit(127);
            }
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            let env: [*const libc::c_char; 1] = [std::ptr::null()];
            libc::execve(*argv, argv, env.as_ptr());
            libc::_exit(127);
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) == -1 {
            if *libc::__errno_location() != libc::EINTR {
                return -1;
            }
        }
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            return 0;
        }
        *libc::__errno_location() = libc::EIO;
        -1
    }
}

/// In a rootless child, in its new mount namespace: a tmpfs as the new root, the upper layers
/// on a second one, and the host's top level entry by entry (or an image's overlay and the
/// host's /proc, /sys and /dev in it); a fresh /tmp unless read-only or from an image.
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
pub(super) unsafe fn build_rootless_root(r: &RootSpec) -> libc::c_int {
    let none = std::ptr::null();
    let tmpfs = c"tmpfs".as_ptr();
    let overlay = c"overlay".as_ptr();
    let mode = c"mode=0755".as_ptr().cast();
    // SAFETY: mount(2), mkdir(2), symlink(2), open(2) and mount_setattr(2) on prepared paths.
    unsafe {
        if libc::mount(tmpfs, r.layer_dir, tmpfs, 0, mode) == -1
            || libc::mount(tmpfs, r.upper_dir, tmpfs, 0, mode) == -1
        {
            return -1;
        }
        for i in 0..r.step_count {
            let st = &*r.steps.add(i);
            let ok = match st.kind {
                0 => {
                    let flags = if st.flag { libc::MS_RDONLY } else { 0 };
                    let made = libc::mkdir(st.upper, 0o755) == 0
                        && libc::mkdir(st.work, 0o755) == 0
                        && libc::mkdir(st.target, 0o755) == 0;
                    if !made {
                        return -1;
                    }
                    if libc::mount(overlay, st.target, overlay, flags, st.source.cast()) == 0 {
                        continue;
                    }
                    // A mount made below the directory since the run read the host's is
                    // locked in this user namespace's copy, and the kernel refuses the
                    // directory as a layer (EINVAL): it is bound read-only, as a directory
                    // with mounts in it is from the start.
                    if *libc::__errno_location() != libc::EINVAL {
                        return OVERLAY_IN_USER_NAMESPACE_FAILED;
                    }
                    let bind = libc::MS_BIND | libc::MS_REC;
                    libc::mount(st.lower, st.target, none, bind, std::ptr::null()) == 0
                        && read_only_below(st.target) == 0
                }
                5 => {
                    let flags = if st.flag { libc::MS_RDONLY } else { 0 };
                    let made = libc::mkdir(st.upper, 0o755) == 0
                        && libc::mkdir(st.work, 0o755) == 0
                        && libc::mkdir(st.target, 0o755) == 0;
                    let fuse = !r.fuse_argv.is_null();
                    let kernel = made
                        && !(fuse && r.fuse_only)
                        && libc::mount(overlay, st.target, overlay, flags, st.source.cast()) == 0;
                    if made && !kernel {
                        if !fuse {
                            return OVERLAY_IN_USER_NAMESPACE_FAILED;
                        }
                        if mount_with_fuse(r.fuse_argv) == -1 {
                            return FUSE_OVERLAYFS_FAILED;
                        }
                    }
                    made
                }
                1 | 3 => {
                    // An image may have the directory already.
                    let made = if st.kind == 1 {
                        libc::mkdir(st.target, 0o755) == 0
                            || *libc::__errno_location() == libc::EEXIST
                    } else {
                        let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC;
                        let fd = libc::open(st.target, flags, 0o644);
                        fd != -1 && libc::close(fd) == 0
                    };
                    let bind = libc::MS_BIND | libc::MS_REC;
                    made && libc::mount(st.source, st.target, none, bind, std::ptr::null()) == 0
                        && (!st.flag || read_only_below(st.target) == 0)
                }
                2 => libc::symlink(st.source, st.target) == 0,
                _ => libc::mkdir(st.target, 0o755) == 0,
            };
            if !ok {
                return -1;
            }
        }
        // An image's own /tmp (no `tmp`) stays as it is.
        if !r.read_only && !r.tmp.is_null() {
            let flags = libc::MS_NOSUID | libc::MS_NODEV;
            let tmp_mode = c"mode=1777".as_ptr().cast();
            if libc::mkdir(r.tmp, 0o1777) == -1
                || libc::mount(tmpfs, r.tmp, tmpfs, flags, tmp_mode) == -1
            {
                return -1;
            }
        }
    }
    0
}

/// `target` and everything mounted below it read-only (mount_setattr(2), AT_RECURSIVE).
///
/// # Safety
/// `target` is a C string the suspended parent keeps alive.
pub(super) unsafe fn read_only_below(target: *const libc::c_char) -> libc::c_int {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let size = std::mem::size_of::<MountAttr>();
    let flags = libc::AT_RECURSIVE as libc::c_uint;
    let attr = &attr as *const MountAttr;
    // SAFETY: mount_setattr(2) with a live attr and path.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target,
            flags,
            attr,
            size,
        )
    };
    if r == -1 {
        -1
    } else {
        0
    }
}
