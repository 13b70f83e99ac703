//! Every example in examples/ runs as README.md and docs/ say it does.

use std::path::PathBuf;

use crate::harness::*;

fn example(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The init example of docs/guide.md. `--wait-all` lets the helpers finish; their
/// zombies are reaped, and the app's exit code comes through.
#[test]
fn init_example_app() {
    let out = Run::new(podvisor())
        .args(["init", "-s", "--wait-all", "--", "sh"])
        .arg(example("examples/init/app.sh"))
        .output();
    assert_eq!(out.code(), 3, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "app: started 5 helpers, exiting with code 3 without waiting for them"
    );
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("helper ")).count(),
        5,
        "{out:?}"
    );

    // Without --wait-all, init exits with the app and leaves the helpers to finish on their own
    // (as tini does); as PID 1 of a namespace the kernel would then end them.
    let out = Run::new(podvisor())
        .args(["init", "-s", "--kill-descendants=2s", "--", "sh"])
        .arg(example("examples/init/app.sh"))
        .output();
    assert_eq!(out.code(), 3, "{out:?}");
}
