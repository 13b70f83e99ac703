//! What PID 1 says, in the shape of its persona: tini's tagged lines on stdout and stderr at
//! its five levels, dumb-init's `[dumb-init]` debug lines, podvisor's own.

use std::io::Write;

use super::args::Persona;
use super::{describe, strerror};
use crate::process::signal::signal_name;
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

    /// The main child was reaped (dumb-init says nothing more than `reaped` did).
    pub(super) fn main_child_exited(&self, child: i32, exit: Exit) {
        if !self.enabled(Level::Info) {
            return;
        }
        match (self.persona, exit) {
            (Persona::DumbInit, _) => {}
            (Persona::Tini, Exit::Code(c)) => {
                self.info(&format!("Main child exited normally (with status '{c}')"))
            }
            (Persona::Tini, Exit::Signal(s)) => self.info(&format!(
                "Main child exited with signal (with signal '{}')",
                sys::signal_description(s)
            )),
            (Persona::Podvisor, _) => self.info(&format!("main child {child} {}", describe(exit))),
        }
    }

    /// A signal was taken from the blocked ones (tini says so only as it passes it on).
    pub(super) fn received(&self, sig: i32) {
        match self.persona {
            Persona::DumbInit => self.debug(&format!("Received signal {sig}.")),
            Persona::Podvisor if self.enabled(Level::Debug) => {
                self.debug(&format!("received {}", signal_name(sig)))
            }
            _ => {}
        }
    }

    /// `received` is rewritten to `sig` (`0`: dropped) before it is passed on.
    pub(super) fn translating(&self, received: i32, sig: i32) {
        if self.persona == Persona::DumbInit {
            self.debug(&format!("Translating signal {received} to {sig}."));
        }
    }

    /// `received` is rewritten to nothing and not passed on.
    pub(super) fn dropped(&self, received: i32) {
        match self.persona {
            Persona::DumbInit => self.debug("Not forwarding signal 0 to children (ignored)."),
            _ if self.enabled(Level::Debug) => self.debug(&format!(
                "not forwarding {} (dropped)",
                signal_name(received)
            )),
            _ => {}
        }
    }

    /// `sig` is about to be sent on: tini's line.
    pub(super) fn passing(&self, sig: i32) {
        if self.persona == Persona::Tini && self.enabled(Level::Debug) {
            self.debug(&format!(
                "Passing signal: '{}'",
                sys::signal_description(sig)
            ));
        }
    }

    /// What became of `sig` sent on to `target` (the child, or its group when negative).
    pub(super) fn forwarded(&self, target: i32, sig: i32, sent: &std::io::Result<()>) {
        let gone = |e: &std::io::Error| e.raw_os_error() == Some(libc::ESRCH);
        match (self.persona, sent) {
            // dumb-init sends and says so whether or not anyone was left to receive it.
            (Persona::DumbInit, _) => self.debug(&format!("Forwarded signal {sig} to children.")),
            (Persona::Podvisor, Ok(())) if self.enabled(Level::Debug) => {
                self.debug(&format!("forwarded {} to {target}", signal_name(sig)))
            }
            (_, Ok(())) => {}
            (Persona::Tini, Err(e)) if gone(e) => {
                self.warn("Child was dead when forwarding signal")
            }
            (_, Err(e)) if gone(e) => self.warn(&format!(
                "{target} was gone when forwarding {}",
                signal_name(sig)
            )),
            (_, Err(e)) => self.warn(&format!(
                "forwarding {} failed: {}",
                signal_name(sig),
                strerror(e)
            )),
        }
    }

    pub(super) fn registered_subreaper(&self) {
        match self.persona {
            Persona::Tini => self.trace("Registered as child subreaper"),
            _ => self.debug("registered as a child subreaper"),
        }
    }
}
