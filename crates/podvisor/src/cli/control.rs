//! `podvisor events [-w] [-o json]`, `podvisor stop` and `podvisor restart [CONTAINER]`: the
//! status API's other clients.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{self, ClientError};
use super::manifest::{is_option, Flags};
use crate::process::sys;

const EVENTS_USAGE: &str = "\
Usage: podvisor events [--state-dir DIR] [-w] [-o json]

The running pod's events, oldest first (the last 1,000); -w keeps printing new ones.
";

const STOP_USAGE: &str = "\
Usage: podvisor stop [--state-dir DIR] [--no-wait]

Graceful termination of the running pod (preStop, SIGTERM, grace, SIGKILL), as SIGTERM to
`podvisor run` would do; waits until the run has ended unless --no-wait.
";

const RESTART_USAGE: &str = "\
Usage: podvisor restart [--state-dir DIR] [CONTAINER]

Restarts one container (stopped gracefully, started again at once; its restartCount grows), or
without CONTAINER the whole pod: every container stopped gracefully, emptyDir volumes wiped,
init containers run again, then the rest (event PodRestarting).
";

struct Common {
    dir: Option<PathBuf>,
    json: bool,
    watch: bool,
    no_wait: bool,
    operand: Option<String>,
}

fn parse(args: &[std::ffi::OsString], usage: &str, operand: bool) -> Result<Common, i32> {
    let Some(args) = super::arguments(args, usage) else {
        return Err(0);
    };
    let mut c = Common {
        dir: None,
        json: false,
        watch: false,
        no_wait: false,
        operand: None,
    };
    let mut flags = Flags::new(&args);
    let r: Result<(), String> = (|| {
        while let Some(arg) = flags.next_arg() {
            match arg.as_str() {
                "--state-dir" => c.dir = Some(PathBuf::from(flags.value()?)),
                "-o" | "--output" => match flags.value()?.as_str() {
                    "json" => c.json = true,
                    other => return Err(format!("-o {other:?}: only json")),
                },
                "-w" | "--watch" => c.watch = true,
                "--no-wait" => c.no_wait = true,
                _ if is_option(&arg) => return Err(format!("unknown option {arg:?}")),
                _ if operand && c.operand.is_none() => c.operand = Some(arg),
                _ => return Err(format!("unexpected argument {arg:?}")),
            }
        }
        Ok(())
    })();
    match r {
        Ok(()) => Ok(c),
        Err(e) => {
            super::write_err(&format!("error: {e}\n{usage}"));
            Err(2)
        }
    }
}

/// `2026-11-23T08:48:09.236Z  Warning  BackOff  crash  Back-off restarting ...`
fn event_line(e: &Value) -> String {
    let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
    format!(
        "{}  {:<7}  {:<10}  {:<12}  {}\n",
        s("time"),
        s("type"),
        s("reason"),
        s("object"),
        s("message")
    )
}

pub fn events(args: &[std::ffi::OsString]) -> i32 {
    let c = match parse(args, EVENTS_USAGE, false) {
        Ok(c) => c,
        Err(code) => return code,
    };
    client::exit_code((|| {
        let dir = client::state_dir(c.dir)?;
        let print = |line: &str| -> std::io::Result<()> {
            let out = if c.json {
                format!("{line}\n")
            } else {
                let e: Value = serde_json::from_str(line).map_err(std::io::Error::other)?;
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

pub fn stop(args: &[std::ffi::OsString]) -> i32 {
    let c = match parse(args, STOP_USAGE, false) {
        Ok(c) => c,
        Err(code) => return code,
    };
    client::exit_code((|| {
        let dir = client::state_dir(c.dir)?;
        client::call(&dir, "POST", "/stop")?;
        if c.no_wait {
            return Ok(());
        }
        // The run holds the state dir's lock until it has ended.
        let lock = std::fs::File::open(dir.join("podvisor.lock"))
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

pub fn restart(args: &[std::ffi::OsString]) -> i32 {
    let c = match parse(args, RESTART_USAGE, true) {
        Ok(c) => c,
        Err(code) => return code,
    };
    client::exit_code((|| {
        let dir = client::state_dir(c.dir)?;
        let path = match &c.operand {
            Some(name) => format!("/restart?container={}", percent_encode(name)),
            None => "/restart".to_string(),
        };
        client::call(&dir, "POST", &path)?;
        Ok(())
    })())
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
