//! The admission fuzz target's corpus (`fuzz/corpus/admission`), replayed through the function
//! the target calls (`podvisor_controller::fuzzing::admission`), without cargo-fuzz.

use std::path::PathBuf;

#[test]
fn the_admission_corpus_replays() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/admission");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let bytes = std::fs::read(entry.path()).unwrap();
        let outcome = std::panic::catch_unwind(|| podvisor_controller::fuzzing::admission(&bytes));
        assert!(outcome.is_ok(), "{} panics", entry.path().display());
        n += 1;
    }
    assert!(n > 0, "{} is empty", dir.display());
}
