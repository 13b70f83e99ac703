//! Events as docs/events.md lists them: a readable line each on stderr, and with `--events FILE`
//! (or `-` for stdout) one JSON object per line.

use std::io::Write;
use std::time::SystemTime;

use podvisor_core::lifecycle::{Event, EventType};

use crate::status::EventLine;
use crate::time::millis_time;

/// Where events go.
#[derive(Debug)]
pub struct EventSink {
    json: Option<Box<dyn WriteDebug>>,
    human: bool,
}

/// `Write` that can be printed in `Debug` output.
pub trait WriteDebug: Write + std::fmt::Debug {}
impl<T: Write + std::fmt::Debug> WriteDebug for T {}

impl EventSink {
    /// `json`: the `--events` target; `human`: the readable lines on stderr.
    pub fn new(json: Option<Box<dyn WriteDebug>>, human: bool) -> EventSink {
        EventSink { json, human }
    }

    /// Writes the event where it goes and returns its JSON line (without the newline), which
    /// the status API keeps and streams.
    pub fn emit(&mut self, at: SystemTime, event: &Event) -> String {
        let time = millis_time(at);
        let kind = match event.kind {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        if self.human {
            let head = format!(
                "{time}  {kind:<7}  {:<10}  {:<12}  ",
                event.reason, event.object
            );
            // A message of several lines (a log tail) keeps to its column.
            let pad = format!("\n{}", " ".repeat(head.chars().count()));
            let line = format!("{head}{}\n", event.message.replace('\n', &pad));
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
        let line = EventLine {
            time,
            type_: kind.to_string(),
            reason: event.reason.clone(),
            object: event.object.clone(),
            message: event.message.clone(),
            restart_count: event.restart_count,
            stage: event.stage.map(|s| s.as_str().to_string()),
            exit_code: event.exit_code,
        };
        let line = serde_json::to_string(&line).unwrap_or_default();
        if let Some(out) = &mut self.json {
            // One write per line, so that readers never see half an event.
            let _ = out.write_all(format!("{line}\n").as_bytes());
            let _ = out.flush();
        }
        line
    }
}
