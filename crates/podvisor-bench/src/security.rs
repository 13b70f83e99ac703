//! `podvisor-bench security`: what the securityContext and the pod's namespaces add to a
//! container start, beside the same starts without them, in one run; then 100 such containers
//! under `--live-restore`: `run` and its keeper, summed PSS, beside horust's peak RSS on the
//! same 100 `sleep`s.
//!
//! Both ways run as root with cgroups (limits), a mount namespace and a private root:
//! - plain: no securityContext and the host's namespaces (`hostPID`, `hostIPC`,
//!   `hostNetwork`): the setup a start had before podvisor applied them (the runtime's default
//!   capabilities are applied still, as every runtime does);
//! - secured: `runAsUser`/`runAsGroup` 1000, two supplementary groups, capabilities dropped but
//!   one, `no_new_privs`, the RuntimeDefault seccomp profile, and the pod's UTS and IPC
//!   namespaces joined, a PID namespace and a /proc of its own.
//!
//! The start figure is podvisor's `podvisor_container_start_seconds` histogram (decision to
//! exec), scraped once 100 containers have started; rounds interleaved.

use super::live::{keepers, pss_kb, start_figures};
use super::runtime::horust_run;
use super::*;

const CONTAINERS: usize = 100;

/// How a way's containers are set up.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Plain,
    /// Secured, but `seccompProfile: Unconfined`: what the seccomp filter costs, apart.
    NoSeccomp,
    Secured,
}

fn pod(dir: &Path, way: Way) -> PathBuf {
    let secured = way != Way::Plain;
    let mut yaml = String::from("apiVersion: v1\nkind: Pod\nmetadata:\n  name: bench\n  annotations: {podvisor.io/root-from: host}\nspec:\n  terminationGracePeriodSeconds: 5\n");
    if secured {
        yaml.push_str("  securityContext: {runAsUser: 1000, runAsGroup: 1000, supplementalGroups: [2000, 3000]}\n");
    } else {
        yaml.push_str("  hostPID: true\n  hostIPC: true\n  hostNetwork: true\n");
    }
    yaml.push_str("  containers:\n");
    let sc = match way {
        Way::Plain => "",
        Way::NoSeccomp => ", securityContext: {capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}, allowPrivilegeEscalation: false, seccompProfile: {type: Unconfined}}",
        Way::Secured => ", securityContext: {capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}, allowPrivilegeEscalation: false, seccompProfile: {type: RuntimeDefault}}",
    };
    for i in 0..CONTAINERS {
        yaml.push_str(&format!(
            "  - {{name: c{i}, command: [sleep, '1000'], resources: {{limits: {{memory: 64Mi, cpu: 100m}}}}{sc}}}\n"
        ));
    }
    let path = dir.join("pod.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// One run of the pod in `dir`: (start mean ms, start median ms, summed PSS of run and its
/// keeper in KiB when `live`).
fn one_run(podvisor: &Path, dir: &Path, way: Way, live: bool) -> (f64, f64, f64) {
    let manifest = pod(dir, way);
    let state = dir.join("state");
    let events = dir.join("events.json");
    let port = free_port();
    let mut cmd = Command::new(podvisor);
    cmd.args(["run", "-q", "--state-dir"])
        .arg(&state)
        .arg("--events")
        .arg(&events)
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")]);
    if live {
        cmd.arg("--live-restore");
    }
    let mut child = cmd.arg(&manifest).running().expect("podvisor run");
    wait_for("100 started containers", Duration::from_secs(60), || {
        count_events(&events, "Started") >= CONTAINERS
    });
    let (mean, median) = start_figures(port);
    let pss = if live {
        std::thread::sleep(Duration::from_millis(500));
        let ks = keepers(&state);
        pss_kb(child.id()) + ks.iter().map(|k| pss_kb(*k)).sum::<f64>()
    } else {
        f64::NAN
    };
    if live {
        let _ = Command::new(podvisor)
            .args(["stop", "--state-dir"])
            .arg(&state)
            .stdout(Stdio::null())
            .status();
    } else {
        signal(child.id(), "TERM");
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "podvisor run exited {status}");
    if live {
        wait_for("the keepers to end", Duration::from_secs(30), || {
            keepers(&state).is_empty()
        });
    }
    (mean, median, pss)
}

pub fn security_bench(args: WithHorust) {
    let podvisor = program(&args.common);
    let horust = args.horust;
    let quick = args.common.quick;
    let rounds = if quick { 1 } else { 5 };
    let dir = scratch("security");
    let mut plain = Vec::new();
    let mut no_seccomp = Vec::new();
    let mut secured = Vec::new();
    for round in 0..rounds {
        for (way, out) in [
            (Way::Plain, &mut plain),
            (Way::NoSeccomp, &mut no_seccomp),
            (Way::Secured, &mut secured),
        ] {
            let d = dir.join(format!("{round}-{}", way as u8));
            std::fs::create_dir_all(&d).unwrap();
            out.push(one_run(&podvisor, &d, way, false));
        }
    }
    let d = dir.join("live");
    std::fs::create_dir_all(&d).unwrap();
    let (_, _, pss) = one_run(&podvisor, &d, Way::Secured, true);
    let peer = horust
        .as_deref()
        .and_then(|h| horust_run(h, &dir, Duration::from_secs(if quick { 3 } else { 10 })));

    let m =
        |v: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64| median(v.iter().map(f).collect());
    println!("podvisor-bench security: {CONTAINERS} containers of sleep, {rounds} round(s) of each way, interleaved");
    println!();
    println!(
        "{:<44}{:>12}{:>12}",
        "container start (ms)", "mean", "median"
    );
    for (label, v) in [
        ("plain (host namespaces, no securityContext)", &plain),
        ("secured but seccomp Unconfined", &no_seccomp),
        ("secured (user, caps, seccomp, namespaces)", &secured),
    ] {
        println!(
            "{:<44}{:>12.3}{:>12}",
            label,
            m(v, |f| f.0),
            format!("≤ {:.2}", m(v, |f| f.1))
        );
    }
    let ratio = m(&secured, |f| f.0) / m(&plain, |f| f.0);
    println!(
        "{:<44}{:>12.2}",
        "ratio secured but Unconfined / plain (means)",
        m(&no_seccomp, |f| f.0) / m(&plain, |f| f.0)
    );
    println!(
        "{:<44}{:>12.2}  goal ≤ 1.10: {}",
        "ratio secured / plain (means)",
        ratio,
        if ratio <= 1.10 { "met" } else { "MISSED" }
    );
    println!();
    println!(
        "{:<44}{:>12}{:>12}",
        "100 secured containers", "podvisor", "horust"
    );
    let theirs = peer.map_or("n/a".to_string(), |p| format!("{:.0}", p.rss));
    println!(
        "{:<44}{:>12.0}{:>12}  below horust's: {}",
        "run + keeper PSS / horust peak RSS (KiB)",
        pss,
        theirs,
        peer.map_or("n/a (pass --horust PATH)", |p| if pss < p.rss {
            "met"
        } else {
            "MISSED"
        })
    );
    println!("(podvisor: {})", podvisor.display());
}
