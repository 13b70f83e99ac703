//! What a keeper and a supervisor say to each other, and where a keeper's files are.
//!
//! A keeper holds one container instance. In `STATE_DIR/keepers/` it has:
//! - `NAME.INSTANCE.sock`, its socket (0600; only root or its own user may connect), there
//!   for as long as the container runs. On each connection the keeper writes one hello line,
//!   `podvisor-keeper PROTOCOL keeper=PID pid=PID`, and later, when the container has exited
//!   and its exit is recorded, `exited`; then it closes the connection and ends. The
//!   supervisor says nothing; closing its end is all it does.
//! - `NAME.INSTANCE.exit`, the instance's exit, written atomically before `exited` is said:
//!   the first line `podvisor-keeper-exit PROTOCOL`, then `pid N`, `code N` or `signal N`,
//!   `oom 0|1`, `finished MS` (ms since the Unix epoch), and a last line `end`.
//!
//! `PROTOCOL` is a number: a supervisor adopts keepers that speak a version it knows (this
//! one and those before it, `ADOPTS`) and refuses any other with a clear error, touching
//! nothing. Version 1 is the first.

use std::path::{Path, PathBuf};

use crate::process::sys::Exit;

/// The protocol this podvisor's keepers speak.
pub const PROTOCOL: u32 = 1;

/// The protocol versions this podvisor adopts.
pub const ADOPTS: std::ops::RangeInclusive<u32> = 1..=PROTOCOL;

/// Lets tests start keepers that speak another version (an older or newer podvisor's).
pub const TEST_PROTOCOL_ENV: &str = "PODVISOR_TEST_KEEPER_PROTOCOL";

/// The keepers' directory of a state dir.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("keepers")
}

/// The socket of the keeper of `container`'s instance `instance`.
pub fn socket(state_dir: &Path, container: &str, instance: u32) -> PathBuf {
    dir(state_dir).join(format!("{container}.{instance}.sock"))
}

/// Its exit record.
pub fn exit_file(container: &str, instance: u32) -> String {
    format!("{container}.{instance}.exit")
}

/// The hello line a keeper writes on each connection (with its newline).
pub fn hello(protocol: u32, keeper: i32, pid: i32) -> String {
    format!("podvisor-keeper {protocol} keeper={keeper} pid={pid}\n")
}

/// A keeper's hello, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub protocol: u32,
    pub keeper: i32,
    pub pid: i32,
}

/// Reads a hello line; `Err` says what is wrong with it.
pub fn parse_hello(line: &str) -> Result<Hello, String> {
    let mut words = line.split_whitespace();
    if words.next() != Some("podvisor-keeper") {
        return Err(format!("{line:?} is not a podvisor keeper's greeting"));
    }
    let protocol = words
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("{line:?} has no protocol version"))?;
    let mut field = |key: &str| -> Result<i32, String> {
        words
            .next()
            .and_then(|w| w.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{line:?} has no {key}"))
    };
    Ok(Hello {
        protocol,
        keeper: field("keeper")?,
        pid: field("pid")?,
    })
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
        let h = parse_hello(hello(1, 10, 11).trim_end()).unwrap();
        assert_eq!(
            h,
            Hello {
                protocol: 1,
                keeper: 10,
                pid: 11
            }
        );
        assert!(parse_hello("HTTP/1.1 200 OK").is_err());
    }
}
