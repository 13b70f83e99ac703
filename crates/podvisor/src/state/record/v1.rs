//! Format 1 of the saved record, the first release's: one `key value` line per field, read
//! strictly (an unknown key or a bad value is refused with its line and field). Only read:
//! what is written is format 2.

use podvisor_core::record::{
    ContainerRecord, ExitRecord, InitRecord, NextRecord, PodRecord, ProcessRecord, StateRecord,
};
use podvisor_core::stage::{Stage, Verdict};

use super::RecordError;

/// The (line number, key, value) of each line of a format 1 body (which starts on line 2).
pub(super) fn fields(body: &str) -> Vec<(usize, &str, &str)> {
    body.lines()
        .enumerate()
        .map(|(i, line)| {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            (i + 2, key, value)
        })
        .collect()
}

pub(super) fn pod(lines: Vec<(usize, &str, &str)>) -> Result<PodRecord, RecordError> {
    let mut r = PodRecord {
        pod: String::new(),
        uid: String::new(),
        created: 0,
        saved: 0,
        saved_by: 0,
        boot: String::new(),
        pod_restarts: 0,
        restarts_all: 0,
        restarting_all: false,
        ended: None,
        containers: Vec::new(),
    };
    let mut seen: Vec<&str> = Vec::new();
    for (n, key, value) in lines {
        let f = Fields { line: n, key };
        if key == "container" {
            r.containers.push(named(f.word(value)?));
            continue;
        }
        let Some(c) = r.containers.last_mut() else {
            pod_field(&mut r, &f, key, value)?;
            seen.push(key);
            continue;
        };
        container_field(c, &f, key, value)?;
    }
    for required in ["pod", "uid", "created", "saved", "boot"] {
        if !seen.contains(&required) {
            return Err(RecordError::Field {
                line: 1,
                field: required.to_string(),
                message: "missing".to_string(),
            });
        }
    }
    Ok(r)
}

/// A pod-level field of a pod record.
fn pod_field(r: &mut PodRecord, f: &Fields<'_>, key: &str, value: &str) -> Result<(), RecordError> {
    match key {
        "pod" => r.pod = f.word(value)?.to_string(),
        "uid" => r.uid = f.word(value)?.to_string(),
        "created" => r.created = f.num(value)?,
        "saved" => r.saved = f.num(value)?,
        "saved-by" => r.saved_by = f.num(value)?,
        "boot" => r.boot = f.word(value)?.to_string(),
        "pod-restarts" => r.pod_restarts = f.num(value)?,
        "restarts-all" => r.restarts_all = f.num(value)?,
        "restarting-all" if value.is_empty() => r.restarting_all = true,
        "restarting-all" => return Err(f.bad("takes no value")),
        "ended" => r.ended = Some(f.word(value)?.to_string()),
        _ => return Err(f.bad("unknown field")),
    }
    Ok(())
}

/// A field of the container record being read.
fn container_field(
    c: &mut ContainerRecord,
    f: &Fields<'_>,
    key: &str,
    value: &str,
) -> Result<(), RecordError> {
    match key {
        "restarts" => c.restart_count = f.num(value)?,
        "instance" => c.instance = f.num(value)?,
        "next" => {
            c.next = match value {
                "first" => NextRecord::First,
                "policy" => NextRecord::Policy,
                _ => return Err(f.bad(&format!("{value:?} is not first or policy"))),
            }
        }
        "stage" => {
            c.stage = Some(
                Stage::parse(value).ok_or_else(|| f.bad(&format!("{value:?} is not a stage")))?,
            )
        }
        "disabled-at" => c.disabled_at = Some(f.num(value)?),
        "verdict" => {
            c.verdict = Some(
                Verdict::parse(value)
                    .ok_or_else(|| f.bad(&format!("{value:?} is not a verdict")))?,
            )
        }
        "ever-started" => c.ever_started = value == "yes",
        "backoff" => {
            let v = f.nums::<u64>(value, 2)?;
            c.backoff = Some((v[0], v[1]));
        }
        "window" => c.window = f.nums(value, usize::MAX)?,
        "state" => {
            let mut words = value.split(' ');
            c.state = match (words.next(), words.next(), words.next()) {
                (Some("waiting"), None, _) => StateRecord::Waiting,
                (Some("running"), Some(at), None) => StateRecord::Running(f.num(at)?),
                (Some("terminated"), None, _) => StateRecord::Terminated(ExitRecord {
                    exit_code: 0,
                    signal: None,
                    reason: String::new(),
                    message: None,
                    started: None,
                    finished: 0,
                }),
                _ => return Err(f.bad(&format!("{value:?} is not a state"))),
            }
        }
        "state-exit" => match &mut c.state {
            StateRecord::Terminated(e) => *e = f.exit(value)?,
            _ => return Err(f.bad("an exit for a state that is not terminated")),
        },
        "state-message" => match &mut c.state {
            StateRecord::Terminated(e) => e.message = Some(unescape(value)),
            _ => return Err(f.bad("a message for a state that is not terminated")),
        },
        "last-exit" => c.last = Some(f.exit(value)?),
        "last-message" => match &mut c.last {
            Some(e) => e.message = Some(unescape(value)),
            None => return Err(f.bad("a message before its exit")),
        },
        "process" => {
            let v = f.nums::<u64>(value, 2)?;
            let pid = i32::try_from(v[0]).map_err(|_| f.bad("pid out of range"))?;
            c.process = Some(ProcessRecord {
                pid,
                start_ticks: v[1],
            });
        }
        _ => return Err(f.bad("unknown field")),
    }
    Ok(())
}

/// A container's record before its fields are read.
fn named(name: &str) -> ContainerRecord {
    ContainerRecord {
        skipped: 0,
        name: name.to_string(),
        restart_count: 0,
        instance: 0,
        next: NextRecord::Policy,
        stage: None,
        disabled_at: None,
        verdict: None,
        ever_started: false,
        backoff: None,
        window: Vec::new(),
        state: StateRecord::Waiting,
        last: None,
        process: None,
    }
}

pub(super) fn init(lines: Vec<(usize, &str, &str)>) -> Result<InitRecord, RecordError> {
    let mut starts = None;
    for (n, key, value) in lines {
        let f = Fields { line: n, key };
        match key {
            "starts" => starts = Some(f.num(value)?),
            _ => return Err(f.bad("unknown field")),
        }
    }
    Ok(InitRecord {
        starts: starts.ok_or(RecordError::Field {
            line: 1,
            field: "starts".into(),
            message: "missing".into(),
        })?,
    })
}

/// One field line being read.
struct Fields<'a> {
    line: usize,
    key: &'a str,
}

impl Fields<'_> {
    fn bad(&self, message: &str) -> RecordError {
        RecordError::Field {
            line: self.line,
            field: self.key.to_string(),
            message: message.to_string(),
        }
    }

    fn word<'v>(&self, value: &'v str) -> Result<&'v str, RecordError> {
        if value.is_empty() || value.contains(' ') {
            return Err(self.bad("expected one word"));
        }
        Ok(value)
    }

    fn num<T: std::str::FromStr>(&self, value: &str) -> Result<T, RecordError> {
        value
            .parse()
            .map_err(|_| self.bad(&format!("{value:?} is not a number")))
    }

    /// Space-separated numbers: exactly `n` of them, or any number for `usize::MAX`.
    fn nums<T: std::str::FromStr>(&self, value: &str, n: usize) -> Result<Vec<T>, RecordError> {
        let v: Vec<T> = value
            .split(' ')
            .map(|w| self.num(w))
            .collect::<Result<_, _>>()?;
        if n != usize::MAX && v.len() != n {
            return Err(self.bad(&format!("expected {n} numbers")));
        }
        Ok(v)
    }

    /// `CODE SIGNAL|- REASON STARTED|- FINISHED`.
    fn exit(&self, value: &str) -> Result<ExitRecord, RecordError> {
        let w: Vec<&str> = value.split(' ').collect();
        let [code, signal, reason, started, finished] = w[..] else {
            return Err(self.bad("expected CODE SIGNAL REASON STARTED FINISHED"));
        };
        let opt = |v: &str| -> Result<Option<u64>, RecordError> {
            if v == "-" {
                Ok(None)
            } else {
                self.num(v).map(Some)
            }
        };
        Ok(ExitRecord {
            exit_code: self.num(code)?,
            signal: opt(signal)?.map(|s| s as i32),
            reason: self.word(reason)?.to_string(),
            message: None,
            started: opt(started)?,
            finished: self.num(finished)?,
        })
    }
}

fn unescape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            o.push(ch);
            continue;
        }
        match chars.next() {
            Some('n') => o.push('\n'),
            Some('r') => o.push('\r'),
            Some(other) => o.push(other),
            None => o.push('\\'),
        }
    }
    o
}
