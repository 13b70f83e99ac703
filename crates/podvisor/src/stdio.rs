//! Writing a command's output: to stdout or stderr, whole, ignoring failure (a closed pipe
//! must not turn into a panic or a second error).

use std::io::Write;

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
