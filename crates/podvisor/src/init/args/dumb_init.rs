//! The `dumb-init` persona's command line (dumb-init 1.2.5): long options with prefixes,
//! `-r s:r` rewrites, dumb-init's messages and exit codes.

use super::getopt::{Getopt, GetoptError, Opt};
use super::*;

/// dumb-init's option string `+hvVcr:` (the `+`: the first operand ends the options) and its
/// long options.
const DUMB_INIT_SHORTS: &[(char, bool)] = &[
    ('h', false),
    ('v', false),
    ('V', false),
    ('c', false),
    ('r', true),
];
const DUMB_INIT_LONGS: &[(&str, bool)] = &[
    ("help", false),
    ("single-child", false),
    ("rewrite", true),
    ("verbose", false),
    ("version", false),
];

fn dumb_init_help(prog: &str) -> String {
    format!(
        "dumb-init v{DUMB_INIT_VERSION}\n\
         Usage: {prog} [option] command [[arg] ...]\n\n\
         dumb-init is a simple process supervisor that forwards signals to children.\n\
         It is designed to run as PID1 in minimal container environments.\n\n\
         Optional arguments:\n\
         \x20  -c, --single-child   Run in single-child mode.\n\
         \x20                       In this mode, signals are only proxied to the\n\
         \x20                       direct child and not any of its descendants.\n\
         \x20  -r, --rewrite s:r    Rewrite received signal s to new signal r before proxying.\n\
         \x20                       To ignore (not proxy) a signal, rewrite it to 0.\n\
         \x20                       This option can be specified multiple times.\n\
         \x20  -v, --verbose        Print debugging information to stderr.\n\
         \x20  -h, --help           Print this help message and exit.\n\
         \x20  -V, --version        Print the current version and exit.\n\n\
         Full help is available online at https://github.com/Yelp/dumb-init\n"
    )
}

pub(super) const DUMB_INIT_REWRITE_HELP: &str = "\
Usage: -r option takes <signum>:<signum>, where <signum> is between 1 and 31.
This option can be specified multiple times.
Use --help for full usage.
";

/// dumb-init's `%d:%d` for `-r`: both numbers, the first 1..31, the second 0..31.
fn parse_dumb_rewrite(v: &str) -> Option<(i32, i32)> {
    fn leading_int(s: &str) -> Option<(i32, &str)> {
        let s = s.trim_start();
        let sign_len = usize::from(s.starts_with(['+', '-']));
        let digits = s[sign_len..].bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let end = sign_len + digits;
        Some((s[..end].parse().ok()?, &s[end..]))
    }
    let (from, rest) = leading_int(v)?;
    let (to, _) = leading_int(rest.strip_prefix(':')?)?;
    ((1..=31).contains(&from) && (0..=31).contains(&to)).then_some((from, to))
}

/// dumb-init parses with getopt_long("+hvVcr:"): options stop at the first operand.
pub(super) fn parse_dumb_init(
    prog: &str,
    args: &[OsString],
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Config, Early> {
    let mut c = Config::new(Persona::DumbInit);
    c.verbosity = 0;
    c.new_session = true;
    let try_help = |prefix: String| {
        Early::err(
            format!("{prefix}Usage: {prog} [option] program [args]\nTry {prog} --help for full usage.\n"),
            1,
        )
    };
    // getopt reports a bad option itself; dumb-init then just exits 1.
    let getopt_error = |msg: String| Early::err(msg, 1);
    let mut rewrites = Vec::new();
    let mut opts = Getopt::new(args, DUMB_INIT_SHORTS, DUMB_INIT_LONGS, false);
    for opt in opts.by_ref() {
        let opt = opt.map_err(|e| {
            getopt_error(match e {
                GetoptError::Invalid(ch) => format!("{prog}: invalid option -- '{ch}'\n"),
                GetoptError::MissingShort(ch) => {
                    format!("{prog}: option requires an argument -- '{ch}'\n")
                }
                GetoptError::UnknownLong(name) => {
                    format!("{prog}: unrecognized option '--{name}'\n")
                }
                GetoptError::Ambiguous(name) => format!("{prog}: option '--{name}' is ambiguous\n"),
                GetoptError::MissingLong(name) => {
                    format!("{prog}: option '--{name}' requires an argument\n")
                }
            })
        })?;
        match opt {
            Opt::Short('h', _) | Opt::Long("help", _) => {
                return Err(Early::err(dumb_init_help(prog), 0))
            }
            Opt::Short('V', _) | Opt::Long("version", _) => {
                return Err(Early::err(format!("dumb-init v{DUMB_INIT_VERSION}"), 0))
            }
            Opt::Short('v', _) | Opt::Long("verbose", _) => c.verbosity = 1,
            Opt::Short('c', _) | Opt::Long("single-child", _) => c.new_session = false,
            Opt::Short(_, value) | Opt::Long(_, value) => rewrites.push(
                parse_dumb_rewrite(&value.unwrap_or_default())
                    .ok_or_else(|| Early::err(DUMB_INIT_REWRITE_HELP.to_string(), 1))?,
            ),
        }
    }
    let command = opts.operands();
    if command.is_empty() {
        return Err(try_help(String::new()));
    }
    c.command = command;
    // dumb-init says these two only when they come from the environment (`-v` and `-c` are
    // silent), each at debug level: the second is said after `-v` too.
    if env("DUMB_INIT_DEBUG").is_some_and(|v| v == "1") {
        c.verbosity = 1;
        c.debug_at_start.push("Running in debug mode.");
    }
    if env("DUMB_INIT_SETSID").is_some_and(|v| v == "0") {
        c.new_session = false;
        c.debug_at_start.push("Not running in setsid mode.");
    }
    c.signal_group = c.new_session;
    c.on_child_exit = OnChildExit::TermGroupAndExit;
    // In setsid mode dumb-init turns job-control stops into SIGSTOP for the children (a new
    // session has no terminal job control of its own) unless the user rewrote them.
    if c.new_session {
        for sig in [libc::SIGTSTP, libc::SIGTTOU, libc::SIGTTIN] {
            if !rewrites.iter().any(|(from, _)| *from == sig) {
                c.rewrite.push((sig, libc::SIGSTOP));
            }
        }
    }
    c.rewrite.extend(rewrites);
    Ok(c)
}
