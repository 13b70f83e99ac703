//! Events as docs/events.md lists them: a readable line each on stderr, and with `--events FILE`
//! (or `-` for stdout) one JSON object per line.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use podvisor_core::lifecycle::{Event, EventType};

use crate::status::EventLine;
use crate::time::millis_time;

/// Where events go.
#[derive(Debug)]
pub struct EventSink {
    json: Option<Box<dyn WriteDebug>>,
    human: bool,
    kept: Option<Kept>,
}

/// `Write` that can be printed in `Debug` output.
pub trait WriteDebug: Write + std::fmt::Debug {}
impl<T: Write + std::fmt::Debug> WriteDebug for T {}

impl EventSink {
    /// `json`: the `--events` target; `human`: the readable lines on stderr.
    pub fn new(json: Option<Box<dyn WriteDebug>>, human: bool) -> EventSink {
        EventSink {
            json,
            human,
            kept: None,
        }
    }

    /// Keeps every event from now on in `path` too (`events.jsonl` of the state dir, JSON
    /// lines, appended), so that `events` shows them once the run has ended, however it ended.
    /// Past `KEPT_BYTES` the file is moved to `path.1` (the one before is dropped).
    pub fn keep_in(&mut self, path: &Path) -> std::io::Result<()> {
        self.kept = Some(Kept::open(path)?);
        Ok(())
    }

    /// Writes the event where it goes and returns its JSON line (without the newline), which
    /// the status API keeps and streams.
    pub fn emit(&mut self, at: SystemTime, event: &Event) -> String {
        let kind = match event.kind {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let line = EventLine {
            time: millis_time(at),
            type_: kind.to_string(),
            reason: event.reason.clone(),
            object: event.object.clone(),
            message: event.message.clone(),
            restart_count: event.restart_count,
            stage: event.stage.map(|s| s.as_str().to_string()),
            exit_code: event.exit_code,
        };
        if self.human {
            let _ = std::io::stderr().write_all(line.text().as_bytes());
        }
        let line = serde_json::to_string(&line).unwrap_or_default();
        let whole = format!("{line}\n");
        if let Some(out) = &mut self.json {
            // One write per line, so that readers never see half an event.
            let _ = out.write_all(whole.as_bytes());
            let _ = out.flush();
        }
        if let Some(kept) = &mut self.kept {
            kept.append(&whole);
        }
        line
    }
}

/// Past this size the kept events file is moved aside (`events.jsonl.1`) and begun again.
const KEPT_BYTES: u64 = 1 << 20;

/// The state dir's events file.
#[derive(Debug)]
struct Kept {
    path: PathBuf,
    file: std::fs::File,
    bytes: u64,
}

impl Kept {
    fn open(path: &Path) -> std::io::Result<Kept> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        let bytes = file.metadata()?.len();
        Ok(Kept {
            path: path.to_path_buf(),
            file,
            bytes,
        })
    }

    /// Appends a line (one write: a reader never sees half of it); a failure loses this line
    /// only (the API and stderr still have it).
    fn append(&mut self, line: &str) {
        if self.bytes + line.len() as u64 > KEPT_BYTES {
            let aside = crate::state::StateDir::rotated_events(&self.path);
            if std::fs::rename(&self.path, aside).is_ok() {
                if let Ok(fresh) = Kept::open(&self.path) {
                    *self = fresh;
                }
            }
        }
        if self.file.write_all(line.as_bytes()).is_ok() {
            self.bytes += line.len() as u64;
        }
    }
}
