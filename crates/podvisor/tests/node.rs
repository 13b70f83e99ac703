//! The kubelet of 1.35–1.37 through the binary: the node's settings as it takes them (a
//! KubeletConfiguration file, `--config`, and `--feature-gates`), the CrashLoopBackOff curve
//! they give (`explain` shows it, with where it comes from; a run keeps to it), what the
//! kubelet refuses, refused in its words; a container's stop signal (KEP-4960, behind the
//! gate ContainerStopSignals): sent instead of SIGTERM, shown in its status; and sidecars
//! restarted during the pod's termination (KEP-4438, behind its gate).

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

/// A pod whose `app` exits 0 on SIGUSR1 only (and says so), and whose `plain` names no stop
/// signal; `os` is its `spec.os` line.
fn stop_signal_pod(os: &str) -> String {
    pod_with(
        "Never",
        30,
        &format!(
            "{os}  containers:
  - name: app
    command: [sh, -c, 'trap \"echo got USR1; exit 0\" USR1; trap \"\" TERM; echo up; while :; do sleep 0.05; done']
    lifecycle: {{stopSignal: SIGUSR1}}
  - name: plain
    command: [sh, -c, 'trap \"exit 0\" TERM; while :; do sleep 0.05; done']
"
        ),
    )
}

#[test]
fn a_stop_signal_replaces_sigterm_and_shows_in_the_status() {
    let r = PodRun::new(&stop_signal_pod("  os: {name: linux}\n"));
    let mut p = r
        .cmd(&["--feature-gates", "ContainerStopSignals=true"])
        .start();
    r.wait_event("app", "Started", 1);
    let log = r.dir.file("state").join("logs/app/1.log");
    wait_until("app is up", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("up"))
    });
    let status = client(&r, &["status", "-o", "json"]);
    let pod: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let signals: Vec<(&str, &str)> = pod["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["stopSignal"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        signals,
        [("app", "SIGUSR1"), ("plain", "SIGTERM")],
        "{status:?}"
    );
    // SIGTERM to the run stops the pod: app gets SIGUSR1 (it ignores SIGTERM) and exits 0
    // well before its 30 s of grace.
    let began = std::time::Instant::now();
    stop(&mut p);
    assert!(began.elapsed() < std::time::Duration::from_secs(20));
    assert!(r.log("app", 1).contains("got USR1"), "{}", r.log("app", 1));
    let exits: Vec<_> = r.find("app", "Completed");
    assert_eq!(exits.len(), 1, "{:?}", r.events());
}

#[test]
fn a_stop_signal_needs_its_gate_and_the_pods_os() {
    // Without the gate: refused, naming it (the API server would drop the field).
    let r = PodRun::new(&stop_signal_pod("  os: {name: linux}\n"));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr
            .contains("lifecycle.stopSignal needs the feature gate ContainerStopSignals")
            && out
                .stderr
                .contains("--feature-gates ContainerStopSignals=true"),
        "{out:?}"
    );
    // Without spec.os.name, or with a signal the OS does not have: the API server's words.
    let r = PodRun::new(&stop_signal_pod(""));
    let out = Run::new(podvisor())
        .arg("validate")
        .arg(r.dir.file("pod.yaml"))
        .output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("spec.containers[0].lifecycle.stopSignal: Forbidden: may not be set for containers with empty `spec.os.name`"),
        "{out:?}"
    );
    let r = PodRun::new(&stop_signal_pod("  os: {name: windows}\n"));
    let out = Run::new(podvisor())
        .arg("validate")
        .arg(r.dir.file("pod.yaml"))
        .output();
    assert!(
        out.stderr
            .contains("Unsupported value: \"SIGUSR1\": supported values: \"SIGKILL\", \"SIGTERM\""),
        "{out:?}"
    );
    // explain names each container's stop signal.
    let r = PodRun::new(&stop_signal_pod("  os: {name: linux}\n"));
    let out = Run::new(podvisor())
        .arg("explain")
        .arg(r.dir.file("pod.yaml"))
        .output();
    let lines: Vec<&str> = (out.stdout.lines())
        .filter(|l| l.trim_start().starts_with("stop signal:"))
        .collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert!(
        lines[0].contains("SIGUSR1 (lifecycle.stopSignal"),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("SIGTERM (the image's STOPSIGNAL"),
        "{lines:?}"
    );
}

/// A pod whose main container takes 2 s to stop and tells its sidecar so (a file in their
/// emptyDir); the sidecar's first instance exits 1 then, its later ones run until SIGTERM.
fn sidecar_pod() -> String {
    pod_with(
        "Always",
        30,
        "  volumes: [{name: data, emptyDir: {}}]
  initContainers:
  - name: side
    restartPolicy: Always
    command: [sh, -c, 'if [ -e /data/second ]; then trap \"exit 0\" TERM; while :; do sleep 0.05; done; fi; while [ ! -e /data/stopping ]; do sleep 0.05; done; touch /data/second; exit 1']
    volumeMounts: [{name: data, mountPath: /data}]
  containers:
  - name: app
    command: [sh, -c, 'trap \"touch /data/stopping; sleep 2; exit 0\" TERM; while :; do sleep 0.05; done']
    volumeMounts: [{name: data, mountPath: /data}]
",
    )
}

#[test]
fn a_sidecar_that_exits_during_termination_is_restarted_with_its_gate() {
    if !is_root() {
        skip("emptyDir volumes need root");
        return;
    }
    for (gate, starts) in [(false, 1), (true, 2)] {
        let r = PodRun::new(&sidecar_pod());
        let flags = [
            "--feature-gates",
            "SidecarsRestartableDuringPodTermination=true",
        ];
        let mut p = r.cmd(if gate { &flags[..] } else { &[] }).start();
        r.wait_event("app", "Started", 1);
        stop(&mut p);
        let started = r.find("side", "Started");
        assert_eq!(started.len(), starts, "gate {gate}: {:?}", r.events());
        // The restarted sidecar stopped in its turn, after the main container.
        if gate {
            let app_done = r.find("app", "Completed");
            let killing = r.find("side", "Killing");
            assert!(
                !app_done.is_empty() && !killing.is_empty(),
                "{:?}",
                r.events()
            );
        }
    }
}
