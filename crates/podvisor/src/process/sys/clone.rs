//! The clone of a child that runs a `ChildPlan` (`child.rs`) until its exec: a vfork that
//! shares our memory, a go-between in a user namespace that is not ours, or, on cgroup v2, a
//! child born in its cgroup (clone3 `CLONE_INTO_CGROUP`) with a copy of our memory, which
//! reports a failed step through a pipe. Which one a start takes is `spawn.rs`'s choice.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

use super::c_string;
use super::child::{child_main, via_user_namespace, ChildPlan, Report, Via};

/// A stack for a clone: left uninitialised (nothing reads it before the child writes it) and
/// under malloc's mmap threshold, so that only the pages the child touches are ever faulted
/// in. Returns it with its 16-byte aligned top.
fn clone_stack(size: usize) -> (Vec<u8>, *mut libc::c_void) {
    let mut stack: Vec<u8> = Vec::with_capacity(size);
    // SAFETY: the stack grows down from its top, inside the allocation.
    let top = unsafe { stack.as_mut_ptr().add(stack.capacity()) };
    (stack, (top as usize & !15) as *mut libc::c_void)
}

/// Clones the child that runs `plan` (vfork semantics: back here once it has exec'd or
/// exited); `new` are the namespaces it gets of its own (`CLONE_NEW*`).
pub(super) fn clone_child(plan: &mut ChildPlan, new: libc::c_int) -> io::Result<i32> {
    // The child's stack: execvp's PATH search and script fallback use a few KiB of it.
    let (stack, top) = clone_stack(64 * 1024);
    // A rootless container is born in a user namespace of its own: a child that shares our
    // memory cannot unshare one (unshare(2) refuses CLONE_NEWUSER then). A PID namespace of
    // its own has to be there at birth too: unshare(2) would only move its children.
    let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | new;
    if plan.unshare_above > 0 {
        flags |= libc::CLONE_FILES;
    }
    // SAFETY: with CLONE_VFORK this thread is suspended until the child execs or exits, so the
    // child has sole use of `plan` and everything it points to (the caller's strings and
    // pointer arrays, and `stack`), which all outlive the call. The child runs `child_main`
    // only, which makes plain syscalls and execvp/execvpe (no allocation, no lock) and never
    // returns into our frames. Every signal is still blocked in the child (our mask is
    // inherited) and we install no handlers, so nothing can run on its behalf while it shares
    // our memory. With CLONE_FILES it shares our descriptor table too, and its first step is
    // to take its own copy (of the kept low descriptors only), before it touches any
    // descriptor.
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            flags,
            plan as *mut ChildPlan as *mut libc::c_void,
        )
    };
    drop(stack);
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// As `clone_child`, for a child to be born in user namespace `user_ns` that is not ours:
/// through the go-between `via_user_namespace`, which enters it, makes the namespaces `new`
/// there or enters PID namespace `join_pid` (-1: none), and clones the child as ours. The
/// go-between is reaped here.
pub(super) fn clone_via(
    plan: &mut ChildPlan,
    new: libc::c_int,
    user_ns: RawFd,
    join_pid: RawFd,
) -> io::Result<i32> {
    let (stack, top) = clone_stack(64 * 1024);
    let (via_stack, via_top) = clone_stack(16 * 1024);
    let files = match plan.unshare_above > 0 {
        true => libc::CLONE_FILES,
        false => 0,
    };
    let mut via = Via {
        plan: plan as *mut ChildPlan,
        user_ns,
        join_pid,
        unshare: new,
        flags: libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PARENT | libc::SIGCHLD | files,
        stack_top: top,
        pid: -1,
    };
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | files;
    // SAFETY: as in `clone_child`: with CLONE_VFORK this thread is suspended until the
    // go-between exits, which it does once the child it clones (with CLONE_VFORK too) has
    // exec'd or exited; both run on stacks of their own that outlive the call, read `via`
    // and `plan` only through the pointers given, make plain syscalls and never return into
    // our frames.
    let between = unsafe {
        libc::clone(
            via_user_namespace,
            via_top,
            flags,
            &mut via as *mut Via as *mut libc::c_void,
        )
    };
    if between == -1 {
        return Err(io::Error::last_os_error());
    }
    // Our own go-between, which has exited; nobody else knows its pid.
    let _ = super::wait_for(between);
    drop((stack, via_stack));
    if via.pid == -1 {
        let os = io::Error::from_raw_os_error(plan.errno);
        let step = match plan.failed_step.is_null() {
            true => "start its go-between".into(),
            // SAFETY: a static C string the go-between pointed at.
            false => unsafe { std::ffi::CStr::from_ptr(plan.failed_step) }.to_string_lossy(),
        };
        return Err(io::Error::new(os.kind(), format!("{step}: {os}")));
    }
    Ok(via.pid)
}

/// Whether `clone_into_cgroup` may be tried: cleared the first time the kernel (before 5.7)
/// or a seccomp filter (Docker's default profile) refuses clone3 or its flag.
static INTO_CGROUP: AtomicBool = AtomicBool::new(true);

/// Whether a child may be born in its cgroup (see `INTO_CGROUP`).
pub(super) fn may_clone_into_cgroup() -> bool {
    INTO_CGROUP.load(Ordering::Relaxed)
}

/// clone3's flag for a child born in the cgroup `CloneArgs::cgroup` (linux/sched.h).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` (linux/sched.h), of its size with `cgroup` (88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// The cgroup v2 directory of the open `cgroup.procs` file `procs`, opened (`O_PATH`) for
/// `clone_into_cgroup`; `None` on cgroup v1 or when it cannot be found.
pub(super) fn unified_cgroup_dir(procs: RawFd) -> Option<OwnedFd> {
    const CGROUP2_SUPER_MAGIC: libc::c_long = 0x6367_7270;
    // SAFETY: a statfs is plain data, valid zeroed.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs fills `fs` for a descriptor we hold.
    let statted = unsafe { libc::fstatfs(procs, &mut fs) } == 0;
    if !statted || fs.f_type as libc::c_long != CGROUP2_SUPER_MAGIC {
        return None;
    }
    let path = std::fs::read_link(format!("/proc/self/fd/{procs}")).ok()?;
    let dir = c_string(path.parent()?.as_os_str().as_bytes()).ok()?;
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: open of a NUL-terminated path; the descriptor is owned from here on.
    let fd = unsafe { libc::open(dir.as_ptr(), flags) };
    // SAFETY: `fd` was just opened and nothing else owns it.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A close-on-exec pipe for a child's report: (read end, write end).
pub(super) fn report_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 fills the two descriptors, owned from here on.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just made and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Reads what the child wrote to its report pipe (all writers gone: the child exec'd or
/// exited, our kept copy is reset) into `plan`.
pub(super) fn read_report(read: &OwnedFd, plan: &mut ChildPlan) {
    let size = std::mem::size_of::<Report>();
    let mut r = std::mem::MaybeUninit::<Report>::uninit();
    // SAFETY: reads at most `size` bytes into `r`, used only when all of them came.
    let n = unsafe { libc::read(read.as_raw_fd(), r.as_mut_ptr().cast(), size) };
    if n == size as isize {
        // SAFETY: fully written by the read above.
        let r = unsafe { r.assume_init() };
        plan.errno = r.errno;
        plan.failed_step = r.failed_step;
        plan.failed_path = r.failed_path;
    }
}

/// As `clone_child`, for a child born in the cgroup v2 directory `cgroup` (clone3's
/// `CLONE_INTO_CGROUP`): it never writes `cgroup.procs`, whose migration makes every start
/// wait for an RCU grace period (milliseconds) in the kernel. The child has a copy of our
/// memory (no `CLONE_VM`): it tells a failure through `plan.report`. An error here leaves the
/// start to `clone_child`.
pub(super) fn clone_into_cgroup(
    plan: &mut ChildPlan,
    new: libc::c_int,
    cgroup: RawFd,
) -> io::Result<i32> {
    let mut flags = (libc::CLONE_VFORK | new) as u32 as u64 | CLONE_INTO_CGROUP;
    if plan.unshare_above > 0 {
        flags |= libc::CLONE_FILES as u64;
    }
    let args = CloneArgs {
        flags,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM or a stack is a fork: the child runs on a copy of our
    // memory and stack, returning 0 here. With CLONE_VFORK this thread waits until the child
    // execs or exits. The child runs `child_main` only (plain syscalls, no allocation, no
    // lock: other threads' locks may be held in its copy) and never returns from it.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        // Born in its cgroup: nothing to join.
        plan.cgroup_count = 0;
        child_main(plan as *mut ChildPlan as *mut libc::c_void);
        // SAFETY: child_main never returns; should it, the child ends here.
        unsafe { libc::_exit(127) }
    }
    if pid == -1 {
        let e = io::Error::last_os_error();
        if matches!(
            e.raw_os_error(),
            Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EPERM)
        ) {
            INTO_CGROUP.store(false, Ordering::Relaxed);
        }
        return Err(e);
    }
    Ok(pid as i32)
}
