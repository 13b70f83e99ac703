//! Spawning: everything the child needs, prepared before the clone (its side is `child.rs`,
//! a container's root and mounts `rootfs.rs`), the kept low descriptors, and the clone.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, OnceLock};

use super::child::{ChildPlan, Mode};
use super::clone::{
    clone_child, clone_into_cgroup, clone_via, may_clone_into_cgroup, read_report, report_pipe,
    unified_cgroup_dir,
};
use super::creds::{Credentials, PreparedCreds};
use super::newroot::{DevSpec, MountSpec, NodeSpec, RootSpec, RootlessStep};
use super::rootfs::{BindMount, MountStrings, PrivateRoot};
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
    /// A terminal of its own, of (rows, columns) (0: left as the kernel makes it), as CRI
    /// exec with `tty` gives one: `stdin` is then a socket (runc's console socket) to which
    /// the child sends the terminal's master, opened in the container's `/dev`; the terminal
    /// is its stdin, stdout, stderr and controlling terminal, and `stdout` and `stderr` are
    /// not used.
    pub terminal: Option<(u16, u16)>,
    /// Its stdin (`None`: /dev/null, as a container's without `stdin: true`).
    pub stdin: Option<RawFd>,
    pub stdout: RawFd,
    pub stderr: RawFd,
    pub working_dir: Option<std::path::PathBuf>,
    /// `working_dir` is podvisor's own directory, not the container's `workingDir`: where it
    /// does not exist (inside a private root) the process starts in `/`.
    pub working_dir_optional: bool,
    /// The whole environment, `NAME=value`.
    pub env: Environment,
    /// Volumes: bind mounts in a private mount namespace of the process (root only).
    pub mounts: Vec<BindMount>,
    /// Join this mount namespace instead (an exec probe or hook in its container).
    pub join_mounts: Option<RawFd>,
    /// ... after joining this user namespace (a rootless container's).
    pub join_user: Option<RawFd>,
    /// The files (open for writing) to join the cgroups through before exec: `tasks` on cgroup
    /// v1, `cgroup.procs` on v2.
    pub cgroups: Vec<RawFd>,
    /// A root of its own: the host's files under a private writable layer (root only).
    /// `mounts` then land inside it, their mount points made there, never on the host.
    pub root: Option<PrivateRoot>,
    /// Who it runs as and what it may do (`None`: as podvisor, with its capabilities).
    pub credentials: Option<Credentials>,
    /// Its UTS, IPC and PID namespaces.
    pub namespaces: Namespaces,
}

/// A process's whole environment as execve(2) takes it: `NAME=value` C strings, made once and
/// shared by every process started with it (a container's instance, its exec probes and
/// hooks), not copied and converted again at each start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment(Arc<[CString]>);

impl Environment {
    /// The variables `NAME=value`; an error names the first that holds a NUL byte, which
    /// execve cannot pass.
    pub fn new<S: AsRef<OsStr>>(vars: impl IntoIterator<Item = S>) -> io::Result<Environment> {
        let strings = vars.into_iter().map(|v| {
            let bytes = v.as_ref().as_bytes();
            CString::new(bytes).map_err(|_| {
                let name = bytes.split(|&b| b == b'=').next().unwrap_or_default();
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "set its environment: the variable {:?} holds a NUL byte",
                        String::from_utf8_lossy(name)
                    ),
                )
            })
        });
        Ok(Environment(strings.collect::<io::Result<_>>()?))
    }

    /// The variables, `NAME=value`.
    pub fn vars(&self) -> impl Iterator<Item = &OsStr> {
        self.0.iter().map(|v| OsStr::from_bytes(v.as_bytes()))
    }

    /// This environment with `name` set to `value`, last, in place of any value it had.
    pub fn with(&self, name: &str, value: &str) -> io::Result<Environment> {
        let set = format!("{name}={value}");
        let others = self.vars().filter(|v| {
            let v = v.as_bytes();
            !(v.starts_with(name.as_bytes()) && v.get(name.len()) == Some(&b'='))
        });
        Environment::new(others.chain([OsStr::new(&set)]))
    }
}

/// The namespaces a container's process enters, or gets of its own, besides its mount and
/// user namespaces.
#[derive(Debug, Clone, Default)]
pub struct Namespaces {
    /// The pod's UTS and IPC namespaces to enter.
    pub join_uts: Option<RawFd>,
    pub join_ipc: Option<RawFd>,
    /// A UTS namespace of its own with this hostname, and an IPC namespace of its own
    /// (rootless: made with its user namespace, which owns them).
    pub new_uts: Option<String>,
    pub new_ipc: bool,
    pub pid: PidSetup,
}

/// The PID namespace a process is born in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PidSetup {
    /// podvisor's.
    #[default]
    Inherit,
    /// One of its own, in which it is PID 1 (with a /proc of it in its private root).
    New,
    /// The one this descriptor holds (the pod's shared one, or a container's for its exec
    /// probes and hooks), with a /proc of it in a private root.
    Join(RawFd),
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
    uts: RawFd,
    ipc: RawFd,
    /// The child's report pipe (see `ChildPlan::report`).
    report: RawFd,
}

/// The reserved sets, each for one spawn at a time: taken for a spawn and put back after it.
/// The starters, which make several children at once (`process::starters`), have a set each.
static LOW_FDS: Mutex<Vec<LowFds>> = Mutex::new(Vec::new());
/// How many sets are reserved, in use or not.
static LOW_FD_SETS: Mutex<usize> = Mutex::new(0);

/// Reserves the low descriptors container processes are started through (see `LowFds`), for
/// `sets` spawns at once (from as many threads); call it early, while few descriptors are open.
/// A spawn that finds every set in use copies the whole table, and without `close_range`
/// (Linux < 5.9) nothing is reserved and every spawn does so.
pub fn reserve_low_fd_sets(sets: usize) -> io::Result<()> {
    let mut reserved = LOW_FD_SETS.lock().unwrap_or_else(|e| e.into_inner());
    if *reserved >= sets {
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
    while *reserved < sets {
        let set = LowFds {
            stdin: open()?,
            stdout: open()?,
            stderr: open()?,
            mounts: open()?,
            user: open()?,
            uts: open()?,
            ipc: open()?,
            report: open()?,
        };
        LOW_FDS.lock().unwrap_or_else(|e| e.into_inner()).push(set);
        *reserved += 1;
    }
    Ok(())
}

/// A set of `LOW_FDS` taken for a spawn, put back when it is dropped.
struct LowSet(Option<LowFds>);

impl Drop for LowSet {
    fn drop(&mut self) {
        if let Some(set) = self.0.take() {
            LOW_FDS.lock().unwrap_or_else(|e| e.into_inner()).push(set);
        }
    }
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
fn reset_low_fds(used: &[RawFd]) {
    let Ok(null) = dev_null() else { return };
    for &fd in used {
        let _ = dup_onto(null, fd);
    }
}

/// What a container's child needs, as C strings and descriptors, made before the clone: the
/// child allocates nothing.
#[derive(Default)]
struct Prepared {
    /// Owns what `env_ptrs` points at.
    _env: Environment,
    env_ptrs: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    cwd_optional: bool,
    stdin: Option<RawFd>,
    io_fds: Option<(RawFd, RawFd)>,
    mount_strings: MountStrings,
    join_mounts: Option<RawFd>,
    join_user: Option<RawFd>,
    cgroups: Vec<RawFd>,
    creds: Option<PreparedCreds>,
    namespaces: Namespaces,
    hostname: Option<CString>,
    /// Rootless: the run's mapped user namespace, entered on the way (`via_user_namespace`).
    user_ns: Option<std::fs::File>,
    terminal: Option<(u16, u16)>,
}

impl Prepared {
    fn new(setup: &ChildSetup) -> io::Result<(Mode, Prepared)> {
        let io = match setup {
            ChildSetup::ProcessGroup => return Ok((Mode::ProcessGroup, Prepared::default())),
            ChildSetup::Session => return Ok((Mode::TerminalSession, Prepared::default())),
            ChildSetup::Container(io) => io,
        };
        let mut env_ptrs = Vec::with_capacity(io.env.0.len() + 1);
        env_ptrs.extend(io.env.0.iter().map(|e| e.as_ptr()));
        env_ptrs.push(std::ptr::null());
        let prepared = Prepared {
            _env: io.env.clone(),
            env_ptrs,
            cwd: io
                .working_dir
                .as_ref()
                .map(|d| c_string(d.as_os_str().as_bytes()))
                .transpose()?,
            cwd_optional: io.working_dir_optional,
            // Opened with O_CLOEXEC: only the dup2'd copy reaches the program.
            stdin: Some(match io.stdin {
                Some(fd) => fd,
                None => dev_null()?,
            }),
            io_fds: Some((io.stdout, io.stderr)),
            mount_strings: MountStrings::new(
                &io.mounts,
                io.root.as_ref(),
                io.namespaces.pid != PidSetup::Inherit,
            )?,
            join_mounts: io.join_mounts,
            join_user: io.join_user,
            cgroups: io.cgroups.clone(),
            creds: io
                .credentials
                .as_ref()
                .map(PreparedCreds::new)
                .transpose()?,
            namespaces: io.namespaces.clone(),
            hostname: io
                .namespaces
                .new_uts
                .as_ref()
                .map(|h| c_string(h.as_bytes()))
                .transpose()?,
            terminal: io.terminal,
            user_ns: match io.root.as_ref().and_then(|r| r.rootless.as_ref()) {
                Some(super::rootfs::Rootless {
                    user_namespace: Some(path),
                    ..
                }) => Some(std::fs::File::open(path).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("open the run's user namespace ({}): {e}", path.display()),
                    )
                })?),
                _ => None,
            },
        };
        Ok((Mode::Container, prepared))
    }
}

/// The mounts and private-root steps of `MountStrings` as the child reads them: pointers
/// into the strings, which must outlive this.
struct MountPtrs {
    /// Owns what each mount's `make_dirs` and `fuse_argv` point at.
    _dir_ptrs: Vec<Vec<*const libc::c_char>>,
    _fuse_ptrs: Vec<Vec<*const libc::c_char>>,
    mounts: Vec<MountSpec>,
    steps: Vec<RootlessStep>,
    /// fuse-overlayfs's argv, null-terminated (empty: none).
    fuse_argv: Vec<*const libc::c_char>,
    /// A /dev of its own: its directories, nodes and links.
    dev_dirs: Vec<*const libc::c_char>,
    dev_nodes: Vec<NodeSpec>,
    dev_links: Vec<(*const libc::c_char, *const libc::c_char)>,
    masked: Vec<*const libc::c_char>,
    read_only: Vec<*const libc::c_char>,
}

/// Pointers to `args`, null-terminated as execve(2) takes them; none for no arguments.
fn argv_ptrs(args: &[std::ffi::CString]) -> Vec<*const libc::c_char> {
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    if !ptrs.is_empty() {
        ptrs.push(std::ptr::null());
    }
    ptrs
}

impl MountPtrs {
    fn new(strings: &MountStrings) -> MountPtrs {
        let dir_ptrs: Vec<Vec<*const libc::c_char>> = strings
            .mounts
            .iter()
            .map(|m| m.dirs.iter().map(|d| d.as_ptr()).collect())
            .collect();
        let fuse_ptrs: Vec<Vec<*const libc::c_char>> = (strings.mounts.iter())
            .map(|m| argv_ptrs(&m.fuse_argv))
            .collect();
        let mounts = strings
            .mounts
            .iter()
            .zip(&dir_ptrs)
            .zip(&fuse_ptrs)
            .map(|((m, dirs), fuse)| MountSpec {
                source: m.source.as_ptr(),
                target: m.target.as_ptr(),
                read_only: m.read_only,
                make_dirs: dirs.as_ptr(),
                make_dir_count: dirs.len(),
                make_file: m.file,
                recursive_read_only: m.recursive_read_only,
                carried: m.carried,
                overlay: m.overlay.as_ref().map_or(std::ptr::null(), |o| o.as_ptr()),
                overlay_base: (m.overlay_base.as_ref()).map_or(std::ptr::null(), |b| b.as_ptr()),
                fuse_argv: match fuse.is_empty() {
                    true => std::ptr::null(),
                    false => fuse.as_ptr(),
                },
                fuse_only: strings.fuse_only,
                propagation: m.propagation,
                root: (m.in_root.as_ref()).map_or(std::ptr::null(), |(r, _)| r.as_ptr()),
                in_root: (m.in_root.as_ref()).map_or(std::ptr::null(), |(_, t)| t.as_ptr()),
            })
            .collect();
        let steps = strings
            .steps
            .iter()
            .map(|st| RootlessStep {
                kind: st.kind,
                source: st.source.as_ptr(),
                target: st.target.as_ptr(),
                upper: st.upper.as_ptr(),
                work: st.work.as_ptr(),
                lower: st.lower.as_ptr(),
                flag: st.flag,
            })
            .collect();
        let fuse_argv = argv_ptrs(&strings.fuse_argv);
        let dev = strings.dev.as_ref();
        MountPtrs {
            _dir_ptrs: dir_ptrs,
            _fuse_ptrs: fuse_ptrs,
            mounts,
            steps,
            fuse_argv,
            dev_dirs: dev.map_or_else(Vec::new, |d| d.dirs.iter().map(|p| p.as_ptr()).collect()),
            dev_nodes: dev.map_or_else(Vec::new, |d| {
                (d.nodes.iter())
                    .map(|n| NodeSpec {
                        path: n.path.as_ptr(),
                        mode: n.mode,
                        major: n.major,
                        minor: n.minor,
                        uid: n.uid,
                        gid: n.gid,
                    })
                    .collect()
            }),
            dev_links: dev.map_or_else(Vec::new, |d| {
                d.links
                    .iter()
                    .map(|(t, p)| (t.as_ptr(), p.as_ptr()))
                    .collect()
            }),
            masked: dev.map_or_else(Vec::new, |d| d.masked.iter().map(|p| p.as_ptr()).collect()),
            read_only: dev.map_or_else(Vec::new, |d| {
                d.read_only.iter().map(|p| p.as_ptr()).collect()
            }),
        }
    }

    /// A /dev of its own, if it has one.
    fn dev(&self, strings: &MountStrings) -> Option<DevSpec> {
        strings.dev.as_ref().map(|d| DevSpec {
            dir: d.dir.as_ptr(),
            dirs: self.dev_dirs.as_ptr(),
            dir_count: self.dev_dirs.len(),
            nodes: self.dev_nodes.as_ptr(),
            node_count: self.dev_nodes.len(),
            links: self.dev_links.as_ptr(),
            link_count: self.dev_links.len(),
            pts: d.pts.as_ptr(),
            shm: d.shm.as_ptr(),
            mqueue: d.mqueue.as_ptr(),
            null: d.null.as_ptr(),
            masked: self.masked.as_ptr(),
            masked_count: self.masked.len(),
            read_only: self.read_only.as_ptr(),
            read_only_count: self.read_only.len(),
        })
    }

    /// The private root, if there is one.
    fn root(&self, strings: &MountStrings) -> Option<RootSpec> {
        let rootless = strings.rootless.as_ref();
        strings.root.as_ref().map(|r| RootSpec {
            layer_dir: r[0].as_ptr(),
            upper: r[1].as_ptr(),
            work: r[2].as_ptr(),
            merged: r[3].as_ptr(),
            overlay_options: r[4].as_ptr(),
            lower_base: (strings.root_lower_base.as_ref()).map_or(std::ptr::null(), |b| b.as_ptr()),
            // An image's own /tmp (fresh with the layer at each start) stays as it is.
            tmp: match strings.root_from_image {
                true => std::ptr::null(),
                false => r[5].as_ptr(),
            },
            read_only: strings.root_read_only,
            uid_map: rootless.map_or(std::ptr::null(), |x| x[0].as_ptr()),
            gid_map: rootless.map_or(std::ptr::null(), |x| x[1].as_ptr()),
            upper_dir: rootless.map_or(std::ptr::null(), |x| x[2].as_ptr()),
            mapped: strings.mapped,
            steps: self.steps.as_ptr(),
            step_count: self.steps.len(),
            fuse_argv: match self.fuse_argv.is_empty() {
                true => std::ptr::null(),
                false => self.fuse_argv.as_ptr(),
            },
            fuse_only: strings.fuse_only,
        })
    }
}

/// Moves the child's descriptors onto the reserved low ones and points the plan at them;
/// `used` says which hold something until the child has exec'd.
fn place_on_low_fds(plan: &mut ChildPlan, low: &LowFds, used: &mut Vec<RawFd>) -> io::Result<()> {
    let mut placed = || {
        // Between spawns the kept stdin holds /dev/null already: only another one is moved.
        if dev_null().ok() != Some(plan.stdin) {
            used.push(low.stdin);
            dup_onto(plan.stdin, low.stdin)?;
        }
        used.push(low.stdout);
        dup_onto(plan.stdout, low.stdout)?;
        if plan.stderr != plan.stdout {
            used.push(low.stderr);
            dup_onto(plan.stderr, low.stderr)?;
        }
        let joins = [
            (plan.join_mounts, low.mounts),
            (plan.join_user, low.user),
            (plan.join_uts, low.uts),
            (plan.join_ipc, low.ipc),
        ];
        for (fd, onto) in joins.into_iter().filter(|(fd, _)| *fd >= 0) {
            used.push(onto);
            dup_onto(fd, onto)?;
        }
        Ok::<(), io::Error>(())
    };
    if let Err(e) = placed() {
        reset_low_fds(used);
        return Err(e);
    }
    plan.stdin = low.stdin;
    plan.stderr = if plan.stderr == plan.stdout {
        low.stdout
    } else {
        low.stderr
    };
    plan.stdout = low.stdout;
    for (fd, onto) in [
        (&mut plan.join_mounts, low.mounts),
        (&mut plan.join_user, low.user),
        (&mut plan.join_uts, low.uts),
        (&mut plan.join_ipc, low.ipc),
    ] {
        if *fd >= 0 {
            *fd = onto;
        }
    }
    let highest = [
        low.stdout, low.stderr, low.mounts, low.user, low.uts, low.ipc, low.report,
    ]
    .into_iter()
    .fold(low.stdin, RawFd::max);
    plan.unshare_above = highest + 1;
    Ok(())
}

/// Clones the child of `plan` with the namespaces `prep` asks for: those it gets of its
/// own at birth, or through a go-between in a user namespace not ours, or born in a PID
/// namespace that exists.
fn clone_in_namespaces(
    plan: &mut ChildPlan,
    prep: &Prepared,
    into_cgroup: Option<RawFd>,
) -> io::Result<i32> {
    let ns = &prep.namespaces;
    let mut new = 0;
    for (wanted, flag) in [
        (
            prep.mount_strings.rootless.is_some() && prep.user_ns.is_none(),
            libc::CLONE_NEWUSER,
        ),
        (ns.new_uts.is_some(), libc::CLONE_NEWUTS),
        (ns.new_ipc, libc::CLONE_NEWIPC),
        (ns.pid == PidSetup::New, libc::CLONE_NEWPID),
    ] {
        if wanted {
            new |= flag;
        }
    }
    // Born in a user namespace not ours: through a go-between that enters it, and there
    // makes its namespaces or enters its PID namespace.
    let via = match (&prep.user_ns, ns.pid) {
        (Some(mapped), _) => Some((mapped.as_raw_fd(), -1)),
        (None, PidSetup::Join(pid_ns)) if plan.join_user >= 0 => {
            let user_ns = std::mem::replace(&mut plan.join_user, -1);
            Some((user_ns, pid_ns))
        }
        _ => None,
    };
    // Born in a PID namespace that exists: this thread's children are, for the clone.
    let children_in = match ns.pid {
        PidSetup::Join(fd) if via.is_none() => {
            match super::namespaces::ChildrenIn::pid_namespace(fd) {
                Ok(c) => Some(c),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("join its PID namespace: {e}"),
                    ));
                }
            }
        }
        _ => None,
    };
    let pid = match (via, into_cgroup) {
        (Some((user_ns, join_pid)), _) => clone_via(plan, new, user_ns, join_pid),
        (None, Some(dir)) if new & libc::CLONE_NEWUSER == 0 => {
            clone_into_cgroup(plan, new, dir).or_else(|_| clone_child(plan, new))
        }
        (None, _) => clone_child(plan, new),
    };
    drop(children_in);
    pid
}

/// The child `pid` failed before its exec and has exited (127): reaps it and says why, for a
/// container with the step and the path it was about.
fn child_failure(pid: i32, plan: &ChildPlan, mode: Mode) -> io::Error {
    // Our own child, already exited; nobody else knows its pid.
    let _ = super::wait_for(pid);
    let os = io::Error::from_raw_os_error(plan.errno);
    if plan.failed_step.is_null() || mode != Mode::Container {
        return os;
    }
    // SAFETY: `failed_step` is a static C string the child pointed at.
    let step = unsafe { std::ffi::CStr::from_ptr(plan.failed_step) }.to_string_lossy();
    let path = if plan.failed_path.is_null() {
        String::new()
    } else {
        // SAFETY: one of the plan's C strings, alive until the caller returns.
        let p = unsafe { std::ffi::CStr::from_ptr(plan.failed_path) };
        format!(" {}", p.to_string_lossy())
    };
    io::Error::new(os.kind(), format!("{step}{path}: {os}"))
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
    // Everything the child needs is prepared here, before the clone, and lives until the end
    // of this function: the child allocates nothing.
    let (mode, prep) = Prepared::new(&setup)?;
    let ptrs = MountPtrs::new(&prep.mount_strings);
    let root_spec = ptrs.root(&prep.mount_strings);
    let dev_spec = ptrs.dev(&prep.mount_strings);
    let creds_spec = prep.creds.as_ref().map(PreparedCreds::spec);
    let mut plan = ChildPlan {
        creds: creds_spec
            .as_ref()
            .map_or(std::ptr::null(), |c| c as *const _),
        cgroups: prep.cgroups.as_ptr(),
        cgroup_count: prep.cgroups.len(),
        mounts: ptrs.mounts.as_ptr(),
        mount_count: ptrs.mounts.len(),
        slave_root: prep.mount_strings.slave_root,
        join_user: prep.join_user.unwrap_or(-1),
        root: root_spec
            .as_ref()
            .map_or(std::ptr::null(), |r| r as *const RootSpec),
        join_mounts: prep.join_mounts.unwrap_or(-1),
        join_uts: prep.namespaces.join_uts.unwrap_or(-1),
        join_ipc: prep.namespaces.join_ipc.unwrap_or(-1),
        hostname: prep
            .hostname
            .as_ref()
            .map_or(std::ptr::null(), |h| h.as_ptr()),
        proc_target: prep
            .mount_strings
            .proc
            .as_ref()
            .map_or(std::ptr::null(), |p| p.as_ptr()),
        dev: dev_spec
            .as_ref()
            .map_or(std::ptr::null(), |d| d as *const DevSpec),
        argv: argv_ptrs.as_ptr(),
        mode,
        // SAFETY: isatty only inspects the descriptor.
        on_terminal: mode == Mode::ProcessGroup && unsafe { libc::isatty(libc::STDIN_FILENO) == 1 },
        mask: inherited.mask.0,
        actions: inherited.actions.as_ptr(),
        action_count: inherited.actions.len(),
        envp: if prep.env_ptrs.is_empty() {
            std::ptr::null()
        } else {
            prep.env_ptrs.as_ptr()
        },
        cwd: prep.cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        cwd_optional: prep.cwd_optional,
        stdin: prep.stdin.unwrap_or(-1),
        stdout: prep.io_fds.map_or(-1, |f| f.0),
        stderr: prep.io_fds.map_or(-1, |f| f.1),
        terminal: prep.terminal.is_some(),
        terminal_size: prep.terminal.unwrap_or((0, 0)),
        unshare_above: 0,
        errno: 0,
        failed_step: std::ptr::null(),
        failed_path: std::ptr::null(),
        tty_errno: 0,
        report: -1,
    };
    // Container processes go through reserved low descriptors, when a set is free.
    let low_set = LowSet(match mode {
        Mode::Container => LOW_FDS.lock().unwrap_or_else(|e| e.into_inner()).pop(),
        _ => None,
    });
    let low = low_set.0;
    // Which kept descriptors hold something else than /dev/null until the child has exec'd.
    let mut used: Vec<RawFd> = Vec::new();
    if let Some(low) = &low {
        place_on_low_fds(&mut plan, low, &mut used)?;
    }
    // On cgroup v2, born in its cgroup: that needs a child of its own memory, which reports
    // through a pipe on a kept descriptor.
    let into = match (&low, prep.cgroups.as_slice()) {
        (Some(low), &[procs]) if may_clone_into_cgroup() => {
            unified_cgroup_dir(procs).and_then(|dir| {
                let (read, write) = report_pipe().ok()?;
                dup_onto(write.as_raw_fd(), low.report).ok()?;
                used.push(low.report);
                plan.report = low.report;
                Some((dir, read))
            })
        }
        _ => None,
    };
    let pid = clone_in_namespaces(&mut plan, &prep, into.as_ref().map(|(d, _)| d.as_raw_fd()));
    // The child has exec'd or exited: the kept descriptors let go of its pipes again.
    reset_low_fds(&used);
    drop(low_set);
    let pid = pid?;
    if let Some((_, read)) = into {
        read_report(&read, &mut plan);
    }
    if plan.errno != 0 {
        return Err(child_failure(pid, &plan, mode));
    }
    drop((creds_spec, root_spec, dev_spec, ptrs, prep));
    let terminal = (plan.tty_errno != 0).then(|| io::Error::from_raw_os_error(plan.tty_errno));
    Ok((pid, terminal))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_sets_a_variable_in_place_of_its_value() {
        let env = Environment::new(["TERM=dumb", "TERMINFO=/x", "A=1"]).unwrap();
        let with = env.with("TERM", "xterm").unwrap();
        let vars: Vec<&OsStr> = with.vars().collect();
        assert_eq!(vars, ["TERMINFO=/x", "A=1", "TERM=xterm"]);
        // The one it was made from is shared, not changed.
        assert_eq!(env.vars().count(), 3);
        let e = Environment::new(["A=1", "B=x\0y"]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            e.to_string()
                .contains("the variable \"B\" holds a NUL byte"),
            "{e}"
        );
    }
}
