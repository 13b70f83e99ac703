//! What the manifest commands (`validate`, `run`, `explain`) share: their flag syntax and
//! reading a manifest, with errors printed the same way and exit code 2.

use std::io::Read;
use std::time::Duration;

use podvisor_core::duration::parse_duration;
use podvisor_core::spec::Manifest;

/// Walks `--name value`, `--name=value`, `-x value` and operands.
#[derive(Debug)]
pub struct Flags<'a> {
    args: std::slice::Iter<'a, String>,
    inline: Option<String>,
    name: String,
}

impl<'a> Flags<'a> {
    pub fn new(args: &'a [String]) -> Flags<'a> {
        Flags {
            args: args.iter(),
            inline: None,
            name: String::new(),
        }
    }

    /// The next flag name (`--state-dir`) or operand (`pod.yaml`, `-`).
    pub fn next_arg(&mut self) -> Option<String> {
        let arg = self.args.next()?;
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if arg.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        self.inline = inline;
        self.name = name.clone();
        Some(name)
    }

    /// The value of the flag just read.
    pub fn value(&mut self) -> Result<String, String> {
        self.inline
            .take()
            .or_else(|| self.args.next().cloned())
            .ok_or_else(|| format!("{} needs a value", self.name))
    }

    /// The value of the flag just read, as a duration (`500ms`, `10s`).
    pub fn duration(&mut self) -> Result<Duration, String> {
        let v = self.value()?;
        parse_duration(&v).map_err(|e| format!("{}: {e}", self.name))
    }
}

/// Whether an argument is an option rather than an operand (`-` is stdin, an operand).
pub fn is_option(arg: &str) -> bool {
    arg.starts_with('-') && arg != "-"
}

/// Reads FILE (or stdin for `-`) as podvisor's commands do.
fn read(file: &str) -> Result<String, String> {
    if file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("-: cannot read standard input: {e}"))?;
        return Ok(text);
    }
    std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))
}

/// Reads and validates FILE. On failure prints one `error:` line per problem and returns the
/// exit code (2).
pub fn load(file: &str) -> Result<Manifest, i32> {
    let text = read(file).map_err(|e| {
        super::write_err(&format!("error: {e}\n"));
        2
    })?;
    podvisor_core::spec::load(file, &text).map_err(|errors| {
        let lines: String = errors
            .to_string()
            .lines()
            .map(|l| format!("error: {l}\n"))
            .collect();
        super::write_err(&lines);
        2
    })
}
