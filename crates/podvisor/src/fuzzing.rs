//! What the fuzz targets (`fuzz/`, cargo-fuzz) run, and what `cargo test` replays over their
//! corpora (`tests/fuzzing.rs`): each reader of input from outside, given any bytes. A reader
//! may refuse what it is given; it must never panic, and what it accepts must read back the
//! same once written again.

use podvisor_core::backoff::BackoffPolicy;
use podvisor_core::security::CapSet;
use podvisor_core::spec::plan::HostFacts;

use crate::state::keeper::{ExitNote, Message, PROTOCOL};
use crate::state::record;

/// A Pod manifest (with its ConfigMaps, Secrets and Supervision): read, checked, planned and
/// explained, as `podvisor run`, `validate` and `explain` take it.
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(m) = podvisor_core::spec::load("fuzz.yaml", text) else {
        return;
    };
    let host = HostFacts {
        hostname: "fuzz".into(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        cpus: 2,
        memory: 1 << 30,
        all_capabilities: CapSet::all(40),
        seccomp_default: false,
    };
    let _ = podvisor_core::spec::plan::plan(&m, &host, BackoffPolicy::default());
    let _ = podvisor_core::spec::explain::explain(&m, BackoffPolicy::default(), None);
}

/// A Supervision file, as `podvisor init --supervision` reads it.
pub fn supervision(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(s) = podvisor_core::document::supervision::read_for_container("fuzz.yaml", text) {
        let _ = s.problems();
    }
}

/// A saved record (`podvisor.state`, `podvisor-init.state`): what reads, reads back the same
/// once written.
pub fn record(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = record::decode_pod(text) {
        let again = record::decode_pod(&record::encode_pod(&r));
        assert_eq!(again.as_ref(), Ok(&r), "a pod record reads back as written");
    }
    if let Ok(r) = record::decode_init(text) {
        let again = record::decode_init(&record::encode_init(&r));
        assert_eq!(
            again.as_ref(),
            Ok(&r),
            "an init record reads back as written"
        );
    }
}

/// A keeper's messages (one per line) and an exit note: what reads, writes the same twice.
pub fn keeper(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        if let Ok(m) = serde_json::from_str::<Message>(line) {
            let once = serde_json::to_string(&m).expect("a message writes");
            let back: Message = serde_json::from_str(&once).expect("a written message reads");
            let twice = serde_json::to_string(&back).expect("a message writes");
            assert_eq!(once, twice, "a keeper message reads back as written");
        }
    }
    if let Ok(note) = ExitNote::decode(text) {
        let once = note.encode(PROTOCOL);
        let back = ExitNote::decode(&once).expect("a written exit note reads");
        assert_eq!(
            back.encode(PROTOCOL),
            once,
            "an exit note reads back as written"
        );
    }
}

/// A request head on the status API's socket.
pub fn api_request(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::api::parse_request(text);
    }
}
