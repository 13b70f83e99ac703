//! The command line: picks the face (persona by `argv[0]`, or subcommand) and hands over.
//! Each subcommand lives in a thin file of its own.

use std::ffi::OsString;

use crate::init::{self, args::Persona};
pub use crate::stdio::{write_err, write_out};

#[cfg(feature = "full")]
mod args;
#[cfg(feature = "full")]
pub mod control;
mod copy_self;
#[cfg(feature = "full")]
pub mod exec;
#[cfg(feature = "full")]
pub mod explain;
#[cfg(feature = "full")]
pub mod get;
#[cfg(feature = "full")]
pub mod image;
#[cfg(feature = "full")]
pub mod logs;
#[cfg(feature = "full")]
mod manifest;
#[cfg(feature = "full")]
mod node;
#[cfg(feature = "full")]
pub mod run;
#[cfg(feature = "full")]
pub mod status;
#[cfg(feature = "full")]
pub mod validate;

/// The PID 1 build's help (the full build's comes from clap, `args.rs`).
#[cfg(not(feature = "full"))]
const USAGE: &str = "\
Usage: podvisor init [OPTIONS] [--] CMD [ARGS]...

This is podvisor's PID 1 build: it knows `init` (`podvisor init --help` for its options) and
`copy-self DEST` (copies this binary to DEST), and, started as `tini` or `dumb-init`, takes that
program's command line unchanged.

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

/// Which pod a client command reaches (`status`, `events`, `stop`, `patch`): its state dir,
/// or its name under the state base.
#[cfg(feature = "full")]
#[derive(Debug, clap::Args)]
pub struct PodTarget {
    /// The pod's state dir (default: found by POD under the default base)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// The pod's namespace
    #[arg(short, long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The pod, `NAME` or `NAMESPACE/NAME` (default: the only running pod, else the only pod
    /// there is; an ended pod is shown as it ended)
    #[arg(value_name = "POD")]
    pod: Option<String>,
}

#[cfg(feature = "full")]
impl PodTarget {
    /// The pod's state dir (`client::find_pod`).
    pub fn find(self) -> Result<std::path::PathBuf, crate::client::ClientError> {
        crate::client::find_pod(
            self.state_dir,
            self.pod.as_deref(),
            self.namespace.as_deref(),
        )
    }
}

/// A client command's exit code: 0, or 1 with the error on stderr.
#[cfg(feature = "full")]
pub fn exit_code(r: Result<(), crate::client::ClientError>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(crate::client::ClientError(e)) => {
            write_err(&format!("error: {e}\n"));
            1
        }
    }
}

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
    // `init` keeps its own getopt-compatible parser, in both builds.
    if argv.get(1).is_some_and(|a| a == "init") {
        return init::main(Persona::Podvisor, "podvisor init", &argv[2..]);
    }
    // `copy-self` too: the cluster's init container runs it from the PID 1 image.
    if argv.get(1).is_some_and(|a| a == "copy-self") {
        return copy_self::main(&argv[2..]);
    }
    // The keeper of a run's containers, started by `run --live-restore` (internal).
    #[cfg(feature = "full")]
    if argv.get(1).is_some_and(|a| a == "keeper") {
        return crate::keeper::main(&argv[2..]);
    }
    // The owners of a layer unpacked without root, set in a user namespace (internal).
    #[cfg(feature = "full")]
    if argv
        .get(1)
        .is_some_and(|a| a == crate::image::owners::HELPER)
    {
        return crate::image::owners::helper_main(&argv[2..]);
    }
    // The PID 1 of a pod's shared PID namespace, started by `run` (internal).
    #[cfg(feature = "full")]
    if argv.get(1).is_some_and(|a| a == "pause") {
        return crate::supervisor::sandbox::pause_main();
    }
    dispatch(argv)
}

#[cfg(feature = "full")]
fn dispatch(argv: Vec<OsString>) -> i32 {
    args::main(argv)
}

#[cfg(not(feature = "full"))]
fn dispatch(argv: Vec<OsString>) -> i32 {
    match argv
        .get(1)
        .map(|a| a.to_string_lossy().into_owned())
        .as_deref()
    {
        None => {
            write_err(&format!("error: no command given\n{USAGE}"));
            2
        }
        Some("-h" | "--help" | "help") => {
            write_out(USAGE);
            0
        }
        Some("-V" | "--version") => {
            write_out(&format!(
                "podvisor {} ({BUILD} build)\n",
                env!("CARGO_PKG_VERSION")
            ));
            0
        }
        Some(other) => {
            write_err(&format!(
                "error: unrecognized subcommand '{other}': this is the PID 1 build, which knows only `init` (see `podvisor --help`)\n"
            ));
            2
        }
    }
}
