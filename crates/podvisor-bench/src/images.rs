//! `podvisor-bench image-memory --image REF`: 100 containers of one image beside the same 100
//! on the host's root, each pod under `--live-restore` with limits: `run` and its keeper,
//! summed PSS, and the mean container start (podvisor's start histogram), in one run. The image
//! must be in the store of `PODVISOR_STATE_BASE` already (`scripts/bench-image` pulls it) and
//! have busybox at /bin/busybox.

use super::live::{keepers, pss_kb, start_figures};
use super::*;

const CONTAINERS: usize = 100;

fn pod(dir: &Path, image: Option<&str>) -> PathBuf {
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata:\n  name: bench\n");
    if image.is_none() {
        yaml.push_str("  annotations: {podvisor.io/root-from: host}\n");
    }
    yaml.push_str("spec:\n  terminationGracePeriodSeconds: 5\n  containers:\n");
    for i in 0..CONTAINERS {
        let (from, command) = match image {
            Some(r) => (
                format!("image: {r}, imagePullPolicy: Never, "),
                "[/bin/busybox, sleep, '1000']",
            ),
            None => (String::new(), "[sleep, '1000']"),
        };
        yaml.push_str(&format!(
            "  - {{name: c{i}, {from}command: {command}, resources: {{limits: {{memory: 64Mi, cpu: 100m}}}}}}\n"
        ));
    }
    let path = dir.join("pod.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// One pod in `dir`: (start mean ms, summed PSS of run and its keeper in KiB).
fn one_run(podvisor: &Path, dir: &Path, image: Option<&str>) -> (f64, f64) {
    let manifest = pod(dir, image);
    let state = dir.join("state");
    let events = dir.join("events.json");
    let port = free_port();
    let mut child = Command::new(podvisor)
        .args(["run", "-q", "--live-restore", "--state-dir"])
        .arg(&state)
        .arg("--events")
        .arg(&events)
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .arg(&manifest)
        .running()
        .expect("podvisor run");
    wait_for("100 started containers", Duration::from_secs(120), || {
        count_events(&events, "Started") >= CONTAINERS
    });
    let (mean, _) = start_figures(port);
    std::thread::sleep(Duration::from_millis(500));
    let pss = pss_kb(child.id()) + keepers(&state).iter().map(|k| pss_kb(*k)).sum::<f64>();
    let _ = Command::new(podvisor)
        .args(["stop", "--state-dir"])
        .arg(&state)
        .stdout(Stdio::null())
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "podvisor run exited {status}");
    wait_for("the keepers to end", Duration::from_secs(30), || {
        keepers(&state).is_empty()
    });
    (mean, pss)
}

pub fn image_memory_bench(args: ImageArgs) {
    let podvisor = program(&args.common);
    let image = args.image;
    let rounds = if args.common.quick { 1 } else { 3 };
    let dir = scratch("images");
    let mut host = Vec::new();
    let mut from_image = Vec::new();
    for round in 0..rounds {
        for (name, image, out) in [
            ("host", None, &mut host),
            ("image", Some(image.as_str()), &mut from_image),
        ] {
            let d = dir.join(format!("{round}-{name}"));
            std::fs::create_dir_all(&d).unwrap();
            out.push(one_run(&podvisor, &d, image));
        }
    }
    let m = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| median(v.iter().map(f).collect());
    println!("podvisor-bench image-memory: {CONTAINERS} containers of sleep under --live-restore, {rounds} round(s) each way, interleaved");
    println!(
        "{:<40}{:>14}{:>14}{:>10}",
        "", "host root", "image root", "ratio"
    );
    let (ph, pi) = (m(&host, |f| f.1), m(&from_image, |f| f.1));
    println!(
        "{:<40}{:>14.0}{:>14.0}{:>10.2}",
        "run + keeper PSS (KiB)",
        ph,
        pi,
        pi / ph
    );
    let (sh, si) = (m(&host, |f| f.0), m(&from_image, |f| f.0));
    println!(
        "{:<40}{:>14.3}{:>14.3}{:>10.2}",
        "container start, mean (ms)",
        sh,
        si,
        si / sh
    );
    println!("(podvisor: {}; image: {image})", podvisor.display());
}
