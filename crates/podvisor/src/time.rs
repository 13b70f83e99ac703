//! Times as podvisor writes them in events and log lines: RFC 3339 in UTC with
//! milliseconds, `2026-11-23T05:39:22.123Z` (jiff's printer).

use std::time::SystemTime;

/// `at` with milliseconds.
pub fn millis_time(at: SystemTime) -> String {
    let mut s = String::with_capacity(24);
    let _ = write_millis_time(at, &mut s);
    s
}

/// `millis_time` into any writer, allocating nothing (the log lines' prefix).
pub fn write_millis_time(at: SystemTime, out: impl jiff::fmt::Write) -> Result<(), jiff::Error> {
    let ts = jiff::Timestamp::try_from(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    MILLIS.print_timestamp(&ts, out)
}

const MILLIS: jiff::fmt::temporal::DateTimePrinter =
    jiff::fmt::temporal::DateTimePrinter::new().precision(Some(3));

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_utc_with_milliseconds() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_412_362_123);
        assert_eq!(millis_time(at), "2026-11-23T05:39:22.123Z");
        assert_eq!(
            millis_time(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(millis_time(leap), "2000-02-29T00:00:00.000Z");
    }
}
