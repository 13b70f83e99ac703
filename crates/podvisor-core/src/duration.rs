//! Durations written as Kubernetes and Go write them: `500ms`, `10s`, `1m30s`, `1.5h`.
//!
//! Go's `time.ParseDuration` is the model, minus negative values (a negative wait or grace is
//! always a mistake in our inputs). A bare `0` is accepted, as in Go.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("invalid duration {0:?}: expected a number followed by a unit (ns, us, ms, s, m, h), e.g. 500ms or 1m30s")]
    Invalid(String),
    #[error("invalid duration {input:?}: missing unit after {number:?} (ns, us, ms, s, m, h)")]
    MissingUnit { input: String, number: String },
    #[error("invalid duration {input:?}: unknown unit {unit:?} (ns, us, ms, s, m, h)")]
    UnknownUnit { input: String, unit: String },
    #[error("invalid duration {0:?}: negative durations are not allowed")]
    Negative(String),
    #[error("invalid duration {0:?}: too large")]
    Overflow(String),
}

/// Parses a Go-style duration such as `1m30s` or `250ms`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let s = match s.strip_prefix('+') {
        Some(rest) => rest,
        None if s.starts_with('-') => return Err(DurationError::Negative(input.to_string())),
        None => s,
    };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let invalid = || DurationError::Invalid(input.to_string());
    let mut total_nanos: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..num_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid());
        }
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => {
                return Err(DurationError::MissingUnit {
                    input: input.to_string(),
                    number: number.to_string(),
                })
            }
            other => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_string(),
                    unit: other.to_string(),
                })
            }
        };
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let overflow = || DurationError::Overflow(input.to_string());
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| overflow())?
        };
        let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(overflow)?;
        // Fractions are scaled digit by digit so that `1.5h` is exact; digits below a nanosecond
        // are dropped, as Go does.
        let mut scale = unit_nanos;
        for digit in frac.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(overflow)?;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000)
        .map_err(|_| DurationError::Overflow(input.to_string()))?;
    Ok(Duration::new(secs, (total_nanos % 1_000_000_000) as u32))
}

/// Formats a duration the way Go prints it (`1m30s`, `500ms`, `0s`), for messages and `explain`.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        let (value, unit) = if nanos % 1_000_000 == 0 {
            (nanos / 1_000_000, "ms")
        } else if nanos % 1_000 == 0 {
            (nanos / 1_000, "µs")
        } else {
            (nanos, "ns")
        };
        return format!("{value}{unit}");
    }
    let total_secs = d.as_secs();
    let (h, m, s) = (total_secs / 3600, (total_secs / 60) % 60, total_secs % 60);
    let frac = d.subsec_nanos();
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if frac == 0 {
        out.push_str(&format!("{s}s"));
    } else {
        let digits = format!("{frac:09}");
        out.push_str(&format!("{s}.{}s", digits.trim_end_matches('0')));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_go_parses() {
        let ms = Duration::from_millis;
        let cases: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("500ms", ms(500)),
            ("10s", ms(10_000)),
            ("1m30s", ms(90_000)),
            ("1.5h", ms(5_400_000)),
            ("2h45m", ms(9_900_000)),
            ("1.5s", ms(1_500)),
            (".5s", ms(500)),
            ("100us", Duration::from_micros(100)),
            ("100µs", Duration::from_micros(100)),
            ("7ns", Duration::from_nanos(7)),
            ("+3s", ms(3_000)),
            ("1s500ms", ms(1_500)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input).as_ref(), Ok(want), "input {input:?}");
        }
    }

    #[test]
    fn refuses_with_a_reason() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_duration("10"),
            Err(DurationError::MissingUnit { .. })
        ));
        assert!(matches!(
            parse_duration("10x"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("-1s"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_duration("s"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("1..2s"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
        let msg = parse_duration("10").unwrap_err().to_string();
        assert!(msg.contains("missing unit"), "{msg}");
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(300), "5m0s"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(3_600), "1h0m0s"),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(d), want);
            assert_eq!(parse_duration(want), Ok(d), "round trip {want}");
        }
    }
}
