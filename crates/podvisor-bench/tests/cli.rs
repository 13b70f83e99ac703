//! podvisor-bench's command line: what it refuses, it refuses by name before measuring or
//! making anything; `--help` prints a benchmark's flags instead of running it.

use std::process::{Command, Output};

/// A fresh, empty temporary directory for one call.
fn scratch() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "podvisor-bench-cli-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs podvisor-bench with `args` in a scratch TMPDIR; returns its output and whether the
/// TMPDIR is still empty (then removes it).
fn bench_in_scratch(args: &[&str]) -> (Output, bool) {
    let dir = scratch();
    let out = Command::new(env!("CARGO_BIN_EXE_podvisor-bench"))
        .args(args)
        .env("TMPDIR", &dir)
        .output()
        .expect("run podvisor-bench");
    let empty = std::fs::read_dir(&dir).unwrap().next().is_none();
    std::fs::remove_dir_all(&dir).unwrap();
    (out, empty)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_prints_a_benchmarks_flags_and_runs_nothing() {
    let (out, empty) = bench_in_scratch(&["init", "--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--podvisor", "--testbin", "--quick"] {
        assert!(text.contains(flag), "no {flag} in:\n{text}");
    }
    // The benchmark itself prints its medians' heading first.
    assert!(!text.contains("medians"), "it ran:\n{text}");
    assert!(empty, "init --help made files");
}

#[test]
fn a_flag_no_benchmark_has_is_refused_by_name() {
    // `--watcher` for `--watchers`: a typo once ran the bench with the default of 5.
    let (out, empty) = bench_in_scratch(&["top", "--watcher", "3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("'--watcher'"), "{err}");
    assert!(err.contains("--watchers"), "no suggestion in: {err}");
    assert!(empty);
    // A flag of another benchmark is not this one's.
    let (out, _) = bench_in_scratch(&["probes", "--horust", "/bin/true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("'--horust'"), "{}", stderr(&out));
}

#[test]
fn a_value_that_does_not_parse_is_refused() {
    for args in [
        ["top", "--rounds", "0"],
        ["top", "--rounds", "many"],
        ["top", "--watchers", "-1"],
    ] {
        let (out, empty) = bench_in_scratch(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let named = format!("'{}'", args[2]);
        assert!(stderr(&out).contains(&named), "{args:?}: {}", stderr(&out));
        assert!(empty, "{args:?} made files");
    }
}

#[test]
fn a_program_that_is_not_there_is_refused_before_anything_is_made() {
    let missing = "/nonexistent/podvisor";
    for bench_name in ["run", "live-restore", "init", "api"] {
        let (out, empty) = bench_in_scratch(&[bench_name, "--podvisor", missing]);
        assert_eq!(out.status.code(), Some(2), "{bench_name}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{missing}: no such program")),
            "{bench_name}: {err}"
        );
        assert!(empty, "{bench_name} made files");
    }
    // What a benchmark needs is asked for by name.
    let (out, _) = bench_in_scratch(&["docker", "--quick"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--podvisor") && err.contains("--image"),
        "{err}"
    );
}
