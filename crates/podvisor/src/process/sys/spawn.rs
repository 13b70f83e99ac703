//! Spawning: what the child does between clone and exec, prepared before the clone.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, OnceLock};

use super::{c_string, SigAction, SigSet};

/// What the child does between fork and exec.
#[derive(Debug, Clone)]
pub enum ChildSetup {
    /// tini: a new process group that takes the terminal's foreground, if there is a terminal.
    ProcessGroup,
    /// dumb-init: a new session that adopts stdin's terminal as its controlling terminal.
    Session,
    /// A container of `podvisor run`: a new session (so its whole process group can be
    /// signalled), stdin from /dev/null, stdout and stderr to the given descriptors, its own
    /// working directory and environment.
    Container(Box<ContainerIo>),
}

/// Descriptors and environment of a container's process.
#[derive(Debug, Clone)]
pub struct ContainerIo {
    pub stdout: RawFd,
    pub stderr: RawFd,
    pub working_dir: Option<std::path::PathBuf>,
    /// `working_dir` is podvisor's own directory, not the container's `workingDir`: where it
    /// does not exist (inside a private root) the process starts in `/`.
    pub working_dir_optional: bool,
    /// The whole environment, `NAME=value`.
    pub env: Vec<OsString>,
    /// Volumes: bind mounts in a private mount namespace of the process (root only).
    pub mounts: Vec<BindMount>,
    /// Join this mount namespace instead (an exec probe or hook in its container).
    pub join_mounts: Option<RawFd>,
    /// ... after joining this user namespace (a rootless container's).
    pub join_user: Option<RawFd>,
    /// `cgroup.procs` files (open for writing) of the cgroups to join before exec.
    pub cgroups: Vec<RawFd>,
    /// A root of its own: the host's files under a private writable layer (root only).
    /// `mounts` then land inside it, their mount points made there, never on the host.
    pub root: Option<PrivateRoot>,
}

/// A container's own root: an overlay of the host's `/` (read-only beneath) and an upper
/// layer on a tmpfs that lives as long as the container's mount namespace, so what the
/// container writes outside its volumes is gone when it ends, as with a runtime's
/// container layer. `/tmp` is a fresh tmpfs (empty at each start).
#[derive(Debug, Clone)]
pub struct PrivateRoot {
    /// An empty directory of the host: the layer's tmpfs is mounted on it inside the
    /// container's namespace only.
    pub layer_dir: std::path::PathBuf,
    /// The host's mounts beneath `/` to carry into the new root (with what is mounted below
    /// them), and whether each is read-only there.
    pub carry: Vec<(std::path::PathBuf, bool)>,
    /// `readOnlyRootFilesystem`: the layer is read-only too, and /tmp is not made.
    pub read_only: bool,
    /// Without root: the container gets a user namespace of its own in which it is root
    /// (its uid and gid mapped to ours), and its root is built from the host's top level one
    /// entry at a time (an overlay cannot have `/` beneath it there: its submounts are
    /// locked), as rootless runtimes do.
    pub rootless: Option<Rootless>,
}

/// What a rootless root is built from.
#[derive(Debug, Clone)]
pub struct Rootless {
    pub uid: u32,
    pub gid: u32,
    /// The host's top-level entries (`/etc`, `/usr`, …) and how each appears.
    pub entries: Vec<TopEntry>,
    /// An empty directory of the host for the overlays' upper layers (a second tmpfs).
    pub upper_dir: std::path::PathBuf,
}

/// One entry of the host's `/` in a rootless root.
#[derive(Debug, Clone)]
pub enum TopEntry {
    /// A directory with nothing mounted in it: an overlay, writes go to the layer.
    Overlay(std::path::PathBuf),
    /// A mount point or a directory with mounts below: bound with them, read-only unless live
    /// (/proc, /sys, /dev).
    Bind {
        path: std::path::PathBuf,
        read_only: bool,
    },
    Symlink {
        path: std::path::PathBuf,
        target: std::path::PathBuf,
    },
    /// A directory this user cannot read (`/lost+found`, `/root`): an empty one.
    Empty(std::path::PathBuf),
}

/// `source` bound at `target`, read-only or not.
#[derive(Debug, Clone)]
pub struct BindMount {
    pub source: std::path::PathBuf,
    pub target: std::path::PathBuf,
    pub read_only: bool,
}

/// A bind mount as the child reads it.
struct MountSpec {
    source: *const libc::c_char,
    target: *const libc::c_char,
    read_only: bool,
    /// Directories to make first (in order; one that exists is fine), then, with
    /// `make_file`, the target itself as an empty file: a mount point inside a private root.
    make_dirs: *const *const libc::c_char,
    make_dir_count: usize,
    make_file: bool,
    /// Recursive bind; read-only applies to everything below it too (a carried host mount).
    recursive_read_only: bool,
}

/// One step of building a rootless root, as the child reads it.
struct RootlessStep {
    /// 0: overlay (mkdir upper, work and target, mount with `source` as its options); 1:
    /// recursive bind of the directory `source` at `target` (read-only when `flag`); 2:
    /// symlink `source` at `target`; 3: as 1, for a file; 4: an empty directory.
    kind: u8,
    source: *const libc::c_char,
    target: *const libc::c_char,
    upper: *const libc::c_char,
    work: *const libc::c_char,
    flag: bool,
}

/// The private root as the child reads it.
struct RootSpec {
    layer_dir: *const libc::c_char,
    upper: *const libc::c_char,
    work: *const libc::c_char,
    merged: *const libc::c_char,
    overlay_options: *const libc::c_char,
    tmp: *const libc::c_char,
    read_only: bool,
    /// Rootless: the maps to write, the upper layers' tmpfs and the steps (null: as root).
    uid_map: *const libc::c_char,
    gid_map: *const libc::c_char,
    upper_dir: *const libc::c_char,
    steps: *const RootlessStep,
    step_count: usize,
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

/// What the parent prepares for a container's mounts, kept alive until the child has exec'd.
#[derive(Default)]
struct MountStrings {
    /// (source, target, read_only, dirs to make, make the target as a file, recursive ro)
    mounts: Vec<(CString, CString, bool, Vec<CString>, bool, bool)>,
    root: Option<[CString; 6]>,
    root_read_only: bool,
    /// Rootless: uid map, gid map, upper dir; and per step (kind, source, target, upper,
    /// work, flag).
    rootless: Option<[CString; 3]>,
    steps: Vec<(u8, CString, CString, CString, CString, bool)>,
}

impl MountStrings {
    fn new(io: &ContainerIo) -> io::Result<MountStrings> {
        let c = |p: &std::path::Path| c_string(p.as_os_str().as_bytes());
        let mut out = MountStrings::default();
        let Some(root) = &io.root else {
            for m in &io.mounts {
                out.mounts.push((
                    c(&m.source)?,
                    c(&m.target)?,
                    m.read_only,
                    Vec::new(),
                    false,
                    false,
                ));
            }
            return Ok(out);
        };
        // As root the overlay is mounted at `merged` inside the layer's tmpfs; rootless the
        // tmpfs itself is the new root.
        let merged = if root.rootless.is_some() {
            root.layer_dir.clone()
        } else {
            root.layer_dir.join("merged")
        };
        let inside = |p: &std::path::Path| merged.join(p.strip_prefix("/").unwrap_or(p));
        out.root = Some([
            c(&root.layer_dir)?,
            c(&root.layer_dir.join("upper"))?,
            c(&root.layer_dir.join("work"))?,
            c(&merged)?,
            c_string(
                format!(
                    "lowerdir=/,upperdir={},workdir={}",
                    root.layer_dir.join("upper").display(),
                    root.layer_dir.join("work").display()
                )
                .as_bytes(),
            )?,
            c(&merged.join("tmp"))?,
        ]);
        out.root_read_only = root.read_only;
        if let Some(r) = &root.rootless {
            out.rootless = Some([
                c_string(format!("0 {} 1", r.uid).as_bytes())?,
                c_string(format!("0 {} 1", r.gid).as_bytes())?,
                c(&r.upper_dir)?,
            ]);
            let empty = || c_string(b"");
            for (i, e) in r.entries.iter().enumerate() {
                out.steps.push(match e {
                    TopEntry::Overlay(path) => {
                        let upper = r.upper_dir.join(format!("{i}.u"));
                        let work = r.upper_dir.join(format!("{i}.w"));
                        let options = format!(
                            "userxattr,lowerdir={},upperdir={},workdir={}",
                            path.display(),
                            upper.display(),
                            work.display()
                        );
                        let options = c_string(options.as_bytes())?;
                        let (upper, work) = (c(&upper)?, c(&work)?);
                        (0, options, c(&inside(path))?, upper, work, root.read_only)
                    }
                    TopEntry::Bind { path, read_only } => {
                        let kind = if path.is_dir() { 1 } else { 3 };
                        (
                            kind,
                            c(path)?,
                            c(&inside(path))?,
                            empty()?,
                            empty()?,
                            *read_only,
                        )
                    }
                    TopEntry::Symlink { path, target } => {
                        (2, c(target)?, c(&inside(path))?, empty()?, empty()?, false)
                    }
                    TopEntry::Empty(path) => {
                        (4, empty()?, c(&inside(path))?, empty()?, empty()?, false)
                    }
                });
            }
        }
        // Rootless, the host's mounts come in with the top-level entries.
        let carry = root.carry.iter().filter(|_| root.rootless.is_none());
        for (path, read_only) in carry {
            out.mounts.push((
                c(path)?,
                c(&inside(path))?,
                false,
                Vec::new(),
                false,
                *read_only,
            ));
        }
        for m in &io.mounts {
            let target = inside(&m.target);
            // Each missing directory down to the mount point, made in the layer.
            let mut dirs = Vec::new();
            let mut p = m.target.parent();
            while let Some(d) = p.filter(|d| *d != std::path::Path::new("/")) {
                dirs.push(c(&inside(d))?);
                p = d.parent();
            }
            dirs.reverse();
            let is_file = !m.source.is_dir();
            if !is_file {
                dirs.push(c(&target)?);
            }
            out.mounts.push((
                c(&m.source)?,
                c(&target)?,
                m.read_only,
                dirs,
                is_file,
                false,
            ));
        }
        Ok(out)
    }
}

/// The state to give back to the child before exec.
#[derive(Debug, Clone)]
pub struct Inherited {
    pub mask: SigSet,
    pub actions: Vec<SigAction>,
}

/// Spawns `argv` (PATH lookup as execvp) and returns its pid. An exec failure comes back as
/// the `io::Error` of execvp, for the caller to map to 127 / 126 or a StartError.
///
/// The child is made with `clone(CLONE_VM | CLONE_VFORK)`, as glibc's posix_spawn does, but
/// without posix_spawn's reset of all 64 signal handlers (we install none): the caller is
/// suspended until the child has exec'd, nothing of its memory is copied, and an exec error is
/// simply read back. This is what keeps `init -- true` as fast as tini's fork.
///
/// The child is reaped by the caller's reaper (`reap_one`), never waited for here.
pub fn spawn(argv: &[OsString], setup: ChildSetup, inherited: &Inherited) -> io::Result<i32> {
    spawn_with_terminal(argv, setup, inherited).map(|(pid, _)| pid)
}

/// Low descriptors kept for a container process's stdin (/dev/null), stdout, stderr and mount
/// namespace. Its child shares our descriptor table at clone (`CLONE_FILES`) and, first thing,
/// takes a copy of only the descriptors up to these (`close_range(CLOSE_RANGE_UNSHARE)`), so
/// that neither the clone nor the exec copies or closes all of ours: with a thousand
/// containers, that is thousands of descriptors each time. Between spawns the kept ones hold
/// /dev/null.
#[derive(Debug, Clone, Copy)]
struct LowFds {
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    mounts: RawFd,
    user: RawFd,
}

static LOW_FDS: Mutex<Option<LowFds>> = Mutex::new(None);

/// Reserves the low descriptors container processes are started through (see `LowFds`); call
/// it early, while few descriptors are open. Without `close_range` (Linux < 5.9) nothing is
/// reserved and every spawn copies the whole table, as before.
pub fn reserve_low_fds() -> io::Result<()> {
    let mut slot = LOW_FDS.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_some() {
        return Ok(());
    }
    // SAFETY: an empty range closes nothing; it only tells whether the call exists.
    let probe = unsafe { libc::syscall(libc::SYS_close_range, u32::MAX, u32::MAX, 0) };
    if probe == -1 {
        return Ok(());
    }
    let open = || -> io::Result<RawFd> {
        let file = std::fs::File::open("/dev/null")?;
        Ok(std::os::fd::IntoRawFd::into_raw_fd(file))
    };
    *slot = Some(LowFds {
        stdin: open()?,
        stdout: open()?,
        stderr: open()?,
        mounts: open()?,
        user: open()?,
    });
    Ok(())
}

/// `dup3(from, to, O_CLOEXEC)`.
fn dup_onto(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup3 on descriptors we hold; `to` is one of our reserved ones.
    if unsafe { libc::dup3(from, to, libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// /dev/null, opened once (close-on-exec): the stdin of every container process.
fn dev_null() -> io::Result<RawFd> {
    static DEV_NULL: OnceLock<std::fs::File> = OnceLock::new();
    if let Some(f) = DEV_NULL.get() {
        return Ok(f.as_raw_fd());
    }
    let file = std::fs::File::open("/dev/null")?;
    Ok(DEV_NULL.get_or_init(|| file).as_raw_fd())
}

/// Points the kept descriptors back at /dev/null, so that they hold no pipe open.
fn reset_low_fds(low: &LowFds, used: &[RawFd]) {
    for &fd in used {
        let _ = dup_onto(low.stdin, fd);
    }
}

/// As `spawn`; with `ChildSetup::Session` it also says why the child could not take stdin's
/// terminal as its controlling terminal, if it could not (dumb-init reports it).
pub fn spawn_with_terminal(
    argv: &[OsString],
    setup: ChildSetup,
    inherited: &Inherited,
) -> io::Result<(i32, Option<io::Error>)> {
    let args: Vec<CString> = argv
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<_>>()?;
    if args.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    }
    let mut argv_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());

    // Everything the child needs is prepared here, before the clone: the child allocates
    // nothing.
    let mut env_strings: Vec<CString> = Vec::new();
    let mut env_ptrs: Vec<*const libc::c_char> = Vec::new();
    let mut cwd: Option<CString> = None;
    let mut cwd_optional = false;
    let mut stdin: RawFd = -1;
    let mut io_fds = None;
    let mut mount_strings = MountStrings::default();
    let mut join_mounts: RawFd = -1;
    let mut join_user: RawFd = -1;
    let mut cgroups: Vec<RawFd> = Vec::new();
    let mode = match &setup {
        ChildSetup::ProcessGroup => Mode::ProcessGroup,
        ChildSetup::Session => Mode::TerminalSession,
        ChildSetup::Container(io) => {
            env_strings = io
                .env
                .iter()
                .map(|e| c_string(e.as_bytes()))
                .collect::<io::Result<_>>()?;
            env_ptrs = env_strings.iter().map(|e| e.as_ptr()).collect();
            env_ptrs.push(std::ptr::null());
            cwd_optional = io.working_dir_optional;
            cwd = io
                .working_dir
                .as_ref()
                .map(|d| c_string(d.as_os_str().as_bytes()))
                .transpose()?;
            // Opened with O_CLOEXEC: only the dup2'd copy reaches the program.
            stdin = dev_null()?;
            io_fds = Some((io.stdout, io.stderr));
            mount_strings = MountStrings::new(io)?;
            join_mounts = io.join_mounts.unwrap_or(-1);
            join_user = io.join_user.unwrap_or(-1);
            cgroups = io.cgroups.clone();
            Mode::Container
        }
    };
    let dir_ptrs: Vec<Vec<*const libc::c_char>> = mount_strings
        .mounts
        .iter()
        .map(|m| m.3.iter().map(|d| d.as_ptr()).collect())
        .collect();
    let mounts: Vec<MountSpec> = mount_strings
        .mounts
        .iter()
        .zip(&dir_ptrs)
        .map(|((s, t, ro, _, file, rro), dirs)| MountSpec {
            source: s.as_ptr(),
            target: t.as_ptr(),
            read_only: *ro,
            make_dirs: dirs.as_ptr(),
            make_dir_count: dirs.len(),
            make_file: *file,
            recursive_read_only: *rro,
        })
        .collect();
    let steps: Vec<RootlessStep> = mount_strings
        .steps
        .iter()
        .map(|(kind, source, target, upper, work, flag)| RootlessStep {
            kind: *kind,
            source: source.as_ptr(),
            target: target.as_ptr(),
            upper: upper.as_ptr(),
            work: work.as_ptr(),
            flag: *flag,
        })
        .collect();
    let rootless = mount_strings.rootless.as_ref();
    let root_spec = mount_strings.root.as_ref().map(|r| RootSpec {
        layer_dir: r[0].as_ptr(),
        upper: r[1].as_ptr(),
        work: r[2].as_ptr(),
        merged: r[3].as_ptr(),
        overlay_options: r[4].as_ptr(),
        tmp: r[5].as_ptr(),
        read_only: mount_strings.root_read_only,
        uid_map: rootless.map_or(std::ptr::null(), |x| x[0].as_ptr()),
        gid_map: rootless.map_or(std::ptr::null(), |x| x[1].as_ptr()),
        upper_dir: rootless.map_or(std::ptr::null(), |x| x[2].as_ptr()),
        steps: steps.as_ptr(),
        step_count: steps.len(),
    });
    let new_user = rootless.is_some();
    let mut plan = ChildPlan {
        cgroups: cgroups.as_ptr(),
        cgroup_count: cgroups.len(),
        mounts: mounts.as_ptr(),
        mount_count: mounts.len(),
        join_user,
        root: root_spec
            .as_ref()
            .map_or(std::ptr::null(), |r| r as *const RootSpec),
        join_mounts,
        argv: argv_ptrs.as_ptr(),
        mode,
        // SAFETY: isatty only inspects the descriptor.
        on_terminal: mode == Mode::ProcessGroup && unsafe { libc::isatty(libc::STDIN_FILENO) == 1 },
        mask: inherited.mask.0,
        actions: inherited.actions.as_ptr(),
        action_count: inherited.actions.len(),
        envp: if env_ptrs.is_empty() {
            std::ptr::null()
        } else {
            env_ptrs.as_ptr()
        },
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        cwd_optional,
        stdin,
        stdout: io_fds.map_or(-1, |f| f.0),
        stderr: io_fds.map_or(-1, |f| f.1),
        unshare_above: 0,
        errno: 0,
        tty_errno: 0,
    };
    // Container processes go through the reserved low descriptors, when there are some.
    let low_guard = LOW_FDS.lock().unwrap_or_else(|e| e.into_inner());
    let low = if mode == Mode::Container {
        *low_guard
    } else {
        None
    };
    // Which kept descriptors hold something else than /dev/null until the child has exec'd.
    let mut used: Vec<RawFd> = Vec::new();
    if let Some(low) = low {
        let mut placed = || {
            used.push(low.stdout);
            dup_onto(plan.stdout, low.stdout)?;
            if plan.stderr != plan.stdout {
                used.push(low.stderr);
                dup_onto(plan.stderr, low.stderr)?;
            }
            if plan.join_mounts >= 0 {
                used.push(low.mounts);
                dup_onto(plan.join_mounts, low.mounts)?;
            }
            if plan.join_user >= 0 {
                used.push(low.user);
                dup_onto(plan.join_user, low.user)?;
            }
            Ok::<(), io::Error>(())
        };
        if let Err(e) = placed() {
            reset_low_fds(&low, &used);
            return Err(e);
        }
        plan.stdin = low.stdin;
        plan.stderr = if plan.stderr == plan.stdout {
            low.stdout
        } else {
            low.stderr
        };
        plan.stdout = low.stdout;
        if plan.join_mounts >= 0 {
            plan.join_mounts = low.mounts;
        }
        if plan.join_user >= 0 {
            plan.join_user = low.user;
        }
        let highest = low
            .stdin
            .max(low.stdout)
            .max(low.stderr)
            .max(low.mounts)
            .max(low.user);
        plan.unshare_above = highest + 1;
    }
    // The child's stack: execvp's PATH search and script fallback use a few KiB of it. Left
    // uninitialised (nothing reads it before the child writes it) and under malloc's mmap
    // threshold, so that only the pages the child touches are ever faulted in.
    let mut stack: Vec<u8> = Vec::with_capacity(64 * 1024);
    // SAFETY: the stack grows down from its 16-byte aligned top, inside the allocation.
    let top = unsafe { stack.as_mut_ptr().add(stack.capacity()) };
    let top = (top as usize & !15) as *mut libc::c_void;
    let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    // A rootless container is born in a user namespace of its own: a child that shares our
    // memory cannot unshare one (unshare(2) refuses CLONE_NEWUSER then).
    if new_user {
        flags |= libc::CLONE_NEWUSER;
    }
    if plan.unshare_above > 0 {
        flags |= libc::CLONE_FILES;
    }
    // SAFETY: with CLONE_VFORK this thread is suspended until the child execs or exits, so the
    // child has sole use of `plan` and everything it points to (`args`, `argv_ptrs`,
    // `env_strings`, `env_ptrs`, `cwd`, `stack`), which all outlive the call. The
    // child runs `child_main` only, which makes plain syscalls and execvp/execvpe (no
    // allocation, no lock) and never returns into our frames. Every signal is still blocked in
    // the child (our mask is inherited) and we install no handlers, so nothing can run on its
    // behalf while it shares our memory. With CLONE_FILES it shares our descriptor table too,
    // and its first step is to take its own copy (of the kept low descriptors only), before
    // it touches any descriptor.
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            flags,
            &mut plan as *mut ChildPlan as *mut libc::c_void,
        )
    };
    let clone_error = (pid == -1).then(io::Error::last_os_error);
    // The child has exec'd or exited: the kept descriptors let go of its pipes again.
    if let Some(low) = low {
        reset_low_fds(&low, &used);
    }
    drop(low_guard);
    if let Some(e) = clone_error {
        return Err(e);
    }
    if plan.errno != 0 {
        // The child has exited (127). Reap it here: nobody else knows its pid.
        let mut status = 0;
        // SAFETY: waiting for our own, already exited child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(plan.errno));
    }
    drop((
        stack,
        env_strings,
        cwd,
        mounts,
        root_spec,
        steps,
        dir_ptrs,
        mount_strings,
        cgroups,
    ));
    let terminal = (plan.tty_errno != 0).then(|| io::Error::from_raw_os_error(plan.tty_errno));
    Ok((pid, terminal))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    ProcessGroup,
    TerminalSession,
    Container,
}

/// What the vfork-style child needs, prepared by the parent before the clone.
struct ChildPlan {
    /// Open `cgroup.procs` files to write "0" into (join), first thing.
    cgroups: *const RawFd,
    cgroup_count: usize,
    mounts: *const MountSpec,
    mount_count: usize,
    /// A private root to build and pivot into (null: the host's).
    root: *const RootSpec,
    /// A mount namespace to join (-1: none).
    join_mounts: RawFd,
    /// A user namespace to join first (-1: none).
    join_user: RawFd,
    argv: *const *const libc::c_char,
    mode: Mode,
    on_terminal: bool,
    mask: libc::sigset_t,
    actions: *const SigAction,
    action_count: usize,
    /// The environment to exec with; null: inherit ours.
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// A `cwd` that may not exist: then `/`.
    cwd_optional: bool,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    /// When > 0, the child shares our descriptor table and first unshares it, keeping only
    /// the descriptors below this one.
    unshare_above: RawFd,
    /// Set by the child when a step fails: the errno of that step.
    errno: libc::c_int,
    /// Set by the child when it could not take the terminal (TerminalSession): not fatal.
    tty_errno: libc::c_int,
}

/// The child between clone and exec. It shares podvisor's memory, so it only reads `plan`,
/// writes `plan.errno` and `plan.tty_errno`, and leaves by exec or `_exit`.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildPlan` the suspended parent handed to clone.
    let plan = unsafe { &mut *(arg as *mut ChildPlan) };
    let fail = |plan: &mut ChildPlan| -> ! {
        // SAFETY: __errno_location is this thread's errno; _exit ends the child at once.
        unsafe {
            plan.errno = *libc::__errno_location();
            libc::_exit(127)
        }
    };
    // SAFETY: plain syscalls on our own process; pointers come from the parent's live data.
    unsafe {
        match plan.mode {
            Mode::TerminalSession => {
                // dumb-init: a new session, which adopts stdin's terminal if there is one that
                // is free; failing that is normal, as for dumb-init.
                if libc::setsid() == -1 {
                    fail(plan);
                }
                if libc::ioctl(libc::STDIN_FILENO, libc::TIOCSCTTY, 0) == -1 {
                    plan.tty_errno = *libc::__errno_location();
                }
            }
            Mode::ProcessGroup => {
                // tini: a new process group that takes the terminal's foreground, so that
                // Ctrl-C reaches the child. Legal from a background group: SIGTTOU is blocked.
                if libc::setpgid(0, 0) == -1 {
                    fail(plan);
                }
                if plan.on_terminal && libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp()) == -1 {
                    let errno = *libc::__errno_location();
                    if errno != libc::ENOTTY && errno != libc::ENXIO {
                        fail(plan);
                    }
                }
            }
            Mode::Container => {
                // Into the instance's cgroups before anything else, while the descriptors
                // (above the kept low ones) are still ours: nothing the program allocates
                // or starts escapes its limits. "0" is the writer itself (cgroups(7)).
                for i in 0..plan.cgroup_count {
                    let fd = *plan.cgroups.add(i);
                    if libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                        fail(plan);
                    }
                }
                if plan.unshare_above > 0 {
                    let first = plan.unshare_above as libc::c_uint;
                    let unshare = libc::CLOSE_RANGE_UNSHARE;
                    if libc::syscall(libc::SYS_close_range, first, u32::MAX, unshare) == -1 {
                        fail(plan);
                    }
                }
                if libc::setsid() == -1 {
                    fail(plan);
                }
                // If podvisor itself is killed outright, the container's main process goes too
                // (its group is killed with it by podvisor only while podvisor lives).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                    fail(plan);
                }
                if plan.join_user >= 0 && libc::setns(plan.join_user, libc::CLONE_NEWUSER) == -1 {
                    fail(plan);
                }
                let rootless = !plan.root.is_null() && !(*plan.root).uid_map.is_null();
                if rootless && map_ids(&*plan.root) == -1 {
                    fail(plan);
                }
                if plan.join_mounts >= 0 {
                    if libc::setns(plan.join_mounts, libc::CLONE_NEWNS) == -1 {
                        fail(plan);
                    }
                } else if plan.mount_count > 0 || !plan.root.is_null() {
                    // Volumes: a mount namespace of its own, not propagating back to the host.
                    if libc::unshare(libc::CLONE_NEWNS) == -1 {
                        fail(plan);
                    }
                    let root = c"/".as_ptr();
                    let none = std::ptr::null();
                    let private = libc::MS_REC | libc::MS_PRIVATE;
                    if libc::mount(none, root, none, private, std::ptr::null()) == -1 {
                        fail(plan);
                    }
                    if !plan.root.is_null() && build_root(&*plan.root) == -1 {
                        fail(plan);
                    }
                    for i in 0..plan.mount_count {
                        if place_mount(&*plan.mounts.add(i)) == -1 {
                            fail(plan);
                        }
                    }
                    if !plan.root.is_null() && enter_root(&*plan.root) == -1 {
                        fail(plan);
                    }
                }
                for (from, to) in [(plan.stdin, 0), (plan.stdout, 1), (plan.stderr, 2)] {
                    if libc::dup2(from, to) == -1 {
                        fail(plan);
                    }
                }
                if !plan.cwd.is_null()
                    && libc::chdir(plan.cwd) == -1
                    && (!plan.cwd_optional || libc::chdir(c"/".as_ptr()) == -1)
                {
                    fail(plan);
                }
            }
        }
        for i in 0..plan.action_count {
            let saved = &*plan.actions.add(i);
            if libc::sigaction(saved.signal, &saved.action, std::ptr::null_mut()) == -1 {
                fail(plan);
            }
        }
        // Last, so that no signal is delivered before exec.
        let ret = libc::pthread_sigmask(libc::SIG_SETMASK, &plan.mask, std::ptr::null_mut());
        if ret != 0 {
            *libc::__errno_location() = ret;
            fail(plan);
        }
        if plan.envp.is_null() {
            libc::execvp(*plan.argv, plan.argv);
        } else {
            libc::execvpe(*plan.argv, plan.argv, plan.envp);
        }
        fail(plan)
    }
}

/// In the child, in its new mount namespace: the layer's tmpfs, its directories and the
/// overlay of `/` at `merged`, with a fresh /tmp unless the root is read-only. -1 on error
/// (errno set).
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn build_root(r: &RootSpec) -> libc::c_int {
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
        if !r.read_only {
            let flags = libc::MS_NOSUID | libc::MS_NODEV;
            let tmpfs = c"tmpfs".as_ptr();
            if libc::mount(tmpfs, r.tmp, tmpfs, flags, c"mode=1777".as_ptr().cast()) == -1 {
                return -1;
            }
        }
    }
    0
}

/// In the child: one bind mount, its mount point made first when it is inside a private
/// root. -1 on error (errno set).
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn place_mount(m: &MountSpec) -> libc::c_int {
    let none = std::ptr::null();
    // SAFETY: mkdir(2), open(2), mount(2), mount_setattr(2) on the parent's prepared paths.
    unsafe {
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
        let bind = libc::MS_BIND | libc::MS_REC;
        if libc::mount(m.source, m.target, none, bind, std::ptr::null()) == -1 {
            return -1;
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

/// In the child: the read-only switch, then `pivot_root(".", ".")` into the new root and the
/// old one detached (runc's way, with no directory for the old root). -1 on error.
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn enter_root(r: &RootSpec) -> libc::c_int {
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
unsafe fn map_ids(r: &RootSpec) -> libc::c_int {
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

/// In a rootless child, in its new mount namespace: a tmpfs as the new root, the upper layers
/// on a second one, and the host's top level entry by entry; a fresh /tmp unless read-only.
///
/// # Safety
/// Plain syscalls on C strings that the suspended parent keeps alive.
unsafe fn build_rootless_root(r: &RootSpec) -> libc::c_int {
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
                    libc::mkdir(st.upper, 0o755) == 0
                        && libc::mkdir(st.work, 0o755) == 0
                        && libc::mkdir(st.target, 0o755) == 0
                        && libc::mount(overlay, st.target, overlay, flags, st.source.cast()) == 0
                }
                1 | 3 => {
                    let made = if st.kind == 1 {
                        libc::mkdir(st.target, 0o755) == 0
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
        if !r.read_only {
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
unsafe fn read_only_below(target: *const libc::c_char) -> libc::c_int {
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
