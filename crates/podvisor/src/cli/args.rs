//! podvisor's own command line on clap (derive): the subcommands, `--help` and `--version`,
//! suggestions for a mistyped flag or subcommand, shell completions and a man page. Each
//! subcommand's arguments live in its own file beside its `main`.
//!
//! Not here: `podvisor init` and the `tini` / `dumb-init` personas, whose getopt-compatible
//! command lines are the contract (`init/args/`); the PID 1 build links none of clap. A usage
//! error is one `error:` line (with clap's suggestion, if it has one) and the usage, exit 2.

use std::ffi::OsString;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use super::{
    control, exec, explain, get, image, logs, run, status, validate, write_err, write_out,
};

#[derive(Debug, Parser)]
#[command(
    name = "podvisor",
    version = concat!(env!("CARGO_PKG_VERSION"), " (full build)"),
    about = "Runs containers' processes the way the kubelet does, and survives the way good init systems do",
    after_help = "Started as `tini` or `dumb-init` (a symlink or a copy), podvisor takes that program's command line unchanged."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run CMD under an init process (PID 1; tini and dumb-init compatible). `podvisor init
    /// --help` lists its options.
    #[command(disable_help_flag = true)]
    Init {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "[OPTIONS] [--] CMD"
        )]
        args: Vec<OsString>,
    },
    /// Copy this podvisor binary to DEST (mode 0755): what the cluster webhook's init
    /// container runs, as the FROM-scratch image has no `cp`.
    CopySelf {
        #[arg(value_name = "DEST")]
        dest: OsString,
    },
    /// Run a pod manifest until it succeeds or fails, or until SIGTERM / SIGINT.
    Run(run::RunArgs),
    /// Check a pod manifest; prints nothing and exits 0 when it is valid.
    Validate(validate::ValidateArgs),
    /// Print, per container, the lifecycle timing the manifest implies, and warnings.
    Explain(explain::ExplainArgs),
    /// A pod, as `kubectl get pod` shows it (running, or as it ended).
    Status(status::StatusArgs),
    /// A pod, as `kubectl describe pod` shows it (running, or as it ended).
    Describe(status::StatusArgs),
    /// A container's output, as `kubectl logs` prints it.
    Logs(logs::LogsArgs),
    /// A pod's events, oldest first (of an ended pod: those it had when it ended).
    Events(control::EventsArgs),
    /// Delete the running pod: graceful termination, then the next run of its manifest is a
    /// new pod (restart counts 0), as after `kubectl delete pod`.
    ///
    /// Unlike SIGTERM to `run` (a service manager's stop), a kill or a crash, after which the
    /// next run resumes the pod with its restart counts and stages.
    Stop(control::StopArgs),
    /// Restart one container, or the whole pod.
    Restart(control::RestartArgs),
    /// Resize a running pod's containers in place, or set its conditions, as `kubectl patch
    /// pod --subresource resize|status`.
    Patch(control::PatchArgs),
    /// List pods, running and ended, as `kubectl get pods` does.
    Get(get::GetArgs),
    /// `get pods`.
    Ps(get::ListArgs),
    /// Remove ended pods (their logs, status and events).
    Delete(get::DeleteArgs),
    /// Run a command in a running container, as `kubectl exec` does.
    Exec(exec::ExecArgs),
    /// The image store: load, list, inspect and remove images.
    Image(image::ImageArgs),
    /// A live terminal view of every running pod: containers, logs, events, actions.
    Top(crate::top::TopArgs),
    /// Print a shell completion script.
    Completion {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print podvisor's man page (roff).
    Man,
}

/// The shells completion scripts are made for.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Parses and runs a podvisor subcommand (`argv[0]` included); the exit code.
pub fn main(argv: Vec<OsString>) -> i32 {
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => return report(e),
    };
    match cli.command {
        // Dispatched before clap (see `cli::main`); kept in the enum for help and completions.
        Command::Init { args } => {
            crate::init::main(crate::init::args::Persona::Podvisor, "podvisor init", &args)
        }
        // Dispatched before clap too.
        Command::CopySelf { dest } => super::copy_self::main(&[dest]),
        Command::Run(a) => run::main(a),
        Command::Validate(a) => validate::main(a),
        Command::Explain(a) => explain::main(a),
        Command::Status(a) => status::main(a, false),
        Command::Describe(a) => status::main(a, true),
        Command::Logs(a) => logs::main(a),
        Command::Events(a) => control::events(a),
        Command::Stop(a) => control::stop(a),
        Command::Restart(a) => control::restart(a),
        Command::Patch(a) => control::patch(a),
        Command::Exec(a) => exec::main(a),
        Command::Image(a) => image::main(a),
        Command::Get(a) => get::get(a),
        Command::Ps(a) => get::ps(a),
        Command::Delete(a) => get::delete(a),
        Command::Top(a) => crate::top::main(a),
        Command::Completion { shell } => {
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "podvisor", &mut out);
            write_out(&String::from_utf8_lossy(&out));
            0
        }
        Command::Man => {
            let mut out = Vec::new();
            match clap_mangen::Man::new(Cli::command()).render(&mut out) {
                Ok(()) => {
                    write_out(&String::from_utf8_lossy(&out));
                    0
                }
                Err(e) => {
                    write_err(&format!("error: {e}\n"));
                    1
                }
            }
        }
    }
}

/// Help and version to stdout (exit 0); a usage error as one `error:` line, clap's tip on the
/// same line, then the usage (exit 2).
fn report(e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    let text = e.render().to_string();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            write_out(&text);
            return 0;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            write_err(&text);
            return 2;
        }
        _ => {}
    }
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let first = lines.first().copied().unwrap_or("error: bad command line");
    // What clap says right under the first line (the missing arguments, the possible values)
    // belongs on it.
    let details: Vec<&str> = lines
        .iter()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.trim())
        .collect();
    let first = if details.is_empty() {
        first.to_string()
    } else {
        format!("{first} {}", details.join(" "))
    };
    let tip = lines
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("tip: "))
        .map(|t| format!(" ({t})"))
        .unwrap_or_default();
    let usage = lines
        .iter()
        .find(|l| l.starts_with("Usage:"))
        .map(|u| format!("{u}\n"))
        .unwrap_or_default();
    write_err(&format!("{first}{tip}\n{usage}"));
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
