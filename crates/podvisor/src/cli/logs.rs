//! `podvisor logs [POD] CONTAINER | POD [-c CONTAINER] [--previous] [-f] [--tail N] [--timestamps] [--since DUR]`, with
//! `kubectl logs`' meaning, read straight from the instance log files in the state dir (so it
//! also works after the run has ended). Which instance is "current" and which "previous" comes
//! from the running pod's status when there is one, as the kubelet decides it: a container
//! waiting to restart shows its last instance for both.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ContainerStatus;

use super::exit_code;
use super::manifest::duration;
use crate::client::{self, ClientError};
use crate::process::sys;
use crate::state::logs::{file_name, instance_files, instances, last_lines};
use crate::state::StateDir;
use crate::status::print::{container_statuses, now_secs, parse_time};
use crate::status::ApiPod;

/// `podvisor logs`' arguments.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The pod's state dir (default: found by POD under the default base)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The pod's namespace
    #[arg(short, long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The container (then the first argument is the pod)
    #[arg(short, long, value_name = "NAME")]
    container: Option<String>,
    /// The previous instance (the one that ended before the current one)
    #[arg(short, long)]
    previous: bool,
    /// Keep printing new output until the instance ends or the pod stops
    #[arg(short, long)]
    follow: bool,
    /// Only the last N lines (-1: all, as kubectl)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    tail: Option<i64>,
    /// Prefix each line with its RFC 3339 time
    #[arg(long)]
    timestamps: bool,
    /// Only lines newer than DUR (5s, 2m, 1h)
    #[arg(long, value_name = "DUR", value_parser = duration)]
    since: Option<Duration>,
    /// `CONTAINER` of the only pod, or `POD` (`NAME` or `NAMESPACE/NAME`, running or ended;
    /// its container: -c, else its default one)
    #[arg(value_name = "POD|CONTAINER")]
    first: String,
    /// The container, after POD
    #[arg(value_name = "CONTAINER")]
    second: Option<String>,
}

struct Args {
    dir: PathBuf,
    container: String,
    previous: bool,
    follow: bool,
    tail: Option<usize>,
    timestamps: bool,
    since: Option<Duration>,
}

pub fn main(a: LogsArgs) -> i32 {
    let (dir, container) = match target(&a) {
        Ok(t) => t,
        Err(e) => return exit_code(Err(e)),
    };
    exit_code(run(Args {
        dir,
        container,
        previous: a.previous,
        follow: a.follow,
        // kubectl: -1 (the default) means all lines.
        tail: a.tail.filter(|n| *n >= 0).map(|n| n as usize),
        timestamps: a.timestamps,
        since: a.since,
    }))
}

/// The state dir and container, as kubectl reads its arguments: `POD CONTAINER`, `POD -c
/// CONTAINER`; one word alone is a container of the only pod if it has one of that name, else
/// a pod (with its default container).
fn target(a: &LogsArgs) -> Result<(PathBuf, String), ClientError> {
    let ns = a.namespace.as_deref();
    let named = |pod: &str, container: Option<&String>| {
        let dir = client::find_pod(a.state_dir.clone(), Some(pod), ns)?;
        let container = match container {
            Some(c) => c.clone(),
            None => default_container(&dir)?,
        };
        Ok((dir, container))
    };
    if a.second.is_some() || a.container.is_some() {
        return named(&a.first, a.second.as_ref().or(a.container.as_ref()));
    }
    let only = client::find_pod(a.state_dir.clone(), None, ns);
    if let Ok(dir) = &only {
        if StateDir::new(dir).container_logs(&a.first).is_dir() || a.state_dir.is_some() {
            return Ok((dir.clone(), a.first.clone()));
        }
    }
    match named(&a.first, None) {
        Ok(found) => Ok(found),
        // Neither a pod of that name nor a container of the only pod: say it of the pod.
        Err(e) => match only {
            Ok(dir) => Ok((dir, a.first.clone())),
            Err(_) => Err(e),
        },
    }
}

/// kubectl's default container of the pod in `dir`.
fn default_container(dir: &Path) -> Result<String, ClientError> {
    let pod = read_pod(dir).ok_or_else(|| {
        ClientError(format!(
            "{}: no pod to read its containers from; name the container with -c",
            dir.display()
        ))
    })?;
    client::default_container(&pod)
}

/// The pod: from its run, or as it ended.
fn read_pod(dir: &Path) -> Option<ApiPod> {
    client::pod_text(dir)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

fn run(a: Args) -> Result<(), ClientError> {
    let dir = a.dir.clone();
    let state = StateDir::new(&dir);
    // The pod's view, running or ended: valid names, and whether the container waits.
    let status: Option<ApiPod> = client::pod_text(&dir)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let pod_name = status
        .as_ref()
        .and_then(|s| s.metadata.name.clone())
        .unwrap_or_else(|| state.name());
    let logs = state.container_logs(&a.container);
    let container_status: Option<ContainerStatus> = status.as_ref().and_then(|s| {
        container_statuses(s)
            .find(|c| c.name == a.container)
            .cloned()
    });
    if let Some(s) = &status {
        if container_status.is_none() {
            let names: Vec<&str> = container_statuses(s).map(|c| c.name.as_str()).collect();
            return Err(ClientError(format!(
                "container {} is not valid for pod {pod_name}; choose one of: [{}]",
                a.container,
                names.join(" ")
            )));
        }
    } else if !logs.is_dir() {
        return Err(ClientError(format!(
            "container {} is not valid for pod {pod_name} (no logs in {})",
            a.container,
            logs.display()
        )));
    }
    let have = instances(&logs);
    let waiting_reason = container_status
        .as_ref()
        .and_then(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| w.reason.clone().unwrap_or_default());
    let waiting = waiting_reason.is_some();
    let latest = have.last().copied();
    let instance = match (a.previous, latest) {
        (_, None) => {
            // One that could not start at all (StartError) left no output.
            let terminated =
                (container_status.as_ref()).and_then(|c| c.state.as_ref()?.terminated.as_ref());
            if let Some(t) = terminated {
                return Err(ClientError(format!(
                    "container {:?} in pod {pod_name:?} never ran: {}: {}",
                    a.container,
                    t.reason.as_deref().unwrap_or("Terminated"),
                    t.message.as_deref().unwrap_or_default()
                )));
            }
            let reason = waiting_reason.unwrap_or_else(|| "ContainerCreating".into());
            return Err(ClientError(format!(
                "container {:?} in pod {pod_name:?} is waiting to start: {reason}",
                a.container
            )));
        }
        // Waiting to restart: the last instance is both current and previous (lastState).
        (true, Some(n)) if waiting => n,
        (true, Some(n)) => match have.iter().rev().find(|&&i| i < n) {
            Some(&p) => p,
            None => {
                return Err(ClientError(format!(
                    "previous terminated container {:?} in pod {pod_name:?} not found",
                    a.container
                )))
            }
        },
        (false, Some(n)) => n,
    };
    let since = a.since.map(|d| now_secs() - d.as_secs_f64());
    let out = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 20, out.lock());
    let mut printer = Printer {
        timestamps: a.timestamps,
        since,
    };
    let files = instance_files(&logs, instance);
    // Bytes of the current file already printed, where following goes on.
    let result = match a.tail {
        Some(n) => tail(&files, n, &mut printer, &mut out),
        None => (|| {
            let mut last = 0;
            for f in &files {
                last = print_file(f, &mut printer, &mut out)?;
            }
            Ok(last)
        })(),
    };
    let offset = match result.and_then(|o| out.flush().map(|_| o)) {
        Ok(o) => o,
        Err(e) => return broken_pipe_ok(e),
    };
    if a.follow && !a.previous && Some(instance) == latest {
        if let Err(e) = follow(&state, &logs, instance, offset, &mut printer, &mut out) {
            return broken_pipe_ok(e);
        }
    }
    Ok(())
}

fn broken_pipe_ok(e: io::Error) -> Result<(), ClientError> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Ok(())
    } else {
        Err(ClientError(format!("writing the logs: {e}")))
    }
}

struct Printer {
    timestamps: bool,
    since: Option<f64>,
}

impl Printer {
    /// One CRI line (`TIME STREAM F|P TEXT\n`) as kubectl prints it.
    fn line(&mut self, line: &[u8], out: &mut impl Write) -> io::Result<()> {
        let mut parts = line.splitn(4, |&b| b == b' ');
        let (Some(time), Some(_stream), Some(tag), Some(text)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Ok(()); // not a log line (a torn write is finished on the next read)
        };
        if let Some(since) = self.since {
            let t = std::str::from_utf8(time).ok().and_then(parse_time);
            if t.is_some_and(|t| t < since) {
                return Ok(());
            }
        }
        if self.timestamps {
            out.write_all(time)?;
            out.write_all(b" ")?;
        }
        if tag == b"P" {
            // A partial line continues in the next record.
            out.write_all(text.strip_suffix(b"\n").unwrap_or(text))
        } else {
            out.write_all(text)
        }
    }
}

/// Prints a whole file; returns how many bytes were read (for following).
fn print_file(path: &Path, p: &mut Printer, out: &mut impl Write) -> io::Result<u64> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    print_from(&mut BufReader::with_capacity(1 << 20, file), p, out)
}

/// Prints the complete lines a reader has; returns the bytes consumed.
fn print_from(r: &mut impl BufRead, p: &mut Printer, out: &mut impl Write) -> io::Result<u64> {
    let mut used = 0u64;
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            // End, or a line still being written: it will be read whole next time.
            return Ok(used);
        }
        used += n as u64;
        p.line(&line, out)?;
    }
}

/// Prints the last `n` lines of the files; returns the bytes of complete lines in the last.
fn tail(files: &[PathBuf], n: usize, p: &mut Printer, out: &mut impl Write) -> io::Result<u64> {
    let (last, used) = last_lines(files, n)?;
    for line in last {
        p.line(&line, out)?;
    }
    Ok(used)
}

/// Follows the current instance's file from `offset` until a newer instance appears or the
/// run ends (its lock file is closed). Sleeps in inotify meanwhile: no CPU while nothing is
/// written.
fn follow(
    state: &StateDir,
    logs: &Path,
    instance: u32,
    offset: u64,
    p: &mut Printer,
    out: &mut impl Write,
) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut ino = sys::Inotify::new()?;
    ino.watch(logs, sys::IN_MODIFY | sys::IN_CREATE | sys::IN_MOVED_TO)?;
    let lock = state.lock_path();
    let lock_wd = ino.watch(&lock, sys::IN_CLOSE_WRITE).ok();
    let path = logs.join(file_name(instance));
    let mut f = File::open(&path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut file = BufReader::with_capacity(1 << 20, f);
    let running = || sys::lock_is_held(&lock).unwrap_or(false);
    // Whatever came between the first read and the watches.
    print_from(&mut file, p, out)?;
    out.flush()?;
    if !running() {
        return Ok(());
    }
    loop {
        let events = ino.read()?;
        print_from(&mut file, p, out)?;
        let mut done = false;
        for (wd, mask, name) in events {
            if Some(wd) == lock_wd && mask & sys::IN_CLOSE_WRITE != 0 && !running() {
                done = true;
            }
            if mask & (sys::IN_CREATE | sys::IN_MOVED_TO) != 0 {
                if name == file_name(instance) {
                    // Rotated: the old file was read to its end above; go on in the new one.
                    file = BufReader::with_capacity(1 << 20, File::open(&path)?);
                    print_from(&mut file, p, out)?;
                } else if name
                    .strip_suffix(".log")
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n > instance)
                {
                    done = true; // the container restarted: this instance has ended
                }
            }
        }
        out.flush()?;
        if done {
            print_from(&mut file, p, out)?;
            return out.flush();
        }
    }
}
