//! Failpoints: named steps where a debug build kills its own process (SIGKILL, as `kill -9`
//! would) when a test asks for it, so that the tests can check what a crash at each step
//! leaves behind (`tests/failpoints.rs`); or holds a thread there (`stall`), or fails the step
//! with an error (`error`). A release build compiles every point away.
//!
//! `PODVISOR_FAILPOINT=NAME[@N]` kills the process the Nth time (the first by default) it
//! passes the point NAME. With `PODVISOR_FAILPOINT_MARK=PATH` the kill happens only when PATH
//! can be created (it must not exist): the run and the keepers it starts share the
//! environment, so the mark makes the point fire once across all of them, and tells the test
//! that it fired. The points are listed in `docs/testing.md`.

/// The variable naming the armed point.
pub const ENV: &str = "PODVISOR_FAILPOINT";
/// The variable naming the mark file.
pub const MARK_ENV: &str = "PODVISOR_FAILPOINT_MARK";

/// Passes the point `name`: the process is killed here if the point is armed (debug builds).
#[cfg(debug_assertions)]
pub fn hit(name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<(String, u32)>> = OnceLock::new();
    static PASSED: AtomicU32 = AtomicU32::new(0);
    let Some((point, nth)) = ARMED.get_or_init(|| armed(ENV)) else {
        return;
    };
    if point != name || PASSED.fetch_add(1, Ordering::Relaxed) + 1 != *nth {
        return;
    }
    if let Some(mark) = std::env::var_os(MARK_ENV) {
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(mark);
        if made.is_err() {
            return;
        }
    }
    let _ = super::sys::send_signal(super::sys::getpid(), libc::SIGKILL);
    // SIGKILL is not blocked or caught: nothing runs after it.
    unreachable!("failpoint {name}: SIGKILL returned");
}

/// Passes the point `name` (release builds: nothing).
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn hit(_name: &str) {}

/// The point and count the variable `env` names (`NAME[@N]`), if any.
#[cfg(debug_assertions)]
fn armed(env: &str) -> Option<(String, u32)> {
    let spec = std::env::var(env).ok()?;
    match spec.split_once('@') {
        Some((name, n)) => Some((name.to_string(), n.parse().ok()?)),
        None => Some((spec, 1)),
    }
}

/// The variable naming the point where a step fails (`error`).
pub const ERROR_ENV: &str = "PODVISOR_FAILPOINT_ERROR";

/// Passes the point `name`: an error is returned here (as if the step's system call had failed)
/// when `PODVISOR_FAILPOINT_ERROR` names it (debug builds): `NAME@N` fails only the Nth pass of
/// the process through the point, `NAME` the first.
#[cfg(debug_assertions)]
pub fn error(name: &str) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<(String, u32)>> = OnceLock::new();
    static PASSED: AtomicU32 = AtomicU32::new(0);
    let Some((point, nth)) = ARMED.get_or_init(|| armed(ERROR_ENV)) else {
        return Ok(());
    };
    if point != name || PASSED.fetch_add(1, Ordering::Relaxed) + 1 != *nth {
        return Ok(());
    }
    Err(std::io::Error::other(format!("failpoint {name}")))
}

/// Passes the point `name` (release builds: nothing).
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn error(_name: &str) -> std::io::Result<()> {
    Ok(())
}

/// The variable naming the point where a thread is held (`stall`).
pub const STALL_ENV: &str = "PODVISOR_STALL";
/// The variable naming the gate file of a held point.
pub const STALL_GATE_ENV: &str = "PODVISOR_STALL_GATE";

/// Passes the point `name`: when `PODVISOR_STALL` names it (debug builds), the thread creates
/// the file `PODVISOR_STALL_GATE` names and waits there until that file is removed, so that a
/// test can check what goes on while the step is held. `NAME@N` holds only the Nth pass of
/// the process through the point; `NAME` every pass.
#[cfg(debug_assertions)]
pub fn stall(name: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static PASSED: AtomicU32 = AtomicU32::new(0);
    let Some(spec) = std::env::var(STALL_ENV).ok() else {
        return;
    };
    let (point, nth) = match spec.split_once('@') {
        Some((point, n)) => (point, n.parse::<u32>().ok()),
        None => (spec.as_str(), None),
    };
    if point != name {
        return;
    }
    let pass = PASSED.fetch_add(1, Ordering::Relaxed) + 1;
    if nth.is_some_and(|n| n != pass) {
        return;
    }
    let Some(gate) = std::env::var_os(STALL_GATE_ENV).map(std::path::PathBuf::from) else {
        return;
    };
    if std::fs::write(&gate, b"").is_err() {
        return;
    }
    while gate.exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Passes the point `name` (release builds: nothing).
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn stall(_name: &str) {}

/// The stall variables of this process, `NAME=value`, for a process podvisor starts with an
/// environment of its own (a pod's pause), so that a test can hold it too (debug builds).
#[cfg(debug_assertions)]
pub fn stall_environment() -> Vec<std::ffi::OsString> {
    [STALL_ENV, STALL_GATE_ENV]
        .into_iter()
        .filter_map(|name| {
            let mut pair = std::ffi::OsString::from(format!("{name}="));
            pair.push(std::env::var_os(name)?);
            Some(pair)
        })
        .collect()
}

/// The stall variables passed on (release builds: none).
#[cfg(not(debug_assertions))]
pub fn stall_environment() -> Vec<std::ffi::OsString> {
    Vec::new()
}
