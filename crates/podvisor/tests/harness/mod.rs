//! A small harness for running the built binaries: a tagged process that is killed with all
//! its descendants on drop, line-by-line output with deadlines, and a check that nothing with
//! the test's tag is left running.
//!
//! Every process a test starts carries `PODVISOR_TEST_TAG=<unique>` in its environment, which
//! its descendants inherit; that is how leftovers are found even after they were re-parented.
//! `leftovers` holds those checks (processes, and a pod's cgroups and mounts), `procfs` what
//! the tests read of processes in /proc, `pods` a `podvisor run` with its own state dir.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod leftovers;
mod pods;
mod procfs;

pub use leftovers::cgroups_of_state_dirs;
use leftovers::{ends_a_pod, StateDirs};
pub use pods::*;
pub use procfs::*;

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

/// Polls `cond` until it holds, failing the test after `PATIENCE`.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
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
