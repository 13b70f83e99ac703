//! A grpc.health.v1 answer written frame by frame over HTTP/2, with the header blocks a real
//! server can send and grpcio's never does: Huffman-coded values, headers indexed in the
//! dynamic table and referred back to (as grpc-go's and Envoy's encoders do), and blocks that
//! must fail cleanly.
//!
//! One call per connection: after the preface and SETTINGS, the first request stream that
//! ends gets the answer of the mode, then the connection is closed gracefully.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use httlib_hpack::Encoder;

#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// A SERVING message split over two DATA frames, then Huffman-coded trailers that refer
    /// back to the response headers through the dynamic table.
    Serving,
    /// A NOT_SERVING message, then the same trailers.
    NotServing,
    /// A trailers-only answer: grpc-status 12, Huffman-coded.
    Unimplemented,
    /// A header block that is not HPACK.
    Malformed,
    /// A header block of about 20 KiB over HEADERS and CONTINUATION frames.
    Oversized,
    /// A header value whose Huffman code ends with padding that is not all ones.
    BadHuffman,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "serving" => Mode::Serving,
            "not-serving" => Mode::NotServing,
            "unimplemented" => Mode::Unimplemented,
            "malformed" => Mode::Malformed,
            "oversized" => Mode::Oversized,
            "bad-huffman" => Mode::BadHuffman,
            _ => return None,
        })
    }
}

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub fn serve(port: u16, mode: Mode) -> std::io::Result<()> {
    let listener = crate::listen::listen(port)?;
    for conn in listener.incoming() {
        // A probe that gave up mid-call: serve the next one.
        if let Err(e) = conn.and_then(|c| one_call(c, mode)) {
            println!("connection ended: {e}");
        }
    }
    Ok(())
}

fn one_call(mut sock: TcpStream, mode: Mode) -> std::io::Result<()> {
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut preface = [0u8; PREFACE.len()];
    sock.read_exact(&mut preface)?;
    if preface != PREFACE {
        return Err(std::io::Error::other("not an HTTP/2 client preface"));
    }
    sock.write_all(&frame(SETTINGS, 0, 0, &[]))?;
    loop {
        let mut head = [0u8; 9];
        sock.read_exact(&mut head)?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        sock.read_exact(&mut payload)?;
        if kind == SETTINGS && flags & ACK == 0 {
            sock.write_all(&frame(SETTINGS, ACK, 0, &[]))?;
        }
        if (kind == HEADERS || kind == DATA) && flags & END_STREAM != 0 {
            sock.write_all(&answer(mode, stream))?;
            // Close gracefully: unread input at close would reset the connection before the
            // client has read the answer.
            sock.shutdown(Shutdown::Write)?;
            let mut rest = [0u8; 4096];
            while sock.read(&mut rest)? > 0 {}
            return Ok(());
        }
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// A length-prefixed gRPC message holding HealthCheckResponse { status }.
fn message(status: u8) -> Vec<u8> {
    let body = [0x08, status];
    let mut out = vec![0];
    out.extend((body.len() as u32).to_be_bytes());
    out.extend(body);
    out
}

/// HPACK: Huffman-coded values, added to the dynamic table; an entry already in a table is
/// sent as its index.
fn encode(encoder: &mut Encoder, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        let flags = Encoder::HUFFMAN_VALUE | Encoder::WITH_INDEXING | Encoder::BEST_FORMAT;
        encoder
            .encode(
                (name.as_bytes().to_vec(), value.as_bytes().to_vec(), flags),
                &mut out,
            )
            .expect("HPACK encoding of a valid header");
    }
    out
}

/// A literal header without indexing, both strings raw.
fn literal(name: &[u8], value: &[u8]) -> Vec<u8> {
    assert!(name.len() < 127 && value.len() < 127);
    let mut out = vec![0x00, name.len() as u8];
    out.extend(name);
    out.push(value.len() as u8);
    out.extend(value);
    out
}

fn answer(mode: Mode, sid: u32) -> Vec<u8> {
    match mode {
        Mode::Serving | Mode::NotServing => {
            let mut encoder = Encoder::default();
            let headers = encode(
                &mut encoder,
                &[
                    (":status", "200"),
                    ("content-type", "application/grpc"),
                    ("grpc-encoding", "identity"),
                ],
            );
            let trailers = encode(
                &mut encoder,
                &[
                    ("grpc-status", "0"),
                    ("grpc-encoding", "identity"),
                    ("grpc-message", "all good"),
                ],
            );
            // The trailers name grpc-encoding: identity by its dynamic table index.
            assert!(trailers.len() < 40, "{trailers:?}");
            let msg = message(if matches!(mode, Mode::Serving) { 1 } else { 2 });
            let mut out = frame(HEADERS, END_HEADERS, sid, &headers);
            out.extend(frame(DATA, 0, sid, &msg[..3]));
            out.extend(frame(DATA, 0, sid, &msg[3..]));
            out.extend(frame(HEADERS, END_HEADERS | END_STREAM, sid, &trailers));
            out
        }
        Mode::Unimplemented => {
            let block = encode(
                &mut Encoder::default(),
                &[
                    (":status", "200"),
                    ("content-type", "application/grpc"),
                    ("grpc-status", "12"),
                ],
            );
            frame(HEADERS, END_HEADERS | END_STREAM, sid, &block)
        }
        Mode::Malformed => frame(HEADERS, END_HEADERS | END_STREAM, sid, &[0xff; 10]),
        Mode::Oversized => {
            let mut block = literal(b":status", b"200");
            for _ in 0..180 {
                block.extend(literal(b"x-filler", &[b'a'; 100]));
            }
            let mut chunks = block.chunks(10_000);
            let mut out = frame(HEADERS, END_STREAM, sid, chunks.next().unwrap_or_default());
            let rest: Vec<&[u8]> = chunks.collect();
            for (i, chunk) in rest.iter().enumerate() {
                let last = i + 1 == rest.len();
                out.extend(frame(
                    CONTINUATION,
                    if last { END_HEADERS } else { 0 },
                    sid,
                    chunk,
                ));
            }
            out
        }
        Mode::BadHuffman => {
            // Name "abc" raw; value Huffman-flagged, one byte 0x00: "0" then padding 000.
            let mut block = literal(b":status", b"200");
            block.extend([0x00, 0x03]);
            block.extend(b"abc");
            block.extend([0x81, 0x00]);
            frame(HEADERS, END_HEADERS | END_STREAM, sid, &block)
        }
    }
}
