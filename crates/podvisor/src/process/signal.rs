//! Signal names and numbers as users write them: `TERM`, `SIGTERM`, `15`, `RTMIN+3` (the
//! table is the core's, `podvisor_core::signals`; the real-time range is the C library's).

use podvisor_core::signals;

/// The signals tini accepts for `-p`, spelled as tini spells them (with `SIG`).
pub const TINI_PDEATHSIG_NAMES: &[&str] = &[
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGSYS",
];

/// Parses a signal by name (with or without `SIG`, any case), by number, or as `RTMIN+N` /
/// `RTMAX-N` counted from the C library's real-time range. Returns `None` for anything else,
/// including 0 and numbers past `SIGRTMAX`.
pub fn parse_signal(text: &str) -> Option<i32> {
    signals::parse_with(text, libc::SIGRTMIN(), libc::SIGRTMAX())
}

/// A signal's conventional name (`SIGTERM`, `SIGRTMIN+2`), for messages.
pub fn signal_name(sig: i32) -> String {
    if let Some(name) = signals::named(sig) {
        return name.to_string();
    }
    if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&sig) {
        return format!("SIGRTMIN+{}", sig - libc::SIGRTMIN());
    }
    format!("signal {sig}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_realtime() {
        assert_eq!(parse_signal("TERM"), Some(15));
        assert_eq!(parse_signal("sigterm"), Some(15));
        assert_eq!(parse_signal("SIGQUIT"), Some(3));
        assert_eq!(parse_signal("9"), Some(9));
        assert_eq!(parse_signal("RTMIN"), Some(libc::SIGRTMIN()));
        assert_eq!(parse_signal("RTMIN+2"), Some(libc::SIGRTMIN() + 2));
        assert_eq!(parse_signal("SIGRTMAX-1"), Some(libc::SIGRTMAX() - 1));
        assert_eq!(parse_signal("0"), None);
        assert_eq!(parse_signal("65"), None);
        assert_eq!(parse_signal("NOPE"), None);
        assert_eq!(parse_signal("RTMIN+99"), None);
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(6), "SIGABRT");
        assert_eq!(signal_name(libc::SIGRTMIN() + 1), "SIGRTMIN+1");
    }

    #[test]
    fn every_tini_pdeathsig_name_parses() {
        for name in TINI_PDEATHSIG_NAMES {
            assert!(parse_signal(name).is_some(), "{name}");
        }
    }
}
