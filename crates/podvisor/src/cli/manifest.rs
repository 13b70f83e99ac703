//! What the commands share: the value parsers of their arguments, and reading a manifest
//! (`validate`, `run`, `explain`) with errors printed the same way and exit code 2.

use std::io::Read;
use std::time::Duration;

use podvisor_core::duration::parse_duration;
use podvisor_core::spec::Manifest;

/// A duration argument (`500ms`, `10s`, `5m`), for clap.
pub fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// A size argument (`10Mi`, `1G`, `4096`), at least 1 byte, for clap.
pub fn size(s: &str) -> Result<u64, String> {
    podvisor_core::spec::plan::parse_quantity(s)
        .filter(|q| *q >= 1.0)
        .map(|q| q as u64)
        .ok_or_else(|| "a size such as 10Mi".to_string())
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
