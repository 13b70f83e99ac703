//! What PID 1 says, in the shape of its persona: tini's tagged lines on stdout and stderr at
//! its five levels, dumb-init's `[dumb-init]` debug lines, podvisor's own.

use std::io::Write;

use super::args::Persona;
use crate::process::sys;

/// Messages in the shape of the persona: tini's `[WARN  tini (PID)]`, dumb-init's
/// `[dumb-init]`, podvisor's `error:` / `podvisor init:`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Log {
    pub(super) persona: Persona,
    pub(super) verbosity: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Level {
    Fatal = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
    /// tini's `-vvv` (verbosity 4): each turn of its loop.
    Trace = 4,
}

impl Log {
    /// Whether a message at `level` would be printed, so that hot paths skip formatting it.
    pub(super) fn enabled(&self, level: Level) -> bool {
        match self.persona {
            // dumb-init has errors and debug lines (with -v), nothing between and no trace.
            Persona::DumbInit => {
                level == Level::Fatal || (self.verbosity >= 1 && level != Level::Trace)
            }
            _ => level == Level::Fatal || (level as u32) <= self.verbosity,
        }
    }

    pub(super) fn emit(&self, level: Level, msg: &str) {
        if !self.enabled(level) {
            return;
        }
        match self.persona {
            Persona::Tini => {
                let tag = match level {
                    Level::Fatal => "FATAL",
                    Level::Warn => "WARN ",
                    Level::Info => "INFO ",
                    Level::Debug => "DEBUG",
                    Level::Trace => "TRACE",
                };
                let line = format!("[{tag} tini ({})] {msg}\n", sys::getpid());
                // tini prints info and debug on stdout, warnings and errors on stderr.
                if level <= Level::Warn {
                    let _ = std::io::stderr().write_all(line.as_bytes());
                } else {
                    let mut out = std::io::stdout();
                    let _ = out.write_all(line.as_bytes());
                    let _ = out.flush();
                }
            }
            Persona::DumbInit => {
                let _ = std::io::stderr().write_all(format!("[dumb-init] {msg}\n").as_bytes());
            }
            Persona::Podvisor => {
                let line = match level {
                    Level::Fatal => format!("error: {msg}\n"),
                    Level::Warn => format!("podvisor init: warning: {msg}\n"),
                    _ => format!("podvisor init: {msg}\n"),
                };
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
        }
    }
    pub(super) fn fatal(&self, msg: &str) {
        self.emit(Level::Fatal, msg)
    }
    pub(super) fn warn(&self, msg: &str) {
        self.emit(Level::Warn, msg)
    }
    pub(super) fn info(&self, msg: &str) {
        self.emit(Level::Info, msg)
    }
    pub(super) fn debug(&self, msg: &str) {
        self.emit(Level::Debug, msg)
    }
    pub(super) fn trace(&self, msg: &str) {
        self.emit(Level::Trace, msg)
    }
}
