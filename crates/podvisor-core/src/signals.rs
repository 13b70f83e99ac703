//! Linux signal names and numbers, one table for every face: as the Kubernetes API and the
//! runtimes write them (`SIGTERM`, `SIGRTMIN+1`; an image's `STOPSIGNAL` may also say `TERM`
//! or `15`), parsed as runtimes parse them (moby's signal map: the real-time signals from
//! glibc's `SIGRTMIN`, 34), and as users of `podvisor init` write them (`-s`, `-p`), where the
//! real-time signals count from the C library's `SIGRTMIN` at run time (`parse_with`).

/// The stop signal when neither the container nor its image names one.
pub const DEFAULT_STOP_SIGNAL: &str = "SIGTERM";

/// The named signals of Linux.
const NAMED: [(&str, i32); 34] = [
    ("SIGABRT", 6),
    ("SIGALRM", 14),
    ("SIGBUS", 7),
    ("SIGCHLD", 17),
    ("SIGCLD", 17),
    ("SIGCONT", 18),
    ("SIGFPE", 8),
    ("SIGHUP", 1),
    ("SIGILL", 4),
    ("SIGINT", 2),
    ("SIGIO", 29),
    ("SIGIOT", 6),
    ("SIGKILL", 9),
    ("SIGPIPE", 13),
    ("SIGPOLL", 29),
    ("SIGPROF", 27),
    ("SIGPWR", 30),
    ("SIGQUIT", 3),
    ("SIGSEGV", 11),
    ("SIGSTKFLT", 16),
    ("SIGSTOP", 19),
    ("SIGSYS", 31),
    ("SIGTERM", 15),
    ("SIGTRAP", 5),
    ("SIGTSTP", 20),
    ("SIGTTIN", 21),
    ("SIGTTOU", 22),
    ("SIGURG", 23),
    ("SIGUSR1", 10),
    ("SIGUSR2", 12),
    ("SIGVTALRM", 26),
    ("SIGWINCH", 28),
    ("SIGXCPU", 24),
    ("SIGXFSZ", 25),
];

const RTMIN: i32 = 34;
const RTMAX: i32 = 64;

/// The stop signals a Linux pod may name (the API server's `supportedStopSignalsLinux`), in
/// its order: the named ones, then `SIGRTMIN`, `SIGRTMIN+1` … `+15`, `SIGRTMAX-14` … `-1`,
/// `SIGRTMAX`.
pub fn linux_stop_signals() -> Vec<String> {
    let mut all: Vec<String> = NAMED.iter().map(|(n, _)| n.to_string()).collect();
    all.push("SIGRTMIN".into());
    all.extend((1..=15).map(|i| format!("SIGRTMIN+{i}")));
    all.extend((1..=14).rev().map(|i| format!("SIGRTMAX-{i}")));
    all.push("SIGRTMAX".into());
    all
}

/// The number of signal `name` (`SIGQUIT`, `QUIT`, `3`, `SIGRTMIN+2`), if Linux has it, with
/// the runtimes' real-time range (34 to 64).
pub fn number(name: &str) -> Option<i32> {
    parse_with(name, RTMIN, RTMAX)
}

/// The number of signal `name` (any case, with or without `SIG`, surrounding spaces allowed),
/// by number, or as `RTMIN+N` / `RTMAX-N` counted from `rtmin` and `rtmax`; `None` for
/// anything else, 0 and numbers past `rtmax` included.
pub fn parse_with(name: &str, rtmin: i32, rtmax: i32) -> Option<i32> {
    let upper = name.trim().to_ascii_uppercase();
    if let Ok(n) = upper.parse::<i32>() {
        return (1..=rtmax).contains(&n).then_some(n);
    }
    let full = match upper.starts_with("SIG") {
        true => upper,
        false => format!("SIG{upper}"),
    };
    if let Some((_, n)) = NAMED.iter().find(|(s, _)| *s == full) {
        return Some(*n);
    }
    let rt = |rest: &str, base: i32, sign: i32| -> Option<i32> {
        let n = match rest {
            "" => 0,
            _ => rest.parse::<i32>().ok()?,
        };
        let n = base + sign * n;
        (rtmin..=rtmax).contains(&n).then_some(n)
    };
    match (full.strip_prefix("SIGRTMIN"), full.strip_prefix("SIGRTMAX")) {
        (Some(rest), _) => rt(rest.strip_prefix('+').unwrap_or(rest), rtmin, 1),
        (_, Some(rest)) => rt(rest.strip_prefix('-').unwrap_or(rest), rtmax, -1),
        _ => None,
    }
}

/// The name of a named signal (`SIGTERM`; the first of aliases), if it is one.
pub fn named(n: i32) -> Option<&'static str> {
    NAMED.iter().find(|(_, m)| *m == n).map(|(name, _)| *name)
}

/// The API's name of signal number `n` (the first name it has).
pub fn name_of(n: i32) -> String {
    if let Some(name) = named(n) {
        return name.to_string();
    }
    match n {
        RTMIN => "SIGRTMIN".into(),
        RTMAX => "SIGRTMAX".into(),
        n if n > RTMIN && n <= RTMIN + 15 => format!("SIGRTMIN+{}", n - RTMIN),
        n if n < RTMAX && n > RTMIN + 15 => format!("SIGRTMAX-{}", RTMAX - n),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_as_runtimes_parse_them() {
        assert_eq!(number("SIGTERM"), Some(15));
        assert_eq!(number("QUIT"), Some(3));
        assert_eq!(number("sigusr1"), Some(10));
        assert_eq!(number("9"), Some(9));
        assert_eq!(number("SIGRTMIN"), Some(34));
        assert_eq!(number("SIGRTMIN+3"), Some(37));
        assert_eq!(number("SIGRTMAX-1"), Some(63));
        assert_eq!(number("SIGRTMAX"), Some(64));
        assert_eq!(number("SIGRTMIN+40"), None);
        assert_eq!(number("SIGNOPE"), None);
        assert_eq!(number("0"), None);
        let all = linux_stop_signals();
        assert_eq!(all.len(), 65);
        for name in &all {
            let n = number(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(number(&name_of(n)), Some(n), "{name}");
        }
        assert_eq!(name_of(35), "SIGRTMIN+1");
        assert_eq!(name_of(60), "SIGRTMAX-4");
    }
}
