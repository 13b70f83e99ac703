//! `podvisor keeper`: what holds a pod's containers while no supervisor may be there
//! (`podvisor run --live-restore`), as containerd's shim does for a pod sandbox.
//!
//! A run with live restore forks and execs one keeper (as it starts a pod afresh, or at its first
//! container start when it takes a pod over), and from then on asks it to start each container
//! (everything about it prepared by the run: cgroup, mounts, root, environment;
//! `state::keeper::StartRequest`), which it makes on two starter threads, side by side
//! (`starters`), and answers in the order asked. The keeper is the containers' parent and a child
//! subreaper. It holds their stdout and stderr pipes and writes the log files itself (rotation
//! included), reaps the containers and whatever they orphan, and tells each exit to whoever is
//! connected (`state::keeper`): the run that started it counts the exit in its saved record, and
//! the keeper writes an exit note atomically only where no run may have counted it. It never
//! decides anything: no manifest, no restart, no probe. When a container has exited it kills what
//! is left in its process group, takes the rest of the output, and tells the exit. Once the run
//! that started it is gone it starts nothing more, and ends when the last container it holds has
//! exited; a run that takes the pod over starts a keeper of its own for the containers it starts.
//! SIGTERM, SIGINT, SIGHUP do not end it (it has no terminal; a container is stopped by signalling
//! the container); if it is killed, its containers go with it (PR_SET_PDEATHSIG), and a supervisor
//! that finds no record reports them lost.
//!
//! It runs as `podvisor-keeper` (a binary of its own beside `podvisor`, which links little),
//! or as `podvisor keeper` where that binary is missing. The command line is internal (the
//! supervisor writes it, `state::keeper::KeeperArgs`).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use podvisor_core::lifecycle::InstanceId;
use slab::Slab;

use crate::process::failpoint;
use crate::process::settle::{self, Settling};
use crate::process::starters::{self, Job, Starters};
use crate::process::streams::Streams;
use crate::process::sys::{
    self, ChildSetup, ContainerIo, Epoll, Inherited, Namespaces, PidSetup, Reaped, SigSet,
    SignalFd, EV_READ,
};
use crate::state::keeper::{
    Channel, Ending, ExitNote, Held as HeldName, Hello, InstanceName, KeeperArgs, LogReport,
    Message, StartFailure, StartRequest,
};
use crate::state::logs::{LogFile, LogNews, LogStream};
use crate::state::StateDir;
use crate::stdio::write_err;

/// `podvisor keeper ...`: returns the exit code (0 once every container's exit is recorded).
pub fn main(args: &[OsString]) -> i32 {
    // It outlives runs: what only the loader read goes (`sys::forget_relocations`).
    let _ = sys::forget_relocations();
    let Some(a) = KeeperArgs::parse(args) else {
        write_err(
            "podvisor keeper: this command is started by `podvisor run --live-restore`, not by hand\n",
        );
        return 2;
    };
    let mut keeper = Keeper {
        dir: StateDir::new(&a.state_dir),
        args: a,
        held: Slab::new(),
        clients: Vec::new(),
        starter_here: true,
        uncounted: Vec::new(),
        scratch: Vec::new(),
        // Looked up once: what the keeper inherited does not change while it lives.
        ignored: sys::defaults_for_ignored(),
        starters: None,
        asker: None,
        pending: VecDeque::new(),
        asked: 0,
        early: Vec::new(),
    };
    match keeper.keep() {
        Ok(()) => 0,
        Err(e) => {
            write_err(&format!("podvisor keeper {}: {e}\n", sys::getpid()));
            // Containers must not outlive a keeper that cannot hold them.
            for (_, h) in &keeper.held {
                let _ = sys::send_signal(-h.pid, libc::SIGKILL);
            }
            1
        }
    }
}

const TOKEN_SIGNALS: u64 = 0;
const TOKEN_LISTEN: u64 = 1;
const TOKEN_CONTROL: u64 = 2;
const TOKEN_CLIENT: u64 = 3;
/// A starter has made a start (`starters`).
const TOKEN_MADE: u64 = 4;
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
    /// The write end of its stdin (`stdin: true`), held while it runs.
    _stdin: Option<OwnedFd>,
}

struct Keeper {
    args: KeeperArgs,
    dir: StateDir,
    /// By slot (a slot's streams' tokens).
    held: Slab<Held>,
    /// Who hears of exits: the events channel and the runs that took the pod over.
    clients: Vec<Channel>,
    /// The run that started this keeper is there (its control end is open).
    starter_here: bool,
    /// Exits told (`ended`) that the run which started the keeper has not yet `counted`:
    /// noted on disk if it goes first (`note_uncounted`).
    uncounted: Vec<(InstanceName, ExitNote)>,
    /// Where the containers' output lines are put together (`LogStream::drain`).
    scratch: Vec<u8>,
    /// The default disposition of each signal the keeper was started ignoring: its
    /// containers start with none ignored.
    ignored: Vec<sys::SigAction>,
    starters: Option<Starters>,
    /// The run's control stream, as the starters see it (`asker`).
    asker: Option<Arc<UnixStream>>,
    /// The starts asked, in the order asked: each is answered in turn, once it is made.
    pending: VecDeque<Pending>,
    /// Starts asked so far (their numbers).
    asked: u64,
    /// Exits reaped of no container held while starts are being made: a child may exit before
    /// its start is answered (and it is held).
    early: Vec<(i32, sys::Exit)>,
}

/// A start asked, not yet answered.
struct Pending {
    seq: u64,
    answer: Answer,
}

enum Answer {
    /// Known before a starter had it: refused, or failed as it was prepared.
    Ready(Message),
    /// With a starter.
    Making(Box<Making>),
}

/// A start with a starter: what the keeper keeps for it meanwhile, and how it went.
struct Making {
    container: String,
    instance: u32,
    oom_file: Option<PathBuf>,
    /// The read ends of its stdout and stderr, by stream (none with a terminal).
    read: Vec<(std::fs::File, &'static str)>,
    /// Its streams: what the child gets, until it has exec'd, and what is kept.
    streams: Streams,
    /// Held open until the child has exec'd: its cgroup files, the pod's namespaces it
    /// joins. The child uses them by number.
    _open: Vec<OwnedFd>,
    made: Option<io::Result<i32>>,
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
        // Containers start through kept low descriptors, as the run's do (and so, on cgroup
        // v2, born in their cgroups): before any pipe or log is open. A set for each starter.
        sys::reserve_low_fd_sets(starters::STARTERS)?;
        let epoll = Epoll::new()?;
        epoll.add(signals.as_raw_fd(), TOKEN_SIGNALS, EV_READ)?;
        let handed = |fd| -> io::Result<UnixStream> {
            let stream = UnixStream::from(OwnedFd::from(sys::take_handed_fd(fd)?));
            stream.set_nonblocking(true)?;
            Ok(stream)
        };
        let control = handed(self.args.control)?;
        epoll.add(control.as_raw_fd(), TOKEN_CONTROL, EV_READ)?;
        // The run that started this keeper speaks its release's protocol on the control pair.
        let mut control = Some(Channel::new(control));
        let events = handed(self.args.events)?;
        epoll.add(events.as_raw_fd(), TOKEN_CLIENT, EV_READ)?;
        self.clients
            .push(Channel::speaking(events, self.args.protocol));
        let socket = self.dir.keeper_socket(sys::getpid());
        let _ = std::fs::remove_file(&socket);
        let listener = sys::with_umask(0o177, || UnixListener::bind(&socket))?;
        listener.set_nonblocking(true)?;
        epoll.add(listener.as_raw_fd(), TOKEN_LISTEN, EV_READ)?;
        // Containers are made by starter threads, two at once (`starters`), which allocate
        // from the one heap, given back as it settles.
        sys::one_heap();
        let made = Starters::polled("keeper.start")?;
        if let Some(wake) = &made.wake {
            epoll.add(wake.as_raw_fd(), TOKEN_MADE, EV_READ)?;
        }
        self.starters = Some(made);
        let mut ready = Vec::with_capacity(64);
        let mut settling = Settling::default();
        loop {
            ready.clear();
            // Once the work of a burst is over (a second without events), the memory it took
            // goes back, as `run`'s does (`process::settle`): a keeper holds its containers
            // for as long as they run.
            epoll.wait(&mut ready, settling.pending().then_some(settle::SETTLE))?;
            if ready.is_empty() {
                settling.idle(std::time::Instant::now(), "keeper.settle");
                continue;
            }
            settling.work();
            // Output first, so that a container's last lines are in before its exit.
            for &token in ready.iter().filter(|&&t| t & TOKEN_STREAM != 0) {
                self.drain(token, &epoll)?;
            }
            if ready.contains(&TOKEN_LISTEN) {
                // A run taking the pod over reads the notes of what is no longer held.
                self.note_uncounted();
                self.accept(&listener, &epoll);
            }
            if ready.contains(&TOKEN_CLIENT) {
                self.clients_readable(&epoll);
            }
            if ready.contains(&TOKEN_CONTROL) {
                if let Some(c) = control.as_mut() {
                    if !self.control_readable(c) {
                        let _ = epoll.delete(c.stream.as_raw_fd());
                        control = None;
                        self.asker = None;
                        self.starter_here = false;
                        self.note_uncounted();
                    }
                }
            }
            if ready.contains(&TOKEN_MADE) {
                self.made();
            }
            // What is made is answered, in the order asked, and held.
            self.answer(control.as_mut(), &epoll)?;
            if ready.contains(&TOKEN_SIGNALS) {
                signals.read_all()?;
                while let Reaped::Exited { pid, exit } = sys::reap_one()? {
                    if let Some(slot) = self.slot_of(pid) {
                        self.exited(slot, exit, &epoll)?;
                    } else if !self.pending.is_empty() {
                        self.early.push((pid, exit));
                    }
                }
            }
            if self.pending.is_empty() {
                // Orphans, and children of starts that failed.
                self.early.clear();
            }
            // Nobody can start anything here any more, and nothing is held: done.
            if control.is_none() && self.held.is_empty() && self.pending.is_empty() {
                break;
            }
        }
        self.note_uncounted();
        let _ = std::fs::remove_file(&socket);
        // Orphans the containers left that are still exiting are reaped by whoever adopts them.
        Ok(())
    }

    /// A container's stdout or stderr (by its token) has output, or has ended.
    fn drain(&mut self, token: u64, epoll: &Epoll) -> io::Result<()> {
        let slot = ((token & !TOKEN_STREAM) >> 1) as usize;
        let k = (token & 1) as usize;
        let Some(h) = self.held.get_mut(slot) else {
            return Ok(());
        };
        let mut news = Vec::new();
        if let Some(s) = h.streams[k].as_mut() {
            let open = s.drain(&mut self.scratch)?;
            news = s.take_news();
            if !open {
                let _ = epoll.delete(s.fd());
                h.streams[k] = None;
            }
        }
        let (name, instance) = (h.name.clone(), h.instance);
        self.tell_log_news(&name, instance, news);
        Ok(())
    }

    /// Tells the runs connected what happened to an instance's log writes (they make the
    /// events; a keeper of protocol 1 says nothing of it).
    fn tell_log_news(&mut self, container: &str, instance: u32, news: Vec<LogNews>) {
        if self.args.protocol < 2 {
            return;
        }
        for news in news {
            let report = Message::Log(LogReport {
                container: container.to_string(),
                instance,
                news,
            });
            self.clients.retain_mut(|c| c.send(&report).is_ok());
        }
    }

    /// A connected run's end is readable: a run says nothing, so what comes is its end
    /// closing.
    fn clients_readable(&mut self, epoll: &Epoll) {
        self.clients.retain_mut(|c| {
            let mut buf = [0u8; 64];
            let open = match c.stream.read(&mut buf) {
                Ok(0) => false,
                Ok(_) => true,
                Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            };
            if !open {
                let _ = epoll.delete(c.stream.as_raw_fd());
            }
            open
        });
    }

    /// The run's control channel is readable: each start it asks for is prepared and handed
    /// to a starter, to be answered in turn (`answer`), while the run is there to hear it.
    /// `false` once the run's end has closed.
    fn control_readable(&mut self, c: &mut Channel) -> bool {
        let open = c.fill_ready();
        while let Some(message) = c.take() {
            // What the run counted before it went is counted all the same.
            if let Ok(Message::Counted(name)) = &message {
                self.uncounted.retain(|(n, _)| n != name);
                continue;
            }
            // A run killed with starts asked ahead (it asks up to 16 before reading the
            // first answer) is gone: what it asked is not made. It would be a container no
            // saved state knows, or one that fails to join the namespaces the run held; the
            // run that takes the pod over starts each again as its own. (A starter looks
            // again before it makes one.)
            if !open || sys::hung_up(c.stream.as_raw_fd()).unwrap_or(true) {
                continue;
            }
            let seq = self.asked;
            self.asked += 1;
            let answer = match message {
                Ok(Message::Start(request)) => match self.hand(seq, *request, &c.stream) {
                    Ok(making) => Answer::Making(making),
                    Err(e) => Answer::Ready(Message::Failed(StartFailure::from(&e))),
                },
                Ok(other) => Answer::Ready(Message::Failed(StartFailure::Error(format!(
                    "{other:?} is not a start request"
                )))),
                Err(e) => Answer::Ready(Message::Failed(StartFailure::Error(e))),
            };
            self.pending.push_back(Pending { seq, answer });
        }
        open
    }

    /// Takes in the starts the starters have made.
    fn made(&mut self) {
        let Some(starters) = self.starters.as_mut() else {
            return;
        };
        for (seq, result) in starters.take_done() {
            let making = self.pending.iter_mut().find(|p| p.seq == seq);
            if let Some(Pending {
                answer: Answer::Making(m),
                ..
            }) = making
            {
                m.made = Some(result);
            }
        }
    }

    /// Answers the starts asked that are made, in the order asked, and holds what started.
    /// A run that is gone (`control` is none) hears nothing: the containers are held anyway.
    fn answer(&mut self, mut control: Option<&mut Channel>, epoll: &Epoll) -> io::Result<()> {
        loop {
            let made = match self.pending.front().map(|p| &p.answer) {
                Some(Answer::Ready(_)) => true,
                Some(Answer::Making(m)) => m.made.is_some(),
                None => false,
            };
            if !made {
                return Ok(());
            }
            let Some(pending) = self.pending.pop_front() else {
                return Ok(());
            };
            let mut held = None;
            let answer = match pending.answer {
                Answer::Ready(message) => message,
                Answer::Making(m) => match self.hold(*m, epoll) {
                    Ok((slot, pid)) => {
                        held = Some((slot, pid));
                        Message::Started { pid }
                    }
                    Err(e) => Message::Failed(StartFailure::from(&e)),
                },
            };
            if let Some(c) = control.as_deref_mut() {
                let _ = c.send(&answer);
            }
            failpoint::hit("keeper.answered");
            // One that has exited already is told now, after its answer.
            if let Some((slot, pid)) = held {
                if let Some(i) = self.early.iter().position(|(p, _)| *p == pid) {
                    let (_, exit) = self.early.swap_remove(i);
                    self.exited(slot, exit, epoll)?;
                }
            }
        }
    }

    /// A handle on the control stream `c` for the starters (one copy, made at the first start).
    fn asker(&mut self, c: &UnixStream) -> io::Result<Arc<UnixStream>> {
        if let Some(a) = &self.asker {
            return Ok(Arc::clone(a));
        }
        let a = Arc::new(c.try_clone()?);
        self.asker = Some(Arc::clone(&a));
        Ok(a)
    }

    fn slot_of(&self, pid: i32) -> Option<usize> {
        self.held
            .iter()
            .find(|(_, h)| h.pid == pid)
            .map(|(slot, _)| slot)
    }

    /// Prepares start `seq` as the run asked it and hands it to a starter.
    fn hand(&mut self, seq: u64, r: StartRequest, asker: &UnixStream) -> io::Result<Box<Making>> {
        let (streams, read) = Streams::new(r.stdio.unwrap_or_default())?;
        let mut open: Vec<OwnedFd> = Vec::new();
        let mut cgroups = Vec::new();
        for path in &r.cgroups {
            let f = std::fs::OpenOptions::new().write(true).open(path);
            let f = f.map_err(|e| {
                io::Error::other(format!("join its cgroup ({}): {e}", path.display()))
            })?;
            cgroups.push(f.as_raw_fd());
            open.push(f.into());
        }
        let mut open_ns = |path: &Option<PathBuf>| -> io::Result<Option<i32>> {
            let Some(p) = path else { return Ok(None) };
            let fd = sys::open_namespace_path(&p.to_string_lossy()).map_err(|e| {
                io::Error::other(format!("join the pod's namespace ({}): {e}", p.display()))
            })?;
            let raw = fd.as_raw_fd();
            open.push(fd);
            Ok(Some(raw))
        };
        let uts = open_ns(&r.namespaces.join_uts)?;
        let ipc = open_ns(&r.namespaces.join_ipc)?;
        let mut io = ContainerIo {
            terminal: None,
            stdin: None,
            stdout: -1,
            stderr: -1,
            working_dir: r.working_dir,
            working_dir_optional: r.working_dir_optional,
            env: sys::Environment::new(&r.env)?,
            mounts: r.mounts,
            join_mounts: None,
            join_user: None,
            cgroups,
            root: r.root,
            credentials: r.credentials,
            namespaces: Namespaces {
                join_uts: uts,
                join_ipc: ipc,
                new_uts: r.namespaces.new_uts,
                new_ipc: r.namespaces.new_ipc,
                pid: match r.namespaces.new_pid {
                    true => PidSetup::New,
                    false => PidSetup::Inherit,
                },
            },
        };
        streams.give(&mut io);
        let mut mask = SigSet::empty();
        for &s in &r.blocked {
            mask.add(s);
        }
        // No signal ignored in the container, as the run starts its own (see `supervisor`).
        let inherited = Inherited {
            mask,
            actions: self.ignored.clone(),
        };
        let job = Job {
            seq,
            argv: r.argv.into_iter().map(OsString::from).collect(),
            setup: ChildSetup::Container(Box::new(io)),
            inherited,
            asker: Some(self.asker(asker)?),
        };
        let starters = self
            .starters
            .as_mut()
            .ok_or_else(|| io::Error::other("no starters"))?;
        starters.start(job);
        Ok(Box::new(Making {
            container: r.container,
            instance: r.instance,
            oom_file: r.oom_file,
            read,
            streams,
            _open: open,
            made: None,
        }))
    }

    /// Holds a start that was made: its output is read and logged from here on. Its slot and
    /// pid; an error for a start that failed, or whose output cannot be held (then it is
    /// killed: not held, not started).
    fn hold(&mut self, m: Making, epoll: &Epoll) -> io::Result<(usize, i32)> {
        let Making {
            container,
            instance,
            oom_file,
            read,
            streams,
            _open,
            made,
        } = m;
        drop(_open);
        let pid = made.unwrap_or_else(|| Err(io::Error::other("not made")))?;
        failpoint::hit("keeper.spawned");
        // Our copies of the child's ends go here, or the pipes never reach end-of-file.
        let kept = streams.made();
        let entry = self.held.vacant_entry();
        let slot = entry.key();
        let held = (|| -> io::Result<Held> {
            let kept = kept?;
            let path = self.dir.instance_log(&container, instance);
            let file = LogFile::create(path, self.args.limits);
            let id = InstanceId {
                container: slot,
                instance,
            };
            // A terminal's master is its stdout.
            let read = read.into_iter().chain(kept.terminal.map(|m| (m, "stdout")));
            let mut streams = [None, None];
            for ((pipe, stream), (i, held)) in read.zip(streams.iter_mut().enumerate()) {
                let log = LogStream::new(id, pipe, stream, file.clone());
                epoll.add(
                    log.fd(),
                    TOKEN_STREAM | (slot as u64) << 1 | i as u64,
                    EV_READ,
                )?;
                *held = Some(log);
            }
            Ok(Held {
                name: container,
                instance,
                pid,
                streams,
                oom_file,
                _stdin: kept.stdin,
            })
        })();
        match held {
            Ok(h) => {
                entry.insert(h);
                Ok((slot, pid))
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
        let Some(mut h) = self.held.try_remove(slot) else {
            return Ok(());
        };
        failpoint::hit("keeper.exit.reaped");
        let finished = crate::state::record::millis(SystemTime::now());
        let _ = sys::send_signal(-h.pid, libc::SIGKILL);
        let mut news = Vec::new();
        for s in h.streams.iter_mut().flatten() {
            let _ = epoll.delete(s.fd());
            s.finish(&mut self.scratch)?;
            news.extend(s.take_news());
        }
        self.tell_log_news(&h.name, h.instance, news);
        let note = ExitNote {
            pid: h.pid,
            exit,
            oom_killed: h
                .oom_file
                .as_deref()
                .is_some_and(crate::cgroup::oom_kills_in),
            finished,
        };
        let name = InstanceName {
            container: h.name,
            instance: h.instance,
        };
        // The run that started the keeper counts the exit it is told (protocol 3 on): a note
        // is written only if it goes before it says so. Otherwise the note is written first.
        let told = if self.starter_here && self.args.protocol >= 3 {
            self.uncounted.push((name.clone(), note));
            Message::Ended(Ending::new(name, &note))
        } else {
            self.write_note(&name, &note);
            Message::Exited(name)
        };
        failpoint::hit("keeper.exit.noted");
        self.clients.retain_mut(|c| c.send(&told).is_ok());
        Ok(())
    }

    /// Writes an instance's exit note. A note that cannot be written (a full disk) loses this
    /// exit only: the runs hear of it all the same and report it lost; the other containers
    /// are held on.
    fn write_note(&self, name: &InstanceName, note: &ExitNote) {
        let written = (self.dir.exit_note(&name.container, name.instance))
            .and_then(|record| record.write(&note.encode(self.args.protocol)));
        if let Err(e) = written {
            write_err(&format!("podvisor keeper {}: {e}\n", sys::getpid()));
        }
    }

    /// The exits told and not counted are written as notes, for the run that reads them.
    fn note_uncounted(&mut self) {
        for (name, note) in std::mem::take(&mut self.uncounted) {
            self.write_note(&name, &note);
        }
    }

    fn accept(&mut self, listener: &UnixListener, epoll: &Epoll) {
        while let Ok((s, _)) = listener.accept() {
            // Only root or the keeper's own user, as the status socket.
            let owner = matches!(sys::peer_uid(&s), Ok(uid) if uid == 0 || uid == sys::getuid());
            let hello = Message::Hello(Hello {
                protocol: self.args.protocol,
                keeper: sys::getpid(),
                holds: self
                    .held
                    .iter()
                    .map(|(_, h)| HeldName {
                        container: h.name.clone(),
                        instance: h.instance,
                        pid: h.pid,
                    })
                    .collect(),
            });
            let mut client = Channel::speaking(s, self.args.protocol);
            if !owner
                || client.send(&hello).is_err()
                || client.stream.set_nonblocking(true).is_err()
            {
                continue;
            }
            if epoll
                .add(client.stream.as_raw_fd(), TOKEN_CLIENT, EV_READ)
                .is_ok()
            {
                self.clients.push(client);
            }
        }
    }
}
