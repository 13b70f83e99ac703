//! The child between clone and exec, and what it reads: plans prepared by the parent before
//! the clone (no allocation, no lock after it), then plain syscalls only — sessions, cgroups,
//! namespaces, mounts, the new root, descriptors, signals — and exec.

use std::os::fd::RawFd;

use super::creds::{become_user, last_filters, CredsSpec};
use super::newroot::{
    build_dev, build_root, enter_root, map_ids, place_mount, DevSpec, MountSpec, RootSpec,
    FUSE_OVERLAYFS_FAILED, OVERLAY_IN_USER_NAMESPACE_FAILED,
};
use super::SigAction;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    ProcessGroup,
    TerminalSession,
    Container,
}

/// What the vfork-style child needs, prepared by the parent before the clone.
pub(super) struct ChildPlan {
    /// Open files to write "0" into (join), first thing: `tasks` on cgroup v1, `cgroup.procs`
    /// on v2.
    pub(super) cgroups: *const RawFd,
    pub(super) cgroup_count: usize,
    pub(super) mounts: *const MountSpec,
    pub(super) mount_count: usize,
    /// Its mounts start as slaves of the host's, not private (`MountStrings::slave_root`).
    pub(super) slave_root: bool,
    /// A private root to build and pivot into (null: the host's).
    pub(super) root: *const RootSpec,
    /// A mount namespace to join (-1: none).
    pub(super) join_mounts: RawFd,
    /// A user namespace to join first (-1: none).
    pub(super) join_user: RawFd,
    /// The pod's UTS and IPC namespaces to join (-1: none).
    pub(super) join_uts: RawFd,
    pub(super) join_ipc: RawFd,
    /// The hostname of a UTS namespace of its own (null: none).
    pub(super) hostname: *const libc::c_char,
    /// Where to mount a /proc of its own PID namespace (null: none).
    pub(super) proc_target: *const libc::c_char,
    /// A /dev of its own to make (null: none).
    pub(super) dev: *const DevSpec,
    /// Who the process becomes, and what it may do (null: as podvisor).
    pub(super) creds: *const CredsSpec,
    pub(super) argv: *const *const libc::c_char,
    pub(super) mode: Mode,
    pub(super) on_terminal: bool,
    pub(super) mask: libc::sigset_t,
    pub(super) actions: *const SigAction,
    pub(super) action_count: usize,
    /// The environment to exec with; null: inherit ours.
    pub(super) envp: *const *const libc::c_char,
    pub(super) cwd: *const libc::c_char,
    /// A `cwd` that may not exist: then `/`.
    pub(super) cwd_optional: bool,
    pub(super) stdin: RawFd,
    pub(super) stdout: RawFd,
    pub(super) stderr: RawFd,
    /// A terminal of its own (`ContainerIo::terminal`): `stdin` is the socket its master is
    /// sent to; (rows, columns), 0 for the kernel's.
    pub(super) terminal: bool,
    pub(super) terminal_size: (u16, u16),
    /// When > 0, the child shares our descriptor table and first unshares it, keeping only
    /// the descriptors below this one.
    pub(super) unshare_above: RawFd,
    /// Set by the child when a step fails: the errno of that step.
    pub(super) errno: libc::c_int,
    /// Set by the child with `errno`: the step that failed (a static string; null: exec) and
    /// the path it was about, if any (one of the plan's strings).
    pub(super) failed_step: *const libc::c_char,
    pub(super) failed_path: *const libc::c_char,
    /// Set by the child when it could not take the terminal (TerminalSession): not fatal.
    pub(super) tty_errno: libc::c_int,
    /// A child of its own memory (born in its cgroup, see `spawn::clone_into_cgroup`) cannot
    /// set the fields above in ours: it writes its `Report` to this pipe (-1: none) before it
    /// exits. The pipe is close-on-exec: empty at the exec's end means it exec'd.
    pub(super) report: RawFd,
}

/// What a failed child tells through `ChildPlan::report`: `errno`, `failed_step` and
/// `failed_path` as they are in its plan. The pointers are the parent's own: the child's
/// memory is a copy of the parent's, which stays as it was while the child lives (vfork).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct Report {
    pub(super) errno: libc::c_int,
    pub(super) failed_step: *const libc::c_char,
    pub(super) failed_path: *const libc::c_char,
}

/// Writes `plan`'s failure to its report pipe, if it has one.
///
/// # Safety
/// In the child, before its `_exit`.
unsafe fn report(plan: &ChildPlan) {
    if plan.report < 0 {
        return;
    }
    let r = Report {
        errno: plan.errno,
        failed_step: plan.failed_step,
        failed_path: plan.failed_path,
    };
    let size = std::mem::size_of::<Report>();
    // SAFETY: `r` is `size` bytes on our stack; a pipe write this small is atomic.
    unsafe { libc::write(plan.report, (&r as *const Report).cast(), size) };
}

/// A step of the child that failed: what it was, and the path it was about (null: none).
type Failed = (&'static std::ffi::CStr, *const libc::c_char);

/// The child between clone and exec. It shares podvisor's memory (or has a copy of it, with
/// `plan.report`), so it only reads `plan`, writes `plan.errno` and `plan.tty_errno` (and its
/// report), and leaves by exec or `_exit`.
pub(super) extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildPlan` the suspended parent handed to clone.
    let plan = unsafe { &mut *(arg as *mut ChildPlan) };
    // SAFETY: each step is plain syscalls on our own process, with pointers from the
    // parent's live data (`ChildPlan`).
    let set_up = unsafe {
        match plan.mode {
            Mode::TerminalSession => terminal_session(plan),
            Mode::ProcessGroup => process_group(plan),
            Mode::Container => container(plan),
        }
        .and_then(|()| signals(plan))
        .and_then(|()| match plan.creds.is_null() {
            true => Ok(()),
            false => last_filters(&*plan.creds),
        })
    };
    if let Err((step, path)) = set_up {
        // SAFETY: __errno_location is this thread's errno; _exit ends the child at once.
        unsafe {
            plan.errno = *libc::__errno_location();
            plan.failed_step = step.as_ptr();
            plan.failed_path = path;
            report(plan);
            libc::_exit(127)
        }
    }
    // SAFETY: execvp(e) with the parent's NUL-terminated arrays; _exit if it returns.
    unsafe {
        if plan.envp.is_null() {
            libc::execvp(*plan.argv, plan.argv);
        } else {
            libc::execvpe(*plan.argv, plan.argv, plan.envp);
        }
        // The exec itself: no step, the errno alone (tini and dumb-init map it to 126/127).
        plan.errno = *libc::__errno_location();
        report(plan);
        libc::_exit(127)
    }
}

/// What `via_user_namespace` needs: the child's plan, the user namespace to enter, the
/// namespaces to make there, and how to clone the child.
pub(super) struct Via {
    pub(super) plan: *mut ChildPlan,
    pub(super) user_ns: RawFd,
    /// A PID namespace owned by it to enter (-1: none), the container's for its exec.
    pub(super) join_pid: RawFd,
    /// `CLONE_NEW*` flags for unshare(2) once in the user namespace (which then owns them).
    pub(super) unshare: libc::c_int,
    /// The child's clone flags (`CLONE_PARENT` among them) and stack.
    pub(super) flags: libc::c_int,
    pub(super) stack_top: *mut libc::c_void,
    /// Set here: the child's pid (-1: not made; `plan.errno` and `failed_step` say why).
    pub(super) pid: libc::pid_t,
}

/// A go-between for a rootless container in the run's mapped user namespace, and for a
/// rootless exec in a container's PID namespace: a process of the run cannot enter another
/// user namespace (it has threads), nor make or enter a PID namespace there for its child (it
/// has no capability in its own). So this short-lived clone enters the user namespace, makes
/// the container's PID, UTS and IPC namespaces in it (or enters its PID namespace), and
/// clones the child as a sibling (`CLONE_PARENT`: the run's child, reaped by the run), which
/// runs `child_main` as any other. It shares the run's memory (`CLONE_VM`) and ends as soon
/// as the child has exec'd.
pub(super) extern "C" fn via_user_namespace(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Via` the suspended parent handed to clone; `plan` is its live
    // `ChildPlan`.
    let via = unsafe { &mut *(arg as *mut Via) };
    // SAFETY: setns(2), unshare(2) and clone(2) on our own process, with the parent's
    // descriptor, stack and plan; with CLONE_VFORK we are suspended until the child execs.
    let failed = unsafe {
        if libc::setns(via.user_ns, libc::CLONE_NEWUSER) == -1 {
            Some(c"enter its user namespace")
        } else if via.join_pid >= 0 && libc::setns(via.join_pid, libc::CLONE_NEWPID) == -1 {
            Some(c"enter its PID namespace")
        } else if via.unshare != 0 && libc::unshare(via.unshare) == -1 {
            Some(c"make its namespaces in its user namespace")
        } else {
            via.pid = libc::clone(child_main, via.stack_top, via.flags, via.plan.cast());
            (via.pid == -1).then_some(c"clone")
        }
    };
    if let Some(step) = failed {
        // SAFETY: this thread's errno, and the plan the parent reads once we are gone.
        unsafe {
            let plan = &mut *via.plan;
            plan.errno = *libc::__errno_location();
            plan.failed_step = step.as_ptr();
            plan.failed_path = std::ptr::null();
        }
    }
    // SAFETY: _exit ends this go-between at once.
    unsafe { libc::_exit(0) }
}

/// `Err` for a step whose syscall returned -1 (errno set).
fn check_step(ret: libc::c_int, step: &'static std::ffi::CStr) -> Result<(), Failed> {
    match ret {
        -1 => Err((step, std::ptr::null())),
        _ => Ok(()),
    }
}

/// dumb-init: a new session, which adopts stdin's terminal if there is one that is free;
/// failing that is normal, as for dumb-init.
///
/// # Safety
/// In the child, on the parent's `plan`.
unsafe fn terminal_session(plan: &mut ChildPlan) -> Result<(), Failed> {
    // SAFETY: setsid and ioctl on our own process.
    unsafe {
        check_step(libc::setsid(), c"setsid")?;
        if libc::ioctl(libc::STDIN_FILENO, libc::TIOCSCTTY, 0) == -1 {
            plan.tty_errno = *libc::__errno_location();
        }
    }
    Ok(())
}

/// tini: a new process group that takes the terminal's foreground, so that Ctrl-C reaches
/// the child. Legal from a background group: SIGTTOU is blocked.
///
/// # Safety
/// In the child, on the parent's `plan`.
unsafe fn process_group(plan: &ChildPlan) -> Result<(), Failed> {
    // SAFETY: setpgid, tcsetpgrp on our own process.
    unsafe {
        check_step(libc::setpgid(0, 0), c"setpgid")?;
        if plan.on_terminal && libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp()) == -1 {
            let errno = *libc::__errno_location();
            if errno != libc::ENOTTY && errno != libc::ENXIO {
                return Err((c"tcsetpgrp", std::ptr::null()));
            }
        }
    }
    Ok(())
}

/// A container instance: its cgroups, descriptors, session, namespaces and mounts, stdio
/// and working directory, in that order.
///
/// # Safety
/// In the child, on the parent's `plan`.
unsafe fn container(plan: &ChildPlan) -> Result<(), Failed> {
    // SAFETY: plain syscalls on our own process, with the parent's pointers.
    unsafe {
        // Into the instance's cgroups before anything else, while the descriptors (above
        // the kept low ones) are still ours: nothing the program allocates or starts
        // escapes its limits. "0" is the writer itself (cgroups(7)); on v1 the file is `tasks`,
        // which moves this one thread (all the child has) without the kernel's lock over all
        // thread groups (see `cgroup::pod::join_file`).
        for i in 0..plan.cgroup_count {
            let fd = *plan.cgroups.add(i);
            if libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                return Err((c"join its cgroup", std::ptr::null()));
            }
        }
        if plan.unshare_above > 0 {
            let first = plan.unshare_above as libc::c_uint;
            let unshare = libc::CLOSE_RANGE_UNSHARE;
            let ret = libc::syscall(libc::SYS_close_range, first, u32::MAX, unshare);
            check_step(ret as libc::c_int, c"close_range")?;
        }
        check_step(libc::setsid(), c"setsid")?;
        // The file mode mask a runtime gives when the spec names none (runc: 0022), not the
        // one of the shell podvisor was started from.
        libc::umask(0o022);
        // If podvisor itself is killed outright, the container's main process goes too
        // (its group is killed with it by podvisor only while podvisor lives).
        let pdeath = libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        check_step(pdeath, c"prctl")?;
        if plan.join_user >= 0 {
            let ret = libc::setns(plan.join_user, libc::CLONE_NEWUSER);
            check_step(ret, c"join its user namespace")?;
        }
        let rootless = !plan.root.is_null() && !(*plan.root).uid_map.is_null();
        if rootless && !(*plan.root).mapped {
            check_step(map_ids(&*plan.root), c"map its uid and gid")?;
        }
        uts_and_ipc(plan)?;
        mounts(plan)?;
        let stdio = match plan.terminal {
            true => [open_terminal(plan)?; 3],
            false => [plan.stdin, plan.stdout, plan.stderr],
        };
        for (from, to) in stdio.into_iter().zip(0..) {
            check_step(libc::dup2(from, to), c"dup2")?;
        }
        // Nothing but its stdio reaches the program, whatever else was open (a descriptor
        // someone let podvisor inherit without close-on-exec): runc does the same.
        // (But the report pipe, close-on-exec: it says how this child ends until the exec.)
        let ret = match plan.report {
            r if r > 3 => match libc::syscall(libc::SYS_close_range, 3u32, r as u32 - 1, 0u32) {
                0 => libc::syscall(libc::SYS_close_range, r as u32 + 1, u32::MAX, 0u32),
                e => e,
            },
            3 => libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32),
            _ => libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32),
        };
        check_step(ret as libc::c_int, c"close_range")?;
        if plan.terminal {
            // Its session (setsid above) gets the terminal as its controlling terminal.
            check_step(libc::ioctl(0, libc::TIOCSCTTY, 0), c"take its terminal")?;
        }
        if !plan.cwd.is_null()
            && libc::chdir(plan.cwd) == -1
            && (!plan.cwd_optional || libc::chdir(c"/".as_ptr()) == -1)
        {
            return Err((c"chdir to its working directory", plan.cwd));
        }
        // Last of all but its signals: its user, groups, capabilities and filters.
        if !plan.creds.is_null() {
            become_user(&*plan.creds)?;
        }
    }
    Ok(())
}

/// A terminal opened in the container's `/dev` (its mount namespace is entered), as runc
/// makes one for a process with `terminal: true`: its master, of the plan's size, is sent to
/// the console socket (`plan.stdin`) and closed here; its slave (close-on-exec) is returned,
/// to become stdin, stdout and stderr.
///
/// # Safety
/// In the child, on the parent's `plan`.
unsafe fn open_terminal(plan: &ChildPlan) -> Result<RawFd, Failed> {
    // SAFETY: open(2), ioctl(2), sendmsg(2), close(2) with values and structs on our stack.
    unsafe {
        let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
        let master = libc::open(c"/dev/ptmx".as_ptr(), flags);
        if master == -1 {
            return Err((c"open a terminal at", c"/dev/ptmx".as_ptr()));
        }
        let unlock: libc::c_int = 0;
        let ret = libc::ioctl(master, libc::TIOCSPTLCK, &unlock);
        check_step(ret, c"unlock its terminal")?;
        let (rows, cols) = plan.terminal_size;
        if rows > 0 && cols > 0 {
            let size = libc::winsize {
                ws_row: rows,
                ws_col: cols,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            check_step(
                libc::ioctl(master, libc::TIOCSWINSZ, &size),
                c"size its terminal",
            )?;
        }
        let slave = libc::ioctl(master, libc::TIOCGPTPEER, flags);
        check_step(slave, c"open its terminal")?;
        check_step(send_descriptor(plan.stdin, master), c"send its terminal")?;
        libc::close(master);
        Ok(slave)
    }
}

/// Sends descriptor `fd` over the socket `socket` (one byte, SCM_RIGHTS), with everything on
/// the stack. -1 on error (errno set).
///
/// # Safety
/// In the child: plain sendmsg(2).
unsafe fn send_descriptor(socket: RawFd, fd: RawFd) -> libc::c_int {
    // Room for one descriptor's control message (CMSG_SPACE of 4 bytes), 8-byte aligned.
    let mut control = [0u64; 4];
    let mut byte = [b'T'];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: a zeroed msghdr is valid; the CMSG macros stay inside `control`, whose length
    // is given.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        match libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) {
            -1 => -1,
            _ => 0,
        }
    }
}

/// The pod's UTS and IPC namespaces joined, or its own UTS namespace named.
///
/// # Safety
/// In the child, on the parent's `plan`.
unsafe fn uts_and_ipc(plan: &ChildPlan) -> Result<(), Failed> {
    // SAFETY: setns(2), sethostname(2) on our own process, with the parent's descriptors and
    // string.
    unsafe {
        if plan.join_uts >= 0 {
            let ret = libc::setns(plan.join_uts, libc::CLONE_NEWUTS);
            check_step(ret, c"join the pod's UTS namespace")?;
        }
        if plan.join_ipc >= 0 {
            let ret = libc::setns(plan.join_ipc, libc::CLONE_NEWIPC);
            check_step(ret, c"join the pod's IPC namespace")?;
        }
        if !plan.hostname.is_null() {
            let len = libc::strlen(plan.hostname);
            check_step(libc::sethostname(plan.hostname, len), c"set its hostname")?;
        }
    }
    Ok(())
}

/// The container's mount namespace: the one it joins (a probe's, a hook's), or one of its
/// own, not propagating back to the host, with its private root and volumes.
///
/// # Safety
/// In the child, on the parent's `plan`.
unsafe fn mounts(plan: &ChildPlan) -> Result<(), Failed> {
    // SAFETY: setns, unshare, mount on our own process, with the parent's strings.
    unsafe {
        if plan.join_mounts >= 0 {
            let ret = libc::setns(plan.join_mounts, libc::CLONE_NEWNS);
            return check_step(ret, c"join its mount namespace");
        }
        if plan.mount_count == 0 && plan.root.is_null() {
            return Ok(());
        }
        check_step(
            libc::unshare(libc::CLONE_NEWNS),
            c"make its mount namespace",
        )?;
        let none = std::ptr::null();
        let (propagation, what) = match plan.slave_root {
            true => (
                libc::MS_REC | libc::MS_SLAVE,
                c"make its mounts slaves of the host's",
            ),
            false => (libc::MS_REC | libc::MS_PRIVATE, c"make its mounts private"),
        };
        let ret = libc::mount(none, c"/".as_ptr(), none, propagation, std::ptr::null());
        check_step(ret, what)?;
        if !plan.root.is_null() {
            match build_root(&*plan.root) {
                // Rootless: the kernel may not let a user namespace mount an overlay.
                OVERLAY_IN_USER_NAMESPACE_FAILED => {
                    return Err((
                        c"mount an overlay in its user namespace (Linux 5.11 and later allow one, of up to 500 layers; an image's layers can be mounted by fuse-overlayfs instead, where it is installed and /dev/fuse is open to this user: --rootless-overlay auto or fuse-overlayfs; otherwise run as root)",
                        std::ptr::null(),
                    ))
                }
                FUSE_OVERLAYFS_FAILED => {
                    return Err((
                        c"mount its image's layers (fuse-overlayfs failed; run it by hand to see why):",
                        *(*plan.root).fuse_argv,
                    ))
                }
                ret => check_step(ret, c"build its root")?,
            }
        }
        if !plan.dev.is_null() {
            check_step(build_dev(&*plan.dev), c"make its /dev")?;
        }
        for i in 0..plan.mount_count {
            let m = &*plan.mounts.add(i);
            match place_mount(m) {
                -1 => return Err((c"mount a volume at", m.target)),
                FUSE_OVERLAYFS_FAILED => return Err((
                    c"mount a volume by fuse-overlayfs (it failed; run it by hand to see why) at",
                    m.target,
                )),
                _ => {}
            }
        }
        if !plan.proc_target.is_null() {
            // A /proc of its PID namespace over the host's, as a runtime mounts one.
            let proc_ = c"proc".as_ptr();
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            if libc::mount(proc_, plan.proc_target, proc_, flags, std::ptr::null()) == -1 {
                return Err((c"mount its /proc at", plan.proc_target));
            }
        }
        if !plan.dev.is_null() {
            mask_paths(&*plan.dev)?;
        }
        if !plan.root.is_null() {
            check_step(enter_root(&*plan.root), c"enter its root")?;
        }
    }
    Ok(())
}

/// The dispositions and the mask the program starts with: the mask last, so that no signal
/// is delivered before exec.
///
/// # Safety
/// In the child, on the parent's `plan`.
unsafe fn signals(plan: &ChildPlan) -> Result<(), Failed> {
    // SAFETY: sigaction and pthread_sigmask with the parent's initialised structs.
    unsafe {
        for i in 0..plan.action_count {
            let saved = &*plan.actions.add(i);
            let ret = libc::sigaction(saved.signal, &saved.action, std::ptr::null_mut());
            check_step(ret, c"sigaction")?;
        }
        let ret = libc::pthread_sigmask(libc::SIG_SETMASK, &plan.mask, std::ptr::null_mut());
        if ret != 0 {
            *libc::__errno_location() = ret;
            return Err((c"sigprocmask", std::ptr::null()));
        }
    }
    Ok(())
}

/// In the child, in its new root: the masked paths hidden and the read-only paths made so,
/// as runc does; a path this kernel does not have is passed over.
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn mask_paths(d: &DevSpec) -> Result<(), Failed> {
    let none: *const libc::c_char = std::ptr::null();
    let no_data: *const libc::c_void = std::ptr::null();
    // SAFETY: stat(2), mount(2) on the parent's paths.
    unsafe {
        for i in 0..d.masked_count {
            let path = *d.masked.add(i);
            let mut st: libc::stat = std::mem::zeroed();
            if libc::stat(path, &mut st) == -1 {
                continue;
            }
            let ret = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                let tmpfs = c"tmpfs".as_ptr();
                libc::mount(tmpfs, path, tmpfs, libc::MS_RDONLY, no_data)
            } else {
                libc::mount(d.null, path, none, libc::MS_BIND, no_data)
            };
            if ret == -1 {
                return Err((c"mask", path));
            }
        }
        for i in 0..d.read_only_count {
            let path = *d.read_only.add(i);
            if libc::access(path, libc::F_OK) == -1 {
                continue;
            }
            let bind = libc::MS_BIND | libc::MS_REC;
            let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
            if libc::mount(path, path, none, bind, no_data) == -1
                || libc::mount(none, path, none, ro, no_data) == -1
            {
                return Err((c"make read-only", path));
            }
        }
    }
    Ok(())
}
