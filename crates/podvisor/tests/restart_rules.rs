//! Container restart rules (KEP-5307) and `RestartAllContainers` (KEP-5532) through the
//! binary, with fixtures in the shape of the Kubernetes e2e tests for them: exit code 88
//! restarts every container in place, rules on init containers and sidecars, backoff between
//! repeated restarts of everything, `Never` with an init container failing after the restart,
//! podvisor killed during the teardown, the validation errors, and `explain`.

use std::path::Path;

use serde_json::Value;

use crate::harness::*;
use crate::probes::{event_ms, free_port, pod_with, stop};

const FAST: [&str; 4] = ["--backoff-initial", "10ms", "--backoff-max", "40ms"];

fn status_json(r: &PodRun) -> Option<Value> {
    let out = client(r, &["status", "-o", "json"]);
    (out.code() == 0).then(|| serde_json::from_str(&out.stdout).unwrap())
}

/// The `AllContainersRestarting` condition of a status.
fn restarting_condition(status: &Value) -> Option<Value> {
    status["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "AllContainersRestarting")
        .cloned()
}

/// Every container's restartCount, init containers first.
fn restart_counts(status: &Value) -> Vec<(String, u64)> {
    let s = &status["status"];
    s["initContainerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(s["containerStatuses"].as_array().into_iter().flatten())
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["restartCount"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The containers' starts, in order.
fn started(r: &PodRun) -> Vec<String> {
    r.events()
        .iter()
        .filter(|e| e["reason"] == "Started")
        .map(|e| e["object"].as_str().unwrap().to_string())
        .collect()
}

/// The exit codes of `object`'s instances, in order.
fn exit_codes(r: &PodRun, object: &str) -> Vec<i64> {
    r.events()
        .iter()
        .filter(|e| e["object"] == object && e["exitCode"].is_i64())
        .filter_map(|e| e["exitCode"].as_i64())
        .collect()
}

/// The first stdout line of instance `n` of `container` (waited for: a started shell may
/// not have written it yet).
fn first_line(r: &PodRun, container: &str, n: u32) -> String {
    let mut log = String::new();
    wait_until(&format!("{container}#{n} writes a line"), || {
        log = std::fs::read_to_string(
            r.dir
                .file("state")
                .join("logs")
                .join(container)
                .join(format!("{n}.log")),
        )
        .unwrap_or_default();
        log.contains(" stdout F ")
    });
    log.split(" stdout F ")
        .nth(1)
        .unwrap_or_else(|| panic!("{container}#{n} wrote nothing: {log:?}"))
        .lines()
        .next()
        .unwrap()
        .to_string()
}

/// The e2e fixture: an init container, a sidecar whose first instance ignores SIGTERM (so the
/// teardown lasts the 2 s floor before SIGKILL and can be watched), and a main container that
/// exits 88 on its first run. Both long-running containers have a preStop hook that must not
/// run. `d`: the emptyDir's mount path; `m`: a host file the sidecar marks its first run in,
/// once it ignores SIGTERM; the main container's first run waits for it before it exits (its
/// start follows the sidecar's by a millisecond or two, and nothing else gives the sidecar the
/// time to get there first).
fn restart_all_pod(d: &Path, m: &Path) -> String {
    let spec = format!(
        "  volumes: [{{name: scratch, emptyDir: {{}}}}]
  initContainers:
  - {{name: setup, command: [sh, -c, 'echo setup >> {d}/inits'], volumeMounts: [{{name: scratch, mountPath: {d}}}]}}
  - name: side
    restartPolicy: Always
    command: [sh, -c, 'if [ ! -e {m} ]; then trap \"\" TERM; touch {m}; else trap \"exit 143\" TERM; fi; while :; do sleep 0.05; done']
    lifecycle: {{preStop: {{exec: {{command: [sh, -c, 'echo side >> {d}/prestops']}}}}}}
    volumeMounts: [{{name: scratch, mountPath: {d}}}]
  containers:
  - name: app
    restartPolicy: Never
    restartPolicyRules:
    - {{action: RestartAllContainers, exitCodes: {{operator: In, values: [88]}}}}
    command: [sh, -c, 'echo \"inits=$(wc -l < {d}/inits) kept=$(cat {d}/kept 2>/dev/null) prestops=$(cat {d}/prestops 2>/dev/null)\"; if [ -e {d}/kept ]; then trap \"exit 143\" TERM; sleep 600 & wait; fi; until [ -e {m} ]; do sleep 0.01; done; echo yes > {d}/kept; exit 88']
    lifecycle: {{preStop: {{exec: {{command: [sh, -c, 'echo app >> {d}/prestops']}}}}}}
    volumeMounts: [{{name: scratch, mountPath: {d}}}]
",
        d = d.display(),
        m = m.display()
    );
    pod_with("Never", 30, &spec)
}

#[test]
fn exit_88_restarts_every_container_in_place() {
    if !is_root() {
        skip("emptyDir volumes need root (a mount namespace per container)");
        return;
    }
    let dir = TempDir::new();
    let data = dir.file("data");
    let r = PodRun::new(&restart_all_pod(&data, &dir.file("side-ran")));
    let mut p = r.cmd(&[]).start();
    // During the teardown (the sidecar holds it 2 s): True, with the kubelet's reason.
    r.wait_event("pod", "RestartingAllContainers", 1);
    let mut during = None;
    wait_until("the condition AllContainersRestarting True", || {
        during = status_json(&r).and_then(|s| restarting_condition(&s));
        during.as_ref().is_some_and(|c| c["status"] == "True") || r.find("app", "Started").len() > 1
    });
    let during = during.unwrap();
    assert_eq!(during["status"], "True", "the teardown went unseen");
    assert_eq!(during["reason"], "RestartAllContainersStarted");
    assert_eq!(
        during["message"],
        "container exited with restart policy rule"
    );
    // After: everything ran again, in order, and the condition is False.
    r.wait_event("app", "Started", 2);
    let after = status_json(&r).expect("status");
    assert_eq!(
        restarting_condition(&after).map(|c| c["status"].clone()),
        Some("False".into())
    );
    assert_eq!(
        restart_counts(&after),
        [("setup".into(), 1), ("side".into(), 1), ("app".into(), 1)]
    );
    let app = &after["status"]["containerStatuses"][0];
    assert_eq!(app["lastState"]["terminated"]["exitCode"], 88);
    assert_eq!(
        after["metadata"]["annotations"]["podvisor.io/all-containers-restarts"],
        "1"
    );
    // The init container ran twice on the same emptyDir, whose content stayed; no preStop ran.
    assert_eq!(first_line(&r, "app", 1), "inits=1 kept= prestops=");
    assert_eq!(first_line(&r, "app", 2), "inits=2 kept=yes prestops=");
    assert_eq!(
        started(&r),
        ["setup", "side", "app", "setup", "side", "app"]
    );
    // The sidecar was killed at once, not after the pod's 30 s grace: SIGKILL at the 2 s
    // floor of every kill.
    let killing = r.find("side", "Killing");
    assert_eq!(
        killing[0]["message"],
        "Stopping container side to restart all containers"
    );
    let restarted = r.find("setup", "Started")[1].clone();
    let took = event_ms(&restarted) - event_ms(&killing[0]);
    assert!((1_500..10_000).contains(&took), "teardown took {took} ms");
    let describe = client(&r, &["describe"]);
    assert!(
        describe
            .stdout
            .contains("All Restarts: 1 (RestartAllContainers)"),
        "{describe:?}"
    );
    assert!(
        describe.stdout.contains("AllContainersRestarting"),
        "{describe:?}"
    );
    stop(&mut p);
}

#[test]
fn repeated_restarts_of_everything_back_off() {
    let spec = "  containers:
  - name: app
    restartPolicy: Never
    restartPolicyRules:
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [88]}}
    command: [sh, -c, 'exit 88']
  - {name: other, command: [sleep, '600']}
";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut p = r
        .cmd(&[
            "--backoff-initial",
            "600ms",
            "--backoff-max",
            "5s",
            "--metrics-addr",
            &addr,
        ])
        .start();
    let all = r.wait_event("pod", "RestartingAllContainers", 3);
    let mut metric = String::new();
    wait_until("the metric counts 3 restarts of everything", || {
        metric = scrape(&addr)
            .lines()
            .find(|l| l.starts_with("podvisor_all_containers_restarts_total{"))
            .unwrap_or_default()
            .to_string();
        metric.ends_with(" 3") || metric.ends_with(" 4")
    });
    assert!(
        metric.starts_with("podvisor_all_containers_restarts_total{namespace=\"ns\",pod=\"p\"} "),
        "{metric}"
    );
    stop(&mut p);
    // The first restart of everything is at once; the next ones wait out the trigger's
    // CrashLoopBackOff: 600 ms, then 1.2 s.
    let gaps: Vec<i64> = all
        .windows(2)
        .map(|w| event_ms(&w[1]) - event_ms(&w[0]))
        .collect();
    assert!(gaps[0] >= 600, "{gaps:?}");
    assert!(gaps[1] >= 1_200, "{gaps:?}");
    assert!(r.find("app", "BackOff").len() >= 2);
    // The other container was restarted with it each time.
    assert!(r.find("other", "Started").len() >= 3);
}

#[test]
fn under_never_an_init_container_failing_after_the_restart_fails_the_pod() {
    let dir = TempDir::new();
    let marker = dir.file("ran-once");
    let spec = format!(
        "  initContainers:
  - {{name: setup, command: [sh, -c, 'if [ -e {m} ]; then exit 1; fi; touch {m}']}}
  containers:
  - name: app
    restartPolicy: Never
    restartPolicyRules:
    - {{action: RestartAllContainers, exitCodes: {{operator: In, values: [88]}}}}
    command: [sh, -c, 'exit 88']
",
        m = marker.display()
    );
    let r = PodRun::new(&pod_with("Never", 1, &spec));
    let out = r.cmd(&FAST).output();
    assert_eq!(out.code(), 1, "a Failed pod: {out:?}");
    assert_eq!(r.find("setup", "Started").len(), 2);
    assert_eq!(r.find("app", "Started").len(), 1);
    assert_eq!(r.find("pod", "RestartingAllContainers").len(), 1);
}

#[test]
fn rules_on_init_containers_sidecars_and_not_in() {
    let dir = TempDir::new();
    let m = |name: &str| dir.file(name).display().to_string();
    // The init container: restartPolicy Never, restarted on 42 only (42 on its first run,
    // then 0; it counts its runs in a file). The sidecar: restarts everything on 3 (once).
    // The app: Never, restarted on anything but 0: once fetch has run 3 times it exits 1, then
    // 0; the pod Succeeds.
    let spec = format!(
        "  initContainers:
  - name: fetch
    restartPolicy: Never
    restartPolicyRules:
    - {{action: Restart, exitCodes: {{operator: In, values: [42]}}}}
    command: [sh, -c, 'echo run >> {f}; if [ $(wc -l < {f}) = 1 ]; then exit 42; fi']
  - name: side
    restartPolicy: Always
    restartPolicyRules:
    - {{action: RestartAllContainers, exitCodes: {{operator: In, values: [3]}}}}
    command: [sh, -c, 'if [ ! -e {s} ]; then touch {s}; sleep 0.3; exit 3; fi; trap \"exit 143\" TERM; sleep 600 & wait']
  containers:
  - name: app
    restartPolicy: Never
    restartPolicyRules:
    - {{action: Restart, exitCodes: {{operator: NotIn, values: [0]}}}}
    command: [sh, -c, 'if [ -e {a} ]; then exit 0; fi; if [ $(wc -l < {f}) -ge 3 ]; then touch {a}; exit 1; fi; trap \"exit 143\" TERM; sleep 600 & wait']
",
        f = m("fetches"),
        s = m("side"),
        a = m("app")
    );
    let r = PodRun::new(&pod_with("Never", 1, &spec));
    let out = r.cmd(&FAST).output();
    assert_eq!(out.code(), 0, "the pod Succeeds: {out:?}");
    // fetch: 42 then 0; then the sidecar's 3 restarts everything, fetch runs once more.
    let fetch = exit_codes(&r, "fetch");
    assert_eq!(fetch, [42, 0, 0]);
    assert_eq!(r.find("pod", "RestartingAllContainers").len(), 1);
    let app = exit_codes(&r, "app");
    // app#1 was killed by the teardown (SIGTERM: 143), app#2 exited 1 (restarted by NotIn),
    // app#3 exited 0.
    assert_eq!(app, [143, 1, 0]);
}

#[test]
fn a_run_killed_during_the_teardown_finishes_the_restart() {
    if !is_root() {
        skip("emptyDir volumes need root (a mount namespace per container)");
        return;
    }
    let dir = TempDir::new();
    let data = dir.file("data");
    let r = PodRun::new(&restart_all_pod(&data, &dir.file("side-ran")));
    let mut first = r.cmd(&[]).start();
    r.wait_event("pod", "RestartingAllContainers", 1);
    // podvisor dies during the teardown (the sidecar holds it for 2 s).
    first.signal("KILL");
    first.wait();
    let record = saved_record(&r.dir.file("state").join("podvisor.state"));
    assert_eq!(record["restartingAll"], true, "{record}");
    assert!(r.find("setup", "Started").len() == 1);

    let mut second = r.cmd(&[]).start();
    r.wait_event("pod", "Resumed", 1);
    r.wait_event("app", "Started", 2);
    let s = status_json(&r).expect("status");
    assert_eq!(
        restarting_condition(&s).map(|c| c["status"].clone()),
        Some("False".into())
    );
    assert_eq!(
        restart_counts(&s),
        [("setup".into(), 1), ("side".into(), 1), ("app".into(), 1)]
    );
    // The init container ran again before the app, as the restart asked; the emptyDir (kept
    // in the state dir) kept its content, and no preStop ran.
    assert_eq!(first_line(&r, "app", 2), "inits=2 kept=yes prestops=");
    assert_eq!(
        started(&r),
        ["setup", "side", "app", "setup", "side", "app"]
    );
    stop(&mut second);
}

#[test]
fn validation_reports_every_rule_error_with_its_line() {
    let values: Vec<String> = (0..256).map(|n| n.to_string()).collect();
    let many_rules = "    - {action: Restart, exitCodes: {operator: In, values: [1]}}\n".repeat(21);
    let text = format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: p, annotations: {{podvisor.io/root-from: host}}}}
spec:
  initContainers:
  - name: init
    command: [x]
    restartPolicy: Sometimes
  containers:
  - name: a
    command: [x]
    restartPolicyRules:
    - {{action: Restart, exitCodes: {{operator: In, values: [1]}}}}
  - name: b
    command: [x]
    restartPolicy: Never
    restartPolicyRules:
    - {{action: Recreate, exitCodes: {{operator: Equals, values: [1]}}}}
    - {{action: Restart}}
    - {{action: Restart, exitCodes: {{operator: In, values: [{values}]}}}}
  - name: c
    command: [x]
    restartPolicy: Never
    restartPolicyRules:
{many_rules}  ephemeralContainers:
  - name: debug
    command: [x]
    restartPolicy: Never
    restartPolicyRules:
    - {{action: Restart, exitCodes: {{operator: In, values: [1]}}}}
",
        values = values.join(", ")
    );
    let dir = TempDir::new();
    let file = dir.file("rules.yaml");
    std::fs::write(&file, text).unwrap();
    let out = Run::new(podvisor()).arg("validate").arg(&file).output();
    assert_eq!(out.code(), 2, "{out:?}");
    let got: Vec<&str> = out
        .stderr
        .lines()
        .map(|l| &l[l.find("rules.yaml:").unwrap()..])
        .collect();
    assert_eq!(
        got,
        [
            "rules.yaml:49:5: spec.ephemeralContainers[0].restartPolicy: Forbidden: cannot be set for an Ephemeral Container",
            "rules.yaml:50:5: spec.ephemeralContainers[0].restartPolicyRules: Forbidden: cannot be set for an Ephemeral Container",
            "rules.yaml:47:5: spec.ephemeralContainers[0]: Forbidden: ephemeral containers are added to a running pod (kubectl debug); podvisor does not run them",
            "rules.yaml:8:5: spec.initContainers[0].restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            "rules.yaml:10:5: spec.containers[0].restartPolicy: Required value: must specify restartPolicy when restart rules are used",
            "rules.yaml:18:8: spec.containers[1].restartPolicyRules[0].action: Unsupported value: \"Recreate\": supported values: \"Restart\", \"RestartAllContainers\"",
            "rules.yaml:18:38: spec.containers[1].restartPolicyRules[0].exitCodes.operator: Unsupported value: \"Equals\": supported values: \"In\", \"NotIn\"",
            "rules.yaml:19:7: spec.containers[1].restartPolicyRules[1].exitCodes: Required value: must be specified",
            "rules.yaml:20:51: spec.containers[1].restartPolicyRules[2].exitCodes.values: Too many: 256: must have at most 255 items",
            "rules.yaml:24:5: spec.containers[2].restartPolicyRules: Too many: 21: must have at most 20 items",
        ],
        "{out:?}"
    );
}

#[test]
fn explain_shows_each_exit_and_warns_about_loops() {
    let dir = TempDir::new();
    let file = dir.file("p.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {podvisor.io/root-from: host}}
spec:
  restartPolicy: Never
  initContainers:
  - name: fetch
    command: [x]
    restartPolicy: OnFailure
    restartPolicyRules:
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [7]}}
  containers:
  - name: app
    command: [x]
    restartPolicy: Never
    restartPolicyRules:
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [88]}}
    - {action: Restart, exitCodes: {operator: In, values: [88]}}
",
    )
    .unwrap();
    let out = Run::new(podvisor()).arg("explain").arg(&file).output();
    assert_eq!(out.code(), 0, "{out:?}");
    for line in [
        "  fetch (init):",
        "    0               completes: the next container starts (init container succeeded)",
        "    7               restart all containers (in place, volumes kept) (restartPolicyRules[0])",
        "    any other code  restart this container (its restartPolicy: OnFailure)",
        "  app (main):",
        "    0               nothing: it stays terminated (its restartPolicy: Never)",
        "    88              restart all containers (in place, volumes kept) (restartPolicyRules[0])",
        "    any other code  nothing: it stays terminated (its restartPolicy: Never)",
        "  warning: spec.initContainers[0].restartPolicyRules[0]: restartPolicyRules[0] on init container fetch restarts every container",
        "  warning: spec.containers[0].restartPolicyRules[1]: restartPolicyRules[1] never applies",
    ] {
        assert!(
            out.stdout.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in\n{}",
            out.stdout
        );
    }
    let out = Run::new(podvisor())
        .args(["explain", "-o", "json"])
        .arg(&file)
        .output();
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["exits"][1]["codes"][1]["exitCode"], 88);
    assert_eq!(v["exitWarnings"].as_array().unwrap().len(), 2);
}

#[test]
fn the_queue_worker_example_takes_three_items_and_succeeds() {
    if !is_root() {
        skip("emptyDir volumes need root (a mount namespace per container)");
        return;
    }
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pods/restart-all.yaml");
    let r = PodRun::new(&std::fs::read_to_string(example).unwrap());
    let out = r.cmd(&FAST).output();
    assert_eq!(out.code(), 0, "the pod Succeeds: {out:?}");
    // The emptyDir kept the count across both restarts of everything.
    let worker: Vec<String> = (1..=3).map(|n| first_line(&r, "worker", n)).collect();
    assert_eq!(
        worker,
        [
            "processing item 1",
            "processing item 2",
            "processing item 3"
        ]
    );
    assert_eq!(r.find("pod", "RestartingAllContainers").len(), 2);
    assert_eq!(r.find("take-item", "Started").len(), 3);
}

#[test]
fn escalation_counts_the_restarts_of_everything_a_container_asks_for() {
    // app asks for a restart of everything on every run. podRestart counts each as a restart
    // of app: after 2 within the window the next exit restarts the whole pod (wiping
    // emptyDirs) instead, and past maxPodRestarts podvisor gives up. Stages follow app's
    // restart count, which each restart of everything raises.
    let spec = "  initContainers:
  - {name: setup, command: ['true']}
  containers:
  - name: app
    restartPolicy: Never
    restartPolicyRules:
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [88]}}
    command: [sh, -c, 'echo $PODVISOR_INSTR_STAGE; exit 88']
---
apiVersion: podvisor.io/v1alpha1
kind: Supervision
metadata: {name: default}
spec:
  stagedInstrumentation: {containers: [app], debugAfterRestarts: 1, disableAfterRestarts: 2}
  podRestart: {afterContainerRestarts: 2, within: 1m, maxPodRestarts: 1}
";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let out = r.cmd(&FAST).output();
    assert_eq!(out.code(), 1, "a pod that gave up is Failed: {out:?}");
    let pod_events: Vec<String> = r
        .events()
        .iter()
        .filter(|e| e["object"] == "pod")
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        pod_events,
        [
            "RestartingAllContainers",
            "RestartingAllContainers",
            "PodRestarting",
            "RestartingAllContainers",
            "RestartingAllContainers",
            "GaveUp"
        ]
    );
    let stages: Vec<String> = (1..=4).map(|n| first_line(&r, "app", n)).collect();
    assert_eq!(stages, ["Nominal", "Debug", "Disabled", "Disabled"]);
    assert_eq!(r.find("setup", "Started").len(), 6);
}
