//! `podvisor-bench top`: `podvisor top` watching 10 pods of 100 containers each (one of them
//! crash-looping every 2 s, so that statuses and events change all the time; `--idle`: none):
//! top's own CPU and peak RSS, the watchers' CPU, and the supervisors' CPU with and without top
//! attached, in one run. top runs in a tmux terminal, and beside it `--watchers N` (default 5)
//! `podvisor status -w -o json` on each pod.
//!
//! The supervisors' CPU is counted over rounds of two windows, one without and one with the
//! watchers, in turn first (so that a drift of the machine weighs on both alike): of all their
//! threads (from each `/proc/PID/task/*/schedstat`) and of their main threads alone, with the
//! containers started in each window. A window holds 4 to 6 crash cycles of each pod depending
//! on where it falls in them, which moves one window's CPU by a fifth; the totals over the
//! rounds, and the CPU per container start, move much less.

use super::*;

const PODS: usize = 10;
const CONTAINERS: usize = 100;

/// What one window counted: the supervisors' CPU (all threads, main threads; seconds) and the
/// containers started in it.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    all: f64,
    main: f64,
    starts: usize,
}

impl std::ops::AddAssign for Window {
    fn add_assign(&mut self, w: Window) {
        self.all += w.all;
        self.main += w.main;
        self.starts += w.starts;
    }
}

pub fn top_bench(args: TopArgs) {
    let podvisor = program(&args.common);
    let quick = args.common.quick;
    // --idle: no crash loop, nothing changes (what top costs a quiet machine).
    let idle = args.idle;
    let crash = if idle {
        "sleep 100000"
    } else {
        "sleep 1; exit 1"
    };
    let window = Duration::from_secs(if quick { 5 } else { 10 });
    let watchers = args.watchers;
    let rounds = args
        .rounds
        .map_or(if quick { 2 } else { 8 }, |n| n as usize);
    let dir = scratch("top");
    let root = dir.join("root");
    let mut runs = start_pods(&podvisor, &dir, &root, crash);
    for (_, events) in &runs {
        wait_for("100 started containers", Duration::from_secs(120), || {
            count_events(events, "Started") >= CONTAINERS
        });
    }
    let pids: Vec<u32> = runs.iter().map(|(c, _)| c.id()).collect();
    let all = || pids.iter().map(|p| cpu_ns(*p)).sum::<u64>();
    let main = || pids.iter().map(|p| main_thread_ns(*p)).sum::<u64>();
    let starts = || {
        runs.iter()
            .map(|(_, events)| count_events(events, "Started"))
            .sum::<usize>()
    };
    let measure = || {
        let before = (all(), main(), starts());
        std::thread::sleep(window);
        Window {
            // (A thread that ended in the window takes its CPU with it.)
            all: all().saturating_sub(before.0) as f64 / 1e9,
            main: main().saturating_sub(before.1) as f64 / 1e9,
            starts: starts() - before.2,
        }
    };
    let (mut without, mut with) = (Window::default(), Window::default());
    let mut ratios = Vec::new();
    let (mut top_cpu, mut top_hwm, mut watchers_cpu) = (0.0, 0.0f64, 0.0);
    for round in 0..rounds {
        let (a, b) = if round % 2 == 0 {
            let a = measure();
            (a, watched_window(&podvisor, &root, watchers, &measure))
        } else {
            let b = watched_window(&podvisor, &root, watchers, &measure);
            (measure(), b)
        };
        without += a;
        with += b.window;
        top_cpu += b.top_cpu / rounds as f64;
        top_hwm = top_hwm.max(b.top_hwm);
        watchers_cpu += b.watchers_cpu / rounds as f64;
        if a.all >= 1e-3 {
            ratios.push(b.window.all / a.all);
        }
    }

    for (child, _) in &mut runs {
        signal(child.id(), "TERM");
    }
    for (child, _) in &mut runs {
        let _ = child.wait();
    }
    Figures {
        idle,
        rounds,
        window,
        watchers,
        top_cpu,
        top_hwm,
        watchers_cpu,
        without,
        with,
        ratios,
    }
    .print(&podvisor);
}

/// What a run of the bench measured, to print.
struct Figures {
    idle: bool,
    rounds: usize,
    window: Duration,
    watchers: usize,
    /// top's CPU (s per window) and peak RSS (KiB).
    top_cpu: f64,
    top_hwm: f64,
    /// The `status -w` watchers' CPU (s per window, all of them).
    watchers_cpu: f64,
    /// The windows without and with the watchers, summed.
    without: Window,
    with: Window,
    /// Each round's ratio with / without (all threads).
    ratios: Vec<f64>,
}

impl Figures {
    fn print(mut self, podvisor: &Path) {
        let (without, with) = (self.without, self.with);
        let secs = self.window.as_secs_f64();
        // (Idle supervisors spend a few µs in a window: no ratio of those.)
        let ratio = |a: f64, b: f64| {
            if b >= 1e-3 {
                format!("{:.2}", a / b)
            } else {
                "n/a (< 1 ms)".to_string()
            }
        };
        let per_start = |w: &Window| w.all / w.starts.max(1) as f64 * 1e3;
        println!(
            "podvisor top on {PODS} pods × {CONTAINERS} containers ({}), {} rounds of {}s windows without and with (podvisor {})",
            if self.idle {
                "idle"
            } else {
                "one crash-looping per pod"
            },
            self.rounds,
            self.window.as_secs(),
            podvisor.display()
        );
        println!("{:<58} {:>12}", "figure", "value");
        println!(
            "{:<58} {:>9.1} %",
            "top's CPU (one core = 100 %)",
            self.top_cpu / secs * 100.0
        );
        println!(
            "{:<58} {:>9.1} MiB",
            "top's peak RSS",
            self.top_hwm / 1024.0
        );
        println!(
            "{:<58} {:>9.1} %",
            format!(
                "the {} status -w watchers' CPU, together",
                self.watchers * PODS
            ),
            self.watchers_cpu / secs * 100.0
        );
        let n = self.rounds as f64;
        println!(
            "{:<58} {:>9.3} s",
            "10 supervisors' CPU per window without (all threads)",
            without.all / n
        );
        println!(
            "{:<58} {:>9.3} s",
            format!(
                "10 supervisors' CPU per window with top and {} status -w",
                self.watchers
            ),
            with.all / n
        );
        println!(
            "{:<58} {:>12}",
            "ratio with / without (all threads, totals)",
            ratio(with.all, without.all)
        );
        self.ratios.sort_by(f64::total_cmp);
        if let (Some(lo), Some(hi)) = (self.ratios.first(), self.ratios.last()) {
            println!(
                "{:<58} {:>5.2}–{:.2}",
                "ratio with / without, rounds' lowest–highest", lo, hi
            );
        }
        println!(
            "{:<58} {:>12}",
            "ratio with / without (main threads alone, totals)",
            ratio(with.main, without.main)
        );
        println!(
            "{:<58} {:>5} / {}",
            "containers started in the windows without / with", without.starts, with.starts
        );
        if !self.idle {
            println!(
                "{:<58} {:>5.2} / {:.2} ms",
                "CPU per container start without / with (all threads)",
                per_start(&without),
                per_start(&with)
            );
            println!(
                "{:<58} {:>12}",
                "ratio per container start with / without",
                ratio(per_start(&with), per_start(&without))
            );
        }
    }
}

/// What one watched window measured.
struct Watched {
    /// What `measure` counted.
    window: Window,
    /// top's CPU (s) and peak RSS (KiB).
    top_cpu: f64,
    top_hwm: f64,
    /// The `status -w` watchers' CPU (s, all of them).
    watchers_cpu: f64,
}

/// One window with top in a tmux terminal of its own and `watchers` `status -w` on each pod.
fn watched_window(
    podvisor: &Path,
    root: &Path,
    watchers: usize,
    measure: &dyn Fn() -> Window,
) -> Watched {
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
    let watchers_ns = || watching.iter().map(|w| cpu_ns(w.id())).sum::<u64>();
    let (top_before, watchers_before) = (cpu_ns(top), watchers_ns());
    let window = measure();
    let top_cpu = (cpu_ns(top) - top_before) as f64 / 1e9;
    let watchers_cpu = watchers_ns().saturating_sub(watchers_before) as f64 / 1e9;
    let top_hwm = vm_hwm_kb(top).unwrap_or(0.0);
    tmux(&["kill-server"]);
    // The server leaves its socket file behind: it goes too ($TMUX_TMPDIR, or /tmp, then
    // tmux-UID).
    use std::os::unix::fs::MetadataExt;
    let tmp = std::env::var("TMUX_TMPDIR").unwrap_or_else(|_| "/tmp".into());
    if let Ok(me) = std::fs::metadata("/proc/self") {
        let _ = std::fs::remove_file(format!("{tmp}/tmux-{}/{socket}", me.uid()));
    }
    for mut w in watching {
        let _ = w.kill();
        let _ = w.wait();
    }
    std::thread::sleep(Duration::from_secs(1));
    Watched {
        window,
        top_cpu,
        top_hwm,
        watchers_cpu,
    }
}

/// `n` `podvisor status -w -o json` on each pod.
fn watch_pods(podvisor: &Path, root: &Path, n: usize) -> Vec<Running> {
    let mut watching = Vec::new();
    for p in 0..PODS {
        for _ in 0..n {
            let child = Command::new(podvisor)
                .args(["status", "-w", "-o", "json", "--state-dir"])
                .arg(root.join("bench").join(format!("p{p}")))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .running()
                .expect("podvisor status -w");
            watching.push(child);
        }
    }
    watching
}

/// The 10 pods, each with one container running `crash` and 99 sleeping: each run and its
/// events file.
fn start_pods(podvisor: &Path, dir: &Path, root: &Path, crash: &str) -> Vec<(Running, PathBuf)> {
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
            .running()
            .expect("podvisor run");
        runs.push((child, events));
    }
    runs
}
