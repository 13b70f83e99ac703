//! What must survive podvisor's own death: restart counts, exits, stages, verdicts, backoff,
//! restart windows and whole-pod restarts, with the times they depend on, and the text format
//! they are saved in.
//!
//! A leaf shared by `podvisor run` (a `PodRecord`) and `podvisor init --supervision` (an
//! `InitRecord`); the PID 1 build links it too, so the format is our own few lines of text
//! rather than a serde format. Times are milliseconds on the run's clock, which the shell
//! anchors to the Unix epoch, so a record still means the same after a reboot.
//!
//! The format is strict: a header with the format version and kind, one `key value` line per
//! field, and a last line with a checksum of everything before it. A truncated file (no
//! checksum line), a corrupt one (checksum mismatch), an unknown key, a bad value or a newer
//! format is refused with the line and field; nothing is ever guessed or defaulted.

use std::fmt::Write as _;

use crate::stage::{Stage, Verdict};

/// The format this podvisor writes and reads.
pub const FORMAT: u32 = 1;

const MAGIC: &str = "podvisor-state";

/// Why a saved record cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("it is not a podvisor state file (its first line is not \"{MAGIC} {FORMAT} KIND\")")]
    NotState,
    #[error("it was written by a newer podvisor (format {found}; this one reads format {FORMAT})")]
    Newer { found: u32 },
    #[error("it holds the state of a {found}, not of a {expected}")]
    Kind {
        found: String,
        expected: &'static str,
    },
    #[error("it ends before its checksum line: the file is truncated")]
    Truncated,
    #[error("its checksum does not match its contents: the file is corrupt")]
    Checksum,
    #[error("line {line}: field {field}: {message}")]
    Field {
        line: usize,
        field: String,
        message: String,
    },
}

/// The whole pod of a `podvisor run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRecord {
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    /// When the pod was created (first run on this state dir).
    pub created: u64,
    /// When this record was written, and by which podvisor process.
    pub saved: u64,
    pub saved_by: u32,
    /// The kernel's boot id when it was written: process ids mean nothing across a reboot.
    pub boot: String,
    pub pod_restarts: u32,
    /// In-place restarts of every container (`RestartAllContainers` rules) so far.
    pub restarts_all: u32,
    /// A `RestartAllContainers` teardown was under way (condition `AllContainersRestarting`).
    pub restarting_all: bool,
    /// Set when the pod ended by itself (`Succeeded`, `Failed`): the next run is a new pod.
    pub ended: Option<String>,
    pub containers: Vec<ContainerRecord>,
}

/// One container of a `PodRecord`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRecord {
    pub name: String,
    pub restart_count: u32,
    pub instance: u32,
    pub next: NextRecord,
    pub stage: Option<Stage>,
    pub disabled_at: Option<u32>,
    pub verdict: Option<Verdict>,
    pub ever_started: bool,
    /// The CrashLoopBackOff entry: (current delay, last update), in ms.
    pub backoff: Option<(u64, u64)>,
    /// Restart times since the last whole-pod restart.
    pub window: Vec<u64>,
    pub state: StateRecord,
    pub last: Option<ExitRecord>,
    /// The process of the running instance (the shell fills it in).
    pub process: Option<ProcessRecord>,
}

/// What starts the container next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextRecord {
    First,
    Policy,
}

/// The container's state, in short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRecord {
    Waiting,
    /// Running (or being started) since.
    Running(u64),
    Terminated(ExitRecord),
}

/// One exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitRecord {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started: Option<u64>,
    pub finished: u64,
}

/// A process, identified so that a reused pid is never mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRecord {
    pub pid: i32,
    /// Its start time in clock ticks since boot (/proc/PID/stat, field 22).
    pub start_ticks: u64,
}

/// What `podvisor init --supervision` keeps in its state dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitRecord {
    /// Container starts counted so far.
    pub starts: u32,
}

impl PodRecord {
    pub fn encode(&self) -> String {
        let mut o = String::with_capacity(256 + 200 * self.containers.len());
        let _ = writeln!(o, "{MAGIC} {FORMAT} pod");
        let _ = writeln!(o, "pod {}", self.pod);
        let _ = writeln!(o, "uid {}", self.uid);
        let _ = writeln!(o, "created {}", self.created);
        let _ = writeln!(o, "saved {}", self.saved);
        let _ = writeln!(o, "saved-by {}", self.saved_by);
        let _ = writeln!(o, "boot {}", self.boot);
        let _ = writeln!(o, "pod-restarts {}", self.pod_restarts);
        if self.restarts_all > 0 {
            let _ = writeln!(o, "restarts-all {}", self.restarts_all);
        }
        if self.restarting_all {
            let _ = writeln!(o, "restarting-all");
        }
        if let Some(e) = &self.ended {
            let _ = writeln!(o, "ended {e}");
        }
        for c in &self.containers {
            let _ = writeln!(o, "container {}", c.name);
            let _ = writeln!(o, "restarts {}", c.restart_count);
            let _ = writeln!(o, "instance {}", c.instance);
            let next = match c.next {
                NextRecord::First => "first",
                NextRecord::Policy => "policy",
            };
            let _ = writeln!(o, "next {next}");
            if let Some(s) = c.stage {
                let _ = writeln!(o, "stage {s}");
            }
            if let Some(n) = c.disabled_at {
                let _ = writeln!(o, "disabled-at {n}");
            }
            if let Some(v) = c.verdict {
                let _ = writeln!(o, "verdict {}", v.as_str());
            }
            if c.ever_started {
                let _ = writeln!(o, "ever-started yes");
            }
            if let Some((delay, at)) = c.backoff {
                let _ = writeln!(o, "backoff {delay} {at}");
            }
            if !c.window.is_empty() {
                let times: Vec<String> = c.window.iter().map(u64::to_string).collect();
                let _ = writeln!(o, "window {}", times.join(" "));
            }
            match &c.state {
                StateRecord::Waiting => o.push_str("state waiting\n"),
                StateRecord::Running(since) => {
                    let _ = writeln!(o, "state running {since}");
                }
                StateRecord::Terminated(e) => {
                    o.push_str("state terminated\n");
                    exit_lines(&mut o, "state", e);
                }
            }
            if let Some(e) = &c.last {
                exit_lines(&mut o, "last", e);
            }
            if let Some(p) = c.process {
                let _ = writeln!(o, "process {} {}", p.pid, p.start_ticks);
            }
        }
        seal(o)
    }

    pub fn decode(text: &str) -> Result<PodRecord, RecordError> {
        let lines = open(text, "pod")?;
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
                r.containers.push(ContainerRecord::named(f.word(value)?));
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

impl ContainerRecord {
    /// A container's record before its fields are read.
    fn named(name: &str) -> ContainerRecord {
        ContainerRecord {
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
}

impl InitRecord {
    pub fn encode(&self) -> String {
        seal(format!("{MAGIC} {FORMAT} init\nstarts {}\n", self.starts))
    }

    pub fn decode(text: &str) -> Result<InitRecord, RecordError> {
        let mut starts = None;
        for (n, key, value) in open(text, "init")? {
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
}

fn exit_lines(o: &mut String, prefix: &str, e: &ExitRecord) {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let _ = writeln!(
        o,
        "{prefix}-exit {} {} {} {} {}",
        e.exit_code,
        opt(e.signal.map(|s| s.to_string())),
        e.reason,
        opt(e.started.map(|s| s.to_string())),
        e.finished
    );
    if let Some(m) = &e.message {
        let _ = writeln!(o, "{prefix}-message {}", escape(m));
    }
}

/// Appends the checksum line.
fn seal(mut body: String) -> String {
    let sum = checksum(body.as_bytes());
    let _ = writeln!(body, "checksum {sum:016x}");
    body
}

/// Checks the header, the kind and the checksum; returns the (line number, key, value) of
/// each field line.
fn open<'a>(
    text: &'a str,
    kind: &'static str,
) -> Result<Vec<(usize, &'a str, &'a str)>, RecordError> {
    let mut lines = text.split_inclusive('\n');
    let header = lines.next().ok_or(RecordError::NotState)?;
    let mut words = header.trim_end_matches('\n').split(' ');
    if words.next() != Some(MAGIC) {
        return Err(RecordError::NotState);
    }
    let version: u32 = words
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or(RecordError::NotState)?;
    if version > FORMAT {
        return Err(RecordError::Newer { found: version });
    }
    if version != FORMAT {
        return Err(RecordError::NotState);
    }
    let found = words.next().unwrap_or("");
    if found != kind {
        return Err(RecordError::Kind {
            found: found.to_string(),
            expected: kind,
        });
    }
    let mut offset = header.len();
    let mut out = Vec::new();
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        let Some(content) = line.strip_suffix('\n') else {
            return Err(RecordError::Truncated);
        };
        let (key, value) = content.split_once(' ').unwrap_or((content, ""));
        if key == "checksum" {
            let want = format!("{:016x}", checksum(&text.as_bytes()[..offset]));
            if value != want {
                return Err(RecordError::Checksum);
            }
            if offset + line.len() != text.len() {
                return Err(RecordError::Checksum);
            }
            return Ok(out);
        }
        offset += line.len();
        out.push((n, key, value));
    }
    Err(RecordError::Truncated)
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

/// FNV-1a, 64 bits: enough to tell a torn or edited file from the one podvisor wrote.
fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            _ => o.push(ch),
        }
    }
    o
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PodRecord {
        PodRecord {
            pod: "ns/web".into(),
            uid: "0b1c".into(),
            created: 1_795_000_000_000,
            saved: 1_795_000_100_000,
            saved_by: 4242,
            boot: "d1e5-77".into(),
            pod_restarts: 2,
            restarts_all: 3,
            restarting_all: true,
            ended: None,
            containers: vec![
                ContainerRecord {
                    name: "app".into(),
                    restart_count: 7,
                    instance: 8,
                    next: NextRecord::Policy,
                    stage: Some(Stage::Disabled),
                    disabled_at: Some(6),
                    verdict: Some(Verdict::Blamed),
                    ever_started: true,
                    backoff: Some((40_000, 1_795_000_090_000)),
                    window: vec![1, 2, 3],
                    state: StateRecord::Terminated(ExitRecord {
                        exit_code: 137,
                        signal: Some(9),
                        reason: "Error".into(),
                        message: Some("two\nlines \\ and a backslash".into()),
                        started: Some(10),
                        finished: 20,
                    }),
                    last: Some(ExitRecord {
                        exit_code: 128,
                        signal: None,
                        reason: "StartError".into(),
                        message: None,
                        started: None,
                        finished: 5,
                    }),
                    process: None,
                },
                ContainerRecord {
                    name: "side".into(),
                    restart_count: 0,
                    instance: 1,
                    next: NextRecord::First,
                    stage: None,
                    disabled_at: None,
                    verdict: None,
                    ever_started: false,
                    backoff: None,
                    window: vec![],
                    state: StateRecord::Running(33),
                    last: None,
                    process: Some(ProcessRecord {
                        pid: 77,
                        start_ticks: 123_456,
                    }),
                },
            ],
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = sample();
        let text = r.encode();
        assert!(
            text.starts_with("podvisor-state 1 pod\npod ns/web\n"),
            "{text}"
        );
        assert_eq!(PodRecord::decode(&text), Ok(r));
        let mut ended = sample();
        ended.ended = Some("Failed".into());
        assert_eq!(PodRecord::decode(&ended.encode()), Ok(ended));
        let init = InitRecord { starts: 9 };
        assert_eq!(InitRecord::decode(&init.encode()), Ok(init));
    }

    #[test]
    fn truncated_corrupt_and_newer_files_are_refused() {
        let text = sample().encode();
        // Any cut short of the whole file.
        for cut in [10, text.len() / 2, text.len() - 1] {
            let e = PodRecord::decode(&text[..cut]).unwrap_err();
            assert!(
                matches!(e, RecordError::Truncated | RecordError::NotState),
                "cut at {cut}: {e:?}"
            );
        }
        assert_eq!(PodRecord::decode(""), Err(RecordError::NotState));
        // One byte changed.
        let edited = text.replacen("restarts 7", "restarts 1", 1);
        assert_eq!(PodRecord::decode(&edited), Err(RecordError::Checksum));
        // Something after the checksum.
        assert_eq!(
            PodRecord::decode(&format!("{text}extra\n")),
            Err(RecordError::Checksum)
        );
        let newer = text.replacen("podvisor-state 1", "podvisor-state 2", 1);
        assert_eq!(
            PodRecord::decode(&newer),
            Err(RecordError::Newer { found: 2 })
        );
        assert_eq!(
            newer_message(),
            "it was written by a newer podvisor (format 2; this one reads format 1)"
        );
        assert!(matches!(
            InitRecord::decode(&text),
            Err(RecordError::Kind { .. })
        ));
    }

    fn newer_message() -> String {
        RecordError::Newer { found: 2 }.to_string()
    }

    #[test]
    fn bad_fields_name_their_line_and_field() {
        let body = "podvisor-state 1 pod\npod ns/web\nuid u\ncreated x\nsaved 1\nboot b\n";
        let e = PodRecord::decode(&seal(body.into())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 4: field created: \"x\" is not a number"
        );
        let body = "podvisor-state 1 pod\npod ns/web\nuid u\ncreated 1\nsaved 1\nboot b\ncontainer a\ncolour blue\n";
        let e = PodRecord::decode(&seal(body.into())).unwrap_err();
        assert_eq!(e.to_string(), "line 8: field colour: unknown field");
        let body = "podvisor-state 1 pod\npod ns/web\ncreated 1\nsaved 1\nboot b\n";
        let e = PodRecord::decode(&seal(body.into())).unwrap_err();
        assert_eq!(e.to_string(), "line 1: field uid: missing");
    }
}
