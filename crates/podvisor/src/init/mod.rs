//! PID 1 mode: `podvisor init -- CMD`, and the `tini` and `dumb-init` personas.
//!
//! Like tini, this is one blocking, single-threaded loop with no async runtime and no timer
//! while nothing happens: every catchable signal is blocked and taken with sigwaitinfo; SIGCHLD
//! drains the one reaper; anything else is forwarded to the child (or its process group). A
//! timeout is armed only while a stop delay or a kill grace is running.
//!
//! It must never leave the terminal, the signal mask or the dispositions it inherited changed
//! for the child, and never exit before the child has (unless its own parent died and
//! `-p` says so).

pub mod args;
mod messages;
pub mod staged;

use std::ffi::OsString;
use std::time::{Duration, Instant};

use crate::process::descendants::descendants_of;
use crate::process::signal::signal_name;
use crate::process::sys::{self, ChildSetup, Exit, Inherited, Reaped, SigSet};
use args::{Config, OnChildExit, Persona};
use messages::Log;

/// Signals that a stop delay holds back: the ones runtimes and terminals send to stop a program.
const STOP_SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGQUIT];

/// After the SIGKILL round of `--kill-descendants`, how often to look again for processes that
/// were forked in between (only in that last phase; nothing polls in normal operation).
const KILL_RECHECK: Duration = Duration::from_millis(100);

/// Runs PID 1 mode and returns the exit code. `prog` is how the program was invoked (for the
/// personas' messages), `args` the arguments after the persona or the `init` subcommand.
pub fn main(persona: Persona, prog: &str, args: &[OsString]) -> i32 {
    // What the loader and libc's start left mapped that nothing runs again (the loader's code,
    // every file's constants and symbol tables) leaves the page tables before PID 1's work:
    // the kernel records the peak RSS at each such step. The code goes after the spawn.
    let _ = sys::forget_loaded_read_only_pages(false);
    let env = |name: &str| std::env::var_os(name);
    let config = match args::parse(persona, prog, args, &env) {
        Ok(c) => c,
        Err(early) => {
            crate::stdio::write_out(&early.stdout);
            crate::stdio::write_err(&early.stderr);
            return early.code;
        }
    };
    let log = Log {
        persona,
        verbosity: config.verbosity,
    };
    for line in &config.debug_at_start {
        log.debug(line);
    }
    if let Some(staged) = &config.staged {
        if let Err(message) = stage(staged, &log) {
            log.fatal(&message);
            return 2;
        }
    }
    match Init::start(config, log) {
        Ok(mut init) => init.run(),
        Err(code) => code,
    }
}

/// Staged instrumentation: reads the Supervision, counts this start and sets the environment
/// COMMAND inherits (see `staged`). `Err`: what is wrong, for one `error:` line (exit 2).
fn stage(args: &staged::StagedArgs, log: &Log) -> Result<(), String> {
    let file = args.supervision.display().to_string();
    let text = std::fs::read_to_string(&args.supervision)
        .map_err(|e| format!("{file}: {}", strerror(&e)))?;
    let staging = staged::read_supervision(&file, &text)?;
    if !staging.enabled {
        log.info("staged instrumentation is not enabled: running the command as it is");
        return Ok(());
    }
    if let Some(names) = &staging.containers {
        let Some(me) = &args.container else {
            return Err(format!(
                "{file}: spec.stagedInstrumentation.containers lists containers: pass --container NAME to say which one this is"
            ));
        };
        if !names.contains(me) {
            log.info(&format!(
                "container {me} is not in spec.stagedInstrumentation.containers: running the command as it is"
            ));
            return Ok(());
        }
    }
    let start = staged::begin(args, &staging.policy, staged::var_set())?;
    if let Some(why) = &start.unusable {
        log.warn(&format!(
            "the lock dir cannot hold the instrumentation lock ({why}): every start runs Disabled"
        ));
    }
    log.info(&format!(
        "instrumentation stage {} (container start {}, {})",
        start.stage,
        start.starts,
        if start.counted {
            "counted now"
        } else {
            "counted before"
        }
    ));
    staged::apply_env(&staging, &start, &args.lock_dir);
    Ok(())
}

/// The phase after the main child has exited, for `--kill-descendants` and `--wait-all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Draining {
    /// Waiting for descendants to exit on their own.
    Waiting,
    /// SIGTERM sent; SIGKILL at the deadline.
    Terminating { kill_at: Instant },
    /// SIGKILL sent; look again for stragglers at the deadline.
    Killing { recheck_at: Instant },
}

#[derive(Debug)]
struct Init {
    config: Config,
    log: Log,
    waited: SigSet,
    child: i32,
    /// The main child's exit code once it has exited (after `-e` remapping).
    exit_code: Option<i32>,
    /// A stop signal held back by `--stop-delay`: (when to forward it, the signal).
    pending_stop: Option<(Instant, i32)>,
    draining: Option<Draining>,
    /// dumb-init: the terminal hand-off signals still to ignore once each.
    hand_off: Vec<i32>,
}

/// The C library's words for an OS error, as the personas print them (bare, without Rust's
/// " (os error N)"), from podvisor's own table (see `process::errno`).
fn strerror(err: &std::io::Error) -> String {
    crate::process::errno::describe(err)
}

impl Init {
    /// Sets up signals, prctl settings and the child. `Err` carries the exit code.
    fn start(config: Config, log: Log) -> Result<Init, i32> {
        let (waited, inherited) = take_signals(config.persona, &log)?;
        become_reaper(&config, &log)?;
        let (setup, hand_off) = detach_for_session(&config, &log);
        let new_session = matches!(setup, ChildSetup::Session);
        let (child, terminal) = match sys::spawn_with_terminal(&config.command, setup, &inherited) {
            Ok(spawned) => spawned,
            Err(e) => return Err(exec_failure(&config, &log, &e)),
        };
        // The rest of what was mapped until now, code included, while the child execs: what
        // supervising runs from here comes back (`sys::forget_loaded_read_only_pages`).
        let _ = sys::forget_loaded_read_only_pages(true);
        announce_child(&config, &log, child, terminal, new_session);
        Ok(Init {
            config,
            log,
            waited,
            child,
            exit_code: None,
            pending_stop: None,
            draining: None,
            hand_off,
        })
    }

    /// The loop: wait for a signal or the next deadline, act, repeat until done.
    fn run(&mut self) -> i32 {
        loop {
            let deadline = self.next_deadline();
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let signal = match sys::wait_signal(&self.waited, timeout) {
                Ok(s) => s,
                Err(e) => {
                    self.log
                        .fatal(&format!("waiting for signals failed: {}", strerror(&e)));
                    return 1;
                }
            };
            match signal {
                Some(libc::SIGCHLD) => self.log.got_sigchld(),
                None => {}
                Some(sig) => self.on_signal(sig),
            }
            // Reap after every wake-up, not only on SIGCHLD: SIGCHLD is one pending bit for
            // many exits, and draining costs one syscall when nothing is there. dumb-init reaps
            // on SIGCHLD alone (a child that exits as a signal is passed on is reaped, and
            // said, once its SIGCHLD is taken), and so does its persona.
            let reaping = signal == Some(libc::SIGCHLD) || !self.dumb();
            let no_children = match reaping.then(|| self.reap()) {
                Some(Ok(none_left)) => none_left,
                Some(Err(code)) => return code,
                None => false,
            };
            self.on_timers();
            if let Some(code) = self.exit_code {
                if self.finished(no_children) {
                    self.log.exiting();
                    return code;
                }
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let stop = self.pending_stop.map(|(at, _)| at);
        let drain = match self.draining {
            Some(Draining::Terminating { kill_at }) => Some(kill_at),
            Some(Draining::Killing { recheck_at }) => Some(recheck_at),
            _ => None,
        };
        match (stop, drain) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn dumb(&self) -> bool {
        self.config.persona == Persona::DumbInit
    }

    fn on_signal(&mut self, received: i32) {
        self.log.received(received);
        if let Some(i) = self.hand_off.iter().position(|&s| s == received) {
            // dumb-init's (the only persona with hand-off signals).
            self.hand_off.remove(i);
            self.log
                .debug(&format!("Ignoring tty hand-off signal {received}."));
            return;
        }
        if self.exit_code.is_some() {
            // The main child is gone; what remains are descendants we wait for.
            let sig = self.config.translate(received);
            if sig != 0 {
                self.signal_descendants(&[sig]);
            }
            return;
        }
        if let Some(delay) = self.config.stop_delay {
            if STOP_SIGNALS.contains(&received) {
                if self.pending_stop.take().is_some() {
                    // A second stop request while the first is held: the sender is impatient,
                    // so both the delay and the held signal give way to this one.
                    self.log
                        .info("second stop signal during the stop delay: forwarding now");
                } else {
                    self.log.info(&format!(
                        "holding {} for {}",
                        signal_name(received),
                        podvisor_core::duration::format_duration(delay)
                    ));
                    self.pending_stop = Some((Instant::now() + delay, received));
                    return;
                }
            }
        }
        self.forward(received);
        if self.config.persona == Persona::DumbInit
            && [libc::SIGTSTP, libc::SIGTTOU, libc::SIGTTIN].contains(&received)
        {
            // dumb-init stops itself too, so that the shell that started it sees the job stop.
            self.log.debug("Suspending self due to TTY signal.");
            let _ = sys::send_signal(sys::getpid(), libc::SIGSTOP);
        }
    }

    /// Forwards a received signal through the rewrite table to the child or its group.
    fn forward(&self, received: i32) {
        let sig = self.config.translate(received);
        if (self.config.rewrite.iter()).any(|(from, _)| *from == received) {
            self.log.translating(received, sig);
        }
        if sig == 0 {
            self.log.dropped(received);
            return;
        }
        let target = if self.config.signal_group {
            -self.child
        } else {
            self.child
        };
        self.log.passing(sig);
        let sent = sys::send_signal(target, sig);
        self.log.forwarded(target, sig, &sent);
    }

    /// Sends each of `sigs`, in order, to every descendant found in one walk of /proc;
    /// returns how many there were.
    fn signal_descendants(&self, sigs: &[i32]) -> usize {
        let pids = descendants_of(sys::getpid());
        for &pid in &pids {
            for &sig in sigs {
                let _ = sys::send_signal(pid, sig);
            }
        }
        pids.len()
    }

    /// Drains every exited child. `Ok(true)` when no child is left at all.
    fn reap(&mut self) -> Result<bool, i32> {
        loop {
            let reaped = sys::reap_one();
            if let Ok(Reaped::Exited { pid, exit }) = reaped {
                self.log.reaped(pid, exit);
            }
            match reaped {
                Ok(Reaped::Exited { pid, exit })
                    if pid == self.child && self.exit_code.is_none() =>
                {
                    self.on_child_exit(exit);
                    if self.dumb() {
                        // dumb-init leaves as soon as its child is reaped: whatever else is
                        // waiting to be reaped is its parent's (as PID 1, the kernel's).
                        return Ok(false);
                    }
                }
                Ok(Reaped::Exited { pid, exit }) => {
                    self.log.reaped_adopted(pid, exit, self.config.warn_on_reap);
                }
                Ok(Reaped::NoneReady) => {
                    self.log.reaped_all(true);
                    return Ok(false);
                }
                Ok(Reaped::NoChildren) => {
                    self.log.reaped_all(false);
                    return Ok(true);
                }
                Err(e) => {
                    self.log
                        .fatal(&format!("waiting for children failed: {}", strerror(&e)));
                    return Err(1);
                }
            }
        }
    }

    fn on_child_exit(&mut self, exit: Exit) {
        self.log.main_child_exited(self.child, exit);
        let code = (exit.code() % 256) as u8;
        let code = if self.config.expect_zero.contains(&code) {
            0
        } else {
            i32::from(code)
        };
        self.exit_code = Some(code);
        self.pending_stop = None;
        match self.config.on_child_exit {
            OnChildExit::Exit => {}
            OnChildExit::TermGroupAndExit => {
                // dumb-init: tell whatever is left of the child's group to go, then leave.
                self.forward(libc::SIGTERM);
                self.log
                    .debug(&format!("Child exited with status {code}. Goodbye."));
            }
            OnChildExit::WaitAll => self.draining = Some(Draining::Waiting),
            OnChildExit::KillDescendants(grace) => {
                // A stopped process only acts on SIGTERM once continued: each gets SIGCONT
                // right after it (as systemd does).
                let n = self.signal_descendants(&[libc::SIGTERM, libc::SIGCONT]);
                if n > 0 {
                    self.log.info(&format!(
                        "sent SIGTERM to {n} remaining descendant(s); SIGKILL in {}",
                        podvisor_core::duration::format_duration(grace)
                    ));
                }
                self.draining = Some(Draining::Terminating {
                    kill_at: Instant::now() + grace,
                });
            }
        }
    }

    fn on_timers(&mut self) {
        if self.next_deadline().is_none() {
            // The common case: no timer, no clock read in the PID 1 loop.
            return;
        }
        let now = Instant::now();
        if let Some((at, sig)) = self.pending_stop {
            if now >= at {
                self.pending_stop = None;
                self.forward(sig);
            }
        }
        match self.draining {
            Some(Draining::Terminating { kill_at })
            | Some(Draining::Killing {
                recheck_at: kill_at,
            }) if now >= kill_at => {
                let n = self.signal_descendants(&[libc::SIGKILL]);
                if n > 0 {
                    self.log
                        .info(&format!("sent SIGKILL to {n} remaining descendant(s)"));
                }
                self.draining = Some(Draining::Killing {
                    recheck_at: now + KILL_RECHECK,
                });
            }
            _ => {}
        }
    }

    /// Whether to exit now that the main child has exited.
    fn finished(&self, no_children: bool) -> bool {
        match self.config.on_child_exit {
            OnChildExit::Exit | OnChildExit::TermGroupAndExit => true,
            OnChildExit::WaitAll | OnChildExit::KillDescendants(_) => no_children,
        }
    }
}

fn describe(exit: Exit) -> String {
    match exit {
        Exit::Code(c) => format!("exited with status {c}"),
        Exit::Signal(s) => format!("was killed by {}", signal_name(s)),
    }
}

/// Reports a failed exec in the persona's words and returns its exit code: 127 not found,
/// 126 not executable (the shell's convention, which tini follows), 2 for dumb-init.
fn exec_failure(config: &Config, log: &Log, err: &std::io::Error) -> i32 {
    let cmd = config.command[0].to_string_lossy();
    let errno = err.raw_os_error();
    match config.persona {
        Persona::DumbInit => {
            log.fatal(&format!("{cmd}: {}", strerror(err)));
            2
        }
        Persona::Tini => {
            log.fatal(&format!("exec {cmd} failed: {}", strerror(err)));
            match errno {
                Some(libc::ENOENT) => 127,
                Some(libc::EACCES) => 126,
                _ => 1,
            }
        }
        Persona::Podvisor => {
            let (code, why) = match errno {
                Some(libc::ENOENT) | Some(libc::ENOTDIR) => (127, "command not found"),
                Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::ENOEXEC)
                | Some(libc::EISDIR) => (126, "not executable"),
                _ => (1, "cannot start it"),
            };
            log.fatal(&format!("{cmd:?}: {why}: {}", strerror(err)));
            code
        }
    }
}

/// Blocks the signals init waits for (all but its own faults and, but for dumb-init, the
/// terminal stops, which it ignores) and says what the child gets back: the inherited mask and
/// dispositions.
fn take_signals(persona: Persona, log: &Log) -> Result<(SigSet, Inherited), i32> {
    // What to wait for: every signal but the ones that report our own faults (tini's
    // choice), and the terminal stops, which we ignore so that writing to a terminal we no
    // longer own in the foreground cannot stop us. dumb-init waits for everything.
    let mut waited = SigSet::full();
    let mut actions = Vec::new();
    if persona != Persona::DumbInit {
        for sig in [
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGABRT,
            libc::SIGTRAP,
            libc::SIGSYS,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            waited.remove(sig);
        }
    }
    let mask = match sys::set_signal_mask(&waited) {
        Ok(old) => old,
        Err(e) => {
            log.fatal(&format!("cannot block signals: {}", strerror(&e)));
            return Err(1);
        }
    };
    if persona != Persona::DumbInit {
        for sig in [libc::SIGTTIN, libc::SIGTTOU] {
            match sys::ignore_signal(sig) {
                Ok(old) => actions.push(old),
                Err(e) => {
                    log.fatal(&format!(
                        "cannot ignore {}: {}",
                        signal_name(sig),
                        strerror(&e)
                    ));
                    return Err(1);
                }
            }
        }
    }
    let inherited = Inherited { mask, actions };
    Ok((waited, inherited))
}

/// The parent-death signal, the child subreaper, and the warning when orphans cannot come back.
fn become_reaper(config: &Config, log: &Log) -> Result<(), i32> {
    let persona = config.persona;
    if let Some(sig) = config.parent_death_signal {
        if let Err(e) = sys::set_parent_death_signal(sig) {
            log.fatal(&match persona {
                Persona::Tini => "Failed to set up parent death signal".to_string(),
                _ => format!("cannot set the parent death signal: {}", strerror(&e)),
            });
            return Err(1);
        }
    }

    let pid1 = sys::getpid() == 1;
    let needs_reaper = matches!(
        config.on_child_exit,
        OnChildExit::KillDescendants(_) | OnChildExit::WaitAll
    );
    // Waiting for, or killing, every descendant is only exact if orphans come back to us.
    let subreaper = config.subreaper || (needs_reaper && !pid1);
    if subreaper {
        if let Err(e) = sys::set_child_subreaper() {
            log.fatal(&match (persona, e.raw_os_error()) {
                (Persona::Tini, Some(libc::EINVAL)) => "PR_SET_CHILD_SUBREAPER is unavailable on this platform. Are you using Linux >= 3.4?".to_string(),
                (Persona::Tini, _) => format!("Failed to register as child subreaper: {}", strerror(&e)),
                _ => format!("cannot register as a child subreaper: {}", strerror(&e)),
            });
            return Err(1);
        }
        log.registered_subreaper();
    }
    if !pid1 && !sys::is_child_subreaper().unwrap_or(false) {
        match persona {
            Persona::Tini => log.warn(
                "Tini is not running as PID 1 and isn't registered as a child subreaper.\n\
                 Zombie processes will not be re-parented to Tini, so zombie reaping won't work.\n\
                 To fix the problem, use the -s option or set the environment variable TINI_SUBREAPER to register Tini as a child subreaper, or run Tini as PID 1.",
            ),
            Persona::Podvisor => log.warn(
                "not PID 1 and not a child subreaper, so orphaned zombies will not be reaped; \
                 use -s or PODVISOR_SUBREAPER=1",
            ),
            Persona::DumbInit => {}
        }
    }
    Ok(())
}

/// How the child starts: its own process group, or (dumb-init) a new session that can take
/// the terminal, with the signals the hand-off makes the kernel send, to ignore once.
fn detach_for_session(config: &Config, log: &Log) -> (ChildSetup, Vec<i32>) {
    let mut hand_off = Vec::new();
    let setup = if config.new_session {
        // dumb-init gives up the terminal so that the child's new session can take it.
        // Giving it up makes the kernel send SIGHUP and SIGCONT to a session leader's group:
        // those two are the hand-off, not for the child (dumb-init #136), so the first of
        // each is ignored.
        match sys::detach_controlling_tty() {
            Err(e) => log.debug(&format!(
                "Unable to detach from controlling tty (errno={} {}).",
                e.raw_os_error().unwrap_or(0),
                strerror(&e)
            )),
            Ok(()) if sys::is_session_leader() => {
                log.debug("Detached from controlling tty, ignoring the first SIGHUP and SIGCONT we receive.");
                hand_off = vec![libc::SIGHUP, libc::SIGCONT];
            }
            Ok(()) => log.debug("Detached from controlling tty, but was not session leader."),
        }
        ChildSetup::Session
    } else {
        ChildSetup::ProcessGroup
    };
    (setup, hand_off)
}

/// Says that the child runs, in each persona's words; dumb-init then leaves its directory.
fn announce_child(
    config: &Config,
    log: &Log,
    child: i32,
    terminal: Option<std::io::Error>,
    new_session: bool,
) {
    let persona = config.persona;
    let name = config.command[0].to_string_lossy();
    match persona {
        Persona::Tini => log.info(&format!(
            "Spawned child process '{name}' with pid '{child}'"
        )),
        Persona::Podvisor => log.info(&format!("spawned child process {name:?} with pid {child}")),
        Persona::DumbInit => {
            log.debug(&format!("Child spawned with PID {child}."));
            if new_session {
                if let Some(e) = terminal {
                    log.debug(&format!(
                        "Unable to attach to controlling tty (errno={} {}).",
                        e.raw_os_error().unwrap_or(0),
                        strerror(&e)
                    ));
                }
                log.debug("setsid complete.");
            }
            // dumb-init keeps no hold on the directory it was started in: a volume can be
            // unmounted under it.
            if let Err(e) = std::env::set_current_dir("/") {
                log.debug(&format!(
                    "Unable to chdir(\"/\") (errno={} {})",
                    e.raw_os_error().unwrap_or(0),
                    strerror(&e)
                ));
            }
        }
    }
}
