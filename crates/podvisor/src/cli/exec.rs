//! `podvisor exec [POD] [-c CONTAINER] [-i] [-t] -- CMD...`: a command in a running
//! container, as `kubectl exec` runs one. Its stdout and stderr (and with `-i` its stdin) are
//! this command's own, handed to the run over the status API's socket; the run starts it with
//! the container's namespaces, cgroups, user, groups, capabilities, no_new_privs, seccomp
//! filter, environment and working directory, as CRI exec does.
//!
//! With `-it` on a terminal the command gets a terminal of its own, made in the container's
//! `/dev` as runc makes one: this command hands the run a socket (runc's console socket),
//! receives the terminal's master on it, and copies between it and this terminal (put in raw
//! mode, its size followed on SIGWINCH) until the command ends.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::client::{self, ClientError};
use crate::process::sys;
use crate::status::ApiPod;

/// `podvisor exec`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The pod's state dir (default: found by POD under the default base)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The container (default: the pod's `kubectl.kubernetes.io/default-container`, else its
    /// first container)
    #[arg(short, long, value_name = "NAME")]
    container: Option<String>,
    /// Pass this command's stdin to the container's command
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Give the command a terminal of its own (with -i, when this command's stdin is a
    /// terminal)
    #[arg(short, long)]
    tty: bool,
    /// The pod's namespace
    #[arg(short, long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The pod, `NAME` or `NAMESPACE/NAME` (default: the only running pod)
    #[arg(value_name = "POD")]
    pod: Option<String>,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// What the run answers once the command ended.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    exit_code: i32,
    error: Option<String>,
}

pub fn main(a: ExecArgs) -> i32 {
    match exec(a) {
        Ok(code) => code,
        Err(ClientError(msg)) => {
            eprintln!("error: {msg}");
            1
        }
    }
}

fn exec(a: ExecArgs) -> Result<i32, ClientError> {
    // As kubectl: a terminal only with stdin, and only when stdin is one.
    let terminal = a.tty && a.stdin && std::io::IsTerminal::is_terminal(&std::io::stdin());
    if a.tty && a.stdin && !terminal {
        eprintln!("Unable to use a TTY - input is not a terminal or the right kind of file");
    }
    let dir = client::find_pod(a.state_dir, a.pod.as_deref(), a.namespace.as_deref())?;
    let container = match a.container {
        Some(c) => c,
        None => {
            let pod: ApiPod = serde_json::from_str(&client::call(&dir, "GET", "/status")?)
                .map_err(|e| ClientError(format!("the run's status: {e}")))?;
            client::default_container(&pod)?
        }
    };
    let mut path = format!("/exec?container={}", client::percent_encode(&container));
    for arg in &a.command {
        path.push_str("&command=");
        path.push_str(&client::percent_encode(arg));
    }
    let (code, text) = match terminal {
        true => with_terminal(&dir, &path)?,
        false => {
            let fds: &[RawFd] = if a.stdin { &[0, 1, 2] } else { &[1, 2] };
            let r = client::request_with_fds(&dir, "POST", &path, fds)?;
            (r.code, r.text()?)
        }
    };
    if code != 200 {
        return Err(ClientError(text.trim_end().to_string()));
    }
    let answer: Answer = serde_json::from_str(&text)
        .map_err(|e| ClientError(format!("the run's answer {:?}: {e}", text.trim_end())))?;
    if let Some(why) = answer.error {
        eprintln!("error: {why}");
    }
    if answer.exit_code != 0 {
        // As kubectl says it.
        eprintln!("command terminated with exit code {}", answer.exit_code);
    }
    Ok(answer.exit_code)
}

/// Runs the request `path` with a terminal: the console socket goes with the request, the
/// terminal's master comes back on it, and this terminal (raw while the command runs) is
/// copied to and from it. Returns the run's answer (status code, body).
fn with_terminal(dir: &Path, path: &str) -> Result<(u16, String), ClientError> {
    let fail = |what: &str, e: std::io::Error| ClientError(format!("{what}: {e}"));
    let (cols, rows) = ratatui::crossterm::terminal::size().unwrap_or((0, 0));
    let path = format!("{path}&tty=true&rows={rows}&cols={cols}");
    // SIGWINCH is read by a thread of its own: blocked here, before any thread starts.
    sys::block_signals(&[libc::SIGWINCH]).map_err(|e| fail("SIGWINCH", e))?;
    let (mine, theirs) = UnixStream::pair().map_err(|e| fail("a console socket", e))?;
    ratatui::crossterm::terminal::enable_raw_mode().map_err(|e| fail("raw mode", e))?;
    let raw = RawMode;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Some(master) = receive_master(&mine) {
            copy_output(&master);
        }
        let _ = done_tx.send(());
    });
    let answer = client::request_with_fds(dir, "POST", &path, &[theirs.as_raw_fd()])
        .and_then(|r| Ok((r.code, r.text()?)));
    // No master will come on the socket any more: the receiver ends if none came.
    drop(theirs);
    // What the command wrote last, until its terminal closes (a background job of its
    // may keep it open: not waited for long).
    let _ = done_rx.recv_timeout(Duration::from_secs(2));
    drop(raw);
    answer
}

/// Takes this terminal out of raw mode when dropped.
struct RawMode;

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = ratatui::crossterm::terminal::disable_raw_mode();
    }
}

/// The master of the command's terminal, sent by it on the console socket (`None`: it
/// never came: the command did not start).
fn receive_master(socket: &UnixStream) -> Option<std::fs::File> {
    let master = std::fs::File::from(sys::recv_fd(socket).ok()??);
    // Keystrokes to it, and its size after this terminal's.
    if let Ok(input) = master.try_clone() {
        std::thread::spawn(move || copy_input(input));
    }
    if let Ok(sized) = master.try_clone() {
        std::thread::spawn(move || follow_size(&sized));
    }
    Some(master)
}

/// This command's stdin to the terminal, until either ends.
fn copy_input(mut master: std::fs::File) {
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stdin.read(&mut buf) {
        if master.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// The terminal's output to this command's stdout, until it closes (EIO once the command
/// and whatever shares its terminal are gone).
fn copy_output(mut master: &std::fs::File) {
    let mut stdout = std::io::stdout().lock();
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = master.read(&mut buf) {
        if stdout
            .write_all(&buf[..n])
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return;
        }
    }
}

/// At each SIGWINCH, this terminal's size given to the command's.
fn follow_size(master: &std::fs::File) {
    let mut set = sys::SigSet::empty();
    set.add(libc::SIGWINCH);
    while sys::wait_signal(&set, None).is_ok() {
        if let Ok((cols, rows)) = ratatui::crossterm::terminal::size() {
            let _ = sys::set_terminal_size(master.as_raw_fd(), rows, cols);
        }
    }
}
