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
    /// The pod's state dir (default: the only running pod)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// JSON lines instead of text
    #[arg(short, long, value_name = "FORMAT", value_parser = ["json"])]
    output: Option<String>,
    /// Keep printing new events
    #[arg(short, long)]
    watch: bool,
}

/// `podvisor stop`'s arguments: graceful termination of the running pod (preStop, SIGTERM,
/// grace, SIGKILL), as SIGTERM to `podvisor run` would do.
#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// The pod's state dir (default: the only running pod)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Do not wait until the run has ended
    #[arg(long)]
    no_wait: bool,
}

/// `podvisor restart`'s arguments: one container stopped gracefully and started again at once
/// (its restartCount grows), or without CONTAINER the whole pod (every container stopped,
/// emptyDir volumes wiped, init containers again; event PodRestarting).
#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// The pod's state dir (default: the only running pod)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The container to restart (none: the whole pod)
    container: Option<String>,
}

/// `2026-11-23T08:48:09.236Z  Warning  BackOff  crash  Back-off restarting ...`
fn event_line(e: &EventLine) -> String {
    format!(
        "{}  {:<7}  {:<10}  {:<12}  {}\n",
        e.time, e.type_, e.reason, e.object, e.message
    )
}

pub fn events(c: EventsArgs) -> i32 {
    let json = c.output.is_some();
    exit_code((|| {
        let dir = client::state_dir(c.state_dir)?;
        let print = |line: &str| -> std::io::Result<()> {
            let out = if json {
                format!("{line}\n")
            } else {
                let e: EventLine = serde_json::from_str(line).map_err(std::io::Error::other)?;
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
        let text = client::call(&dir, "GET", "/events")?;
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
        let dir = client::state_dir(c.state_dir)?;
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

pub fn restart(c: RestartArgs) -> i32 {
    exit_code((|| {
        let dir = client::state_dir(c.state_dir)?;
        client::call(&dir, "POST", &client::restart_path(c.container.as_deref()))?;
        Ok(())
    })())
}
