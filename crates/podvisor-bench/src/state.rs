//! `podvisor-bench state`: what the saved state costs.
//!
//! 1. 100 containers crash-looping at once (100 ms backoff): podvisor's writes of its record,
//!    from its own histogram `podvisor_state_write_seconds` (median and p99 as bucket bounds,
//!    mean exact), how many writes per restart, beside the same atomic write of the record's
//!    bytes timed in this process (the floor the filesystem sets: two fsyncs).
//! 2. 100 idle containers: podvisor's own CPU over an idle window.
//! 3. 100 containers of `sleep`: from starting `podvisor run` to the 100th `Started` event,
//!    fresh (a new state dir) and resumed (the same state dir after a kill -9), interleaved.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use super::*;

pub fn state_bench(args: Common) {
    let podvisor = program(&args);
    let quick = args.quick;
    let dir = scratch("state");

    // 1. Writes while 100 containers crash-loop.
    let window = Duration::from_secs(if quick { 5 } else { 20 });
    let mut yaml = pod_yaml("crashers", "[sh, -c, 'exit 1']");
    yaml.push_str("---\napiVersion: podvisor.io/v1alpha1\nkind: Supervision\nmetadata: {name: s}\nspec:\n  stagedInstrumentation: {env: {AGENT: 'on'}}\n");
    std::fs::write(dir.join("crash.yaml"), yaml).unwrap();
    let port = free_port();
    let events = dir.join("crash-events.json");
    let mut child = Command::new(&podvisor)
        .args([
            "run",
            "-q",
            "--backoff-initial",
            "100ms",
            "--backoff-max",
            "100ms",
        ])
        .args([
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--state-dir",
        ])
        .arg(dir.join("crash-state"))
        .arg("--events")
        .arg(&events)
        .arg(dir.join("crash.yaml"))
        .running()
        .expect("podvisor run");
    wait_for("100 started containers", Duration::from_secs(60), || {
        count_events(&events, "Started") >= 100
    });
    std::thread::sleep(Duration::from_secs(1));
    let (restarts_before, before) = (count_events(&events, "Started"), scrape(port));
    std::thread::sleep(window);
    let (restarts_after, after) = (count_events(&events, "Started"), scrape(port));
    let record = std::fs::read(dir.join("crash-state/podvisor.state")).unwrap();
    child.stop();
    let count = |text: &str, what: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(&format!("podvisor_state_write_seconds_{what}")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    let writes = count(&after, "count") - count(&before, "count");
    let mean_ms = (count(&after, "sum") - count(&before, "sum")) / writes * 1e3;
    let restarts = (restarts_after - restarts_before) as f64;
    let p50 = bucket_percentile(&before, &after, "podvisor_state_write_seconds", 0.5) * 1e3;
    let p99 = bucket_percentile(&before, &after, "podvisor_state_write_seconds", 0.99) * 1e3;
    // The floor: the same bytes, written the same way, here.
    let floor: Vec<f64> = (0..if quick { 100 } else { 500 })
        .map(|_| atomic_write_ms(&dir, &record))
        .collect();

    // 2. Idle CPU with 100 containers.
    std::fs::write(dir.join("idle.yaml"), pod_yaml("idle", "[sleep, '1000']")).unwrap();
    let idle = Duration::from_secs(if quick { 3 } else { 10 });
    let (mut child, _) = start_and_wait(
        &podvisor,
        &dir.join("idle.yaml"),
        &dir.join("idle-state"),
        "idle",
    );
    std::thread::sleep(Duration::from_millis(500));
    let cpu_before = cpu_ns(child.id());
    std::thread::sleep(idle);
    let idle_cpu = (cpu_ns(child.id()) - cpu_before) as f64 / 1e9;
    child.stop();

    let rounds = if quick { 3 } else { 7 };
    let (fresh, resumed) = fresh_and_resumed(&podvisor, &dir, rounds);

    println!("podvisor state benchmark ({} containers)", 100);
    println!();
    println!(
        "record writes while 100 containers crash-loop ({}s window, 100 ms backoff):",
        window.as_secs()
    );
    println!("  restarts {restarts:.0}, writes {writes:.0} ({:.2} writes per restart; a write covers every exit of one loop turn)", writes / restarts);
    println!(
        "  podvisor, its histogram:   median <= {p50} ms, p99 <= {p99} ms, mean {mean_ms:.3} ms"
    );
    println!(
        "  floor, same {} bytes written here (write, fsync, rename, fsync dir): median {:.3} ms, p99 {:.3} ms",
        record.len(),
        median(floor.clone()),
        percentile(floor, 0.99)
    );
    println!(
        "  podvisor's cost per restart: {:.3} ms (mean write x writes per restart)",
        mean_ms * writes / restarts
    );
    println!();
    println!(
        "podvisor CPU, 100 idle containers over {}s: {idle_cpu:.4} s",
        idle.as_secs()
    );
    println!();
    println!("to 100 containers running ({rounds} rounds, interleaved):");
    let (f, r) = (median(fresh.clone()), median(resumed.clone()));
    println!(
        "  fresh start:             median {f:.1} ms  (all: {})",
        list(&fresh)
    );
    println!(
        "  resumed after kill -9:   median {r:.1} ms  (all: {})",
        list(&resumed)
    );
    println!(
        "  resume beyond a fresh start: {:.1} ms (target <= 100 ms)",
        r - f
    );
}

/// 3. Fresh start against resume, interleaved: ms to 100 containers running, each round.
fn fresh_and_resumed(podvisor: &Path, dir: &Path, rounds: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut fresh, mut resumed) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let state = dir.join(format!("resume-state-{round}"));
        let (mut child, ms) = start_and_wait(
            podvisor,
            &dir.join("idle.yaml"),
            &state,
            &format!("fresh-{round}"),
        );
        fresh.push(ms);
        // podvisor dies; the kernel takes its containers (parent-death signal).
        child.kill().unwrap();
        child.wait().unwrap();
        wait_for("the containers to go", Duration::from_secs(20), || {
            sleepers() == 0
        });
        let (mut child, ms) = start_and_wait(
            podvisor,
            &dir.join("idle.yaml"),
            &state,
            &format!("resumed-{round}"),
        );
        assert_eq!(
            count_events(&dir.join(format!("resumed-{round}.json")), "Resumed"),
            1
        );
        resumed.push(ms);
        child.stop();
    }
    (fresh, resumed)
}

fn list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pod_yaml(name: &str, command: &str) -> String {
    let mut yaml = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n");
    for i in 0..100 {
        yaml.push_str(&format!("  - {{name: c{i}, command: {command}}}\n"));
    }
    yaml
}

/// Starts `podvisor run` and returns it with the milliseconds from its start to the 100th
/// `Started` event of this run.
fn start_and_wait(podvisor: &Path, pod: &Path, state: &Path, tag: &str) -> (Running, f64) {
    let events = pod.with_file_name(format!("{tag}.json"));
    let _ = std::fs::remove_file(&events);
    let t0 = SystemTime::now();
    let child = Command::new(podvisor)
        .args(["run", "-q", "--state-dir"])
        .arg(state)
        .arg("--events")
        .arg(&events)
        .arg(pod)
        .stdout(Stdio::null())
        .running()
        .expect("podvisor run");
    wait_for("100 started containers", Duration::from_secs(60), || {
        count_events(&events, "Started") >= 100
    });
    let text = std::fs::read_to_string(&events).unwrap();
    let last = text
        .lines()
        .filter(|l| l.contains("\"reason\":\"Started\""))
        .nth(99)
        .and_then(event_ms)
        .unwrap();
    let day_ms =
        |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1e3 % 86_400_000.0;
    (child, last - day_ms(t0))
}

/// Containers of this benchmark (`sleep 1000`) still running.
fn sleepers() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let p = e.path();
            std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.trim() == "sleep")
                && std::fs::read_to_string(p.join("cmdline"))
                    .is_ok_and(|c| c == "sleep\u{0}1000\u{0}")
        })
        .count()
}

/// Writes `bytes` as podvisor writes its record; milliseconds.
fn atomic_write_ms(dir: &Path, bytes: &[u8]) -> f64 {
    let (tmp, path) = (dir.join(".floor.tmp"), dir.join("floor.state"));
    let d = std::fs::File::open(dir).unwrap();
    let t = Instant::now();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .unwrap();
    f.write_all(bytes).unwrap();
    f.sync_data().unwrap();
    drop(f);
    std::fs::rename(&tmp, &path).unwrap();
    d.sync_all().unwrap();
    t.elapsed().as_secs_f64() * 1e3
}
