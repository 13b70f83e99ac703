//! `podvisor explain` through the binary.

use std::path::Path;

use crate::harness::*;

fn example(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/pods")
        .join(name)
}

#[test]
fn explains_the_web_example() {
    let out = Run::new(podvisor())
        .arg("explain")
        .arg(example("web.yaml"))
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("container app\n"), "{out:?}");
    assert!(
        out.stdout
            .contains("a hang:         detected within 7s, killed (SIGKILL) within 12s"),
        "{out:?}"
    );
    assert!(
        out.stdout
            .contains("restart backoff (CrashLoopBackOff): 0s, 10s, 20s, 40s, 1m20s, 2m40s, 5m0s"),
        "{out:?}"
    );
    assert!(!out.stdout.contains("warning"), "{out:?}");

    // Told that the app needs 90 s to start, it warns about liveness, with the fix.
    let out = Run::new(podvisor())
        .args(["explain", "--start-time", "90s", "-o", "json"])
        .arg(example("web.yaml"))
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let app = &v["containers"][1];
    assert_eq!(app["name"], "app");
    assert_eq!(app["hangDetectedSeconds"], 7.0);
    let w = &app["warnings"][0];
    assert_eq!(w["field"], "spec.template.spec.containers[0].livenessProbe");
    assert!(w["fix"].as_str().unwrap().contains("startupProbe"), "{w}");
}

#[test]
fn explains_the_stages() {
    let out = Run::new(podvisor())
        .arg("explain")
        .arg(example("crashloop.yaml"))
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    for line in [
        "instrumentation stages of app:",
        "  Nominal   from the first start",
        "  Debug     from restart 3 (at the earliest 30s after the first start, if it crashes at once)",
        "  Disabled  from restart 6 (at the earliest 5m10s after the first start, if it crashes at once)",
        "  verdict:  once Disabled, 10m0s of running without a restart blames the add-on (InstrumentationBlamed); 3 more restarts clear it (InstrumentationCleared)",
        "whole-pod restart: a container that exits after 5 restarts within 10m0s restarts the whole pod (emptyDir wiped, init containers again), at most 3 times; then the pod fails (GaveUp)",
    ] {
        assert!(out.stdout.lines().any(|l| l == line), "{line:?} not in {}", out.stdout);
    }
    let out = Run::new(podvisor())
        .args(["explain", "-o", "json"])
        .arg(example("crashloop.yaml"))
        .output();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let stages = &v["instrumentation"]["stages"];
    assert_eq!(stages[1]["stage"], "Debug");
    assert_eq!(stages[1]["fromRestart"], 3);
    assert_eq!(stages[1]["earliestSeconds"], 30.0);
    assert_eq!(v["instrumentation"]["verdictAfterSeconds"], 600.0);
    assert_eq!(v["podRestart"]["maxPodRestarts"], 3);
}

#[test]
fn bad_input_and_options() {
    let out = Run::new(podvisor())
        .args(["explain", "-o", "yaml"])
        .arg(example("web.yaml"))
        .output();
    assert_eq!(out.code(), 2);
    let out = Run::new(podvisor())
        .args(["explain", "/no/such.yaml"])
        .output();
    assert_eq!(out.code(), 2);
    assert!(out.stderr.starts_with("error: /no/such.yaml"), "{out:?}");
}
