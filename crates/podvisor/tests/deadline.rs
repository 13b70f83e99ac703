//! `activeDeadlineSeconds` through the binary: past it the pod fails (`DeadlineExceeded`,
//! kubectl's STATUS too) and its containers stop gracefully; a run killed and started again
//! counts from when the pod was created; values the API refuses are refused.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::harness::*;
use crate::probes::{event_ms, pod_with};

const DAY: i64 = 86_400_000;

/// A container that leaves at SIGTERM, saying so.
const POLITE: &str = "  containers:
  - name: app
    command: [sh, -c, 'trap \"echo stopped; exit 0\" TERM; while true; do sleep 0.1; done']
";

fn with_deadline(seconds: u32) -> String {
    pod_with(
        "Always",
        1,
        &format!("  activeDeadlineSeconds: {seconds}\n{POLITE}"),
    )
}

#[test]
fn past_its_deadline_the_pod_fails_and_its_containers_stop_gracefully() {
    let r = PodRun::new(&with_deadline(1));
    let mut p = r.cmd(&[]).start();
    let status = p.wait();
    p.drain();
    p.assert_no_leftovers();
    assert_eq!(status.code(), Some(1), "{:?}", p.stderr);
    let told = r.wait_event("pod", "DeadlineExceeded", 1);
    assert_eq!(
        told[0]["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    // Counted from the pod's start: its container is created in the same step.
    let created = r.wait_event("app", "Created", 1);
    let after = event_ms(&told[0]) - event_ms(&created[0]);
    assert!(
        (900..5_000).contains(&after),
        "failed {after} ms after it started"
    );
    // Stopped with SIGTERM, not restarted.
    assert!(r.log_lines("app", 1).contains(&"stopped".to_string()));
    assert_eq!(r.find("app", "Started").len(), 1);
    let out = client(&r, &["status", "-o", "json"]);
    let pod: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(pod["status"]["phase"], "Failed", "{pod}");
    assert_eq!(pod["status"]["reason"], "DeadlineExceeded", "{pod}");
    // kubectl's STATUS is the pod's reason.
    let line = client(&r, &["status"]);
    assert!(line.stdout.contains(" DeadlineExceeded "), "{line:?}");
}

#[test]
fn a_run_killed_and_started_again_counts_from_when_the_pod_was_created() {
    // Killed at once, started again 2 s later: the deadline (4 s) falls 2 s into the second
    // run, where one counted from that run would fall 4 s into it.
    let r = PodRun::new(&with_deadline(4));
    let mut first = r.cmd(&[]).start();
    // Started: the pod's record is saved by then.
    r.wait_event("app", "Started", 1);
    let created = r.wait_event("app", "Created", 1);
    first.signal("KILL");
    first.wait();
    std::thread::sleep(std::time::Duration::from_secs(2));
    // Milliseconds of the day (UTC), as `event_ms` counts them modulo a day.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let resumed_at = now % DAY;
    let mut second = r.cmd(&[]).start();
    let status = second.wait();
    second.drain();
    second.assert_no_leftovers();
    assert_eq!(status.code(), Some(1), "{:?}", second.stderr);
    let told = r.wait_event("pod", "DeadlineExceeded", 1);
    let at = event_ms(&told[0]) % DAY;
    // Not before the deadline, and before one counted from the second run could fall.
    assert!(at >= event_ms(&created[0]) % DAY + 3_900, "failed too soon");
    assert!(at < resumed_at + 3_500, "counted from the second run");
}

#[test]
fn a_deadline_the_api_refuses_is_refused_at_its_line() {
    let r = PodRun::new(&with_deadline(0));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    let said = "pod.yaml:7:3: spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 4294967295, inclusive";
    assert!(out.stderr.contains(said), "{}", out.stderr);
    // A Deployment's pods run for good: the API server refuses a deadline in its template.
    let dir = TempDir::new();
    let file = dir.file("deployment.yaml");
    std::fs::write(
        &file,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}, annotations: {podvisor.io/root-from: host}}\n    spec:\n      activeDeadlineSeconds: 30\n      containers:\n      - {name: app, command: ['true']}\n",
    )
    .unwrap();
    let out = Run::new(podvisor()).arg("validate").arg(&file).output();
    assert_eq!(out.code(), 2, "{out:?}");
    let said = "deployment.yaml:9:7: spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported";
    assert!(out.stderr.contains(said), "{}", out.stderr);
}
