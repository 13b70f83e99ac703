//! A container's termination message (`terminationMessagePath`, `terminationMessagePolicy`),
//! as the kubelet makes it: a file bound at the path in each instance, read when the instance
//! ends into `state.terminated.message`; under `FallbackToLogsOnError`, an instance that
//! failed and left the file empty gets the end of its log instead.
//!
//! The limits are the kubelet's (pkg/kubelet/container/runtime.go): the last 4 KiB of the
//! file, the last 80 lines of the log and of those the last 2 KiB.

/// The path the API server gives a container that names none.
pub const DEFAULT_PATH: &str = "/dev/termination-log";

/// At most this much of the file's end is the message.
pub const MAX_FILE_BYTES: usize = 4 * 1024;

/// From the log: at most this many of its last lines ...
pub const MAX_LOG_LINES: usize = 80;

/// ... and of them at most this much of their end.
pub const MAX_LOG_BYTES: usize = 2 * 1024;

/// Where a container's termination message comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct TerminationMessage {
    /// Where the file is bound in the container (absolute).
    pub path: String,
    /// `FallbackToLogsOnError` (else `File`).
    pub fallback_to_logs: bool,
}

impl Default for TerminationMessage {
    fn default() -> TerminationMessage {
        TerminationMessage {
            path: DEFAULT_PATH.to_string(),
            fallback_to_logs: false,
        }
    }
}

impl TerminationMessage {
    /// The manifest's fields, defaulted as the API server defaults them.
    pub fn of(path: Option<&str>, policy: Option<&str>) -> TerminationMessage {
        TerminationMessage {
            path: path
                .filter(|p| !p.is_empty())
                .unwrap_or(DEFAULT_PATH)
                .to_string(),
            fallback_to_logs: policy == Some("FallbackToLogsOnError"),
        }
    }

    /// Whether an instance that ended with `exit_code`, whose file gave `from_file` (`None`:
    /// there was no file), takes its message from the end of its log: only under
    /// `FallbackToLogsOnError`, only for a failure, and only if the file said nothing.
    pub fn needs_logs(&self, exit_code: i32, from_file: Option<&str>) -> bool {
        self.fallback_to_logs && exit_code != 0 && from_file.is_none_or(str::is_empty)
    }
}

/// The last `max` bytes of `bytes` as text (a character cut at the start becomes U+FFFD, as
/// the kubelet's message, read by bytes, shows it once encoded).
pub fn tail(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(max)..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_api_servers() {
        let t = TerminationMessage::of(None, None);
        assert_eq!(t.path, "/dev/termination-log");
        assert!(!t.fallback_to_logs);
        let t = TerminationMessage::of(Some("/tmp/why"), Some("FallbackToLogsOnError"));
        assert_eq!(t.path, "/tmp/why");
        assert!(t.fallback_to_logs);
        let default = TerminationMessage::default();
        assert_eq!(TerminationMessage::of(Some(""), Some("File")), default);
    }

    #[test]
    fn the_logs_stand_in_only_for_a_failure_that_left_no_message() {
        let file = TerminationMessage::of(None, Some("File"));
        let fallback = TerminationMessage::of(None, Some("FallbackToLogsOnError"));
        assert!(!file.needs_logs(1, None));
        assert!(!file.needs_logs(1, Some("")));
        assert!(fallback.needs_logs(1, None));
        assert!(fallback.needs_logs(137, Some("")));
        assert!(!fallback.needs_logs(1, Some("why")));
        assert!(!fallback.needs_logs(0, None));
        assert!(!fallback.needs_logs(0, Some("")));
    }

    #[test]
    fn the_tail_keeps_the_end() {
        assert_eq!(tail(b"abcdef", 4), "cdef");
        assert_eq!(tail(b"ab", 4), "ab");
        assert_eq!(tail(b"", 4), "");
        // "é" is two bytes: cut in the middle, its second byte stands alone.
        assert_eq!(tail("xé".as_bytes(), 1), "\u{fffd}");
    }
}
