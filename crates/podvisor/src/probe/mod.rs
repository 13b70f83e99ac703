//! Probe attempts and hooks as tasks of the run loop: exec, httpGet, tcpSocket, grpc and sleep.
//!
//! The lifecycle core decides when an attempt runs (`Effect::RunProbe`, `Effect::RunHook`);
//! this module runs it without ever blocking the loop: sockets are non-blocking and driven by
//! epoll readiness, exec commands are processes whose exit the one reaper reports, and every
//! probe has a deadline (its `timeoutSeconds`) after which it is a failure and its process group
//! is killed. A hung target costs one timeout, not a stuck loop. Results go back to the core as
//! `Input::Probed` / `Input::HookDone`.

mod grpc;
pub mod http;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use podvisor_core::clock::Instant;
use podvisor_core::lifecycle::{Hook, InstanceId};
use podvisor_core::probe::{Outcome, ProbeKind};
use podvisor_core::spec::plan::Handler;

use crate::process::sys::{self, ChildSetup, ContainerIo, Epoll, Inherited, EV_READ, EV_WRITE};

/// Exec output kept (`maxReadLength`): stdout and stderr together.
const MAX_OUTPUT: usize = 10 * 1024;

/// What a task is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    Probe(InstanceId, ProbeKind),
    Hook(InstanceId, Hook),
}

impl Owner {
    pub fn instance(&self) -> InstanceId {
        match *self {
            Owner::Probe(id, _) | Owner::Hook(id, _) => id,
        }
    }
}

/// What a container's probe and hook commands run with.
#[derive(Debug)]
pub struct ExecContext<'a> {
    pub env: &'a sys::Environment,
    pub working_dir: Option<PathBuf>,
    /// See `ContainerIo::working_dir_optional`.
    pub working_dir_optional: bool,
    pub inherited: &'a Inherited,
    /// The container's mount namespace, when it has volumes: commands run inside it.
    pub mounts: Option<std::os::fd::RawFd>,
    /// The container's user namespace (rootless): joined before its mount namespace.
    pub user_ns: Option<std::os::fd::RawFd>,
    /// Its UTS, IPC and PID namespaces: commands run inside them.
    pub namespaces: sys::Namespaces,
    /// The container's cgroups (`cgroup.procs`, open): commands run inside them.
    pub cgroups: Vec<std::os::fd::RawFd>,
    /// The container's user, groups, capabilities and filters: commands run with them, as
    /// CRI exec runs a command with the container's process settings.
    pub credentials: Option<&'a sys::Credentials>,
}

impl ExecContext<'_> {
    /// A command's process in the container, with these descriptors as its stdin (`None`:
    /// /dev/null), stdout and stderr.
    pub fn container_io(&self, stdin: Option<RawFd>, stdout: RawFd, stderr: RawFd) -> ContainerIo {
        ContainerIo {
            terminal: None,
            stdin,
            stdout,
            stderr,
            working_dir: self.working_dir.clone(),
            working_dir_optional: self.working_dir_optional,
            env: self.env.clone(),
            mounts: Vec::new(),
            join_mounts: self.mounts,
            join_user: self.user_ns,
            cgroups: self.cgroups.clone(),
            root: None,
            credentials: self.credentials.cloned(),
            namespaces: self.namespaces.clone(),
        }
    }
}

#[derive(Debug)]
enum Work {
    Exec(ExecTask),
    Http(http::HttpTask),
    Tcp(TcpTask),
    Grpc(grpc::GrpcTask),
    Sleep,
}

#[derive(Debug)]
struct Task {
    owner: Owner,
    work: Work,
    serial: u64,
    started: Instant,
}

/// The tasks in flight, by slot; the slot is the epoll token's low bits.
#[derive(Debug, Default)]
pub struct Tasks {
    slots: Vec<Option<Task>>,
    free: Vec<usize>,
    /// Deadlines, checked lazily against the slot's current task.
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    serial: u64,
}

/// A finished task: what it was for, how it went, how long it took.
pub type Done = (Owner, Outcome, std::time::Duration);

impl Tasks {
    /// Starts a task. `Ok(Some(pid))` when it is a process the reaper must route here,
    /// `Err(done)` when it ended at once.
    #[allow(clippy::too_many_arguments)]
    pub fn start<'c>(
        &mut self,
        owner: Owner,
        handler: &Handler,
        timeout: Option<Duration>,
        now: Instant,
        ctx: impl FnOnce() -> ExecContext<'c>,
        epoll: &Epoll,
        token_base: u64,
    ) -> Result<Option<(i32, usize)>, Done> {
        let fail = |o: Outcome| (owner, o, Duration::ZERO);
        let (work, pid) = match handler {
            Handler::Exec { command } => {
                let task = ExecTask::start(command, &ctx()).map_err(fail)?;
                let pid = task.pid;
                (Work::Exec(task), Some(pid))
            }
            Handler::Http {
                scheme,
                host,
                port,
                path,
                headers,
            } => (
                Work::Http(
                    http::HttpTask::start(scheme, host, *port, path, headers).map_err(fail)?,
                ),
                None,
            ),
            Handler::Tcp { host, port } => {
                (Work::Tcp(TcpTask::start(host, *port).map_err(fail)?), None)
            }
            Handler::Grpc { port, service } => (
                Work::Grpc(grpc::GrpcTask::start(*port, service).map_err(fail)?),
                None,
            ),
            Handler::Sleep(d) => {
                if d.is_zero() {
                    return Err((owner, Outcome::Success, Duration::ZERO));
                }
                self.insert(owner, Work::Sleep, Some(now + *d), now);
                return Ok(None);
            }
            Handler::Invalid(why) => {
                return Err((owner, Outcome::Error(why.clone()), Duration::ZERO))
            }
        };
        // A loopback connect often completes at once: go as far as possible before waiting.
        let mut work = work;
        let interest = |writable: bool| if writable { EV_WRITE } else { EV_READ };
        let first = match &mut work {
            Work::Exec(_) => Ok(EV_READ),
            Work::Http(h) => match h.advance() {
                http::Next::Wait { writable } | http::Next::Reconnected { writable } => {
                    Ok(interest(writable))
                }
                http::Next::Done(o) => Err(o),
            },
            Work::Tcp(t) => match t.state() {
                Some(o) => Err(o),
                None => Ok(EV_WRITE),
            },
            Work::Grpc(g) => match g.advance() {
                grpc::Next::Wait { writable } => Ok(interest(writable)),
                grpc::Next::Done(o) => Err(o),
            },
            Work::Sleep => Ok(0),
        };
        let first = match first {
            Ok(i) => i,
            Err(outcome) => {
                work.cancel();
                return Err((owner, outcome, Duration::ZERO));
            }
        };
        let deadline = timeout.map(|t| now + t);
        let slot = self.insert(owner, work, deadline, now);
        let task = self.slots[slot].as_ref().expect("just inserted");
        let token = token_base | slot as u64;
        let registered = match &task.work {
            Work::Exec(e) => epoll.add(e.output.as_raw_fd(), token, first),
            Work::Http(h) => epoll.add(h.stream().as_raw_fd(), token, first),
            Work::Tcp(t) => epoll.add(t.stream.as_raw_fd(), token, first),
            Work::Grpc(g) => epoll.add(g.stream().as_raw_fd(), token, first),
            Work::Sleep => Ok(()),
        };
        if let Err(e) = registered {
            let task = self.remove(slot).expect("just inserted");
            task.work.cancel();
            return Err((
                owner,
                Outcome::Error(format!("cannot watch the probe: {e}")),
                Duration::ZERO,
            ));
        }
        Ok(pid.map(|p| (p, slot)))
    }

    fn insert(
        &mut self,
        owner: Owner,
        work: Work,
        deadline: Option<Instant>,
        now: Instant,
    ) -> usize {
        self.serial += 1;
        let task = Task {
            owner,
            work,
            serial: self.serial,
            started: now,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(task);
                s
            }
            None => {
                self.slots.push(Some(task));
                self.slots.len() - 1
            }
        };
        if let Some(d) = deadline {
            self.timers.push(Reverse((d, slot, self.serial)));
        }
        slot
    }

    fn remove(&mut self, slot: usize) -> Option<Task> {
        let task = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        Some(task)
    }

    /// The earliest deadline of a task in flight.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, slot, serial))) = self.timers.peek().copied() {
            if self.is_current(slot, serial) {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }

    fn is_current(&self, slot: usize, serial: u64) -> bool {
        matches!(self.slots.get(slot), Some(Some(t)) if t.serial == serial)
    }

    /// Tasks whose deadline has passed: a probe fails (its process group killed), a sleep hook
    /// ends.
    pub fn expire(&mut self, now: Instant) -> Vec<Done> {
        let mut done = Vec::new();
        while let Some(Reverse((at, slot, serial))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            if !self.is_current(slot, serial) {
                continue;
            }
            let task = self.remove(slot).expect("current");
            let outcome = match &task.work {
                Work::Exec(e) => e.timed_out(),
                Work::Http(h) => h.timed_out(),
                Work::Tcp(t) => Outcome::Failure(format!("dial tcp {}: i/o timeout", t.addr)),
                Work::Grpc(g) => g.timed_out(),
                Work::Sleep => Outcome::Success,
            };
            done.push((task.owner, outcome, now - task.started));
            task.work.cancel();
        }
        done
    }

    /// The task's socket or pipe is ready.
    pub fn on_ready(
        &mut self,
        slot: usize,
        epoll: &Epoll,
        token_base: u64,
        now: Instant,
    ) -> Option<Done> {
        let task = self.slots.get_mut(slot)?.as_mut()?;
        let token = token_base | slot as u64;
        let outcome = match &mut task.work {
            Work::Exec(e) => {
                if !e.drain() {
                    // End of output: the process may still run; its exit decides.
                    let _ = epoll.delete(e.output.as_raw_fd());
                }
                None
            }
            Work::Http(h) => match h.advance() {
                http::Next::Wait { writable } => {
                    let interest = if writable { EV_WRITE } else { EV_READ };
                    let _ = epoll.modify(h.stream().as_raw_fd(), token, interest);
                    None
                }
                http::Next::Reconnected { writable } => {
                    let interest = if writable { EV_WRITE } else { EV_READ };
                    match epoll.add(h.stream().as_raw_fd(), token, interest) {
                        Ok(()) => None,
                        Err(e) => Some(Outcome::Error(format!("cannot watch the probe: {e}"))),
                    }
                }
                http::Next::Done(o) => Some(o),
            },
            Work::Tcp(t) => t.state(),
            Work::Grpc(g) => match g.advance() {
                grpc::Next::Wait { writable } => {
                    let interest = if writable { EV_WRITE } else { EV_READ };
                    let _ = epoll.modify(g.stream().as_raw_fd(), token, interest);
                    None
                }
                grpc::Next::Done(o) => Some(o),
            },
            Work::Sleep => None,
        }?;
        let task = self.remove(slot)?;
        task.work.cancel();
        Some((task.owner, outcome, now - task.started))
    }

    /// An exec task's process exited.
    pub fn on_exit(
        &mut self,
        slot: usize,
        pid: i32,
        exit: sys::Exit,
        now: Instant,
    ) -> Option<Done> {
        match self.slots.get(slot) {
            Some(Some(Task {
                work: Work::Exec(e),
                ..
            })) if e.pid == pid => {}
            _ => return None,
        }
        let mut task = self.remove(slot)?;
        let Work::Exec(e) = &mut task.work else {
            return None;
        };
        if !e.eof {
            e.drain();
        }
        let output = e.output_text();
        let outcome = match exit {
            sys::Exit::Code(0) => Outcome::Success,
            _ => Outcome::Failure(output),
        };
        // Whatever the command left behind in its group goes with it.
        let took = now - task.started;
        task.work.cancel();
        Some((task.owner, outcome, took))
    }

    /// Ends every task of an instance that is gone (its processes killed, sockets closed).
    pub fn cancel_instance(&mut self, id: InstanceId) {
        for slot in 0..self.slots.len() {
            if matches!(&self.slots[slot], Some(t) if t.owner.instance() == id) {
                if let Some(task) = self.remove(slot) {
                    task.work.cancel();
                }
            }
        }
    }

    /// Ends every task; returns the pids of exec tasks, for the caller to reap.
    pub fn cancel_all(&mut self) -> Vec<i32> {
        let mut pids = Vec::new();
        for slot in 0..self.slots.len() {
            if let Some(task) = self.remove(slot) {
                if let Work::Exec(e) = &task.work {
                    pids.push(e.pid);
                }
                task.work.cancel();
            }
        }
        pids
    }
}

impl Work {
    /// Releases what the task holds: an exec task's process group is killed.
    fn cancel(self) {
        if let Work::Exec(e) = self {
            let _ = sys::send_signal(-e.pid, libc::SIGKILL);
        }
    }
}

/// A command run for a probe or hook: its own session and process group (so that a timeout
/// kills it and all it started), the container's environment and working directory, stdout
/// and stderr into one pipe of which the first 10 KiB are kept.
#[derive(Debug)]
pub struct ExecTask {
    pub pid: i32,
    output: File,
    kept: Vec<u8>,
    /// The pipe reached end-of-file: nothing more to read.
    eof: bool,
    command: Vec<String>,
}

impl ExecTask {
    fn start(command: &[String], ctx: &ExecContext<'_>) -> Result<ExecTask, Outcome> {
        if command.is_empty() {
            return Err(Outcome::Error("exec: no command".into()));
        }
        let (read, write) = sys::pipe().map_err(|e| Outcome::Error(format!("pipe: {e}")))?;
        let io = ctx.container_io(None, write.as_raw_fd(), write.as_raw_fd());
        let argv: Vec<OsString> = command.iter().map(OsString::from).collect();
        let pid = sys::spawn(&argv, ChildSetup::Container(Box::new(io)), ctx.inherited);
        drop(write);
        match pid {
            Ok(pid) => Ok(ExecTask {
                pid,
                output: read,
                kept: Vec::new(),
                eof: false,
                command: command.to_vec(),
            }),
            // As the runtime reports an exec that cannot start: an error, not counted.
            Err(e) => Err(Outcome::Error(format!(
                "exec: {:?}: {}",
                command[0],
                go_error_text(&e)
            ))),
        }
    }

    /// Reads what the pipe has; `false` at end of output.
    fn drain(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match self.output.read(&mut buf) {
                Ok(0) => {
                    self.eof = true;
                    return false;
                }
                Ok(n) => {
                    let room = MAX_OUTPUT.saturating_sub(self.kept.len());
                    self.kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
    }

    fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }

    fn timed_out(&self) -> Outcome {
        let mut out = self.output_text();
        if out.is_empty() {
            out = format!("command {:?} timed out", self.command.join(" "));
        }
        Outcome::Failure(out)
    }
}

/// A tcpSocket probe: connected is success, and the socket is closed at once.
#[derive(Debug)]
pub struct TcpTask {
    stream: TcpStream,
    /// The resolved address, which Go names in a dial error (`[::1]:8080` for `localhost`).
    addr: SocketAddr,
}

impl TcpTask {
    fn start(host: &str, port: u16) -> Result<TcpTask, Outcome> {
        let addr =
            http::resolve(host, port).map_err(|e| Outcome::Failure(format!("dial tcp: {e}")))?;
        let stream = sys::tcp_connect_start(&addr).map_err(|e| {
            Outcome::Failure(format!("dial tcp {addr}: connect: {}", go_error_text(&e)))
        })?;
        Ok(TcpTask { stream, addr })
    }

    /// The outcome once the connect has ended; `None` while it is still under way.
    fn state(&self) -> Option<Outcome> {
        match sys::connect_state(&self.stream) {
            sys::ConnectState::Connecting => None,
            sys::ConnectState::Connected => Some(Outcome::Success),
            sys::ConnectState::Failed(e) => Some(Outcome::Failure(format!(
                "dial tcp {}: connect: {}",
                self.addr,
                go_error_text(&e)
            ))),
        }
    }
}

/// An OS error as Go prints it: `connection refused`, not `Connection refused (os error 111)`.
pub fn go_error_text(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error ") {
        Some(i) => &text[..i],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
