//! The child's side of a container's own root (`child.rs` calls these in order): the
//! private layer and its overlay, its `/dev`, each bind mount, the pivot into it, and, rootless,
//! the uid and gid maps and the root built in a user namespace; and the plans of them it
//! reads, which the parent prepares. A mount point inside a root is looked up there by
//! `inroot`.

use super::inroot::{fd_path, InRoot, NO_OPENAT2};

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
    /// Propagation flags for mount(2) once it is mounted (0: left as made).
    pub(super) propagation: libc::c_ulong,
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

/// A device node of a container's own /dev as the child reads it.
#[derive(Clone, Copy)]
pub(super) struct NodeSpec {
    pub(super) path: *const libc::c_char,
    /// Type and permission bits.
    pub(super) mode: u32,
    pub(super) major: u32,
    pub(super) minor: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

/// A container's own /dev as the child reads it: pointers into `DevStrings`.
pub(super) struct DevSpec {
    pub(super) dir: *const libc::c_char,
    /// Directories below it to make first, parents first.
    pub(super) dirs: *const *const libc::c_char,
    pub(super) dir_count: usize,
    pub(super) nodes: *const NodeSpec,
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

/// In the child, in its new root: a /dev of its own, as runc makes one (for a privileged
/// container with the host's devices, each made as runc's `mknodDevice` makes it: its mode
/// whatever the umask, its owner). -1 on error (errno set).
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
pub(super) unsafe fn build_dev(d: &DevSpec) -> libc::c_int {
    let tmpfs = c"tmpfs".as_ptr();
    // SAFETY: mount(2), mknod(2), chmod(2), chown(2), symlink(2), mkdir(2) on the parent's
    // paths.
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
        for i in 0..d.dir_count {
            if libc::mkdir(*d.dirs.add(i), 0o755) == -1 {
                return -1;
            }
        }
        for i in 0..d.node_count {
            let n = *d.nodes.add(i);
            let dev = libc::makedev(n.major, n.minor);
            // The mode after mknod, whatever the umask.
            if libc::mknod(n.path, n.mode, dev) == -1
                || libc::chmod(n.path, n.mode & 0o7777) == -1
                || ((n.uid, n.gid) != (0, 0) && libc::chown(n.path, n.uid, n.gid) == -1)
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
    // `InRoot::make` and `mount_on` on the same.
    unsafe {
        if !m.root.is_null() {
            let mut found = InRoot::new();
            let ret = match found.make(m.root, m.in_root, m.make_file) {
                -1 => -1,
                NO_OPENAT2 => NO_OPENAT2,
                target => mount_on(m, &found, target),
            };
            found.close();
            if ret != NO_OPENAT2 {
                return ret;
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
        finish_bind(m, m.target)
    }
}

/// What follows the bind of `m` at `path` (its target, or a descriptor's path to the mount
/// just made): read-only, read-only below it too, its propagation. -1 on error (errno set).
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn finish_bind(m: &MountSpec, path: *const libc::c_char) -> libc::c_int {
    let none = std::ptr::null();
    // SAFETY: mount(2) and mount_setattr(2) on the given path.
    unsafe {
        if m.read_only {
            let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
            if libc::mount(none, path, none, ro, std::ptr::null()) == -1 {
                return -1;
            }
        }
        if m.recursive_read_only && read_only_below(path) == -1 {
            return -1;
        }
        if m.propagation != 0
            && libc::mount(none, path, none, m.propagation, std::ptr::null()) == -1
        {
            return -1;
        }
    }
    0
}

/// `place_mount` on the mount point `found` inside a root (`target`, open, closed here): the
/// mount lands on what the lookup found, by its descriptor. `NO_OPENAT2` for an overlay the
/// way of kernels without openat2 mounts (relative layer names, fuse-overlayfs, which mounts
/// at the path it was given: its mount point is made now). -1 on error (errno set).
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn mount_on(m: &MountSpec, found: &InRoot, target: libc::c_int) -> libc::c_int {
    // SAFETY: mount(2) and close(2) on the parent's strings and descriptors of `found`.
    unsafe {
        let mut buf = [0u8; 32];
        let path = fd_path(target, &mut buf);
        let none = std::ptr::null();
        let ret = if m.overlay.is_null() {
            let bind = libc::MS_BIND | libc::MS_REC;
            libc::mount(m.source, path, none, bind, std::ptr::null())
        } else if m.fuse_argv.is_null() && m.overlay_base.is_null() {
            let (overlay, data) = (c"overlay".as_ptr(), m.overlay.cast::<libc::c_void>());
            libc::mount(overlay, path, overlay, libc::MS_RDONLY, data)
        } else {
            NO_OPENAT2
        };
        libc::close(target);
        // An overlay is mounted read-only already, and is the container's own.
        let more = m.read_only || m.recursive_read_only || m.propagation != 0;
        if ret != 0 || !more || !m.overlay.is_null() {
            return ret;
        }
        // The mount just made, found again by the same lookup.
        let fd = found.reopen();
        if fd == -1 {
            return -1;
        }
        let ret = finish_bind(m, fd_path(fd, &mut buf));
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
