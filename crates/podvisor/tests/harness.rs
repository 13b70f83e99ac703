//! A small harness for running the built binaries: a tagged process that is killed with all
//! its descendants on drop, line-by-line output with deadlines, and a check that nothing with
//! the test's tag is left running.
//!
//! Every process a test starts carries `PODVISOR_TEST_TAG=<unique>` in its environment, which
//! its descendants inherit; that is how leftovers are found even after they were re-parented.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long any single wait in a test may take before the test fails. Generous: a loaded
/// 2-core machine must never fail a test because it was slow.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The binary under test: the one cargo built for these tests, or `PODVISOR_BIN` (CI points it
/// at the PID 1 build, so that what ships as PID 1 passes the same tests).
pub fn podvisor() -> PathBuf {
    match std::env::var_os("PODVISOR_BIN") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_BIN_EXE_podvisor")),
    }
}

/// The test helper program, built next to podvisor by `cargo test --workspace`.
pub fn testbin() -> PathBuf {
    workspace_binary("podvisor-testbin")
}

/// The probe tests' servers (gRPC health, HTTP/2 frames, HTTPS), built next to podvisor by
/// `cargo test --workspace`.
pub fn testservers() -> PathBuf {
    workspace_binary("podvisor-testservers")
}

/// A binary of another crate of the workspace, which `cargo test --workspace` builds next to
/// podvisor.
fn workspace_binary(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_podvisor")).with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo test --workspace` (or `cargo build -p {name}`)",
        path.display()
    );
    path
}

/// Whether `program` runs here; when not, the test says it is skipped, and why it needs it.
pub fn have(program: &str, needed_for: &str) -> bool {
    let found = Command::new(program).arg("--version").output().is_ok();
    if !found {
        skip(&format!("{program} not installed ({needed_for})"));
    }
    found
}

/// A directory with `tini` and `dumb-init` links to the podvisor binary: under the build's
/// own temporary directory (`target/tmp`), so that nothing is left in /tmp; each link is
/// replaced atomically (made aside, renamed), so that test runs side by side never see none.
pub fn persona_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("personas");
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["tini", "dumb-init"] {
            let aside = dir.join(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&aside);
            std::os::unix::fs::symlink(podvisor(), &aside).unwrap();
            std::fs::rename(&aside, dir.join(name)).unwrap();
        }
        dir
    })
    .clone()
}

/// Whether `unshare -p -f --mount-proc` works here; when it does not, the reason.
pub fn pid_namespace() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            match Command::new("unshare")
                .args(["-p", "-f", "--mount-proc", "true"])
                .stderr(Stdio::piped())
                .output()
            {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
                Err(e) => Err(format!("unshare: {e}")),
            }
        })
        .clone()
}

/// Says that a test, or a part of one, did not run and why: `skipped: WHY` in the output even
/// when the test passes (written to stderr past libtest's capture). With `PODVISOR_NO_SKIP`
/// set (CI sets it) a skip is a failure instead: there, everything must run.
pub fn skip(why: &str) {
    assert!(
        std::env::var_os("PODVISOR_NO_SKIP").is_none(),
        "skipped: {why} (PODVISOR_NO_SKIP is set: on CI every test must run)"
    );
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}

/// Skips the calling test, loudly, when there is no PID namespace to be had.
#[macro_export]
macro_rules! require_pid_namespace {
    () => {
        if let Err(why) = $crate::harness::pid_namespace() {
            $crate::harness::skip(&format!(
                "this test needs a PID namespace (unshare -p -f --mount-proc): {why}"
            ));
            return;
        }
    };
}

/// A unique tag per started process tree.
fn new_tag() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A builder that runs a program with the test tag, in its own process group.
pub struct Run {
    cmd: Command,
    tag: String,
    in_namespace: bool,
}

/// Where a `podvisor run` keeps its pod's state: what names its cgroups (their names end
/// with a hash of the state dir), so that a test can look for the ones it left.
#[derive(Debug, Default, Clone)]
struct StateDirs {
    /// `--state-dir DIR`.
    dirs: Vec<PathBuf>,
    /// `PODVISOR_STATE_BASE`: a state dir per pod under it (`BASE/NAMESPACE/POD`).
    base: Option<PathBuf>,
}

impl Run {
    /// `program args...` as a plain child of the test.
    pub fn new(program: impl AsRef<OsStr>) -> Run {
        let tag = new_tag();
        let mut cmd = Command::new(program);
        cmd.env("PODVISOR_TEST_TAG", &tag);
        Run {
            cmd,
            tag,
            in_namespace: false,
        }
    }

    /// `program args...` as PID 1 of a new PID namespace.
    pub fn pid1(program: impl AsRef<OsStr>) -> Run {
        let mut run = Run::new("unshare");
        run.cmd.args(["-p", "-f", "--mount-proc"]).arg(program);
        run.in_namespace = true;
        run
    }

    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Run {
        self.cmd.arg(a);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Runs it in `dir` (the examples' relative paths are from the repository's root).
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Run {
        self.cmd.current_dir(dir);
        self
    }

    pub fn env(mut self, k: &str, v: impl AsRef<OsStr>) -> Run {
        self.cmd.env(k, v);
        self
    }

    /// Starts it with stdin, stdout and stderr piped; stdout and stderr are read into lines.
    pub fn start(mut self) -> Proc {
        self.cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.cmd.process_group(0);
        let mut child = self.cmd.spawn().expect("spawn");
        let (tx, rx) = channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(Line::Out(line));
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx2.send(Line::Err(line));
            }
        });
        let stdin = child.stdin.take();
        let pod_state = ends_a_pod(&self.cmd);
        Proc {
            child,
            tag: self.tag,
            pod_state,
            ended: None,
            lines: rx,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdin,
            in_namespace: self.in_namespace,
        }
    }

    /// Runs to completion (within `PATIENCE`) and returns the result.
    pub fn output(self) -> Output {
        self.output_within(PATIENCE)
    }

    /// Runs to completion within `limit` (a build, which compiles) and returns the result.
    pub fn output_within(self, limit: Duration) -> Output {
        let mut p = self.start();
        let status = p.wait_within(limit);
        p.drain();
        let out = Output {
            status,
            stdout: p.stdout.join("\n"),
            stderr: p.stderr.join("\n"),
        };
        p.assert_no_leftovers();
        out
    }
}

#[derive(Debug)]
enum Line {
    Out(String),
    Err(String),
}

/// What a finished run printed and how it ended.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("no exit code: {self:?}"))
    }
}

/// A running process tree; on drop every process with its tag is killed.
pub struct Proc {
    child: Child,
    tag: String,
    /// For a `podvisor run` that ends its pod (not `--live-restore`): its state dirs.
    pod_state: Option<StateDirs>,
    /// How it ended, once a wait saw it.
    ended: Option<ExitStatus>,
    lines: Receiver<Line>,
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
    stdin: Option<ChildStdin>,
    in_namespace: bool,
}

impl Proc {
    /// The pid of the init under test: the child itself, or PID 1 of its namespace as seen
    /// from here.
    pub fn init_pid(&self) -> i32 {
        let pid = self.child.id() as i32;
        if !self.in_namespace {
            return pid;
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            if let Some(first) = children.split_whitespace().next() {
                return first.parse().unwrap();
            }
            assert!(Instant::now() < deadline, "unshare never forked its child");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends `signal` (a name for kill(1), e.g. "TERM") to the init under test.
    pub fn signal(&self, signal: &str) {
        send(self.init_pid(), signal);
    }

    /// Closes its stdin (end of input).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn write_stdin(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn take_line(&mut self, timeout: Duration) -> Option<String> {
        match self.lines.recv_timeout(timeout) {
            Ok(Line::Out(l)) => {
                self.stdout.push(l.clone());
                Some(l)
            }
            Ok(Line::Err(l)) => {
                self.stderr.push(l.clone());
                Some(l)
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits for a line on stdout or stderr that satisfies `pred`; returns it.
    pub fn expect_line(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        if let Some(l) = self
            .stdout
            .iter()
            .chain(self.stderr.iter())
            .find(|l| pred(l))
        {
            return l.clone();
        }
        while Instant::now() < deadline {
            if let Some(l) = self.take_line(Duration::from_millis(50)) {
                if pred(&l) {
                    return l;
                }
            }
        }
        panic!(
            "no line {what} within {PATIENCE:?}; stdout {:?} stderr {:?}",
            self.stdout, self.stderr
        );
    }

    /// Reads everything that is left of stdout and stderr (after the process exited).
    pub fn drain(&mut self) {
        while self.take_line(Duration::from_millis(200)).is_some() {}
    }

    /// Waits (within `PATIENCE`) for the process to exit.
    pub fn wait(&mut self) -> ExitStatus {
        self.wait_within(PATIENCE)
    }

    /// Waits within `limit` for the process to exit.
    pub fn wait_within(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.ended = Some(status);
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "process did not exit within {limit:?}; stdout {:?} stderr {:?}",
                self.stdout,
                self.stderr
            );
            // Collect output meanwhile, so that a chatty child never blocks on a full pipe.
            self.take_line(Duration::from_millis(10));
        }
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        match self.child.try_wait().unwrap() {
            Some(status) => {
                self.ended = Some(status);
                false
            }
            None => true,
        }
    }

    /// Fails the test if any process carrying this run's tag is still there (zombies too),
    /// after giving the kernel a moment to finish tearing down.
    pub fn assert_no_leftovers(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = tagged(&self.tag);
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                let described: Vec<String> = left.iter().map(|p| describe(*p)).collect();
                panic!("processes left behind: {described:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // A run that ended its pod leaves none of the pod's cgroups or mounts either. (One
        // killed by a signal leaves them to the next run on its state dir, which removes them
        // first.)
        self.running();
        let Some(state) = &self.pod_state else {
            return;
        };
        if self.ended.is_some_and(|s| s.signal().is_some()) {
            return;
        }
        loop {
            let left = leftover_cgroups(state);
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                // Removed here, so that a failing test leaves nothing either.
                for dir in &left {
                    remove_cgroup(dir);
                }
                panic!(
                    "cgroups left behind: {left:?} (the run's stderr: {:?})",
                    self.stderr
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mounts = leftover_mounts(state);
        if !mounts.is_empty() {
            for m in &mounts {
                let _ = Command::new("umount").arg("-l").arg(m).status();
            }
            panic!(
                "mounts left behind: {mounts:?} (the run's stderr: {:?})",
                self.stderr
            );
        }
    }
}

/// Whether a process holds the flock on `file`, asked with flock(1), so that tests need no
/// `unsafe`.
fn lock_is_held(file: &Path) -> bool {
    file.exists()
        && !Command::new("flock")
            .args(["-n", "-E", "75"])
            .arg(file)
            .arg("true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// Kills what is in cgroup `dir` and its children and removes them, deepest first.
fn remove_cgroup(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup(&e.path());
        }
    }
    for _ in 0..250 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace().filter_map(|p| p.parse().ok()) {
            send(pid, "KILL");
        }
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The state dirs of `cmd` when it is a `podvisor run` that ends its pod when it ends (not
/// `--live-restore`, whose keepers hold the pod's cgroups for the next run).
fn ends_a_pod(cmd: &Command) -> Option<StateDirs> {
    let args: Vec<&OsStr> = cmd.get_args().collect();
    let program = std::iter::once(cmd.get_program()).chain(args.iter().copied());
    let at = program.collect::<Vec<_>>().windows(2).position(|w| {
        Path::new(w[0]).file_name() == Some(OsStr::new("podvisor")) && w[1] == "run"
    })?;
    if args.iter().any(|a| *a == "--live-restore") {
        return None;
    }
    let mut state = StateDirs::default();
    for pair in args[at..].windows(2) {
        if pair[0] == "--state-dir" {
            state.dirs.push(PathBuf::from(pair[1]));
        }
    }
    state.base = cmd
        .get_envs()
        .find(|(k, _)| *k == "PODVISOR_STATE_BASE")
        .and_then(|(_, v)| v.map(PathBuf::from));
    (!state.dirs.is_empty() || state.base.is_some()).then_some(state)
}

/// The cgroups (pod and container cgroups, systemd scopes) of pods kept in `state`'s dirs:
/// their names end with the hash of the state dir (`podvisor::cgroup::pod_cgroup_name`).
fn leftover_cgroups(state: &StateDirs) -> Vec<PathBuf> {
    let dirs = ended_state_dirs(state);
    let suffixes: Vec<String> = dirs
        .iter()
        .map(|d| {
            let name = podvisor::cgroup::pod_cgroup_name("ns", "pod", d);
            name.rsplit('-').next().unwrap_or_default().to_string()
        })
        .collect();
    let mut found = Vec::new();
    let mut todo = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = todo.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let name = name.strip_suffix(".scope").unwrap_or(&name);
            if name.starts_with("podvisor-")
                && suffixes.iter().any(|h| name.ends_with(&format!("-{h}")))
            {
                found.push(e.path());
            } else if depth < 6 {
                todo.push((e.path(), depth + 1));
            }
        }
    }
    found
}

/// Mounts this test's mount namespace (the host's) has below `state`'s dirs: a pod's mounts
/// are made in its containers' (or the run's own) namespaces, and end with them.
fn leftover_mounts(state: &StateDirs) -> Vec<PathBuf> {
    let dirs = ended_state_dirs(state);
    mount_points()
        .into_iter()
        // Spaces and the like are octal escapes (`\040`); state dirs have none.
        .map(PathBuf::from)
        // The state dir itself may be a test's own mount (a small tmpfs, a read-only one).
        .filter(|m| dirs.iter().any(|d| m.starts_with(d) && m != d))
        .collect()
}

/// The state dirs of `state` that no run holds now (a state dir a run holds, of another pod
/// under the same base or of the run that turned this one away, rightly has its cgroups).
fn ended_state_dirs(state: &StateDirs) -> Vec<PathBuf> {
    let mut dirs = state.dirs.clone();
    if let Some(base) = &state.base {
        // BASE/NAMESPACE/POD.
        for ns in std::fs::read_dir(base).into_iter().flatten().flatten() {
            for pod in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
                dirs.push(pod.path());
            }
        }
    }
    dirs.retain(|d| !lock_is_held(&d.join("podvisor.lock")));
    dirs
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Kill the whole tree, whatever happened to the test: the namespace's init (which
        // takes its namespace with it), our direct child, and anything else with our tag.
        if self.in_namespace && self.running() {
            send(self.init_pid(), "KILL");
        }
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        for pid in tagged(&self.tag) {
            send(pid, "KILL");
        }
        let _ = self.child.wait();
    }
}

/// Sends a signal with kill(1), so that tests need no `unsafe`.
pub fn send(pid: i32, signal: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Pids of processes whose environment carries `PODVISOR_TEST_TAG=tag`.
fn tagged(tag: &str) -> Vec<i32> {
    let needle = format!("PODVISOR_TEST_TAG={tag}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(pid);
            }
        } else if is_zombie(pid) {
            // A zombie's environ is unreadable; its parent's tag decides.
            if let Some(ppid) = ppid(pid) {
                if std::fs::read(format!("/proc/{ppid}/environ"))
                    .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
                {
                    found.push(pid);
                }
            }
        }
    }
    found
}

fn stat(pid: i32) -> Option<(String, String, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let mut f = s[close + 1..].split_whitespace();
    let state = f.next()?.to_string();
    let ppid = f.next()?.parse().ok()?;
    Some((s[open + 1..close].to_string(), state, ppid))
}

pub fn is_zombie(pid: i32) -> bool {
    stat(pid).is_some_and(|(_, state, _)| state == "Z")
}

fn ppid(pid: i32) -> Option<i32> {
    stat(pid).map(|(_, _, p)| p)
}

fn describe(pid: i32) -> String {
    match stat(pid) {
        Some((name, state, ppid)) => format!("{pid} {name} state {state} ppid {ppid}"),
        None => format!("{pid} (gone)"),
    }
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!("podvisor-test-{}", new_tag()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    /// A fresh directory in `parent` (one that is not `$TMPDIR`), removed on drop.
    pub fn under(parent: &Path) -> TempDir {
        let dir = parent.join(format!("podvisor-test-{}", new_tag()));
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits until the file at `path` has a line satisfying `pred`, and returns all its lines.
pub fn wait_for_file_line(path: &Path, what: &str, pred: impl Fn(&str) -> bool) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(String::from).collect();
        if lines.iter().any(|l| pred(l)) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} never had {what}: {lines:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The mount points of this process's mount namespace (`/proc/self/mountinfo`'s fifth field;
/// none where it cannot be read).
pub fn mount_points() -> Vec<String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let points = mountinfo.lines().filter_map(|l| l.split(' ').nth(4));
    points.map(String::from).collect()
}

/// `sh -c script` in the mount namespace of process `pid` (nsenter): a mount made or taken
/// away there only.
pub fn sh_in_mounts_of(pid: i32, script: &str) -> Output {
    Run::new("nsenter")
        .arg(format!("--mount=/proc/{pid}/ns/mnt"))
        .args(["sh", "-c", script])
        .output()
}

/// The signal numbers recorded in a testbin `signals --out` file.
pub fn recorded_signals(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("signal "))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The children of `pid` with their command names, from /proc.
pub fn children_of(pid: i32) -> Vec<(i32, String)> {
    child_pids(pid)
        .into_iter()
        .map(|c| (c, stat(c).map(|(name, _, _)| name).unwrap_or_default()))
        .collect()
}

/// The children of process `pid`, whichever of its threads made them (a run's and a keeper's
/// starters make containers: `/proc/PID/task/TID/children` lists a thread's own).
pub fn child_pids(pid: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        pids.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok()),
        );
    }
    pids
}

/// Polls `cond` until it holds, failing the test after `PATIENCE`.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A run with its own state dir and JSON events file.
pub struct PodRun {
    pub dir: TempDir,
}

impl PodRun {
    pub fn new(manifest: &str) -> PodRun {
        let dir = TempDir::new();
        std::fs::write(dir.file("pod.yaml"), manifest).unwrap();
        PodRun { dir }
    }

    pub fn cmd(&self, extra: &[&str]) -> Run {
        self.cmd_under(&[], extra)
    }

    /// `cmd`, run by `wrapper` (`setpriv …`, `systemd-run …`) when it is not empty.
    pub fn cmd_under(&self, wrapper: &[&str], extra: &[&str]) -> Run {
        let run = match wrapper.split_first() {
            Some((program, args)) => Run::new(program).args(args).arg(podvisor()),
            None => Run::new(podvisor()),
        };
        run.args(["run", "-q", "--state-dir"])
            .arg(self.dir.file("state"))
            .arg("--events")
            .arg(self.dir.file("events.json"))
            .args(extra)
            .arg(self.dir.file("pod.yaml"))
    }

    /// Events as (reason, object, exitCode).
    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.file("events.json"))
            .unwrap_or_default()
            .split_inclusive('\n')
            // A line still being written is read next time.
            .filter(|l| l.ends_with('\n'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn reasons(&self, object: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["object"] == object)
            .map(|e| e["reason"].as_str().unwrap().to_string())
            .collect()
    }

    pub fn log(&self, container: &str, instance: u32) -> String {
        let path = self
            .dir
            .file("state")
            .join("logs")
            .join(container)
            .join(format!("{instance}.log"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| {
            // What there is instead, and what happened to the container, say why.
            let dir = path.parent().unwrap();
            let files: Vec<_> = (std::fs::read_dir(dir).into_iter().flatten().flatten())
                .map(|e| e.file_name())
                .collect();
            let events: Vec<_> = (self.events().into_iter())
                .filter(|e| e["object"] == container)
                .collect();
            panic!(
                "{}: {e}\nin {}: {files:?}\nevents of {container}: {events:#?}",
                path.display(),
                dir.display()
            )
        })
    }

    /// The lines a container instance wrote, without the CRI log's time, stream and tag.
    pub fn log_lines(&self, container: &str, instance: u32) -> Vec<String> {
        self.log(container, instance)
            .lines()
            .map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default().to_string())
            .collect()
    }
}

impl Drop for PodRun {
    /// A run killed with -9 leaves its cgroups for the next run on its state dir to remove;
    /// a test has no next run, so what the record lists goes here (its processes killed).
    fn drop(&mut self) {
        let record = self.dir.file("state").join("cgroups");
        for line in std::fs::read_to_string(record).unwrap_or_default().lines() {
            let dir = Path::new(line);
            if !dir.starts_with("/sys/fs/cgroup") {
                continue;
            }
            remove_cgroup_tree(dir);
        }
    }
}

/// Removes a cgroup directory and those below it, deepest first, killing what runs in them
/// (waiting up to 15 s each for it to go): what a test leaves in cgroups, it takes back.
pub fn remove_cgroup_tree(dir: &Path) {
    let mut dirs = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        for e in std::fs::read_dir(&dirs[i]).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
        i += 1;
    }
    for d in dirs.iter().rev() {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
            if std::fs::remove_dir(d).is_ok() || !d.exists() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A pod whose containers share the host's root (`podvisor.io/host-root: writable`): the
/// tests of the lifecycle hand their containers host paths (markers, logs, health files);
/// `tests/rootfs.rs` tests the private layer itself.
pub fn pod(policy: &str, containers: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, labels: {{tier: web}}, annotations: {{podvisor.io/root-from: host, podvisor.io/host-root: writable}}}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n{containers}")
}

/// `podvisor ARGS --state-dir DIR` run to completion, against a run's state dir.
pub fn client(r: &PodRun, args: &[&str]) -> Output {
    Run::new(podvisor())
        .args(args)
        .arg("--state-dir")
        .arg(r.dir.file("state"))
        .output()
}

/// A saved state file of podvisor (`podvisor.state`, `podvisor-init.state`): its JSON,
/// between its header line (`podvisor-state 3 KIND`) and its checksum line.
pub fn saved_record(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("podvisor-state 3 "), "{text}");
    assert!(lines.last().unwrap().starts_with("checksum "), "{text}");
    serde_json::from_str(&lines[1..lines.len() - 1].join("\n")).unwrap()
}

/// Whether the tests run as root (volumes and mount namespaces need it).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n")
}

/// The metrics text served at `addr`.
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// The first file called `name` in `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The resident size of the code of process `pid`'s program (its file's executable
/// mappings), KiB.
pub fn code_kib(pid: i32) -> u64 {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    file_code_kib(pid, |file| file == exe).unwrap_or(0)
}

/// The resident size of the executable mappings of process `pid` of the files `which` picks,
/// KiB; `None` where it maps none of them.
pub fn file_code_kib(pid: i32, which: impl Fn(&Path) -> bool) -> Option<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut code = false;
    let mut kib = None;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            let perms = fields.get(1).copied().unwrap_or("");
            code = perms.contains('x') && fields.get(5).is_some_and(|f| which(Path::new(f)));
        } else if let Some(v) = line.strip_prefix("Rss:").filter(|_| code) {
            let v = v.trim().trim_end_matches("kB").trim();
            *kib.get_or_insert(0) += v.parse::<u64>().unwrap_or(0);
        }
    }
    kib
}
