//! Protocol 1, the first release's, as lines of text: what a run reads of a keeper of that
//! release (its hello, `exited` lines, exit notes), and what a keeper told to speak it writes.
//!
//! - hello: `podvisor-keeper 1 keeper=PID`, one `holds NAME INSTANCE PID` line per container
//!   it holds, and a line `end`;
//! - `exited NAME INSTANCE`;
//! - exit note: `podvisor-keeper-exit 1`, then `pid N`, `code N` or `signal N`, `oom 0|1`,
//!   `finished MS` and a last line `end`.
//!
//! Start requests and their answers were never read across releases, and are not here.

use std::io;

use super::{ExitNote, Held, Hello, InstanceName, Message};
use crate::process::sys::Exit;

/// How a protocol 1 hello starts.
pub(super) const GREETING: &str = "podvisor-keeper ";

/// How a protocol 1 exit note starts.
pub(super) const EXIT_MAGIC: &str = "podvisor-keeper-exit ";

/// A hello or an `exited` line; `None` for a message protocol 1 did not write as text.
pub(super) fn encode(message: &Message) -> Option<String> {
    match message {
        Message::Hello(h) => {
            let mut s = format!("{GREETING}{} keeper={}\n", h.protocol, h.keeper);
            for held in &h.holds {
                s.push_str(&format!(
                    "holds {} {} {}\n",
                    held.container, held.instance, held.pid
                ));
            }
            s.push_str("end\n");
            Some(s)
        }
        Message::Exited(i) => Some(format!("exited {} {}\n", i.container, i.instance)),
        _ => None,
    }
}

/// An `exited NAME INSTANCE` line.
pub(super) fn decode(line: &str) -> Result<Message, String> {
    let parsed = line.strip_prefix("exited ").and_then(|rest| {
        let (name, instance) = rest.split_once(' ')?;
        Some(InstanceName {
            container: name.to_string(),
            instance: instance.parse().ok()?,
        })
    });
    parsed
        .map(Message::Exited)
        .ok_or_else(|| format!("{line:?} is not an exited line"))
}

/// A hello whose greeting is `first`, its holds lines read with `next_line`.
pub(super) fn read_hello(
    first: &str,
    mut next_line: impl FnMut() -> io::Result<Option<String>>,
) -> Result<Hello, String> {
    let mut words = first.split_whitespace().skip(1);
    let protocol = words
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("{first:?} has no protocol version"))?;
    let keeper = words
        .next()
        .and_then(|w| w.strip_prefix("keeper=")?.parse().ok())
        .ok_or_else(|| format!("{first:?} has no keeper pid"))?;
    let mut hello = Hello {
        protocol,
        keeper,
        holds: Vec::new(),
    };
    if protocol != 1 {
        // What follows is in a protocol we do not know: not read.
        return Ok(hello);
    }
    loop {
        let line = next_line()
            .map_err(|e| e.to_string())?
            .ok_or("its greeting has no last line \"end\"")?;
        if line == "end" {
            return Ok(hello);
        }
        let w: Vec<&str> = line.split(' ').collect();
        let held = match w.as_slice() {
            ["holds", name, instance, pid] => match (instance.parse(), pid.parse()) {
                (Ok(instance), Ok(pid)) => Held {
                    container: name.to_string(),
                    instance,
                    pid,
                },
                _ => return Err(format!("{line:?} is not a holds line")),
            },
            _ => return Err(format!("{line:?} is not a holds line")),
        };
        hello.holds.push(held);
    }
}

pub(super) fn encode_exit_note(note: &ExitNote) -> String {
    let how = match note.exit {
        Exit::Code(c) => format!("code {c}"),
        Exit::Signal(s) => format!("signal {s}"),
    };
    format!(
        "{EXIT_MAGIC}1\npid {}\n{how}\noom {}\nfinished {}\nend\n",
        note.pid,
        u8::from(note.oom_killed),
        note.finished
    )
}

/// Reads a protocol 1 note strictly: `Err` names the line that is wrong.
pub(super) fn decode_exit_note(text: &str) -> Result<ExitNote, String> {
    let lines: Vec<&str> = text.lines().collect();
    let head = lines.first().copied().unwrap_or_default();
    let version = head
        .strip_prefix(EXIT_MAGIC)
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| "line 1: not a keeper's exit note".to_string())?;
    if version != 1 {
        return Err(format!(
            "line 1: written by a keeper of protocol {version}, which did not write text"
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
