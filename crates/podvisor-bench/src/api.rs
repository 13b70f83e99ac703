//! `podvisor-bench api`: the status API and logs.

use super::*;

pub fn api_bench(args: Common) {
    let podvisor = program(&args);
    let quick = args.quick;
    let dir = scratch("api");
    let mb = if quick { 20 } else { 100 };
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: api, annotations: {podvisor.io/root-from: host}}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
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
        .running()
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
    let status_ms: Vec<f64> = timed(&podvisor, &["status", "-o", "json"], &state, 30)
        .into_iter()
        .map(|s| s * 1e3)
        .collect();
    let logs_runs = timed(&podvisor, &["logs", "big"], &state, 3);
    let text_bytes = (mb * 1_000_000 / 100 * 99) as f64 + (mb * 1_000_000 / 100 * 99 / 99) as f64;
    let logs_s = median(logs_runs);
    // Watchers while nothing changes.
    let mut watch = Command::new(&podvisor)
        .args(["status", "-w", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::null())
        .running()
        .unwrap();
    let mut follow = Command::new(&podvisor)
        .args(["logs", "-f", "c1", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::null())
        .running()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let before = (cpu_ns(watch.id()), cpu_ns(follow.id()), cpu_ns(pid));
    std::thread::sleep(Duration::from_secs(5));
    let after = (cpu_ns(watch.id()), cpu_ns(follow.id()), cpu_ns(pid));
    assert!(child.stop().success());
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
}

/// Seconds each of `n` runs of `podvisor ARGS --state-dir STATE` took, whole.
fn timed(podvisor: &Path, args: &[&str], state: &Path, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            let out = Command::new(podvisor)
                .args(args)
                .arg("--state-dir")
                .arg(state)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(out.success());
            t.elapsed().as_secs_f64()
        })
        .collect()
}
