//! Where `top`'s data comes from: the running pods it can see, and for each a status watch
//! and an events watch on its status socket (the supervisor pushes a line on every change;
//! nothing is polled), each in a thread that sends what it reads to the loop. CPU and memory
//! are read from each container instance's cgroup, not asked of the supervisor.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use serde::de::DeserializeOwned;

use crate::cgroup::{self, InstanceCgroup};
use crate::client;
use crate::mountinfo::Mount;
use crate::state::{self, StateDir};
use crate::status::print::container_statuses;
use crate::status::{ApiPod, EventLine};

/// What a watch thread tells the loop.
#[derive(Debug)]
pub enum Msg {
    Status(PathBuf, Box<ApiPod>),
    Event(PathBuf, EventLine),
    /// The pod's watch ended: its run is gone (or cannot be reached any more).
    Gone(PathBuf),
    /// An error worth showing (a socket refused, an answer that is not JSON).
    Problem(PathBuf, String),
    Key(super::model::Key),
    Resize,
}

/// The state dirs of running pods not watched yet: each `--state-dir`, and every pod under
/// each root (a state base: `NAMESPACE/POD/` below it) whose socket answers. Pods already
/// watched are not connected to again: a supervisor sees `top` once, through its watches.
pub fn discover(roots: &[PathBuf], dirs: &[PathBuf], watched: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let mut candidates: BTreeSet<StateDir> = dirs.iter().map(StateDir::new).collect();
    for root in roots {
        candidates.extend(state::under(root));
    }
    candidates
        .into_iter()
        .filter(|d| !watched.contains(d.path()) && d.socket().exists() && client::answers(d))
        .map(|d| d.path().to_path_buf())
        .collect()
}

/// Starts the two watches of the pod in `dir`; each sends until its stream ends, then `Gone`
/// (the status watch only, once).
pub fn watch(dir: PathBuf, tx: Sender<Msg>) {
    let (d, t) = (dir.clone(), tx.clone());
    std::thread::spawn(move || {
        let sent = client::watch_status(&d, |line| {
            let pod = serde_json::from_str(line).map_err(|e| {
                std::io::Error::other(format!(
                    "the status watch sent a line that is not a v1 Pod: {e}"
                ))
            })?;
            // The screen is gone (top quits): the watch ends, quietly.
            (t.send(Msg::Status(d.clone(), Box::new(pod))))
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        })
        .map_err(|e| e.0);
        if let Err(e) = sent {
            let _ = t.send(Msg::Problem(d.clone(), e));
        }
        let _ = t.send(Msg::Gone(d));
    });
    std::thread::spawn(move || {
        if let Err(e) = stream(&dir, "/events?watch=1", &tx, |v| Msg::Event(dir.clone(), v)) {
            let _ = tx.send(Msg::Problem(dir.clone(), e));
        }
    });
}

/// Reads a watch, one JSON object per line, until it ends.
fn stream<T: DeserializeOwned>(
    dir: &Path,
    path: &str,
    tx: &Sender<Msg>,
    msg: impl Fn(T) -> Msg,
) -> Result<(), String> {
    let r = client::request(dir, "GET", path).map_err(|e| e.0)?;
    client::stream_lines(r, |line| {
        let v: T = serde_json::from_str(line).map_err(|e| {
            std::io::Error::other(format!("{path} sent a line that is not JSON: {e}"))
        })?;
        // The screen is gone (top quits): the watch ends, quietly.
        tx.send(msg(v))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    })
    .map_err(|e| e.0)
}

/// The main process id of each running container of a status (`containerID: podvisor://PID`).
pub fn running_pids(status: &ApiPod) -> Vec<(String, i32)> {
    container_statuses(status)
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .filter_map(|c| {
            let id = c.container_id.as_deref()?.strip_prefix("podvisor://")?;
            Some((c.name.clone(), id.parse().ok()?))
        })
        .collect()
}

/// The cgroup of process `pid` (a container instance's), to read its usage from; `mounts`:
/// the mount table, read once per look.
pub fn cgroup_of(pid: i32, mounts: &[Mount]) -> Option<InstanceCgroup> {
    cgroup::instance_of(pid, mounts)
}
