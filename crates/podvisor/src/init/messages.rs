//! What PID 1 says, in the shape of its persona: tini's tagged lines on stdout and stderr at
//! its five levels, dumb-init's `[dumb-init]` debug lines, podvisor's own.

use std::io::Write;

use super::args::Persona;
use super::describe;
use crate::process::sys::{self, Exit};

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

/// What PID 1's loop does, in the words of the persona that says it (and nothing where it
/// says nothing): the loop reports, the persona's shape is decided here.
impl Log {
    /// SIGCHLD was taken from the blocked signals.
    pub(super) fn got_sigchld(&self) {
        match self.persona {
            Persona::DumbInit => self.debug(&format!("Received signal {}.", libc::SIGCHLD)),
            Persona::Tini => self.debug("Received SIGCHLD"),
            Persona::Podvisor => {}
        }
    }

    /// dumb-init's and tini's line for every child reaped, the main one included, before
    /// anything else is said about it.
    pub(super) fn reaped(&self, pid: i32, exit: Exit) {
        if !self.enabled(Level::Debug) {
            // Checked first: this runs once per zombie, thousands of times a second.
            return;
        }
        match self.persona {
            Persona::DumbInit => self.debug(&match exit {
                Exit::Code(c) => format!("A child with PID {pid} exited with exit status {c}."),
                Exit::Signal(s) => format!("A child with PID {pid} was terminated by signal {s}."),
            }),
            Persona::Tini => self.debug(&format!("Reaped child with pid: '{pid}'")),
            Persona::Podvisor => {}
        }
    }

    /// A child that is not the main one was reaped: with `-w` (`warn`) a warning, else
    /// podvisor's own debug line.
    pub(super) fn reaped_adopted(&self, pid: i32, exit: Exit, warn: bool) {
        match (self.persona, warn) {
            (Persona::Tini, true) => self.warn(&format!("Reaped zombie process with pid={pid}")),
            (Persona::Podvisor, true) => self.warn(&format!(
                "reaped adopted zombie pid {pid} ({})",
                describe(exit)
            )),
            // Checked first: this runs once per zombie, thousands of times a second.
            (Persona::Podvisor, false) if self.enabled(Level::Debug) => {
                self.debug(&format!("reaped pid {pid} ({})", describe(exit)))
            }
            _ => {}
        }
    }

    /// The reaping stopped: nothing more had exited (`children_left`), or no child is left.
    pub(super) fn reaped_all(&self, children_left: bool) {
        if self.persona == Persona::Tini {
            self.trace(match children_left {
                true => "No child to reap",
                false => "No child to wait",
            });
        }
    }

    /// PID 1 leaves with its child's code.
    pub(super) fn exiting(&self) {
        if self.persona == Persona::Tini {
            self.trace("Exiting: child has exited");
        }
    }

    pub(super) fn registered_subreaper(&self) {
        match self.persona {
            Persona::Tini => self.trace("Registered as child subreaper"),
            _ => self.debug("registered as a child subreaper"),
        }
    }
}
