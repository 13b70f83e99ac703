//! Events as SPEC.md describes them: a readable line each on stderr, and with `--events FILE`
//! (or `-` for stdout) one JSON object per line.

use std::io::Write;
use std::time::SystemTime;

use podvisor_core::lifecycle::{Event, EventType};

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
        let time = rfc3339_millis(at);
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
        let mut obj = serde_json::json!({
            "time": time,
            "type": kind,
            "reason": event.reason,
            "object": event.object,
            "message": event.message,
            "restartCount": event.restart_count,
            "stage": event.stage.map(|s| s.as_str()),
        });
        if let Some(code) = event.exit_code {
            obj["exitCode"] = code.into();
        }
        let line = obj.to_string();
        if let Some(out) = &mut self.json {
            // One write per line, so that readers never see half an event.
            let _ = out.write_all(format!("{line}\n").as_bytes());
            let _ = out.flush();
        }
        line
    }
}

/// `2026-11-23T05:39:22.123Z`.
pub fn rfc3339_millis(at: SystemTime) -> String {
    let d = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's method).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_utc_with_milliseconds() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_412_362_123);
        assert_eq!(rfc3339_millis(at), "2026-11-23T05:39:22.123Z");
        assert_eq!(
            rfc3339_millis(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_millis(leap), "2000-02-29T00:00:00.000Z");
    }
}
