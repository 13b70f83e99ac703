//! The node's settings as the kubelet of 1.35–1.37 takes them, through the binary: a
//! KubeletConfiguration file (`--config`) and `--feature-gates`, the CrashLoopBackOff curve
//! they give (`explain` shows it, with where it comes from; a run keeps to it), and what the
//! kubelet refuses, refused in its words.

use crate::harness::*;
use crate::probes::{event_ms, pod_with, stop};

/// A node settings file with `body` under its header, in `dir`.
fn node_file(dir: &TempDir, body: &str) -> String {
    let path = dir.file("node.yaml");
    std::fs::write(
        &path,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"),
    )
    .unwrap();
    path.display().to_string()
}

/// `podvisor explain` of a crash-looping pod with `flags`: its output.
fn explain(flags: &[&str]) -> Output {
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - name: app\n    command: [\"false\"]\n",
    ));
    Run::new(podvisor())
        .arg("explain")
        .args(flags)
        .arg(r.dir.file("pod.yaml"))
        .output()
}

/// The backoff line of `explain` with `flags`.
fn curve(flags: &[&str]) -> String {
    let out = explain(flags);
    assert_eq!(out.code(), 0, "{out:?}");
    let i = out.stdout.find("restart backoff").expect("a backoff line");
    out.stdout[i..]
        .lines()
        .take(2)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_curve_is_the_one_the_nodes_settings_give() {
    let dir = TempDir::new();
    assert!(curve(&[]).starts_with(
        "restart backoff (CrashLoopBackOff): 0s, 10s, 20s, 40s, 1m20s, 2m40s, 5m0s, then every 5m0s\n  from the node's settings (KubeletCrashLoopBackOffMax=true, ReduceDefaultCrashLoopBackOffDecay=false; maxContainerRestartPeriod not set)"
    ));
    // KEP-5593: a maximum under 10 s lowers the first delay to it.
    let three = node_file(&dir, "crashLoopBackOff:\n  maxContainerRestartPeriod: 3s\n");
    let c = curve(&["--config", &three]);
    assert!(
        c.starts_with("restart backoff (CrashLoopBackOff): 0s, 3s, then every 3s\n"),
        "{c}"
    );
    assert!(c.contains("maxContainerRestartPeriod 3s"), "{c}");
    // KEP-4603's gate: 1 s to 60 s (with KubeletCrashLoopBackOffMax off, or a 60 s maximum:
    // with it on, the kubelet's defaulted 300 s is the maximum).
    let reduced = "ReduceDefaultCrashLoopBackOffDecay=true,KubeletCrashLoopBackOffMax=false";
    let c = curve(&["--feature-gates", reduced]);
    assert!(
        c.starts_with("restart backoff (CrashLoopBackOff): 0s, 1s, 2s, 4s, 8s, 16s, 32s, 1m0s, then every 1m0s\n"),
        "{c}"
    );
    let c = curve(&["--feature-gates", "ReduceDefaultCrashLoopBackOffDecay=true"]);
    assert!(c.contains(", 4m16s, 5m0s, then every 5m0s"), "{c}");
    // podvisor's own flags go over the node's curve.
    let c = curve(&["--config", &three, "--backoff-max", "2s"]);
    assert!(
        c.starts_with("restart backoff (CrashLoopBackOff): 0s, 2s, then every 2s\n"),
        "{c}"
    );
    assert!(c.ends_with("); --backoff-max 2s"), "{c}");
}

#[test]
fn what_the_kubelet_refuses_to_start_with_is_refused_in_its_words() {
    let dir = TempDir::new();
    let refused = |flags: &[&str]| {
        let out = explain(flags);
        assert_eq!(out.code(), 2, "{out:?}");
        out.stderr
    };
    let short = node_file(
        &dir,
        "crashLoopBackOff: {maxContainerRestartPeriod: 500ms}\n",
    );
    let err = refused(&["--config", &short]);
    assert!(
        err.contains("invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod (got: 0.5 seconds) must be set between 1s and 300s"),
        "{err}"
    );
    let set = node_file(&dir, "crashLoopBackOff: {maxContainerRestartPeriod: 60s}\n");
    let err = refused(&[
        "--config",
        &set,
        "--feature-gates",
        "KubeletCrashLoopBackOffMax=false",
    ]);
    assert!(
        err.contains("invalid configuration: FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set"),
        "{err}"
    );
    let err = refused(&["--feature-gates", "SidecarsEverywhere=true"]);
    assert!(
        err.contains("unrecognized feature gate: SidecarsEverywhere"),
        "{err}"
    );
    // A field podvisor does not honour is named with its line, never passed over.
    let other = node_file(&dir, "maxPods: 10\n");
    let err = refused(&["--config", &other]);
    assert!(
        err.contains("node.yaml:3:1: unknown field \"maxPods\""),
        "{err}"
    );
}

#[test]
fn a_run_restarts_on_the_nodes_curve() {
    let dir = TempDir::new();
    let one = node_file(&dir, "crashLoopBackOff: {maxContainerRestartPeriod: 1s}\n");
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - name: app\n    command: [\"false\"]\n",
    ));
    let mut p = r.cmd(&["--config", &one]).start();
    let started = r.wait_event("app", "Started", 4);
    stop(&mut p);
    // The first restart at once, then every 1 s (the maximum, and so the first delay too).
    let gaps: Vec<i64> = started
        .windows(2)
        .map(|w| event_ms(&w[1]) - event_ms(&w[0]))
        .collect();
    assert!(gaps[1] >= 1_000 && gaps[2] >= 1_000, "{gaps:?}");
    let backoff = r.find("app", "BackOff");
    assert!(
        backoff.iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Back-off restarting failed container app"))),
        "{backoff:?}"
    );
}
