//! The `tini` persona's command line (tini 0.19.0): glibc getopt's order, tini's messages and
//! exit codes.

use super::getopt::{Getopt, GetoptError, Opt};
use super::*;
use crate::process::signal::TINI_PDEATHSIG_NAMES;

/// tini's option string: `hsvwglp:e:`.
const TINI_SHORTS: &[(char, bool)] = &[
    ('h', false),
    ('s', false),
    ('v', false),
    ('w', false),
    ('g', false),
    ('l', false),
    ('p', true),
    ('e', true),
];

fn tini_usage(prog: &str) -> String {
    format!(
        "{prog} (tini version {TINI_VERSION})\n\
         Usage: {prog} [OPTIONS] PROGRAM -- [ARGS] | --version\n\n\
         Execute a program under the supervision of a valid init process ({prog})\n\n\
         Command line options:\n\n\
         \x20 --version: Show version and exit.\n\
         \x20 -h: Show this help message and exit.\n\
         \x20 -s: Register as a process subreaper (requires Linux >= 3.4).\n\
         \x20 -p SIGNAL: Trigger SIGNAL when parent dies, e.g. \"-p SIGKILL\".\n\
         \x20 -v: Generate more verbose output. Repeat up to 3 times.\n\
         \x20 -w: Print a warning when processes are getting reaped.\n\
         \x20 -g: Send signals to the child's process group.\n\
         \x20 -e EXIT_CODE: Remap EXIT_CODE (from 0 to 255) to 0.\n\
         \x20 -l: Show license and exit.\n\n\
         Environment variables:\n\n\
         \x20 TINI_SUBREAPER: Register as a process subreaper (requires Linux >= 3.4).\n\
         \x20 TINI_VERBOSITY: Set the verbosity level (default: 1).\n\
         \x20 TINI_KILL_PROCESS_GROUP: Send signals to the child's process group.\n\n"
    )
}

/// tini's fatal-message shape.
pub fn tini_fatal(msg: &str) -> String {
    format!("[FATAL tini ({})] {msg}\n", crate::process::sys::getpid())
}

/// tini parses with glibc's getopt("p:hvwgle:s"), which moves options found after the program
/// name to the front unless POSIXLY_CORRECT is set or `--` ends them. We reproduce that, so
/// `tini cmd -v` still means what it means under tini.
pub(super) fn parse_tini(
    argv0: &str,
    args: &[OsString],
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Config, Early> {
    // getopt names the program as invoked; tini's usage text uses its basename.
    let prog = argv0.rsplit('/').next().unwrap_or(argv0);
    let mut c = Config::new(Persona::Tini);
    if args.len() == 1 && args[0] == "--version" {
        return Err(Early::out(format!(
            "tini version {TINI_VERSION} - podvisor {}\n",
            env!("CARGO_PKG_VERSION")
        )));
    }
    // getopt permutes operands after options unless POSIXLY_CORRECT says not to.
    let permute = env("POSIXLY_CORRECT").is_none();
    let mut opts = Getopt::new(args, TINI_SHORTS, &[], permute);
    for opt in opts.by_ref() {
        let (ch, value) = match opt {
            Ok(Opt::Short(ch, value)) => (ch, value),
            Err(GetoptError::MissingShort(ch)) => {
                return Err(Early::err(
                    format!(
                        "{argv0}: option requires an argument -- '{ch}'\n{}",
                        tini_usage(prog)
                    ),
                    1,
                ))
            }
            // (tini has no long options: `--x` is read as the letters `-x`.)
            other => {
                let other = match other {
                    Err(GetoptError::Invalid(ch)) => ch,
                    _ => '-',
                };
                return Err(Early::err(
                    format!("{argv0}: invalid option -- '{other}'\n{}", tini_usage(prog)),
                    1,
                ));
            }
        };
        match (ch, value) {
            ('h', _) => return Err(Early::out(tini_usage(prog))),
            ('s', _) => c.subreaper = true,
            ('v', _) => c.verbosity += 1,
            ('w', _) => c.warn_on_reap = true,
            ('g', _) => c.signal_group = true,
            ('l', _) => return Err(Early::out(TINI_LICENSE.to_string())),
            ('p', Some(value)) => {
                if !TINI_PDEATHSIG_NAMES.contains(&value.as_str()) {
                    return Err(Early::err(
                        tini_fatal(&format!("Not a valid option for -p: {value}")),
                        1,
                    ));
                }
                c.parent_death_signal = parse_signal(&value);
            }
            (_, value) => match value.as_deref().map(str::parse::<u8>) {
                Some(Ok(code)) => c.expect_zero.push(code),
                _ => {
                    return Err(Early::err(
                        tini_fatal(&format!(
                            "Not a valid option for -e: {}",
                            value.unwrap_or_default()
                        )),
                        1,
                    ))
                }
            },
        }
    }
    let operands = opts.operands();
    if operands.is_empty() {
        return Err(Early::err(tini_usage(prog), 1));
    }
    c.command = operands;
    // tini treats these as set when present at all, whatever their value.
    if env("TINI_SUBREAPER").is_some() {
        c.subreaper = true;
    }
    if env("TINI_KILL_PROCESS_GROUP").is_some() {
        c.signal_group = true;
    }
    if let Some(v) = env("TINI_VERBOSITY") {
        // atoi: leading digits, anything else is 0.
        let s = v.to_string_lossy();
        let digits: String = s
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        c.verbosity = digits.parse().unwrap_or(0);
    }
    Ok(c)
}

const TINI_LICENSE: &str = "\
tini is distributed under the MIT license; this is podvisor's reimplementation of its command
line, distributed under the Apache License 2.0.
";
