//! Full and broken disks under a running pod: the state dir on a tiny tmpfs filled while
//! containers log and restart, then given room again; the log directory removed; a read-only
//! state dir. The pod runs on, each failure is an event, nothing already written is corrupted,
//! and the run recovers when it can write again. (A filesystem cannot be made read-only while
//! files are open on it for writing: that case is a refusal at the start.)

use crate::harness::*;
use crate::probes::stop;

/// The talker asks for CPU: a BestEffort container's share (cpu.shares 2) starves on a
/// loaded machine, and the disk would not fill within the tests' patience.
const TALKER: &str = "  - name: talk
    command: [sh, -c, 'while true; do head -c 32000 /dev/zero | tr \"\\0\" x; echo; sleep 0.01; done']
    resources: {requests: {cpu: 500m}}
  - name: crash
    command: [sh, -c, 'echo crashing; exit 1']
";

/// A run of the talker and the crash loop whose state dir is a 1 MiB tmpfs (root only).
fn on_a_tmpfs() -> Option<(PodRun, Tmpfs)> {
    if !is_root() {
        skip("mounting a tmpfs needs root");
        return None;
    }
    let r = PodRun::new(&pod_of(TALKER));
    let disk = Tmpfs::mount(&r.dir.file("state"), Some("1m"));
    Some((r, disk))
}

fn pod_of(containers: &str) -> String {
    pod("Always", &format!("  containers:\n{containers}"))
}

#[test]
fn a_full_state_dir_never_stops_the_pod_and_it_recovers_when_there_is_room() {
    full_state_dir(&[]);
}

#[test]
fn under_live_restore_the_keeper_tells_what_its_log_writes_meet() {
    // The keeper writes the logs (and the exit notes, which fail too: those exits are lost,
    // the pod goes on).
    full_state_dir(&["--live-restore"]);
}

fn full_state_dir(extra: &[&str]) {
    let Some((r, disk)) = on_a_tmpfs() else {
        return;
    };
    let state = r.dir.file("state");
    let mut args = vec![
        "--backoff-initial",
        "100ms",
        "--backoff-max",
        "100ms",
        "--log-max-size",
        "2Mi",
    ];
    args.extend(extra);
    let mut p = r.cmd(&args).start();
    // Full: the talker's log, the crash loop's logs and records fail; the pod runs on.
    let failed = r.wait_event("talk", "LogWriteFailed", 1);
    assert!(
        failed[0]["message"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{failed:?}"
    );
    r.wait_event("pod", "StateNotSaved", 1);
    let before = r.find("crash", "Started").len();
    wait_until("the crash loop goes on while the disk is full", || {
        r.find("crash", "Started").len() >= before + 3
    });
    assert!(p.running());
    // What was written whole stays whole: the record last saved reads back.
    let record = saved_record(&state.join("podvisor.state"));
    assert_eq!(record["pod"], "ns/p");
    // One failure said once per container, however many instances hit it.
    assert_eq!(r.find("crash", "LogWriteFailed").len(), 1);

    // Room again (the tmpfs made bigger): the record is saved, the logs written.
    disk.remount("size=64m");
    let saved = r.wait_event("pod", "StateSaved", 1);
    assert_eq!(saved[0]["type"], "Normal");
    r.wait_event("talk", "LogWriteRecovered", 1);
    r.wait_event("crash", "LogWriteRecovered", 1);
    let record = saved_record(&state.join("podvisor.state"));
    let crash = &record["containers"][1];
    assert!(crash["restartCount"].as_u64().unwrap() >= 3, "{record}");
    // The talker ran all along: nothing the disk did stopped it (nor its keeper).
    assert_eq!(
        r.find("talk", "Started").len(),
        1,
        "{:#?}",
        r.reasons("talk")
    );
    if extra.contains(&"--live-restore") {
        // SIGTERM would leave the pod to its keeper: `podvisor stop` ends it.
        assert_eq!(client(&r, &["stop"]).code(), 0);
        assert_eq!(p.wait().code(), Some(0), "{:?}", p.stderr);
        p.assert_no_leftovers();
    } else {
        stop(&mut p);
    }
    drop(disk);
}

#[test]
fn a_log_directory_removed_under_a_running_pod_is_made_again() {
    let r = PodRun::new(&pod_of(
        "  - name: talk\n    command: [sh, -c, 'i=0; while true; do i=$((i+1)); echo line $i; sleep 0.05; done']\n",
    ));
    let mut p = r.cmd(&[]).start();
    r.wait_event("talk", "Started", 1);
    let logs = r.dir.file("state").join("logs");
    wait_until("a line logged", || r.log("talk", 1).contains("line 2"));
    std::fs::remove_dir_all(&logs).unwrap();
    let replaced = r.wait_event("talk", "LogFileReplaced", 1);
    assert_eq!(replaced[0]["type"], "Warning");
    // Its output goes on into a new file, which `logs` reads.
    wait_until("lines in the new file", || {
        std::fs::read_to_string(logs.join("talk").join("1.log"))
            .is_ok_and(|t| t.lines().count() >= 3)
    });
    let out = client(&r, &["logs", "talk"]);
    assert!(out.stdout.starts_with("line "), "{}", out.stdout);
    stop(&mut p);
}

#[test]
fn a_read_only_state_dir_is_refused_naming_it() {
    let Some((r, disk)) = on_a_tmpfs() else {
        return;
    };
    let state = r.dir.file("state");
    disk.remount("ro");
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2);
    assert_eq!(
        out.stderr,
        format!(
            "error: {}: cannot make the state dir: Read-only file system",
            state.display()
        )
    );
    drop(disk);
}
