//! `podvisor-bench runtime`: what cgroups, the mount namespace and the private root add to a
//! container start, beside the same starts without them, in one run; then `run`'s idle CPU and
//! peak RSS with 100 containers beside horust's on the same 100 `sleep`s.
//!
//! The start figure is podvisor's own `podvisor_container_start_seconds` histogram (from the
//! decision to start an instance to its exec, which the vfork-style spawn waits for), scraped
//! after 100 containers have started. Three ways, rounds interleaved:
//! - bare: as `nobody` with `podvisor.io/host-root: writable`, so no cgroup and no private
//!   root (what a host process costs);
//! - cgroups: as root with `podvisor.io/host-root: writable` (cgroups and limits only);
//! - full: as root, each start with its cgroups, mount namespace, overlay root and fresh /tmp;
//! - rootless: as `nobody`, each start in a user namespace with a root of its own.

use super::*;

const CONTAINERS: usize = 100;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Bare,
    Cgroups,
    Full,
    Rootless,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Bare => "bare (no cgroup, host root)",
            Mode::Cgroups => "cgroups and limits only",
            Mode::Full => "cgroups + namespace + private root",
            Mode::Rootless => "rootless: user namespace + root",
        }
    }

    /// Run as `nobody` rather than root.
    fn unprivileged(self) -> bool {
        matches!(self, Mode::Bare | Mode::Rootless)
    }
}

/// One run's figures: start p50, p99 (bucket bounds, ms), mean (ms), idle CPU s per 10 s, peak
/// RSS KiB.
struct Figures {
    p50: f64,
    p99: f64,
    mean: f64,
    cpu: f64,
    rss: f64,
}

pub fn runtime_bench(args: WithHorust) {
    let podvisor = program(&args.common);
    let horust = args.horust;
    let quick = args.common.quick;
    let rounds = if quick { 1 } else { 3 };
    let idle = Duration::from_secs(if quick { 3 } else { 10 });
    let dir = scratch("runtime");
    set_mode(&dir, 0o777);
    let mut results: Vec<(Mode, Vec<Figures>)> = vec![
        (Mode::Bare, Vec::new()),
        (Mode::Cgroups, Vec::new()),
        (Mode::Full, Vec::new()),
        (Mode::Rootless, Vec::new()),
    ];
    for round in 0..rounds {
        for (mode, figures) in results.iter_mut() {
            let run_dir = dir.join(format!("{}-{round}", *mode as u8));
            std::fs::create_dir_all(&run_dir).unwrap();
            set_mode(&run_dir, 0o777);
            figures.push(one_run(&podvisor, &run_dir, *mode, idle));
        }
    }
    let peer = horust.as_deref().and_then(|h| horust_run(h, &dir, idle));

    println!(
        "podvisor-bench runtime: {CONTAINERS} containers of sleep, {rounds} round(s) of each way, interleaved; idle {} s",
        idle.as_secs()
    );
    println!();
    println!(
        "{:<38}{:>12}{:>12}{:>12}",
        "container start (ms)", "median", "p99", "mean"
    );
    let all = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
    let bare_mean = all(&results[0].1, |f| f.mean);
    for (mode, v) in &results {
        println!(
            "{:<38}{:>12}{:>12}{:>12.3}",
            mode.label(),
            format!("≤ {:.2}", all(v, |f| f.p50)),
            format!("≤ {:.2}", all(v, |f| f.p99)),
            all(v, |f| f.mean)
        );
    }
    let full = &results[2].1;
    let added = all(full, |f| f.mean) - bare_mean;
    println!(
        "added per start by cgroups + namespace + private root: {added:.3} ms (mean); goal ≤ 5 ms median: {}",
        if all(full, |f| f.p50) <= 5.0 { "met" } else { "MISSED" }
    );
    println!();
    println!(
        "{:<38}{:>12}{:>12}",
        "run, 100 idle containers", "podvisor", "horust"
    );
    let cpu = all(full, |f| f.cpu);
    let rss = all(full, |f| f.rss);
    let theirs = |f: fn(&HorustRun) -> f64, d: usize| {
        peer.as_ref()
            .map_or("n/a".to_string(), |p| format!("{:.*}", d, f(p)))
    };
    println!(
        "{:<38}{:>12.4}{:>12}",
        "CPU while idle (s per 10 s)",
        cpu,
        theirs(|p| p.cpu, 4)
    );
    println!(
        "{:<38}{:>12.0}{:>12}  below horust's: {}",
        "peak RSS (KiB)",
        rss,
        theirs(|p| p.rss, 0),
        peer.as_ref()
            .map_or("n/a (pass --horust PATH)", |p| if rss < p.rss {
                "met"
            } else {
                "MISSED"
            })
    );
    println!(
        "(podvisor's figures: the full way; its binary: {})",
        podvisor.display()
    );
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn one_run(podvisor: &Path, dir: &Path, mode: Mode, idle: Duration) -> Figures {
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata:\n  name: bench\n");
    if matches!(mode, Mode::Cgroups | Mode::Bare) {
        yaml.push_str(
            "  annotations: {podvisor.io/root-from: host, podvisor.io/host-root: writable}\n",
        );
    } else {
        yaml.push_str("  annotations: {podvisor.io/root-from: host}\n");
    }
    yaml.push_str("spec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
    for i in 0..CONTAINERS {
        let limits = if mode.unprivileged() {
            ""
        } else {
            ", resources: {limits: {memory: 64Mi, cpu: 100m}}"
        };
        yaml.push_str(&format!(
            "  - {{name: c{i}, command: [sleep, '1000']{limits}}}\n"
        ));
    }
    std::fs::write(dir.join("pod.yaml"), yaml).unwrap();
    let events = dir.join("events.json");
    let port = free_port();
    let mut cmd = if mode.unprivileged() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(podvisor);
        c
    } else {
        Command::new(podvisor)
    };
    let mut child = cmd
        .args(["run", "-q", "--state-dir"])
        .arg(dir.join("state"))
        .arg("--events")
        .arg(&events)
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .arg(dir.join("pod.yaml"))
        .running()
        .expect("podvisor run");
    wait_for("100 started containers", Duration::from_secs(60), || {
        count_events(&events, "Started") >= CONTAINERS
    });
    let text = scrape(port);
    let metric = "podvisor_container_start_seconds";
    let p50 = bucket_percentile("", &text, metric, 0.5) * 1e3;
    let p99 = bucket_percentile("", &text, metric, 0.99) * 1e3;
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let mean = value(&format!("{metric}_sum")) / value(&format!("{metric}_count")) * 1e3;
    // The supervisor itself: setpriv execs it, so the child's pid is podvisor's.
    let pid = child.id();
    let (cpu, rss) = if mode == Mode::Full {
        std::thread::sleep(Duration::from_millis(500));
        let before = cpu_ns(pid);
        std::thread::sleep(idle);
        let cpu = (cpu_ns(pid) - before) as f64 / 1e9 * 10.0 / idle.as_secs_f64();
        (cpu, vm_hwm_kb(pid).unwrap_or(f64::NAN))
    } else {
        (f64::NAN, f64::NAN)
    };
    let status = child.stop();
    assert!(status.success(), "podvisor run exited {status}");
    Figures {
        p50,
        p99,
        mean,
        cpu,
        rss,
    }
}

/// What one run of horust on the 100 `sleep`s gave.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HorustRun {
    /// CPU while idle, s per 10 s.
    pub cpu: f64,
    /// Peak RSS (VmHWM), KiB.
    pub rss: f64,
    /// From SIGTERM to horust's exit, its services stopped (ms).
    pub stop_ms: f64,
}

/// The same 100 `sleep`s under horust (in the host's PID namespace: `sleep` ends on the
/// SIGTERM horust sends it).
pub(crate) fn horust_run(horust: &Path, dir: &Path, idle: Duration) -> Option<HorustRun> {
    let services = dir.join("horust-services");
    std::fs::create_dir_all(&services).ok()?;
    for i in 0..CONTAINERS {
        std::fs::write(
            services.join(format!("c{i}.toml")),
            "command = \"/bin/sleep 1000\"\n",
        )
        .ok()?;
    }
    let mut child = Command::new(horust)
        .arg("--services-path")
        .arg(&services)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .running()
        .ok()?;
    let pid = child.id();
    let children = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .map(|s| s.split_whitespace().count())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while children(pid) < CONTAINERS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ns(pid);
    std::thread::sleep(idle);
    let cpu = (cpu_ns(pid) - before) as f64 / 1e9 * 10.0 / idle.as_secs_f64();
    let rss = vm_hwm_kb(pid).unwrap_or(f64::NAN);
    let sleeps: Vec<u32> = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    let stop = Instant::now();
    child.stop();
    let stop_ms = stop.elapsed().as_secs_f64() * 1e3;
    // Nothing of the peer's outlives the run, whatever its shutdown did.
    for s in &sleeps {
        signal(*s, "KILL");
    }
    Some(HorustRun { cpu, rss, stop_ms })
}
