//! The fuzz targets' corpora (`fuzz/corpus/TARGET`), replayed through the same functions the
//! targets call (`podvisor::fuzzing`): every input found to be interesting, and every crash
//! once fixed, stays a test that `cargo test` runs, without cargo-fuzz.

use std::path::PathBuf;

/// The inputs of one target's corpus (none is an error: a corpus is never empty).
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{} is empty", dir.display());
    inputs
}

/// Runs `f` on every input of `target`'s corpus, naming the input that panics.
fn replay(target: &str, f: fn(&[u8])) {
    for (path, bytes) in corpus(target) {
        let outcome = std::panic::catch_unwind(|| f(&bytes));
        assert!(outcome.is_ok(), "{target}: {} panics", path.display());
    }
}

#[test]
fn the_manifest_corpus_replays() {
    replay("manifest", podvisor::fuzzing::manifest);
}

#[test]
fn the_supervision_corpus_replays() {
    replay("supervision", podvisor::fuzzing::supervision);
}

#[test]
fn the_record_corpus_replays() {
    replay("record", podvisor::fuzzing::record);
}

#[test]
fn the_keeper_corpus_replays() {
    replay("keeper", podvisor::fuzzing::keeper);
}

#[test]
fn the_api_request_corpus_replays() {
    replay("api_request", podvisor::fuzzing::api_request);
}
