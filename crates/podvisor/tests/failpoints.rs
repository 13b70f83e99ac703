//! A crash at every named step (`PODVISOR_FAILPOINT`, debug builds; docs/testing.md): a pod
//! under `--live-restore` is run with one failpoint armed; the run or its keeper kills itself
//! (SIGKILL) there; a run without it takes the pod over, and then what the kubelet's rules
//! and live restore promise is checked: the record reads, no restart is counted twice or lost,
//! no container runs twice, the logs hold every line once, and once the pod is stopped
//! nothing is left (processes, keepers, their files, cgroups, mounts). And a step that fails
//! with an error (`PODVISOR_FAILPOINT_ERROR`) fails what it belongs to, no more.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;
use crate::probes::pod_with;

/// Fast restarts, small log files (so that they rotate), containers held by a keeper.
const ARGS: [&str; 9] = [
    "--live-restore",
    "--backoff-initial",
    "100ms",
    "--backoff-max",
    "300ms",
    "--log-max-size",
    "2Ki",
    "--log-max-files",
    "3",
];

/// Who a point kills.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dies {
    /// The run that has the point armed.
    Run,
    /// A run that takes the pod over (the first one is killed plainly first).
    TakingOver,
    /// The keeper (the run carries on).
    Keeper,
    /// The run, in a whole-pod restart that `podvisor restart` asks for.
    RestartingPod,
}

/// `seq` prints a number every 10 ms; `crash` says hello and exits 3 after 200 ms. Each
/// carries `FP_TAG` in its environment, so that its processes can be counted, and first
/// appends its pid to `NAME.runs` in `dir`, so that its executions can be counted. Each asks
/// for CPU, so that a loaded machine does not starve it (a BestEffort share is tiny).
fn pod(tag: &str, dir: &Path) -> String {
    let spec = format!(
        "  containers:
  - name: seq
    command: [sh, -c, 'read p _ < /proc/self/stat; echo $p >> {d}/seq.runs; i=0; while true; do echo $i; i=$((i+1)); sleep 0.01; done']
    env: [{{name: FP_TAG, value: {tag}-seq}}]
    resources: {{requests: {{cpu: 200m}}}}
  - name: crash
    command: [sh, -c, 'read p _ < /proc/self/stat; echo $p >> {d}/crash.runs; echo up; sleep 0.2; exit 3']
    env: [{{name: FP_TAG, value: {tag}-crash}}]
    resources: {{requests: {{cpu: 200m}}}}
",
        d = dir.display()
    );
    pod_with("Always", 1, &spec)
}

/// Runs the pod with `point` armed, lets `who` die there, takes the pod over with a plain
/// run, and checks the invariants.
fn crash_at(point: &str, who: Dies) {
    if !is_root() {
        // The points cover cgroups and keepers as root has them.
        skip("failpoints run as root (cgroups)");
        return;
    }
    let tag = format!(
        "fp{}-{}",
        std::process::id(),
        point.replace(['.', '@'], "-")
    );
    let runs = TempDir::new();
    let r = PodRun::new(&pod(&tag, &runs.file("")));
    let mark = r.dir.file("fired");
    let armed = |run: Run| {
        run.env("PODVISOR_FAILPOINT", point)
            .env("PODVISOR_FAILPOINT_MARK", &mark)
    };
    let mut first = match who {
        Dies::TakingOver => r.cmd(&ARGS).start(),
        _ => armed(r.cmd(&ARGS)).start(),
    };
    let mut second = None;
    if who == Dies::RestartingPod {
        r.wait_event("crash", "Started", 2);
        assert_eq!(client(&r, &["restart"]).code(), 0);
    }
    if who == Dies::TakingOver {
        r.wait_event("crash", "Started", 2);
        first.signal("KILL");
        first.wait();
        second = Some(armed(r.cmd(&ARGS)).start());
    }
    wait_until(&format!("failpoint {point} fires"), || mark.exists());
    let before = r.find("crash", "Started").len();
    let mut last = match who {
        Dies::Keeper => first,
        Dies::Run | Dies::TakingOver | Dies::RestartingPod => {
            let killed = second.as_mut().unwrap_or(&mut first);
            let status = killed.wait();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(libc::SIGKILL),
                "the run did not die at {point}: {status:?}"
            );
            r.cmd(&ARGS).start()
        }
    };
    // The pod goes on: crash restarts twice more, seq runs.
    r.wait_event("crash", "Started", before + 2);
    wait_until("seq runs", || running(&r, "seq"));
    check_restarts(&r, "crash", &runs, who);
    check_restarts(&r, "seq", &runs, who);
    for c in ["seq", "crash"] {
        let n = processes(&format!("{tag}-{c}"));
        assert!(n <= 1, "{n} processes of {c} run");
    }
    check_logs(&r, "seq");
    // The whole-pod restart is counted once (none before, none after).
    let out = client(&r, &["status", "-o", "json"]);
    let status: Value = serde_json::from_str(&out.stdout).unwrap();
    let pod_restarts = &status["metadata"]["annotations"]["podvisor.io/pod-restarts"];
    let want = if who == Dies::RestartingPod { "1" } else { "0" };
    assert_eq!(pod_restarts, want, "pod restarts");
    let cgroups = recorded_cgroups(&r);
    assert_eq!(client(&r, &["stop"]).code(), 0);
    assert_eq!(last.wait().code(), Some(0), "{:?}", last.stderr);
    nothing_left(&r, &tag, &cgroups);
    last.assert_no_leftovers();
}

/// Whether `container` is running (by `status -o json`).
fn running(r: &PodRun, container: &str) -> bool {
    let out = client(r, &["status", "-o", "json"]);
    let Ok(s) = serde_json::from_str::<Value>(&out.stdout) else {
        return false;
    };
    s["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == container && c["state"]["running"].is_object())
}

/// No start of `container` is told twice (each start's restart count is above the one
/// before), and none is counted twice or lost. Where the run died (and with it the events
/// of its last turn), the count is checked against the container's own executions: while it
/// runs, its restart count is the number of executions before this one, less those killed
/// at a take-over as never recorded. Where only a keeper died (its containers with it, maybe
/// before their first line), every attempt is told: their counts are 0, 1, 2, ...
fn check_restarts(r: &PodRun, container: &str, runs: &TempDir, who: Dies) {
    let told: Vec<String> = (r.events().iter())
        .filter(|e| e["object"] == container)
        .map(|e| format!("{} {} {}", e["reason"], e["restartCount"], e["message"]))
        .collect();
    for reason in ["Created", "Started"] {
        let counts: Vec<u64> = (r.find(container, reason).iter())
            .map(|e| e["restartCount"].as_u64().unwrap())
            .collect();
        assert!(
            counts.windows(2).all(|w| w[0] < w[1]),
            "{container}: {reason} told twice: {told:#?}"
        );
        if who == Dies::Keeper && reason == "Created" {
            for (i, n) in counts.iter().enumerate() {
                assert_eq!(*n, i as u64, "{container}: attempts counted {told:#?}");
            }
        }
    }
    if who == Dies::Keeper {
        return;
    }
    if std::env::var("FP_DEBUG").is_ok() {
        eprintln!("{told:#?}");
    }
    // The keeper lived: every exit is known, with its code (none lost to "unknown").
    assert!(
        r.find(container, "ContainerStatusUnknown").is_empty(),
        "{container}: an exit lost: {told:#?}"
    );
    let mut found = None;
    wait_until(&format!("{container} runs"), || {
        let out = client(r, &["status", "-o", "json"]);
        let Ok(s) = serde_json::from_str::<Value>(&out.stdout) else {
            return false;
        };
        found = s["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == container && c["state"]["running"].is_object())
            .and_then(|c| {
                let pid = c["containerID"].as_str()?.strip_prefix("podvisor://")?;
                Some((pid.to_string(), c["restartCount"].as_u64()?))
            });
        found.is_some()
    });
    let (pid, count) = found.unwrap();
    let executions =
        std::fs::read_to_string(runs.file(&format!("{container}.runs"))).unwrap_or_default();
    let before: Vec<&str> = executions.lines().take_while(|l| *l != pid).collect();
    assert!(
        executions.lines().any(|l| l == pid),
        "{container}'s pid {pid} is not among its executions {executions:?}"
    );
    let strays = (r.find(container, "Killing").iter())
        .filter_map(|e| e["message"].as_str())
        .filter(|m| before.iter().any(|p| m.contains(&format!("(pid {p})"))))
        .count();
    assert_eq!(
        count,
        (before.len() - strays) as u64,
        "{container}: restartCount {count} after {} executions, {strays} of them strays: {told:#?}",
        before.len()
    );
}

/// Live processes (not zombies) that are the shell of a container whose `FP_TAG` is `tag`:
/// the leaders of their process groups (not a child forked to run `sleep`, still `sh`).
fn processes(tag: &str) -> usize {
    let needle = format!("FP_TAG={tag}\0");
    live_pids()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sh")
                && leads_group(*pid)
                && holds(&format!("/proc/{pid}/environ"), &needle)
                && !is_zombie(*pid)
        })
        .count()
}

/// Every process's pid.
fn live_pids() -> impl Iterator<Item = i32> {
    (std::fs::read_dir("/proc").into_iter().flatten().flatten())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
}

/// Whether the file at `path` (a `/proc` file) holds `needle`.
fn holds(path: &str, needle: &str) -> bool {
    std::fs::read(path).is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// Whether `pid` leads its process group (a container's first process does).
fn leads_group(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // pid (comm) state ppid pgrp ...
    let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
    after.split_whitespace().nth(2) == Some(&pid.to_string())
}

/// Every instance's log of `container` (its rotated files, oldest first, then the current
/// one) holds consecutive numbers: none lost, none repeated, none cut.
fn check_logs(r: &PodRun, container: &str) {
    let dir = r.dir.file("state").join("logs").join(container);
    let mut instances: Vec<u32> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
        .collect();
    instances.sort_unstable();
    assert!(!instances.is_empty(), "no log of {container}");
    for i in instances {
        let mut text = String::new();
        for k in (1..3).rev() {
            text += &std::fs::read_to_string(dir.join(format!("{i}.log.{k}"))).unwrap_or_default();
        }
        text += &std::fs::read_to_string(dir.join(format!("{i}.log"))).unwrap();
        // Its stdout (a stop's SIGTERM may make the shell say `Terminated` on stderr).
        let numbers: Vec<u64> = text
            .lines()
            .filter(|l| l.split(' ').nth(1) == Some("stdout"))
            .map(|l| {
                let line = l.splitn(4, ' ').nth(3).unwrap_or_default();
                line.parse()
                    .unwrap_or_else(|_| panic!("{container} #{i}: a cut or foreign line {l:?}"))
            })
            .collect();
        for w in numbers.windows(2) {
            assert_eq!(w[1], w[0] + 1, "{container} #{i}: {} after {}", w[1], w[0]);
        }
    }
}

/// The cgroups the run recorded (`state/cgroups`), to check that they are gone.
fn recorded_cgroups(r: &PodRun) -> Vec<String> {
    std::fs::read_to_string(r.dir.file("state").join("cgroups"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with('/'))
        .map(String::from)
        .collect()
}

/// After the stop: no container process, no keeper, no keeper file (socket, exit note), no
/// cgroup of the pod, no mount under the test's directory.
fn nothing_left(r: &PodRun, tag: &str, cgroups: &[String]) {
    let state = r.dir.file("state");
    let deadline = Instant::now() + Duration::from_secs(10);
    while (processes(&format!("{tag}-seq")) + processes(&format!("{tag}-crash")) > 0
        || keepers_of(&state) > 0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(processes(&format!("{tag}-seq")), 0, "seq left");
    assert_eq!(processes(&format!("{tag}-crash")), 0, "crash left");
    assert_eq!(keepers_of(&state), 0, "a keeper left");
    let files: Vec<_> = std::fs::read_dir(state.join("keepers"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(files.is_empty(), "keeper files left: {files:?}");
    for c in cgroups {
        assert!(!Path::new(c).exists(), "cgroup {c} left");
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = r.dir.file("");
    assert!(
        !mounts.contains(dir.to_str().unwrap()),
        "a mount under {} left",
        dir.display()
    );
}

/// How many keepers of `state` are alive.
fn keepers_of(state: &Path) -> usize {
    let needle = format!("keeper\0{}\0", state.display());
    live_pids()
        .filter(|pid| holds(&format!("/proc/{pid}/cmdline"), &needle) && !is_zombie(*pid))
        .count()
}

macro_rules! points {
    ($($test:ident: $point:literal, $who:ident;)*) => {$(
        #[test]
        fn $test() {
            crash_at($point, Dies::$who);
        }
    )*};
}

points! {
    record_written_not_renamed: "state.podvisor.state.synced@3", Run;
    record_renamed_dir_not_synced: "state.podvisor.state.renamed@3", Run;
    keeper_started_nothing_asked: "run.keeper.spawned", Run;
    pod_restart_volumes_wiped: "run.volumes.wiped", RestartingPod;
    start_asked_no_answer_read: "run.start.asked@3", Run;
    // Both of the pod's containers asked together, no answer read. The keeper begins none
    // it had not begun when the run died (whether it had begun the second is a race); the
    // invariants hold either way.
    both_asked_no_answer_read: "run.start.asked@2", Run;
    start_answered_not_recorded: "run.start.answered@3", Run;
    first_start_answered_not_recorded: "run.start.answered", Run;
    exit_read_not_recorded: "run.exit.told", Run;
    exit_saved_not_counted: "run.exit.saved", Run;
    instance_cgroup_made: "cgroup.created@3", Run;
    instance_cgroup_removed: "cgroup.removed", Run;
    takeover_greeted_nothing_adopted: "run.adopt.greeted", TakingOver;
    takeover_adopted_not_recorded: "run.adopt.held", TakingOver;
    keeper_spawned_not_answered: "keeper.spawned@3", Keeper;
    keeper_answered: "keeper.answered@3", Keeper;
    keeper_answered_one_of_two_asked: "keeper.answered", Keeper;
    keeper_reaped_no_note: "keeper.exit.reaped", Keeper;
    keeper_noted_not_told: "keeper.exit.noted", Keeper;
    keeper_rotated_a_log: "log.rotated", Keeper;
}

#[test]
fn a_start_whose_output_the_loop_cannot_take_fails_alone() {
    // The loop refuses the first start's second log stream (`PODVISOR_FAILPOINT_ERROR`, as an
    // epoll add that fails: out of memory, or of the user's watches). That start fails before
    // its process is made, with a StartError that says why; the first stream is taken out of
    // the loop again and no log is left of it. The run goes on: the other container starts
    // beside it, and this one again (a first restart comes at once, as the kubelet's).
    let r = PodRun::new(&crate::harness::pod(
        "OnFailure",
        "  containers:\n  - {name: a, command: [sh, -c, 'echo hello']}\n  - {name: b, command: [sh, -c, 'echo world']}\n",
    ));
    let out = r
        .cmd(&[])
        .env("PODVISOR_FAILPOINT_ERROR", "run.log.add@2")
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(!out.stderr.contains("error:"), "{out:?}");
    let failed = r
        .events()
        .into_iter()
        .find(|e| e["reason"] == "Failed")
        .expect("a Failed event");
    assert_eq!(
        (&failed["object"], &failed["exitCode"]),
        (&"a".into(), &128.into())
    );
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.contains("cannot read its output: failpoint run.log.add"),
        "{message}"
    );
    assert!(!r.dir.file("state/logs/a/1.log").exists());
    assert_eq!(r.log_lines("a", 2), ["hello"]);
    assert_eq!(r.log_lines("b", 1), ["world"]);
}

#[test]
fn a_run_that_ends_on_an_error_leaves_nothing_running() {
    // The loop fails as it reads the container's output: the run ends with the error. Its
    // container dies with it (by its parent-death signal); in the host's PID namespace no
    // namespace's end takes what the container started along, so the run kills that through
    // the pod's cgroups, and removes them (the harness checks that no process, cgroup or
    // mount of the run is left).
    let dir = TempDir::new();
    let (again, child) = (dir.file("again"), dir.file("child"));
    let r = PodRun::new(&crate::harness::pod(
        "OnFailure",
        &format!(
            "  hostPID: true\n  containers:\n  - {{name: a, command: [sh, -c, '[ -e {f} ] && exit 0; touch {f}; sleep 600 & echo $! > {c}; echo started; wait']}}\n",
            f = again.display(),
            c = child.display()
        ),
    ));
    let out = r
        .cmd(&[])
        .env("PODVISOR_FAILPOINT_ERROR", "run.log.drain")
        .output();
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        out.stderr.contains("error: failpoint run.log.drain"),
        "{out:?}"
    );
    // Killed: gone, or a zombie until the machine's init reaps it.
    let pid = std::fs::read_to_string(&child).unwrap();
    let stat = Path::new("/proc").join(pid.trim()).join("stat");
    wait_until("the container's child to be killed", || {
        std::fs::read_to_string(&stat).map_or(true, |s| s.contains(") Z "))
    });
    // The record stays: a run started again resumes the pod, whose container it finds gone.
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(
        r.reasons("pod").first().map(String::as_str),
        Some("Resumed")
    );
    let exits: Vec<Value> = r
        .events()
        .into_iter()
        .filter(|e| e["object"] == "a" && e["exitCode"].is_number())
        .map(|e| e["exitCode"].clone())
        .collect();
    assert_eq!(exits, [137, 0]);
}
