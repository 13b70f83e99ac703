//! `podvisor keeper`: what holds one container instance while no supervisor may be there
//! (`podvisor run --live-restore`), as containerd's shim and CRI-O's conmon do.
//!
//! The supervisor forks, the child starts the container (everything about it prepared by the
//! supervisor: cgroup, namespaces, root, environment) and execs this same binary as
//! `podvisor keeper`, which is from then on the container's parent and a child subreaper. It
//! holds the container's stdout and stderr pipes and writes the log file itself (rotation
//! included), reaps the container and whatever it orphans, records the exit atomically and
//! answers on its socket (`protocol`). It never decides anything: no manifest, no restart,
//! no probe. When the container has exited it kills what is left in its process group, takes
//! the rest of the output, records the exit, tells whoever is connected, and ends. SIGTERM,
//! SIGINT, SIGHUP do not end it (it has no terminal; its container is stopped by signalling
//! the container); if it is killed, the container goes with it (PR_SET_PDEATHSIG), and a
//! supervisor that finds no record reports the container lost.
//!
//! It runs as `podvisor-keeper` (a binary of its own beside `podvisor`, which links little, so
//! that a hundred keepers hold little memory), or as `podvisor keeper` where that binary is
//! missing. The command line is internal (the supervisor writes it): `STATE_DIR CONTAINER
//! INSTANCE PID STDOUT_FD STDERR_FD PROTOCOL MAX_SIZE MAX_FILES [OOM_FILE]`.

pub mod protocol;

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::SystemTime;

use podvisor_core::lifecycle::InstanceId;

use crate::process::sys::{self, Epoll, Reaped, SignalFd, EV_READ};
use crate::state::StateFile;
use crate::supervisor::logs::{LogFile, LogLimits, LogStream};
use protocol::ExitNote;

/// What the supervisor tells a keeper it starts.
#[derive(Debug, Clone)]
pub struct KeeperArgs {
    pub state_dir: PathBuf,
    pub container: String,
    pub instance: u32,
    pub pid: i32,
    pub stdout: RawFd,
    pub stderr: RawFd,
    pub protocol: u32,
    pub limits: LogLimits,
    /// The instance cgroup's file that counts OOM kills, if it has one.
    pub oom_file: Option<PathBuf>,
}

impl KeeperArgs {
    /// The command line after the program (`podvisor keeper` or `podvisor-keeper`).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec![
            self.state_dir.clone().into(),
            self.container.clone().into(),
            self.instance.to_string().into(),
            self.pid.to_string().into(),
            self.stdout.to_string().into(),
            self.stderr.to_string().into(),
            self.protocol.to_string().into(),
            self.limits.max_size.to_string().into(),
            self.limits.max_files.to_string().into(),
        ];
        if let Some(f) = &self.oom_file {
            v.push(f.clone().into());
        }
        v
    }

    fn parse(args: &[OsString]) -> Option<KeeperArgs> {
        let s = |i: usize| args.get(i).and_then(|a| a.to_str());
        let n = |i: usize| s(i).and_then(|v| v.parse::<i64>().ok());
        Some(KeeperArgs {
            state_dir: PathBuf::from(args.first()?),
            container: s(1)?.to_string(),
            instance: n(2)? as u32,
            pid: n(3)? as i32,
            stdout: n(4)? as RawFd,
            stderr: n(5)? as RawFd,
            protocol: n(6)? as u32,
            limits: LogLimits {
                max_size: n(7)? as u64,
                max_files: n(8)? as u32,
            },
            oom_file: args.get(9).map(PathBuf::from),
        })
    }
}

/// `podvisor keeper ...`: returns the exit code (0 once the container's exit is recorded).
pub fn main(args: &[OsString]) -> i32 {
    let Some(a) = KeeperArgs::parse(args) else {
        crate::cli::write_err(
            "podvisor keeper: this command is started by `podvisor run --live-restore`, not by hand\n",
        );
        return 2;
    };
    match keep(&a) {
        Ok(()) => 0,
        Err(e) => {
            crate::cli::write_err(&format!(
                "podvisor keeper {}.{}: {e}\n",
                a.container, a.instance
            ));
            // The container must not outlive a keeper that cannot hold it.
            let _ = sys::send_signal(-a.pid, libc::SIGKILL);
            1
        }
    }
}

const TOKEN_SIGNALS: u64 = 0;
const TOKEN_OUT: u64 = 1;
const TOKEN_ERR: u64 = 2;
const TOKEN_LISTEN: u64 = 3;
const TOKEN_CLIENT: u64 = 4;

fn keep(a: &KeeperArgs) -> io::Result<()> {
    // SIGPIPE turns into EPIPE (a supervisor that went away mid-line); the others are read
    // from the signalfd (SIGCHLD) or never delivered (no terminal, no stop by signal).
    sys::block_signals(&[
        libc::SIGCHLD,
        libc::SIGPIPE,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
    ])?;
    let mut set = sys::SigSet::empty();
    set.add(libc::SIGCHLD);
    let signals = SignalFd::new(&set)?;
    let epoll = Epoll::new()?;
    epoll.add(signals.as_raw_fd(), TOKEN_SIGNALS, EV_READ)?;
    // The pipes' read ends, handed over by the supervisor's child.
    let (out, err) = (
        sys::take_handed_fd(a.stdout)?,
        sys::take_handed_fd(a.stderr)?,
    );
    let dir = a.state_dir.join("logs").join(&a.container);
    let file = LogFile::create(dir.join(format!("{}.log", a.instance)), a.limits)?;
    let id = InstanceId {
        container: 0,
        instance: a.instance,
    };
    let mut streams = [
        Some(LogStream::new(id, out, "stdout", file.clone())),
        Some(LogStream::new(id, err, "stderr", file)),
    ];
    epoll.add(
        streams[0].as_ref().map_or(-1, |s| s.fd()),
        TOKEN_OUT,
        EV_READ,
    )?;
    epoll.add(
        streams[1].as_ref().map_or(-1, |s| s.fd()),
        TOKEN_ERR,
        EV_READ,
    )?;
    let socket = protocol::socket(&a.state_dir, &a.container, a.instance);
    let _ = std::fs::remove_file(&socket);
    let listener = sys::with_umask(0o177, || UnixListener::bind(&socket))?;
    listener.set_nonblocking(true)?;
    epoll.add(listener.as_raw_fd(), TOKEN_LISTEN, EV_READ)?;
    let hello = protocol::hello(a.protocol, sys::getpid(), a.pid);
    let mut clients: Vec<UnixStream> = Vec::new();
    let mut ready = Vec::with_capacity(8);
    let exit = loop {
        ready.clear();
        epoll.wait(&mut ready, None)?;
        for (k, token) in [TOKEN_OUT, TOKEN_ERR].into_iter().enumerate() {
            if ready.contains(&token) {
                if let Some(s) = streams[k].as_mut() {
                    if !s.drain()? {
                        let _ = epoll.delete(s.fd());
                        streams[k] = None;
                    }
                }
            }
        }
        if ready.contains(&TOKEN_LISTEN) {
            accept(&listener, &epoll, &hello, &mut clients);
        }
        if ready.contains(&TOKEN_CLIENT) {
            // A supervisor says nothing: what comes is its end closing.
            clients.retain_mut(|c| {
                let mut buf = [0u8; 64];
                match c.read(&mut buf) {
                    Ok(0) => false,
                    Ok(_) => true,
                    Err(e) => e.kind() == io::ErrorKind::WouldBlock,
                }
            });
        }
        let mut exit = None;
        if ready.contains(&TOKEN_SIGNALS) {
            signals.read_all()?;
            loop {
                match sys::reap_one()? {
                    Reaped::Exited { pid, exit: e } if pid == a.pid => exit = Some(e),
                    Reaped::Exited { .. } => {}
                    Reaped::NoneReady | Reaped::NoChildren => break,
                }
            }
        }
        if let Some(e) = exit {
            break e;
        }
    };
    let finished = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // What the container left in its group goes with it; its last output is taken.
    let _ = sys::send_signal(-a.pid, libc::SIGKILL);
    for s in streams.iter_mut().flatten() {
        s.finish()?;
    }
    let note = ExitNote {
        pid: a.pid,
        exit,
        oom_killed: a
            .oom_file
            .as_deref()
            .is_some_and(crate::cgroup::oom_kills_in),
        finished,
    };
    let name = protocol::exit_file(&a.container, a.instance);
    let record = StateFile::new(&protocol::dir(&a.state_dir), &name).map_err(io::Error::other)?;
    record.write(&note.encode()).map_err(io::Error::other)?;
    let _ = std::fs::remove_file(&socket);
    for mut c in clients {
        let _ = c.write_all(b"exited\n");
    }
    // Orphans the container left that are still exiting are reaped by whoever adopts them.
    Ok(())
}

fn accept(listener: &UnixListener, epoll: &Epoll, hello: &str, clients: &mut Vec<UnixStream>) {
    while let Ok((mut s, _)) = listener.accept() {
        // Only root or the keeper's own user, as the status socket.
        let owner = matches!(sys::peer_uid(&s), Ok(uid) if uid == 0 || uid == sys::getuid());
        if !owner || s.write_all(hello.as_bytes()).is_err() || s.set_nonblocking(true).is_err() {
            continue;
        }
        if epoll.add(s.as_raw_fd(), TOKEN_CLIENT, EV_READ).is_ok() {
            clients.push(s);
        }
    }
}
