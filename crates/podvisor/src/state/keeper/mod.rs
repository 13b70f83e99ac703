//! What a keeper and a run say to each other, and the exit notes a keeper leaves in the state
//! dir (docs/live-restore.md).
//!
//! A keeper holds the container instances one run started (`--live-restore`). Every
//! connection to a keeper carries `Message`s, one JSON object per line (`Channel`):
//! - the **control** pair, made by the run before it starts the keeper: the run sends
//!   `start`, the keeper answers `started` once the container runs (its exec done) or
//!   `failed`. Only the run that started a keeper starts containers in it; once that end
//!   closes, the keeper starts nothing more and ends when the last container it holds has
//!   exited.
//! - the **events** pair: the keeper sends `ended` when an instance exits (the exit in the
//!   message), and `log` when what happened to an instance's log writes changes (they fail,
//!   they are written again, the file was removed and is made again). Once the run's saved
//!   record counts that exit, it says `counted` on the control pair.
//! - the keeper's **socket** (`StateDir::keeper_socket`, 0600; only root or its own user may
//!   connect), there for as long as the keeper runs: on each connection it sends `hello` (its
//!   protocol, its pid, what it holds), then `exited` (or `ended`) as instances end. A run
//!   that takes the pod over connects here; it sends nothing, and closing its end is all it
//!   does.
//!
//! An instance's exit note (`StateDir::exit_note`, `ExitNote` as JSON) is written atomically
//! when no run may have counted the exit: before `exited` is sent while the run that started
//! the keeper is gone (or the keeper speaks protocol 2 or older), and, for each `ended` not
//! `counted`, as soon as that run's control end closes or another run connects. A run that
//! saved an exit and died before saying `counted` leaves a note of an instance its record no
//! longer counts as running: the next run removes it unread.
//!
//! `PROTOCOL` is a number: a run adopts keepers that speak a version it knows (`ADOPTS`) and
//! refuses any other with a clear error, touching nothing. What a keeper of another release
//! reads is its hello, its `exited` messages and its exit notes; a run never starts
//! containers in a keeper it did not start, so `start` is only ever read by a keeper of its
//! own release; should an install mix releases (an older `podvisor-keeper` beside a newer
//! `podvisor`), a start request is strict at every depth: a field the keeper does not know
//! fails the start (`failed`) rather than run the container without it. Version 1 was lines of text (`v1`); a keeper started with protocol 1 still
//! speaks it, so that adopting a keeper of that release is tested. A run passes over a
//! message it does not know, so one can be added without a new version (`log` was, in 2).
//! Version 3 tells exits with the message (`ended`) to the run that started the keeper: per
//! exit, that spares a note's file, its fsyncs and its removal.

mod v1;

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use podvisor_core::spec::plan::StdioPlan;
use serde::{Deserialize, Serialize};

use super::logs::LogLimits;
use crate::process::sys::{BindMount, Credentials, Exit, PrivateRoot};

/// The protocol this podvisor's keepers speak.
pub const PROTOCOL: u32 = 3;

/// The protocol versions this podvisor adopts.
pub const ADOPTS: std::ops::RangeInclusive<u32> = 1..=PROTOCOL;

/// Lets tests start keepers that speak another version (an older or newer podvisor's).
pub const TEST_PROTOCOL_ENV: &str = "PODVISOR_TEST_KEEPER_PROTOCOL";

/// Lets tests give up on a keeper's answer to a start sooner than a run does (milliseconds).
pub const TEST_START_PATIENCE_ENV: &str = "PODVISOR_TEST_KEEPER_START_PATIENCE_MS";

/// One message on a keeper connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Message {
    /// Keeper → whoever connects to its socket, first.
    Hello(Hello),
    /// Run → its own keeper: start this container.
    Start(Box<StartRequest>),
    /// Keeper → run: the container runs as `pid`.
    Started { pid: i32 },
    /// Keeper → run: the container did not start.
    Failed(StartFailure),
    /// Keeper → everyone connected: this instance has exited; its exit note is written.
    Exited(InstanceName),
    /// Keeper → everyone connected, while the run that started it is there (protocol 3 on):
    /// this instance has exited, as the note says; no exit note is written unless that run
    /// goes without saying `counted`.
    Ended(Ending),
    /// Run → its own keeper (control pair, protocol 3 on): the saved record counts this
    /// instance's exit; the keeper writes no note of it. No answer.
    Counted(InstanceName),
    /// Keeper → everyone connected: what happened to this instance's log writes.
    Log(LogReport),
}

/// An instance's exit told with the message (`ended`): what its exit note would hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ending {
    pub container: String,
    pub instance: u32,
    pub pid: i32,
    pub exit: ExitFile,
    pub oom_killed: bool,
    /// Milliseconds since the Unix epoch.
    pub finished: u64,
}

impl Ending {
    pub fn new(name: InstanceName, note: &ExitNote) -> Ending {
        Ending {
            container: name.container,
            instance: name.instance,
            pid: note.pid,
            exit: ExitFile::from(note.exit),
            oom_killed: note.oom_killed,
            finished: note.finished,
        }
    }

    pub fn name(&self) -> InstanceName {
        InstanceName {
            container: self.container.clone(),
            instance: self.instance,
        }
    }

    pub fn note(&self) -> ExitNote {
        ExitNote {
            pid: self.pid,
            exit: self.exit.into(),
            oom_killed: self.oom_killed,
            finished: self.finished,
        }
    }
}

/// What happened to an instance's log writes, as the keeper that writes them tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogReport {
    pub container: String,
    pub instance: u32,
    pub news: super::logs::LogNews,
}

/// A keeper's hello: its protocol, its pid and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub protocol: u32,
    pub keeper: i32,
    pub holds: Vec<Held>,
}

/// A container instance a keeper holds, and its main process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Held {
    pub container: String,
    pub instance: u32,
    pub pid: i32,
}

/// A container instance, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceName {
    pub container: String,
    pub instance: u32,
}

/// Why a start failed: the exec's errno, or what failed before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartFailure {
    Errno(i32),
    Error(String),
}

impl StartFailure {
    pub fn into_error(self) -> io::Error {
        match self {
            StartFailure::Errno(n) => io::Error::from_raw_os_error(n),
            StartFailure::Error(text) => io::Error::other(text),
        }
    }
}

impl From<&io::Error> for StartFailure {
    fn from(e: &io::Error) -> StartFailure {
        match e.raw_os_error() {
            Some(n) => StartFailure::Errno(n),
            None => StartFailure::Error(e.to_string()),
        }
    }
}

/// What the run asks its keeper to start: the container's process as the run prepared it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    pub container: String,
    pub instance: u32,
    pub argv: Vec<String>,
    /// The whole environment, `NAME=value`.
    pub env: Vec<String>,
    pub working_dir: Option<PathBuf>,
    pub working_dir_optional: bool,
    pub mounts: Vec<BindMount>,
    pub root: Option<PrivateRoot>,
    /// The `cgroup.procs` files of the cgroups it joins before exec.
    pub cgroups: Vec<PathBuf>,
    /// The instance cgroup's file that counts OOM kills, if it has one.
    pub oom_file: Option<PathBuf>,
    /// The signals blocked when podvisor started, given back to the container.
    pub blocked: Vec<i32>,
    /// Its user, groups, capabilities, no_new_privs and seccomp filters.
    pub credentials: Option<Credentials>,
    /// Its UTS, IPC and PID namespaces.
    pub namespaces: KeptNamespaces,
    /// Its `stdin`, `stdinOnce` and `tty`, when any is set (a keeper of an older podvisor
    /// refuses the request then, rather than start it with pipes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdio: Option<StdioPlan>,
}

/// A kept container's namespaces: the pod's UTS and IPC namespaces by path (the run's
/// descriptors, `/proc/PID/fd/N`), or namespaces of its own.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptNamespaces {
    pub join_uts: Option<PathBuf>,
    pub join_ipc: Option<PathBuf>,
    /// A UTS namespace of its own with this hostname (rootless).
    pub new_uts: Option<String>,
    pub new_ipc: bool,
    /// A PID namespace of its own, in which it is PID 1.
    pub new_pid: bool,
}

/// An instance's exit as its keeper recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitNote {
    pub pid: i32,
    pub exit: Exit,
    pub oom_killed: bool,
    /// Milliseconds since the Unix epoch.
    pub finished: u64,
}

/// The exit note's file name in `keepers/`.
pub fn exit_note_name(container: &str, instance: u32) -> String {
    format!("{container}.{instance}.exit")
}

/// An exit note as written (protocol 2 on).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExitNoteFile {
    #[serde(rename = "podvisor-keeper-exit")]
    protocol: u32,
    pid: i32,
    exit: ExitFile,
    oom_killed: bool,
    finished: u64,
}

/// An exit as notes and `ended` write it: `{"code":3}` or `{"signal":9}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitFile {
    Code(i32),
    Signal(i32),
}

impl From<Exit> for ExitFile {
    fn from(exit: Exit) -> ExitFile {
        match exit {
            Exit::Code(c) => ExitFile::Code(c),
            Exit::Signal(s) => ExitFile::Signal(s),
        }
    }
}

impl From<ExitFile> for Exit {
    fn from(exit: ExitFile) -> Exit {
        match exit {
            ExitFile::Code(c) => Exit::Code(c),
            ExitFile::Signal(s) => Exit::Signal(s),
        }
    }
}

impl ExitNote {
    /// The note as keeper of `protocol` writes it.
    pub fn encode(&self, protocol: u32) -> String {
        if protocol == 1 {
            return v1::encode_exit_note(self);
        }
        let file = ExitNoteFile {
            protocol,
            pid: self.pid,
            exit: self.exit.into(),
            oom_killed: self.oom_killed,
            finished: self.finished,
        };
        serde_json::to_string(&file).unwrap_or_default() + "\n"
    }

    /// Reads a note of any protocol this podvisor adopts; `Err` says what is wrong with it.
    pub fn decode(text: &str) -> Result<ExitNote, String> {
        if text.starts_with(v1::EXIT_MAGIC) {
            return v1::decode_exit_note(text);
        }
        let file: ExitNoteFile = serde_json::from_str(text).map_err(|e| {
            if e.is_eof() {
                "it is truncated".to_string()
            } else {
                format!("not a keeper's exit note: {e}")
            }
        })?;
        if !ADOPTS.contains(&file.protocol) {
            return Err(format!(
                "written by a keeper of protocol {}; this podvisor reads {}..={}",
                file.protocol,
                ADOPTS.start(),
                ADOPTS.end()
            ));
        }
        Ok(ExitNote {
            pid: file.pid,
            exit: file.exit.into(),
            oom_killed: file.oom_killed,
            finished: file.finished,
        })
    }
}

/// A keeper connection: messages out, and messages in a line at a time, keeping what came
/// after the last whole line (a blocking read of a hello and the non-blocking reads of
/// events after it share it). `protocol` is what the keeper at the other end speaks.
#[derive(Debug)]
pub struct Channel {
    pub stream: UnixStream,
    buf: Vec<u8>,
    protocol: u32,
}

impl Channel {
    /// A connection to a keeper of this podvisor's protocol.
    pub fn new(stream: UnixStream) -> Channel {
        Channel::speaking(stream, PROTOCOL)
    }

    /// A connection to or from a keeper of `protocol`.
    pub fn speaking(stream: UnixStream, protocol: u32) -> Channel {
        Channel {
            stream,
            buf: Vec::new(),
            protocol,
        }
    }

    /// Writes a message whole.
    pub fn send(&mut self, message: &Message) -> io::Result<()> {
        self.stream.write_all(self.encode(message).as_bytes())
    }

    /// A message as this channel's protocol writes it (with its newline).
    pub fn encode(&self, message: &Message) -> String {
        if self.protocol == 1 {
            if let Some(text) = v1::encode(message) {
                return text;
            }
        }
        serde_json::to_string(message).unwrap_or_default() + "\n"
    }

    /// The next message already read; `Some(Err)` for a line that is not one.
    pub fn take(&mut self) -> Option<Result<Message, String>> {
        let line = self.take_line()?;
        Some(self.decode(&line))
    }

    fn decode(&self, line: &str) -> Result<Message, String> {
        if self.protocol == 1 {
            return v1::decode(line);
        }
        serde_json::from_str(line).map_err(|e| format!("{line:?} is not a keeper's message: {e}"))
    }

    fn take_line(&mut self) -> Option<String> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).take(end).collect();
        Some(String::from_utf8_lossy(&line).into_owned())
    }

    /// Reads once: `Ok(false)` at end of stream. A blocking stream's read timeout (or a
    /// non-blocking stream with nothing to read) is `WouldBlock`.
    fn fill(&mut self) -> io::Result<bool> {
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => Ok(false),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Reads all that is there of a non-blocking stream (several messages asked together
    /// arrive in one wakeup): `false` once it has ended (or failed).
    pub fn fill_ready(&mut self) -> bool {
        loop {
            match self.fill() {
                Ok(true) => continue,
                Ok(false) => return false,
                Err(e) => return e.kind() == io::ErrorKind::WouldBlock,
            }
        }
    }

    /// Blocks for the next line (the stream is blocking); `None` at end of stream, an error
    /// when its read timeout passes first.
    fn read_line(&mut self) -> io::Result<Option<String>> {
        loop {
            if let Some(line) = self.take_line() {
                return Ok(Some(line));
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Blocks for the next message; `Err` when the stream ends, times out or says something
    /// that is not a message.
    pub fn recv(&mut self) -> io::Result<Message> {
        let line = self.read_line()?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::UnexpectedEof, "it closed the connection")
        })?;
        self.decode(&line).map_err(io::Error::other)
    }

    /// Reads a keeper's hello (blocking), and from then on speaks its protocol. A hello of a
    /// protocol this podvisor does not adopt is returned with nothing it holds (what follows
    /// is not read): the caller refuses it.
    pub fn read_hello(&mut self) -> Result<Hello, String> {
        let first = self
            .read_line()
            .map_err(|e| e.to_string())?
            .ok_or("it closed the connection without a greeting")?;
        if first.starts_with(v1::GREETING) {
            self.protocol = 1;
            return v1::read_hello(&first, || self.read_line());
        }
        // Any protocol's hello starts with its version and pid.
        #[derive(Deserialize)]
        enum Head {
            #[serde(rename = "hello")]
            Hello { protocol: u32, keeper: i32 },
        }
        let Ok(Head::Hello { protocol, keeper }) = serde_json::from_str::<Head>(&first) else {
            return Err(format!("{first:?} is not a podvisor keeper's greeting"));
        };
        self.protocol = protocol;
        if !ADOPTS.contains(&protocol) {
            return Ok(Hello {
                protocol,
                keeper,
                holds: Vec::new(),
            });
        }
        match self.decode(&first)? {
            Message::Hello(hello) => Ok(hello),
            other => Err(format!("{other:?} is not a hello")),
        }
    }
}

/// What the run tells the keeper it starts, on its command line.
#[derive(Debug, Clone)]
pub struct KeeperArgs {
    pub state_dir: PathBuf,
    /// The control channel (start requests in, answers out).
    pub control: RawFd,
    /// The events channel (`exited` out).
    pub events: RawFd,
    pub protocol: u32,
    pub limits: LogLimits,
}

impl KeeperArgs {
    /// The command line after the program (`podvisor keeper` or `podvisor-keeper`):
    /// `STATE_DIR CONTROL_FD EVENTS_FD PROTOCOL MAX_SIZE MAX_FILES`.
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

    pub fn parse(args: &[OsString]) -> Option<KeeperArgs> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn note(exit: Exit) -> ExitNote {
        ExitNote {
            pid: 42,
            exit,
            oom_killed: exit == Exit::Signal(9),
            finished: 1_764_000_000_123,
        }
    }

    #[test]
    fn an_exit_note_reads_back_in_each_protocol_and_a_cut_one_is_refused() {
        for protocol in [1, 2, 3] {
            for exit in [Exit::Code(3), Exit::Signal(9)] {
                let text = note(exit).encode(protocol);
                assert_eq!(ExitNote::decode(&text), Ok(note(exit)), "{text}");
                let cut = &text[..text.len() - 4];
                assert!(ExitNote::decode(cut).unwrap_err().contains("truncated"));
            }
        }
        let newer = note(Exit::Code(0)).encode(9);
        assert!(ExitNote::decode(&newer).unwrap_err().contains("protocol 9"));
        let bad = "podvisor-keeper-exit 1\npid x\ncode 0\noom 0\nfinished 1\nend\n";
        assert_eq!(
            ExitNote::decode(bad),
            Err("line 2: \"x\" is not a number".into())
        );
    }

    #[test]
    fn messages_read_back_in_each_protocol() {
        let hello = Hello {
            protocol: 0,
            keeper: 10,
            holds: vec![
                Held {
                    container: "app".into(),
                    instance: 3,
                    pid: 11,
                },
                Held {
                    container: "side".into(),
                    instance: 0,
                    pid: 12,
                },
            ],
        };
        let app = InstanceName {
            container: "app".into(),
            instance: 3,
        };
        let exited = Message::Exited(app.clone());
        for protocol in [1, 2] {
            let (a, b) = UnixStream::pair().unwrap();
            let mut out = Channel::speaking(a, protocol);
            let hello = Hello {
                protocol,
                ..hello.clone()
            };
            out.send(&Message::Hello(hello.clone())).unwrap();
            out.send(&exited).unwrap();
            drop(out);
            let mut conn = Channel::new(b);
            assert_eq!(conn.read_hello(), Ok(hello));
            assert!(matches!(conn.recv().unwrap(), Message::Exited(i) if i == app));
            assert_eq!(
                conn.recv().unwrap_err().kind(),
                io::ErrorKind::UnexpectedEof
            );
        }
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"HTTP/1.1 200 OK\n").unwrap();
        assert!(Channel::new(b).read_hello().is_err());
    }

    #[test]
    fn an_exit_told_with_the_message_and_its_count_read_back() {
        let app = InstanceName {
            container: "app".into(),
            instance: 3,
        };
        let (a, b) = UnixStream::pair().unwrap();
        let mut out = Channel::new(a);
        for exit in [Exit::Code(3), Exit::Signal(9)] {
            out.send(&Message::Ended(Ending::new(app.clone(), &note(exit))))
                .unwrap();
        }
        out.send(&Message::Counted(app.clone())).unwrap();
        drop(out);
        let mut conn = Channel::new(b);
        for exit in [Exit::Code(3), Exit::Signal(9)] {
            match conn.recv().unwrap() {
                Message::Ended(e) => {
                    assert_eq!(e.name(), app);
                    assert_eq!(e.note(), note(exit));
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(conn.recv().unwrap(), Message::Counted(i) if i == app));
    }

    #[test]
    fn log_news_read_back_and_a_message_a_run_does_not_know_is_passed_over() {
        use crate::state::logs::LogNews;
        let (a, b) = UnixStream::pair().unwrap();
        let mut out = Channel::speaking(a, 2);
        let news = [
            LogNews::Failing("No space left on device".into()),
            LogNews::Recovered { dropped: 8001 },
            LogNews::Replaced,
            LogNews::Written,
        ];
        for n in &news {
            let report = LogReport {
                container: "app".into(),
                instance: 3,
                news: n.clone(),
            };
            out.send(&Message::Log(report)).unwrap();
        }
        // A newer keeper's message: this run reads it as not one of its own, and goes on.
        (&out.stream).write_all(b"{\"later\":{}}\n").unwrap();
        out.send(&Message::Exited(InstanceName {
            container: "app".into(),
            instance: 3,
        }))
        .unwrap();
        drop(out);
        let mut conn = Channel::speaking(b, 2);
        let (mut got, mut unknown) = (Vec::new(), 0);
        loop {
            match conn.recv() {
                Ok(m) => got.push(m),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                // The line is read all the same: what follows it is not lost.
                Err(_) => unknown += 1,
            }
        }
        assert_eq!(unknown, 1);
        let logs: Vec<LogNews> = (got.iter())
            .filter_map(|m| match m {
                Message::Log(r) => Some(r.news.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(logs, news);
        assert!(matches!(got.last(), Some(Message::Exited(_))), "{got:?}");
    }

    #[test]
    fn a_hello_of_an_unknown_protocol_is_read_far_enough_to_refuse_it() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"{\"hello\":{\"protocol\":9,\"keeper\":5,\"what\":[1]}}\n")
            .unwrap();
        let hello = Channel::new(b).read_hello().unwrap();
        assert_eq!((hello.protocol, hello.keeper), (9, 5));
    }

    /// A start is read only by a keeper of the run's own release; a hand-mixed install (an
    /// older keeper beside a newer podvisor) must refuse what it cannot honour, at any depth
    /// of the request, rather than start the container without it.
    #[test]
    fn a_start_request_with_a_field_its_keeper_does_not_know_is_refused_at_any_depth() {
        let request = StartRequest {
            container: "app".into(),
            instance: 1,
            argv: vec!["/bin/true".into()],
            env: vec![],
            working_dir: None,
            working_dir_optional: false,
            mounts: vec![BindMount {
                source: "/srv/data".into(),
                target: "/data".into(),
                read_only: true,
                lower: vec![],
                lower_base: None,
                host_to_container: false,
                recursive_read_only: false,
            }],
            root: None,
            cgroups: vec![],
            oom_file: None,
            blocked: vec![],
            credentials: None,
            namespaces: KeptNamespaces::default(),
            stdio: Some(StdioPlan::default()),
        };
        let text = serde_json::to_string(&Message::Start(Box::new(request))).unwrap();
        assert!(serde_json::from_str::<Message>(&text).is_ok(), "{text}");
        for (at, added) in [
            ("\"read_only\":true", "\"read_only\":true,\"later\":1"),
            ("\"tty\":false", "\"tty\":false,\"later\":1"),
            ("\"new_pid\":false", "\"new_pid\":false,\"later\":1"),
            ("\"instance\":1", "\"instance\":1,\"later\":1"),
        ] {
            assert!(text.contains(at), "{text}");
            let newer = text.replacen(at, added, 1);
            let e = serde_json::from_str::<Message>(&newer).unwrap_err();
            assert!(e.to_string().contains("unknown field `later`"), "{at}: {e}");
        }
    }
}
