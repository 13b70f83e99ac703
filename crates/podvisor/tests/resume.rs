//! State that survives podvisor's own death: `run` killed with SIGKILL mid-crash-loop and
//! started again on the same state dir goes on from where it was; a state file that cannot be
//! read is refused, and `--reset-state` sets it aside.

use std::path::Path;

use serde_json::Value;

use crate::harness::*;
use crate::probes::{pod_with, stop};

const FAST: [&str; 4] = ["--backoff-initial", "10ms", "--backoff-max", "40ms"];

/// A crash-looping staged app, and a sidecar-like container that leaves a process in its
/// group (`sleep` in the background) which outlives its main process: in the host's PID
/// namespace (`hostPID`), where the kernel does not end it with its container's PID 1.
fn crash_pod(marker: &Path) -> String {
    let spec = format!(
        "  hostPID: true
  containers:
  - {{name: app, command: [sh, -c, 'echo $PODVISOR_INSTR_STAGE; exit 1']}}
  - name: keeper
    command: [sh, -c, 'sleep 600 & echo $! > {m}; exec sleep 600']
---
apiVersion: podvisor.io/v1alpha1
kind: Supervision
metadata: {{name: default}}
spec:
  stagedInstrumentation: {{containers: [app], debugAfterRestarts: 2, disableAfterRestarts: 4}}
",
        m = marker.display()
    );
    pod_with("Always", 1, &spec)
}

/// The start time (clock ticks since boot) of `pid`, if it runs.
fn start_of(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    (f[0] != "Z").then(|| f[19].parse().ok())?
}

/// Kills, when dropped (also when the test fails), the processes whose pids `marker` holds
/// over time: the containers' background processes are not in the harness's tagged tree once
/// their run is gone.
struct KillMarked {
    marker: std::path::PathBuf,
    seen: Vec<i32>,
}

impl KillMarked {
    fn note(&mut self) -> Option<i32> {
        let pid = std::fs::read_to_string(&self.marker)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        if !self.seen.contains(&pid) {
            self.seen.push(pid);
        }
        Some(pid)
    }
}

impl Drop for KillMarked {
    fn drop(&mut self) {
        self.note();
        for &pid in &self.seen {
            send(pid, "KILL");
        }
    }
}

fn last_started(r: &PodRun, container: &str) -> Value {
    r.find(container, "Started").last().cloned().unwrap()
}

#[test]
fn a_run_killed_mid_crash_loop_goes_on_where_it_was() {
    let dir = TempDir::new();
    let marker = dir.file("orphan.pid");
    let mut marked = KillMarked {
        marker: marker.clone(),
        seen: Vec::new(),
    };
    let r = PodRun::new(&crash_pod(&marker));
    let mut first = r.cmd(&FAST).start();
    r.wait_event("app", "Started", 6);
    wait_until("the orphan's pid", || marker.exists());
    let orphan = marked.note().unwrap();
    let orphan_start = start_of(orphan).expect("the orphan runs");
    // podvisor dies at once: no graceful anything.
    first.signal("KILL");
    first.wait();
    let before = last_started(&r, "app");
    let count = before["restartCount"].as_u64().unwrap();
    assert!(count >= 5);
    assert_eq!(before["stage"], "Disabled");
    // The kernel killed the main processes; the orphan in keeper's group lives on.
    assert_eq!(start_of(orphan), Some(orphan_start));

    let mut second = r.cmd(&FAST).start();
    let resumed = r.wait_event("pod", "Resumed", 1);
    assert!(
        resumed[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Took up the state saved "),
        "{resumed:?}"
    );
    // The orphan of the first run is gone (same pid, same start time: never by name).
    assert_ne!(
        start_of(orphan),
        Some(orphan_start),
        "the old run's process was left"
    );
    let killing = r.find("keeper", "Killing");
    assert!(
        killing.iter().any(|e| e["message"]
            .as_str()
            .unwrap()
            .contains("left running by the previous run")),
        "{killing:?}"
    );
    // Counts and stages go on: no restart count went back, no stage was reset.
    wait_until("app restarted by the second run", || {
        r.find("app", "Started").len() > r.find("pod", "Resumed").len() + 6
    });
    let starts = r.find("app", "Started");
    let counts: Vec<u64> = starts
        .iter()
        .map(|e| e["restartCount"].as_u64().unwrap())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    let after_resume: Vec<&Value> = starts
        .iter()
        .filter(|e| e["restartCount"].as_u64().unwrap() > count)
        .collect();
    assert!(
        after_resume.iter().all(|e| e["stage"] == "Disabled"),
        "{after_resume:?}"
    );
    // keeper was running when the first run died: its next instance is a restart, its last
    // state says so.
    let keeper = last_started(&r, "keeper");
    assert_eq!(keeper["restartCount"], 1);
    let pod: Value = serde_json::from_str(&client(&r, &["status", "-o", "json"]).stdout).unwrap();
    let k = pod["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "keeper")
        .unwrap();
    assert_eq!(
        k["lastState"]["terminated"]["reason"],
        "ContainerStatusUnknown"
    );
    assert_eq!(k["lastState"]["terminated"]["exitCode"], 137);
    assert_eq!(
        pod["metadata"]["annotations"]["podvisor.io/stage.app"],
        "Disabled"
    );
    // `logs --previous` reaches the first run's instances (instance numbers went on).
    assert_eq!(client(&r, &["logs", "app", "--previous"]).code(), 0);
    stop(&mut second);
    first.assert_no_leftovers();
}

#[test]
fn a_stopped_run_resumes_and_an_ended_pod_starts_anew() {
    let spec = "  containers:\n  - {name: app, command: [sh, -c, 'exit 1']}\n  - {name: side, command: [sleep, '600']}\n";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let mut p = r.cmd(&FAST).start();
    r.wait_event("app", "Started", 4);
    stop(&mut p);
    let mut p = r.cmd(&FAST).start();
    r.wait_event("pod", "Resumed", 1);
    r.wait_event("side", "Started", 2);
    // side was stopped with the run: its next start is a restart.
    assert_eq!(last_started(&r, "side")["restartCount"], 1);
    stop(&mut p);

    // A pod that ends by itself is over: the next run on its state dir is a new pod.
    let r = PodRun::new(&pod_with(
        "Never",
        1,
        "  containers:\n  - {name: app, command: [sh, -c, 'echo ran; exit 0']}\n",
    ));
    assert_eq!(r.cmd(&[]).output().code(), 0);
    assert_eq!(r.cmd(&[]).output().code(), 0);
    assert!(r.find("pod", "Resumed").is_empty());
    // Its logs are its own: the last pod's instance 1 wrote to the same file name.
    let logs = client(&r, &["logs", "app"]);
    assert_eq!((logs.code(), logs.stdout.as_str()), (0, "ran"), "{logs:?}");
    let counts: Vec<Value> = r
        .find("app", "Started")
        .iter()
        .map(|e| e["restartCount"].clone())
        .collect();
    assert_eq!(counts, [0, 0]);
}

#[test]
fn last_pods_logs_that_cannot_be_removed_refuse_the_new_pod_naming_what() {
    if !is_root() {
        skip("mounting below the state dir needs root");
        return;
    }
    // Something mounted on a container's log dir: its removal fails, and the run says which.
    let r = PodRun::new(&pod_with(
        "Never",
        1,
        "  containers:\n  - {name: app, command: ['true']}\n",
    ));
    let logs = r.dir.file("state").join("logs").join("app");
    let tmpfs = Tmpfs::mount(&logs, None);
    let mut p = r.cmd(&[]).start();
    let status = p.wait();
    p.drain();
    // The test's own mount goes before the check that the run left none.
    tmpfs.unmount();
    p.assert_no_leftovers();
    let stderr = p.stderr.join("\n");
    assert_eq!(status.code(), Some(2), "{stderr}");
    let said = format!("{}: cannot remove the last pod's logs: ", logs.display());
    assert!(stderr.contains(&said), "{stderr}");
}

/// FNV-1a, 64 bits: the record checksum of formats 1 and 2.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn a_state_dir_of_the_first_release_is_taken_up() {
    // What the first release (record format 1) wrote for a staged app that had crashed 3
    // times and was Debug, in an earlier boot (its processes mean nothing now).
    let spec = "  containers:\n  - {name: app, command: [sh, -c, 'echo $PODVISOR_INSTR_STAGE; exit 1']}\n---\napiVersion: podvisor.io/v1alpha1\nkind: Supervision\nmetadata: {name: default}\nspec:\n  stagedInstrumentation: {containers: [app], debugAfterRestarts: 2, disableAfterRestarts: 5}\n";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let state = r.dir.file("state");
    std::fs::create_dir_all(&state).unwrap();
    let body = "podvisor-state 1 pod\npod ns/p\nuid 0b1c-first\ncreated 1795000000000\n\
                saved 1795000100000\nsaved-by 4242\nboot an-earlier-boot\npod-restarts 0\n\
                container app\nrestarts 3\ninstance 4\nnext policy\nstage Debug\n\
                ever-started yes\nbackoff 40 1795000090000\nwindow 1795000010000\n\
                state terminated\nstate-exit 1 - Error 1795000080000 1795000090000\n\
                last-exit 1 - Error 1795000060000 1795000070000\n";
    let text = format!("{body}checksum {:016x}\n", fnv(body.as_bytes()));
    std::fs::write(state.join("podvisor.state"), text).unwrap();
    let mut p = r.cmd(&FAST).start();
    let resumed = r.wait_event("pod", "Resumed", 1);
    assert!(
        resumed[0]["message"].as_str().unwrap().contains("app 3"),
        "{resumed:?}"
    );
    // The counts and the stage go on from the record; the pod is the same pod.
    let started = r.wait_event("app", "Started", 2);
    assert_eq!(started[0]["restartCount"], 4, "{started:?}");
    assert_eq!(started[0]["stage"], "Debug");
    assert_eq!(started[1]["restartCount"], 5);
    assert_eq!(started[1]["stage"], "Disabled");
    let pod: Value = serde_json::from_str(&client(&r, &["status", "-o", "json"]).stdout).unwrap();
    assert_eq!(pod["metadata"]["uid"], "0b1c-first");
    stop(&mut p);
    // What this podvisor wrote in its place is of its own format.
    assert_eq!(
        saved_record(&state.join("podvisor.state"))["uid"],
        "0b1c-first"
    );
}

/// A pod whose one container exits 1, stopped after three starts or more: the run, its saved state
/// file and what is in it.
fn stopped_after_three_starts() -> (PodRun, std::path::PathBuf, String) {
    let spec = "  containers:\n  - {name: app, command: [sh, -c, 'exit 1']}\n";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let mut p = r.cmd(&FAST).start();
    r.wait_event("app", "Started", 3);
    stop(&mut p);
    let state = r.dir.file("state").join("podvisor.state");
    let text = std::fs::read_to_string(&state).unwrap();
    (r, state, text)
}

#[test]
fn a_state_dir_of_record_format_2_is_taken_up() {
    // What the releases before format 3 wrote: the same JSON under a header of format 2 and
    // a checksum of single bytes.
    let (r, state, text) = stopped_after_three_starts();
    let end = text.rfind("checksum ").unwrap();
    let body = text[..end].replacen("podvisor-state 3 pod", "podvisor-state 2 pod", 1);
    assert_ne!(body, text[..end]);
    let restarts = saved_record(&state)["containers"][0]["restartCount"]
        .as_u64()
        .unwrap();
    let two = format!("{body}checksum {:016x}\n", fnv(body.as_bytes()));
    std::fs::write(&state, two).unwrap();
    // The first run may have started it more than three times before it stopped.
    let before = r.find("app", "Started").len();
    let mut p = r.cmd(&FAST).start();
    r.wait_event("pod", "Resumed", 1);
    // The count goes on from the record.
    let started = r.wait_event("app", "Started", before + 1);
    assert_eq!(started[before]["restartCount"], restarts + 1, "{started:?}");
    stop(&mut p);
    // What this podvisor wrote in its place is of its own format.
    assert!(saved_record(&state)["containers"][0]["restartCount"].as_u64() > Some(restarts));
}

#[test]
fn a_state_file_that_cannot_be_read_is_refused_and_reset_sets_it_aside() {
    let (r, state, text) = stopped_after_three_starts();
    // Truncated (as a torn write would leave it, had it not been atomic).
    std::fs::write(&state, &text[..text.len() / 2]).unwrap();
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "error: {}: the saved state cannot be used: it ends before its checksum line: the file is truncated; to start the pod from zero, run again with --reset-state (the file is moved aside, not deleted), or pass another --state-dir",
            state.display()
        )
    );
    // Nothing was started, nothing was written over.
    assert_eq!(
        std::fs::read_to_string(&state).unwrap(),
        &text[..text.len() / 2]
    );
    // A newer format.
    std::fs::write(
        &state,
        text.replacen("podvisor-state 3", "podvisor-state 9", 1),
    )
    .unwrap();
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr.contains(
            "it was written by a newer podvisor (format 9; this one reads formats 1 to 3)"
        ),
        "{out:?}"
    );
    // --reset-state starts from zero and keeps the refused file.
    let mut p = r.cmd(&[&FAST[..], &["--reset-state"]].concat()).start();
    let reset = r.wait_event("pod", "StateReset", 1);
    assert!(reset[0]["message"]
        .as_str()
        .unwrap()
        .contains("podvisor.state.refused-"));
    let started = r.wait_event("app", "Started", 4);
    assert_eq!(started[3]["restartCount"], 0, "a new count: {started:?}");
    stop(&mut p);
    let aside = std::fs::read_dir(r.dir.file("state"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("podvisor.state.refused-")
        })
        .count();
    assert_eq!(aside, 1);
}

#[test]
fn state_dirs_that_cannot_be_used_are_refused() {
    let spec = "  containers:\n  - {name: app, command: [sleep, '600']}\n";
    // Another pod's state.
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    stop(&mut p);
    std::fs::write(
        r.dir.file("pod.yaml"),
        pod_with("Always", 1, spec).replace("name: p,", "name: q,"),
    )
    .unwrap();
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains(
            "the saved state cannot be used: it holds the state of pod ns/p, not of ns/q"
        ),
        "{out:?}"
    );
    // A state dir that cannot be made.
    let dir = TempDir::new();
    std::fs::write(dir.file("file"), "").unwrap();
    std::fs::write(dir.file("pod.yaml"), pod_with("Always", 1, spec)).unwrap();
    let out = Run::new(podvisor())
        .args(["run", "-q", "--state-dir"])
        .arg(dir.file("file").join("state"))
        .arg(dir.file("pod.yaml"))
        .output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("cannot make the state dir"), "{out:?}");
    // A state dir in use by another run.
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("in use by another podvisor run"),
        "{out:?}"
    );
    stop(&mut p);
}

#[test]
fn a_state_dir_that_cannot_hold_the_first_record_refuses_the_run_and_leaves_nothing() {
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sleep, '600']}\n",
    ));
    // The record is written to `.podvisor.state.tmp` and renamed: a directory there (not
    // empty) makes that write fail after the pod's cgroups and volumes are made, before
    // anything starts. The harness fails the test if the run leaves a cgroup.
    let state = r.dir.file("state");
    std::fs::create_dir_all(state.join(".podvisor.state.tmp/x")).unwrap();
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("podvisor.state") && out.stderr.contains("Is a directory"),
        "{out:?}"
    );
    assert!(
        !r.events().iter().any(|e| e["reason"] == "Started"),
        "{out:?}"
    );
}
