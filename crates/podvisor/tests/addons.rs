//! The add-on examples of examples/addons and examples/cluster, run as docs/escalation.md says (from the
//! repository's root): a faulty LD_PRELOAD agent and a faulty Node.js agent are staged off.

use std::path::PathBuf;

use crate::harness::*;
use crate::probes::stop;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example's manifest, with the backoff and verdict shortened for a test.
fn example_run(path: &str, edit: &[(&str, &str)]) -> PodRun {
    let mut text = std::fs::read_to_string(root().join(path)).unwrap();
    for (from, to) in edit {
        assert!(text.contains(from), "{path} has no {from:?}");
        text = text.replace(from, to);
    }
    PodRun::new(&text)
}

fn message(e: &serde_json::Value) -> &str {
    e["message"].as_str().unwrap()
}

#[test]
fn a_crashing_ld_preload_agent_is_staged_off_and_blamed() {
    let r = example_run(
        "examples/addons/pod.yaml",
        &[("verdictAfter: 5s", "verdictAfter: 1s")],
    );
    let mut p = r
        .cmd(&["--backoff-initial", "10ms", "--backoff-max", "20ms"])
        .current_dir(root())
        .start();
    let blamed = r.wait_event("app", "InstrumentationBlamed", 1);
    assert_eq!(
        message(&blamed[0]),
        "app ran 1s cleanly after the add-on was disabled at restart 2: the add-on is the likely cause"
    );
    // Nominal and Debug starts died of the agent (SIGSEGV: 139); Debug left its log.
    let exits: Vec<i64> = r
        .find("app", "Error")
        .iter()
        .take(2)
        .map(|e| e["exitCode"].as_i64().unwrap())
        .collect();
    assert_eq!(exits, [139, 139]);
    let tail = r.find("app", "DebugLogTail");
    assert_eq!(tail.len(), 1);
    assert!(
        message(&tail[0]).contains("agent: hooking malloc failed"),
        "{tail:?}"
    );
    assert!(r.log("app", 3).contains("app: serving (stage Disabled)"));
    stop(&mut p);
}

#[test]
fn a_crashing_node_agent_is_staged_off() {
    if !have("node", "examples/addons/node needs it") {
        return;
    }
    let r = example_run("examples/addons/node/pod.yaml", &[]);
    let mut p = r
        .cmd(&["--backoff-initial", "10ms", "--backoff-max", "20ms"])
        .current_dir(root())
        .start();
    r.wait_event("app", "Started", 3);
    wait_until("the app listening", || {
        std::panic::catch_unwind(|| r.log("app", 3)).is_ok_and(|l| l.contains("app: listening on"))
    });
    assert!(r.log("app", 3).contains("(stage Disabled)"));
    for (instance, stage) in [(1, "Nominal"), (2, "Debug")] {
        let log = r.log("app", instance);
        assert!(
            log.contains("agent: cannot instrument module 'http'"),
            "{stage}: {log}"
        );
        assert_eq!(
            log.contains("agent: loaded into pid"),
            stage == "Debug",
            "{log}"
        );
    }
    stop(&mut p);
}

#[test]
fn the_cluster_example_is_valid_and_its_supervision_reads_in_init() {
    let pod = root().join("examples/cluster/pod.yaml");
    let out = Run::new(podvisor()).arg("validate").arg(&pod).output();
    assert_eq!(out.code(), 0, "{out:?}");
    // The ConfigMap's supervision.yaml, as the container sees it at /etc/podvisor.
    let text = std::fs::read_to_string(&pod).unwrap();
    let doc: String = text
        .lines()
        .skip_while(|l| !l.contains("supervision.yaml: |"))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    let dir = TempDir::new();
    std::fs::write(dir.file("supervision.yaml"), doc).unwrap();
    std::fs::create_dir_all(dir.file("tmp")).unwrap();
    let out = Run::new(podvisor())
        .args(["init", "--supervision"])
        .arg(dir.file("supervision.yaml"))
        .arg("--state-dir")
        .arg(dir.file("state"))
        .arg("--lock-dir")
        .arg(dir.file("tmp"))
        .args([
            "--container",
            "app",
            "--",
            "sh",
            "-c",
            "echo $PODVISOR_INSTR_STAGE $JAVA_TOOL_OPTIONS",
        ])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "Nominal -javaagent:/opt/agent/agent.jar");
}
