//! `podvisor run` through the binary: real pods, real processes, events and logs checked, and
//! nothing left behind (every `output()` scans for leftovers).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::*;
use crate::live_restore::count_cmdline;

#[test]
fn the_job_example_succeeds_with_logs_and_events() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pods/job.yaml");
    let r = PodRun::new(&std::fs::read_to_string(example).unwrap());
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    // `fetch` is an init container: no readiness of its own.
    assert_eq!(r.reasons("fetch"), ["Created", "Started", "Completed"]);
    assert_eq!(
        r.reasons("build-report"),
        ["Created", "Started", "Ready", "Completed", "NotReady"]
    );
    let completed = r
        .events()
        .into_iter()
        .find(|e| e["reason"] == "Completed")
        .unwrap();
    assert_eq!(completed["exitCode"], 0);
    assert_eq!(completed["type"], "Normal");
    assert!(completed["time"].as_str().unwrap().ends_with('Z'));
    // Logs in the CRI format, one file per instance.
    let log = r.log("build-report", 1);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].ends_with(" stdout F building"), "{log}");
    assert!(lines[1].ends_with(" stdout F done"), "{log}");
    assert!(r.log("fetch", 1).ends_with(" stdout F fetched\n"));
}

#[test]
fn crash_loop_backs_off_on_schedule() {
    let r = PodRun::new(&pod(
        "Always",
        "  containers:\n  - {name: app, command: [sh, -c, 'exit 3']}\n",
    ));
    let mut p = r
        .cmd(&["--backoff-initial", "200ms", "--backoff-max", "800ms"])
        .start();
    // Wait for the 6th start: waits 0, 200, 400, 800, 800 ms.
    wait_until("six starts", || {
        r.reasons("app").iter().filter(|x| *x == "Started").count() >= 6
    });
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0), "stopped on request");
    p.assert_no_leftovers();
    let events = r.events();
    let time = |e: &serde_json::Value| {
        let t = e["time"].as_str().unwrap();
        // HH:MM:SS.mmm → milliseconds of the day
        let hms = &t[11..23];
        let (h, rest) = hms.split_at(2);
        let (m, rest) = rest[1..].split_at(2);
        let s: f64 = rest[1..].parse().unwrap();
        (h.parse::<f64>().unwrap() * 3600.0 + m.parse::<f64>().unwrap() * 60.0 + s) * 1000.0
    };
    let exits: Vec<f64> = events
        .iter()
        .filter(|e| e["reason"] == "Error")
        .map(time)
        .collect();
    let starts: Vec<f64> = events
        .iter()
        .filter(|e| e["reason"] == "Started")
        .map(time)
        .collect();
    let waits: Vec<f64> = exits.iter().zip(&starts[1..]).map(|(e, s)| s - e).collect();
    for (wait, want) in waits.iter().zip([0.0, 200.0, 400.0, 800.0, 800.0]) {
        // Never early; late by at most a loose margin on a loaded machine.
        assert!(
            *wait >= want - 5.0 && *wait <= want + 1000.0,
            "waits {waits:?}"
        );
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| e["reason"] == "Error")
            .map(|e| e["exitCode"].as_i64().unwrap())
            .next(),
        Some(3)
    );
    assert!(events.iter().any(|e| e["reason"] == "BackOff"));
    // restartCount grows on the events of each new instance.
    let counts: Vec<i64> = events
        .iter()
        .filter(|e| e["reason"] == "Started")
        .map(|e| e["restartCount"].as_i64().unwrap())
        .collect();
    assert_eq!(counts[..6], [0, 1, 2, 3, 4, 5]);
}

#[test]
fn restart_policies_decide_the_exit_code() {
    // Never: one failure fails the pod: exit 1.
    let r = PodRun::new(&pod(
        "Never",
        "  containers:\n  - {name: app, command: [sh, -c, 'exit 4']}\n",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 1, "{out:?}");
    assert_eq!(
        r.reasons("app"),
        ["Created", "Started", "Ready", "Error", "NotReady"]
    );

    // OnFailure: fails once (a marker file), then succeeds: exit 0.
    let r = PodRun::new(&pod(
        "OnFailure",
        "  containers:\n  - {name: app, command: [sh, -c, 'if [ -e \"$M\" ]; then exit 0; fi; touch \"$M\"; exit 1'], env: [{name: M, value: MARKER}]}\n",
    ));
    let marker = r.dir.file("marker");
    let manifest = std::fs::read_to_string(r.dir.file("pod.yaml"))
        .unwrap()
        .replace("MARKER", marker.to_str().unwrap());
    std::fs::write(r.dir.file("pod.yaml"), manifest).unwrap();
    let out = r.cmd(&["--backoff-initial", "100ms"]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(
        r.reasons("app"),
        [
            "Created",
            "Started",
            "Ready",
            "Error",
            "NotReady",
            "Created",
            "Started",
            "Ready",
            "Completed",
            "NotReady"
        ]
    );
}

#[test]
fn containers_that_exit_at_once_are_all_collected() {
    // Forty containers block on one FIFO and all exit when it is closed: their SIGCHLDs merge
    // into few, and every exit must still be seen (the look through all children that
    // follows a SIGCHLD).
    let dir = TempDir::new();
    let (r, fifo, writer) = fifo_readers(&dir, 40);
    let mut p = r.cmd(&[]).start();
    let podvisor = p.init_pid();
    wait_until("forty readers", || reading(podvisor, &fifo) == 40);
    drop(writer);
    assert_eq!(p.wait().code(), Some(0), "the pod completes");
    p.assert_no_leftovers();
    for i in 0..40 {
        assert!(
            r.reasons(&format!("c{i}"))
                .contains(&"Completed".to_string()),
            "c{i}: {:?}",
            r.reasons(&format!("c{i}"))
        );
    }
}

#[test]
fn a_container_exit_is_noted_when_its_sigchld_was_merged() {
    // Four containers exit at once while the run is held on the first exit: the other three's
    // SIGCHLDs merge into one. The look through all children is put off for ten minutes, so
    // only each container's own notice (its pidfd) can tell the run of the other two.
    let dir = TempDir::new();
    let (r, fifo, writer) = fifo_readers(&dir, 4);
    let gate = dir.file("gate");
    let mut p = (r.cmd(&[]))
        .env("PODVISOR_TEST_REAP_SCAN_MS", "600000")
        .env("PODVISOR_STALL", "run.exit")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    let podvisor = p.init_pid();
    wait_until("four readers", || reading(podvisor, &fifo) == 4);
    drop(writer);
    wait_until("the run held on the first exit", || gate.exists());
    // The other three have exited meanwhile: zombies, not yet reaped.
    wait_until("three zombies", || {
        let zombies = children_of(podvisor)
            .iter()
            .filter(|(pid, _)| is_zombie(*pid))
            .count();
        zombies == 3
    });
    // Let each exit through as the run comes to it, until the pod completes.
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.running() {
        assert!(
            Instant::now() < deadline,
            "the merged exits were not noted: {:?}",
            r.reasons("c3")
        );
        let _ = std::fs::remove_file(&gate);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(p.wait().code(), Some(0), "the pod completes");
    p.assert_no_leftovers();
    for i in 0..4 {
        let reasons = r.reasons(&format!("c{i}"));
        assert!(
            reasons.contains(&"Completed".to_string()),
            "c{i}: {reasons:?}"
        );
    }
}

/// A pod of `n` containers (`c0`, `c1`, ...) that each read the FIFO `go` in `dir` until its
/// end, and the FIFO held open for writing: dropping the writer once every reader has it open
/// ends them all at once.
fn fifo_readers(dir: &TempDir, n: usize) -> (PodRun, std::path::PathBuf, std::fs::File) {
    let fifo = dir.file("go");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let mut containers = String::from("  containers:\n");
    for i in 0..n {
        containers.push_str(&format!(
            "  - {{name: c{i}, command: [cat, '{}']}}\n",
            fifo.display()
        ));
    }
    let writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    (PodRun::new(&pod("Never", &containers)), fifo, writer)
}

/// How many children of `podvisor` read `fifo`.
fn reading(podvisor: i32, fifo: &Path) -> usize {
    children_of(podvisor)
        .iter()
        .filter(|(pid, _)| std::fs::read_link(format!("/proc/{pid}/fd/3")).is_ok_and(|l| l == fifo))
        .count()
}

#[test]
fn init_containers_and_sidecars_in_order() {
    let r = PodRun::new(&pod(
        "Never",
        "  initContainers:
  - {name: side, restartPolicy: Always, command: [sleep, '100']}
  - {name: setup, command: [sh, -c, 'echo set up']}
  containers:
  - {name: app, command: [sh, -c, 'sleep 0.2']}
",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    let order: Vec<String> = r
        .events()
        .iter()
        .filter(|e| {
            e["reason"] == "Started" || e["reason"] == "Killing" || e["reason"] == "Completed"
        })
        .map(|e| {
            format!(
                "{} {}",
                e["reason"].as_str().unwrap(),
                e["object"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            "Started side",
            "Started setup",
            "Completed setup",
            "Started app",
            "Completed app",
            "Killing side"
        ]
    );
}

#[test]
fn environment_and_downward_api_reach_the_process() {
    let r = PodRun::new(&pod(
        "Never",
        "  containers:
  - name: app
    command: [sh, -c, 'echo \"$GREETING|$POD|$NS|$TIER|$IP|$(GREETING)|$$HOME\"; pwd']
    workingDir: /tmp
    env:
    - {name: GREETING, valueFrom: {configMapKeyRef: {name: cfg, key: greeting}}}
    - {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: TIER, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['tier']\"}}}
    - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {greeting: hello}
",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    let log = r.log("app", 1);
    let lines: Vec<&str> = log
        .lines()
        .map(|l| l.splitn(4, ' ').nth(3).unwrap())
        .collect();
    // `$(GREETING)` is expanded by podvisor, `$$HOME` becomes a literal `$HOME` for the shell.
    let home = std::env::var("HOME").unwrap_or_default();
    assert_eq!(
        lines,
        [
            format!("hello|p|ns|web|127.0.0.1|hello|{home}"),
            "/tmp".to_string()
        ]
    );
}

#[test]
fn a_container_gets_the_runtimes_umask_not_the_shells() {
    // runc gives 0022 when the spec names no umask; podvisor started under 077 does the same.
    let r = PodRun::new(&pod(
        "Never",
        "  containers:\n  - {name: app, command: [sh, -c, umask]}\n",
    ));
    let out = r
        .cmd_under(&["sh", "-c", "umask 077; exec \"$0\" \"$@\""], &[])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(r.log_lines("app", 1), ["0022"]);
}

#[test]
fn a_command_that_cannot_run_is_a_start_error() {
    // The pod fails (exit 1) with a StartError (128) whose message says why.
    let start_error = |containers: &str| -> String {
        let r = PodRun::new(&pod("Never", containers));
        let out = r.cmd(&[]).output();
        assert_eq!(out.code(), 1, "{out:?}");
        let failed = r
            .events()
            .into_iter()
            .find(|e| e["reason"] == "Failed")
            .expect("a Failed event");
        assert_eq!(failed["exitCode"], 128);
        failed["message"].as_str().unwrap().to_string()
    };
    let message = start_error("  containers:\n  - {name: app, command: [/no/such/program]}\n");
    assert!(
        message.contains("exec: \"/no/such/program\": executable file not found"),
        "{message}"
    );
    // A step before the exec says which, not "executable file not found".
    let message = start_error(
        "  containers:\n  - {name: app, command: ['true'], workingDir: /no/such/dir}\n",
    );
    assert!(
        message.contains(
            "cannot chdir to its working directory /no/such/dir: No such file or directory"
        ) && !message.contains("executable"),
        "{message}"
    );
    // A variable execve cannot pass (a NUL byte in its value) is named.
    let message = start_error(
        "  containers:\n  - name: app\n    command: ['true']\n    env: [{name: OK, value: a}, {name: BAD, value: \"a\\0b\"}]\n",
    );
    assert!(
        message.contains("cannot set its environment: the variable \"BAD\" holds a NUL byte"),
        "{message}"
    );
}

#[test]
fn stop_is_graceful_then_forceful() {
    // A container that exits on SIGTERM: stopped on request, exit 0.
    let r = PodRun::new(&pod("Always", "  containers:\n  - {name: app, command: [sh, -c, 'trap \"exit 0\" TERM; echo up; while :; do sleep 0.05; done']}\n"));
    let mut p = r.cmd(&[]).start();
    wait_until("app up", || {
        r.dir.file("state/logs/app/1.log").exists() && r.log("app", 1).contains("up")
    });
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
    p.assert_no_leftovers();
    assert!(r.reasons("app").contains(&"Killing".to_string()));

    // One that ignores SIGTERM: SIGKILL after the grace, raised to the 2 s floor (grace is 1).
    let r = PodRun::new(&pod("Always", "  containers:\n  - {name: app, command: [sh, -c, 'trap \"\" TERM; echo up; while :; do sleep 0.05; done']}\n"));
    let mut p = r.cmd(&[]).start();
    wait_until("app up", || {
        r.dir.file("state/logs/app/1.log").exists() && r.log("app", 1).contains("up")
    });
    let sent = Instant::now();
    p.signal("INT");
    assert_eq!(p.wait().code(), Some(0));
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(1900),
        "SIGKILL came after {took:?}"
    );
    p.assert_no_leftovers();
    let exit = r
        .events()
        .into_iter()
        .rfind(|e| e["object"] == "app" && e["exitCode"].is_number())
        .unwrap();
    assert_eq!(exit["exitCode"], 137, "{exit}");
}

#[test]
fn nothing_a_container_started_survives_it() {
    // The main process leaves a background sleep in its group and exits.
    let r = PodRun::new(&pod(
        "Never",
        "  containers:\n  - {name: app, command: [sh, -c, 'sleep 100 & echo left']}\n",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    // `output()` has checked that no process with this test's tag is left.
}

#[test]
fn bad_input_exits_2() {
    let r = PodRun::new(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {podvisor.io/root-from: host}}\nspec:\n  containers: [{name: c}]\n",
    );
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr
            .contains("pod.yaml:5:16: spec.containers[0].command: Required value"),
        "{out:?}"
    );
    let out = Run::new(podvisor())
        .args(["run", "--backoff-initial", "soon", "x.yaml"])
        .output();
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr.starts_with(
            "error: invalid value 'soon' for '--backoff-initial <DUR>': invalid duration"
        ),
        "{out:?}"
    );
}

#[test]
fn the_web_example_serves_and_stops() {
    if !have(
        "python3",
        "examples/pods/web.yaml serves with python3 -m http.server",
    ) {
        return;
    }
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pods/web.yaml");
    let r = PodRun::new(&std::fs::read_to_string(example).unwrap());
    let listing = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir("/")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let before = listing();
    let mut p = r.cmd(&[]).start();
    wait_until("the app started", || {
        r.reasons("app").contains(&"Started".to_string())
    });
    // Its /content mount point is made inside the containers' roots, never on the host.
    if is_root() {
        assert_eq!(listing(), before, "while it runs");
    }
    // The init container ran first and the sidecar runs beside the app.
    assert_eq!(r.reasons("prepare"), ["Created", "Started", "Completed"]);
    assert!(r.reasons("log-shipper").contains(&"Started".to_string()));
    // python's http.server takes a moment to listen.
    let mut response = String::new();
    wait_until("an HTTP answer", || {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect("127.0.0.1:8080") else {
            return false;
        };
        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
        response.clear();
        s.read_to_string(&mut response).is_ok() && !response.is_empty()
    });
    assert!(response.starts_with("HTTP/1.0 200"), "{response}");
    // The page the init container wrote into the emptyDir both mount at /content.
    assert!(response.ends_with("hello from web\n"), "{response}");
    // Its readiness probe (httpGet on the named port) makes it Ready.
    wait_until("app Ready", || {
        r.reasons("app").contains(&"Ready".to_string())
    });
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
    p.assert_no_leftovers();
    // Both are told at once (Killing), the app exits first, the sidecar last.
    let exits: Vec<String> = r
        .events()
        .iter()
        .filter(|e| e.get("exitCode").is_some() && e["object"] != "prepare")
        .map(|e| e["object"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(exits, ["app", "log-shipper"]);
    assert_eq!(listing(), before, "after the run");
}

#[test]
fn a_client_looking_at_the_lock_as_the_run_starts_does_not_turn_it_away() {
    // `flock` holds the state dir's lock for 200 ms (as a client asking whether a run is
    // there holds it for a moment): the run waits for it, and starts.
    let r = PodRun::new(&pod(
        "Never",
        "  containers:\n  - {name: app, command: ['true']}\n",
    ));
    let state = r.dir.file("state");
    std::fs::create_dir_all(&state).unwrap();
    let lock = state.join("podvisor.lock");
    let mut held = Run::new("flock").arg(&lock).args(["sleep", "0.2"]).start();
    wait_until("flock holds the lock", || {
        Command::new("flock")
            .args(["-n", "-E", "9"])
            .arg(&lock)
            .arg("true")
            .status()
            .is_ok_and(|s| s.code() == Some(9))
    });
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(held.wait().success());
}

#[test]
fn one_pod_per_state_dir() {
    let r = PodRun::new(&pod(
        "Always",
        "  containers:\n  - {name: app, command: [sleep, '100']}\n",
    ));
    let mut first = r.cmd(&[]).start();
    wait_until("the app started", || {
        r.reasons("app").contains(&"Started".to_string())
    });
    let second = r.cmd(&[]).output();
    assert_eq!(second.code(), 2, "{second:?}");
    assert!(
        second
            .stderr
            .contains("in use by another podvisor run (pid "),
        "{second:?}"
    );
    assert!(
        second.stderr.contains("one pod per state dir"),
        "{second:?}"
    );
    // The first one is unharmed and stops as usual; then the dir is free again.
    assert!(first.running());
    first.signal("TERM");
    assert_eq!(first.wait().code(), Some(0));
    first.assert_no_leftovers();
    let r2 = PodRun::new(&pod(
        "Never",
        "  containers:\n  - {name: app, command: [/bin/true]}\n",
    ));
    let again = Run::new(podvisor())
        .args(["run", "-q", "--state-dir"])
        .arg(r.dir.file("state"))
        .arg(r2.dir.file("pod.yaml"))
        .output();
    assert_eq!(again.code(), 0, "{again:?}");
}

/// Started from a shell that ignores SIGINT and SIGQUIT (a background job of a script), the
/// run, and a keeper under `--live-restore`, still start containers with no signal ignored, as
/// a runtime does: Ctrl-C in `podvisor exec -it` reaches the command.
#[test]
fn containers_start_with_no_signal_ignored_whatever_the_run_inherited() {
    for extra in [&[][..], &["--live-restore"][..]] {
        let r = PodRun::new(&pod(
            "Never",
            "  containers:\n  - name: app\n    command: [sh, -c, 'grep SigIgn /proc/self/status']\n",
        ));
        let mut args: Vec<String> = vec![podvisor().display().to_string(), "run".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(["-q".into(), "--state-dir".into()]);
        args.push(r.dir.file("state").display().to_string());
        args.push(r.dir.file("pod.yaml").display().to_string());
        let out = Run::new("sh")
            .arg("-c")
            .arg("trap '' INT QUIT; exec \"$@\"")
            .arg("sh")
            .args(&args)
            .output();
        assert_eq!(out.code(), 0, "{out:?}");
        let log = r.log("app", 1);
        let ignored = log
            .split("SigIgn:\t")
            .nth(1)
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or_else(|| panic!("{log}"));
        // Signals 32 and 33 are glibc's own (no program sets them through libc): whatever this
        // test's parents left there stays.
        assert_eq!(ignored & !(0b11 << 31), 0, "{extra:?}: {log}");
    }
}

/// A write to a keeper or a client that has gone is EPIPE for the run, never its death by
/// SIGPIPE: the run blocks SIGPIPE (its disposition stays as inherited), and its containers
/// start with the signal mask the run was started with.
#[test]
fn a_run_blocks_sigpipe_and_its_containers_get_the_mask_it_was_given() {
    for extra in [&[][..], &["--live-restore"][..]] {
        let r = PodRun::new(&pod(
            "Never",
            "  containers:\n  - name: app\n    command: [sh, -c, 'grep SigBlk /proc/self/status; sleep 600']\n",
        ));
        let mut p = r.cmd(extra).start();
        r.wait_event("app", "Started", 1);
        let field = |text: &str, name: &str| {
            (text.split(name).nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| u64::from_str_radix(v, 16).ok())
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        let run = std::fs::read_to_string(format!("/proc/{}/status", p.init_pid())).unwrap();
        let pipe = 1u64 << (libc::SIGPIPE - 1);
        assert_ne!(field(&run, "SigBlk:") & pipe, 0, "{extra:?}: {run}");
        assert_eq!(field(&run, "SigIgn:") & pipe, 0, "{extra:?}: {run}");
        wait_until("app's mask in its log", || {
            r.log("app", 1).contains("SigBlk")
        });
        assert_eq!(field(&r.log("app", 1), "SigBlk:"), 0, "{extra:?}");
        assert_eq!(client(&r, &["stop"]).code(), 0);
        assert_eq!(p.wait().code(), Some(0), "{:?}", p.stderr);
    }
}

#[test]
fn a_run_makes_the_next_container_while_one_start_is_held() {
    // Without a keeper the run makes a batch's containers two at once too (its starters): the
    // first start held on its thread (`PODVISOR_STALL`, debug builds), the second container
    // runs all the same; neither is reported before the first, and both are logged and
    // running once it is let go.
    let r = PodRun::new(&pod(
        "Always",
        "  containers:\n  - {name: one, command: [sh, -c, 'echo one; exec sleep 631']}\n  - {name: two, command: [sh, -c, 'echo two; exec sleep 632']}\n",
    ));
    let gate = r.dir.file("gate");
    let mut p = (r.cmd(&[]))
        .env("PODVISOR_STALL", "run.start@1")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    wait_until("the first start held on its starter", || gate.exists());
    wait_until("the second container running", || {
        count_cmdline(&["sleep", "632"]) == 1
    });
    assert_eq!(count_cmdline(&["sleep", "631"]), 0);
    // Neither is reported yet: the first was asked first.
    assert!(r.events().iter().all(|e| e["reason"] != "Started"));
    std::fs::remove_file(&gate).unwrap();
    r.wait_event("one", "Started", 1);
    r.wait_event("two", "Started", 1);
    wait_until("both running and logged", || {
        count_cmdline(&["sleep", "631"]) == 1
            && r.log_lines("one", 1) == ["one"]
            && r.log_lines("two", 1) == ["two"]
    });
    assert_eq!(client(&r, &["stop"]).code(), 0);
    assert_eq!(p.wait().code(), Some(0), "{:?}", p.stderr);
    assert_eq!(
        count_cmdline(&["sleep", "631"]) + count_cmdline(&["sleep", "632"]),
        0
    );
    p.assert_no_leftovers();
}

#[test]
fn starts_that_find_no_descriptor_fail_and_the_pod_runs_on() {
    // A pod larger than the run's limit on open files (hard and soft, so that the run cannot
    // raise it): the starts that find no descriptor for their pipes or cgroup files fail, say
    // why, and are tried again after their back-off, as any failed start; the containers that
    // did start run on until the pod is stopped, and nothing is left behind.
    if !have("prlimit", "limiting the run's open files") {
        return;
    }
    // Sleeps of their own length, which no other test runs.
    let sleepers = sleepers(30).replace("'600'", "'641'");
    let r = PodRun::new(&pod("Always", &sleepers));
    let mut p = r
        .cmd_under(&["prlimit", "--nofile=64:64", "--"], &[])
        .start();
    let mut failed = Vec::new();
    wait_until("a start failed for lack of descriptors", || {
        failed = (r.events().into_iter())
            .filter(|e| e["reason"] == "Failed")
            .filter(|e| {
                e["message"]
                    .as_str()
                    .unwrap()
                    .contains("Too many open files")
            })
            .collect();
        !failed.is_empty()
    });
    assert_eq!(failed[0]["type"], "Warning");
    // Those that started run (a failed start is tried again at once, then after 10 s: more
    // may start meanwhile, as descriptors come free).
    wait_until("the containers that started running", || {
        count_cmdline(&["sleep", "641"]) == started(&r)
    });
    let started = started(&r);
    assert!((1..30).contains(&started), "{started} started");
    assert!(p.running(), "{:?}", p.stderr);
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0), "{:?}", p.stderr);
    assert_eq!(count_cmdline(&["sleep", "641"]), 0);
    p.assert_no_leftovers();
}

#[test]
fn a_run_gives_back_the_heap_its_starts_freed() {
    // A hundred containers started at once: what the run allocated to start them and freed
    // once they ran goes back to the kernel when it has nothing left to do (glibc keeps the
    // pages of freed memory resident unless asked), so the heap's resident size falls below
    // what it was before. The run is held where it first settles, before it gives anything
    // back, so that what it held then is known however slow this machine is.
    let r = PodRun::new(&pod("Never", &sleepers(100)));
    let gate = r.dir.file("gate");
    let mut p = (r.cmd(&[]))
        .env("PODVISOR_STALL", "run.settle@1")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    let run = p.init_pid();
    wait_until("held as it settles", || gate.exists());
    let held = heap_kib(run);
    assert!(held > 0, "no heap");
    std::fs::remove_file(&gate).unwrap();
    wait_until("the heap given back", || heap_kib(run) < held);
    wait_until("a hundred started", || started(&r) == 100);
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
    p.assert_no_leftovers();
}

/// `containers:` of `n` containers `c0`, `c1`, … that sleep for ten minutes.
pub(crate) fn sleepers(n: usize) -> String {
    let mut containers = String::from("  containers:\n");
    for i in 0..n {
        containers.push_str(&format!("  - {{name: c{i}, command: [sleep, '600']}}\n"));
    }
    containers
}

/// How many `Started` events the run has written.
pub(crate) fn started(r: &PodRun) -> usize {
    (r.events().iter())
        .filter(|e| e["reason"] == "Started")
        .count()
}

/// The resident size of process `pid`'s heap (its `[heap]` mapping), KiB.
pub(crate) fn heap_kib(pid: i32) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let Some(at) = smaps.find("[heap]") else {
        return 0;
    };
    (smaps[at..].lines())
        .find_map(|l| l.strip_prefix("Rss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
