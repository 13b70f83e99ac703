//! `podvisor explain [-o json] [--start-time DUR] FILE`: per container, the lifecycle timing the
//! spec implies and the settings that will hurt, with their fix.

use podvisor_core::backoff::{BackoffPolicy, DEFAULT_INITIAL, DEFAULT_MAX};
use std::time::Duration;

use podvisor_core::spec::explain::explain;

use super::manifest::{is_option, load, Flags};

const USAGE: &str = "\
Usage: podvisor explain [OPTIONS] FILE

Prints, per container, how soon it can be Ready, how long it has to start, how long a hang goes
unnoticed and when the kill comes, the restart backoff schedule, the instrumentation stages, and
warnings (with the fix) for settings that will crash-loop or never become ready.

Options:
  -o, --output json          JSON instead of text
      --start-time DUR       How long the app takes to start (checks the probes against it)
      --backoff-initial DUR  As for `podvisor run` (default 10s)
      --backoff-max DUR      As for `podvisor run` (default 5m)
  -h, --help                 Print this help
";

struct Args {
    file: String,
    json: bool,
    start: Option<Duration>,
    initial: Duration,
    max: Duration,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        file: String::new(),
        json: false,
        start: None,
        initial: DEFAULT_INITIAL,
        max: DEFAULT_MAX,
    };
    let mut file = None;
    let mut flags = Flags::new(args);
    while let Some(arg) = flags.next_arg() {
        match arg.as_str() {
            "-o" | "--output" => match flags.value()?.as_str() {
                "json" => a.json = true,
                other => return Err(format!("{arg}: {other:?}: only json is supported")),
            },
            "--start-time" => a.start = Some(flags.duration()?),
            "--backoff-initial" => a.initial = flags.duration()?,
            "--backoff-max" => a.max = flags.duration()?,
            _ if is_option(&arg) => return Err(format!("unknown option {arg:?}")),
            _ if file.is_none() => file = Some(arg),
            _ => return Err(format!("unexpected argument {arg:?}: one FILE only")),
        }
    }
    a.file = file.ok_or("no FILE given")?;
    Ok(a)
}

pub fn main(args: &[std::ffi::OsString]) -> i32 {
    let Some(args) = super::arguments(args, USAGE) else {
        return 0;
    };
    let a = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            super::write_err(&format!(
                "error: {e}\nUsage: podvisor explain [OPTIONS] FILE\n"
            ));
            return 2;
        }
    };
    let manifest = match load(&a.file) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let e = explain(&manifest, BackoffPolicy::new(a.initial, a.max), a.start);
    if a.json {
        super::write_out(&format!("{:#}\n", e.to_json()));
    } else {
        super::write_out(&e.to_text());
    }
    0
}
