//! Restart-aware escalation through the binary: staged instrumentation seen from inside the
//! container, the verdicts, whole-pod restarts and giving up.

use serde_json::Value;

use crate::harness::*;
use crate::probes::{free_port, pod_with, stop};

/// A Supervision document after a pod.
fn supervision(spec: &str) -> String {
    format!(
        "---\napiVersion: podvisor.io/v1alpha1\nkind: Supervision\nmetadata: {{name: default}}\nspec:\n{spec}"
    )
}

const FAST: [&str; 4] = ["--backoff-initial", "10ms", "--backoff-max", "40ms"];

/// The first line each of the first `n` instances of `container` wrote to stdout.
fn first_lines(r: &PodRun, container: &str, n: u32) -> Vec<String> {
    (1..=n)
        .map(|i| {
            let log = r.log(container, i);
            log.split(" stdout F ").nth(1).unwrap().trim().to_string()
        })
        .collect()
}

fn status_json(r: &PodRun) -> Value {
    let out = client(r, &["status", "-o", "json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn a_crash_looping_container_sees_its_stage_in_its_own_environment() {
    let spec = "  containers:
  - name: app
    command: [sh, -c, 'echo \"$PODVISOR_INSTR_STAGE agent=$AGENT_PATH log=$AGENT_LOG\"; exit 3']
    env: [{name: AGENT_LOG, value: from-the-spec}]
  - {name: side, command: [sleep, '600']}
";
    let sup = supervision(
        "  stagedInstrumentation:
    containers: [app]
    env: {AGENT_PATH: /opt/agent.so}
    debugEnv: {AGENT_LOG: debug}
",
    );
    let r = PodRun::new(&(pod_with("Always", 1, spec) + &sup));
    let mut p = r.cmd(&FAST).start();
    r.wait_event("app", "Started", 9);
    let seen = first_lines(&r, "app", 8);
    assert_eq!(
        seen,
        [
            "Nominal agent=/opt/agent.so log=",
            "Nominal agent=/opt/agent.so log=",
            "Nominal agent=/opt/agent.so log=",
            "Debug agent=/opt/agent.so log=debug",
            "Debug agent=/opt/agent.so log=debug",
            "Debug agent=/opt/agent.so log=debug",
            // Disabled takes the add-on's variables away, even one the spec set itself.
            "Disabled agent= log=",
            "Disabled agent= log=",
        ]
    );
    // Events: StageChanged twice, each event with the stage of its time; the unselected
    // container has none.
    let changes = r.find("app", "StageChanged");
    assert_eq!(changes.len(), 2);
    assert_eq!(
        changes[0]["message"],
        "Instrumentation stage Nominal → Debug at restart 3 of container app"
    );
    assert_eq!(changes[1]["restartCount"], 6);
    let exits: Vec<Value> = r
        .find("app", "Error")
        .iter()
        .take(8)
        .map(|e| e["stage"].clone())
        .collect();
    assert_eq!(
        exits,
        ["Nominal", "Nominal", "Nominal", "Debug", "Debug", "Debug", "Disabled", "Disabled"]
    );
    assert!(r.find("side", "Started")[0]["stage"].is_null());
    // Debug exits leave how they ended and the end of their log.
    let debug = r.find("app", "DebugExit");
    assert_eq!(debug.len(), 3);
    assert!(
        debug[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Container app exited with code 3 after "),
        "{debug:?}"
    );
    assert_eq!(debug[0]["exitCode"], 3);
    let tails = r.find("app", "DebugLogTail");
    assert_eq!(tails[0]["message"], "Debug agent=/opt/agent.so log=debug");
    // Status: annotations, the STAGE column, the describe line, the metrics gauge.
    let pod = status_json(&r);
    let a = &pod["metadata"]["annotations"];
    assert_eq!(a["podvisor.io/stage.app"], "Disabled");
    assert!(a["podvisor.io/stage.side"].is_null());
    assert_eq!(a["podvisor.io/pod-restarts"], "0");
    let wide = client(&r, &["status", "-o", "wide"]).stdout;
    let row = wide.lines().find(|l| l.starts_with("app ")).unwrap();
    // The container goes on crash-looping while we look: three more restarts while Disabled
    // add the verdict, "Disabled (Cleared)".
    assert!(
        row.ends_with("Disabled") || row.ends_with("Disabled (Cleared)"),
        "{wide}"
    );
    assert!(wide.contains("STAGE"), "{wide}");
    let describe = client(&r, &["describe"]).stdout;
    assert!(
        describe.contains("    Stage:          Disabled"),
        "{describe}"
    );
    stop(&mut p);
}

#[test]
fn the_add_on_is_blamed_when_the_app_runs_once_it_is_off() {
    // Crashes while the add-on is on (its variable set), runs once it is off.
    let spec = "  containers:
  - name: app
    command: [sh, -c, 'if [ -n \"$AGENT\" ]; then exit 1; fi; exec sleep 600']
";
    let sup = supervision(
        "  stagedInstrumentation:
    env: {AGENT: 'on'}
    debugAfterRestarts: 1
    disableAfterRestarts: 2
    verdictAfter: 1s
",
    );
    let r = PodRun::new(&(pod_with("Always", 1, spec) + &sup));
    let mut p = r.cmd(&FAST).start();
    let blamed = r.wait_event("app", "InstrumentationBlamed", 1);
    assert_eq!(
        blamed[0]["message"],
        "app ran 1s cleanly after the add-on was disabled at restart 2: the add-on is the likely cause"
    );
    assert_eq!(blamed[0]["stage"], "Disabled");
    let pod = status_json(&r);
    assert_eq!(
        pod["metadata"]["annotations"]["podvisor.io/verdict.app"],
        "Blamed"
    );
    let wide = client(&r, &["status", "-o", "wide"]).stdout;
    assert!(wide.contains("Disabled (Blamed)"), "{wide}");
    stop(&mut p);
    assert!(r.find("app", "InstrumentationCleared").is_empty());
}

#[test]
fn the_add_on_is_cleared_when_the_app_crashes_without_it() {
    let spec = "  containers:
  - {name: app, command: [sh, -c, 'exit 1']}
  - {name: side, command: [sleep, '600']}
";
    let sup = supervision(
        "  stagedInstrumentation:
    containers: [app]
    debugAfterRestarts: 1
    disableAfterRestarts: 2
",
    );
    let r = PodRun::new(&(pod_with("Always", 1, spec) + &sup));
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut p = r
        .cmd(&[&FAST[..], &["--metrics-addr", &addr]].concat())
        .start();
    let cleared = r.wait_event("app", "InstrumentationCleared", 1);
    assert_eq!(
        cleared[0]["message"],
        "app crashes without the add-on too (3 restarts since it was disabled at restart 2): look at the app"
    );
    assert_eq!(cleared[0]["restartCount"], 5);
    let pod = status_json(&r);
    assert_eq!(
        pod["metadata"]["annotations"]["podvisor.io/verdict.app"],
        "Cleared"
    );
    let metrics = scrape(&addr);
    for line in [
        "podvisor_instrumentation_stage{container=\"app\",namespace=\"ns\",pod=\"p\",stage=\"Disabled\"} 1",
        "podvisor_instrumentation_stage{container=\"app\",namespace=\"ns\",pod=\"p\",stage=\"Nominal\"} 0",
        "podvisor_instrumentation_verdict{container=\"app\",namespace=\"ns\",pod=\"p\",verdict=\"Cleared\"} 1",
        "podvisor_instrumentation_verdict{container=\"app\",namespace=\"ns\",pod=\"p\",verdict=\"Blamed\"} 0",
        "podvisor_pod_restarts_total{namespace=\"ns\",pod=\"p\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} not in {metrics}");
    }
    assert!(!metrics.contains("container=\"side\",namespace=\"ns\",pod=\"p\",stage="));
    stop(&mut p);
}

#[test]
fn a_pod_restart_reruns_init_and_wipes_empty_dirs_then_it_gives_up() {
    if !is_root() {
        skip("emptyDir volumes need root (a mount namespace per container)");
        return;
    }
    let dir = TempDir::new();
    let data = dir.file("data");
    let spec = format!(
        "  volumes: [{{name: scratch, emptyDir: {{}}}}]
  initContainers:
  - {{name: init, command: [sh, -c, 'echo init >> {d}/inits'], volumeMounts: [{{name: scratch, mountPath: {d}}}]}}
  containers:
  - name: app
    command: [sh, -c, 'echo \"inits=$(wc -l < {d}/inits) runs=$(cat {d}/runs 2>/dev/null | wc -l)\"; echo run >> {d}/runs; exit 1']
    volumeMounts: [{{name: scratch, mountPath: {d}}}]
",
        d = data.display()
    );
    let sup =
        supervision("  podRestart: {afterContainerRestarts: 2, within: 1m, maxPodRestarts: 2}\n");
    let r = PodRun::new(&(pod_with("Always", 1, &spec) + &sup));
    let out = r.cmd(&FAST).output();
    assert_eq!(out.code(), 1, "a pod that gave up is Failed: {out:?}");
    // Three rounds of init + 3 app starts; each round starts from an empty volume.
    let app = first_lines(&r, "app", 9);
    assert_eq!(
        app,
        [
            "inits=1 runs=0",
            "inits=1 runs=1",
            "inits=1 runs=2",
            "inits=1 runs=0",
            "inits=1 runs=1",
            "inits=1 runs=2",
            "inits=1 runs=0",
            "inits=1 runs=1",
            "inits=1 runs=2",
        ]
    );
    let restarting = r.find("pod", "PodRestarting");
    assert_eq!(restarting.len(), 2);
    assert_eq!(
        restarting[0]["message"],
        "Container app was restarted 2 times within 1m0s: restarting the whole pod (pod restart 1 of 2): every container stops, emptyDir volumes are wiped, init containers run again"
    );
    let gave_up = r.find("pod", "GaveUp");
    assert_eq!(gave_up.len(), 1);
    assert_eq!(gave_up[0]["type"], "Warning");
    // restartCounts only grow: app restarted 2 times per round plus once per pod restart.
    let last = r.find("app", "Started");
    assert_eq!(last.len(), 9);
    assert_eq!(last[8]["restartCount"], 8);
    assert_eq!(r.find("init", "Started")[2]["restartCount"], 2);
    // Nothing of the run is left, and the emptyDir's mount point is gone again.
    assert!(!data.exists());
}

/// Takes the immutable flag off a file a test's container set, so that its directory can go.
struct Mutable(std::path::PathBuf);

impl Drop for Mutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_pod_restart_goes_on_when_an_empty_dir_cannot_be_emptied() {
    if !is_root() {
        skip("emptyDir volumes need root (a mount namespace per container)");
        return;
    }
    let dir = TempDir::new();
    let data = dir.file("data");
    // The init container makes a file no one can remove (root included) in the volume.
    let spec = format!(
        "  volumes: [{{name: scratch, emptyDir: {{}}}}]
  initContainers:
  - name: init
    command: [sh, -c, 'echo init >> {d}/inits; [ -e {d}/pinned ] || {{ touch {d}/pinned && chattr +i {d}/pinned; }}']
    volumeMounts: [{{name: scratch, mountPath: {d}}}]
    securityContext: {{capabilities: {{add: [LINUX_IMMUTABLE]}}}}
  containers:
  - name: app
    command: [sh, -c, 'echo \"inits=$(wc -l < {d}/inits) pinned=$(ls {d}/pinned)\"; exit 1']
    volumeMounts: [{{name: scratch, mountPath: {d}}}]
",
        d = data.display()
    );
    let sup =
        supervision("  podRestart: {afterContainerRestarts: 1, within: 1m, maxPodRestarts: 1}\n");
    let r = PodRun::new(&(pod_with("Always", 1, &spec) + &sup));
    let _mutable = Mutable(r.dir.file("state/volumes/scratch/pinned"));
    let out = r.cmd(&FAST).output();
    assert_eq!(
        out.code(),
        1,
        "the pod gave up as before, not the run: {out:?}"
    );
    assert!(!out.stderr.contains("error:"), "{out:?}");
    // The pinned file stayed through the pod restart; the rest of the volume went.
    let seen = format!("inits=1 pinned={}/pinned", data.display());
    assert_eq!(first_lines(&r, "app", 4), vec![seen; 4]);
    let failed = r.find("pod", "VolumeWipeFailed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["type"], "Warning");
    assert_eq!(
        failed[0]["message"],
        "emptyDir volume scratch cannot be emptied for the pod restart: cannot remove pinned: Operation not permitted (os error 1); what cannot be removed stays in it"
    );
    assert_eq!(r.find("pod", "PodRestarting").len(), 1);
    assert_eq!(r.find("pod", "GaveUp").len(), 1);
}

#[test]
fn a_debug_exit_whose_log_cannot_be_read_says_so_and_the_pod_goes_on() {
    // Its first Debug instance (the second) puts a directory where its own log file was:
    // reading the log's tail fails. It writes nothing, so that its log is never made again.
    let r = PodRun::new("");
    let log = r.dir.file("state/logs/app/2.log");
    let spec = format!(
        "  containers:
  - name: app
    command: [sh, -c, '[ $PODVISOR_INSTR_STAGE = Debug ] && rm {l} && mkdir {l}; exit 3']
",
        l = log.display()
    );
    let sup = supervision("  stagedInstrumentation: {containers: [app], debugAfterRestarts: 1}\n");
    std::fs::write(r.dir.file("pod.yaml"), pod_with("Always", 1, &spec) + &sup).unwrap();
    let mut p = r.cmd(&FAST).start();
    // The pod goes on: the container is started again after that exit.
    r.wait_event("app", "Started", 3);
    assert!(log.is_dir());
    let tails = r.find("app", "DebugLogTail");
    assert_eq!(
        tails[0]["message"],
        "Cannot read the log of container app: Is a directory (os error 21)"
    );
    assert_eq!(tails[0]["type"], "Warning");
    assert_eq!(tails[0]["restartCount"], 1);
    assert_eq!(r.find("app", "DebugExit")[0]["exitCode"], 3);
    stop(&mut p);
}
