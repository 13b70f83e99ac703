//! Signal names and numbers as users write them: `TERM`, `SIGTERM`, `15`, `RTMIN+3`.

/// Linux signal names, without the `SIG` prefix.
const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("IOT", libc::SIGIOT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("POLL", libc::SIGPOLL),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

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

fn rt_min() -> i32 {
    libc::SIGRTMIN()
}

fn rt_max() -> i32 {
    libc::SIGRTMAX()
}

/// Parses a signal by name (with or without `SIG`, any case), by number, or as `RTMIN+N` /
/// `RTMAX-N`. Returns `None` for anything else, including 0 and numbers past `SIGRTMAX`.
pub fn parse_signal(text: &str) -> Option<i32> {
    let upper = text.trim().to_ascii_uppercase();
    if let Ok(n) = upper.parse::<i32>() {
        return (1..=rt_max()).contains(&n).then_some(n);
    }
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some((_, n)) = NAMES.iter().find(|(k, _)| *k == name) {
        return Some(*n);
    }
    let rt = |base: i32, rest: &str, sign: i32| -> Option<i32> {
        let offset: i32 = if rest.is_empty() {
            0
        } else {
            rest.parse().ok()?
        };
        let n = base + sign * offset;
        (rt_min()..=rt_max()).contains(&n).then_some(n)
    };
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return rt(rt_min(), rest.strip_prefix('+').unwrap_or(rest), 1);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return rt(rt_max(), rest.strip_prefix('-').unwrap_or(rest), -1);
    }
    None
}

/// A signal's conventional name (`SIGTERM`, `SIGRTMIN+2`), for messages.
pub fn signal_name(sig: i32) -> String {
    // IOT and POLL are aliases: the first name listed for a number wins.
    if let Some((name, _)) = NAMES.iter().find(|(_, n)| *n == sig) {
        return format!("SIG{name}");
    }
    if (rt_min()..=rt_max()).contains(&sig) {
        return format!("SIGRTMIN+{}", sig - rt_min());
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
