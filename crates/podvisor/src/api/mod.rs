//! The status API of `podvisor run`: HTTP/1.1 with JSON bodies on a unix socket in the state
//! dir (`podvisor.sock`, mode 0600, only our own user or root may talk to it), served from the
//! run loop's epoll without ever blocking it. The CLI commands `status`, `events`, `stop` and
//! `restart` are its clients.
//!
//! | request | answer |
//! |---|---|
//! | `GET /status` | the v1 Pod, `.status` a PodStatus |
//! | `GET /status?watch=1` | the Pod now, then again on every change, one JSON line each |
//! | `GET /status?watch=1&patch=1` | the Pod now, then on every change the JSON Patch (RFC 6902) that makes the Pod before into it, one JSON line each: what changed, written once for every watcher (`status -w` and `top` ask for this) |
//! | `GET /events` | the recent events (up to 1,000), JSON lines, oldest first |
//! | `GET /events?watch=1` | the same, then each new event as it happens |
//! | `POST /stop` | graceful termination (202) |
//! | `POST /restart` | whole-pod restart (202) |
//! | `POST /restart?container=NAME` | restart of one container (202; 404 if unknown) |
//! | `PATCH /resize` | an in-place resize (KEP-1287): the body is a patch of the Pod as `kubectl patch --subresource resize` sends it (`Content-Type` strategic-merge, merge or JSON patch); answers the Pod (200) or why not (422) |
//! | `PATCH /status` | conditions of the pod's own, of types the node does not own (what `readinessGates` wait for): the body is a patch of the Pod as `kubectl patch --subresource status` sends it; answers the Pod (200) or why not (422) |
//! | `POST /exec?container=NAME&command=ARG&command=...` | runs the command in the container with the descriptors passed with the request (`SCM_RIGHTS`: stdin, stdout, stderr, or stdout and stderr); answers once it ended: `{"exitCode":N}` (404 unknown container, 409 not running) |
//!
//! A slow, vanished or hostile client never holds the pod up: at most 512 clients at once (the
//! next are answered 503), a request must arrive whole within 10 s (else 408) and be at most
//! 16 KiB (431, 413); output is buffered up to 8 MiB per client and 32 MiB in all, and a
//! watcher past either is dropped, which `take_dropped` reports.
//!
//! With `--metrics-addr`, a second server of the same kind listens on TCP and answers only
//! `GET /metrics` (Prometheus text): nothing that changes the pod is reachable over the network.

pub mod metrics;
mod request;

use request::{complete, content_length, parse_metrics_request};
pub use request::{parse_request, PatchKind, Request, Subresource};

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::process::sys::{self, Epoll, EV_READ, EV_WRITE};

/// Events kept for `GET /events`.
const KEEP_EVENTS: usize = 1000;
/// A request head larger than this is refused.
const MAX_REQUEST: usize = 16 * 1024;
/// Output buffered for one client before it is dropped as too slow.
const MAX_BUFFERED: usize = 8 << 20;
/// Output buffered for all clients together: past it, the one furthest behind is dropped.
const MAX_BUFFERED_TOTAL: usize = 32 << 20;
/// Clients served at once; the next are turned away (503).
const MAX_CLIENTS: usize = 512;
/// How long a client may take to send its request (and to take an answer).
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// A client connection of either server.
trait Stream: Read + Write + AsRawFd + std::fmt::Debug {}
impl<T: Read + Write + AsRawFd + std::fmt::Debug> Stream for T {}

#[derive(Debug)]
enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

#[derive(Debug, PartialEq, Eq)]
enum Mode {
    /// Reading the request.
    Reading,
    /// Answer queued; close once it is written.
    Closing,
    /// A stream of status lines: each the whole Pod, or (`patches`) after the first the JSON
    /// Patch from the one before.
    WatchStatus { patches: bool },
    /// A stream of event lines.
    WatchEvents,
    /// A command runs for this client (its pid): the answer comes when it ends.
    Exec(i32),
    /// Its answer (a metrics scrape, a status with usage) is being made apart from the loop
    /// (its serial number, from `answer_started`): it goes out when it is made.
    Making(u64),
}

/// An answer made apart from the loop (`Server::answer_started`).
#[derive(Debug)]
pub enum Made {
    /// A metrics scrape's text (OpenMetrics).
    Metrics(String),
    /// A JSON body (the status with usage).
    Json(String),
}

/// What a watch streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    Events,
    /// `patches`: after the first line, the JSON Patch from the status before.
    Status {
        patches: bool,
    },
}

#[derive(Debug)]
struct Conn {
    stream: Box<dyn Stream>,
    input: Vec<u8>,
    output: Vec<u8>,
    mode: Mode,
    /// Whether EV_WRITE is armed.
    want_write: bool,
    /// Descriptors passed with the request (unix socket only).
    fds: Vec<OwnedFd>,
    /// When it connected: a request not whole by `PATIENCE` is answered 408.
    since: std::time::Instant,
    /// The client shut its side: only writing is watched for.
    read_closed: bool,
}

/// The listening socket and its clients.
#[derive(Debug)]
pub struct Server {
    listener: Listener,
    /// The unix socket's path (removed at the end); `None` for the metrics server.
    path: Option<PathBuf>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    events: VecDeque<Box<str>>,
    token_base: u64,
    /// Commands whose client went away before they ended: to be killed.
    abandoned: Vec<i32>,
    /// Why watchers were dropped since `take_dropped` was last called.
    dropped: Vec<String>,
    /// The watchers sent lines this turn, to be written at its end (`flush_watchers`).
    unsent: Vec<usize>,
    /// The serial number of the last answer started apart from the loop (`answer_started`).
    making: u64,
}

impl Server {
    /// Binds the state dir's socket at `path` (owner-only). The caller holds the state dir's
    /// lock, so a socket already there was left by a run that died: it is replaced.
    pub fn bind(
        path: &Path,
        epoll: &Epoll,
        listen_token: u64,
        token_base: u64,
    ) -> io::Result<Server> {
        let path = path.to_path_buf();
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Created 0600 from the start (umask), so there is no moment when others could connect.
        let listener = sys::with_umask(0o177, || UnixListener::bind(&path))?;
        listener.set_nonblocking(true)?;
        epoll.add(listener.as_raw_fd(), listen_token, EV_READ)?;
        Ok(Server {
            listener: Listener::Unix(listener),
            path: Some(path),
            conns: Vec::new(),
            free: Vec::new(),
            events: VecDeque::new(),
            token_base,
            abandoned: Vec::new(),
            dropped: Vec::new(),
            unsent: Vec::new(),
            making: 0,
        })
    }

    /// The metrics server on an already bound TCP listener.
    pub fn metrics(
        listener: TcpListener,
        epoll: &Epoll,
        listen_token: u64,
        token_base: u64,
    ) -> io::Result<Server> {
        listener.set_nonblocking(true)?;
        epoll.add(listener.as_raw_fd(), listen_token, EV_READ)?;
        Ok(Server {
            listener: Listener::Tcp(listener),
            path: None,
            conns: Vec::new(),
            free: Vec::new(),
            events: VecDeque::new(),
            token_base,
            abandoned: Vec::new(),
            dropped: Vec::new(),
            unsent: Vec::new(),
            making: 0,
        })
    }

    /// Accepts every waiting client; on the unix socket, clients of another user (not root)
    /// are turned away.
    pub fn accept(&mut self, epoll: &Epoll) {
        loop {
            let stream: Box<dyn Stream> = match &self.listener {
                Listener::Unix(l) => match l.accept() {
                    Ok((s, _)) => {
                        let owner = matches!(sys::peer_uid(&s), Ok(uid) if uid == 0 || uid == sys::getuid());
                        if !owner {
                            // The socket's mode already keeps others out; this is the second
                            // lock.
                            let mut s = s;
                            let _ = s.set_nonblocking(true);
                            let _ = s.write_all(&response(
                                403,
                                "text/plain; charset=utf-8",
                                "only the pod's owner may use this socket\n",
                            ));
                            continue;
                        }
                        if s.set_nonblocking(true).is_err() {
                            continue;
                        }
                        Box::new(s)
                    }
                    Err(_) => return, // WouldBlock, or a client that vanished meanwhile
                },
                Listener::Tcp(l) => match l.accept() {
                    Ok((s, _)) => {
                        if s.set_nonblocking(true).is_err() {
                            continue;
                        }
                        Box::new(s)
                    }
                    Err(_) => return,
                },
            };
            if self.conns.len() - self.free.len() >= MAX_CLIENTS {
                let mut s = stream;
                let _ = s.write_all(&response(
                    503,
                    "text/plain; charset=utf-8",
                    &format!("too many clients (at most {MAX_CLIENTS} at once)\n"),
                ));
                continue;
            }
            let conn = Conn {
                stream,
                input: Vec::new(),
                output: Vec::new(),
                mode: Mode::Reading,
                want_write: false,
                fds: Vec::new(),
                since: std::time::Instant::now(),
                read_closed: false,
            };
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            if epoll
                .add(
                    conn.stream.as_raw_fd(),
                    self.token_base | slot as u64,
                    EV_READ,
                )
                .is_err()
            {
                self.free.push(slot);
                continue;
            }
            self.conns[slot] = Some(conn);
        }
    }

    /// A client is ready: reads (returning its request once complete) or writes.
    pub fn on_ready(&mut self, slot: usize, epoll: &Epoll) -> Option<Request> {
        let conn = self.conns.get_mut(slot)?.as_mut()?;
        if conn.want_write || !conn.output.is_empty() {
            self.flush(slot, epoll);
        }
        let unix = matches!(self.listener, Listener::Unix(_));
        let conn = self.conns.get_mut(slot)?.as_mut()?;
        let mut buf = [0u8; 4096];
        loop {
            let got = match unix {
                true => sys::recv_with_fds(conn.stream.as_raw_fd(), &mut buf, &mut conn.fds),
                false => conn.stream.read(&mut buf),
            };
            match got {
                Ok(0) => {
                    // Done sending: a whole request is answered all the same (a half-closed
                    // connection); otherwise the client is gone.
                    let whole = conn.mode == Mode::Reading && complete(&conn.input);
                    if whole || conn.mode == Mode::Closing {
                        conn.read_closed = true;
                        let token = self.token_base | slot as u64;
                        let _ = epoll.modify(conn.stream.as_raw_fd(), token, EV_WRITE);
                    }
                    if whole {
                        break;
                    }
                    if matches!(conn.mode, Mode::Making(_)) {
                        // Done sending while its answer is made: it still gets it.
                        conn.read_closed = true;
                        let _ =
                            epoll.modify(conn.stream.as_raw_fd(), self.token_base | slot as u64, 0);
                        return None;
                    }
                    if conn.mode != Mode::Closing {
                        self.close(slot);
                    }
                    return None;
                }
                Ok(n) => {
                    if conn.mode != Mode::Reading {
                        continue; // watchers have nothing more to say; drop what they send
                    }
                    conn.input.extend_from_slice(&buf[..n]);
                    if conn.input.len() > MAX_REQUEST {
                        self.reply(slot, 431, "request too large\n", epoll);
                        return None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close(slot);
                    return None;
                }
            }
        }
        let conn = self.conns.get_mut(slot)?.as_mut()?;
        if conn.mode != Mode::Reading {
            return None;
        }
        let end = conn.input.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&conn.input[..end]).into_owned();
        // A body (a patch) is read whole before the request is answered.
        let length = content_length(&head);
        if length > MAX_REQUEST {
            self.reply(slot, 413, "request body too large\n", epoll);
            return None;
        }
        if conn.input.len() < end + 4 + length {
            return None;
        }
        let body = &conn.input[end + 4..end + 4 + length];
        let parsed = match self.listener {
            Listener::Unix(_) => parse_request(&head),
            Listener::Tcp(_) => parse_metrics_request(&head),
        };
        match parsed {
            Ok(Request::Patch {
                subresource, kind, ..
            }) => Some(Request::Patch {
                subresource,
                kind,
                body: String::from_utf8_lossy(body).into_owned(),
            }),
            Ok(r) => Some(r),
            Err((code, why)) => {
                self.reply(slot, code, &why, epoll);
                None
            }
        }
    }

    /// Answers a request and closes the connection once the answer is out.
    pub fn reply(&mut self, slot: usize, code: u16, body: &str, epoll: &Epoll) {
        let kind = if body.starts_with('{') || body.starts_with('[') {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        self.reply_as(slot, code, kind, body, epoll);
    }

    /// Answers a metrics scrape (OpenMetrics text).
    pub fn reply_metrics(&mut self, slot: usize, text: &str, epoll: &Epoll) {
        let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        self.reply_as(slot, 200, kind, text, epoll);
    }

    fn reply_as(&mut self, slot: usize, code: u16, kind: &str, body: &str, epoll: &Epoll) {
        if let Some(Some(conn)) = self.conns.get_mut(slot) {
            conn.output.extend_from_slice(&response(code, kind, body));
            conn.mode = Mode::Closing;
            // It has `PATIENCE` again to take its answer.
            conn.since = std::time::Instant::now();
            self.flush(slot, epoll);
        }
    }

    /// Turns a connection into a stream of `kind`: the head, then `first` (lines), then
    /// whatever is broadcast.
    pub fn watch(&mut self, slot: usize, kind: Watch, first: &str, epoll: &Epoll) {
        if let Some(Some(conn)) = self.conns.get_mut(slot) {
            conn.output.extend_from_slice(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n",
            );
            conn.output.extend_from_slice(first.as_bytes());
            conn.mode = match kind {
                Watch::Events => Mode::WatchEvents,
                Watch::Status { patches } => Mode::WatchStatus { patches },
            };
            self.flush(slot, epoll);
        }
    }

    /// The recent events, oldest first, one JSON line each.
    pub fn recent_events(&self) -> String {
        self.events.iter().map(|l| format!("{l}\n")).collect()
    }

    /// Records an event (a JSON object on one line) and queues it for the event watchers (written
    /// by `flush_watchers`).
    pub fn event(&mut self, line: String) {
        for slot in self.watchers(Mode::WatchEvents) {
            self.send(slot, &line);
        }
        if self.events.len() == KEEP_EVENTS {
            self.events.pop_front();
        }
        // Kept for as long as a thousand events take, so without the spare room the line
        // was written with.
        self.events.push_back(line.into_boxed_str());
    }

    /// Whether anyone watches the status (so it is worth computing).
    pub fn status_watched(&self) -> bool {
        (self.conns.iter().flatten()).any(|c| matches!(c.mode, Mode::WatchStatus { .. }))
    }

    /// Queues a changed status for its watchers (written by `flush_watchers`): `patch` (a JSON
    /// Patch from the status queued before) for those that asked for patches, the whole line
    /// (made only if one did not) for the others.
    pub fn status(&mut self, patch: &str, line: impl FnOnce() -> String) {
        let patches = self.watchers(Mode::WatchStatus { patches: true });
        for slot in patches {
            self.send(slot, patch);
        }
        let whole = self.watchers(Mode::WatchStatus { patches: false });
        if !whole.is_empty() {
            let line = line();
            for slot in whole {
                self.send(slot, &line);
            }
        }
    }

    fn watchers(&self, mode: Mode) -> Vec<usize> {
        self.conns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.as_ref().is_some_and(|c| c.mode == mode))
            .map(|(i, _)| i)
            .collect()
    }

    /// Queues `line` to watcher `slot`: what a turn sends a watcher is written at once at its
    /// end (`flush_watchers`), one write for its events or status lines together, and no
    /// watcher woken while the turn still works.
    fn send(&mut self, slot: usize, line: &str) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        if conn.output.len() + line.len() > MAX_BUFFERED {
            self.drop_slow(slot, "it");
            return;
        }
        conn.output.extend_from_slice(line.as_bytes());
        conn.output.push(b'\n');
        let behind = conn.output.len();
        if !self.unsent.contains(&slot) {
            self.unsent.push(slot);
        }
        // Past 1 MiB behind, the total is looked at too (a few clients at most are so far).
        if behind > 1 << 20 {
            let total: usize = self.conns.iter().flatten().map(|c| c.output.len()).sum();
            if total > MAX_BUFFERED_TOTAL {
                let furthest = (self.conns.iter().enumerate())
                    .filter_map(|(i, c)| Some((c.as_ref()?.output.len(), i)))
                    .max();
                if let Some((_, i)) = furthest {
                    self.drop_slow(i, "the clients together");
                }
            }
        }
    }

    /// Writes what this turn queued for watchers (before the run sleeps, and at its end).
    pub fn flush_watchers(&mut self, epoll: &Epoll) {
        for slot in std::mem::take(&mut self.unsent) {
            self.flush(slot, epoll);
        }
    }

    /// Drops a watcher that does not read what it is sent, saying why.
    fn drop_slow(&mut self, slot: usize, who: &str) {
        let Some(Some(conn)) = self.conns.get(slot) else {
            return;
        };
        let what = match conn.mode {
            Mode::WatchStatus { .. } => "a status watcher",
            Mode::WatchEvents => "an events watcher",
            _ => "a client",
        };
        let mib = conn.output.len() as f64 / f64::from(1u32 << 20);
        self.dropped.push(format!(
            "dropped {what} that left {mib:.1} MiB unread: {who} reached the bound of what is kept for slow clients ({} MiB each, {} MiB in all)",
            MAX_BUFFERED >> 20,
            MAX_BUFFERED_TOTAL >> 20
        ));
        self.close(slot);
    }

    /// Why watchers were dropped since the last call.
    pub fn take_dropped(&mut self) -> Vec<String> {
        std::mem::take(&mut self.dropped)
    }

    /// How long until a client's time runs out (see `expire`).
    pub fn expires_in(&self) -> Option<std::time::Duration> {
        (self.conns.iter().flatten())
            .filter(|c| matches!(c.mode, Mode::Reading | Mode::Closing))
            .map(|c| PATIENCE.saturating_sub(c.since.elapsed()))
            .min()
    }

    /// Clients whose request did not arrive whole in time are answered 408; those that did not
    /// take their answer in time are closed.
    pub fn expire(&mut self, epoll: &Epoll) {
        let late: Vec<(usize, bool)> = (self.conns.iter().enumerate())
            .filter_map(|(i, c)| {
                let c = c.as_ref()?;
                let reading = c.mode == Mode::Reading;
                (c.since.elapsed() >= PATIENCE && (reading || c.mode == Mode::Closing))
                    .then_some((i, reading))
            })
            .collect();
        for (slot, reading) in late {
            if reading {
                let why = format!(
                    "the request did not arrive whole within {} s\n",
                    PATIENCE.as_secs()
                );
                self.reply(slot, 408, &why, epoll);
            } else {
                self.close(slot);
            }
        }
    }

    /// Writes what the socket takes; arms EV_WRITE for the rest; closes a finished answer.
    fn flush(&mut self, slot: usize, epoll: &Epoll) {
        let token = self.token_base | slot as u64;
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        while !conn.output.is_empty() {
            match conn.stream.write(&conn.output) {
                Ok(n) => {
                    conn.output.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close(slot);
                    return;
                }
            }
        }
        if conn.output.is_empty() && conn.mode == Mode::Closing {
            self.close(slot);
            return;
        }
        let want = !conn.output.is_empty();
        if want != conn.want_write && !conn.read_closed {
            conn.want_write = want;
            let interest = if want { EV_READ | EV_WRITE } else { EV_READ };
            let _ = epoll.modify(conn.stream.as_raw_fd(), token, interest);
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(entry) = self.conns.get_mut(slot) {
            if let Some(conn) = entry.take() {
                if let Mode::Exec(pid) = conn.mode {
                    self.abandoned.push(pid);
                }
                self.free.push(slot);
            }
        }
    }

    /// The descriptors that came with a client's request.
    pub fn take_fds(&mut self, slot: usize) -> Vec<OwnedFd> {
        match self.conns.get_mut(slot) {
            Some(Some(conn)) => std::mem::take(&mut conn.fds),
            _ => Vec::new(),
        }
    }

    /// A client's command runs as `pid`: its answer waits for `exec_ended`.
    pub fn exec_started(&mut self, slot: usize, pid: i32) {
        if let Some(Some(conn)) = self.conns.get_mut(slot) {
            conn.mode = Mode::Exec(pid);
        }
    }

    /// A client's command ended: the answer goes out (if the client is still there).
    pub fn exec_ended(&mut self, slot: usize, pid: i32, body: &str, epoll: &Epoll) {
        let ours = matches!(self.conns.get(slot), Some(Some(c)) if c.mode == Mode::Exec(pid));
        if ours {
            self.reply(slot, 200, body, epoll);
        }
    }

    /// A client's answer is made apart from the loop: it waits for `answer_ended` with the
    /// serial number returned.
    pub fn answer_started(&mut self, slot: usize, epoll: &Epoll) -> u64 {
        self.making += 1;
        if let Some(Some(conn)) = self.conns.get_mut(slot) {
            conn.mode = Mode::Making(self.making);
            if conn.read_closed {
                // Done sending already: nothing to watch until its answer is there.
                let token = self.token_base | slot as u64;
                let _ = epoll.modify(conn.stream.as_raw_fd(), token, 0);
            }
        }
        self.making
    }

    /// Answer `serial` is made: it goes out (if its client is still there).
    pub fn answer_ended(&mut self, slot: usize, serial: u64, answer: &Made, epoll: &Epoll) {
        let token = self.token_base | slot as u64;
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        if conn.mode != Mode::Making(serial) {
            return;
        }
        if conn.read_closed {
            // Nothing was watched since it finished sending: now its answer is written.
            let _ = epoll.modify(conn.stream.as_raw_fd(), token, EV_WRITE);
        }
        match answer {
            Made::Metrics(text) => self.reply_metrics(slot, text, epoll),
            Made::Json(body) => self.reply(slot, 200, body, epoll),
        }
    }

    /// The commands whose client went away while they ran.
    pub fn take_abandoned(&mut self) -> Vec<i32> {
        std::mem::take(&mut self.abandoned)
    }

    /// Sends what is still buffered (best effort, without blocking) and removes the socket.
    pub fn shut_down(&mut self, epoll: &Epoll) {
        for slot in 0..self.conns.len() {
            self.flush(slot, epoll);
        }
        self.remove_socket();
    }

    /// Removes the socket file, once.
    fn remove_socket(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Drop for Server {
    /// A server dropped without its shut down (a run refused as it prepares the pod) takes its
    /// socket file with it.
    fn drop(&mut self) {
        self.remove_socket();
    }
}

fn response(code: u16, kind: &str, body: &str) -> Vec<u8> {
    let reason = match code {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
