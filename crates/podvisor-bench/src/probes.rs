//! `podvisor-bench probes`: 1,000 probed containers.

use super::*;

/// HTTP probe arrivals: (container index, when).
type Arrivals = std::sync::Arc<std::sync::Mutex<Vec<(usize, Instant)>>>;

/// Serves `GET /r/N` with 200 and records (N, arrival) for every request; TCP probes connect
/// to a second listener that accepts and closes.
fn probe_targets() -> (u16, u16, Arrivals) {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};
    let http = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let ports = (
        http.local_addr().unwrap().port(),
        tcp.local_addr().unwrap().port(),
    );
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    // Several accepting threads, so that the targets keep up with bursts and the drift
    // measured is podvisor's, not the listener's queue.
    for _ in 0..4 {
        let seen = arrivals.clone();
        let http = http.try_clone().unwrap();
        std::thread::spawn(move || {
            for conn in http.incoming() {
                let Ok(mut conn) = conn else { continue };
                let at = Instant::now();
                let mut buf = [0u8; 2048];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&got);
                if let Some(n) = text
                    .strip_prefix("GET /r/")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|n| n.parse().ok())
                {
                    seen.lock().unwrap().push((n, at));
                }
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            }
        });
    }
    for _ in 0..2 {
        let tcp = tcp.try_clone().unwrap();
        std::thread::spawn(move || {
            for conn in tcp.incoming() {
                drop(conn);
            }
        });
    }
    (ports.0, ports.1, arrivals)
}

pub fn probes_bench(args: Common) {
    let podvisor = program(&args);
    let quick = args.quick;
    let (n, window, n_exec) = if quick {
        (200, Duration::from_secs(8), 50)
    } else {
        (1000, Duration::from_secs(30), 200)
    };
    let dir = scratch("probes");
    let (http_port, tcp_port, arrivals) = probe_targets();

    let yaml = net_pod(n, tcp_port, http_port);
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let Measured {
        cpu,
        scrape_cpu,
        rss,
        events,
        scrapes: delays,
        window_opened,
        window_closed,
        scrape_ms,
    } = measure_pod(&podvisor, &dir, "net", &yaml, n, window, Some(metrics_port));
    let start_p99 = delays.map(|(before, after)| {
        bucket_percentile(&before, &after, "podvisor_probe_start_delay_seconds", 0.99)
    });
    // The drift is measured in the window, once every container has started: how late the
    // first probes are while 1,000 containers start (they wait for the starts made before
    // them) is the start's, not the schedule's. The window's scrapes are in it.
    let steady = window_opened..window_closed;
    let started: Vec<(usize, Instant)> = (arrivals.lock().unwrap().iter())
        .filter(|(_, at)| steady.contains(at))
        .copied()
        .collect();
    let drift = drift_ms(started, n);
    let unhealthy = count_events(&events, "Unhealthy");
    let ready = count_events(&events, "Ready");
    // The floor, measured after the pod (in one run, batches measured before it cost up to
    // twice as much as those after): one batch to warm up, then five, as it moves by a third
    // from minute to minute on a shared machine, and their median.
    loopback_floor(http_port, tcp_port);
    let floors: Vec<f64> = (0..5)
        .map(|_| loopback_floor(http_port, tcp_port))
        .collect();
    // A floor is CPU seconds per pair; as a share of a core, for `n` pairs a second:
    let percent = |floor: f64| floor * n as f64 * 100.0;
    let batches: Vec<String> = floors
        .iter()
        .map(|&f| format!("{:.2}", percent(f)))
        .collect();
    let floor = median(floors);

    let secs = window.as_secs_f64();
    println!(
        "podvisor run with probes ({} s windows; podvisor's own CPU from /proc/PID/task/*/schedstat)",
        secs
    );
    println!("{:<58} {:>10}  target", "figure", "podvisor");
    println!(
        "{:<58} {:>9.2}%  <= 5 %",
        format!("CPU, {n} containers x (TCP liveness + HTTP readiness) @1s"),
        cpu / secs * 100.0
    );
    println!(
        "{:<58} {:>9.2}%",
        format!(
            "  of which the thread making {} /metrics texts",
            scrape_ms.len()
        ),
        scrape_cpu / secs * 100.0
    );
    println!(
        "{:<58} {:>9.2}%  (median of {})",
        format!("  floor: {n} loopback connects + {n} GETs/s in one thread"),
        percent(floor),
        batches.join(" ")
    );
    println!(
        "{:<58} {:>9.2}x  <= 1.2 x",
        "  podvisor / floor",
        cpu / secs / (floor * n as f64)
    );
    println!(
        "{:<58} {:>7.0} KiB  <= 40 MiB",
        "peak RSS of podvisor (same run)", rss
    );
    println!(
        "{:<58} {:>8.2} ms  <= 10 ms",
        format!(
            "HTTP probe drift from schedule ({} scrapes in), p99 of {}",
            scrape_ms.len(),
            drift.len()
        ),
        percentile(drift.clone(), 0.99)
    );
    println!("{:<58} {:>8.2} ms", "  p50", percentile(drift.clone(), 0.5));
    println!("{:<58} {:>8.2} ms", "  max", percentile(drift, 1.0));
    println!(
        "{:<58} {:>8.2} ms",
        format!("  longest /metrics scrape of the {n} containers"),
        scrape_ms.iter().copied().fold(f64::NAN, f64::max)
    );
    if let Some(p99) = start_p99 {
        println!(
            "{:<58} {:>8} ms  <= 10 ms",
            "probe start vs schedule in podvisor, p99 (histogram bound)",
            format!("<= {}", p99 * 1e3)
        );
    }
    println!(
        "{:<58} {:>10}",
        "Ready events / Unhealthy events",
        format!("{ready} / {unhealthy}")
    );
    exec_probes(&podvisor, &dir, n_exec, window);
}

/// `n_exec` containers with exec probes, measured over `window`: podvisor's CPU beside the floor
/// of spawning `true`; then (as root) the same with the containers as a restricted pod has
/// them, each with an environment of 40 variables.
fn exec_probes(podvisor: &Path, dir: &Path, n_exec: usize, window: Duration) {
    let exec_floor = spawn_floor();
    exec_run(podvisor, dir, n_exec, window, false, exec_floor);
    // /proc/self belongs to the effective user.
    let root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    if root {
        exec_run(podvisor, dir, n_exec, window, true, exec_floor);
    } else {
        println!("(exec probes of restricted containers: skipped, they need root)");
    }
}

/// One run of `exec_probes`: plain containers, or `restricted` ones.
fn exec_run(
    podvisor: &Path,
    dir: &Path,
    n_exec: usize,
    window: Duration,
    restricted: bool,
    exec_floor: f64,
) {
    let yaml = exec_pod(n_exec, restricted);
    let name = if restricted {
        "exec-restricted"
    } else {
        "exec"
    };
    let Measured {
        cpu: exec_cpu,
        rss: exec_rss,
        events: exec_events,
        ..
    } = measure_pod(podvisor, dir, name, &yaml, n_exec, window, None);
    let exec_ready = count_events(&exec_events, "Ready");
    let secs = window.as_secs_f64();
    let what = match restricted {
        true => "restricted containers (40 vars) x exec",
        false => "containers x exec readiness",
    };
    println!(
        "{:<58} {:>9.2}%  <= 3 %",
        format!("CPU, {n_exec} {what} @1s"),
        exec_cpu / secs * 100.0
    );
    let per_probe = exec_cpu / secs / n_exec as f64;
    println!(
        "{:<58} {:>8.1} us",
        "  podvisor CPU per exec probe",
        per_probe * 1e6
    );
    println!(
        "{:<58} {:>8.1} us",
        "  floor: spawn `true` and wait for it, one thread",
        exec_floor * 1e6
    );
    // No target: a probe run in a container's namespaces, cgroups and PID namespace, with a
    // pipe for its output, does more than the floor; the ratio is the figure to compare.
    println!(
        "{:<58} {:>9.2}x",
        "  podvisor / floor",
        per_probe / exec_floor
    );
    println!(
        "{:<58} {:>7.0} KiB",
        format!("peak RSS of podvisor ({name} run)"),
        exec_rss
    );
    println!(
        "{:<58} {:>10}",
        format!("Ready events ({name} run)"),
        exec_ready
    );
}

/// `n` containers, each with a TCP liveness and an HTTP readiness probe at 1 s.
fn net_pod(n: usize, tcp_port: u16, http_port: u16) -> String {
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: probes, annotations: {podvisor.io/root-from: host}}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: c{i}\n    command: [sleep, '1000']\n    livenessProbe: {{tcpSocket: {{port: {tcp_port}}}, periodSeconds: 1}}\n    readinessProbe: {{httpGet: {{path: /r/{i}, port: {http_port}}}, periodSeconds: 1}}\n"
        ));
    }
    yaml
}

/// `n` containers, each with an exec readiness probe (`true`) at 1 s. `restricted`: each as
/// the Pod Security Standards' restricted level has it (another user, no capabilities, no
/// privilege escalation, the runtime's seccomp profile) and with 40 variables in its
/// environment, as a cluster's service links give one.
fn exec_pod(n: usize, restricted: bool) -> String {
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: execs, annotations: {podvisor.io/root-from: host}}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: c{i}\n    command: [sleep, '1000']\n    readinessProbe: {{exec: {{command: ['true']}}, periodSeconds: 1}}\n"
        ));
        if restricted {
            yaml.push_str("    securityContext: {runAsUser: 1000, runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, seccompProfile: {type: RuntimeDefault}}\n    env:\n");
            for v in 0..40 {
                yaml.push_str(&format!(
                    "    - {{name: SERVICE_{v}_PORT, value: 'tcp://10.96.{v}.1:8080'}}\n"
                ));
            }
        }
    }
    yaml
}

/// Each probe's drift (ms): each container's k-th arrival against its first plus k periods
/// (1 s).
fn drift_ms(started: Vec<(usize, Instant)>, n: usize) -> Vec<f64> {
    let mut by: Vec<Vec<Instant>> = vec![Vec::new(); n];
    for (i, at) in started {
        if i < n {
            by[i].push(at);
        }
    }
    let mut drift = Vec::new();
    for arrivals in &by {
        let Some(&first) = arrivals.first() else {
            continue;
        };
        for (k, at) in arrivals.iter().enumerate().skip(1) {
            let due = first + Duration::from_secs(k as u64);
            let d = if *at >= due { *at - due } else { due - *at };
            drift.push(d.as_secs_f64() * 1e3);
        }
    }
    drift
}

/// Metrics text at the window's first scrape and after the window.
type Scrapes = Option<(String, String)>;

/// How often the metrics are scraped in the window, from its second second on (Prometheus
/// scrapes every 10 to 30 s).
const SCRAPE_EVERY: Duration = Duration::from_secs(10);

/// What `measure_pod` measured.
struct Measured {
    /// podvisor's CPU seconds in the window, all its threads.
    cpu: f64,
    /// Of which its scrape thread's (0 when it has none).
    scrape_cpu: f64,
    /// Its peak RSS, KiB.
    rss: f64,
    events: PathBuf,
    /// The metrics at the window's first scrape and after it, when scraped.
    scrapes: Scrapes,
    window_opened: Instant,
    /// Before the scrape that follows it.
    window_closed: Instant,
    /// How long each scrape in the window took (ms).
    scrape_ms: Vec<f64>,
}

/// Runs `yaml` until its `n` containers started, waits 2 s for the probes to settle, then
/// measures podvisor's CPU seconds over `window`; when `metrics` is a port, the metrics are
/// scraped in the window (1 s after it opens, then every `SCRAPE_EVERY`) and after it.
fn measure_pod(
    podvisor: &Path,
    dir: &Path,
    name: &str,
    yaml: &str,
    n: usize,
    window: Duration,
    metrics: Option<u16>,
) -> Measured {
    let pod = dir.join(format!("{name}.yaml"));
    std::fs::write(&pod, yaml).unwrap();
    let events = dir.join(format!("{name}-events.json"));
    let mut cmd = Command::new(podvisor);
    cmd.args(["run", "-q"]);
    if let Some(port) = metrics {
        cmd.arg("--metrics-addr").arg(format!("127.0.0.1:{port}"));
    }
    let mut child = cmd
        .arg("--state-dir")
        .arg(dir.join(format!("{name}-state")))
        .arg("--events")
        .arg(&events)
        .arg(&pod)
        .running()
        .expect("podvisor run");
    let pid = child.id();
    wait_for("started containers", Duration::from_secs(120), || {
        count_events(&events, "Started") >= n
    });
    std::thread::sleep(Duration::from_secs(2));
    let window_opened = Instant::now();
    let (before, scrape_before) = (cpu_ns(pid), threads_ns(pid, Some("scrape")));
    let end = window_opened + window;
    let mut first = None;
    let mut scrape_ms = Vec::new();
    let mut next = window_opened + Duration::from_secs(1);
    while let Some(port) = metrics.filter(|_| next < end) {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let t = Instant::now();
        let text = scrape(port);
        scrape_ms.push(t.elapsed().as_secs_f64() * 1e3);
        first.get_or_insert(text);
        next += SCRAPE_EVERY;
    }
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let cpu = (cpu_ns(pid) - before) as f64 / 1e9;
    let scrape_cpu = (threads_ns(pid, Some("scrape")) - scrape_before) as f64 / 1e9;
    let window_closed = Instant::now();
    let scrapes = first.map(|b| (b, scrape(metrics.unwrap())));
    let rss = vm_hwm_kb(pid).unwrap_or(f64::NAN);
    let status = child.stop();
    assert!(status.success(), "podvisor run exited {status}");
    Measured {
        cpu,
        scrape_cpu,
        rss,
        events,
        scrapes,
        window_opened,
        window_closed,
        scrape_ms,
    }
}

/// This thread's CPU seconds so far.
fn thread_cpu() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1e9
}

/// CPU seconds one thread spends to start `true` and wait for it (std's `Command`, which is
/// posix_spawn: a vfork-style clone, as podvisor's): what any exec prober pays per probe on
/// this machine, before pipes, timers and a pod's other children.
fn spawn_floor() -> f64 {
    let n = 500;
    let before = thread_cpu();
    for _ in 0..n {
        let _ = Command::new("true").status();
    }
    (thread_cpu() - before) / n as f64
}

/// CPU seconds one thread spends on one loopback TCP connect + close plus one HTTP GET (blocking
/// sockets, same listeners), over a batch of 200: on loopback both ends' kernel work runs in the
/// connecting thread, so this is what any prober pays per pair of probes.
fn loopback_floor(http_port: u16, tcp_port: u16) -> f64 {
    use std::io::{Read, Write};
    let n = 200;
    let before = thread_cpu();
    for i in 0..n {
        drop(std::net::TcpStream::connect(("127.0.0.1", tcp_port)));
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", http_port)) {
            let _ = s.write_all(format!("GET /floor/{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            let mut v = Vec::new();
            let _ = s.read_to_end(&mut v);
        }
    }
    (thread_cpu() - before) / n as f64
}
