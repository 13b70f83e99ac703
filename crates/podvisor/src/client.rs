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
    find_pod(flag, None, None)
}

/// The state dir of a pod, as kubectl finds one: `--state-dir`; else the pod named `pod`
/// (`NAME` or `NAMESPACE/NAME`, in `namespace` when given) under the default base, running or
/// ended; else the only running pod, or, with none running, the only pod there is. Errors name
/// the pods that exist.
pub fn find_pod(
    flag: Option<PathBuf>,
    pod: Option<&str>,
    namespace: Option<&str>,
) -> Result<PathBuf, ClientError> {
    let began = std::time::Instant::now();
    let mut second_look = false;
    loop {
        // `run … &` then a client at once: a run that began just now holds no state dir yet
        // (it may not even be `podvisor` yet, or still be reading its manifest); it is waited for
        // until it does, so that it is among the pods found.
        let starting = flag.is_none()
            && began.elapsed() < STARTING_PATIENCE
            && state::processes::run_starting(RUN_STARTING);
        if starting {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        let found = find_pod_now(flag.clone(), pod, namespace);
        // One look at /proc can miss a run in the middle of an exec: a miss is looked at twice.
        if found.is_ok() || flag.is_some() || std::mem::replace(&mut second_look, true) {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A run this young that holds no state dir yet is waited for (see `find_pod`).
const RUN_STARTING: std::time::Duration = std::time::Duration::from_secs(10);

fn find_pod_now(
    flag: Option<PathBuf>,
    pod: Option<&str>,
    namespace: Option<&str>,
) -> Result<PathBuf, ClientError> {
    if let Some(dir) = flag {
        return match pod {
            Some(wanted) => check_named(dir, wanted, namespace),
            None => Ok(dir),
        };
    }
    let base = state::base();
    // A run that holds its lock is there, even before its socket answers.
    let known: Vec<StateDir> = state::under(&base).into_iter().filter(holds_pod).collect();
    let label = |d: &StateDir| pod_label(d);
    let listed = |dirs: &[StateDir]| {
        let names: Vec<String> = dirs.iter().map(label).collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    if let Some(wanted) = pod {
        let (ns, name) = match wanted.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (namespace, wanted),
        };
        let mut found: Vec<&StateDir> = known
            .iter()
            .filter(|d| d.name() == name && ns.is_none_or(|ns| namespace_of(d) == ns))
            .collect();
        return match found.len() {
            1 => Ok(found.remove(0).path().to_path_buf()),
            0 => Err(ClientError(format!(
                "pods {wanted:?} not found under {}; pods there: {}",
                base.display(),
                listed(&known)
            ))),
            _ => Err(ClientError(format!(
                "pod {name:?} is in several namespaces ({}); name it NAMESPACE/NAME or pass -n",
                found
                    .iter()
                    .map(|d| namespace_of(d))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        };
    }
    let in_namespace: Vec<StateDir> = known
        .into_iter()
        .filter(|d| namespace.is_none_or(|ns| namespace_of(d) == ns))
        .collect();
    let live: Vec<StateDir> = (in_namespace.iter())
        .filter(|d| d.is_running() || answers(d))
        .cloned()
        .collect();
    match (live.len(), in_namespace.len()) {
        (1, _) => Ok(live[0].path().to_path_buf()),
        (0, 1) => Ok(in_namespace[0].path().to_path_buf()),
        (0, 0) => Err(ClientError(format!(
            "no pod is running under {} (pass --state-dir DIR)",
            base.display()
        ))),
        (0, _) => Err(ClientError(format!(
            "no pod is running and several have ended; name one: {}",
            listed(&in_namespace)
        ))),
        _ => Err(ClientError(format!(
            "several pods are running; name one: {}",
            listed(&live)
        ))),
    }
}

/// A pod named beside `--state-dir` must be the one the state dir holds.
fn check_named(
    dir: PathBuf,
    wanted: &str,
    namespace: Option<&str>,
) -> Result<PathBuf, ClientError> {
    let pod: crate::status::ApiPod = serde_json::from_str(&pod_text(&dir)?)
        .map_err(|e| ClientError(format!("{}: not a v1 Pod: {e}", dir.display())))?;
    let name = pod.metadata.name.unwrap_or_default();
    let ns = pod.metadata.namespace.unwrap_or_else(|| "default".into());
    let (want_ns, want_name) = match wanted.split_once('/') {
        Some((n, w)) => (Some(n), w),
        None => (namespace, wanted),
    };
    if want_name == name && want_ns.is_none_or(|n| n == ns) {
        return Ok(dir);
    }
    Err(ClientError(format!(
        "pods {wanted:?} not found in {}: it holds {ns}/{name}",
        dir.display()
    )))
}

/// Whether a state dir holds a pod: a run there, or what one left (its last status, its
/// record, its events).
pub fn holds_pod(d: &StateDir) -> bool {
    d.is_running()
        || answers(d)
        || [d.last_pod(), d.record()]
            .into_iter()
            .any(|f| f.is_ok_and(|f| f.path().is_file()))
        || d.events_path().is_file()
}

/// `NAMESPACE/NAME` of a state dir under the default base (`BASE/NAMESPACE/NAME`).
pub fn pod_label(d: &StateDir) -> String {
    format!("{}/{}", namespace_of(d), d.name())
}

fn namespace_of(d: &StateDir) -> String {
    d.path()
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The pod (a v1 Pod, JSON): from its run, or, once the run has ended, as it last showed it.
pub fn pod_text(dir: &Path) -> Result<String, ClientError> {
    let asked = call(dir, "GET", "/status");
    let state = StateDir::new(dir);
    if asked.is_ok() || state.is_running() {
        return asked;
    }
    match state.last_pod().and_then(|f| f.read()) {
        Ok(Some(text)) => Ok(text),
        // A run killed before it could say how the pod ended.
        Ok(None) if state.record().is_ok_and(|f| f.path().is_file()) => {
            Err(ClientError(match left_behind(dir) {
                Some(left) => format!(
                    "the run of the pod in {} ended without saying how the pod was: {left}; its logs and events remain",
                    dir.display()
                ),
                None => format!(
                    "the run of the pod in {} ended without saying how the pod was (killed?): its logs and events remain; run its manifest again to resume it",
                    dir.display()
                ),
            }))
        }
        Ok(None) => asked,
        Err(e) => Err(ClientError(e.to_string())),
    }
}

/// The pod's recent events (JSON lines, the last 1,000): from its run, or, once the run has
/// ended (however it ended), as the run kept them.
pub fn events_text(dir: &Path) -> Result<String, ClientError> {
    let asked = call(dir, "GET", "/events");
    let state = StateDir::new(dir);
    if asked.is_ok() || state.is_running() {
        return asked;
    }
    match state.kept_events(1000) {
        Ok(Some(text)) => Ok(text),
        Ok(None) => asked,
        Err(e) => Err(ClientError(format!(
            "{}: {e}",
            state.events_path().display()
        ))),
    }
}

/// Whether a run answers on the state dir's socket.
pub fn answers(dir: &StateDir) -> bool {
    UnixStream::connect(dir.socket()).is_ok()
}

/// Whether keepers hold containers of the pod in `dir` (live restore): one answers.
pub fn kept(dir: &StateDir) -> bool {
    (dir.keeper_sockets().into_iter()).any(|s| UnixStream::connect(s).is_ok())
}

/// What a killed run left running in its pod's cgroups, said for the user, if anything: a
/// process a container started in the background, which no parent-death signal reaches.
fn left_behind(dir: &Path) -> Option<String> {
    let pids = crate::cgroup::left_processes(dir);
    let (first, more) = pids.split_at(pids.len().min(5));
    let listed: Vec<String> = first.iter().map(i32::to_string).collect();
    let (processes, them) = match pids.len() {
        0 => return None,
        1 => ("1 process".to_string(), "it"),
        n => (format!("{n} processes"), "them"),
    };
    Some(format!(
        "its run was killed and left {processes} running in the pod's cgroups (pid {}{}): `podvisor delete` of the pod ends {them}, and so does the next `podvisor run` of its manifest, which resumes the pod",
        listed.join(", "),
        if more.is_empty() { "" } else { ", ..." }
    ))
}

/// How long a client waits for the socket of a run that has begun (holds its lock) but does
/// not listen yet.
const STARTING_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

fn connect(dir: &Path) -> Result<UnixStream, ClientError> {
    let state = StateDir::new(dir);
    let path = state.socket();
    let began = std::time::Instant::now();
    let mut connected = UnixStream::connect(&path);
    // `run … &` then a client at once: the run holds the lock before it listens.
    while let Err(e) = &connected {
        let starting = matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ECONNREFUSED))
            && state.is_running()
            && began.elapsed() < STARTING_PATIENCE;
        if !starting {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        connected = UnixStream::connect(&path);
    }
    connected.map_err(|e| {
        let gone = matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ECONNREFUSED));
        if gone && kept(&state) {
            // Live restore: the run went, its keepers hold the containers on.
            return ClientError(format!(
                "no run serves the pod in {}: its containers run on under their keepers (--live-restore) until `podvisor run --live-restore` of its manifest takes them over",
                dir.display()
            ));
        }
        if let Some(left) = gone.then(|| left_behind(dir)).flatten() {
            return ClientError(format!("no run serves the pod in {}: {left}", dir.display()));
        }
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
    send(dir, method, path, fds, None)
}

/// Sends `METHOD PATH` with a body of that `Content-Type` (a resize's patch).
pub fn request_with_body(
    dir: &Path,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Result<Response, ClientError> {
    send(dir, method, path, &[], Some((content_type, body)))
}

fn send(
    dir: &Path,
    method: &str,
    path: &str,
    fds: &[std::os::fd::RawFd],
    body: Option<(&str, &str)>,
) -> Result<Response, ClientError> {
    let mut stream = connect(dir)?;
    let req = match body {
        None => format!("{method} {path} HTTP/1.1\r\nHost: podvisor\r\nContent-Length: 0\r\n\r\n"),
        Some((kind, body)) => format!(
            "{method} {path} HTTP/1.1\r\nHost: podvisor\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    };
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

/// Watches the status of the pod in `dir`: hands `f` the Pod now, then again on every
/// change, one line of JSON each, until the run ends. The run sends each change as a JSON
/// Patch (`?watch=1&patch=1`: it writes what changed once, whoever watches), which is
/// applied here to the Pod before; a run of an older podvisor sends whole Pods.
pub fn watch_status(
    dir: &Path,
    mut f: impl FnMut(&str) -> io::Result<()>,
) -> Result<(), ClientError> {
    let r = request(dir, "GET", "/status?watch=1&patch=1")?;
    let mut pod: Option<serde_json::Value> = None;
    stream_lines(r, |line| match watched_line(&mut pod, line) {
        Ok(pod) => f(&pod),
        Err(e) => Err(io::Error::other(format!(
            "the status watch sent a line that is not a Pod or a patch of the one before: {e}"
        ))),
    })
}

/// The Pod after `line` of a status watch, as one line of JSON: a whole Pod (the first line;
/// every line of a run older than patches, which leaves the parameter unread) replaces the
/// one before, a patch changes it.
fn watched_line(pod: &mut Option<serde_json::Value>, line: &str) -> Result<String, String> {
    let doc = match pod.as_mut() {
        Some(doc) if !line.starts_with('{') => {
            let patch: json_patch::Patch = serde_json::from_str(line).map_err(|e| e.to_string())?;
            json_patch::patch(doc, &patch).map_err(|e| e.to_string())?;
            doc
        }
        _ => pod.insert(serde_json::from_str(line).map_err(|e| e.to_string())?),
    };
    serde_json::to_string(doc).map_err(|e| e.to_string())
}

/// Reads lines of a stream (`?watch=1`) and hands each to `f` until the server closes. An
/// error of `f` ends the stream: quietly when it is a broken pipe (stdout closed, as by
/// `head`; the reader gone), as that error otherwise.
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
            Ok(_) => match f(line.trim_end()) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(ClientError(e.to_string())),
            },
            Err(e) => return Err(ClientError(format!("reading the stream: {e}"))),
        }
    }
}

/// kubectl's default container: the `kubectl.kubernetes.io/default-container` annotation,
/// else the first container (said on stderr when there are others, as kubectl says it).
pub fn default_container(pod: &crate::status::ApiPod) -> Result<String, ClientError> {
    let names: Vec<String> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let annotated = (pod.metadata.annotations.as_ref())
        .and_then(|a| a.get("kubectl.kubernetes.io/default-container"))
        .filter(|a| names.contains(a));
    if let Some(name) = annotated {
        return Ok(name.clone());
    }
    let first = names
        .first()
        .ok_or_else(|| ClientError("the pod has no containers".into()))?;
    if names.len() > 1 {
        eprintln!("Defaulted container {first:?} out of: {}", names.join(", "));
    }
    Ok(first.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_line_is_a_whole_pod_or_a_patch_of_the_one_before() {
        let mut pod = None;
        let first = r#"{"kind":"Pod","status":{"phase":"Pending","n":[1,2]}}"#;
        assert_eq!(watched_line(&mut pod, first).unwrap(), first);
        let patch = r#"[{"op":"replace","path":"/status/n/1","value":3}]"#;
        assert_eq!(
            watched_line(&mut pod, patch).unwrap(),
            r#"{"kind":"Pod","status":{"phase":"Pending","n":[1,3]}}"#
        );
        // An older run sends every change whole.
        let whole = r#"{"kind":"Pod","status":{"phase":"Running"}}"#;
        assert_eq!(watched_line(&mut pod, whole).unwrap(), whole);
        let bad = r#"[{"op":"replace","path":"/status/n/1","value":3}]"#;
        assert!(watched_line(&mut pod, bad).is_err());
        assert!(watched_line(&mut pod, "[nonsense").is_err());
    }
}
