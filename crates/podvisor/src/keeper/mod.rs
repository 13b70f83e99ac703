//! `podvisor keeper`: what holds a pod's containers while no supervisor may be there
//! (`podvisor run --live-restore`), as containerd's shim does for a pod sandbox.
//!
//! A run with live restore forks and execs one keeper, at its first container start, and
//! from then on asks it to start each container (everything about it prepared by the run:
//! cgroup, mounts, root, environment; `protocol::StartRequest`). The keeper is the
//! containers' parent and a child subreaper. It holds their stdout and stderr pipes and
//! writes the log files itself (rotation included), reaps the containers and whatever they
//! orphan, records each exit atomically and tells whoever is connected (`protocol`). It never
//! decides anything: no manifest, no restart, no probe. When a container has exited it kills
//! what is left in its process group, takes the rest of the output, records the exit and
//! says so. Once the run that started it is gone it starts nothing more, and ends when the
//! last container it holds has exited; a run that takes the pod over starts a keeper of its
//! own for the containers it starts. SIGTERM, SIGINT, SIGHUP do not end it (it has no
//! terminal; a container is stopped by signalling the container); if it is killed, its
//! containers go with it (PR_SET_PDEATHSIG), and a supervisor that finds no record reports
//! them lost.
//!
//! It runs as `podvisor-keeper` (a binary of its own beside `podvisor`, which links little),
//! or as `podvisor keeper` where that binary is missing. The command line is internal (the
//! supervisor writes it): `STATE_DIR CONTROL_FD EVENTS_FD PROTOCOL MAX_SIZE MAX_FILES`.

pub mod protocol;

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::SystemTime;

use podvisor_core::lifecycle::InstanceId;

use crate::process::sys::{
    self, ChildSetup, ContainerIo, Epoll, Inherited, Reaped, SigSet, SignalFd, EV_READ,
};
use crate::state::StateFile;
use crate::supervisor::logs::{LogFile, LogLimits, LogStream};
use protocol::{ExitNote, Hello, Lines, StartRequest};

/// What the supervisor tells the keeper it starts.
#[derive(Debug, Clone)]
pub struct KeeperArgs {
    pub state_dir: PathBuf,
    /// The control channel (start requests in, answers out).
    pub control: RawFd,
    /// The events channel (`exited` lines out).
    pub events: RawFd,
    pub protocol: u32,
    pub limits: LogLimits,
}

impl KeeperArgs {
    /// The command line after the program (`podvisor keeper` or `podvisor-keeper`).
    pub fn to_args(&self) -> Vec<OsString> {
        vec![
            self.state_dir.clone().into(),
            self.control.to_string().into(),
            self.events.to_string().into(),
            self.protocol.to_string().into(),
            self.limits.max_size.to_string().into(),
            self.limits.max_files.to_string().into(),
        ]
    }

    fn parse(args: &[OsString]) -> Option<KeeperArgs> {
        if args.len() != 6 {
            return None;
        }
        let s = |i: usize| args.get(i).and_then(|a| a.to_str());
        let n = |i: usize| s(i).and_then(|v| v.parse::<i64>().ok());
        Some(KeeperArgs {
            state_dir: PathBuf::from(args.first()?),
            control: n(1)? as RawFd,
            events: n(2)? as RawFd,
            protocol: n(3)? as u32,
            limits: LogLimits {
                max_size: n(4)? as u64,
                max_files: n(5)? as u32,
            },
        })
    }
}

/// `podvisor keeper ...`: returns the exit code (0 once every container's exit is recorded).
pub fn main(args: &[OsString]) -> i32 {
    let Some(a) = KeeperArgs::parse(args) else {
        crate::cli::write_err(
            "podvisor keeper: this command is started by `podvisor run --live-restore`, not by hand\n",
        );
        return 2;
    };
    let mut keeper = Keeper {
        args: a,
        held: Vec::new(),
        clients: Vec::new(),
        scratch: Vec::new(),
    };
    match keeper.keep() {
        Ok(()) => 0,
        Err(e) => {
            crate::cli::write_err(&format!("podvisor keeper {}: {e}\n", sys::getpid()));
            // Containers must not outlive a keeper that cannot hold them.
            for h in keeper.held.iter().flatten() {
                let _ = sys::send_signal(-h.pid, libc::SIGKILL);
            }
            1
        }
    }
}

/// The index of a free (`None`) slot of `slots`, one added if there is none.
pub fn free_slot<T>(slots: &mut Vec<Option<T>>) -> usize {
    match slots.iter().position(Option::is_none) {
        Some(s) => s,
        None => {
            slots.push(None);
            slots.len() - 1
        }
    }
}

const TOKEN_SIGNALS: u64 = 0;
const TOKEN_LISTEN: u64 = 1;
const TOKEN_CONTROL: u64 = 2;
const TOKEN_CLIENT: u64 = 3;
/// A container's stdout (`TOKEN_STREAM | slot << 1`) or stderr (`... | 1`).
const TOKEN_STREAM: u64 = 1 << 32;

/// A container the keeper holds.
#[derive(Debug)]
struct Held {
    name: String,
    instance: u32,
    pid: i32,
    streams: [Option<LogStream>; 2],
    oom_file: Option<PathBuf>,
}

struct Keeper {
    args: KeeperArgs,
    /// By slot (a slot's streams' tokens); freed slots are reused.
    held: Vec<Option<Held>>,
    /// Who hears of exits: the events channel and the runs that took the pod over.
    clients: Vec<UnixStream>,
    /// Where the containers' output lines are put together (`LogStream::drain`).
    scratch: Vec<u8>,
}

impl Keeper {
    fn keep(&mut self) -> io::Result<()> {
        // SIGPIPE turns into EPIPE (a supervisor that went away mid-line); the others are
        // read from the signalfd (SIGCHLD) or never delivered (no terminal).
        sys::block_signals(&[
            libc::SIGCHLD,
            libc::SIGPIPE,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
        ])?;
        let mut set = SigSet::empty();
        set.add(libc::SIGCHLD);
        let signals = SignalFd::new(&set)?;
        let epoll = Epoll::new()?;
        epoll.add(signals.as_raw_fd(), TOKEN_SIGNALS, EV_READ)?;
        let handed = |fd| -> io::Result<UnixStream> {
            Ok(UnixStream::from(OwnedFd::from(sys::take_handed_fd(fd)?)))
        };
        let control = handed(self.args.control)?;
        let events = handed(self.args.events)?;
        control.set_nonblocking(true)?;
        epoll.add(control.as_raw_fd(), TOKEN_CONTROL, EV_READ)?;
        let mut control = Some(Lines::new(control));
        events.set_nonblocking(true)?;
        epoll.add(events.as_raw_fd(), TOKEN_CLIENT, EV_READ)?;
        self.clients.push(events);
        let socket = protocol::socket(&self.args.state_dir, sys::getpid());
        let _ = std::fs::remove_file(&socket);
        let listener = sys::with_umask(0o177, || UnixListener::bind(&socket))?;
        listener.set_nonblocking(true)?;
        epoll.add(listener.as_raw_fd(), TOKEN_LISTEN, EV_READ)?;
        let mut ready = Vec::with_capacity(64);
        loop {
            ready.clear();
            epoll.wait(&mut ready, None)?;
            // Output first, so that a container's last lines are in before its exit.
            for &token in ready.iter().filter(|&&t| t & TOKEN_STREAM != 0) {
                let slot = ((token & !TOKEN_STREAM) >> 1) as usize;
                let k = (token & 1) as usize;
                let Some(h) = self.held.get_mut(slot).and_then(Option::as_mut) else {
                    continue;
                };
                if let Some(s) = h.streams[k].as_mut() {
                    if !s.drain(&mut self.scratch)? {
                        let _ = epoll.delete(s.fd());
                        h.streams[k] = None;
                    }
                }
            }
            if ready.contains(&TOKEN_LISTEN) {
                self.accept(&listener, &epoll);
            }
            if ready.contains(&TOKEN_CLIENT) {
                // A supervisor says nothing: what comes is its end closing.
                self.clients.retain_mut(|c| {
                    let mut buf = [0u8; 64];
                    let open = match c.read(&mut buf) {
                        Ok(0) => false,
                        Ok(_) => true,
                        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
                    };
                    if !open {
                        let _ = epoll.delete(c.as_raw_fd());
                    }
                    open
                });
            }
            if ready.contains(&TOKEN_CONTROL) {
                if let Some(c) = control.as_mut() {
                    let open = c.fill_ready();
                    while let Some(line) = c.take_line() {
                        let answer = self.start(&line, &epoll);
                        // A run that is gone hears nothing: the container is held anyway.
                        let _ = c.stream.write_all(answer.as_bytes());
                    }
                    if !open {
                        let _ = epoll.delete(c.stream.as_raw_fd());
                        control = None;
                    }
                }
            }
            if ready.contains(&TOKEN_SIGNALS) {
                signals.read_all()?;
                while let Reaped::Exited { pid, exit } = sys::reap_one()? {
                    if let Some(slot) = self.slot_of(pid) {
                        self.exited(slot, exit, &epoll)?;
                    }
                }
            }
            // Nobody can start anything here any more, and nothing is held: done.
            if control.is_none() && self.held.iter().all(Option::is_none) {
                break;
            }
        }
        let _ = std::fs::remove_file(&socket);
        // Orphans the containers left that are still exiting are reaped by whoever adopts them.
        Ok(())
    }

    fn slot_of(&self, pid: i32) -> Option<usize> {
        self.held
            .iter()
            .position(|h| h.as_ref().is_some_and(|h| h.pid == pid))
    }

    /// A start request: starts the container and returns the answer line.
    fn start(&mut self, line: &str, epoll: &Epoll) -> String {
        let request = line
            .strip_prefix("start ")
            .ok_or_else(|| format!("{line:?} is not a start request"))
            .and_then(|json| {
                serde_json::from_str::<StartRequest>(json)
                    .map_err(|e| format!("its start request: {e}"))
            });
        let request = match request {
            Ok(r) => r,
            Err(e) => return format!("error {e}\n"),
        };
        match self.spawn(request, epoll) {
            Ok(pid) => format!("pid {pid}\n"),
            Err(e) => match e.raw_os_error() {
                Some(n) => format!("errno {n}\n"),
                None => format!("error {}\n", e.to_string().replace('\n', " ")),
            },
        }
    }

    fn spawn(&mut self, r: StartRequest, epoll: &Epoll) -> io::Result<i32> {
        let (out_read, out_write) = sys::pipe()?;
        let (err_read, err_write) = sys::pipe()?;
        let mut cgroups = Vec::new();
        for path in &r.cgroups {
            let f = std::fs::OpenOptions::new().write(true).open(path);
            cgroups.push(f.map_err(|e| {
                io::Error::other(format!("join its cgroup ({}): {e}", path.display()))
            })?);
        }
        let io = ContainerIo {
            stdout: out_write.as_raw_fd(),
            stderr: err_write.as_raw_fd(),
            working_dir: r.working_dir,
            working_dir_optional: r.working_dir_optional,
            env: r.env.into_iter().map(OsString::from).collect(),
            mounts: r.mounts,
            join_mounts: None,
            join_user: None,
            cgroups: cgroups.iter().map(|f| f.as_raw_fd()).collect(),
            root: r.root,
        };
        let mut mask = SigSet::empty();
        for &s in &r.blocked {
            mask.add(s);
        }
        let inherited = Inherited {
            mask,
            actions: Vec::new(),
        };
        let argv: Vec<OsString> = r.argv.into_iter().map(OsString::from).collect();
        let pid = sys::spawn(&argv, ChildSetup::Container(Box::new(io)), &inherited)?;
        drop((out_write, err_write, cgroups));
        let slot = free_slot(&mut self.held);
        let held = (|| -> io::Result<Held> {
            let dir = self.args.state_dir.join("logs").join(&r.container);
            let path = dir.join(format!("{}.log", r.instance));
            let file = LogFile::create(path, self.args.limits)?;
            let id = InstanceId {
                container: slot,
                instance: r.instance,
            };
            let out = LogStream::new(id, out_read, "stdout", file.clone());
            let err = LogStream::new(id, err_read, "stderr", file);
            epoll.add(out.fd(), TOKEN_STREAM | (slot as u64) << 1, EV_READ)?;
            epoll.add(err.fd(), TOKEN_STREAM | (slot as u64) << 1 | 1, EV_READ)?;
            Ok(Held {
                name: r.container,
                instance: r.instance,
                pid,
                streams: [Some(out), Some(err)],
                oom_file: r.oom_file,
            })
        })();
        match held {
            Ok(h) => {
                self.held[slot] = Some(h);
                Ok(pid)
            }
            Err(e) => {
                // Not held, not started: the container does not run.
                let _ = sys::send_signal(-pid, libc::SIGKILL);
                let _ = sys::send_signal(pid, libc::SIGKILL);
                Err(io::Error::other(format!("hold its output: {e}")))
            }
        }
    }

    /// The container in `slot` has exited: what is left of its group is killed, its last
    /// output taken, its exit recorded and told.
    fn exited(&mut self, slot: usize, exit: sys::Exit, epoll: &Epoll) -> io::Result<()> {
        let Some(mut h) = self.held[slot].take() else {
            return Ok(());
        };
        let finished = crate::supervisor::persist::millis(SystemTime::now());
        let _ = sys::send_signal(-h.pid, libc::SIGKILL);
        for s in h.streams.iter_mut().flatten() {
            let _ = epoll.delete(s.fd());
            s.finish(&mut self.scratch)?;
        }
        let note = ExitNote {
            pid: h.pid,
            exit,
            oom_killed: h
                .oom_file
                .as_deref()
                .is_some_and(crate::cgroup::oom_kills_in),
            finished,
        };
        let name = protocol::exit_file(&h.name, h.instance);
        let dir = protocol::dir(&self.args.state_dir);
        let record = StateFile::new(&dir, &name).map_err(io::Error::other)?;
        record.write(&note.encode()).map_err(io::Error::other)?;
        let line = format!("exited {} {}\n", h.name, h.instance);
        self.clients
            .retain_mut(|c| c.write_all(line.as_bytes()).is_ok());
        Ok(())
    }

    fn accept(&mut self, listener: &UnixListener, epoll: &Epoll) {
        while let Ok((mut s, _)) = listener.accept() {
            // Only root or the keeper's own user, as the status socket.
            let owner = matches!(sys::peer_uid(&s), Ok(uid) if uid == 0 || uid == sys::getuid());
            let hello = Hello {
                protocol: self.args.protocol,
                keeper: sys::getpid(),
                holds: self
                    .held
                    .iter()
                    .flatten()
                    .map(|h| (h.name.clone(), h.instance, h.pid))
                    .collect(),
            };
            if !owner
                || s.write_all(hello.encode().as_bytes()).is_err()
                || s.set_nonblocking(true).is_err()
            {
                continue;
            }
            if epoll.add(s.as_raw_fd(), TOKEN_CLIENT, EV_READ).is_ok() {
                self.clients.push(s);
            }
        }
    }
}
