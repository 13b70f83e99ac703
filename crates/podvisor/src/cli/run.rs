//! `podvisor run [FLAGS] FILE`: runs the pod in FILE in the foreground until it is Succeeded or
//! Failed, or until SIGTERM / SIGINT (then graceful termination). Exit 0 when Succeeded or
//! stopped on request, 1 when Failed, 2 on bad input.

use std::path::PathBuf;
use std::time::Duration;

use podvisor_core::backoff::{BackoffPolicy, DEFAULT_INITIAL, DEFAULT_MAX};
use podvisor_core::lifecycle::Phase;
use podvisor_core::spec::plan::{parse_quantity, plan, HostFacts};

use super::manifest::{is_option, load, Flags};
use crate::api::status::PodInfo;
use crate::process::sys;
use crate::supervisor::logs::LogLimits;
use crate::supervisor::{self, events::EventSink, Settings};

const USAGE: &str = "\
Usage: podvisor run [OPTIONS] FILE

Runs the pod in FILE (a Pod, or the pod template of a Deployment, StatefulSet, DaemonSet or
Job; - for stdin) until it succeeds or fails, or until SIGTERM / SIGINT.

Options:
      --state-dir DIR          Logs and state (default $XDG_STATE_HOME/podvisor/NS/POD, as
                               root /var/lib/podvisor/NS/POD)
      --events FILE|-          Also write events as JSON lines to FILE (- for stdout)
      --backoff-initial DUR    First CrashLoopBackOff delay (default 10s)
      --backoff-max DUR        Longest CrashLoopBackOff delay (default 5m)
      --log-max-size SIZE      Rotate a container's log file past SIZE (default 10Mi)
      --log-max-files N        Log files kept per container instance (default 5)
      --metrics-addr ADDR      Serve Prometheus metrics on ADDR (host:port) at /metrics
  -q, --quiet                  No event lines on stderr
  -h, --help                   Print this help
";

struct Args {
    file: String,
    state_dir: Option<PathBuf>,
    events: Option<String>,
    initial: Duration,
    max: Duration,
    quiet: bool,
    logs: LogLimits,
    metrics: Option<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        file: String::new(),
        state_dir: None,
        events: None,
        initial: DEFAULT_INITIAL,
        max: DEFAULT_MAX,
        quiet: false,
        logs: LogLimits::default(),
        metrics: None,
    };
    let mut file = None;
    let mut flags = Flags::new(args);
    while let Some(arg) = flags.next_arg() {
        match arg.as_str() {
            "--state-dir" => a.state_dir = Some(PathBuf::from(flags.value()?)),
            "--events" => a.events = Some(flags.value()?),
            "--backoff-initial" => a.initial = flags.duration()?,
            "--backoff-max" => a.max = flags.duration()?,
            "--metrics-addr" => a.metrics = Some(flags.value()?),
            "--log-max-size" => {
                let v = flags.value()?;
                a.logs.max_size = parse_quantity(&v)
                    .filter(|q| *q >= 1.0)
                    .ok_or_else(|| format!("--log-max-size {v:?}: a size such as 10Mi"))?
                    as u64;
            }
            "--log-max-files" => {
                let v = flags.value()?;
                a.logs.max_files = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| format!("--log-max-files {v:?}: a number, at least 1"))?;
            }
            "-q" | "--quiet" => a.quiet = true,
            _ if is_option(&arg) => return Err(format!("unknown option {arg:?}")),
            _ if file.is_none() => file = Some(arg),
            _ => return Err(format!("unexpected argument {arg:?}: one FILE only")),
        }
    }
    a.file = file.ok_or("no FILE given")?;
    Ok(a)
}

pub fn default_state_dir(namespace: &str, pod: &str) -> PathBuf {
    state_base().join(namespace).join(pod)
}

/// Where state dirs live by default: `/var/lib/podvisor` for root, else
/// `$XDG_STATE_HOME/podvisor` (or `~/.local/state/podvisor`).
pub fn state_base() -> PathBuf {
    // Root (the owner of /proc/self) gets the system directory, as SPEC.md says.
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if root {
        PathBuf::from("/var/lib/podvisor")
    } else if let Some(x) = std::env::var_os("XDG_STATE_HOME") {
        PathBuf::from(x).join("podvisor")
    } else {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| ".".into()))
            .join(".local/state/podvisor")
    }
}

pub fn main(args: &[std::ffi::OsString]) -> i32 {
    let Some(args) = super::arguments(args, USAGE) else {
        return 0;
    };
    let a = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            super::write_err(&format!("error: {e}\nUsage: podvisor run [OPTIONS] FILE\n"));
            return 2;
        }
    };
    let manifest = match load(&a.file) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let (cpus, memory) = sys::cpus_and_memory();
    let host = HostFacts {
        hostname: sys::hostname(),
        uid: pod_uid(),
        cpus,
        memory,
    };
    let run_plan = plan(&manifest, &host, BackoffPolicy::new(a.initial, a.max));
    let w = &manifest.workload;
    let meta = w.template_metadata.as_ref();
    let info = PodInfo {
        name: run_plan.pod.name.clone(),
        namespace: run_plan.namespace.clone(),
        uid: host.uid.clone(),
        labels: meta
            .and_then(|m| m.labels.clone())
            .or_else(|| w.metadata.labels.clone())
            .unwrap_or_default(),
        annotations: meta
            .and_then(|m| m.annotations.clone())
            .or_else(|| w.metadata.annotations.clone())
            .unwrap_or_default(),
        spec: serde_json::to_value(&w.spec).unwrap_or_default(),
        images: w
            .spec
            .init_containers
            .iter()
            .flatten()
            .chain(&w.spec.containers)
            .map(|c| c.image.clone().unwrap_or_default())
            .collect(),
        created: std::time::SystemTime::now(),
    };
    let state_dir = a
        .state_dir
        .unwrap_or_else(|| default_state_dir(&run_plan.namespace, &run_plan.pod.name));
    let json: Option<Box<dyn supervisor::events::WriteDebug>> = match a.events.as_deref() {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout())),
        Some(path) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(f) => Some(Box::new(f)),
            Err(e) => {
                super::write_err(&format!("error: --events {path}: {e}\n"));
                return 2;
            }
        },
    };
    let metrics = match a.metrics.as_deref() {
        None => None,
        Some(addr) => match std::net::TcpListener::bind(addr) {
            Ok(l) => Some(l),
            Err(e) => {
                super::write_err(&format!("error: --metrics-addr {addr}: {e}\n"));
                return 2;
            }
        },
    };
    let settings = Settings {
        logs: a.logs,
        metrics,
    };
    match supervisor::run(
        run_plan,
        info,
        state_dir,
        EventSink::new(json, !a.quiet),
        settings,
    ) {
        Ok(outcome) if outcome.stopped || outcome.phase == Phase::Succeeded => 0,
        Ok(_) => 1,
        Err(e) => {
            super::write_err(&format!("error: {e}\n"));
            // A busy state dir is a usage problem, like bad input.
            if e.kind() == std::io::ErrorKind::AddrInUse {
                2
            } else {
                1
            }
        }
    }
}

/// A UUID-shaped identifier for this run of the pod (v4 layout, from the clock and pid: it
/// only has to differ between runs).
fn pod_uid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let x = nanos ^ (u128::from(std::process::id()) << 64);
    let h = format!("{x:032x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}
