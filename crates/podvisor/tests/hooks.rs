//! Lifecycle hooks through the binary, translated from Kubernetes' e2e tests
//! (test/e2e/common/node/lifecycle_hook.go): postStart and preStop with exec, httpGet and sleep
//! handlers, their order against the container's start and SIGTERM, and their failures.

use std::time::{Duration, Instant};

use crate::harness::*;
use crate::probes::{event_ms, free_port, pod_with, stop};

/// A container that records SIGTERM in `file` and exits 0 on it.
fn polite(name: &str, file: &std::path::Path, lifecycle: &str) -> String {
    format!(
        "  - name: {name}\n    command: [sh, -c, 'trap \"echo term >> {f}; exit 0\" TERM; while true; do sleep 0.1; done']\n    lifecycle:\n{lifecycle}",
        f = file.display()
    )
}

#[test]
fn post_start_exec_runs_before_the_container_counts_as_running() {
    // e2e: "should execute poststart exec hook properly"; the container is not ready (not
    // Running) until its postStart has completed.
    let dir = TempDir::new();
    let f = dir.file("record");
    let spec = format!(
        "  containers:\n{}",
        polite(
            "app",
            &f,
            &format!(
                "      postStart: {{exec: {{command: [sh, -c, 'sleep 1; echo poststart >> {}']}}}}\n",
                f.display()
            )
        )
    );
    let r = PodRun::new(&pod_with("Always", 5, &spec));
    let mut p = r.cmd(&[]).start();
    let ready = r.wait_event("app", "Ready", 1);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "poststart\n");
    let started = r.find("app", "Started");
    let took = event_ms(&ready[0]) - event_ms(&started[0]);
    assert!(took >= 900, "ready {took} ms after the process started");
    stop(&mut p);
}

#[test]
fn pre_stop_exec_runs_before_sigterm() {
    // e2e: "should execute prestop exec hook properly".
    let dir = TempDir::new();
    let f = dir.file("record");
    let spec = format!(
        "  containers:\n{}",
        polite(
            "app",
            &f,
            &format!(
                "      preStop: {{exec: {{command: [sh, -c, 'echo prestop >> {}']}}}}\n",
                f.display()
            )
        )
    );
    let r = PodRun::new(&pod_with("Always", 5, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Ready", 1);
    stop(&mut p);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "prestop\nterm\n");
}

#[test]
fn http_hooks_reach_their_handler() {
    // e2e: "should execute poststart http hook properly" and "... prestop http hook properly":
    // the handler is a sidecar, so it still serves when the app's preStop runs.
    let port = free_port();
    let dir = TempDir::new();
    let log = dir.file("requests");
    let f = dir.file("record");
    let spec = format!(
        "  initContainers:\n  - name: handler\n    restartPolicy: Always\n    command: [{bin}, serve, '{port}', --log, {log}]\n    startupProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1}}\n  containers:\n{app}",
        bin = testbin().display(),
        log = log.display(),
        app = polite(
            "app",
            &f,
            &format!("      postStart: {{httpGet: {{path: /poststart, port: {port}}}}}\n      preStop: {{httpGet: {{path: /prestop, port: {port}, httpHeaders: [{{name: X-Hook, value: pre}}]}}}}\n")
        )
    );
    let r = PodRun::new(&pod_with("Always", 5, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Ready", 1);
    stop(&mut p);
    let requests = std::fs::read_to_string(&log).unwrap();
    let paths: Vec<&str> = requests
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(paths, ["/poststart", "/prestop"], "{requests}");
    assert!(requests.contains("user-agent=kube-probe/1.37"));
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "term\n",
        "{:#?}",
        r.events()
    );
}

#[test]
fn a_failing_post_start_kills_and_restarts_the_container() {
    // The kubelet's postStart failure path: FailedPostStartHook, killed through preStop, then
    // restarted by policy.
    let dir = TempDir::new();
    let f = dir.file("record");
    let spec = format!(
        "  containers:\n{}",
        polite(
            "app",
            &f,
            &format!(
                "      postStart: {{exec: {{command: [sh, -c, 'sleep 0.5; exit 1']}}}}\n      preStop: {{exec: {{command: [sh, -c, 'echo prestop >> {}']}}}}\n",
                f.display()
            )
        )
    );
    let r = PodRun::new(&pod_with("Always", 5, &spec));
    let mut p = r.cmd(&["--backoff-initial", "100ms"]).start();
    r.wait_event("app", "Started", 2);
    let failed = r.find("app", "FailedPostStartHook");
    assert_eq!(failed[0]["message"], "PostStartHook failed");
    assert_eq!(
        r.find("app", "Killing")[0]["message"],
        "FailedPostStartHook"
    );
    assert!(r.find("app", "Ready").is_empty(), "never ran");
    stop(&mut p);
    assert!(std::fs::read_to_string(&f)
        .unwrap()
        .starts_with("prestop\nterm\n"));
}

#[test]
fn a_failing_pre_stop_does_not_stop_the_stop() {
    let dir = TempDir::new();
    let f = dir.file("record");
    let spec = format!(
        "  containers:\n{}",
        polite(
            "app",
            &f,
            "      preStop: {exec: {command: [sh, -c, 'exit 3']}}\n"
        )
    );
    let r = PodRun::new(&pod_with("Always", 5, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Ready", 1);
    stop(&mut p);
    assert_eq!(
        r.find("app", "FailedPreStopHook")[0]["message"],
        "PreStopHook failed"
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "term\n");
}

#[test]
fn pre_stop_sleep_delays_sigterm() {
    // e2e: "valid prestop hook using sleep action".
    let dir = TempDir::new();
    let f = dir.file("record");
    let spec = format!(
        "  containers:\n{}",
        polite("app", &f, "      preStop: {sleep: {seconds: 2}}\n")
    );
    let r = PodRun::new(&pod_with("Always", 10, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Ready", 1);
    let began = Instant::now();
    stop(&mut p);
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(6),
        "{took:?}"
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "term\n");
}

#[test]
fn a_pre_stop_longer_than_the_grace_is_cut_short() {
    // e2e: "reduce GracePeriodSeconds during runtime" in spirit: a preStop sleep of 30 s with a
    // grace of 2 s; SIGTERM still comes, with its own 2 s before SIGKILL.
    let dir = TempDir::new();
    let f = dir.file("record");
    let spec = format!(
        "  containers:\n{}",
        polite("app", &f, "      preStop: {sleep: {seconds: 30}}\n")
    );
    let r = PodRun::new(&pod_with("Always", 2, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Ready", 1);
    let began = Instant::now();
    stop(&mut p);
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(8),
        "{took:?}"
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "term\n");
}
