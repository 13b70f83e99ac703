//! Probes through the binary, translated from Kubernetes' e2e tests
//! (test/e2e/common/node/container_probe.go) into local pods with one-second periods: real exec
//! commands, real HTTP, TCP and gRPC servers (podvisor-testbin `serve`, and a grpcio health
//! server), with the e2e tests' assertions on restarts, readiness and timing kept.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;

/// A free TCP port on 127.0.0.1 (bound and released; the pod binds it again at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A pod of the given containers (YAML under `spec:`), grace `grace` seconds.
pub fn pod_with(policy: &str, grace: u32, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, annotations: {{podvisor.io/root-from: host, podvisor.io/host-root: writable}}}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: {grace}\n{spec}"
    )
}

/// Milliseconds since the epoch of an event's `time`.
pub fn event_ms(e: &Value) -> i64 {
    let t = e["time"].as_str().unwrap();
    let (date, time) = t.trim_end_matches('Z').split_once('T').unwrap();
    let day: i64 = date[8..10].parse().unwrap();
    let h: i64 = time[0..2].parse().unwrap();
    let m: i64 = time[3..5].parse().unwrap();
    let s: f64 = time[6..].parse().unwrap();
    ((day * 24 + h) * 60 + m) * 60_000 + (s * 1000.0) as i64
}

impl PodRun {
    pub fn find(&self, object: &str, reason: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["object"] == object && e["reason"] == reason)
            .collect()
    }

    pub fn wait_event(&self, object: &str, reason: &str, count: usize) -> Vec<Value> {
        let mut found = Vec::new();
        wait_until(&format!("{count} {reason} events of {object}"), || {
            found = self.find(object, reason);
            found.len() >= count
        });
        found
    }
}

/// Stops the run (SIGTERM), expects exit 0 and nothing left behind.
pub fn stop(p: &mut Proc) {
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0), "stderr: {:?}", p.stderr);
    p.assert_no_leftovers();
}

fn sleeper(name: &str, probes: &str) -> String {
    format!("  - name: {name}\n    command: [sleep, '600']\n{probes}")
}

/// A pod of one sleeping container `app` with `probes` (YAML lines of its spec).
fn app_probed(probes: &str) -> String {
    pod_with(
        "Always",
        1,
        &format!("  containers:\n{}", sleeper("app", probes)),
    )
}

#[test]
fn readiness_waits_for_the_initial_delay_and_never_restarts() {
    // e2e: "with readiness probe should not be ready before initial delay and never restart".
    let r = PodRun::new(&app_probed(
        "    readinessProbe: {exec: {command: ['true']}, initialDelaySeconds: 2, periodSeconds: 1}\n",
    ));
    let mut p = r.cmd(&[]).start();
    let ready = r.wait_event("app", "Ready", 1);
    let started = r.find("app", "Started");
    let waited = event_ms(&ready[0]) - event_ms(&started[0]);
    assert!(
        (1900..=4000).contains(&waited),
        "ready {waited} ms after start"
    );
    std::thread::sleep(Duration::from_millis(1500));
    stop(&mut p);
    assert_eq!(r.find("app", "Started").len(), 1, "never restarted");
    assert!(r.find("app", "Unhealthy").is_empty());
}

#[test]
fn readiness_that_fails_is_never_ready_and_never_restarts() {
    // e2e: "with readiness probe that fails should never be ready and never restart".
    let r = PodRun::new(&app_probed(
        "    readinessProbe: {exec: {command: [sh, -c, 'echo not yet; exit 1']}, periodSeconds: 1}\n",
    ));
    let mut p = r.cmd(&[]).start();
    let unhealthy = r.wait_event("app", "Unhealthy", 3);
    assert_eq!(
        unhealthy[0]["message"], "Readiness probe failed: not yet\n",
        "the exec output is the message"
    );
    stop(&mut p);
    assert!(r.find("app", "Ready").is_empty());
    assert_eq!(r.find("app", "Started").len(), 1);
}

#[test]
fn exec_liveness_restarts_when_the_file_goes() {
    // e2e: "should be restarted with a exec "cat /tmp/health" liveness probe".
    let dir = TempDir::new();
    let health = dir.file("health");
    let spec = format!(
        "  containers:\n  - name: app\n    command: [sh, -c, 'touch {h}; sleep 2; rm -f {h}; sleep 600']\n    livenessProbe: {{exec: {{command: [cat, {h}]}}, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1}}\n",
        h = health.display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    let started = r.wait_event("app", "Started", 2);
    assert_eq!(started[1]["restartCount"], 1);
    let killing = r.find("app", "Killing");
    assert_eq!(
        killing[0]["message"],
        "Container app failed liveness probe, will be restarted"
    );
    let unhealthy = r.find("app", "Unhealthy");
    let msg = unhealthy[0]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Liveness probe failed: cat: ") && msg.contains("No such file"),
        "{msg}"
    );
    stop(&mut p);
}

#[test]
fn exec_liveness_that_passes_never_restarts() {
    // e2e: "should *not* be restarted with a exec "cat /tmp/health" liveness probe".
    let dir = TempDir::new();
    let health = dir.file("health");
    std::fs::write(&health, "ok").unwrap();
    let spec = format!(
        "  containers:\n{}",
        sleeper(
            "app",
            &format!(
                "    livenessProbe: {{exec: {{command: [cat, {}]}}, periodSeconds: 1, failureThreshold: 1}}\n",
                health.display()
            )
        )
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    std::thread::sleep(Duration::from_millis(3500));
    stop(&mut p);
    assert_eq!(r.find("app", "Started").len(), 1);
    assert!(r.find("app", "Unhealthy").is_empty());
}

#[test]
fn http_liveness_restarts_on_500_and_sends_the_kubelets_headers() {
    // e2e: "should be restarted with a /healthz http liveness probe" (healthy for a while,
    // then 500), plus the request the prober sends.
    let port = free_port();
    let dir = TempDir::new();
    let log = dir.file("requests");
    let spec = format!(
        "  containers:\n  - name: app\n    command: [{bin}, serve, '{port}', --healthy-for, '2', --log, {log}]\n    ports: [{{name: http, containerPort: {port}}}]\n    livenessProbe: {{httpGet: {{path: /healthz, port: http}}, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1}}\n",
        bin = testbin().display(),
        log = log.display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&["--backoff-initial", "100ms"]).start();
    let started = r.wait_event("app", "Started", 2);
    assert_eq!(started[1]["restartCount"], 1);
    let unhealthy = r.find("app", "Unhealthy");
    assert!(
        unhealthy.iter().any(
            |e| e["message"] == "Liveness probe failed: HTTP probe failed with statuscode: 500"
        ),
        "{unhealthy:?}"
    );
    stop(&mut p);
    let requests = std::fs::read_to_string(&log).unwrap();
    let first = requests.lines().next().unwrap();
    assert_eq!(
        first,
        format!("/healthz user-agent=kube-probe/1.37 accept=*/* host=127.0.0.1:{port}")
    );
}

#[test]
fn tcp_liveness_on_a_named_port_never_restarts() {
    // e2e: "should *not* be restarted with a tcp:8080 liveness probe".
    let port = free_port();
    let spec = format!(
        "  containers:\n  - name: app\n    command: [{bin}, serve, '{port}']\n    ports: [{{name: http, containerPort: {port}}}]\n    livenessProbe: {{tcpSocket: {{port: http}}, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1}}\n    readinessProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1}}\n",
        bin = testbin().display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Ready", 1);
    std::thread::sleep(Duration::from_millis(3000));
    stop(&mut p);
    assert_eq!(r.find("app", "Started").len(), 1);
    assert!(r.find("app", "Killing").len() <= 1, "only the stop");
}

#[test]
fn probes_to_a_closed_port_fail_with_gos_message() {
    let port = free_port();
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        &format!(
            "  containers:\n{}{}{}{}",
            sleeper(
                "app",
                &format!("    readinessProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1}}\n")
            ),
            sleeper(
                "web",
                &format!("    readinessProbe: {{httpGet: {{path: /ready, port: {port}}}, periodSeconds: 1}}\n")
            ),
            sleeper(
                "named",
                &format!("    readinessProbe: {{tcpSocket: {{host: localhost, port: {port}}}, periodSeconds: 1}}\n")
            ),
            sleeper(
                "grpc",
                &format!("    readinessProbe: {{grpc: {{port: {port}}}, periodSeconds: 1}}\n")
            )
        ),
    ));
    let mut p = r.cmd(&[]).start();
    let unhealthy = r.wait_event("app", "Unhealthy", 1);
    assert_eq!(
        unhealthy[0]["message"],
        format!("Readiness probe failed: dial tcp 127.0.0.1:{port}: connect: connection refused")
    );
    let unhealthy = r.wait_event("web", "Unhealthy", 1);
    assert_eq!(
        unhealthy[0]["message"],
        format!("Readiness probe failed: Get \"http://127.0.0.1:{port}/ready\": dial tcp 127.0.0.1:{port}: connect: connection refused")
    );
    // As Go's dialer, the error names the address the name resolved to.
    let unhealthy = r.wait_event("named", "Unhealthy", 1);
    let message = unhealthy[0]["message"].as_str().unwrap();
    assert!(
        [format!("127.0.0.1:{port}"), format!("[::1]:{port}")]
            .iter()
            .any(|a| message
                == format!("Readiness probe failed: dial tcp {a}: connect: connection refused")),
        "{message}"
    );
    let unhealthy = r.wait_event("grpc", "Unhealthy", 1);
    assert_eq!(
        unhealthy[0]["message"],
        format!("Readiness probe failed: failed to connect service \"127.0.0.1:{port}\": connection refused")
    );
    stop(&mut p);
}

#[test]
fn restart_count_grows_monotonically() {
    // e2e: "should have monotonically increasing restart count".
    let r = PodRun::new(&app_probed(
        "    livenessProbe: {exec: {command: ['false']}, periodSeconds: 1, failureThreshold: 1}\n",
    ));
    let mut p = r
        .cmd(&["--backoff-initial", "100ms", "--backoff-max", "200ms"])
        .start();
    let started = r.wait_event("app", "Started", 4);
    let counts: Vec<i64> = started
        .iter()
        .map(|e| e["restartCount"].as_i64().unwrap())
        .collect();
    assert_eq!(counts[..4], [0, 1, 2, 3]);
    stop(&mut p);
}

#[test]
fn exec_liveness_timeout_restarts_and_kills_the_probe() {
    // e2e: "should be restarted with an exec liveness probe with timeout" and "... with a
    // failing exec liveness probe that took longer than the timeout". The probe's `sleep 600`
    // must not outlive its timeout (the leftover check at the end).
    let r = PodRun::new(&app_probed(
        "    livenessProbe: {exec: {command: [sh, -c, 'sleep 600 & sleep 600']}, timeoutSeconds: 1, periodSeconds: 1, failureThreshold: 1}\n",
    ));
    let mut p = r.cmd(&[]).start();
    let started = r.wait_event("app", "Started", 2);
    assert_eq!(started[1]["restartCount"], 1);
    let unhealthy = r.find("app", "Unhealthy");
    let first = event_ms(&unhealthy[0]) - event_ms(&started[0]);
    assert!((900..3000).contains(&first), "timed out after {first} ms");
    stop(&mut p);
}

#[test]
fn exec_readiness_timeout_is_never_ready() {
    // e2e: "should not be ready with an exec readiness probe timeout". Each timed-out probe is
    // killed and reaped while the pod runs (exec probes are reaped through their pidfds): at
    // no time more than one `sleep 600` of the probe, and no zombie that stays.
    let r = PodRun::new(&app_probed(
        "    readinessProbe: {exec: {command: [sleep, '600']}, timeoutSeconds: 1, periodSeconds: 1}\n    livenessProbe: {exec: {command: ['true']}, periodSeconds: 1}\n",
    ));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Unhealthy", 3);
    let podvisor = p.init_pid();
    wait_until(
        "podvisor's children: the container and at most one probe, no zombie",
        || {
            let children = children_of(podvisor);
            let sleeps = children.iter().filter(|(_, name)| name == "sleep").count();
            sleeps <= 2 && !children.iter().any(|&(pid, _)| is_zombie(pid))
        },
    );
    stop(&mut p);
    assert!(r.find("app", "Ready").is_empty());
    assert_eq!(r.find("app", "Started").len(), 1);
}

#[test]
fn containers_and_exec_probes_hold_only_their_three_descriptors() {
    // None of podvisor's descriptors (other containers' pipes, logs, sockets, the kept low
    // ones it starts processes through) reaches a container or a probe command.
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        &format!(
            "  containers:\n{}{}",
            sleeper("other", ""),
            sleeper(
                "app",
                "    readinessProbe: {exec: {command: [sleep, '600']}, timeoutSeconds: 60, periodSeconds: 1}\n"
            )
        ),
    ));
    let mut p = r.cmd(&[]).start();
    let podvisor = p.init_pid();
    let fds = |pid: i32| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    // Two containers and the probe's `sleep`, all three past their exec: a child still named
    // `podvisor` is between clone and exec and shares podvisor's table until it takes its copy.
    wait_until("the probe runs", || {
        let children = children_of(podvisor);
        children.len() == 3 && children.iter().all(|(_, name)| name == "sleep")
    });
    for (pid, name) in children_of(podvisor) {
        // A `sleep` just past its exec still opens and closes its loader's and locale's files
        // (descriptor 3) for a moment; a descriptor podvisor leaked stays. So each is given
        // a few seconds to settle, and then checked.
        let deadline = Instant::now() + Duration::from_secs(5);
        while fds(pid) != ["0", "1", "2"] && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(fds(pid), ["0", "1", "2"], "{pid} {name}");
    }
    stop(&mut p);
}

#[test]
fn a_local_redirect_is_followed() {
    // e2e: "should be restarted with a local redirect http liveness probe".
    let port = free_port();
    let spec = format!(
        "  containers:\n  - name: app\n    command: [{bin}, serve, '{port}', --healthy-for, '1']\n    livenessProbe: {{httpGet: {{path: '/redirect?loc=/healthz', port: {port}}}, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1}}\n",
        bin = testbin().display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 2);
    let unhealthy = r.find("app", "Unhealthy");
    assert_eq!(
        unhealthy[0]["message"],
        "Liveness probe failed: HTTP probe failed with statuscode: 500"
    );
    stop(&mut p);
}

#[test]
fn a_non_local_redirect_warns_and_never_restarts() {
    // e2e: "should *not* be restarted with a non-local redirect http liveness probe".
    let port = free_port();
    let spec = format!(
        "  containers:\n  - name: app\n    command: [{bin}, serve, '{port}']\n    livenessProbe: {{httpGet: {{path: '/redirect?loc=http://0.0.0.0/', port: {port}}}, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1}}\n",
        bin = testbin().display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    let warnings = r.wait_event("app", "ProbeWarning", 2);
    assert_eq!(
        warnings[0]["message"],
        "Liveness probe warning: Probe terminated redirects, Response body: moved"
    );
    stop(&mut p);
    assert_eq!(r.find("app", "Started").len(), 1);
}

#[test]
fn a_redirect_loop_fails_after_ten_hops() {
    let port = free_port();
    let spec = format!(
        "  containers:\n  - name: app\n    command: [{bin}, serve, '{port}']\n    readinessProbe: {{httpGet: {{path: /loop, port: {port}}}, initialDelaySeconds: 1, periodSeconds: 1}}\n",
        bin = testbin().display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    let unhealthy = r.wait_event("app", "Unhealthy", 1);
    assert_eq!(
        unhealthy[0]["message"],
        format!("Readiness probe failed: Get \"http://127.0.0.1:{port}/loop\": stopped after 10 redirects")
    );
    stop(&mut p);
}

#[test]
fn bad_http_targets_fail_clearly_and_never_hang() {
    // Garbage, a target that never answers, an endless body, a close mid-body: each ends with
    // a clear message within its timeout, and the loop keeps serving the others.
    let port = free_port();
    let probe = |name: &str, path: &str| {
        sleeper(
            name,
            &format!("    readinessProbe: {{httpGet: {{path: {path}, port: {port}}}, periodSeconds: 1, timeoutSeconds: 1}}\n"),
        )
    };
    let spec = format!(
        "  initContainers:\n  - name: server\n    restartPolicy: Always\n    command: [{bin}, serve, '{port}']\n    startupProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1}}\n  containers:\n{}{}{}{}",
        probe("garbage", "/garbage"),
        probe("hang", "/hang"),
        probe("endless", "/endless"),
        probe("truncated", "/truncated"),
        bin = testbin().display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let garbage = r.wait_event("garbage", "Unhealthy", 1);
    assert_eq!(
        garbage[0]["message"],
        format!("Readiness probe failed: Get \"{}\": net/http: HTTP/1.x transport connection broken: malformed HTTP response \"garbage\"", url("/garbage"))
    );
    let hang = r.wait_event("hang", "Unhealthy", 1);
    assert_eq!(
        hang[0]["message"],
        format!("Readiness probe failed: Get \"{}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)", url("/hang"))
    );
    // A body past 10 KiB is not read: the status decides.
    r.wait_event("endless", "Ready", 1);
    // A close mid-body is a probe error (not counted), as the kubelet's ReadAtMost makes it.
    let truncated = r.wait_event("truncated", "Unhealthy", 1);
    assert_eq!(
        truncated[0]["message"],
        "Readiness probe errored and resulted in unknown state: unexpected EOF"
    );
    let began = Instant::now();
    stop(&mut p);
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "the stop was not held up"
    );
}

#[test]
fn startup_probe_failure_restarts() {
    // e2e: "should be restarted startup probe fails".
    let r = PodRun::new(&app_probed(
        "    startupProbe: {exec: {command: ['false']}, periodSeconds: 1, failureThreshold: 2}\n    livenessProbe: {exec: {command: ['true']}, periodSeconds: 1}\n",
    ));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 2);
    assert_eq!(
        r.find("app", "Killing")[0]["message"],
        "Container app failed startup probe, will be restarted"
    );
    stop(&mut p);
}

#[test]
fn startup_probe_holds_liveness_back() {
    // e2e: "should *not* be restarted by liveness probe because startup probe delays it".
    let r = PodRun::new(&app_probed(
        "    startupProbe: {exec: {command: ['false']}, periodSeconds: 1, failureThreshold: 60}\n    livenessProbe: {exec: {command: ['false']}, periodSeconds: 1, failureThreshold: 1}\n",
    ));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Unhealthy", 3);
    stop(&mut p);
    assert_eq!(r.find("app", "Started").len(), 1);
    assert!(r.find("app", "Unhealthy").iter().all(|e| e["message"]
        .as_str()
        .unwrap()
        .starts_with("Startup probe failed")));
}

#[test]
fn liveness_begins_once_startup_succeeds() {
    // e2e: "should be restarted by liveness probe after startup probe enables it".
    let dir = TempDir::new();
    let started = dir.file("started");
    let spec = format!(
        "  containers:\n  - name: app\n    command: [sh, -c, 'sleep 1; touch {s}; sleep 600']\n    startupProbe: {{exec: {{command: [cat, {s}]}}, periodSeconds: 1, failureThreshold: 60}}\n    livenessProbe: {{exec: {{command: ['false']}}, periodSeconds: 1, failureThreshold: 1}}\n",
        s = started.display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    let killing = r.wait_event("app", "Killing", 1);
    assert_eq!(
        killing[0]["message"],
        "Container app failed liveness probe, will be restarted"
    );
    stop(&mut p);
}

#[test]
fn ready_right_after_startup_succeeds() {
    // e2e: "should be ready immediately after startupProbe succeeds": readiness with a period
    // of 60 s still runs at once when startup succeeds.
    let dir = TempDir::new();
    let started = dir.file("started");
    let spec = format!(
        "  containers:\n  - name: app\n    command: [sh, -c, 'sleep 1; touch {s}; sleep 600']\n    startupProbe: {{exec: {{command: [cat, {s}]}}, periodSeconds: 1, failureThreshold: 60}}\n    readinessProbe: {{exec: {{command: ['true']}}, periodSeconds: 60}}\n",
        s = started.display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    let ready = r.wait_event("app", "Ready", 1);
    let start = r.find("app", "Started");
    let took = event_ms(&ready[0]) - event_ms(&start[0]);
    assert!(took < 4000, "ready {took} ms after start");
    stop(&mut p);
}

#[test]
fn the_liveness_probes_grace_overrides_the_pods() {
    // e2e: "should override timeoutGracePeriodSeconds when LivenessProbe field is set": pod
    // grace 600 s, probe grace 1 s (the 2 s floor applies), a process that ignores SIGTERM.
    let r = PodRun::new(&pod_with(
        "Always",
        600,
        "  containers:\n  - name: app\n    command: [sh, -c, 'trap \"\" TERM; sleep 600']\n    livenessProbe: {exec: {command: ['false']}, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1, terminationGracePeriodSeconds: 1}\n",
    ));
    let mut p = r.cmd(&["--backoff-initial", "100ms"]).start();
    let killing = r.wait_event("app", "Killing", 1);
    let started = r.wait_event("app", "Started", 2);
    let took = event_ms(&started[1]) - event_ms(&killing[0]);
    assert!(
        (1900..6000).contains(&took),
        "killed {took} ms after Killing"
    );
    let exits = r.find("app", "Error");
    assert_eq!(exits[0]["exitCode"], 137);
    // Stop it for good without waiting 600 s: a second SIGTERM kills at once.
    p.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
    p.assert_no_leftovers();
}

#[test]
fn on_termination_readiness_goes_false_and_liveness_stops() {
    // e2e: "should mark readiness on pods to false while pod is in progress of terminating"
    // and "... and disable liveness probes while pod is in progress of terminating". One
    // readiness failure makes it NotReady (about 1 s after the TERM), well before the app's
    // exit 4 s after it: with the default threshold of 3 the two could fall on one tick.
    let dir = TempDir::new();
    let f = dir.file("up");
    let spec = format!(
        "  containers:\n  - name: app\n    command: [sh, -c, 'trap \"rm -f {f}; sleep 4; exit 0\" TERM; touch {f}; while true; do sleep 0.1; done']\n    readinessProbe: {{exec: {{command: [cat, {f}]}}, periodSeconds: 1, failureThreshold: 1}}\n    livenessProbe: {{exec: {{command: [cat, {f}]}}, initialDelaySeconds: 1, periodSeconds: 1, failureThreshold: 1}}\n",
        f = f.display()
    );
    let r = PodRun::new(&pod_with("Always", 30, &spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Ready", 1);
    p.signal("TERM");
    r.wait_event("app", "NotReady", 1);
    assert_eq!(p.wait().code(), Some(0));
    p.assert_no_leftovers();
    let events = r.events();
    let not_ready = events
        .iter()
        .position(|e| e["reason"] == "NotReady")
        .unwrap();
    let exit = events
        .iter()
        .position(|e| e["reason"] == "Completed")
        .unwrap();
    assert!(not_ready < exit, "NotReady while terminating: {events:?}");
    assert!(r
        .find("app", "Unhealthy")
        .iter()
        .all(|e| e["message"].as_str().unwrap().starts_with("Readiness")));
    assert_eq!(r.find("app", "Killing").len(), 1, "only the stop");
}

#[test]
fn https_probes_accept_a_self_signed_certificate() {
    // The kubelet's prober does not verify certificates (InsecureSkipVerify): a self-signed one
    // is fine; the status code still decides.
    let dir = TempDir::new();
    let log = dir.file("log");
    let port = free_port();
    let spec = format!(
        "  containers:\n  - name: app\n    command: [{server}, https, '{port}', {log}]\n    startupProbe: {{tcpSocket: {{port: {port}}}, periodSeconds: 1, failureThreshold: 30}}\n    readinessProbe: {{httpGet: {{scheme: HTTPS, path: /healthz, port: {port}}}, periodSeconds: 1}}\n    livenessProbe: {{httpGet: {{scheme: HTTPS, path: /fail, port: {port}}}, initialDelaySeconds: 2, periodSeconds: 1, failureThreshold: 1}}\n",
        server = testservers().display(),
        log = log.display()
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&["--backoff-initial", "5s"]).start();
    r.wait_event("app", "Ready", 1);
    let mut failed = Vec::new();
    wait_until("a liveness failure over https", || {
        failed = r
            .find("app", "Unhealthy")
            .into_iter()
            .filter(|e| e["message"].as_str().unwrap().starts_with("Liveness"))
            .collect();
        !failed.is_empty()
    });
    assert_eq!(
        failed[0]["message"],
        "Liveness probe failed: HTTP probe failed with statuscode: 500"
    );
    stop(&mut p);
    let requests = std::fs::read_to_string(&log).unwrap();
    assert!(
        requests.lines().any(|l| l == "/healthz kube-probe/1.37"),
        "{requests}"
    );
}

#[test]
fn a_probe_that_cannot_run_is_tried_three_times_and_not_counted() {
    // prober.go's runProbeWithRetries: an attempt that errors is tried up to 3 times, and an
    // error is never counted towards failureThreshold.
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - name: app\n    command: [sleep, '600']\n    livenessProbe: {exec: {command: [/no/such/probe]}, periodSeconds: 1, failureThreshold: 1}\n",
    ));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut p = r.cmd(&["--metrics-addr", &addr]).start();
    let errored = r.wait_event("app", "Unhealthy", 2);
    assert!(
        errored[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Liveness probe errored and resulted in unknown state: "),
        "{errored:?}"
    );
    let tries: u64 = scrape(&addr)
        .lines()
        .find(|l| l.starts_with("podvisor_probe_errors_total{container=\"app\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap();
    // Each attempt's tries happen together: always a multiple of 3, and at least 3 per event.
    assert_eq!(tries % 3, 0, "{tries}");
    assert!(tries >= 6, "{tries}");
    assert!(
        r.find("app", "Killing").is_empty(),
        "an error is not a failure"
    );
    stop(&mut p);
}

#[test]
fn containers_started_in_one_go_keep_their_own_start_times() {
    // The 40 starts are made one after the other and reported together: each container's
    // start time (and with it the phase of its probes) is its own, not the batch's end.
    let mut spec = String::from("  containers:\n");
    for i in 0..40 {
        spec.push_str(&sleeper(&format!("c{i}"), ""));
    }
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let mut p = r.cmd(&[]).start();
    wait_until("40 started containers", || {
        r.events()
            .iter()
            .filter(|e| e["reason"] == "Started")
            .count()
            >= 40
    });
    let record = saved_record(&r.dir.file("state").join("podvisor.state"));
    let started: Vec<u64> = (record["containers"].as_array().unwrap().iter())
        .map(|c| c["state"]["running"].as_u64().unwrap())
        .collect();
    stop(&mut p);
    assert!(
        started.windows(2).all(|w| w[0] <= w[1]),
        "in the order they were started: {started:?}"
    );
    let distinct: std::collections::BTreeSet<u64> = started.iter().copied().collect();
    assert!(
        distinct.len() >= 8,
        "each its own start time, not the batch's: {started:?}"
    );
}

#[test]
fn a_probe_cut_short_by_its_containers_own_exit_is_not_a_failure() {
    // The container exits on its own while its exec liveness probe runs, and the probe (in the
    // container's PID namespace) is killed as the namespace ends. That says nothing of the
    // container's health: no Unhealthy event, no kill for a failed liveness probe; what the pod
    // shows is the container's own exit. The container waits for its probe to have begun.
    let dir = TempDir::new();
    let probed = dir.file("probed");
    let spec = format!(
        "  containers:\n  - name: app\n    command: [sh, -c, 'until [ -e {p} ]; do sleep 0.05; done; sleep 0.2; exit 3']\n    livenessProbe: {{exec: {{command: [sh, -c, 'touch {p}; sleep 5']}}, timeoutSeconds: 10, periodSeconds: 1, failureThreshold: 1}}\n",
        p = probed.display()
    );
    let r = PodRun::new(&pod_with("Never", 1, &spec));
    let mut p = r.cmd(&[]).start();
    assert_eq!(p.wait().code(), Some(1), "stderr: {:?}", p.stderr);
    p.assert_no_leftovers();
    let said: Vec<String> = (r.events().iter())
        .map(|e| format!("{} {}", e["reason"], e["message"]))
        .collect();
    assert!(r.find("app", "Unhealthy").is_empty(), "{said:#?}");
    assert!(r.find("app", "Killing").is_empty(), "{said:#?}");
    assert_eq!(r.find("app", "Error").len(), 1, "{said:#?}");
}
