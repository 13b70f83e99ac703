//! The client side of the status API: finding the running pod's state dir and talking HTTP/1.1
//! to its socket. Used by the CLI's commands and by `top`.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::state::{self, StateDir};

/// Why a client could not get an answer; the message is for the user, exit code 1.
#[derive(Debug)]
pub struct ClientError(pub String);

/// The state dir: `--state-dir`, or the only one under the default base with a live pod.
pub fn state_dir(flag: Option<PathBuf>) -> Result<PathBuf, ClientError> {
    if let Some(dir) = flag {
        return Ok(dir);
    }
    let base = state::base();
    let mut live: Vec<PathBuf> = state::under(&base)
        .into_iter()
        .filter(answers)
        .map(|d| d.path().to_path_buf())
        .collect();
    match live.len() {
        1 => Ok(live.remove(0)),
        0 => Err(ClientError(format!(
            "no pod is running under {} (pass --state-dir DIR)",
            base.display()
        ))),
        _ => Err(ClientError(format!(
            "several pods are running; pass --state-dir with one of: {}",
            live.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Whether a run answers on the state dir's socket.
pub fn answers(dir: &StateDir) -> bool {
    UnixStream::connect(dir.socket()).is_ok()
}

fn connect(dir: &Path) -> Result<UnixStream, ClientError> {
    let path = StateDir::new(dir).socket();
    UnixStream::connect(&path).map_err(|e| {
        ClientError(match e.raw_os_error() {
            Some(libc::ENOENT) => format!(
                "no pod is running in {} (no {})",
                dir.display(),
                path.file_name().unwrap_or_default().to_string_lossy()
            ),
            Some(libc::ECONNREFUSED) => format!(
                "no pod is running in {} ({} was left by a run that ended)",
                dir.display(),
                path.display()
            ),
            Some(libc::EACCES) | Some(libc::EPERM) => format!(
                "{}: permission denied: only the user who runs the pod (or root) may use it",
                path.display()
            ),
            _ => format!("{}: {e}", path.display()),
        })
    })
}

/// An answer: status code and a reader positioned at the body.
#[derive(Debug)]
pub struct Response {
    pub code: u16,
    pub body: BufReader<UnixStream>,
}

impl Response {
    pub fn text(mut self) -> Result<String, ClientError> {
        let mut s = String::new();
        self.body
            .read_to_string(&mut s)
            .map_err(|e| ClientError(format!("reading the answer: {e}")))?;
        Ok(s)
    }
}

/// Sends `METHOD PATH` and reads the answer's head.
pub fn request(dir: &Path, method: &str, path: &str) -> Result<Response, ClientError> {
    request_with_fds(dir, method, path, &[])
}

/// As `request`, with descriptors passed along (`SCM_RIGHTS`, with the request's first
/// bytes): what `POST /exec` takes.
pub fn request_with_fds(
    dir: &Path,
    method: &str,
    path: &str,
    fds: &[std::os::fd::RawFd],
) -> Result<Response, ClientError> {
    let mut stream = connect(dir)?;
    let req = format!("{method} {path} HTTP/1.1\r\nHost: podvisor\r\nContent-Length: 0\r\n\r\n");
    let sent = match fds {
        [] => 0,
        _ => crate::process::sys::send_with_fds(&stream, req.as_bytes(), fds)
            .map_err(|e| ClientError(format!("sending the request: {e}")))?,
    };
    stream
        .write_all(&req.as_bytes()[sent..])
        .map_err(|e| ClientError(format!("sending the request: {e}")))?;
    let mut body = BufReader::new(stream);
    let mut line = String::new();
    read_line(&mut body, &mut line)?;
    let code = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| ClientError(format!("not an HTTP answer: {line:?}")))?;
    loop {
        line.clear();
        read_line(&mut body, &mut line)?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    Ok(Response { code, body })
}

fn read_line(r: &mut impl BufRead, line: &mut String) -> Result<(), ClientError> {
    r.read_line(line)
        .map(|_| ())
        .map_err(|e| ClientError(format!("reading the answer: {e}")))
}

/// A request whose answer must be 2xx; the body as text.
pub fn call(dir: &Path, method: &str, path: &str) -> Result<String, ClientError> {
    let r = request(dir, method, path)?;
    let code = r.code;
    let text = r.text()?;
    if !(200..300).contains(&code) {
        return Err(ClientError(text.trim_end().to_string()));
    }
    Ok(text)
}

/// `s` as a query parameter's value.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The path that restarts container `name` (the whole pod without one).
pub fn restart_path(container: Option<&str>) -> String {
    match container {
        Some(name) => format!("/restart?container={}", percent_encode(name)),
        None => "/restart".to_string(),
    }
}

/// Reads lines of a stream (`?watch=1`) and hands each to `f` until the server closes.
pub fn stream_lines(
    mut r: Response,
    mut f: impl FnMut(&str) -> io::Result<()>,
) -> Result<(), ClientError> {
    if !(200..300).contains(&r.code) {
        let code = r.code;
        let text = r.text()?;
        return Err(ClientError(format!("{code}: {}", text.trim_end())));
    }
    let mut line = String::new();
    loop {
        line.clear();
        match r.body.read_line(&mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {
                if f(line.trim_end()).is_err() {
                    // stdout closed (a pipe to `head`): done.
                    return Ok(());
                }
            }
            Err(e) => return Err(ClientError(format!("reading the stream: {e}"))),
        }
    }
}
