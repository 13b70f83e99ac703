//! What a keeper and a supervisor say to each other, and where a keeper's files are.
//!
//! A keeper holds the container instances one run started (`--live-restore`). The run that
//! started it talks to it over two socket pairs made before the fork:
//! - the **control** pair: the run writes `start JSON` (a `StartRequest` on one line), the
//!   keeper starts the container and answers one line, `pid N` once it runs (its exec done),
//!   `errno N` when the exec failed, or `error TEXT` when a step before it did. Only the run
//!   that started a keeper starts containers in it; once that end closes, the keeper starts
//!   nothing more and ends when the last container it holds has exited.
//! - the **events** pair: the keeper writes `exited NAME INSTANCE` once that instance's exit
//!   is recorded (below).
//!
//! In `STATE_DIR/keepers/` a keeper has:
//! - `keeper.PID.sock`, its socket (0600; only root or its own user may connect), there for
//!   as long as the keeper runs. On each connection it writes a hello, `podvisor-keeper
//!   PROTOCOL keeper=PID`, one line `holds NAME INSTANCE PID` per container it holds and a
//!   line `end`; then, on that connection too, `exited NAME INSTANCE` lines. A run that
//!   takes the pod over connects here; it says nothing, and closing its end is all it does.
//! - `NAME.INSTANCE.exit`, an instance's exit, written atomically before `exited` is said:
//!   the first line `podvisor-keeper-exit PROTOCOL`, then `pid N`, `code N` or `signal N`,
//!   `oom 0|1`, `finished MS` (ms since the Unix epoch), and a last line `end`.
//!
//! `PROTOCOL` is a number: a supervisor adopts keepers that speak a version it knows (this
//! one and those before it, `ADOPTS`) and refuses any other with a clear error, touching
//! nothing. It never starts containers in a keeper it did not start, so the start request
//! is only ever read by a keeper of its own release. Version 1 is the first.

use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::process::sys::{BindMount, Exit, PrivateRoot};

/// The protocol this podvisor's keepers speak.
pub const PROTOCOL: u32 = 1;

/// The protocol versions this podvisor adopts.
pub const ADOPTS: std::ops::RangeInclusive<u32> = 1..=PROTOCOL;

/// Lets tests start keepers that speak another version (an older or newer podvisor's).
pub const TEST_PROTOCOL_ENV: &str = "PODVISOR_TEST_KEEPER_PROTOCOL";

/// Lets tests give up on a keeper's answer to a start sooner than a run does (milliseconds).
pub const TEST_START_PATIENCE_ENV: &str = "PODVISOR_TEST_KEEPER_START_PATIENCE_MS";

/// The keepers' directory of a state dir.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("keepers")
}

/// The socket of keeper `pid`.
pub fn socket(state_dir: &Path, pid: i32) -> PathBuf {
    dir(state_dir).join(format!("keeper.{pid}.sock"))
}

/// The keepers' sockets found in a state dir.
pub fn sockets(state_dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir(state_dir))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.starts_with("keeper.") && n.ends_with(".sock"))
        })
        .collect();
    found.sort();
    found
}

/// Its exit record.
pub fn exit_file(container: &str, instance: u32) -> String {
    format!("{container}.{instance}.exit")
}

/// What the run asks its keeper to start: the container's process as the run prepared it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StartRequest {
    pub container: String,
    pub instance: u32,
    pub argv: Vec<String>,
    /// The whole environment, `NAME=value`.
    pub env: Vec<String>,
    pub working_dir: Option<PathBuf>,
    pub working_dir_optional: bool,
    pub mounts: Vec<BindMount>,
    pub root: Option<PrivateRoot>,
    /// The `cgroup.procs` files of the cgroups it joins before exec.
    pub cgroups: Vec<PathBuf>,
    /// The instance cgroup's file that counts OOM kills, if it has one.
    pub oom_file: Option<PathBuf>,
    /// The signals blocked when podvisor started, given back to the container.
    pub blocked: Vec<i32>,
}

/// A keeper's hello: its protocol, its pid and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub protocol: u32,
    pub keeper: i32,
    /// (container, instance, pid)
    pub holds: Vec<(String, u32, i32)>,
}

impl Hello {
    /// The hello as written (with its newlines).
    pub fn encode(&self) -> String {
        let mut s = format!("podvisor-keeper {} keeper={}\n", self.protocol, self.keeper);
        for (name, instance, pid) in &self.holds {
            s.push_str(&format!("holds {name} {instance} {pid}\n"));
        }
        s.push_str("end\n");
        s
    }
}

/// Reads the first line of a hello; `Err` says what is wrong with it.
pub fn parse_greeting(line: &str) -> Result<(u32, i32), String> {
    let mut words = line.split_whitespace();
    if words.next() != Some("podvisor-keeper") {
        return Err(format!("{line:?} is not a podvisor keeper's greeting"));
    }
    let protocol = words
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("{line:?} has no protocol version"))?;
    let keeper = words
        .next()
        .and_then(|w| w.strip_prefix("keeper=")?.parse().ok())
        .ok_or_else(|| format!("{line:?} has no keeper pid"))?;
    Ok((protocol, keeper))
}

/// Reads a `holds NAME INSTANCE PID` line.
pub fn parse_holds(line: &str) -> Result<(String, u32, i32), String> {
    let w: Vec<&str> = line.split(' ').collect();
    match w.as_slice() {
        ["holds", name, instance, pid] => match (instance.parse(), pid.parse()) {
            (Ok(i), Ok(p)) => Ok((name.to_string(), i, p)),
            _ => Err(format!("{line:?} is not a holds line")),
        },
        _ => Err(format!("{line:?} is not a holds line")),
    }
}

/// Reads an `exited NAME INSTANCE` line.
pub fn parse_exited(line: &str) -> Option<(&str, u32)> {
    let rest = line.strip_prefix("exited ")?;
    let (name, instance) = rest.split_once(' ')?;
    Some((name, instance.parse().ok()?))
}

/// A connection read a line at a time, keeping what came after the last whole line (a
/// blocking read of a hello and the non-blocking reads of events after it share it).
#[derive(Debug)]
pub struct Lines {
    pub stream: UnixStream,
    buf: Vec<u8>,
}

impl Lines {
    pub fn new(stream: UnixStream) -> Lines {
        Lines {
            stream,
            buf: Vec::new(),
        }
    }

    /// The next whole line already read, without its newline.
    pub fn take_line(&mut self) -> Option<String> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).take(end).collect();
        Some(String::from_utf8_lossy(&line).into_owned())
    }

    /// Reads once: `Ok(false)` at end of stream. A blocking stream's read timeout (or a
    /// non-blocking stream with nothing to read) is `WouldBlock`.
    pub fn fill(&mut self) -> io::Result<bool> {
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Reads what is there of a non-blocking stream: `false` once it has ended (or failed).
    pub fn fill_ready(&mut self) -> bool {
        match self.fill() {
            Ok(open) => open,
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        }
    }

    /// Blocks for the next line (the stream is blocking); `None` at end of stream, an error
    /// when its read timeout passes first.
    pub fn read_line(&mut self) -> io::Result<Option<String>> {
        loop {
            if let Some(line) = self.take_line() {
                return Ok(Some(line));
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }
}

/// Reads a keeper's hello from `conn` (blocking).
pub fn read_hello(conn: &mut Lines) -> Result<Hello, String> {
    let first = conn
        .read_line()
        .map_err(|e| e.to_string())?
        .ok_or("it closed the connection without a greeting")?;
    let (protocol, keeper) = parse_greeting(&first)?;
    let mut hello = Hello {
        protocol,
        keeper,
        holds: Vec::new(),
    };
    if !ADOPTS.contains(&protocol) {
        // What follows is in a protocol we do not know: not read.
        return Ok(hello);
    }
    loop {
        let line = conn
            .read_line()
            .map_err(|e| e.to_string())?
            .ok_or("its greeting has no last line \"end\"")?;
        if line == "end" {
            return Ok(hello);
        }
        hello.holds.push(parse_holds(&line)?);
    }
}

/// An instance's exit as its keeper recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitNote {
    pub pid: i32,
    pub exit: Exit,
    pub oom_killed: bool,
    /// Milliseconds since the Unix epoch.
    pub finished: u64,
}

impl ExitNote {
    pub fn encode(&self) -> String {
        let how = match self.exit {
            Exit::Code(c) => format!("code {c}"),
            Exit::Signal(s) => format!("signal {s}"),
        };
        format!(
            "podvisor-keeper-exit {PROTOCOL}\npid {}\n{how}\noom {}\nfinished {}\nend\n",
            self.pid,
            u8::from(self.oom_killed),
            self.finished
        )
    }

    /// Reads a record strictly: `Err` names the line that is wrong.
    pub fn decode(text: &str) -> Result<ExitNote, String> {
        let lines: Vec<&str> = text.lines().collect();
        let head = lines.first().copied().unwrap_or_default();
        let version = head
            .strip_prefix("podvisor-keeper-exit ")
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| "line 1: not a keeper's exit record".to_string())?;
        if !ADOPTS.contains(&version) {
            return Err(format!(
                "line 1: written by a keeper of protocol {version}; this podvisor reads {}..={}",
                ADOPTS.start(),
                ADOPTS.end()
            ));
        }
        if lines.last() != Some(&"end") || lines.len() != 6 {
            return Err("it is truncated (no last line \"end\")".into());
        }
        let value = |n: usize, key: &str| -> Result<&str, String> {
            lines[n]
                .strip_prefix(key)
                .and_then(|v| v.strip_prefix(' '))
                .ok_or_else(|| format!("line {}: expected {key}", n + 1))
        };
        let number = |n: usize, v: &str| -> Result<i64, String> {
            v.parse()
                .map_err(|_| format!("line {}: {v:?} is not a number", n + 1))
        };
        let pid = number(1, value(1, "pid")?)? as i32;
        let exit = match (value(2, "code"), value(2, "signal")) {
            (Ok(c), _) => Exit::Code(number(2, c)? as i32),
            (_, Ok(s)) => Exit::Signal(number(2, s)? as i32),
            _ => return Err("line 3: expected code or signal".into()),
        };
        let oom_killed = match value(3, "oom")? {
            "0" => false,
            "1" => true,
            v => return Err(format!("line 4: oom {v:?} is neither 0 nor 1")),
        };
        let finished = number(4, value(4, "finished")?)? as u64;
        Ok(ExitNote {
            pid,
            exit,
            oom_killed,
            finished,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_reads_back_and_a_cut_one_is_refused() {
        for exit in [Exit::Code(3), Exit::Signal(9)] {
            let note = ExitNote {
                pid: 42,
                exit,
                oom_killed: exit == Exit::Signal(9),
                finished: 1_764_000_000_123,
            };
            assert_eq!(ExitNote::decode(&note.encode()), Ok(note));
            let text = note.encode();
            let cut = &text[..text.len() - 4];
            assert!(ExitNote::decode(cut).unwrap_err().contains("truncated"));
        }
        let newer = "podvisor-keeper-exit 9\npid 1\ncode 0\noom 0\nfinished 1\nend\n";
        assert!(ExitNote::decode(newer).unwrap_err().contains("protocol 9"));
        let bad = "podvisor-keeper-exit 1\npid x\ncode 0\noom 0\nfinished 1\nend\n";
        assert_eq!(
            ExitNote::decode(bad),
            Err("line 2: \"x\" is not a number".into())
        );
    }

    #[test]
    fn a_hello_reads_back() {
        let hello = Hello {
            protocol: 1,
            keeper: 10,
            holds: vec![("app".into(), 3, 11), ("side".into(), 0, 12)],
        };
        let (a, b) = UnixStream::pair().unwrap();
        std::io::Write::write_all(
            &mut &a,
            format!("{}exited app 3\n", hello.encode()).as_bytes(),
        )
        .unwrap();
        drop(a);
        let mut conn = Lines::new(b);
        assert_eq!(read_hello(&mut conn), Ok(hello));
        let line = conn.read_line().unwrap().unwrap();
        assert_eq!(parse_exited(&line), Some(("app", 3)));
        assert_eq!(conn.read_line().unwrap(), None);
        assert!(parse_greeting("HTTP/1.1 200 OK").is_err());
        assert!(parse_holds("holds app x 1").is_err());
    }
}
