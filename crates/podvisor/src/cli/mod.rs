//! The command line: picks the face (persona by `argv[0]`, or subcommand) and hands over.
//! Each subcommand lives in a thin file of its own.

use std::ffi::OsString;
use std::io::Write;

use crate::init::{self, args::Persona};

#[cfg(feature = "full")]
mod client;
#[cfg(feature = "full")]
pub mod control;
#[cfg(feature = "full")]
pub mod explain;
#[cfg(feature = "full")]
pub mod logs;
#[cfg(feature = "full")]
mod manifest;
#[cfg(feature = "full")]
pub mod run;
#[cfg(feature = "full")]
pub mod status;
#[cfg(feature = "full")]
pub mod validate;

const USAGE: &str = "\
Usage: podvisor <COMMAND> [ARGS]...

Commands:
  init [OPTIONS] [--] CMD [ARGS]...   Run CMD under an init process (PID 1, tini / dumb-init
                                      compatible); `podvisor init --help` for its options
  run [OPTIONS] FILE                  Run a pod manifest (not in the PID 1 build)
  validate FILE                       Check a pod manifest (not in the PID 1 build)
  explain [-o json] FILE              What the manifest's timings imply, and warnings
  status [-o wide|json|yaml|describe] [-w]
                                      The running pod, as kubectl get pod / describe
  describe                            Same as status -o describe
  logs CONTAINER [--previous] [-f] [--tail N] [--timestamps] [--since DUR]
                                      A container's output, as kubectl logs
  events [-w] [-o json]               The pod's events, oldest first
  stop                                Graceful termination of the running pod
  restart [CONTAINER]                 Restart one container, or the whole pod
                                      (these take --state-dir DIR; default: the running pod)

Started as `tini` or `dumb-init` (a symlink or a copy), podvisor takes that program's command
line unchanged.

Options:
  -h, --help      Print this help
  -V, --version   Print the version
";

/// Whether this binary was built with everything (`full`) or as the small PID 1 build.
pub const BUILD: &str = if cfg!(feature = "full") {
    "full"
} else {
    "init-only"
};

/// Runs the command line and returns the process exit code.
pub fn main(argv: Vec<OsString>) -> i32 {
    let argv0 = argv
        .first()
        .cloned()
        .unwrap_or_else(|| OsString::from("podvisor"));
    if let Some(persona) = init::args::persona_for(&argv0) {
        // The personas name themselves as invoked, as getopt and dumb-init do.
        return init::main(persona, &argv0.to_string_lossy(), &argv[1..]);
    }
    let Some(command) = argv.get(1).map(|a| a.to_string_lossy().into_owned()) else {
        write_err(&format!("error: no command given\n{USAGE}"));
        return 2;
    };
    match command.as_str() {
        "init" => init::main(Persona::Podvisor, "podvisor init", &argv[2..]),
        #[cfg(feature = "full")]
        "validate" => validate::main(&argv[2..]),
        #[cfg(feature = "full")]
        "run" => run::main(&argv[2..]),
        #[cfg(feature = "full")]
        "explain" => explain::main(&argv[2..]),
        #[cfg(feature = "full")]
        "status" => status::main(&argv[2..], false),
        #[cfg(feature = "full")]
        "describe" => status::main(&argv[2..], true),
        #[cfg(feature = "full")]
        "events" => control::events(&argv[2..]),
        #[cfg(feature = "full")]
        "stop" => control::stop(&argv[2..]),
        #[cfg(feature = "full")]
        "restart" => control::restart(&argv[2..]),
        #[cfg(feature = "full")]
        "logs" => logs::main(&argv[2..]),
        "-h" | "--help" | "help" => {
            write_out(USAGE);
            0
        }
        "-V" | "--version" => {
            write_out(&format!(
                "podvisor {} ({BUILD} build)\n",
                env!("CARGO_PKG_VERSION")
            ));
            0
        }
        other => {
            write_err(&format!(
                "error: unknown command {other:?} (see `podvisor --help`)\n"
            ));
            2
        }
    }
}

/// A subcommand's arguments as strings; `None` once `-h`/`--help` has printed `usage`.
#[cfg(feature = "full")]
fn arguments(args: &[OsString], usage: &str) -> Option<Vec<String>> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        write_out(usage);
        return None;
    }
    Some(args)
}

/// Writes to stdout, ignoring failure (a closed stdout must not make PID 1 panic, which
/// `print!` would).
pub fn write_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Writes to stderr, ignoring failure.
pub fn write_err(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}
