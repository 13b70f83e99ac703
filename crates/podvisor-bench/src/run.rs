//! `podvisor-bench run`: 100 containers under `podvisor run`, beside horust (`--horust PATH`)
//! and supervisord (Debian's, when it is installed) on the same 100 `sleep`s.

use super::*;

pub fn run_bench(args: WithHorust) {
    let podvisor = program(&args.common);
    let horust = args.horust;
    let quick = args.common.quick;
    let idle = if quick {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(10)
    };
    let dir = scratch("run");
    // `sleep` handles no SIGTERM: as PID 1 of a PID namespace of its own it would ignore it and
    // the stop would take the grace period. In the host's PID namespace (`hostPID`) SIGTERM
    // ends it, as it ends supervisord's, so the stop measures podvisor's own work.
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: bench, annotations: {podvisor.io/root-from: host}}\nspec:\n  terminationGracePeriodSeconds: 5\n  hostPID: true\n  containers:\n");
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
        .running()
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
    let status = child.stop();
    let stop = stop_start.elapsed().as_secs_f64() * 1e3;
    assert!(status.success(), "podvisor run exited {status}");

    let late = restart_lateness(&podvisor, &dir, quick);
    let horust = horust
        .as_deref()
        .and_then(|h| super::runtime::horust_run(h, &dir, idle));
    let peer = supervisord(&dir, idle);
    let ours = Ours {
        per10: cpu * 10.0 / idle.as_secs_f64(),
        rss,
        stop,
        late,
    };
    report(idle, &ours, horust.as_ref(), peer.as_ref());
}

/// podvisor's figures in `run_bench`: idle CPU (s per 10 s), peak RSS (KiB), stop (ms), and
/// each restart's lateness (ms).
struct Ours {
    per10: f64,
    rss: f64,
    stop: f64,
    late: Vec<f64>,
}

/// Prints the figures beside horust's and supervisord's, with the targets.
fn report(
    idle: Duration,
    ours: &Ours,
    horust: Option<&super::runtime::HorustRun>,
    peer: Option<&(f64, f64, f64)>,
) {
    let Ours {
        per10,
        rss,
        stop,
        ref late,
    } = *ours;
    let worst = late.iter().cloned().fold(f64::NAN, f64::max);
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let peer_col = |f: fn(&(f64, f64, f64)) -> f64, decimals: usize| {
        peer.map_or("n/a".to_string(), |p| format!("{:.*}", decimals, f(p)))
    };
    let horust_col = |f: fn(&super::runtime::HorustRun) -> f64, decimals: usize| {
        horust.map_or("n/a".to_string(), |h| format!("{:.*}", decimals, f(h)))
    };
    println!(
        "podvisor-bench run: 100 containers of sleep; idle {} s",
        idle.as_secs()
    );
    println!();
    println!(
        "{:<48}{:>12}{:>12}{:>14}  target",
        "", "podvisor", "horust", "supervisord"
    );
    let row = |label: &str, ours: String, h: String, s: String, target: &str, ok: bool| {
        println!(
            "{label:<48}{ours:>12}{h:>12}{s:>14}  {target}: {}",
            verdict(ok)
        );
    };
    row(
        "CPU while idle (s per 10 s)",
        format!("{per10:.4}"),
        horust_col(|h| h.cpu, 4),
        peer_col(|p| p.0, 4),
        "≤ 0.02 s",
        per10 <= 0.02,
    );
    row(
        "peak RSS (KiB)",
        format!("{rss:.0}"),
        horust_col(|h| h.rss, 0),
        peer_col(|p| p.1, 0),
        "≤ 6144 KiB",
        rss <= 6144.0,
    );
    row(
        "stop of 100 containers (ms)",
        format!("{stop:.1}"),
        horust_col(|h| h.stop_ms, 1),
        peer_col(|p| p.2, 1),
        "≤ 200 ms",
        stop <= 200.0,
    );
    match horust {
        Some(h) => println!(
            "{:<48}{:>12.3}{:>12}{:>14}  ≤ 0.05× horust: {}",
            "stop, podvisor / horust",
            stop / h.stop_ms,
            "",
            "",
            verdict(stop <= 0.05 * h.stop_ms)
        ),
        None => println!(
            "{:<48}{:>12}",
            "stop, podvisor / horust", "n/a (pass --horust PATH)"
        ),
    }
    row(
        "restart after the backoff, worst lateness (ms)",
        format!("{worst:.1}"),
        "n/a".to_string(),
        "n/a".to_string(),
        "≤ 5 ms",
        worst <= 5.0,
    );
    println!(
        "(restart lateness: median {:.1} ms of {}; event times have 1 ms resolution)",
        median(late.clone()),
        late.len()
    );
}

/// How late each restart after the backoff was (ms): a container that fails at once, with a
/// 100 ms backoff.
fn restart_lateness(podvisor: &Path, dir: &Path, quick: bool) -> Vec<f64> {
    let pod2 = "apiVersion: v1\nkind: Pod\nmetadata: {name: crash, annotations: {podvisor.io/root-from: host}}\nspec:\n  containers:\n  - {name: c, command: [/bin/false]}\n";
    std::fs::write(dir.join("crash.yaml"), pod2).unwrap();
    let events2 = dir.join("events2.json");
    let mut child = Command::new(podvisor)
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
        .running()
        .expect("podvisor run");
    let restarts = if quick { 5 } else { 20 };
    wait_for("restarts", Duration::from_secs(60), || {
        count_events(&events2, "Started") >= restarts + 2
    });
    child.stop();
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
    late
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
        .running()
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
    child.stop();
    Some((cpu, rss, start.elapsed().as_secs_f64() * 1e3))
}
