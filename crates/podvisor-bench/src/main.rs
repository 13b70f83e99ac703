//! `podvisor-bench init`: the PID 1 figures of podvisor's init build beside tini and dumb-init
//! (Debian's packages), measured in one run and printed with ratios. See README.md.
//!
//! Each figure is a median over repeated runs, with the programs interleaved so that a change
//! in machine load hits all of them alike:
//! - wall time of `INIT -- true`;
//! - peak resident size (VmHWM) of the init process while it supervises `sleep`;
//! - time to reap 20,000 orphaned zombies as PID 1 of a fresh PID namespace, from the moment
//!   the main child exits (having made them) to the moment the namespace's init has exited;
//! - size of the binary.
//!
//! `podvisor-bench run`: `podvisor run` with 100 containers of `sleep`: podvisor's own CPU time
//! while idle for 10 s (from /proc/PID/schedstat), its peak RSS, the time to stop all 100, and
//! how late a container whose backoff has expired is restarted.
//!
//! `podvisor-bench probes`: 1,000 containers of `sleep`, each with a TCP liveness probe and an
//! HTTP readiness probe at a period of 1 s against listeners in this process, for 30 s:
//! podvisor's own CPU (its schedstat, so the probe targets and containers are not counted), its
//! peak RSS, and how far each HTTP probe's arrival drifts from its schedule (first arrival plus
//! whole periods); then 200 containers with exec probes (`true`) at 1 s: podvisor's own CPU,
//! without the probe processes.
//!
//! `podvisor-bench api`: `podvisor status -o json` against a pod of 100 containers (wall time
//! of the whole command, median of 30), `podvisor logs` of a 100 MB log to /dev/null (MB/s of
//! log text), and the CPU of `status -w` and `logs -f` clients and of podvisor while nothing
//! changes for 5 s.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Init {
    name: &'static str,
    /// The command line up to and including `--` (or what stands for it).
    argv: Vec<String>,
    binary: PathBuf,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("init") => init_bench(&args[1..]),
        Some("run") => run_bench(&args[1..]),
        Some("probes") => probes_bench(&args[1..]),
        Some("api") => api_bench(&args[1..]),
        _ => {
            eprintln!(
                "usage: podvisor-bench init|run|probes|api [--podvisor PATH] [--testbin PATH] [--quick]"
            );
            std::process::exit(2);
        }
    }
}

fn arg_value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn init_bench(args: &[String]) {
    let here = std::env::current_exe().unwrap();
    let target = here.parent().and_then(Path::parent).unwrap().to_path_buf();
    let podvisor = arg_value(args, "--podvisor")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("init/podvisor"));
    let testbin = arg_value(args, "--testbin")
        .map(PathBuf::from)
        .unwrap_or_else(|| here.with_file_name("podvisor-testbin"));
    let quick = args.iter().any(|a| a == "--quick");
    for (what, path) in [
        ("podvisor init build", &podvisor),
        ("podvisor-testbin", &testbin),
    ] {
        if !path.exists() {
            eprintln!(
                "error: {what} not found at {} (see README: Benchmarks)",
                path.display()
            );
            std::process::exit(2);
        }
    }
    let mut inits = vec![Init {
        name: "podvisor",
        argv: vec![
            podvisor.display().to_string(),
            "init".into(),
            "-s".into(),
            "--".into(),
        ],
        binary: podvisor.clone(),
    }];
    for (name, argv) in [
        ("tini", vec!["/usr/bin/tini", "-s", "--"]),
        ("dumb-init", vec!["/usr/bin/dumb-init"]),
    ] {
        if Path::new(argv[0]).exists() {
            inits.push(Init {
                name,
                argv: argv.into_iter().map(String::from).collect(),
                binary: PathBuf::from(argv_first(name)),
            });
        } else {
            eprintln!(
                "note: {} is not installed (apt-get install {name}); left out",
                argv[0]
            );
        }
    }

    let (runs, rss_runs, reap_runs, zombies) = if quick {
        (30, 5, 2, 2_000)
    } else {
        (300, 15, 15, 20_000)
    };
    println!("podvisor-bench init: medians; {runs} runs of `-- true`, {rss_runs} of RSS, {reap_runs} of {zombies} zombies");
    println!();

    let wall = measure_interleaved(&inits, runs, |init| {
        let start = Instant::now();
        let status = Command::new(&init.argv[0])
            .args(&init.argv[1..])
            .arg("true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run init");
        assert!(status.success(), "{} -- true failed", init.name);
        start.elapsed().as_secs_f64() * 1e3
    });
    let rss = measure_interleaved(&inits, rss_runs, |init| {
        let mut child = Command::new(&init.argv[0])
            .args(&init.argv[1..])
            .args(["sleep", "0.4"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run init");
        std::thread::sleep(Duration::from_millis(200));
        let kb = vm_hwm_kb(child.id()).expect("VmHWM");
        child.wait().unwrap();
        kb
    });
    let namespaces = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let reap = if namespaces {
        Some(measure_interleaved(&inits, reap_runs, |init| {
            reap_zombies(init, &testbin, zombies)
        }))
    } else {
        eprintln!("note: no PID namespace here (unshare -p -f); the reaping figure is left out");
        None
    };

    let sizes: Vec<f64> = inits
        .iter()
        .map(|i| {
            std::fs::metadata(&i.binary)
                .map(|m| m.len() as f64 / 1024.0)
                .unwrap_or(f64::NAN)
        })
        .collect();

    let mut rows = vec![
        Row {
            label: "wall time of `INIT -- true` (ms)",
            values: wall,
            limit: Some(1.0),
            unit_limit: None,
        },
        Row {
            label: "peak RSS supervising sleep (KiB)",
            values: rss,
            limit: Some(1.5),
            unit_limit: None,
        },
    ];
    if let Some(reap) = reap {
        rows.push(Row {
            label: "reap zombies as PID 1 (ms)",
            values: reap,
            limit: Some(1.0),
            unit_limit: None,
        });
    }
    rows.push(Row {
        label: "binary size (KiB)",
        values: sizes,
        limit: None,
        unit_limit: Some(1024.0),
    });
    print_table(&inits, &rows);
}

fn argv_first(name: &str) -> String {
    format!("/usr/bin/{name}")
}

struct Row {
    label: &'static str,
    values: Vec<f64>,
    /// Target for podvisor / tini.
    limit: Option<f64>,
    /// Target for podvisor's own value.
    unit_limit: Option<f64>,
}

fn print_table(inits: &[Init], rows: &[Row]) {
    print!("{:<36}", "");
    for i in inits {
        print!("{:>12}", i.name);
    }
    println!("{:>16}  target", "podvisor/tini");
    for row in rows {
        print!("{:<36}", row.label);
        for v in &row.values {
            print!("{v:>12.2}");
        }
        let ratio = if inits.len() > 1 && inits[1].name == "tini" {
            row.values[0] / row.values[1]
        } else {
            f64::NAN
        };
        print!("{ratio:>16.2}");
        match (row.limit, row.unit_limit) {
            (Some(limit), _) => {
                let verdict = if ratio.is_nan() {
                    "n/a"
                } else if ratio <= limit {
                    "met"
                } else {
                    "MISSED"
                };
                println!("  ratio ≤ {limit}: {verdict}");
            }
            (None, Some(max)) => {
                let verdict = if row.values[0] <= max {
                    "met"
                } else {
                    "MISSED"
                };
                println!("  ≤ {max} KiB: {verdict}");
            }
            _ => println!(),
        }
    }
}

/// Runs `f` `runs` times for every init, round-robin, and returns each init's median.
fn measure_interleaved(inits: &[Init], runs: usize, mut f: impl FnMut(&Init) -> f64) -> Vec<f64> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); inits.len()];
    // One warm-up round, not counted: page cache and dynamic loader.
    for init in inits {
        f(init);
    }
    for _ in 0..runs {
        for (i, init) in inits.iter().enumerate() {
            samples[i].push(f(init));
        }
    }
    samples.into_iter().map(median).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn vm_hwm_kb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Milliseconds from the main child's exit (it prints the time, having made `n` zombies) to
/// the end of the namespace's init.
fn reap_zombies(init: &Init, testbin: &Path, n: usize) -> f64 {
    let out = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc"])
        .args(&init.argv)
        .arg(testbin)
        .args(["zombies", &n.to_string()])
        .stderr(Stdio::null())
        .output()
        .expect("unshare");
    let end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let text = String::from_utf8_lossy(&out.stdout);
    let exited: u128 = text
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: testbin said {text:?}", init.name));
    (end - exited) as f64 / 1e6
}

fn cpu_ns(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn count_events(path: &Path, reason: &str) -> usize {
    let needle = format!("\"reason\":\"{reason}\"");
    std::fs::read_to_string(path)
        .map(|s| s.lines().filter(|l| l.contains(&needle)).count())
        .unwrap_or(0)
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Milliseconds of the day of an event's RFC 3339 `time`.
fn event_ms(line: &str) -> Option<f64> {
    let start = line.find("\"time\":\"")? + 8;
    let t = &line[start..start + 24];
    let h: f64 = t[11..13].parse().ok()?;
    let m: f64 = t[14..16].parse().ok()?;
    let s: f64 = t[17..23].parse().ok()?;
    Some(((h * 60.0 + m) * 60.0 + s) * 1000.0)
}

fn run_bench(args: &[String]) {
    let here = std::env::current_exe().unwrap();
    let podvisor = arg_value(args, "--podvisor")
        .map(PathBuf::from)
        .unwrap_or_else(|| here.with_file_name("podvisor"));
    let quick = args.iter().any(|a| a == "--quick");
    let idle = if quick {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(10)
    };
    let dir = std::env::temp_dir().join(format!("podvisor-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: bench}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
    for i in 0..100 {
        yaml.push_str(&format!("  - {{name: c{i}, command: [sleep, '1000']}}\n"));
    }
    std::fs::write(dir.join("pod.yaml"), yaml).unwrap();
    let events = dir.join("events.json");
    let mut child = Command::new(&podvisor)
        .args(["run", "-q", "--state-dir"])
        .arg(dir.join("state"))
        .arg("--events")
        .arg(&events)
        .arg(dir.join("pod.yaml"))
        .spawn()
        .expect("podvisor run");
    let pid = child.id();
    wait_for("100 started containers", Duration::from_secs(60), || {
        count_events(&events, "Started") >= 100
    });
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ns(pid);
    std::thread::sleep(idle);
    let cpu = (cpu_ns(pid) - before) as f64 / 1e9;
    let rss = vm_hwm_kb(pid).unwrap_or(f64::NAN);
    let stop_start = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let status = child.wait().unwrap();
    let stop = stop_start.elapsed().as_secs_f64() * 1e3;
    assert!(status.success(), "podvisor run exited {status}");

    // Restart latency: a container that fails at once, with a 100 ms backoff.
    let pod2 = "apiVersion: v1\nkind: Pod\nmetadata: {name: crash}\nspec:\n  containers:\n  - {name: c, command: [/bin/false]}\n";
    std::fs::write(dir.join("crash.yaml"), pod2).unwrap();
    let events2 = dir.join("events2.json");
    let mut child = Command::new(&podvisor)
        .args([
            "run",
            "-q",
            "--backoff-initial",
            "100ms",
            "--backoff-max",
            "100ms",
            "--state-dir",
        ])
        .arg(dir.join("state2"))
        .arg("--events")
        .arg(&events2)
        .arg(dir.join("crash.yaml"))
        .spawn()
        .expect("podvisor run");
    let restarts = if quick { 5 } else { 20 };
    wait_for("restarts", Duration::from_secs(60), || {
        count_events(&events2, "Started") >= restarts + 2
    });
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&events2).unwrap();
    let mut late = Vec::new();
    let mut last_exit = None;
    let mut waits = 0;
    for line in text.lines() {
        if line.contains("\"reason\":\"Error\"") {
            last_exit = event_ms(line);
        } else if line.contains("\"reason\":\"Started\"") {
            if let (Some(exit), Some(start)) = (last_exit.take(), event_ms(line)) {
                waits += 1;
                // The first restart is immediate; the later ones wait 100 ms.
                let delay = if waits == 1 { 0.0 } else { 100.0 };
                late.push(start - exit - delay);
            }
        }
    }
    let worst = late.iter().cloned().fold(f64::NAN, f64::max);
    let peer = supervisord(&dir, idle);
    let _ = std::fs::remove_dir_all(&dir);
    let per10 = cpu * 10.0 / idle.as_secs_f64();
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let peer_col = |f: fn(&(f64, f64, f64)) -> f64, decimals: usize| {
        peer.as_ref()
            .map_or("n/a".to_string(), |p| format!("{:.*}", decimals, f(p)))
    };
    println!(
        "podvisor-bench run: 100 containers of sleep; idle {} s",
        idle.as_secs()
    );
    println!();
    println!("{:<48}{:>12}{:>14}  target", "", "podvisor", "supervisord");
    let row = |label: &str, ours: String, theirs: String, target: &str, ok: bool| {
        println!(
            "{label:<48}{ours:>12}{theirs:>14}  {target}: {}",
            verdict(ok)
        );
    };
    row(
        "CPU while idle (s per 10 s)",
        format!("{per10:.4}"),
        peer_col(|p| p.0, 4),
        "≤ 0.02 s",
        per10 <= 0.02,
    );
    row(
        "peak RSS (KiB)",
        format!("{rss:.0}"),
        peer_col(|p| p.1, 0),
        "≤ 6144 KiB",
        rss <= 6144.0,
    );
    row(
        "stop of 100 containers (ms)",
        format!("{stop:.1}"),
        peer_col(|p| p.2, 1),
        "≤ 200 ms",
        stop <= 200.0,
    );
    row(
        "restart after the backoff, worst lateness (ms)",
        format!("{worst:.1}"),
        "n/a".to_string(),
        "≤ 5 ms",
        worst <= 5.0,
    );
    println!(
        "(restart lateness: median {:.1} ms of {}; event times have 1 ms resolution)",
        median(late.clone()),
        late.len()
    );
    println!("reference from the issue, same load: horust 0.11 s CPU and 6.6 MiB, supervisord 0.42 s and 30.7 MiB, s6 13 MiB");
}

/// The same load under Debian's supervisord, when it is installed: (CPU s per 10 s idle, peak
/// RSS KiB, stop ms). Its children are counted from /proc; it stops them on SIGTERM.
fn supervisord(dir: &Path, idle: Duration) -> Option<(f64, f64, f64)> {
    let bin = Path::new("/usr/bin/supervisord");
    if !bin.exists() {
        eprintln!("note: supervisord is not installed (apt-get install supervisor); its column is left out");
        return None;
    }
    let mut conf = format!(
        "[supervisord]\nnodaemon=true\nlogfile={0}/supervisord.log\npidfile={0}/supervisord.pid\nchildlogdir={0}\n",
        dir.display()
    );
    for i in 0..100 {
        conf.push_str(&format!(
            "[program:c{i}]\ncommand=sleep 1000\nautorestart=true\nstopwaitsecs=5\n"
        ));
    }
    let path = dir.join("supervisord.conf");
    std::fs::write(&path, conf).ok()?;
    let mut child = Command::new(bin)
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let pid = child.id();
    let children = || {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .map_or(0, |s| s.split_whitespace().count())
    };
    wait_for(
        "supervisord's 100 programs",
        Duration::from_secs(60),
        || children() >= 100,
    );
    // supervisord declares a program RUNNING after startsecs (1 s): let it settle.
    std::thread::sleep(Duration::from_secs(2));
    let before = cpu_ns(pid);
    std::thread::sleep(idle);
    let cpu = (cpu_ns(pid) - before) as f64 / 1e9 * 10.0 / idle.as_secs_f64();
    let rss = vm_hwm_kb(pid).unwrap_or(f64::NAN);
    let start = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
    Some((cpu, rss, start.elapsed().as_secs_f64() * 1e3))
}

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

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn probes_bench(args: &[String]) {
    let here = std::env::current_exe().unwrap();
    let podvisor = arg_value(args, "--podvisor")
        .map(PathBuf::from)
        .unwrap_or_else(|| here.with_file_name("podvisor"));
    let quick = args.iter().any(|a| a == "--quick");
    let (n, window, n_exec) = if quick {
        (200, Duration::from_secs(8), 50)
    } else {
        (1000, Duration::from_secs(30), 200)
    };
    let dir = std::env::temp_dir().join(format!("podvisor-bench-probes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (http_port, tcp_port, arrivals) = probe_targets();

    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: probes}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: c{i}\n    command: [sleep, '1000']\n    livenessProbe: {{tcpSocket: {{port: {tcp_port}}}, periodSeconds: 1}}\n    readinessProbe: {{httpGet: {{path: /r/{i}, port: {http_port}}}, periodSeconds: 1}}\n"
        ));
    }
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (cpu, rss, events, delays) =
        measure_pod(&podvisor, &dir, "net", &yaml, n, window, Some(metrics_port));
    let start_p99 = delays.map(|(before, after)| delay_percentile(&before, &after, 0.99));
    let started = arrivals.lock().unwrap().clone();
    // Drift: each container's k-th arrival against its first plus k periods.
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
    let unhealthy = count_events(&events, "Unhealthy");
    let ready = count_events(&events, "Ready");
    let floor = loopback_floor(http_port, tcp_port);

    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: execs}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
    for i in 0..n_exec {
        yaml.push_str(&format!(
            "  - name: c{i}\n    command: [sleep, '1000']\n    readinessProbe: {{exec: {{command: ['true']}}, periodSeconds: 1}}\n"
        ));
    }
    let (exec_cpu, exec_rss, exec_events, _) =
        measure_pod(&podvisor, &dir, "exec", &yaml, n_exec, window, None);
    let exec_ready = count_events(&exec_events, "Ready");
    let secs = window.as_secs_f64();
    println!(
        "podvisor run with probes ({} s windows; podvisor's own CPU from /proc/PID/schedstat)",
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
        format!("  floor: {n} loopback connects + {n} GETs/s in one thread"),
        floor * n as f64 * 100.0
    );
    println!(
        "{:<58} {:>7.0} KiB  <= 40 MiB",
        "peak RSS of podvisor (same run)", rss
    );
    println!(
        "{:<58} {:>8.2} ms  <= 10 ms",
        format!("HTTP probe drift from schedule, p99 of {}", drift.len()),
        percentile(drift.clone(), 0.99)
    );
    println!("{:<58} {:>8.2} ms", "  p50", percentile(drift.clone(), 0.5));
    if let Some(p99) = start_p99 {
        println!(
            "{:<58} {:>8} ms  <= 10 ms",
            "probe start vs schedule in podvisor, p99 (histogram bound)",
            format!("<= {}", p99 * 1e3)
        );
    }
    println!("{:<58} {:>8.2} ms", "  max", percentile(drift, 1.0));
    println!(
        "{:<58} {:>10}",
        "Ready events / Unhealthy events",
        format!("{ready} / {unhealthy}")
    );
    println!(
        "{:<58} {:>9.2}%  <= 3 %",
        format!("CPU, {n_exec} containers x exec readiness @1s"),
        exec_cpu / secs * 100.0
    );
    println!(
        "{:<58} {:>7.0} KiB",
        "peak RSS of podvisor (exec run)", exec_rss
    );
    println!("{:<58} {:>10}", "Ready events (exec run)", exec_ready);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Metrics text before and after the window.
type Scrapes = Option<(String, String)>;

/// Runs `yaml` until its `n` containers started, waits 2 s for the probes to settle, then
/// measures podvisor's CPU seconds over `window`; returns (CPU s, peak RSS KiB, events file,
/// metrics scraped at the window's start and end when `metrics` is a port).
fn measure_pod(
    podvisor: &Path,
    dir: &Path,
    name: &str,
    yaml: &str,
    n: usize,
    window: Duration,
    metrics: Option<u16>,
) -> (f64, f64, PathBuf, Scrapes) {
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
        .spawn()
        .expect("podvisor run");
    let pid = child.id();
    wait_for("started containers", Duration::from_secs(120), || {
        count_events(&events, "Started") >= n
    });
    std::thread::sleep(Duration::from_secs(2));
    let scrape_before = metrics.map(scrape);
    let before = cpu_ns(pid);
    std::thread::sleep(window);
    let cpu = (cpu_ns(pid) - before) as f64 / 1e9;
    let scrapes = scrape_before.map(|b| (b, scrape(metrics.unwrap())));
    let rss = vm_hwm_kb(pid).unwrap_or(f64::NAN);
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "podvisor run exited {status}");
    (cpu, rss, events, scrapes)
}

fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// The smallest bucket bound of `podvisor_probe_start_delay_seconds` under which fraction `p`
/// of the attempts between two scrapes fall.
fn delay_percentile(before: &str, after: &str, p: f64) -> f64 {
    let buckets = |text: &str| -> Vec<(f64, f64)> {
        text.lines()
            .filter(|l| l.starts_with("podvisor_probe_start_delay_seconds_bucket"))
            .filter_map(|l| {
                let le = l.split("le=\"").nth(1)?.split('"').next()?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    };
    let (b, a) = (buckets(before), buckets(after));
    let diff: Vec<(f64, f64)> = a
        .iter()
        .map(|(le, n)| (*le, n - b.iter().find(|x| x.0 == *le).map_or(0.0, |x| x.1)))
        .collect();
    let total = diff.last().map_or(0.0, |x| x.1);
    diff.iter()
        .find(|(_, n)| *n >= p * total)
        .map_or(f64::NAN, |x| x.0)
}

fn api_bench(args: &[String]) {
    let here = std::env::current_exe().unwrap();
    let podvisor = arg_value(args, "--podvisor")
        .map(PathBuf::from)
        .unwrap_or_else(|| here.with_file_name("podvisor"));
    let quick = args.iter().any(|a| a == "--quick");
    let dir = std::env::temp_dir().join(format!("podvisor-bench-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mb = if quick { 20 } else { 100 };
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: api}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
    // One container writes the big log (100-byte lines), then sleeps; 99 more just sleep.
    yaml.push_str(&format!(
        "  - name: big\n    command: [sh, -c, 'head -c {} /dev/zero | tr \"\\\\000\" x | fold -w 99; exec sleep 1000']\n",
        mb * 1_000_000 / 100 * 99
    ));
    for i in 1..100 {
        yaml.push_str(&format!("  - {{name: c{i}, command: [sleep, '1000']}}\n"));
    }
    std::fs::write(dir.join("pod.yaml"), yaml).unwrap();
    let state = dir.join("state");
    let events = dir.join("events.json");
    let mut child = Command::new(&podvisor)
        .args(["run", "-q", "--log-max-size", "1Gi", "--state-dir"])
        .arg(&state)
        .arg("--events")
        .arg(&events)
        .arg(dir.join("pod.yaml"))
        .spawn()
        .expect("podvisor run");
    let pid = child.id();
    wait_for("100 started containers", Duration::from_secs(60), || {
        count_events(&events, "Started") >= 100
    });
    // The big log is complete once it stops growing.
    let log = state.join("logs/big/1.log");
    let mut last = 0;
    wait_for("the big log", Duration::from_secs(300), || {
        std::thread::sleep(Duration::from_millis(300));
        let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let done = len > 0 && len == last;
        last = len;
        done
    });
    let status_ms: Vec<f64> = (0..30)
        .map(|_| {
            let t = Instant::now();
            let out = Command::new(&podvisor)
                .args(["status", "-o", "json", "--state-dir"])
                .arg(&state)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(out.success());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let logs_runs: Vec<f64> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let out = Command::new(&podvisor)
                .args(["logs", "big", "--state-dir"])
                .arg(&state)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(out.success());
            t.elapsed().as_secs_f64()
        })
        .collect();
    let text_bytes = (mb * 1_000_000 / 100 * 99) as f64 + (mb * 1_000_000 / 100 * 99 / 99) as f64;
    let logs_s = median(logs_runs);
    // Watchers while nothing changes.
    let mut watch = Command::new(&podvisor)
        .args(["status", "-w", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut follow = Command::new(&podvisor)
        .args(["logs", "-f", "c1", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let before = (cpu_ns(watch.id()), cpu_ns(follow.id()), cpu_ns(pid));
    std::thread::sleep(Duration::from_secs(5));
    let after = (cpu_ns(watch.id()), cpu_ns(follow.id()), cpu_ns(pid));
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    assert!(child.wait().unwrap().success());
    let _ = watch.wait();
    let _ = follow.wait();
    println!(
        "status API and logs (podvisor {}; 100 containers)",
        podvisor.display()
    );
    println!("{:<52} {:>12}  target", "figure", "podvisor");
    println!(
        "{:<52} {:>9.2} ms  <= 20 ms",
        "status -o json, whole command, median of 30",
        median(status_ms.clone())
    );
    println!(
        "{:<52} {:>9.2} ms",
        "  slowest of 30",
        status_ms.iter().cloned().fold(0.0, f64::max)
    );
    println!(
        "{:<52} {:>7.0} MB/s  >= 200 MB/s",
        format!("logs of a {mb} MB log to /dev/null"),
        text_bytes / 1e6 / logs_s
    );
    println!(
        "{:<52} {:>9.4} s   0",
        "CPU of status -w over 5 s idle",
        (after.0 - before.0) as f64 / 1e9
    );
    println!(
        "{:<52} {:>9.4} s   0",
        "CPU of logs -f over 5 s idle",
        (after.1 - before.1) as f64 / 1e9
    );
    println!(
        "{:<52} {:>9.4} s",
        "CPU of podvisor run over the same 5 s",
        (after.2 - before.2) as f64 / 1e9
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// CPU seconds one thread spends on one loopback TCP connect + close plus one HTTP GET (blocking
/// sockets, same listeners): on loopback both ends' kernel work runs in the connecting thread,
/// so this is what any prober pays per pair of probes.
fn loopback_floor(http_port: u16, tcp_port: u16) -> f64 {
    use std::io::{Read, Write};
    let thread_cpu = || {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1e9
    };
    let n = 500;
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
