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
    assert!(out.stdout.contains("instrumentation stages: Nominal from restart 0, Debug from restart 3, Disabled from restart 6"), "{out:?}");
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
