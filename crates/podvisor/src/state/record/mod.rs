//! The saved record's file format: `podvisor run`'s `PodRecord` and `podvisor init
//! --supervision`'s `InitRecord` (the core's types), written and read strictly.
//!
//! ```text
//! podvisor-state 3 pod
//! { ... the record as JSON ... }
//! checksum 0123456789abcdef
//! ```
//!
//! A header with the format version and kind, the record as JSON (serde's names for the
//! core's types, every field present, none unknown), and a last line with a checksum of
//! everything before it. A truncated file (no checksum line), a corrupt one (checksum
//! mismatch), an unknown field, a bad value or a newer format is refused with the line and
//! field; nothing is ever guessed or defaulted. Files of format 1, the first release's lines
//! of text, are still read (`v1`), and so are those of format 2, format 3's JSON under a
//! checksum of single bytes (`fnv`); what is written is format 3.

mod v1;

use std::time::{SystemTime, UNIX_EPOCH};

use podvisor_core::record::{InitRecord, PodRecord};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The format this podvisor writes.
pub const FORMAT: u32 = 3;

const MAGIC: &str = "podvisor-state";

/// Why a saved record cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("it is not a podvisor state file (its first line is not \"{MAGIC} {FORMAT} KIND\")")]
    NotState,
    #[error(
        "it was written by a newer podvisor (format {found}; this one reads formats 1 to {FORMAT})"
    )]
    Newer { found: u32 },
    #[error("it holds the state of a {found}, not of a {expected}")]
    Kind {
        found: String,
        expected: &'static str,
    },
    #[error("it ends before its checksum line: the file is truncated")]
    Truncated,
    #[error("its checksum does not match its contents: the file is corrupt")]
    Checksum,
    #[error("line {line}: field {field}: {message}")]
    Field {
        line: usize,
        field: String,
        message: String,
    },
}

pub fn encode_pod(r: &PodRecord) -> String {
    encode("pod", r)
}

pub fn decode_pod(text: &str) -> Result<PodRecord, RecordError> {
    match open(text, "pod")? {
        Body::V1(fields) => v1::pod(fields),
        Body::Json(at, json) => read_json(at, json),
    }
}

/// The resources an in-place resize allocated, by container (the kubelet's allocation
/// checkpoint): a pod taken up again keeps them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeRecord {
    pub containers: std::collections::BTreeMap<String, serde_json::Value>,
    /// The pod's `metadata.generation` once the resize changed its spec (none: written by a
    /// podvisor of before 2026-12, read as 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// What the spec asks of each container while its resize waits (`Infeasible`): the spec
    /// keeps it, as the API server does, and a run that takes the pod up asks again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<std::collections::BTreeMap<String, serde_json::Value>>,
}

pub fn encode_resize(r: &ResizeRecord) -> String {
    encode("resize", r)
}

pub fn decode_resize(text: &str) -> Result<ResizeRecord, RecordError> {
    match open(text, "resize")? {
        Body::Json(at, json) => read_json(at, json),
        Body::V1(_) => Err(RecordError::NotState),
    }
}

/// The pod's conditions set from outside (`PATCH /status`): a pod taken up again keeps them.
#[cfg(feature = "full")]
#[derive(Debug, Clone, PartialEq, Default, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionsRecord {
    pub conditions: Vec<k8s_openapi::api::core::v1::PodCondition>,
}

#[cfg(feature = "full")]
pub fn encode_conditions(r: &ConditionsRecord) -> String {
    encode("conditions", r)
}

#[cfg(feature = "full")]
pub fn decode_conditions(text: &str) -> Result<ConditionsRecord, RecordError> {
    match open(text, "conditions")? {
        Body::Json(at, json) => read_json(at, json),
        Body::V1(_) => Err(RecordError::NotState),
    }
}

pub fn encode_init(r: &InitRecord) -> String {
    encode("init", r)
}

pub fn decode_init(text: &str) -> Result<InitRecord, RecordError> {
    match open(text, "init")? {
        Body::V1(fields) => v1::init(fields),
        Body::Json(at, json) => read_json(at, json),
    }
}

/// Milliseconds since the Unix epoch (what records and exit notes hold).
pub fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn encode<T: Serialize>(kind: &str, record: &T) -> String {
    let json = serde_json::to_string_pretty(record).unwrap_or_default();
    let mut text = String::with_capacity(json.len() + 64);
    text.push_str(&format!("{MAGIC} {FORMAT} {kind}\n"));
    text.push_str(&json);
    text.push('\n');
    seal(text)
}

/// What is between a record's header and its checksum.
enum Body<'a> {
    /// Format 1: (line number, key, value) of each field line.
    V1(Vec<(usize, &'a str, &'a str)>),
    /// Formats 2 and 3: the JSON, and the line number it starts on.
    Json(usize, &'a str),
}

/// Checks the header, the kind and the checksum; returns what is between them.
fn open<'a>(text: &'a str, kind: &'static str) -> Result<Body<'a>, RecordError> {
    let mut lines = text.split_inclusive('\n');
    let header = lines.next().ok_or(RecordError::NotState)?;
    let mut words = header.trim_end_matches('\n').split(' ');
    if words.next() != Some(MAGIC) {
        return Err(RecordError::NotState);
    }
    let version: u32 = words
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or(RecordError::NotState)?;
    if version > FORMAT {
        return Err(RecordError::Newer { found: version });
    }
    let found = words.next().unwrap_or("");
    if found != kind {
        return Err(RecordError::Kind {
            found: found.to_string(),
            expected: kind,
        });
    }
    let sum = match version {
        1 | 2 => fnv,
        3 => checksum,
        _ => return Err(RecordError::NotState),
    };
    let body = &text[header.len()..checked_end(text, sum)?];
    match version {
        1 => Ok(Body::V1(v1::fields(body))),
        _ => Ok(Body::Json(2, body)),
    }
}

/// Where the checksum line starts, once it is found last and matches what is before it.
fn checked_end(text: &str, checksum: fn(&[u8]) -> u64) -> Result<usize, RecordError> {
    let Some(body) = text.strip_suffix('\n') else {
        return Err(RecordError::Truncated);
    };
    let start = body.rfind('\n').map_or(0, |i| i + 1);
    let Some(sum) = body[start..].strip_prefix("checksum ") else {
        // A checksum line in the middle: something came after it.
        return Err(if text.contains("\nchecksum ") {
            RecordError::Checksum
        } else {
            RecordError::Truncated
        });
    };
    if sum != format!("{:016x}", checksum(&text.as_bytes()[..start])) {
        return Err(RecordError::Checksum);
    }
    Ok(start)
}

fn read_json<T: DeserializeOwned>(first_line: usize, json: &str) -> Result<T, RecordError> {
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde_json says where in the JSON; the line is said in the file's numbering.
        let mut message = inner.to_string();
        if let Some(at) = message.rfind(" at line ") {
            message.truncate(at);
        }
        RecordError::Field {
            line: first_line + inner.line().saturating_sub(1),
            field: path,
            message,
        }
    })
}

/// Appends the checksum line.
fn seal(mut body: String) -> String {
    let sum = checksum(body.as_bytes());
    body.push_str(&format!("checksum {sum:016x}\n"));
    body
}

/// Format 3's checksum, 64 bits: enough to tell a torn or edited file from the one podvisor
/// wrote. Eight bytes at a time (little-endian words, the last one filled up with zeros, the
/// length mixed in first), each step a bijection of the sum so far (xor, rotate, multiply by
/// an odd constant), so that one word changed always changes the sum. A pod of 100 containers
/// saves about 40 KB twice per restart: FNV-1a (`fnv`), a multiplication per byte, took
/// 50 µs of each save, this takes a few.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |h: u64, w: u64| (h ^ w).rotate_left(23).wrapping_mul(K);
    let mut words = bytes.chunks_exact(8);
    let mut h = step(0xcbf2_9ce4_8422_2325, bytes.len() as u64);
    for w in &mut words {
        h = step(h, u64::from_le_bytes(w.try_into().unwrap_or_default()));
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    h = step(h, u64::from_le_bytes(last));
    // The high bits of the last words reach the low ones.
    h ^ (h >> 32)
}

/// Formats 1 and 2's checksum: FNV-1a, 64 bits, a byte at a time.
fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests;
