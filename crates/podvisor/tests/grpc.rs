//! The grpc probe through the binary: against tonic-health's server, and against a server that
//! writes its HTTP/2 frames by hand with an HPACK encoder that Huffman-codes and indexes, as
//! grpc-go's and Envoy's do; and header blocks that must fail cleanly (malformed, oversized,
//! bad Huffman padding). Both servers are podvisor-testservers.

use std::time::Duration;

use serde_json::Value;

use crate::harness::*;
use crate::probes::{free_port, pod_with, stop};

fn grpc_pod(port: u16, status_file: &std::path::Path, extra: &str) -> String {
    format!(
        "  containers:\n  - name: app\n    command: [{server}, grpc-health, '{port}', {status}{extra}]\n    startupProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1, failureThreshold: 30}}\n    livenessProbe: {{grpc: {{port: {port}}}, periodSeconds: 1, failureThreshold: 1}}\n",
        server = testservers().display(),
        status = status_file.display()
    )
}

#[test]
fn grpc_liveness_serving_and_not_serving() {
    // e2e: "should *not* be restarted with a GRPC liveness probe" and "should be restarted
    // with a GRPC liveness probe".
    let dir = TempDir::new();
    let status = dir.file("status");
    std::fs::write(&status, "SERVING").unwrap();
    let port = free_port();
    let r = PodRun::new(&pod_with("Always", 1, &grpc_pod(port, &status, "")));
    let mut p = r.cmd(&["--backoff-initial", "100ms"]).start();
    r.wait_event("app", "Ready", 1);
    std::thread::sleep(Duration::from_millis(2500));
    let liveness = |r: &PodRun| -> Vec<Value> {
        r.find("app", "Unhealthy")
            .into_iter()
            .filter(|e| e["message"].as_str().unwrap().starts_with("Liveness"))
            .collect()
    };
    assert!(liveness(&r).is_empty(), "{:?}", r.events());
    std::fs::write(&status, "NOT_SERVING").unwrap();
    wait_until("a liveness failure", || !liveness(&r).is_empty());
    assert_eq!(
        liveness(&r)[0]["message"],
        "Liveness probe failed: service unhealthy (responded with \"NOT_SERVING\")"
    );
    r.wait_event("app", "Started", 2);
    stop(&mut p);
}

#[test]
fn grpc_probe_against_a_server_without_the_health_service() {
    let dir = TempDir::new();
    let port = free_port();
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        &grpc_pod(port, &dir.file("status"), ", --no-health"),
    ));
    let mut p = r.cmd(&[]).start();
    let mut unhealthy = Vec::new();
    wait_until("a liveness failure", || {
        unhealthy = r
            .find("app", "Unhealthy")
            .into_iter()
            .filter(|e| e["message"].as_str().unwrap().starts_with("Liveness"))
            .collect();
        !unhealthy.is_empty()
    });
    assert_eq!(
        unhealthy[0]["message"],
        "Liveness probe failed: this server does not implement the grpc health protocol (grpc.health.v1.Health)"
    );
    stop(&mut p);
}

/// A pod whose container is the h2 health server in `mode`, probed by liveness.
fn h2_pod(port: u16, mode: &str) -> PodRun {
    PodRun::new(&pod_with(
        "Always",
        1,
        &format!(
            "  containers:\n  - name: app\n    command: [{}, h2-health, '{port}', {mode}]\n    startupProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1, failureThreshold: 30}}\n    livenessProbe: {{grpc: {{port: {port}}}, periodSeconds: 1, failureThreshold: 1}}\n",
            testservers().display()
        ),
    ))
}

/// The first liveness event (Unhealthy) of the pod, waiting for it.
fn first_liveness_failure(r: &PodRun) -> String {
    let mut found = Vec::new();
    wait_until("a liveness failure", || {
        found = r
            .find("app", "Unhealthy")
            .into_iter()
            .filter(|e| e["message"].as_str().unwrap().starts_with("Liveness"))
            .collect();
        !found.is_empty()
    });
    found[0]["message"].as_str().unwrap().to_string()
}

#[test]
fn huffman_coded_and_indexed_trailers_are_read() {
    // SERVING, its message split over two DATA frames: healthy, never killed.
    let r = h2_pod(free_port(), "serving");
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    r.wait_event("app", "Ready", 1);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(r.find("app", "Unhealthy").is_empty(), "{:?}", r.events());
    stop(&mut p);

    for (mode, want) in [
        ("not-serving", "Liveness probe failed: service unhealthy (responded with \"NOT_SERVING\")"),
        ("unimplemented", "Liveness probe failed: this server does not implement the grpc health protocol (grpc.health.v1.Health)"),
    ] {
        let r = h2_pod(free_port(), mode);
        let mut p = r.cmd(&[]).start();
        assert_eq!(first_liveness_failure(&r), want, "{mode}");
        stop(&mut p);
    }
}

#[test]
fn header_blocks_that_cannot_be_read_fail_cleanly() {
    for (mode, want) in [
        ("malformed", "Liveness probe failed: error: health rpc probe failed: connection error: the server's header block cannot be decoded (HPACK: "),
        ("oversized", "Liveness probe failed: error: health rpc probe failed: the server's header block is larger than 16384 bytes"),
        ("bad-huffman", "Liveness probe failed: error: health rpc probe failed: connection error: the server's header block cannot be decoded (HPACK: String decoding error: Huffman decoder error: "),
    ] {
        let r = h2_pod(free_port(), mode);
        let mut p = r.cmd(&[]).start();
        let message = first_liveness_failure(&r);
        assert!(message.starts_with(want), "{mode}: {message}");
        // A failure, counted: the container is killed and restarted.
        r.wait_event("app", "Killing", 1);
        stop(&mut p);
    }
}
