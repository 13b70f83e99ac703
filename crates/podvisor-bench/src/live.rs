//! `podvisor-bench live-restore`: what keepers (`run --live-restore`) cost and what adoption
//! takes, on 100 containers of `sleep` (cgroups and limits, as root), in one run:
//! - container start with a keeper beside without (podvisor's own start histogram, mean and
//!   median bucket), rounds interleaved;
//! - memory: `run` and its keeper (one holds the 100), summed PSS (/proc/PID/smaps_rollup),
//!   once the containers have been idle for `SETTLED`, beside `run` alone without a keeper and
//!   horust's peak RSS on the same 100 sleeps (the median of `HORUST_RUNS` runs); the keeper's
//!   CPU while idle; the same sum for 10 containers, and what each of the 90 added containers
//!   costs;
//! - adoption: `run` killed with SIGKILL, then the time from starting `run` again to the 100th
//!   `Adopted` event (events file polled every millisecond), beside one `podvisor status` of the
//!   same pod (spawn to exit, median of 5); restarts after adoption must be zero.

use super::*;

const CONTAINERS: usize = 100;
/// The smaller pod, for the cost of an added container.
const FEW: usize = 10;
/// Runs of horust whose peak RSS gives its median: it moves by a fifth from one run of the
/// same binary to the next (its threads' stacks and arenas), podvisor's by a few percent.
const HORUST_RUNS: usize = 5;
/// How long the containers are left idle before their supervisors' memory is measured: the
/// run and its keeper give back what their start took once they have had a second without
/// work (`process::settle::SETTLE`), and the memory of idle containers is what is measured.
const SETTLED: Duration = Duration::from_millis(1500);

fn pod_yaml(dir: &Path, containers: usize) -> PathBuf {
    let mut yaml = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bench\n  annotations: {podvisor.io/root-from: host, podvisor.io/host-root: writable}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n",
    );
    for i in 0..containers {
        yaml.push_str(&format!(
            "  - {{name: c{i}, command: [sleep, '1000'], resources: {{limits: {{memory: 64Mi, cpu: 100m}}}}}}\n"
        ));
    }
    let path = dir.join("pod.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn start_run(podvisor: &Path, dir: &Path, live: bool, port: Option<u16>) -> Running {
    let mut cmd = Command::new(podvisor);
    cmd.args(["run", "-q", "--state-dir"])
        .arg(dir.join("state"))
        .arg("--events")
        .arg(dir.join("events.json"));
    if live {
        cmd.arg("--live-restore");
    }
    if let Some(p) = port {
        cmd.args(["--metrics-addr", &format!("127.0.0.1:{p}")]);
    }
    cmd.arg(dir.join("pod.yaml"))
        .running()
        .expect("podvisor run")
}

/// Mean and median (bucket bound) of the container start histogram, ms.
pub(crate) fn start_figures(port: u16) -> (f64, f64) {
    let text = scrape(port);
    let metric = "podvisor_container_start_seconds";
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let mean = value(&format!("{metric}_sum")) / value(&format!("{metric}_count")) * 1e3;
    (mean, bucket_percentile("", &text, metric, 0.5) * 1e3)
}

/// Pids of the keepers of `state_dir`.
pub(crate) fn keepers(state_dir: &Path) -> Vec<u32> {
    let needle = format!("keeper\0{}\0", state_dir.display());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

pub(crate) fn pss_kb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            let l = t.lines().find(|l| l.starts_with("Pss:"))?;
            l.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(f64::NAN)
}

fn client(podvisor: &Path, dir: &Path, what: &str) -> std::process::ExitStatus {
    Command::new(podvisor)
        .arg(what)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .stdout(Stdio::null())
        .status()
        .unwrap()
}

struct Round {
    start_without: (f64, f64),
    start_with: (f64, f64),
    pss_run_alone: f64,
    pss_with_keepers: f64,
    pss_few: f64,
    keepers_cpu: f64,
    adopt_ms: f64,
    status_ms: f64,
    restarts_after: usize,
}

/// `run --live-restore` and its keeper holding `FEW` containers, summed PSS in KiB.
fn few_pss(podvisor: &Path, dir: &Path) -> f64 {
    let few = dir.join("few");
    std::fs::create_dir_all(&few).unwrap();
    pod_yaml(&few, FEW);
    let mut run = start_run(podvisor, &few, true, None);
    wait_for("10 started", Duration::from_secs(60), || {
        count_events(&few.join("events.json"), "Started") >= FEW
    });
    std::thread::sleep(SETTLED);
    let state = few.join("state");
    let pss = pss_kb(run.id()) + keepers(&state).iter().map(|k| pss_kb(*k)).sum::<f64>();
    assert!(client(podvisor, &few, "stop").success());
    let _ = run.wait();
    wait_for("the keeper to end", Duration::from_secs(30), || {
        keepers(&state).is_empty()
    });
    pss
}

fn one_round(podvisor: &Path, dir: &Path, idle: Duration) -> Round {
    let pss_few = few_pss(podvisor, dir);

    // Without keepers.
    let plain = dir.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    pod_yaml(&plain, CONTAINERS);
    let port = free_port();
    let mut run = start_run(podvisor, &plain, false, Some(port));
    wait_for("100 started", Duration::from_secs(60), || {
        count_events(&plain.join("events.json"), "Started") >= CONTAINERS
    });
    std::thread::sleep(SETTLED);
    let pss_run_alone = pss_kb(run.id());
    let start_without = start_figures(port);
    run.stop();

    // With keepers.
    let live = dir.join("live");
    std::fs::create_dir_all(&live).unwrap();
    pod_yaml(&live, CONTAINERS);
    let port = free_port();
    let mut run = start_run(podvisor, &live, true, Some(port));
    let events = live.join("events.json");
    wait_for("100 started", Duration::from_secs(60), || {
        count_events(&events, "Started") >= CONTAINERS
    });
    std::thread::sleep(SETTLED);
    let state = live.join("state");
    let ks = keepers(&state);
    // One keeper holds the pod's containers.
    assert_eq!(ks.len(), 1, "keepers");
    let pss_with_keepers = pss_kb(run.id()) + ks.iter().map(|k| pss_kb(*k)).sum::<f64>();
    let start_with = start_figures(port);
    let before: u64 = ks.iter().map(|k| cpu_ns(*k)).sum();
    std::thread::sleep(idle);
    let keepers_cpu = (ks.iter().map(|k| cpu_ns(*k)).sum::<u64>() - before) as f64 / 1e9;

    // Adoption.
    run.kill().unwrap();
    let _ = run.wait();
    let started_before = count_events(&events, "Started");
    let began = Instant::now();
    let mut run = start_run(podvisor, &live, true, None);
    let deadline = began + Duration::from_secs(30);
    while count_events(&events, "Adopted") < CONTAINERS {
        assert!(Instant::now() < deadline, "adoption timed out");
        std::thread::sleep(Duration::from_millis(1));
    }
    let adopt_ms = began.elapsed().as_secs_f64() * 1e3;
    let status_ms = median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                assert!(client(podvisor, &live, "status").success());
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let restarts_after = count_events(&events, "Started") - started_before;
    assert!(client(podvisor, &live, "stop").success());
    let _ = run.wait();
    wait_for("the keepers to end", Duration::from_secs(30), || {
        keepers(&state).is_empty()
    });
    Round {
        start_without,
        start_with,
        pss_run_alone,
        pss_with_keepers,
        pss_few,
        keepers_cpu,
        adopt_ms,
        status_ms,
        restarts_after,
    }
}

pub fn live_bench(args: WithHorust) {
    let install = installed(&program(&args.common), &["podvisor-keeper"]);
    let podvisor = install.program.clone();
    let horust = args.horust;
    let quick = args.common.quick;
    let rounds = if quick { 1 } else { 3 };
    let idle = Duration::from_secs(if quick { 3 } else { 10 });
    let dir = scratch("live");
    let results: Vec<Round> = (0..rounds)
        .map(|r| {
            let d = dir.join(r.to_string());
            std::fs::create_dir_all(&d).unwrap();
            one_round(&podvisor, &d, idle)
        })
        .collect();
    // horust's runs after podvisor's (their sleeps are not podvisor's to count), each alone.
    // Their peak RSS alone (`horust_run` gives its idle CPU and stop too, which this bench does not show).
    let peer_rss: Vec<f64> = (horust.as_deref().into_iter())
        .flat_map(|h| {
            let dir = &dir;
            (0..HORUST_RUNS).filter_map(move |_| super::runtime::horust_run(h, dir, idle))
        })
        .map(|run| run.rss)
        .collect();
    let m = |f: fn(&Round) -> f64| median(results.iter().map(f).collect());
    println!(
        "podvisor-bench live-restore: {CONTAINERS} containers of sleep (cgroups, limits), {rounds} round(s); idle {} s",
        idle.as_secs()
    );
    println!();
    println!(
        "{:<44}{:>12}{:>12}{:>10}",
        "container start (ms)", "no keeper", "keeper", "ratio"
    );
    let (wo, wi) = (m(|r| r.start_without.0), m(|r| r.start_with.0));
    println!("{:<44}{:>12.3}{:>12.3}{:>10.2}", "mean", wo, wi, wi / wo);
    println!(
        "{:<44}{:>12}{:>12}",
        "median (histogram bucket)",
        format!("≤ {:.2}", m(|r| r.start_without.1)),
        format!("≤ {:.2}", m(|r| r.start_with.1))
    );
    println!();
    let with = m(|r| r.pss_with_keepers);
    println!(
        "{:<44}{:>12.0}",
        "run alone, PSS (KiB)",
        m(|r| r.pss_run_alone)
    );
    println!("{:<44}{:>12.0}", "run + its keeper, summed PSS (KiB)", with);
    let few = m(|r| r.pss_few);
    println!(
        "{:<44}{:>12.0}",
        format!("the same for {FEW} containers (KiB)"),
        few
    );
    let added = (with - few) / (CONTAINERS - FEW) as f64;
    println!(
        "{:<44}{:>12.1}  goal ≤ 50 KiB: {}",
        "per added container (KiB)",
        added,
        if added <= 50.0 { "met" } else { "MISSED" }
    );
    match peer_rss.len() {
        0 => println!(
            "{:<44}{:>12}",
            "horust, peak RSS (KiB)", "n/a (pass --horust PATH)"
        ),
        n => {
            let lo = peer_rss.iter().copied().fold(f64::MAX, f64::min);
            let hi = peer_rss.iter().copied().fold(0.0, f64::max);
            let peer = median(peer_rss);
            println!(
                "{:<44}{:>12.0}  ratio {:.2}, goal ≤ 0.8: {}",
                format!("horust, peak RSS (KiB), median of {n}"),
                peer,
                with / peer,
                if with <= 0.8 * peer { "met" } else { "MISSED" }
            );
            println!(
                "{:<44}{:>12}",
                "  its runs, lowest to highest (KiB)",
                format!("{lo:.0}–{hi:.0}")
            );
        }
    }
    println!(
        "{:<44}{:>12.4}",
        format!("the keeper's CPU while idle (s per {} s)", idle.as_secs()),
        m(|r| r.keepers_cpu)
    );
    println!();
    let (adopt, status) = (m(|r| r.adopt_ms), m(|r| r.status_ms));
    println!("{:<44}{:>12.1}", "run to 100 adopted (ms)", adopt);
    println!("{:<44}{:>12.1}", "one podvisor status (ms)", status);
    println!(
        "{:<44}{:>12.1}  goal ≤ 50 ms: {}",
        "beyond a status read (ms)",
        adopt - status,
        if adopt - status <= 50.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    let restarts: usize = results.iter().map(|r| r.restarts_after).sum();
    println!(
        "{:<44}{:>12}",
        "restarts after adoption (all rounds)", restarts
    );
}
