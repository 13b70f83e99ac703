//! `podvisor-bench top`: `podvisor top` watching 10 pods of 100 containers each (one of them
//! crash-looping every 2 s, so that statuses and events change all the time; `--idle`: none):
//! top's own CPU and
//! peak RSS, and the supervisors' CPU with and without top attached, in one run (rounds of a
//! window without, then one with; medians of three rounds, one with --quick and a second
//! window without). top runs in a tmux terminal, and
//! beside it `--watchers N` (default 5) `podvisor status -w -o json` on each pod.

use super::*;

const PODS: usize = 10;
const CONTAINERS: usize = 100;

pub fn top_bench(args: &[String]) {
    let podvisor = program(args, "--podvisor", "podvisor");
    let quick = args.iter().any(|a| a == "--quick");
    // --idle: no crash loop, nothing changes (what top costs a quiet machine).
    let idle = args.iter().any(|a| a == "--idle");
    let crash = if idle {
        "sleep 100000"
    } else {
        "sleep 1; exit 1"
    };
    let window = Duration::from_secs(if quick { 5 } else { 20 });
    let watchers: usize =
        arg_value(args, "--watchers").map_or(5, |n| n.parse().expect("--watchers N"));
    let dir = std::env::temp_dir().join(format!("podvisor-bench-top-{}", std::process::id()));
    let root = dir.join("root");
    let mut runs = start_pods(&podvisor, &dir, &root, crash);
    for (_, events) in &runs {
        wait_for("100 started containers", Duration::from_secs(120), || {
            count_events(events, "Started") >= CONTAINERS
        });
    }
    let pids: Vec<u32> = runs.iter().map(|(c, _)| c.id()).collect();
    let supervisors = || pids.iter().map(|p| cpu_ns(*p)).sum::<u64>();
    let measure = |what: &dyn Fn() -> u64| {
        let before = what();
        std::thread::sleep(window);
        (what() - before) as f64 / 1e9
    };
    // Rounds of a window without, then one with top and the watchers: the crash loops'
    // timing moves the supervisors' CPU from one window to the next by a fifth, so the
    // figures are the medians of the rounds.
    let rounds = if quick { 1 } else { 3 };
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let (mut top_cpu, mut top_hwm) = (0.0, 0.0f64);
    for _ in 0..rounds {
        without.push(measure(&supervisors));
        let watched = watched_window(&podvisor, &root, watchers, &|| measure(&supervisors));
        with.push(watched.0);
        top_cpu += watched.1 / rounds as f64;
        top_hwm = top_hwm.max(watched.2);
    }
    if quick {
        without.push(measure(&supervisors));
    }

    for (child, _) in &mut runs {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
    }
    for (child, _) in &mut runs {
        let _ = child.wait();
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        match v.len() % 2 {
            1 => v[v.len() / 2],
            _ => (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0,
        }
    };
    let (without, with) = (median(&mut without), median(&mut with));
    let secs = window.as_secs_f64();
    println!(
        "podvisor top on {PODS} pods × {CONTAINERS} containers ({}), {}s windows (podvisor {})",
        if idle {
            "idle"
        } else {
            "one crash-looping per pod"
        },
        window.as_secs(),
        podvisor.display()
    );
    println!("{:<58} {:>12}", "figure", "value");
    println!(
        "{:<58} {:>9.1} %",
        "top's CPU (one core = 100 %)",
        top_cpu / secs * 100.0
    );
    println!("{:<58} {:>9.1} MiB", "top's peak RSS", top_hwm / 1024.0);
    println!(
        "{:<58} {:>9.3} s",
        format!(
            "10 supervisors' CPU without top (median of {} windows)",
            rounds + usize::from(quick)
        ),
        without
    );
    println!(
        "{:<58} {:>9.3} s",
        format!("10 supervisors' CPU with top and {watchers} status -w per pod (median)"),
        with
    );
    if without > 0.0 {
        println!("{:<58} {:>9.2}", "ratio with / without", with / without);
    } else {
        println!("{:<58} {:>12}", "ratio with / without", "n/a (no CPU)");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One window with top in a tmux terminal of its own and `watchers` `status -w` on each pod:
/// the supervisors' CPU (`measure`), top's CPU and its peak RSS (KiB).
fn watched_window(
    podvisor: &Path,
    root: &Path,
    watchers: usize,
    measure: &dyn Fn() -> f64,
) -> (f64, f64, f64) {
    let socket = format!("podvisor-bench-top-{}", std::process::id());
    let tmux = |a: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(a)
            .output()
            .expect("tmux (apt-get install tmux)")
    };
    let cmd = format!("exec {} top --root {}", podvisor.display(), root.display());
    let session = ["-f", "/dev/null", "new-session", "-d", "-s", "top"];
    let started = tmux(&[&session[..], &["-x", "160", "-y", "50", &cmd]].concat());
    assert!(started.status.success(), "tmux: {started:?}");
    let pane = tmux(&["list-panes", "-t", "top", "-F", "#{pane_pid}"]);
    let top: u32 = String::from_utf8_lossy(&pane.stdout)
        .trim()
        .parse()
        .unwrap();
    wait_for("top to show every pod", Duration::from_secs(60), || {
        let screen = tmux(&["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&screen.stdout).contains("pods 10")
    });
    let watching = watch_pods(podvisor, root, watchers);
    std::thread::sleep(Duration::from_secs(2));
    let top_before = cpu_ns(top);
    let with = measure();
    let top_cpu = (cpu_ns(top) - top_before) as f64 / 1e9;
    let top_hwm = vm_hwm_kb(top).unwrap_or(0.0);
    tmux(&["kill-server"]);
    for mut w in watching {
        let _ = w.kill();
        let _ = w.wait();
    }
    std::thread::sleep(Duration::from_secs(1));
    (with, top_cpu, top_hwm)
}

/// `n` `podvisor status -w -o json` on each pod.
fn watch_pods(podvisor: &Path, root: &Path, n: usize) -> Vec<std::process::Child> {
    let mut watching = Vec::new();
    for p in 0..PODS {
        for _ in 0..n {
            let child = Command::new(podvisor)
                .args(["status", "-w", "-o", "json", "--state-dir"])
                .arg(root.join("bench").join(format!("p{p}")))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("podvisor status -w");
            watching.push(child);
        }
    }
    watching
}

/// The 10 pods, each with one container running `crash` and 99 sleeping: each run and its
/// events file.
fn start_pods(
    podvisor: &Path,
    dir: &Path,
    root: &Path,
    crash: &str,
) -> Vec<(std::process::Child, PathBuf)> {
    let mut runs = Vec::new();
    for p in 0..PODS {
        let mut yaml = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p{p}, namespace: bench, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - {{name: crash, command: [sh, -c, '{crash}']}}\n");
        for i in 1..CONTAINERS {
            yaml.push_str(&format!("  - {{name: c{i}, command: [sleep, '100000']}}\n"));
        }
        let pod_dir = dir.join(format!("p{p}"));
        std::fs::create_dir_all(&pod_dir).unwrap();
        std::fs::write(pod_dir.join("pod.yaml"), yaml).unwrap();
        let events = pod_dir.join("events.json");
        let child = Command::new(podvisor)
            .args([
                "run",
                "-q",
                "--backoff-initial",
                "1s",
                "--backoff-max",
                "1s",
            ])
            .arg("--state-dir")
            .arg(root.join("bench").join(format!("p{p}")))
            .arg("--events")
            .arg(&events)
            .arg(pod_dir.join("pod.yaml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("podvisor run");
        runs.push((child, events));
    }
    runs
}
