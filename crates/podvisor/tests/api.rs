//! The status API and its clients through the binary: `status` (its JSON read back as a
//! k8s-openapi Pod), `describe`, `logs` (with --previous, across restarts and rotation), `events`,
//! `restart`, `stop`, `--metrics-addr`, the socket's permissions, and bad requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::harness::*;
use crate::probes::{free_port, pod_with, stop};

fn started(r: &PodRun, container: &str, n: usize) {
    r.wait_event(container, "Started", n);
}

const MIXED: &str = "  initContainers:
  - {name: setup, image: busybox, command: [sh, -c, 'echo setting up']}
  containers:
  - name: web
    image: nginx
    command: [sh, -c, 'echo serving; exec sleep 600']
    readinessProbe: {exec: {command: ['true']}, periodSeconds: 1}
  - {name: crash, image: busybox, command: [sh, -c, 'echo crash $$; exit 3']}
";

#[test]
fn status_is_a_real_pod_status() {
    let r = PodRun::new(&pod_with("Always", 1, MIXED));
    // The first restart is immediate, the second waits a minute: once crash's first BackOff
    // is out it sits in CrashLoopBackOff (a running crash, with no readiness probe, would
    // count as ready for that instant).
    let mut p = r.cmd(&["--backoff-initial", "60s"]).start();
    r.wait_event("web", "Ready", 1);
    started(&r, "crash", 2);
    r.wait_event("crash", "BackOff", 1);
    let out = client(&r, &["status", "-o", "json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let pod: Pod = serde_json::from_str(&out.stdout).expect("a v1 Pod");
    let status = pod.status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let cond = |t: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no condition {t}"))
            .clone()
    };
    assert_eq!(cond("Initialized").status, "True");
    assert_eq!(cond("ContainersReady").status, "False");
    assert_eq!(cond("Ready").reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(
        cond("Ready").message.as_deref(),
        Some("containers with unready status: [crash]")
    );
    assert!(cond("Ready").last_transition_time.is_some());
    let init = &status.init_container_statuses.as_ref().unwrap()[0];
    assert_eq!(init.name, "setup");
    let t = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    let mains = status.container_statuses.unwrap();
    let web = mains.iter().find(|c| c.name == "web").unwrap();
    assert!(web.ready && web.started == Some(true));
    assert!(web.state.as_ref().unwrap().running.is_some());
    assert!(web
        .container_id
        .as_deref()
        .unwrap()
        .starts_with("podvisor://"));
    assert_eq!(web.image, "nginx");
    let crash = mains.iter().find(|c| c.name == "crash").unwrap();
    assert!(!crash.ready);
    assert_eq!(crash.restart_count, 1);
    let waiting = crash.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    let last = crash
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (3, Some("Error")));
    // The table and describe views of the same pod.
    let table = client(&r, &["status"]);
    assert!(
        table.stdout.starts_with("NAME   READY   STATUS"),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("\np      1/2"), "{}", table.stdout);
    let yaml = client(&r, &["status", "-o", "yaml"]);
    assert!(yaml.stdout.contains("kind: Pod"), "{}", yaml.stdout);
    let describe = client(&r, &["describe"]);
    assert!(
        describe.stdout.contains("Restart Count:"),
        "{}",
        describe.stdout
    );
    assert!(describe.stdout.contains("Events:"));
    assert!(describe.stdout.contains("BackOff"), "{}", describe.stdout);
    // No container asks for cpu or memory: BestEffort, as the API server classes it.
    assert!(
        describe.stdout.contains("\nQoS Class:    BestEffort\n"),
        "{}",
        describe.stdout
    );
    stop(&mut p);
}

#[test]
fn logs_previous_and_rotation() {
    // Each instance writes its number and 300 lines of 100 bytes (~35 KiB in the log) with
    // 8 KiB log files: rotation happens within every instance.
    let spec = "  containers:\n  - name: app\n    command: [sh, -c, 'n=$(cat /proc/self/stat | cut -d\" \" -f1); echo start $n; i=0; while [ $i -lt 300 ]; do printf \"%0100d\\n\" $i; i=$((i+1)); done; echo end $n; echo oops >&2; exit 1']\n";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let mut p = r
        .cmd(&[
            "--backoff-initial",
            "5s",
            "--log-max-size",
            "8Ki",
            "--log-max-files",
            "10",
        ])
        .start();
    // Two whole instances: the second then waits 5 s to restart.
    r.wait_event("app", "Error", 2);
    stop(&mut p);
    let logs = r.dir.file("state").join("logs").join("app");
    assert!(logs.join("1.log.1").exists(), "rotated");
    let current = client(&r, &["logs", "app"]);
    assert_eq!(current.code(), 0, "{current:?}");
    let lines: Vec<&str> = current.stdout.lines().collect();
    assert!(lines[0].starts_with("start "), "{:?}", &lines[..3]);
    assert_eq!(lines.len(), 303, "all of the instance, across its files");
    assert_eq!(lines[1], format!("{:0100}", 0));
    assert_eq!(lines[301].split(' ').next(), Some("end"));
    assert_eq!(lines[302], "oops");
    let previous = client(&r, &["logs", "app", "--previous"]);
    assert_eq!(previous.code(), 0);
    assert!(previous.stdout.lines().count() == 303);
    assert_ne!(
        previous.stdout.lines().next(),
        current.stdout.lines().next(),
        "another instance"
    );
    let tail = client(&r, &["logs", "app", "--tail", "2", "--timestamps"]);
    let t: Vec<&str> = tail.stdout.lines().collect();
    assert_eq!(t.len(), 2);
    assert!(t[1].ends_with(" oops") && t[1].starts_with("20"), "{t:?}");
    let since = client(&r, &["logs", "app", "--since", "1h"]);
    assert_eq!(since.stdout, current.stdout);
    let none = client(&r, &["logs", "app", "--since", "1ms"]);
    assert_eq!(none.stdout, "");
}

#[test]
fn logs_follow_ends_with_the_instance_and_errors_are_clear() {
    let spec = "  containers:\n  - {name: app, command: [sh, -c, 'echo one; sleep 1; echo two; sleep 1; exit 1']}\n  - {name: idle, command: [sleep, '600']}\n";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let mut p = r.cmd(&["--backoff-initial", "100ms"]).start();
    started(&r, "app", 1);
    let follow = client(&r, &["logs", "-f", "app"]);
    assert_eq!(follow.code(), 0);
    assert_eq!(follow.stdout, "one\ntwo");
    // --previous of a container that never restarted, an unknown container.
    let none = client(&r, &["logs", "idle", "--previous"]);
    assert_eq!(none.code(), 1);
    assert!(
        none.stderr
            .contains("previous terminated container \"idle\" in pod \"p\" not found"),
        "{none:?}"
    );
    let bad = client(&r, &["logs", "nope"]);
    assert_eq!(bad.code(), 1);
    assert!(
        bad.stderr.contains("container nope is not valid for pod p"),
        "{bad:?}"
    );
    let bad = client(&r, &["restart", "nope"]);
    assert_eq!(bad.code(), 1);
    assert!(
        bad.stderr.contains("no container \"nope\" in pod p"),
        "{bad:?}"
    );
    stop(&mut p);
}

#[test]
fn restart_a_container_and_the_whole_pod() {
    let dir = TempDir::new();
    let runs = dir.file("runs");
    let spec = format!(
        "  initContainers:\n  - {{name: setup, command: [sh, -c, 'echo setup >> {runs}']}}\n  containers:\n  - {{name: app, command: [sh, -c, 'echo app >> {runs}; exec sleep 600']}}\n  - {{name: other, command: [sleep, '600']}}\n",
        runs = runs.display()
    );
    let r = PodRun::new(&pod_with("Never", 1, &spec));
    let mut p = r.cmd(&[]).start();
    started(&r, "app", 1);
    started(&r, "other", 1);
    // One container: restarted under restartPolicy Never too; the others untouched.
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    started(&r, "app", 2);
    // Its shell has written its line before the pod restart can stop it.
    wait_until("two runs of app", || {
        std::fs::read_to_string(&runs).unwrap_or_default() == "setup\napp\napp\n"
    });
    assert_eq!(r.find("other", "Started").len(), 1);
    assert_eq!(r.find("app", "Started")[1]["restartCount"], 1);
    // A regular init container is not restarted on its own.
    let init = client(&r, &["restart", "setup"]);
    assert_eq!(init.code(), 1);
    assert!(
        init.stderr.contains("setup is an init container"),
        "{init:?}"
    );
    // The whole pod: everything stops, the init container runs again, then the rest.
    assert_eq!(client(&r, &["restart"]).code(), 0);
    started(&r, "other", 2);
    started(&r, "app", 3);
    assert_eq!(r.find("pod", "PodRestarting").len(), 1);
    assert_eq!(r.find("setup", "Started").len(), 2, "init ran again");
    wait_until("three runs of app", || {
        std::fs::read_to_string(&runs).unwrap_or_default() == "setup\napp\napp\nsetup\napp\n"
    });
    let status: Pod = serde_json::from_str(&client(&r, &["status", "-o", "json"]).stdout).unwrap();
    let counts: Vec<i32> = status
        .status
        .unwrap()
        .container_statuses
        .unwrap()
        .iter()
        .map(|c| c.restart_count)
        .collect();
    assert_eq!(counts, [2, 1], "restartCount only grows");
    // `stop` ends the run gracefully, exit 0, and waits for it.
    let out = client(&r, &["stop"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(p.wait().code(), Some(0));
    p.assert_no_leftovers();
    // The ended pod is still shown, as it was when the run ended; it takes no requests.
    let ended = client(&r, &["status"]);
    assert_eq!(ended.code(), 0, "{ended:?}");
    assert!(
        ended.stdout.lines().nth(1).unwrap().starts_with("p "),
        "{ended:?}"
    );
    let gone = client(&r, &["restart"]);
    assert_eq!(gone.code(), 1);
    assert!(gone.stderr.contains("no pod is running"), "{gone:?}");
}

#[test]
fn events_and_status_streams_survive_clients_that_come_and_go() {
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sleep, '600']}\n",
    ));
    let mut p = r.cmd(&[]).start();
    started(&r, "app", 1);
    let spawn = |args: &[&str]| {
        Command::new(podvisor())
            .args(args)
            .arg("--state-dir")
            .arg(r.dir.file("state"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut events = spawn(&["events", "-w", "-o", "json"]);
    let mut watch = spawn(&["status", "-w", "-o", "json"]);
    let mut quitter = spawn(&["events", "-w"]);
    let mut ev = BufReader::new(events.stdout.take().unwrap());
    let mut line = String::new();
    ev.read_line(&mut line).unwrap();
    assert!(line.contains("\"reason\":\"Created\""), "{line}");
    // One client vanishes mid-stream; a raw client sends garbage and one a half request.
    quitter.kill().unwrap();
    quitter.wait().unwrap();
    let sock = r.dir.file("state").join("podvisor.sock");
    let mut garbage = UnixStream::connect(&sock).unwrap();
    garbage.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    let mut answer = String::new();
    garbage.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let mut half = UnixStream::connect(&sock).unwrap();
    half.write_all(b"GET /sta").unwrap();
    drop(half);
    // The pod is unharmed and the streams go on.
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    started(&r, "app", 2);
    wait_until("the restart in the event stream", || {
        line.clear();
        ev.read_line(&mut line).unwrap() > 0 && line.contains("\"restartCount\":1")
    });
    let mut st = BufReader::new(watch.stdout.take().unwrap());
    let mut first = String::new();
    st.read_line(&mut first).unwrap();
    let pod: Pod = serde_json::from_str(&first).unwrap();
    assert!(pod.status.is_some());
    stop(&mut p);
    // The streams end when the pod does.
    assert!(events.wait().unwrap().success());
    assert!(watch.wait().unwrap().success());
}

/// A raw watch of `path` on the pod's socket, its head read: its lines as they come.
fn raw_watch(r: &PodRun, path: &str) -> BufReader<UnixStream> {
    let mut s = UnixStream::connect(r.dir.file("state").join("podvisor.sock")).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: podvisor\r\n\r\n").unwrap();
    let mut reader = BufReader::new(s);
    let mut head = String::new();
    while reader.read_line(&mut head).unwrap() > 2 && !head.ends_with("\r\n\r\n") {}
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    reader
}

#[test]
fn a_status_watch_gets_each_change_whole_or_as_a_patch_of_the_one_before() {
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sleep, '600']}\n  - {name: other, command: [sleep, '600']}\n  - {name: third, command: [sleep, '600']}\n",
    ));
    let mut p = r.cmd(&[]).start();
    started(&r, "third", 1);
    wait_until("every container ready", || {
        client(&r, &["status"]).stdout.contains("3/3")
    });
    let mut whole = raw_watch(&r, "/status?watch=1");
    let mut patches = raw_watch(&r, "/status?watch=1&patch=1");
    let mut cli = Command::new(podvisor())
        .args(["status", "-w", "-o", "json", "--state-dir"])
        .arg(r.dir.file("state"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cli_out = BufReader::new(cli.stdout.take().unwrap());
    let read_all =
        |reader: &mut dyn BufRead| -> Vec<String> { reader.lines().map(|l| l.unwrap()).collect() };
    // Each has the Pod now before anything changes.
    let mut first = String::new();
    for reader in [&mut whole as &mut dyn BufRead, &mut patches, &mut cli_out] {
        first.clear();
        reader.read_line(&mut first).unwrap();
        assert!(first.contains("\"containerStatuses\""), "{first}");
    }
    let now = first.trim_end().to_string();
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    started(&r, "app", 2);
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    started(&r, "app", 3);
    stop(&mut p);
    // Every change, whole; then as patches, each of what changed only: applied to the Pod
    // before, each makes the same line. `status -w -o json` prints the same lines.
    let lines = read_all(&mut whole);
    let ops = read_all(&mut patches);
    // Each change is there: both restarts, then the stop (whose exits may all come in one
    // turn of the run, and then in one line).
    let pods: Vec<serde_json::Value> = (lines.iter())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let app_restarts: Vec<&serde_json::Value> = (pods.iter())
        .map(|p| &p["status"]["containerStatuses"][0]["restartCount"])
        .collect();
    for n in [1, 2] {
        assert!(app_restarts.iter().any(|c| **c == n), "{lines:?}");
    }
    let last = pods.last().unwrap()["status"]["containerStatuses"].clone();
    let ended = |c: &serde_json::Value| c["state"]["terminated"].is_object();
    assert!(last.as_array().unwrap().iter().all(ended), "{lines:?}");
    assert_eq!(ops.len(), lines.len(), "{ops:?}");
    let mut doc: serde_json::Value = serde_json::from_str(&now).unwrap();
    for (op, line) in ops.iter().zip(&lines) {
        assert!(op.starts_with("[{\"op\":"), "{op}");
        let patch: json_patch::Patch = serde_json::from_str(op).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(&serde_json::to_string(&doc).unwrap(), line);
    }
    let one_container: Vec<&String> = ops
        .iter()
        .filter(|op| op.contains("\"restartCount\":1") && !op.contains("/metadata"))
        .collect();
    assert!(!one_container.is_empty(), "{ops:?}");
    for op in one_container {
        assert!(!op.contains("\"name\":\"other\""), "{op}");
    }
    assert_eq!(read_all(&mut cli_out), lines);
    assert!(cli.wait().unwrap().success());
}

#[test]
fn the_socket_is_for_its_owner_only_and_a_stale_one_is_replaced() {
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sleep, '600']}\n",
    ));
    let mut p = r.cmd(&[]).start();
    started(&r, "app", 1);
    let sock = r.dir.file("state").join("podvisor.sock");
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // As nobody: refused by the socket's mode, with a clear message.
    std::fs::set_permissions(r.dir.file("state"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Run::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(podvisor())
        .args(["status", "--state-dir"])
        .arg(r.dir.file("state"))
        .output();
    if std::process::Command::new("id")
        .output()
        .unwrap()
        .stdout
        .starts_with(b"uid=0(")
    {
        assert_eq!(out.code(), 1, "{out:?}");
        assert!(out.stderr.contains("permission denied"), "{out:?}");
    }
    // A run killed outright leaves its socket; clients say so, and the next run replaces it.
    p.signal("KILL");
    p.wait();
    assert!(sock.exists());
    let stale = client(&r, &["status"]);
    assert_eq!(stale.code(), 1);
    assert!(
        stale
            .stderr
            .contains("ended without saying how the pod was (killed?)"),
        "{stale:?}"
    );
    let stale = client(&r, &["restart"]);
    assert_eq!(stale.code(), 1);
    assert!(
        stale.stderr.contains("left by a run that ended"),
        "{stale:?}"
    );
    // Its containers die with it (parent-death signal); wait for that before the next run.
    p.assert_no_leftovers();
    let mut again = r.cmd(&[]).start();
    wait_until("a second Started", || r.find("app", "Started").len() >= 2);
    assert_eq!(client(&r, &["status"]).code(), 0);
    stop(&mut again);
}

#[test]
fn metrics_over_http() {
    let port = free_port();
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - name: app\n    command: [sleep, '600']\n    readinessProbe: {exec: {command: ['true']}, periodSeconds: 1}\n    livenessProbe: {exec: {command: ['false']}, periodSeconds: 1, failureThreshold: 100}\n",
    ));
    let addr = format!("127.0.0.1:{port}");
    let mut p = r.cmd(&["--metrics-addr", &addr]).start();
    r.wait_event("app", "Ready", 1);
    std::thread::sleep(Duration::from_millis(1500));
    let scrape = |path: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let text = scrape("/metrics");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let has = |prefix: &str| text.lines().any(|l| l.starts_with(prefix));
    assert!(has("prober_probe_total{container=\"app\",namespace=\"ns\",pod=\"p\",probe_type=\"Readiness\",result=\"successful\"} "), "{text}");
    assert!(has("prober_probe_total{container=\"app\",namespace=\"ns\",pod=\"p\",probe_type=\"Liveness\",result=\"failed\"} "), "{text}");
    assert!(has("prober_probe_duration_seconds_count{container=\"app\""));
    assert!(has(
        "podvisor_container_restarts_total{container=\"app\",namespace=\"ns\",pod=\"p\"} 0"
    ));
    assert!(has(
        "podvisor_pod_restarts_total{namespace=\"ns\",pod=\"p\"} 0"
    ));
    assert!(
        has("container_memory_working_set_bytes{container=\"app\""),
        "{text}"
    );
    assert!(has("container_cpu_usage_seconds_total{container=\"app\""));
    // Nothing but /metrics over the network.
    assert!(scrape("/stop").starts_with("HTTP/1.1 404"));
    stop(&mut p);
}

/// A scrape's text is made on a thread of its own: held there (`PODVISOR_STALL`, debug builds),
/// it keeps neither the API nor the pod waiting, and its client, done sending, still gets the
/// answer once it is let go. A scrape on the pod's socket queues behind it.
#[test]
fn a_scrape_being_made_keeps_nothing_else_waiting() {
    let port = free_port();
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - name: app\n    command: [sleep, '600']\n",
    ));
    let gate = r.dir.file("gate");
    let addr = format!("127.0.0.1:{port}");
    let mut p = (r.cmd(&["--metrics-addr", &addr]))
        .env("PODVISOR_STALL", "metrics.scrape")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    started(&r, "app", 1);
    let mut held = std::net::TcpStream::connect(&addr).unwrap();
    held.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    held.shutdown(std::net::Shutdown::Write).unwrap();
    wait_until("the scrape held on its thread", || gate.exists());
    // The loop goes on: the API answers, and a restart is made. (A status waits its turn
    // behind the scrape: the same thread adds its usage.)
    let out = client(&r, &["events"]);
    assert!(out.code() == 0 && out.stdout.contains("Started"), "{out:?}");
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    started(&r, "app", 2);
    // The held scrape has no answer yet.
    held.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 16];
    let early = held.read(&mut buf);
    assert!(
        early
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "an answer while the scrape was held: {early:?}"
    );
    held.set_nonblocking(false).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let sock = r.dir.file("state").join("podvisor.sock");
    let mut queued = UnixStream::connect(&sock).unwrap();
    queued
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    queued
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: podvisor\r\n\r\n")
        .unwrap();
    std::fs::remove_file(&gate).unwrap();
    let mut text = String::new();
    held.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // The restarts are those of when the scrape came.
    let restarts =
        "podvisor_container_restarts_total{container=\"app\",namespace=\"ns\",pod=\"p\"}";
    let has = |text: &str, line: &str| text.lines().any(|l| l == line);
    assert!(has(&text, &format!("{restarts} 0")), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    // The second is held in its turn, then answered with what is now.
    wait_until("the socket's scrape held", || gate.exists());
    std::fs::remove_file(&gate).unwrap();
    let mut text = String::new();
    queued.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(has(&text, &format!("{restarts} 1")), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("container_cpu_usage_seconds_total{container=\"app\"")),
        "{text}"
    );
    stop(&mut p);
}

#[test]
fn a_status_with_usage_is_made_apart_from_the_loop() {
    if !is_root() {
        skip("usage is read from each container's cgroup, which needs root");
        return;
    }
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - name: app\n    command: [sleep, '600']\n  - name: other\n    command: [sleep, '600']\n",
    ));
    let gate = r.dir.file("gate");
    let mut p = (r.cmd(&[]))
        .env("PODVISOR_STALL", "status.usage")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    started(&r, "app", 1);
    started(&r, "other", 1);
    let mut held = Run::new(podvisor())
        .args(["status", "-o", "json", "--state-dir"])
        .arg(r.dir.file("state"))
        .start();
    wait_until("the status's usage held on its thread", || gate.exists());
    // The loop goes on meanwhile: the API answers, and a restart is made and started.
    let out = client(&r, &["events"]);
    assert!(out.code() == 0 && out.stdout.contains("Started"), "{out:?}");
    assert_eq!(client(&r, &["restart", "other"]).code(), 0);
    started(&r, "other", 2);
    assert!(
        held.running(),
        "the status was answered while its usage was held"
    );
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(held.wait().code(), Some(0));
    held.drain();
    let pod: serde_json::Value = serde_json::from_str(&held.stdout.join("\n")).unwrap();
    // The status is the pod's when it was asked for: no restart yet. The usage is read
    // after: `app`'s instance is still there; `other`'s, ended since, has none to show.
    let statuses = pod["status"]["containerStatuses"].as_array().unwrap();
    assert!(statuses.iter().all(|c| c["restartCount"] == 0), "{pod}");
    let annotations = &pod["metadata"]["annotations"];
    let usage = annotations["podvisor.io/usage.app"]
        .as_str()
        .unwrap_or_default();
    assert!(
        usage.starts_with("cpu=") && usage.contains("s memory="),
        "{pod}"
    );
    assert!(
        annotations.get("podvisor.io/usage.other").is_none(),
        "{pod}"
    );
    // The next is made in its turn, with what is now.
    let mut next = Run::new(podvisor())
        .args(["describe", "--state-dir"])
        .arg(r.dir.file("state"))
        .start();
    wait_until("the describe's usage held", || gate.exists());
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(next.wait().code(), Some(0));
    next.drain();
    let text = next.stdout.join("\n");
    let fields = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let counts: Vec<Vec<String>> = (text.lines())
        .filter(|l| l.trim_start().starts_with("Restart Count:"))
        .map(fields)
        .collect();
    assert_eq!(counts.len(), 2, "{text}");
    assert_eq!(
        (counts[0][2].as_str(), counts[1][2].as_str()),
        ("0", "1"),
        "{text}"
    );
    let usages = (text.lines())
        .filter(|l| l.trim_start().starts_with("Usage:          cpu="))
        .count();
    assert_eq!(usages, 2, "{text}");
    stop(&mut p);
}

#[test]
fn volumes_are_shared_and_a_pod_restart_wipes_empty_dirs() {
    if !is_root() {
        skip("volumes need root (a mount namespace per container)");
        return;
    }
    let dir = TempDir::new();
    let mnt = dir.file("mnt"); // does not exist: podvisor makes the mount points, then removes them
    let spec = format!(
        "  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: conf, configMap: {{name: cfg}}}}
  initContainers:
  - {{name: init, command: [sh, -c, 'echo prepared >> {m}/data/log'], volumeMounts: [{{name: scratch, mountPath: {m}/data}}]}}
  containers:
  - name: app
    command: [sh, -c, 'echo started >> {m}/data/log; cat {m}/conf/color; echo; wc -l < {m}/data/log; touch {m}/conf/x 2>/dev/null || echo read-only; exec sleep 600']
    volumeMounts: [{{name: scratch, mountPath: {m}/data}}, {{name: conf, mountPath: {m}/conf, readOnly: true}}]
    readinessProbe: {{exec: {{command: [grep, -q, started, {m}/data/log]}}, periodSeconds: 1}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: cfg, namespace: ns}}
data: {{color: blue}}
",
        m = mnt.display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    // The exec probe runs in the container's mount namespace: it sees the volume.
    r.wait_event("app", "Ready", 1);
    // (The harness joins output lines without a final newline.)
    wait_until("the first output", || {
        client(&r, &["logs", "app"]).stdout == "blue\n2\nread-only"
    });
    // The mount point exists on the host (made for the run), the volume's files do not.
    assert!(mnt.join("data").is_dir() && !mnt.join("data/log").exists());
    // A container restart keeps the emptyDir; a pod restart empties it and reruns init.
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    started(&r, "app", 2);
    wait_until("the second instance's output", || {
        client(&r, &["logs", "app"]).stdout == "blue\n3\nread-only"
    });
    assert_eq!(client(&r, &["restart"]).code(), 0);
    started(&r, "app", 3);
    wait_until("the output after a pod restart", || {
        client(&r, &["logs", "app"]).stdout == "blue\n2\nread-only"
    });
    stop(&mut p);
    assert!(!mnt.exists(), "mount points made for the run are removed");
}

/// A socket in a state dir that answers each watch with `lines(path)`, then closes.
fn answering_socket(
    dir: &std::path::Path,
    lines: fn(&str) -> String,
) -> std::thread::JoinHandle<()> {
    let listener = std::os::unix::net::UnixListener::bind(dir.join("podvisor.sock")).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let began = std::time::Instant::now();
        // Until the test's clients are done (the listener goes with the thread).
        while began.elapsed() < Duration::from_secs(30) {
            let Ok((s, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            s.set_nonblocking(false).unwrap();
            let mut reader = BufReader::new(&s);
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            let path = first.split(' ').nth(1).unwrap_or_default().to_string();
            let body = lines(&path);
            let _ = write!(&s, "HTTP/1.1 200 OK\r\n\r\n{body}");
        }
    })
}

#[test]
fn a_watch_that_sends_a_line_it_cannot_read_ends_with_an_error_naming_it() {
    let dir = TempDir::new();
    let state = dir.file("state");
    std::fs::create_dir_all(&state).unwrap();
    let _server = answering_socket(&state, |path| match path {
        p if p.starts_with("/status") => {
            let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"watched-pod"},"spec":{"containers":[{"name":"app"}]}}"#;
            format!("{pod}\n[{{\"op\":\"bogus\"}}]\n")
        }
        _ => "{\"reason\":\"Started\"\n".to_string(),
    });
    let run = |args: &[&str]| {
        Run::new(podvisor())
            .args(args)
            .arg("--state-dir")
            .arg(&state)
            .output_within(Duration::from_secs(20))
    };
    for format in [&[][..], &["-o", "json"], &["-o", "yaml"]] {
        let out = run(&[&["status", "-w"][..], format].concat());
        assert_eq!(out.code(), 1, "{format:?}: {out:?}");
        assert!(
            out.stderr.contains(
                "the status watch sent a line that is not a Pod or a patch of the one before"
            ),
            "{format:?}: {}",
            out.stderr
        );
        // The Pod before the bad line was printed.
        assert!(
            out.stdout.contains("watched-pod"),
            "{format:?}: {}",
            out.stdout
        );
    }
    let out = run(&["events", "-w"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        out.stderr
            .contains("the events watch sent a line that is not an event"),
        "{}",
        out.stderr
    );
    // As JSON, the lines are handed on as they come, unread.
    let out = run(&["events", "-w", "-o", "json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "{\"reason\":\"Started\"");
}
