//! The two file operations every cgroup level needs: the processes in a cgroup, and writing a
//! control file whole.

use std::io::{self, Write};
use std::path::Path;

/// The pids in a cgroup (`cgroup.procs`); none when it cannot be read.
pub(super) fn procs_of(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Writes `value` to a cgroup control file in one write, as the kernel wants it.
pub(super) fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}
