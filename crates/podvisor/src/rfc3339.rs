//! Times as the Kubernetes API writes them: RFC 3339 in UTC, with milliseconds.

use std::fmt;
use std::time::SystemTime;

/// `2026-11-23T05:39:22.123Z`.
pub fn rfc3339_millis(at: SystemTime) -> String {
    Millis(at).to_string()
}

/// A time written as `rfc3339_millis` writes it, into any writer (the log lines' prefix is
/// written so, with no allocation).
#[derive(Debug, Clone, Copy)]
pub struct Millis(pub SystemTime);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self
            .0
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let secs = d.as_secs();
        let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
        let (y, m, day) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60,
            d.subsec_millis()
        )
    }
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
