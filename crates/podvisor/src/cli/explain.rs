//! `podvisor explain [-o json] [--start-time DUR] FILE`: per container, the lifecycle timing the
//! spec implies and the settings that will hurt, with their fix.

use podvisor_core::backoff::{BackoffPolicy, DEFAULT_INITIAL, DEFAULT_MAX};
use podvisor_core::duration::parse_duration;
use podvisor_core::spec::explain::explain;

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

pub fn main(args: &[std::ffi::OsString]) -> i32 {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        super::write_out(USAGE);
        return 0;
    }
    let usage_error = |msg: String| {
        super::write_err(&format!(
            "error: {msg}\nUsage: podvisor explain [OPTIONS] FILE\n"
        ));
        2
    };
    let (mut json, mut start, mut initial, mut max, mut file) =
        (false, None, DEFAULT_INITIAL, DEFAULT_MAX, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if arg.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let duration = |v: Result<String, String>| {
            v.and_then(|v| parse_duration(&v).map_err(|e| format!("{name}: {e}")))
        };
        match name {
            "-o" | "--output" => match value() {
                Ok(v) if v == "json" => json = true,
                Ok(v) => return usage_error(format!("{name}: {v:?}: only json is supported")),
                Err(e) => return usage_error(e),
            },
            "--start-time" => match duration(value()) {
                Ok(d) => start = Some(d),
                Err(e) => return usage_error(e),
            },
            "--backoff-initial" => match duration(value()) {
                Ok(d) => initial = d,
                Err(e) => return usage_error(e),
            },
            "--backoff-max" => match duration(value()) {
                Ok(d) => max = d,
                Err(e) => return usage_error(e),
            },
            _ if arg.starts_with('-') && arg != "-" => {
                return usage_error(format!("unknown option {arg:?}"))
            }
            _ if file.is_none() => file = Some(arg.clone()),
            _ => return usage_error(format!("unexpected argument {arg:?}")),
        }
    }
    let Some(file) = file else {
        return usage_error("no FILE given".into());
    };
    let text = match super::validate::read_manifest(&file) {
        Ok(t) => t,
        Err(e) => {
            super::write_err(&format!("error: {e}\n"));
            return 2;
        }
    };
    let manifest = match podvisor_core::spec::load(&file, &text) {
        Ok(m) => m,
        Err(errors) => {
            let lines: String = errors
                .to_string()
                .lines()
                .map(|l| format!("error: {l}\n"))
                .collect();
            super::write_err(&lines);
            return 2;
        }
    };
    let e = explain(&manifest, BackoffPolicy::new(initial, max), start);
    if json {
        super::write_out(&format!("{:#}\n", e.to_json()));
    } else {
        super::write_out(&e.to_text());
    }
    0
}
