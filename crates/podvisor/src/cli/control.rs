//! `podvisor events [-w] [-o json]`, `podvisor stop` and `podvisor restart [CONTAINER]`: the
//! status API's other clients.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::exit_code;
use crate::client::{self, ClientError};
use crate::process::sys;
use crate::state::StateDir;
use crate::status::EventLine;

/// `podvisor events`' arguments: the last 1,000 events, oldest first.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    #[command(flatten)]
    target: super::PodTarget,
    /// JSON lines instead of text
    #[arg(short, long, value_name = "FORMAT", value_parser = ["json"])]
    output: Option<String>,
    /// Keep printing new events
    #[arg(short, long)]
    watch: bool,
}

/// `podvisor stop`'s arguments: graceful termination of the running pod (preStop, SIGTERM,
/// grace, SIGKILL), after which the pod is deleted (its record removed).
#[derive(Debug, clap::Args)]
pub struct StopArgs {
    #[command(flatten)]
    target: super::PodTarget,
    /// Do not wait until the run has ended
    #[arg(long)]
    no_wait: bool,
}

/// `podvisor patch`'s arguments: as `kubectl patch pod --subresource resize`, an in-place
/// resize of the running pod's containers' cpu and memory; as `kubectl patch pod
/// --subresource status`, the pod's conditions of types the node does not own (what its
/// readiness gates wait for).
#[derive(Debug, clap::Args)]
pub struct PatchArgs {
    #[command(flatten)]
    target: super::PodTarget,
    /// The subresource to patch: `resize` (containers' resources) or `status` (conditions
    /// of types the node does not own)
    #[arg(long, value_name = "NAME", value_parser = ["resize", "status"], required = true)]
    subresource: String,
    /// The patch, JSON (or YAML), e.g.
    /// '{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":"256Mi"}}}]}}'
    /// or '{"status":{"conditions":[{"type":"example.com/ready","status":"True"}]}}'
    #[arg(short, long, value_name = "PATCH", required = true)]
    patch: String,
    /// How the patch is written: a strategic merge patch (containers merged by name), a JSON
    /// merge patch (RFC 7386) or a JSON patch (RFC 6902)
    #[arg(long = "type", value_name = "TYPE", default_value = "strategic", value_parser = ["strategic", "merge", "json"])]
    kind: String,
}

/// `podvisor restart`'s arguments: one container stopped gracefully and started again at once
/// (its restartCount grows), or without CONTAINER the whole pod (every container stopped,
/// emptyDir volumes wiped, init containers again; event PodRestarting).
#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// The pod's state dir (default: found by POD under the default base)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The pod's namespace
    #[arg(short, long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// A container of the only running pod, or a pod (`NAME` or `NAMESPACE/NAME`; none: the
    /// only running pod, whole)
    #[arg(value_name = "POD|CONTAINER")]
    first: Option<String>,
    /// The container to restart, after POD (none: the whole pod)
    #[arg(value_name = "CONTAINER")]
    second: Option<String>,
}

/// Whether the pod in `dir` has a container (of any kind) named `name`.
fn has_container(dir: &std::path::Path, name: &str) -> bool {
    let Ok(text) = client::pod_text(dir) else {
        return false;
    };
    let Ok(pod) = serde_json::from_str::<crate::status::ApiPod>(&text) else {
        return false;
    };
    let spec = pod.spec.unwrap_or_default();
    let init = spec.init_containers.unwrap_or_default();
    (spec.containers.iter().chain(&init)).any(|c| c.name == name)
}

/// `2026-11-23T08:48:09.236Z  Warning  BackOff  crash  Back-off restarting ...`
fn event_line(e: &EventLine) -> String {
    e.text()
}

pub fn events(c: EventsArgs) -> i32 {
    let json = c.output.is_some();
    exit_code((|| {
        let dir = c.target.find()?;
        let print = |line: &str| -> std::io::Result<()> {
            let out = if json {
                format!("{line}\n")
            } else {
                let e: EventLine = serde_json::from_str(line).map_err(|e| {
                    std::io::Error::other(format!(
                        "the events watch sent a line that is not an event: {e}"
                    ))
                })?;
                event_line(&e)
            };
            let mut stdout = std::io::stdout().lock();
            std::io::Write::write_all(&mut stdout, out.as_bytes())?;
            std::io::Write::flush(&mut stdout)
        };
        if c.watch {
            let r = client::request(&dir, "GET", "/events?watch=1")?;
            return client::stream_lines(r, print);
        }
        let text = client::events_text(&dir)?;
        for line in text.lines().filter(|l| !l.is_empty()) {
            if print(line).is_err() {
                break;
            }
        }
        Ok(())
    })())
}

pub fn stop(c: StopArgs) -> i32 {
    exit_code((|| {
        let dir = c.target.find()?;
        client::call(&dir, "POST", "/stop")?;
        if c.no_wait {
            return Ok(());
        }
        // The run holds the state dir's lock until it has ended.
        let lock = std::fs::File::open(StateDir::new(&dir).lock_path())
            .map_err(|e| ClientError(format!("{}: {e}", dir.display())))?;
        let began = Instant::now();
        loop {
            if sys::try_lock(&lock).unwrap_or(true) {
                return Ok(());
            }
            if began.elapsed() > Duration::from_secs(3600) {
                return Err(ClientError("the pod did not stop within an hour".into()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })())
}

pub fn patch(c: PatchArgs) -> i32 {
    exit_code((|| {
        let dir = c.target.find()?;
        // YAML is JSON's superset: kubectl takes either.
        let value: serde_json::Value = serde_saphyr::from_str(&c.patch)
            .map_err(|e| ClientError(format!("error: unable to parse {:?}: {e}", c.patch)))?;
        let kind = match c.kind.as_str() {
            "merge" => "application/merge-patch+json",
            "json" => "application/json-patch+json",
            _ => "application/strategic-merge-patch+json",
        };
        let before: serde_json::Value =
            serde_json::from_str(&client::call(&dir, "GET", "/status")?).unwrap_or_default();
        let path = format!("/{}", c.subresource);
        let r = client::request_with_body(&dir, "PATCH", &path, kind, &value.to_string())?;
        let code = r.code;
        let text = r.text()?;
        if code != 200 {
            return Err(ClientError(text.trim_end().to_string()));
        }
        let pod: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ClientError(format!("reading the answer: {e}")))?;
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let changed = match c.subresource.as_str() {
            "status" => pod["status"]["conditions"] != before["status"]["conditions"],
            _ => pod["spec"] != before["spec"],
        };
        match changed {
            true => println!("pod/{name} patched"),
            false => println!("pod/{name} patched (no change)"),
        }
        Ok(())
    })())
}

pub fn restart(c: RestartArgs) -> i32 {
    exit_code((|| {
        let ns = c.namespace.as_deref();
        let (dir, container) = match (c.first, c.second) {
            (Some(pod), Some(container)) => (
                client::find_pod(c.state_dir, Some(&pod), ns)?,
                Some(container),
            ),
            (None, _) => (client::find_pod(c.state_dir, None, ns)?, None),
            // One word: a container of the only pod when it has one of that name, else a pod.
            (Some(word), None) => match client::find_pod(c.state_dir.clone(), None, ns) {
                Ok(dir) if c.state_dir.is_some() || has_container(&dir, &word) => (dir, Some(word)),
                _ => (client::find_pod(c.state_dir, Some(&word), ns)?, None),
            },
        };
        client::call(&dir, "POST", &client::restart_path(container.as_deref()))?;
        Ok(())
    })())
}
