//! The grpc probe: one `grpc.health.v1.Health/Check` call over plaintext HTTP/2 to the pod IP,
//! as pkg/probe/grpc does it. SERVING is success; any other answer, a refused connection or the
//! deadline is a failure (this handler never returns an error).
//!
//! A minimal HTTP/2 client is enough for one unary call: the preface and an empty SETTINGS, one
//! HEADERS frame (HPACK literals without indexing, so no encoder state), one DATA frame; then
//! frames are read until the response message or the end of the stream. The server's header
//! blocks (HEADERS plus CONTINUATION frames) are decoded whole by loona-hpack, with its dynamic
//! table kept for the connection, so Huffman-coded and indexed trailers read as any server
//! writes them (grpc-go, Envoy). A block that cannot be decoded, one past 16 KiB, or a frame past
//! the default frame size is a failure that says so, never a panic or a wait.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use podvisor_core::probe::Outcome;
use podvisor_core::spec::plan::POD_IP;

use super::go_error_text;
use super::http::KUBE_PROBE_AGENT;
use crate::process::sys::{self, ConnectState};

const PATH: &str = "/grpc.health.v1.Health/Check";

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The largest frame a client accepts before it says otherwise (SETTINGS_MAX_FRAME_SIZE).
const MAX_FRAME: usize = 16_384;
/// The largest header block podvisor decodes (grpc-go's default header list limit is 16 MiB;
/// a health check's are a few hundred bytes).
const MAX_HEADER_BLOCK: usize = 16 * 1024;

#[derive(Debug)]
enum Phase {
    Connecting,
    Exchanging,
}

pub struct GrpcTask {
    stream: TcpStream,
    /// The pod IP and port, quoted in the messages as the kubelet's prober quotes it (Go's `%q`).
    addr: SocketAddr,
    phase: Phase,
    out: Vec<u8>,
    sent: usize,
    input: Vec<u8>,
    /// The connection's HPACK decoding state.
    hpack: loona_hpack::Decoder<'static>,
    /// A header block still arriving in CONTINUATION frames, and whether it ends the stream.
    block: Option<(Vec<u8>, bool)>,
    /// The response message as it arrives in DATA frames.
    data: Vec<u8>,
    /// The grpc-status of the headers or trailers, once read.
    status: Option<u32>,
}

impl std::fmt::Debug for GrpcTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTask")
            .field("addr", &self.addr)
            .field("phase", &self.phase)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

pub enum Next {
    Wait { writable: bool },
    Done(Outcome),
}

impl GrpcTask {
    pub fn start(port: u16, service: &str) -> Result<GrpcTask, Outcome> {
        let ip: std::net::IpAddr = POD_IP.parse().expect("the pod IP is a literal");
        let addr = SocketAddr::new(ip, port);
        let stream = sys::tcp_connect_start(&addr).map_err(|e| {
            Outcome::Failure(format!(
                "failed to connect service \"{addr}\" within 1s: {}",
                go_error_text(&e)
            ))
        })?;
        Ok(GrpcTask {
            stream,
            addr,
            phase: Phase::Connecting,
            out: request(&addr.to_string(), service),
            sent: 0,
            input: Vec::new(),
            hpack: loona_hpack::Decoder::new(),
            block: None,
            data: Vec::new(),
            status: None,
        })
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub fn timed_out(&self) -> Outcome {
        match self.phase {
            Phase::Connecting => Outcome::Failure(format!(
                "timeout: failed to connect service \"{}\" within the probe's timeout",
                self.addr
            )),
            Phase::Exchanging => Outcome::Failure(
                "timeout: health rpc did not complete within the probe's timeout".into(),
            ),
        }
    }

    pub fn advance(&mut self) -> Next {
        if let Phase::Connecting = self.phase {
            match sys::connect_state(&self.stream) {
                ConnectState::Connected => self.phase = Phase::Exchanging,
                ConnectState::Connecting => return Next::Wait { writable: true },
                ConnectState::Failed(e) => {
                    return Next::Done(Outcome::Failure(format!(
                        "failed to connect service \"{}\": {}",
                        self.addr,
                        go_error_text(&e)
                    )))
                }
            }
        }
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Next::Wait { writable: true }
                }
                Err(e) => return Next::Done(self.rpc_error(&go_error_text(&e))),
            }
        }
        let mut buf = [0u8; 4096];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Next::Done(self.rpc_error("connection closed")),
                Ok(n) => {
                    self.input.extend_from_slice(&buf[..n]);
                    if let Some(outcome) = self.frames() {
                        return Next::Done(outcome);
                    }
                    if self.sent < self.out.len() {
                        return self.advance();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Next::Wait { writable: false }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Next::Done(self.rpc_error(&go_error_text(&e))),
            }
        }
    }

    fn rpc_error(&self, what: &str) -> Outcome {
        Outcome::Failure(format!("error: health rpc probe failed: {what}"))
    }

    /// Handles the complete frames received so far; an outcome once the call has ended.
    fn frames(&mut self) -> Option<Outcome> {
        loop {
            if self.input.len() < 9 {
                return None;
            }
            let len = (usize::from(self.input[0]) << 16)
                | (usize::from(self.input[1]) << 8)
                | usize::from(self.input[2]);
            if len > MAX_FRAME {
                return Some(self.rpc_error(&format!(
                    "connection error: the server sent a frame of {len} bytes, past the {MAX_FRAME} allowed"
                )));
            }
            if self.input.len() < 9 + len {
                return None;
            }
            let kind = self.input[3];
            let flags = self.input[4];
            let stream = u32::from_be_bytes([
                self.input[5] & 0x7f,
                self.input[6],
                self.input[7],
                self.input[8],
            ]);
            let payload: Vec<u8> = self.input[9..9 + len].to_vec();
            self.input.drain(..9 + len);
            if self.block.is_some() && kind != CONTINUATION {
                return Some(self.rpc_error(
                    "connection error: a header block was interrupted by another frame",
                ));
            }
            let outcome = match kind {
                SETTINGS if flags & ACK == 0 => {
                    self.queue(frame(SETTINGS, ACK, 0, &[]));
                    None
                }
                PING if flags & ACK == 0 => {
                    self.queue(frame(PING, ACK, 0, &payload));
                    None
                }
                GOAWAY => Some(self.rpc_error("connection closed by the server (GOAWAY)")),
                RST_STREAM if stream == 1 => Some(self.rpc_error("stream reset by the server")),
                DATA if stream == 1 => {
                    let Some(body) = unpad(&payload, flags, 0) else {
                        return Some(
                            self.rpc_error("connection error: a DATA frame with bad padding"),
                        );
                    };
                    self.data.extend_from_slice(body);
                    health_status(&self.data).map(|status| {
                        if status == 1 {
                            Outcome::Success
                        } else {
                            Outcome::Failure(format!(
                                "service unhealthy (responded with {:?})",
                                status_name(status)
                            ))
                        }
                    })
                }
                HEADERS => {
                    let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                    let Some(fragment) = unpad(&payload, flags, skip) else {
                        return Some(
                            self.rpc_error("connection error: a HEADERS frame with bad padding"),
                        );
                    };
                    self.block = Some((fragment.to_vec(), stream == 1 && flags & END_STREAM != 0));
                    self.continue_block(flags, stream)
                }
                CONTINUATION => match &mut self.block {
                    Some((block, _)) => {
                        block.extend_from_slice(&payload);
                        self.continue_block(flags, stream)
                    }
                    None => Some(self.rpc_error(
                        "connection error: a CONTINUATION frame without a header block",
                    )),
                },
                _ => None,
            };
            if outcome.is_some() {
                return outcome;
            }
        }
    }

    /// A header block grew: past the limit it fails; once whole (END_HEADERS) it is decoded,
    /// and if it ends the stream the call's outcome follows from its grpc-status.
    fn continue_block(&mut self, flags: u8, stream: u32) -> Option<Outcome> {
        let (block, ends) = self.block.as_ref()?;
        if block.len() > MAX_HEADER_BLOCK {
            return Some(self.rpc_error(&format!(
                "the server's header block is larger than {MAX_HEADER_BLOCK} bytes"
            )));
        }
        if flags & END_HEADERS == 0 {
            return None;
        }
        let (block, ends) = (block.clone(), *ends);
        self.block = None;
        // Every block is decoded, whatever its stream: the dynamic table is the connection's.
        let headers = match self.hpack.decode(&block) {
            Ok(h) => h,
            Err(e) => {
                return Some(self.rpc_error(&format!(
                    "connection error: the server's header block cannot be decoded (HPACK: {e})"
                )))
            }
        };
        if stream != 1 {
            return None;
        }
        for (name, value) in &headers {
            let value = String::from_utf8_lossy(value);
            match name.as_slice() {
                b"grpc-status" => self.status = value.trim().parse().ok(),
                b":status" if value != "200" => {
                    return Some(self.rpc_error(&format!(
                        "rpc error: code = Unknown desc = unexpected HTTP status code received from server: {value}"
                    )))
                }
                _ => {}
            }
        }
        if !ends {
            return None;
        }
        // The end of the stream without a response message: the call failed.
        Some(match self.status {
            Some(12) => Outcome::Failure(
                "this server does not implement the grpc health protocol (grpc.health.v1.Health)"
                    .into(),
            ),
            Some(code) => self.rpc_error(&format!("rpc error: code = {}", code_name(code))),
            None => self.rpc_error("rpc error: the call ended without a response"),
        })
    }

    fn queue(&mut self, bytes: Vec<u8>) {
        self.out.extend_from_slice(&bytes);
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK string literal without Huffman coding.
fn hpack_string(out: &mut Vec<u8>, s: &str) {
    hpack_int(out, 0x00, 7, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn hpack_int(out: &mut Vec<u8>, high: u8, prefix: u32, mut n: usize) {
    let max = (1usize << prefix) - 1;
    if n < max {
        out.push(high | n as u8);
        return;
    }
    out.push(high | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// The connection preface, our SETTINGS, and the call: HEADERS then DATA on stream 1.
fn request(authority: &str, service: &str) -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http (static table)
                                      // Literal header fields without indexing, names from the static table.
    hpack_int(&mut block, 0x00, 4, 4); // :path
    hpack_string(&mut block, PATH);
    hpack_int(&mut block, 0x00, 4, 1); // :authority
    hpack_string(&mut block, authority);
    hpack_int(&mut block, 0x00, 4, 31); // content-type
    hpack_string(&mut block, "application/grpc");
    hpack_int(&mut block, 0x00, 4, 58); // user-agent
    hpack_string(&mut block, KUBE_PROBE_AGENT);
    block.push(0x00); // te: trailers, a new name
    hpack_string(&mut block, "te");
    hpack_string(&mut block, "trailers");
    // HealthCheckRequest { service = 1 }.
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a);
        let mut len = service.len();
        while len >= 0x80 {
            message.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        message.push(len as u8);
        message.extend_from_slice(service.as_bytes());
    }
    let mut data = vec![0u8];
    data.extend_from_slice(&(message.len() as u32).to_be_bytes());
    data.extend_from_slice(&message);
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out.extend(frame(HEADERS, END_HEADERS, 1, &block));
    out.extend(frame(DATA, END_STREAM, 1, &data));
    out
}

/// `HealthCheckResponse.status` from a DATA payload holding one whole gRPC message.
fn health_status(payload: &[u8]) -> Option<u32> {
    if payload.len() < 5 || payload[0] != 0 {
        return None;
    }
    let len = u32::from_be_bytes([payload[1], payload[2], payload[3], payload[4]]) as usize;
    let mut msg = payload.get(5..5 + len)?;
    // Proto3 leaves out a zero status (UNKNOWN).
    let mut status = 0;
    while let Some((&tag, rest)) = msg.split_first() {
        let (value, rest) = varint(rest)?;
        match tag {
            0x08 => status = value as u32,
            _ => return Some(status), // an unknown field: what we have is enough
        }
        msg = rest;
    }
    Some(status)
}

fn varint(mut bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first()?;
        bytes = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((value, bytes));
        }
    }
    None
}

/// A frame's payload without its padding (PADDED) and the `skip` bytes after the pad length
/// (HEADERS' priority fields); `None` when the padding does not fit.
fn unpad(payload: &[u8], flags: u8, skip: usize) -> Option<&[u8]> {
    let (pad, rest) = if flags & PADDED != 0 {
        let (&pad, rest) = payload.split_first()?;
        (usize::from(pad), rest)
    } else {
        (0, payload)
    };
    let end = rest.len().checked_sub(pad)?;
    rest.get(skip..end)
}

fn status_name(s: u32) -> &'static str {
    match s {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNRECOGNIZED",
    }
}

fn code_name(c: u32) -> String {
    let names = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    names
        .get(c as usize)
        .map_or_else(|| format!("Code({c})"), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_messages() {
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08, 1]), Some(1));
        assert_eq!(health_status(&[0, 0, 0, 0, 0]), Some(0));
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08]), None);
        // A message split over DATA frames is judged once whole.
        assert_eq!(health_status(&[0, 0, 0, 0, 2]), None);
    }

    #[test]
    fn padding() {
        assert_eq!(unpad(&[1, 2, 3], 0, 0), Some(&[1, 2, 3][..]));
        assert_eq!(unpad(&[2, 9, 8, 0, 0], PADDED, 0), Some(&[9, 8][..]));
        assert_eq!(unpad(&[9, 1], PADDED, 0), None);
        assert_eq!(unpad(&[0, 0, 0, 0, 1, 7], PRIORITY, 5), Some(&[7][..]));
    }

    #[test]
    fn hpack_integers() {
        let mut out = Vec::new();
        hpack_int(&mut out, 0, 4, 31);
        assert_eq!(out, [0x0f, 0x10]);
        out.clear();
        hpack_int(&mut out, 0, 7, 300);
        assert_eq!(out, [0x7f, 0xad, 0x01]);
    }
}
