//! Resource limits through cgroups, as a runtime applies them: a memory hog under its limit is
//! OOMKilled (137) and restarted by policy; a CPU limit throttles; the pod's cgroups are gone
//! when it ends, also after a kill -9 of podvisor and a new run on the state dir; a limit that
//! cannot be enforced (no cgroups for this user) is refused, naming the field.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::*;
use crate::probes::{free_port, stop};

pub fn status(r: &PodRun) -> Value {
    serde_json::from_str(&client(r, &["status", "-o", "json"]).stdout).unwrap()
}

/// The status shows `container`'s usage, read from its cgroup.
pub fn assert_usage(s: &Value, container: &str) {
    let usage = s["metadata"]["annotations"][format!("podvisor.io/usage.{container}")]
        .as_str()
        .unwrap();
    assert!(
        usage.starts_with("cpu=") && usage.contains(" memory="),
        "{usage}"
    );
}

/// The running instance's pid of container `i`, from its containerID.
pub fn container_pid(r: &PodRun, i: usize) -> Option<i32> {
    // Until the run serves its socket, there is no status yet.
    let s: Value = serde_json::from_str(&client(r, &["status", "-o", "json"]).stdout).ok()?;
    s["status"]["containerStatuses"][i]["containerID"]
        .as_str()?
        .strip_prefix("podvisor://")?
        .parse()
        .ok()
}

/// The directory of `pid`'s cgroup in v1 hierarchy `controller`.
pub fn cgroup_dir(pid: i32, controller: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, cs, path) = (it.next()?, it.next()?, it.next()?);
        cs.split(',').any(|c| c == controller).then_some(path)
    })?;
    Some(PathBuf::from(format!("/sys/fs/cgroup/{controller}")).join(path.trim_start_matches('/')))
}

/// cgroup v1 with the memory and cpu controllers, and root: what these tests need.
pub fn cgroups_here() -> bool {
    let v1 = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(" - cgroup ") && l.ends_with(",memory"));
    if !(is_root() && v1) {
        skip("needs root and cgroup v1 with the memory controller");
        return false;
    }
    true
}

/// Every pod cgroup directory of this state dir's run, in any hierarchy.
fn pod_cgroups_left(r: &PodRun) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let record = std::fs::read_to_string(r.dir.file("state").join("cgroups")).unwrap_or_default();
    for line in record.lines().filter(|l| l.starts_with('/')) {
        let p = PathBuf::from(line);
        if p.exists() {
            found.push(p);
        }
    }
    found
}

#[test]
fn a_memory_hog_is_oomkilled_and_restarted_by_policy() {
    if !cgroups_here() {
        return;
    }
    let r = PodRun::new(&pod(
        "OnFailure",
        &format!(
            "  containers:\n  - name: hog\n    command: [{}, alloc, '400']\n    resources: {{limits: {{memory: 64Mi}}}}\n",
            testbin().display()
        ),
    ));
    let mut p = r
        .cmd(&["--backoff-initial", "100ms", "--backoff-max", "200ms"])
        .start();
    let killed = r.wait_event("hog", "OOMKilled", 2);
    assert_eq!(killed[0]["exitCode"], 137, "{killed:?}");
    assert_eq!(killed[0]["type"], "Warning");
    // Restarted by policy like any failure, with backoff.
    wait_until("a BackOff", || !r.find("hog", "BackOff").is_empty());
    let s = status(&r);
    let c = &s["status"]["containerStatuses"][0];
    assert!(c["restartCount"].as_u64().unwrap() >= 1, "{c}");
    let last = if c["state"]["terminated"].is_object() {
        &c["state"]["terminated"]
    } else {
        &c["lastState"]["terminated"]
    };
    assert_eq!(last["reason"], "OOMKilled", "{c}");
    assert_eq!(last["exitCode"], 137, "{c}");
    // It never got to print that it had its 400 MiB.
    assert!(!r.log("hog", 1).contains("allocated"));
    assert!(s["metadata"]["annotations"]["podvisor.io/cgroups"]
        .as_str()
        .unwrap()
        .starts_with("v1 (memory, cpu"));
    assert!(!pod_cgroups_left(&r).is_empty(), "the pod has its cgroup");
    stop(&mut p);
    assert_eq!(pod_cgroups_left(&r), Vec::<PathBuf>::new());
    assert!(!r.dir.file("state").join("cgroups").exists());
}

#[test]
fn a_cpu_limit_throttles_and_usage_comes_from_the_cgroup() {
    if !cgroups_here() {
        return;
    }
    let r = PodRun::new(&pod(
        "Never",
        &format!(
            "  containers:\n  - name: spin\n    command: [{}, spin, '30']\n    resources: {{limits: {{cpu: 100m, memory: 32Mi}}, requests: {{cpu: 50m}}}}\n",
            testbin().display()
        ),
    ));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut p = r.cmd(&["--metrics-addr", &addr]).start();
    let mut pid = None;
    wait_until("the container runs", || {
        pid = container_pid(&r, 0);
        pid.is_some()
    });
    let pid = pid.unwrap();
    let cpu = cgroup_dir(pid, "cpu").unwrap();
    let acct = cgroup_dir(pid, "cpuacct").unwrap();
    let read = |dir: &PathBuf, f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    // The kubelet's numbers: quota 10 ms per 100 ms, shares 50 × 1024 / 1000.
    assert_eq!(read(&cpu, "cpu.cfs_quota_us").trim(), "10000");
    assert_eq!(read(&cpu, "cpu.cfs_period_us").trim(), "100000");
    assert_eq!(read(&cpu, "cpu.shares").trim(), "51");
    let mem = cgroup_dir(pid, "memory").unwrap();
    assert_eq!(
        read(&mem, "memory.limit_in_bytes").trim(),
        (32 << 20).to_string()
    );
    let used = || read(&acct, "cpuacct.usage").trim().parse::<u64>().unwrap() as f64 / 1e9;
    let (t0, u0) = (Instant::now(), used());
    std::thread::sleep(Duration::from_secs(3));
    let (t1, u1) = (Instant::now(), used());
    let share = (u1 - u0) / (t1 - t0).as_secs_f64();
    // 0.1 CPU at most (a period's burst of slack); unthrottled it would be ~1.
    assert!(
        share < 0.2,
        "{:.3} s of CPU in {:.3} s",
        u1 - u0,
        (t1 - t0).as_secs_f64()
    );
    let throttled = read(&cpu, "cpu.stat");
    let n: u64 = throttled
        .lines()
        .find_map(|l| l.strip_prefix("nr_throttled "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(n > 0, "{throttled}");
    // The metric is the cgroup's (it counts what the container's processes used).
    let text = scrape(&addr);
    let line = text
        .lines()
        .find(|l| l.starts_with("container_cpu_usage_seconds_total{container=\"spin\""))
        .unwrap_or_else(|| panic!("{text}"));
    let metric: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(metric >= u1 * 0.9 && metric < u1 + 0.5, "{line} vs {u1}");
    let s = status(&r);
    assert_usage(&s, "spin");
    let text = client(&r, &["describe"]).stdout;
    for line in [
        "Cgroups:      v1 (memory, cpu, cpuacct, pids, devices)",
        "    Limits:",
        "      cpu:           100m",
        "      memory:        32Mi",
        "    Requests:",
        "      cpu:           50m",
        "    Usage:          cpu=",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    stop(&mut p);
    assert!(!cpu.exists() && !acct.exists() && !mem.exists());
}

#[test]
fn cgroups_left_by_a_killed_run_are_removed_by_the_next() {
    if !cgroups_here() {
        return;
    }
    let r = PodRun::new(&pod(
        "Always",
        "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 16Mi}}\n",
    ));
    let mut first = r.cmd(&[]).start();
    let mut pid = None;
    wait_until("the container runs", || {
        pid = container_pid(&r, 0);
        pid.is_some()
    });
    let old = cgroup_dir(pid.unwrap(), "memory").unwrap();
    first.signal("KILL");
    first.wait();
    // The kernel ends the container (its parent-death signal); the cgroups stay behind.
    wait_until("the container is gone", || {
        !std::path::Path::new(&format!("/proc/{}", pid.unwrap())).exists()
    });
    assert!(old.exists(), "{}", old.display());
    let left = pod_cgroups_left(&r);
    assert!(!left.is_empty());
    let mut second = r.cmd(&[]).start();
    wait_until("the old instance's cgroup is gone", || !old.exists());
    wait_until("a new instance runs", || {
        container_pid(&r, 0).is_some_and(|p| Some(p) != pid)
    });
    stop(&mut second);
    assert_eq!(pod_cgroups_left(&r), Vec::<PathBuf>::new());
    for dir in left {
        assert!(!dir.exists(), "{}", dir.display());
    }
}

/// The record of the cgroups a run made is not synced (cgroups do not outlive the machine):
/// it names the boot it was written in, and a record of another boot is not acted on, whatever
/// a power loss left in it; one of this boot is, and so is one of an older podvisor (no boot
/// line). Each run removes the record as it ends.
#[test]
fn a_cgroups_record_of_another_boot_removes_nothing() {
    if !cgroups_here() {
        return;
    }
    let r = PodRun::new(&pod(
        "Never",
        "  containers:\n  - name: app\n    command: ['true']\n    resources: {limits: {memory: 16Mi}}\n",
    ));
    let state = r.dir.file("state");
    std::fs::create_dir_all(&state).unwrap();
    let own = cgroup_dir(std::process::id() as i32, "memory").unwrap();
    let listed = own.join(format!("podvisor-test-boot-{}", std::process::id()));
    // Removed on drop, also when the test fails (nothing is delegated here).
    let _removed = Delegated(vec![listed.clone()]);
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let this_boot = format!("boot {}\n", boot.trim());
    let cases: [(&[u8], bool); 4] = [
        (b"boot 00000000-0000-4000-8000-000000000000\n", true),
        // Not text, as a power loss can leave it.
        (b"\xff\xfe\n", true),
        (this_boot.as_bytes(), false),
        (b"", false),
    ];
    for (first, stays) in cases {
        std::fs::create_dir_all(&listed).unwrap();
        let mut record = first.to_vec();
        record.extend_from_slice(format!("{}\n", listed.display()).as_bytes());
        std::fs::write(state.join("cgroups"), &record).unwrap();
        let record = String::from_utf8_lossy(&record);
        let out = r.cmd(&[]).output();
        assert_eq!(out.code(), 0, "{out:?}");
        assert_eq!(
            listed.exists(),
            stays,
            "after a run on the record {record:?}"
        );
        assert!(
            !state.join("cgroups").exists(),
            "the run removed its record"
        );
    }
}

#[test]
fn a_limit_that_cannot_be_enforced_is_refused() {
    if !is_root() {
        skip("needs root to become nobody");
        return;
    }
    let r = PodRun::new(&pod(
        "Never",
        "  containers:\n  - name: app\n    command: ['true']\n  - name: capped\n    command: ['true']\n    resources: {limits: {memory: 64Mi}}\n",
    ));
    std::fs::set_permissions(r.dir.file(""), std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |manifest: &str| {
        std::fs::write(r.dir.file("pod.yaml"), manifest).unwrap();
        Run::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(podvisor())
            .args(["run", "-q", "--state-dir"])
            .arg(r.dir.file("state"))
            .arg(r.dir.file("pod.yaml"))
            .output()
    };
    let out = as_nobody(&std::fs::read_to_string(r.dir.file("pod.yaml")).unwrap());
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr
            .contains("container \"capped\": resources.limits.memory needs cgroups"),
        "{out:?}"
    );
    assert!(
        !r.dir.file("state").join("logs").join("app").exists(),
        "nothing ran"
    );
    // Without a limit, the same user runs the pod without cgroups, and says so.
    let out = as_nobody(&pod(
        "Never",
        "  containers:\n  - name: app\n    command: ['true']\n",
    ));
    assert_eq!(out.code(), 0, "{out:?}");
}

/// Cgroups delegated to `nobody` under this process's own, one per hierarchy; removed (with
/// whatever runs in them) on drop, also when the test fails.
struct Delegated(Vec<PathBuf>);

impl Delegated {
    fn new(tag: &str) -> Delegated {
        let mut dirs = Vec::new();
        for c in ["memory", "cpu", "cpuacct", "pids"] {
            let own = cgroup_dir(std::process::id() as i32, c).unwrap();
            let d = own.join(tag);
            std::fs::create_dir(&d).unwrap();
            dirs.push(d);
        }
        let d = Delegated(dirs);
        for dir in &d.0 {
            let out = Run::new("chown")
                .args(["-R", "nobody:nogroup"])
                .arg(dir)
                .output();
            assert_eq!(out.code(), 0, "{out:?}");
        }
        d
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        for dir in &self.0 {
            remove_cgroup_tree(dir);
        }
    }
}

#[test]
fn a_delegated_cgroup_gives_an_ordinary_user_limits() {
    if !cgroups_here() {
        return;
    }
    let tag = format!("podvisor-delegated-{}", std::process::id());
    let delegated = Delegated::new(&tag);
    let r = PodRun::new(&pod(
        "Never",
        &format!(
            "  containers:\n  - name: hog\n    command: [{}, alloc, '400']\n    resources: {{limits: {{memory: 64Mi}}}}\n",
            testbin().display()
        ),
    ));
    std::fs::set_permissions(r.dir.file(""), std::fs::Permissions::from_mode(0o777)).unwrap();
    // As nobody, moved into the delegated cgroups first (as a login manager or a systemd
    // delegation would have it run).
    let join: String = delegated
        .0
        .iter()
        .map(|d| format!("echo $$ > {}/cgroup.procs && ", d.display()))
        .collect();
    let script = format!(
        "{join}exec {} run -q --state-dir {} --events {} {}",
        podvisor().display(),
        r.dir.file("state").display(),
        r.dir.file("events.json").display(),
        r.dir.file("pod.yaml").display()
    );
    let out = Run::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(&script)
        .output();
    assert_eq!(out.code(), 1, "{out:?}");
    let killed: Vec<_> = r
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "OOMKilled")
        .collect();
    assert_eq!(killed.len(), 1, "{:?}", r.events());
    assert_eq!(killed[0]["exitCode"], 137);
    // The pod's cgroups were made inside the delegated ones, and are gone.
    for d in &delegated.0 {
        let left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[test]
fn the_pods_pids_limit_stops_a_fork_bomb() {
    if !cgroups_here() {
        return;
    }
    // Thirty background processes: fine without a limit, refused by the kernel under
    // --pod-max-pids 10 (dash gives up at the first fork that fails).
    let r = PodRun::new(&pod(
        "Never",
        "  containers:\n  - name: forks\n    command: [sh, -c, 'p=; for i in $(seq 30); do sleep 5 & p=\"$p $!\"; done; echo started=$(echo $p | wc -w); kill $p; echo done']\n",
    ));
    let out = r.cmd(&["--pod-max-pids", "10"]).output();
    assert_eq!(out.code(), 1, "{out:?}");
    let log = r.log("forks", 1);
    assert!(
        log.contains("Cannot fork") && !log.contains("done"),
        "{log}"
    );
    let r = PodRun::new(&std::fs::read_to_string(r.dir.file("pod.yaml")).unwrap());
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(r.log("forks", 1).contains("started=30"));
    let bad = Run::new(podvisor())
        .args(["run", "--pod-max-pids", "0"])
        .arg(r.dir.file("pod.yaml"))
        .output();
    assert_eq!(bad.code(), 2, "{bad:?}");
}

/// Pod-level resources (KEP-2837): the API server's checks in `validate`, and on this cgroup
/// v1 host a refusal, as the kubelet admits such a pod only on cgroup v2 (the v2 VM runs it:
/// `guest_v2::placement`).
#[test]
fn pod_level_resources_are_checked_and_refused_on_cgroup_v1() {
    let bad = PodRun::new(&pod(
        "Never",
        "  resources: {limits: {memory: 64Mi, ephemeral-storage: 1Gi}, requests: {memory: 16Mi}}
  containers:
  - name: big
    command: [sleep, '600']
    resources: {limits: {memory: 128Mi}}
  - name: small
    command: [sleep, '600']
    resources: {requests: {memory: 8Mi}}
",
    ));
    let out = Run::new(podvisor())
        .arg("validate")
        .arg(bad.dir.file("pod.yaml"))
        .output();
    assert_eq!(out.code(), 2, "{out:?}");
    for want in [
        "spec.resources.limits.ephemeral-storage: Unsupported value: \"ephemeral-storage\": supported values: \"cpu\", \"memory\"",
        "spec.containers[0].resources.limits.memory: Invalid value: 134217728: must be less than or equal to the pod's memory limit of 67108864 (bytes)",
        "spec.resources.requests.memory: Invalid value: 16777216: must be greater than or equal to the containers' aggregate memory request of 142606336 (bytes)",
    ] {
        assert!(out.stderr.contains(want), "{want:?} in {}", out.stderr);
    }
    if !cgroups_here() {
        return;
    }
    let good = PodRun::new(&pod(
        "Never",
        "  resources: {limits: {memory: 64Mi}}\n  containers:\n  - name: app\n    command: [\"true\"]\n",
    ));
    let out = good.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("the pod: resources needs cgroup v2")
            && out.stderr.contains("this host mounts cgroup v1"),
        "{out:?}"
    );
}

#[test]
fn on_cgroup_v1_each_instance_joins_its_cgroups_whole_and_the_run_stays_where_it_is() {
    if !cgroups_here() {
        return;
    }
    // Each instance joins by moving its one thread before exec (the v1 `tasks` file): what it
    // runs (threads, children) is born there, in every hierarchy, a restarted instance in its
    // own cgroup, with a keeper or without.
    for live_restore in [false, true] {
        let r = PodRun::new(&pod(
            "Always",
            "  containers:\n  - name: app\n    command: [sh, -c, 'sleep 600 & sleep 600 & wait']\n    resources: {limits: {memory: 32Mi, cpu: 500m}}\n",
        ));
        let args: &[&str] = if live_restore {
            &["--live-restore"]
        } else {
            &[]
        };
        let mut p = r.cmd(args).start();
        let run = p.init_pid();
        let own = std::fs::read_to_string(format!("/proc/{run}/cgroup")).unwrap();
        let mut before = None;
        for instance in 1..=2u32 {
            let (mut pid, mut kids) = (0, Vec::new());
            wait_until("the instance and its two sleeps run", || {
                pid = container_pid(&r, 0).unwrap_or(0);
                kids = child_pids(pid);
                pid > 0 && Some(pid) != before && kids.len() == 2
            });
            before = Some(pid);
            for controller in ["memory", "cpu", "cpuacct"] {
                let dir = cgroup_dir(pid, controller).unwrap();
                assert!(
                    dir.ends_with(format!("app-{instance}")),
                    "live-restore {live_restore}: {} in {controller}",
                    dir.display()
                );
                let listed = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
                let mut listed: Vec<i32> = listed.lines().map(|l| l.parse().unwrap()).collect();
                listed.sort();
                let mut want = vec![pid];
                want.extend(&kids);
                want.sort();
                assert_eq!(
                    listed,
                    want,
                    "live-restore {live_restore}: {}",
                    dir.display()
                );
            }
            if instance == 1 {
                assert_eq!(client(&r, &["restart", "app"]).code(), 0);
            }
        }
        // Nothing else moved: the run and each of its threads are where it started.
        for task in std::fs::read_dir(format!("/proc/{run}/task"))
            .unwrap()
            .flatten()
        {
            let path = task.path().join("cgroup");
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                own,
                "{}",
                path.display()
            );
        }
        // (Under a keeper a SIGTERM ends only the run: `podvisor stop` ends the pod.)
        if live_restore {
            assert_eq!(client(&r, &["stop"]).code(), 0);
            assert_eq!(p.wait().code(), Some(0), "{:?}", p.stderr);
            p.assert_no_leftovers();
        } else {
            stop(&mut p);
        }
        assert_eq!(pod_cgroups_left(&r), Vec::<PathBuf>::new());
    }
}
