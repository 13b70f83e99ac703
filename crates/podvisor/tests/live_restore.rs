//! Live restore (`run --live-restore`): the containers outlive `run`, held by its keeper;
//! `run` again on the state dir takes them over. kill -9 of `run`, SIGTERM, an exit while no
//! podvisor ran, a killed keeper, a stuck keeper (the keeper's protocol: `keeper_protocol`;
//! what a run and its keeper keep in memory: `keeper_memory`).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;
use crate::probes::{event_ms, free_port, pod_with};

pub(crate) const LIVE: [&str; 1] = ["--live-restore"];

const DAY: i64 = 86_400_000;

/// `podvisor status -o json` of the run.
pub(crate) fn status(r: &PodRun) -> Value {
    let out = client(r, &["status", "-o", "json"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

/// Each container's (pid, restartCount, ready).
pub(crate) fn containers(r: &PodRun) -> Vec<(String, i64, u64, bool)> {
    let s = status(r);
    s["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                pid_of(c),
                c["restartCount"].as_u64().unwrap(),
                c["ready"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The pid in a container status's `containerID` (-1 without one).
fn pid_of(status: &Value) -> i64 {
    status["containerID"]
        .as_str()
        .and_then(|id| id.strip_prefix("podvisor://"))
        .and_then(|p| p.parse().ok())
        .unwrap_or(-1)
}

/// Pids of keeper processes of `state_dir`.
pub(crate) fn keepers(state_dir: &Path) -> Vec<(i32, String)> {
    let needle = format!("keeper\0{}\0", state_dir.display());
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmd.windows(needle.len()).any(|w| w == needle.as_bytes()) && !is_zombie(pid) {
            found.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    found
}

pub(crate) fn alive(pid: i64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid as i32)
}

/// How many live processes run exactly `cmdline` (NUL-separated argv).
pub(crate) fn count_cmdline(argv: &[&str]) -> usize {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| !is_zombie(*pid))
        .count()
}

/// `podvisor stop`: the run ends with 0, its keepers end and leave no file behind.
pub(crate) fn stop_and_find_nothing_left(r: &PodRun, run: &mut Proc) {
    let state = r.dir.file("state");
    assert_eq!(client(r, &["stop"]).code(), 0);
    assert_eq!(run.wait().code(), Some(0), "{:?}", run.stderr);
    wait_until("the keepers end", || keepers(&state).is_empty());
    let left: Vec<_> = std::fs::read_dir(state.join("keepers")).unwrap().collect();
    assert!(left.is_empty(), "keeper files left: {left:?}");
}

/// One container, `app`, that sleeps.
pub(crate) fn sleeper() -> PodRun {
    PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sleep, '600']}\n",
    ))
}

/// A sequence printer (every 10 ms), an HTTP server with a readiness probe, and a sleeper.
fn three(port: u16, tag: &str) -> String {
    let spec = format!(
        "  containers:
  - name: seq
    command: [sh, -c, 'i=0; while true; do echo $i; i=$((i+1)); sleep 0.01; done']
  - name: web
    command: [{bin}, serve, '{port}']
    readinessProbe: {{httpGet: {{path: /, port: {port}}}, periodSeconds: 1}}
  - name: idle
    command: [sleep, '{tag}']
",
        bin = testbin().display()
    );
    pod_with("Always", 1, &spec)
}

/// The numbers of `seq`'s log lines in `text` (what `logs` prints), all of them in order.
fn assert_every_number_once(text: &str) -> u64 {
    let numbers: Vec<u64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert!(numbers.len() > 10, "{} numbers", numbers.len());
    for (i, n) in numbers.iter().enumerate() {
        assert_eq!(*n, i as u64, "line {i} of the log is {n}");
    }
    *numbers.last().unwrap()
}

#[test]
fn a_killed_run_is_taken_over_without_restarting_anything() {
    let port = free_port();
    // A sleep length no other test uses, so that its processes can be counted.
    let tag = "600.25";
    let r = PodRun::new(&three(port, tag));
    let state = r.dir.file("state");
    let mut first = r.cmd(&LIVE).start();
    r.wait_event("web", "Ready", 1);
    let before = containers(&r);
    // One keeper holds the pod's three containers: podvisor-keeper, beside podvisor.
    let keeper = keepers(&state);
    assert_eq!(keeper.len(), 1, "{keeper:?}");
    assert!(keeper[0].1.starts_with("podvisor-keeper "), "{keeper:?}");
    // A container holds nothing of its keeper's: stdin, stdout and stderr only.
    let idle = before[2].1;
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{idle}/fd"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(fds.len(), 3, "idle's descriptors: {fds:?}");
    first.signal("KILL");
    first.wait();
    // The containers and their keepers run on; seq goes on printing for 2 s.
    std::thread::sleep(Duration::from_secs(2));
    for (name, pid, _, _) in &before {
        assert!(alive(*pid), "{name} ({pid}) died with the run");
    }

    let mut second = r.cmd(&LIVE).start();
    let adopted = r.wait_event("web", "Adopted", 1);
    let ready = r.wait_event("web", "Ready", 2);
    // Ready again within one probe period (1 s) of being taken over.
    let took = event_ms(&ready[1]) - event_ms(&adopted[0]);
    assert!(
        (0..=1_500).contains(&took),
        "ready {took} ms after adoption"
    );
    for name in ["seq", "web", "idle"] {
        assert_eq!(r.find(name, "Adopted").len(), 1, "{name}");
        assert_eq!(r.find(name, "Started").len(), 1, "{name} started again");
    }
    let after = containers(&r);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&b.0, b.1, b.2),
            (&a.0, a.1, a.2),
            "pid or restartCount changed"
        );
    }
    assert_eq!(
        count_cmdline(&["sleep", tag]),
        1,
        "a duplicate process runs"
    );

    // SIGTERM under live restore ends only the supervisor; the next run takes over again
    // (keepers that are no longer its children).
    second.signal("TERM");
    assert_eq!(second.wait().code(), Some(0));
    for (name, pid, _, _) in &before {
        assert!(alive(*pid), "{name} ({pid}) died with SIGTERM");
    }
    let mut third = r.cmd(&LIVE).start();
    r.wait_event("idle", "Adopted", 2);
    assert_eq!(containers(&r)[2].1, before[2].1);

    // Every number once, in order, in `logs` and in `logs -f` (once there are a few: a
    // loaded machine runs seq's loop slowly).
    wait_until("seq's first numbers", || {
        client(&r, &["logs", "seq"]).stdout.lines().count() > 10
    });
    let last = assert_every_number_once(&client(&r, &["logs", "seq"]).stdout);
    let mut follow = Run::new(podvisor())
        .args(["logs", "-f", "seq", "--state-dir"])
        .arg(&state)
        .start();
    let past = (last + 20).to_string();
    follow.expect_line("a number printed after following began", |l| {
        l.trim() == past
    });
    drop(follow);

    // `podvisor stop` stops the pod: the run ends, keepers and containers go.
    stop_and_find_nothing_left(&r, &mut third);
    for (name, pid, _, _) in &before {
        assert!(!alive(*pid), "{name} ({pid}) outlived the stop");
    }
    first.assert_no_leftovers();
}

#[test]
fn an_exit_while_away_is_reported_with_its_time_and_backed_off_from_it() {
    let dir = TempDir::new();
    let count = dir.file("count");
    // The first instance crashes at once (restarted at once), the second after 1 s: while no
    // podvisor runs. What it said last is its termination message (read from the log its
    // keeper wrote).
    let spec = format!(
        "  containers:
  - name: app
    command: [sh, -c, 'n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; echo \"crash $n\"; [ $n = 1 ] && exit 3; [ $n = 2 ] && sleep 1 && exit 3; exec sleep 600']
    terminationMessagePolicy: FallbackToLogsOnError
",
        c = count.display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let state = r.dir.file("state");
    let backoff = ["--live-restore", "--backoff-initial", "3s"];
    let mut first = r.cmd(&backoff).start();
    r.wait_event("app", "Started", 2);
    first.signal("KILL");
    first.wait();
    let exit_file = state.join("keepers").join("app.2.exit");
    wait_until("the keeper records the exit", || exit_file.exists());
    let note: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&exit_file).unwrap()).unwrap();
    // Milliseconds of the day, as `event_ms` counts them.
    let finished = note["finished"].as_i64().unwrap() % DAY;
    assert_eq!(note["exit"]["code"], 3, "{note}");
    wait_until("the keeper ends", || keepers(&state).is_empty());
    std::thread::sleep(Duration::from_secs(2));

    let _second = r.cmd(&backoff).start();
    let adopted = r.wait_event("app", "Adopted", 1);
    let s = status(&r);
    let c = &s["status"]["containerStatuses"][0];
    let last = &c["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "{c}");
    assert_eq!(last["message"], "crash 2\n", "{c}");
    let at = last["finishedAt"].as_str().unwrap();
    let ms = event_ms(&serde_json::json!({ "time": at })) % DAY;
    assert_eq!(
        ms / 1000,
        finished / 1000,
        "finishedAt {at}, recorded {finished}"
    );
    // Restarted 3 s (the backoff) after it finished, not 3 s after the adoption.
    let started = r.wait_event("app", "Started", 3);
    let restart = event_ms(&started[2]) % DAY;
    assert!(
        (2_700..4_000).contains(&(restart - finished)),
        "restarted {} ms after it finished ({} ms after adoption)",
        restart - finished,
        restart - event_ms(&adopted[0]) % DAY
    );
    assert_eq!(started[2]["restartCount"], 2);
    assert!(!exit_file.exists(), "the exit record was left");
}

#[test]
fn a_killed_keeper_takes_its_container_with_it_and_it_is_restarted() {
    let r = sleeper();
    let state = r.dir.file("state");
    let mut p = r.cmd(&LIVE).start();
    r.wait_event("app", "Started", 1);
    let pid = containers(&r)[0].1;
    let keeper = keepers(&state)[0].0;
    send(keeper, "KILL");
    let lost = r.wait_event("app", "ContainerStatusUnknown", 1);
    assert_eq!(lost[0]["exitCode"], 137);
    assert_eq!(lost[0]["type"], "Warning");
    let started = r.wait_event("app", "Started", 2);
    assert_eq!(started[1]["restartCount"], 1);
    wait_until("the container is gone", || !alive(pid));
    let s = status(&r);
    let last = &s["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["reason"], "ContainerStatusUnknown", "{last}");
    assert_eq!(last["exitCode"], 137);
    assert_eq!(keepers(&state).len(), 1);
    stop_and_find_nothing_left(&r, &mut p);
    p.assert_no_leftovers();
}

#[test]
fn a_restart_after_a_takeover_starts_under_the_new_runs_keeper() {
    let r = sleeper();
    let state = r.dir.file("state");
    let mut first = r.cmd(&LIVE).start();
    r.wait_event("app", "Started", 1);
    let old = keepers(&state);
    assert_eq!(old.len(), 1, "{old:?}");
    first.signal("KILL");
    first.wait();
    let mut second = r.cmd(&LIVE).start();
    r.wait_event("app", "Adopted", 1);
    // The old keeper tells the new run of the exit; the next instance starts in a keeper of
    // the new run's own, and the old one, holding nothing, ends.
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    let started = r.wait_event("app", "Started", 2);
    assert_eq!(started[1]["restartCount"], 1);
    wait_until("the old keeper ends", || {
        keepers(&state).iter().all(|k| k.0 != old[0].0)
    });
    assert_eq!(keepers(&state).len(), 1);
    let pid = containers(&r)[0].1;
    assert!(alive(pid));
    stop_and_find_nothing_left(&r, &mut second);
    assert!(!alive(pid), "app#2 outlived the stop");
    first.assert_no_leftovers();
}

#[test]
fn a_keeper_that_does_not_answer_a_start_is_killed_and_replaced() {
    // A sidecar holds the main container back until its startup probe finds a file; the
    // keeper is stopped (SIGSTOP) before that, so the main container's start gets no answer.
    let gate = TempDir::new();
    let go = gate.file("go");
    let spec = format!(
        "  initContainers:
  - name: side
    restartPolicy: Always
    command: [sleep, '600']
    startupProbe: {{exec: {{command: [test, -f, '{go}']}}, periodSeconds: 1}}
  containers:
  - {{name: app, command: [sleep, '600']}}
",
        go = go.display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let state = r.dir.file("state");
    let mut p = r
        .cmd(&LIVE)
        .env("PODVISOR_TEST_KEEPER_START_PATIENCE_MS", "3000")
        .start();
    r.wait_event("side", "Started", 1);
    let side = pid_of(&status(&r)["status"]["initContainerStatuses"][0]);
    assert!(side > 0);
    let stuck = keepers(&state)[0].0;
    send(stuck, "STOP");
    std::fs::write(&go, "").unwrap();
    // The start fails after the patience, saying why; the stuck keeper is killed, its
    // sidecar with it (reported lost), and both start again under a new keeper.
    let failed = r.wait_event("app", "Failed", 1);
    let message = failed[0]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("the keeper (pid {stuck}) did not answer")),
        "{message}"
    );
    assert_eq!(failed[0]["exitCode"], 128);
    let lost = r.wait_event("side", "ContainerStatusUnknown", 1);
    assert_eq!(lost[0]["exitCode"], 137);
    r.wait_event("app", "Started", 1);
    r.wait_event("side", "Started", 2);
    wait_until("the stuck keeper and its sidecar are gone", || {
        !alive(stuck.into()) && !alive(side)
    });
    let now = keepers(&state);
    assert!(now.len() == 1 && now[0].0 != stuck, "{now:?}");
    stop_and_find_nothing_left(&r, &mut p);
    p.assert_no_leftovers();
}

#[test]
fn without_live_restore_a_killed_run_takes_its_containers_along() {
    let r = sleeper();
    let state = r.dir.file("state");
    let mut first = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    let pid = containers(&r)[0].1;
    assert!(keepers(&state).is_empty());
    assert!(!state.join("keepers").exists());
    first.signal("KILL");
    first.wait();
    wait_until("the container dies with the run", || !alive(pid));
    first.assert_no_leftovers();
}

#[test]
fn the_systemd_unit_upgrades_in_place_without_stopping_the_pod() {
    // The unit's ExecStart, run as systemd would (KillMode=process: `systemctl restart` is a
    // SIGTERM to `run` alone), with the binary replaced between the two runs.
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/systemd/podvisor@.service"),
    )
    .unwrap();
    assert!(unit.lines().any(|l| l == "KillMode=process"), "{unit}");
    let exec: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    assert!(exec.contains(&"--live-restore".to_string()), "{exec:?}");
    let r = sleeper();
    let state = r.dir.file("state");
    let install = |at: &str| {
        let bin = r.dir.file(at).join("podvisor");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::copy(podvisor(), &bin).unwrap();
        bin
    };
    let unit_run = |bin: &Path| {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        let mut rest = exec[1..].iter();
        while let Some(a) = rest.next() {
            match a.as_str() {
                "run" => {
                    args.extend(["run".into(), "-q".into(), "--events".into()]);
                    args.push(r.dir.file("events.json").into());
                }
                "--state-dir" => {
                    rest.next();
                    args.extend(["--state-dir".into(), state.clone().into()]);
                }
                m if m.ends_with("%i.yaml") => args.push(r.dir.file("pod.yaml").into()),
                other => args.push(other.into()),
            }
        }
        Run::new(bin).args(args).start()
    };
    let old = install("old");
    let mut first = unit_run(&old);
    r.wait_event("app", "Started", 1);
    let pid = containers(&r)[0].1;
    // No podvisor-keeper beside this podvisor: its keeper is `podvisor keeper`.
    let keeper = keepers(&state);
    assert!(keeper[0].1.starts_with("podvisor keeper "), "{keeper:?}");
    first.signal("TERM");
    assert_eq!(first.wait().code(), Some(0), "{:?}", first.stderr);
    // The new binary replaces the old one; the keeper runs on from the old.
    std::fs::remove_file(&old).unwrap();
    let new = install("new");
    let mut second = unit_run(&new);
    r.wait_event("app", "Adopted", 1);
    assert_eq!(containers(&r)[0].1, pid);
    assert_eq!(r.find("app", "Started").len(), 1);
    stop_and_find_nothing_left(&r, &mut second);
    first.assert_no_leftovers();
}

#[test]
fn a_container_taken_over_keeps_its_cgroup_and_an_oom_kill_is_told() {
    if !crate::resources::cgroups_here() {
        return;
    }
    let marks = TempDir::new();
    let spec = format!(
        "  containers:
  - name: app
    command: [sleep, '600']
    resources: {{limits: {{memory: 64Mi}}}}
  - name: hog
    command: [sh, -c, 'test -f {m} && exec sleep 600; touch {m}; exec {bin} alloc 400']
    resources: {{limits: {{memory: 64Mi}}}}
",
        m = marks.file("hogged").display(),
        bin = testbin().display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut first = r.cmd(&LIVE).start();
    // The keeper reads the OOM kill from the instance's cgroup.
    let killed = r.wait_event("hog", "OOMKilled", 1);
    assert_eq!(killed[0]["exitCode"], 137);
    r.wait_event("hog", "Started", 2);
    assert_eq!(r.find("hog", "OOMKilled").len(), 1);
    let pid = containers(&r)[0].1;
    let memory_cgroup = |pid: i64| -> String {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        text.lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
            .unwrap()
    };
    let before = memory_cgroup(pid);
    assert!(before.ends_with("/app-1"), "{before}");
    first.signal("KILL");
    first.wait();
    let _second = r.cmd(&LIVE).start();
    r.wait_event("app", "Adopted", 1);
    assert_eq!(memory_cgroup(pid), before);
    let limit = Path::new("/sys/fs/cgroup/memory")
        .join(before.trim_start_matches('/'))
        .join("memory.limit_in_bytes");
    assert_eq!(
        std::fs::read_to_string(limit).unwrap().trim(),
        (64 << 20).to_string()
    );
    assert_eq!(client(&r, &["stop"]).code(), 0);
}

#[test]
fn a_fresh_pods_keeper_starts_while_the_pod_is_prepared_and_a_refused_run_ends_it() {
    // Held as it prepares the pod (images, namespaces, volumes): the keeper is already there,
    // before any container, and the first container starts in it.
    let r = sleeper();
    let state = r.dir.file("state");
    let gate = r.dir.file("gate");
    let mut p = (r.cmd(&LIVE))
        .env("PODVISOR_STALL", "run.prepare")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    wait_until("the run held as it prepares the pod", || gate.exists());
    wait_until("its keeper", || keepers(&state).len() == 1);
    let keeper = keepers(&state)[0].0;
    assert!(r.find("app", "Started").is_empty());
    std::fs::remove_file(&gate).unwrap();
    r.wait_event("app", "Started", 1);
    let pid = containers(&r)[0].1;
    let parent = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let ppid = parent.rsplit(')').next().unwrap().split_whitespace().nth(1);
    assert_eq!(ppid, Some(keeper.to_string().as_str()), "{parent}");
    stop_and_find_nothing_left(&r, &mut p);
    p.assert_no_leftovers();

    // Refused as it prepares (a Localhost seccomp profile that is not there): the keeper it
    // started goes too.
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sleep, '600'], securityContext: {seccompProfile: {type: Localhost, localhostProfile: podvisor-test-missing.json}}}\n",
    ));
    let state = r.dir.file("state");
    let out = r.cmd(&LIVE).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("podvisor-test-missing.json"),
        "{}",
        out.stderr
    );
    assert!(keepers(&state).is_empty(), "{:?}", keepers(&state));
    let left: Vec<_> = std::fs::read_dir(state.join("keepers")).unwrap().collect();
    assert!(left.is_empty(), "keeper files left: {left:?}");
    // Nor its API socket.
    assert!(!state.join("podvisor.sock").exists());
    assert!(r.find("app", "Started").is_empty());
}

#[test]
fn a_memory_volume_is_refused_with_live_restore() {
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sleep, '600'], volumeMounts: [{name: scratch, mountPath: /scratch}]}\n  volumes:\n  - {name: scratch, emptyDir: {medium: Memory}}\n",
    ));
    let out = r.cmd(&LIVE).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("--live-restore")
            && out
                .stderr
                .contains("emptyDir volume \"scratch\" has medium: Memory"),
        "{}",
        out.stderr
    );
    assert!(r.find("app", "Started").is_empty());
}

#[test]
fn under_a_keeper_a_started_container_has_its_log_and_a_failed_start_has_none() {
    // The run makes the log file of a start it asks the keeper for (docs/benchmarks.md, "Benchmark
    // of container start"); the keeper writes it. A start that fails leaves none, as without a
    // keeper.
    let r = PodRun::new(&pod(
        "Never",
        "  containers:\n  - {name: ok, command: [sh, -c, 'echo hi']}\n  - {name: bad, command: [/no/such/program]}\n",
    ));
    let out = r.cmd(&LIVE).output();
    assert_eq!(out.code(), 1, "{out:?}");
    let logs = |name: &str| -> Vec<String> {
        let dir = r.dir.file("state").join("logs").join(name);
        let mut files: Vec<String> = (std::fs::read_dir(&dir).into_iter().flatten().flatten())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        files
    };
    let ok = logs("ok");
    assert_eq!(ok.len(), 1, "{ok:?}");
    let instance: u32 = ok[0].trim_end_matches(".log").parse().unwrap();
    assert_eq!(r.log_lines("ok", instance), ["hi"]);
    assert_eq!(logs("bad"), Vec::<String>::new());
}

#[test]
fn a_keeper_makes_the_next_container_while_one_start_is_held() {
    // The keeper makes a batch's containers two at once (its starters): the first start held
    // on its thread (`PODVISOR_STALL`, debug builds), the second container runs all the same;
    // the answers keep the order asked, and both are held and logged once it is let go.
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: one, command: [sh, -c, 'echo one; exec sleep 611']}\n  - {name: two, command: [sh, -c, 'echo two; exec sleep 612']}\n",
    ));
    let gate = r.dir.file("gate");
    let mut p = (r.cmd(&LIVE))
        .env("PODVISOR_STALL", "keeper.start@1")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    wait_until("the first start held on its starter", || gate.exists());
    wait_until("the second container running", || {
        count_cmdline(&["sleep", "612"]) == 1
    });
    assert_eq!(count_cmdline(&["sleep", "611"]), 0);
    // Neither is answered yet: the first is asked first.
    assert!(r.events().iter().all(|e| e["reason"] != "Started"));
    std::fs::remove_file(&gate).unwrap();
    r.wait_event("one", "Started", 1);
    r.wait_event("two", "Started", 1);
    wait_until("the first container running", || {
        count_cmdline(&["sleep", "611"]) == 1
    });
    let running: Vec<_> = containers(&r).into_iter().map(|c| (c.0, c.1 > 0)).collect();
    assert_eq!(
        running,
        [("one".to_string(), true), ("two".to_string(), true)]
    );
    wait_until("both logs", || {
        r.log_lines("one", 1) == ["one"] && r.log_lines("two", 1) == ["two"]
    });
    stop_and_find_nothing_left(&r, &mut p);
    p.assert_no_leftovers();
}

#[test]
fn a_start_held_as_its_run_dies_is_not_made_and_the_next_run_makes_it() {
    // A starter looks again, as it takes a start, whether the run that asked for it is there:
    // the first start held (`PODVISOR_STALL`, debug builds) and the run killed meanwhile, the
    // keeper does not make it, and ends once the one container it made has exited. The next
    // run starts the pod as its own.
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: one, command: [sleep, '621']}\n  - {name: two, command: [sleep, '622']}\n",
    ));
    let state = r.dir.file("state");
    let gate = r.dir.file("gate");
    let mut first = (r.cmd(&LIVE))
        .env("PODVISOR_STALL", "keeper.start@1")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    wait_until("the first start held on its starter", || gate.exists());
    wait_until("the second container running", || {
        count_cmdline(&["sleep", "622"]) == 1
    });
    first.signal("KILL");
    first.wait();
    std::fs::remove_file(&gate).unwrap();
    let killed = std::process::Command::new("pkill")
        .args(["-KILL", "-x", "-f", "sleep 622"])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_until("the keeper ends", || keepers(&state).is_empty());
    assert_eq!(
        count_cmdline(&["sleep", "621"]),
        0,
        "the held start was made"
    );

    let mut second = r.cmd(&LIVE).start();
    wait_until("both running under the next run", || {
        count_cmdline(&["sleep", "621"]) == 1 && count_cmdline(&["sleep", "622"]) == 1
    });
    stop_and_find_nothing_left(&r, &mut second);
    second.assert_no_leftovers();
}
