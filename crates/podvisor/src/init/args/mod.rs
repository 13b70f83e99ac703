//! Command lines of the three faces of PID 1 mode: `podvisor init`, and the `tini` and
//! `dumb-init` personas (chosen by `argv[0]`) that accept those programs' command lines,
//! environment variables, defaults, messages and exit codes unchanged.
//!
//! Parsing is pure: it takes the arguments and a lookup for environment variables and returns
//! either a `Config` or what to print and the exit code, so every persona is table-tested.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use podvisor_core::duration::parse_duration;

use super::staged::StagedArgs;
use crate::process::signal::parse_signal;

mod dumb_init;
mod getopt;
mod tini;

use dumb_init::parse_dumb_init;
use tini::parse_tini;
pub use tini::tini_fatal;

/// The tini release whose command line the `tini` persona reproduces.
pub const TINI_VERSION: &str = "0.19.0";
/// The dumb-init release whose command line the `dumb-init` persona reproduces.
pub const DUMB_INIT_VERSION: &str = "1.2.5";
/// Default grace for `--kill-descendants` without a value.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// Which program's command line, messages and exit codes we reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persona {
    Podvisor,
    Tini,
    DumbInit,
}

/// What happens when the main child exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChildExit {
    /// Exit at once; whatever still runs is left behind (tini; as PID 1 the kernel then kills
    /// the rest of the PID namespace).
    Exit,
    /// Send SIGTERM (through the rewrite table) to the child's process group, then exit
    /// (dumb-init).
    TermGroupAndExit,
    /// SIGTERM every remaining descendant, wait up to the grace, SIGKILL what is left, and exit
    /// once none remains.
    KillDescendants(Duration),
    /// Wait until every descendant has exited on its own.
    WaitAll,
}

/// Everything PID 1 mode needs to run, whatever the persona.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub persona: Persona,
    pub command: Vec<OsString>,
    pub subreaper: bool,
    /// Forward signals to the child's process group (`-g`, dumb-init's default) rather than to
    /// the child alone.
    pub signal_group: bool,
    /// dumb-init's setsid mode: the child leads a new session; job-control signals also stop
    /// podvisor itself.
    pub new_session: bool,
    pub parent_death_signal: Option<i32>,
    pub verbosity: u32,
    pub warn_on_reap: bool,
    /// Exit codes of the child that are reported as 0 (`-e`).
    pub expect_zero: Vec<u8>,
    /// `rewrite[n]`: what a received signal `n` becomes; `Some(0)` drops it.
    pub rewrite: Vec<(i32, i32)>,
    pub stop_delay: Option<Duration>,
    pub on_child_exit: OnChildExit,
    /// Staged instrumentation (`--supervision`, podvisor persona only).
    pub staged: Option<StagedArgs>,
    /// Debug lines that reading the command line and environment gave, said once it is done
    /// (dumb-init's "Running in debug mode." when `DUMB_INIT_DEBUG=1` turned debugging on).
    pub debug_at_start: Vec<&'static str>,
}

impl Config {
    fn new(persona: Persona) -> Config {
        Config {
            persona,
            command: Vec::new(),
            subreaper: false,
            signal_group: false,
            new_session: false,
            parent_death_signal: None,
            verbosity: 1,
            warn_on_reap: false,
            expect_zero: Vec::new(),
            rewrite: Vec::new(),
            stop_delay: None,
            staged: None,
            on_child_exit: OnChildExit::Exit,
            debug_at_start: Vec::new(),
        }
    }

    /// The signal a received `sig` is forwarded as; 0 means it is dropped.
    pub fn translate(&self, sig: i32) -> i32 {
        self.rewrite
            .iter()
            .rev()
            .find(|(from, _)| *from == sig)
            .map_or(sig, |(_, to)| *to)
    }
}

/// Parsing did not produce a config: print `stdout` and `stderr` as they are, exit with `code`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Early {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl Early {
    fn out(text: String) -> Early {
        Early {
            stdout: text,
            stderr: String::new(),
            code: 0,
        }
    }
    fn err(text: String, code: i32) -> Early {
        Early {
            stdout: String::new(),
            stderr: text,
            code,
        }
    }
}

/// Picks the persona from the name the binary was started as.
pub fn persona_for(argv0: &OsStr) -> Option<Persona> {
    let path = std::path::Path::new(argv0);
    match path.file_name()?.to_str()? {
        "tini" | "tini-static" => Some(Persona::Tini),
        "dumb-init" => Some(Persona::DumbInit),
        _ => None,
    }
}

/// Parses a persona's arguments (without `argv[0]`). `env` looks up environment variables.
pub fn parse(
    persona: Persona,
    prog: &str,
    args: &[OsString],
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Config, Early> {
    match persona {
        Persona::Podvisor => parse_podvisor(args, env),
        Persona::Tini => parse_tini(prog, args, env),
        Persona::DumbInit => parse_dumb_init(prog, args, env),
    }
}

// ---------------------------------------------------------------------------------------------
// podvisor init

const PODVISOR_USAGE: &str = "\
Usage: podvisor init [OPTIONS] [--] COMMAND [ARGS]...

Runs COMMAND as the child of an init process: reaps zombies, forwards signals, and exits with the
child's exit code (128+N if it died of signal N).

Options:
  -s, --subreaper            Register as a child subreaper (when not PID 1)
  -g, --process-group        Forward signals to the child's process group
  -e, --expect-exit CODE     Report exit code CODE as 0 (repeatable)
  -p, --pdeathsig SIGNAL     Receive SIGNAL when podvisor's parent dies
  -v, --verbose              More output (repeatable); -q for errors only
  -w, --warn-reap            Warn on each adopted zombie that is reaped
      --rewrite FROM:TO      Forward signal FROM as TO; TO 0 or none drops it (repeatable)
      --stop-delay DUR       Hold SIGTERM, SIGINT and SIGQUIT for DUR before forwarding them
      --kill-descendants[=GRACE]
                             When the child exits, SIGTERM every remaining descendant and
                             SIGKILL them after GRACE (default 5s)
      --wait-all             When the child exits, wait for every descendant before exiting
      --supervision FILE     Staged instrumentation from the Supervision document in FILE:
                             COMMAND gets the environment of its start's stage
      --state-dir DIR        Where the container's start count is kept (an emptyDir)
      --lock-dir DIR         Where the lock that tells container starts apart lives
                             (default /tmp)
      --container NAME       This container's name, for a Supervision that lists containers
  -h, --help                 Print this help
  -V, --version              Print the version

Environment: PODVISOR_SUBREAPER, PODVISOR_KILL_PROCESS_GROUP, PODVISOR_VERBOSITY, and tini's
TINI_SUBREAPER, TINI_KILL_PROCESS_GROUP, TINI_VERBOSITY.
";

fn usage_error(msg: impl std::fmt::Display) -> Early {
    Early::err(
        format!("error: {msg}\nUsage: podvisor init [OPTIONS] [--] COMMAND [ARGS]...\n"),
        2,
    )
}

/// A boolean environment switch: set and not one of "", "0", "false", "no" means on.
fn env_flag(env: &dyn Fn(&str) -> Option<OsString>, name: &str) -> bool {
    match env(name) {
        None => false,
        Some(v) => !matches!(
            v.to_string_lossy().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no" | "off"
        ),
    }
}

fn parse_rewrite(spec: &str) -> Option<(i32, i32)> {
    let (from, to) = spec.split_once(':')?;
    let from = parse_signal(from)?;
    let to = match to.trim().to_ascii_lowercase().as_str() {
        "0" | "none" => 0,
        other => parse_signal(other)?,
    };
    Some((from, to))
}

/// Options whose value may come as the next argument.
const TAKES_VALUE: &[&str] = &[
    "-e",
    "--expect-exit",
    "-p",
    "--pdeathsig",
    "--rewrite",
    "--stop-delay",
    "--supervision",
    "--state-dir",
    "--lock-dir",
    "--container",
];

/// Splits clustered short options (`-sgv`, `-e143`) into one option per argument, up to the
/// first operand or `--`, so the parser below sees `-s -g -v` and `-e 143`.
fn split_short_clusters(args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut rest = args.iter();
    while let Some(raw) = rest.next() {
        let arg = raw.to_string_lossy();
        if arg == "--" || !arg.starts_with('-') || arg == "-" {
            out.push(raw.clone());
            break;
        }
        if arg.starts_with("--") || arg.len() == 2 {
            out.push(raw.clone());
            // An option's separate value is not an operand: carry it over as it is.
            if TAKES_VALUE.contains(&arg.as_ref()) {
                out.extend(rest.next().cloned());
            }
            continue;
        }
        for (pos, ch) in arg[1..].char_indices() {
            out.push(OsString::from(format!("-{ch}")));
            if matches!(ch, 'e' | 'p') {
                let value = &arg[1 + pos + ch.len_utf8()..];
                if !value.is_empty() {
                    out.push(OsString::from(value));
                }
                break;
            }
        }
    }
    out.extend(rest.cloned());
    out
}

fn parse_podvisor(
    args: &[OsString],
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Config, Early> {
    let mut c = Config::new(Persona::Podvisor);
    // Environment first, so that flags win where both speak.
    podvisor_env(&mut c, env)?;
    let mut more = Staging::default();
    let args = split_short_clusters(args);
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].to_string_lossy().into_owned();
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        i += 1;
        let mut next = || {
            let v = args.get(i)?;
            i += 1;
            Some(v.to_string_lossy().into_owned())
        };
        podvisor_option(&mut c, &mut more, &arg, &mut next)?;
    }
    more.finish(&mut c, args[i..].to_vec())?;
    Ok(c)
}

/// The environment variables of `podvisor init` (and tini's, which it honours).
fn podvisor_env(c: &mut Config, env: &dyn Fn(&str) -> Option<OsString>) -> Result<(), Early> {
    c.subreaper = env_flag(env, "PODVISOR_SUBREAPER") || env("TINI_SUBREAPER").is_some();
    c.signal_group =
        env_flag(env, "PODVISOR_KILL_PROCESS_GROUP") || env("TINI_KILL_PROCESS_GROUP").is_some();
    for var in ["TINI_VERBOSITY", "PODVISOR_VERBOSITY"] {
        if let Some(v) = env(var) {
            let v = v.to_string_lossy().into_owned();
            c.verbosity = v
                .trim()
                .parse()
                .map_err(|_| usage_error(format_args!("{var}: {v:?} is not a number")))?;
        }
    }
    Ok(())
}

/// The options of `podvisor init` that are checked together once all are read.
#[derive(Default)]
struct Staging {
    kill_descendants: Option<std::time::Duration>,
    wait_all: bool,
    supervision: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    lock_dir: Option<PathBuf>,
    container: Option<String>,
}

/// One option `arg` of `podvisor init`; `next` takes the next argument as its value.
fn podvisor_option(
    c: &mut Config,
    more: &mut Staging,
    arg: &str,
    next: &mut dyn FnMut() -> Option<String>,
) -> Result<(), Early> {
    // Long options take `--name=value` or `--name value`.
    let (name, inline) = match arg.split_once('=') {
        Some((n, v)) if arg.starts_with("--") => (n, Some(v.to_string())),
        _ => (arg, None),
    };
    let no_value = |c: &mut Config, set: fn(&mut Config)| match &inline {
        Some(_) => Err(usage_error(format_args!("{name} takes no value"))),
        None => {
            set(c);
            Ok(())
        }
    };
    let mut value = |what: &str| -> Result<String, Early> {
        match inline.clone() {
            Some(v) => Ok(v),
            None => {
                next().ok_or_else(|| usage_error(format_args!("{name} needs a value ({what})")))
            }
        }
    };
    match name {
        "-h" | "--help" => return Err(Early::out(PODVISOR_USAGE.to_string())),
        "-V" | "--version" => {
            return Err(Early::out(format!(
                "podvisor {}\n",
                env!("CARGO_PKG_VERSION")
            )))
        }
        "-s" | "--subreaper" => no_value(c, |c| c.subreaper = true)?,
        "-g" | "--process-group" => no_value(c, |c| c.signal_group = true)?,
        "-v" | "--verbose" => no_value(c, |c| c.verbosity += 1)?,
        "-q" | "--quiet" => no_value(c, |c| c.verbosity = 0)?,
        "-w" | "--warn-reap" => no_value(c, |c| c.warn_on_reap = true)?,
        "--wait-all" => {
            no_value(c, |_| ())?;
            more.wait_all = true;
        }
        "-e" | "--expect-exit" => {
            let v = value("an exit code from 0 to 255")?;
            let code: u8 = v.trim().parse().map_err(|_| {
                usage_error(format_args!(
                    "{name}: {v:?} is not an exit code from 0 to 255"
                ))
            })?;
            c.expect_zero.push(code);
        }
        "-p" | "--pdeathsig" => {
            let v = value("a signal")?;
            let sig = parse_signal(&v).ok_or_else(|| {
                usage_error(format_args!("{name}: {v:?} is not a signal name or number"))
            })?;
            c.parent_death_signal = Some(sig);
        }
        "--rewrite" => {
            let v = value("FROM:TO")?;
            let pair = parse_rewrite(&v).ok_or_else(|| {
                usage_error(format_args!(
                    "--rewrite: {v:?} is not FROM:TO with two signal names or numbers \
                     (TO may be 0 or none to drop FROM)"
                ))
            })?;
            c.rewrite.push(pair);
        }
        "--stop-delay" => {
            let v = value("a duration such as 5s")?;
            let d =
                parse_duration(&v).map_err(|e| usage_error(format_args!("--stop-delay: {e}")))?;
            c.stop_delay = Some(d);
        }
        "--kill-descendants" => {
            // The grace is optional, so it is only taken when attached with `=`.
            let grace = match &inline {
                Some(v) => parse_duration(v)
                    .map_err(|e| usage_error(format_args!("--kill-descendants: {e}")))?,
                None => DEFAULT_KILL_GRACE,
            };
            more.kill_descendants = Some(grace);
        }
        "--supervision" => more.supervision = Some(PathBuf::from(value("a file")?)),
        "--state-dir" => more.state_dir = Some(PathBuf::from(value("a directory")?)),
        "--lock-dir" => more.lock_dir = Some(PathBuf::from(value("a directory")?)),
        "--container" => more.container = Some(value("a container name")?),
        _ => return Err(usage_error(format_args!("unknown option {arg:?}"))),
    }
    Ok(())
}

impl Staging {
    /// The options that go together, checked, and the command.
    fn finish(self, c: &mut Config, command: Vec<OsString>) -> Result<(), Early> {
        c.staged = match (self.supervision, self.state_dir) {
            (Some(supervision), Some(state_dir)) => Some(StagedArgs {
                supervision,
                state_dir,
                lock_dir: self.lock_dir.unwrap_or_else(|| PathBuf::from("/tmp")),
                container: self.container,
            }),
            (Some(_), None) => {
                return Err(usage_error(
                    "--supervision needs --state-dir (where the container's start count is kept)",
                ))
            }
            (None, state_dir)
                if state_dir.is_some() || self.lock_dir.is_some() || self.container.is_some() =>
            {
                return Err(usage_error(
                    "--state-dir, --lock-dir and --container go with --supervision",
                ))
            }
            (None, _) => None,
        };
        c.command = command;
        if c.command.is_empty() {
            return Err(usage_error("no command given"));
        }
        c.on_child_exit = match (self.kill_descendants, self.wait_all) {
            (Some(_), true) => {
                return Err(usage_error(
                    "--kill-descendants and --wait-all contradict each other: choose one",
                ))
            }
            (Some(grace), false) => OnChildExit::KillDescendants(grace),
            (None, true) => OnChildExit::WaitAll,
            (None, false) => OnChildExit::Exit,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dumb_init::DUMB_INIT_REWRITE_HELP;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    fn podvisor(args: &[&str]) -> Result<Config, Early> {
        parse(Persona::Podvisor, "podvisor", &os(args), &no_env)
    }

    #[test]
    fn podvisor_flags() {
        let c = podvisor(&[
            "-s", "-g", "-e", "3", "-e143", "-p", "KILL", "-vv", "--", "app", "-v",
        ])
        .unwrap();
        assert!(c.subreaper && c.signal_group);
        assert_eq!(c.expect_zero, vec![3, 143]);
        assert_eq!(c.parent_death_signal, Some(9));
        assert_eq!(c.verbosity, 3);
        assert_eq!(c.command, os(&["app", "-v"]));

        let c = podvisor(&[
            "--rewrite",
            "TERM:QUIT",
            "--rewrite=USR1:none",
            "--stop-delay",
            "2s",
            "app",
        ])
        .unwrap();
        assert_eq!(c.translate(15), 3);
        assert_eq!(c.translate(10), 0);
        assert_eq!(c.translate(2), 2);
        assert_eq!(c.stop_delay, Some(Duration::from_secs(2)));
        assert_eq!(c.on_child_exit, OnChildExit::Exit);

        // Options stop at the first operand, with or without `--`.
        let c = podvisor(&["sleep", "-s"]).unwrap();
        assert!(!c.subreaper);
        assert_eq!(c.command, os(&["sleep", "-s"]));

        let c = podvisor(&["--kill-descendants", "app"]).unwrap();
        assert_eq!(
            c.on_child_exit,
            OnChildExit::KillDescendants(DEFAULT_KILL_GRACE)
        );
        let c = podvisor(&["--kill-descendants=500ms", "app"]).unwrap();
        assert_eq!(
            c.on_child_exit,
            OnChildExit::KillDescendants(Duration::from_millis(500))
        );
        let c = podvisor(&["--wait-all", "app"]).unwrap();
        assert_eq!(c.on_child_exit, OnChildExit::WaitAll);
    }

    #[test]
    fn podvisor_errors_are_one_line_and_exit_2() {
        for args in [
            &[][..],
            &["-s"][..],
            &["-x", "app"][..],
            &["-e", "256", "app"][..],
            &["-p", "NOPE", "app"][..],
            &["--rewrite", "TERM", "app"][..],
            &["--stop-delay", "5", "app"][..],
            &["--kill-descendants=x", "app"][..],
            &["--kill-descendants", "--wait-all", "app"][..],
            &["-e"][..],
            &["--wait-all=1", "app"][..],
        ] {
            let e = podvisor(args).unwrap_err();
            assert_eq!(e.code, 2, "{args:?}");
            assert!(e.stderr.starts_with("error: "), "{args:?}: {}", e.stderr);
            assert_eq!(
                e.stderr.lines().filter(|l| l.starts_with("error:")).count(),
                1
            );
        }
    }

    #[test]
    fn podvisor_env() {
        let env = |k: &str| match k {
            "PODVISOR_SUBREAPER" => Some(OsString::from("1")),
            "PODVISOR_KILL_PROCESS_GROUP" => Some(OsString::from("0")),
            "TINI_VERBOSITY" => Some(OsString::from("3")),
            _ => None,
        };
        let c = parse(Persona::Podvisor, "podvisor", &os(&["app"]), &env).unwrap();
        assert!(c.subreaper);
        assert!(!c.signal_group);
        assert_eq!(c.verbosity, 3);
    }

    fn tini(args: &[&str]) -> Result<Config, Early> {
        parse(Persona::Tini, "tini", &os(args), &no_env)
    }

    #[test]
    fn tini_command_line() {
        let c = tini(&[
            "-s", "-g", "-w", "-e", "143", "-p", "SIGKILL", "--", "app", "-x",
        ])
        .unwrap();
        assert!(c.subreaper && c.signal_group && c.warn_on_reap);
        assert_eq!(c.expect_zero, vec![143]);
        assert_eq!(c.parent_death_signal, Some(9));
        assert_eq!(c.command, os(&["app", "-x"]));
        // glibc getopt permutes: an option after the program is still tini's.
        let c = tini(&["app", "-s", "arg"]).unwrap();
        assert!(c.subreaper);
        assert_eq!(c.command, os(&["app", "arg"]));
        // ... unless POSIXLY_CORRECT is set.
        let env = |k: &str| (k == "POSIXLY_CORRECT").then(|| OsString::from("1"));
        let c = parse(Persona::Tini, "tini", &os(&["app", "-s"]), &env).unwrap();
        assert!(!c.subreaper);
        assert_eq!(c.command, os(&["app", "-s"]));
        assert_eq!(c.verbosity, 1);
    }

    #[test]
    fn tini_errors_keep_tinis_shape() {
        let e = tini(&[]).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e
            .stderr
            .starts_with("tini (tini version 0.19.0)\nUsage: tini [OPTIONS]"));
        let e = tini(&["-p", "KILL", "app"]).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(
            e.stderr.contains("] Not a valid option for -p: KILL"),
            "{}",
            e.stderr
        );
        let e = tini(&["-e", "300", "app"]).unwrap_err();
        assert!(e.stderr.contains("Not a valid option for -e: 300"));
        let e = tini(&["-x", "app"]).unwrap_err();
        assert!(e.stderr.starts_with("tini: invalid option -- 'x'\n"));
        let e = tini(&["--version"]).unwrap_err();
        assert_eq!(e.code, 0);
        assert!(e.stdout.starts_with("tini version 0.19.0"));
        assert_eq!(tini(&["-h"]).unwrap_err().code, 0);
    }

    fn dumb(args: &[&str]) -> Result<Config, Early> {
        parse(Persona::DumbInit, "dumb-init", &os(args), &no_env)
    }

    #[test]
    fn dumb_init_command_line() {
        let c = dumb(&["app", "-c"]).unwrap();
        assert!(c.new_session && c.signal_group);
        assert_eq!(c.command, os(&["app", "-c"]));
        assert_eq!(c.translate(libc::SIGTSTP), libc::SIGSTOP);
        assert_eq!(c.on_child_exit, OnChildExit::TermGroupAndExit);

        let c = dumb(&["-c", "-r", "15:3", "--rewrite=2:0", "app"]).unwrap();
        assert!(!c.new_session && !c.signal_group);
        assert_eq!(c.translate(15), 3);
        assert_eq!(c.translate(2), 0);
        assert_eq!(c.translate(libc::SIGTSTP), libc::SIGTSTP);

        let c = dumb(&["--single", "-r20:1", "app"]).unwrap();
        assert!(!c.new_session);
        assert_eq!(c.translate(20), 1);

        let env = |k: &str| match k {
            "DUMB_INIT_SETSID" => Some(OsString::from("0")),
            "DUMB_INIT_DEBUG" => Some(OsString::from("1")),
            _ => None,
        };
        let c = parse(Persona::DumbInit, "dumb-init", &os(&["app"]), &env).unwrap();
        assert!(!c.new_session && c.verbosity == 1);
    }

    #[test]
    fn dumb_init_errors_keep_dumb_inits_shape() {
        let e = dumb(&[]).unwrap_err();
        assert_eq!(e.code, 1);
        assert_eq!(
            e.stderr,
            "Usage: dumb-init [option] program [args]\nTry dumb-init --help for full usage.\n"
        );
        let e = dumb(&["-r", "99:1", "app"]).unwrap_err();
        assert_eq!((e.code, e.stderr.as_str()), (1, DUMB_INIT_REWRITE_HELP));
        let e = dumb(&["-x", "app"]).unwrap_err();
        assert_eq!(e.stderr, "dumb-init: invalid option -- 'x'\n");
        let e = dumb(&["-V"]).unwrap_err();
        assert_eq!((e.code, e.stderr.as_str()), (0, "dumb-init v1.2.5"));
    }

    #[test]
    fn personas_from_argv0() {
        assert_eq!(persona_for(OsStr::new("/sbin/tini")), Some(Persona::Tini));
        assert_eq!(
            persona_for(OsStr::new("dumb-init")),
            Some(Persona::DumbInit)
        );
        assert_eq!(persona_for(OsStr::new("/usr/bin/podvisor")), None);
    }
}
