//! The pod's namespaces through the binary, as root, read back from inside its containers:
//! the hostname (the pod's name, `hostname` / `subdomain` / `setHostnameAsFQDN`), one UTS and
//! one IPC namespace shared by the pod's containers, a PID namespace per container in which
//! its main process is PID 1 (with a /proc of its own), the pod's one with
//! `shareProcessNamespace` (PID 1: podvisor's pause), the host's with `hostPID` / `hostIPC` /
//! `hostNetwork`, sysctls set in the pod's IPC namespace or refused with the kubelet's words,
//! and exec probes inside the container's namespaces.

use crate::harness::*;

/// A pod of `spec` (YAML under `spec:`) with private roots (no host-root annotation), grace 2.
fn private(policy: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: web-0, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 2\n{spec}"
    )
}

/// What each container prints: `key=value` lines.
const REPORT: &str = r#"echo pid=$$$$; echo host=$(hostname); echo env=$HOSTNAME; echo uts=$(readlink /proc/self/ns/uts); echo ipc=$(readlink /proc/self/ns/ipc); echo pidns=$(readlink /proc/self/ns/pid); echo procs=$(ls /proc | grep -c "^[0-9]")"#;

/// `key=value` lines of a container's first log as a map.
fn report(r: &PodRun, container: &str) -> std::collections::BTreeMap<String, String> {
    r.log_lines(container, 1)
        .iter()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ours(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

fn run_to_end(pod: &str, extra: &[&str]) -> PodRun {
    let r = PodRun::new(pod);
    let out = r.cmd(extra).output();
    assert_eq!(out.code(), 0, "{out:?}");
    r
}

#[test]
fn a_pods_containers_share_its_hostname_and_ipc_and_each_is_pid_1() {
    if !is_root() {
        skip("namespaces need root");
        return;
    }
    let spec = format!(
        "  containers:\n  - {{name: a, command: [sh, -c, '{REPORT}']}}\n  - {{name: b, command: [sh, -c, '{REPORT}']}}\n"
    );
    let r = run_to_end(&private("Never", &spec), &[]);
    let (a, b) = (report(&r, "a"), report(&r, "b"));
    for c in [&a, &b] {
        assert_eq!(c["pid"], "1", "{c:?}");
        assert_eq!(c["host"], "web-0");
        assert_eq!(c["env"], "web-0");
        // Its own /proc: its shell and what it runs, not the host's processes.
        let procs: u32 = c["procs"].parse().unwrap();
        assert!(procs <= 4, "{c:?}");
        assert_ne!(c["uts"], ours("uts"));
        assert_ne!(c["ipc"], ours("ipc"));
        assert_ne!(c["pidns"], ours("pid"));
    }
    assert_eq!(a["uts"], b["uts"], "one UTS namespace per pod");
    assert_eq!(a["ipc"], b["ipc"], "one IPC namespace per pod");
    assert_ne!(a["pidns"], b["pidns"], "a PID namespace per container");
}

#[test]
fn hostname_subdomain_and_fqdn() {
    if !is_root() {
        skip("namespaces need root");
        return;
    }
    let spec = format!(
        "  hostname: front\n  subdomain: svc\n  setHostnameAsFQDN: true\n  containers:\n  - {{name: a, command: [sh, -c, '{REPORT}']}}\n"
    );
    let r = run_to_end(&private("Never", &spec), &[]);
    assert_eq!(report(&r, "a")["host"], "front.svc.ns.svc.cluster.local");
    let spec = format!(
        "  hostname: front\n  subdomain: svc\n  containers:\n  - {{name: a, command: [sh, -c, '{REPORT}']}}\n"
    );
    let r = run_to_end(&private("Never", &spec), &[]);
    assert_eq!(report(&r, "a")["host"], "front");
}

#[test]
fn host_pid_ipc_and_network_keep_the_hosts() {
    if !is_root() {
        skip("namespaces need root");
        return;
    }
    let spec = format!(
        "  hostPID: true\n  hostIPC: true\n  hostNetwork: true\n  containers:\n  - {{name: a, command: [sh, -c, '{REPORT}']}}\n"
    );
    let r = run_to_end(&private("Never", &spec), &[]);
    let a = report(&r, "a");
    assert_ne!(a["pid"], "1");
    assert_eq!(a["pidns"], ours("pid"));
    assert_eq!(a["ipc"], ours("ipc"));
    assert_eq!(a["uts"], ours("uts"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(a["host"], host.trim());
    assert_eq!(a["env"], host.trim());
}

/// The pids of podvisor's pause processes on this host.
fn pauses() -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline == b"/proc/self/exe\0pause\0" {
            found.push(pid);
        }
    }
    found
}

#[test]
fn share_process_namespace_puts_the_pod_under_one_pid_1_that_goes_with_the_run() {
    if !is_root() {
        skip("namespaces need root");
        return;
    }
    let before = pauses();
    let spec = "  shareProcessNamespace: true
  containers:
  - {name: side, command: [sh, -c, 'echo pid=$$$$; exec sleep 3']}
  - name: main
    command: [sh, -c, 'sleep 1; echo pid=$$$$; echo one=$(tr \"\\0\" \" \" < /proc/1/cmdline); echo comms=$(cat /proc/[0-9]*/comm | sort | tr \"\\n\" \" \")']
";
    let r = run_to_end(&private("Never", spec), &[]);
    let main = report(&r, "main");
    assert_ne!(main["pid"], "1", "{main:?}");
    assert_ne!(report(&r, "side")["pid"], "1");
    assert_eq!(main["one"].trim(), "/proc/self/exe pause", "{main:?}");
    assert!(
        main["comms"].contains("sleep"),
        "it sees side's process: {main:?}"
    );
    let left: Vec<i32> = pauses()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(
        left.is_empty(),
        "the pod's PID 1 outlived the run: {left:?}"
    );
    // Not with --live-restore: the pod's PID 1 would end with the run.
    let r = PodRun::new(&private("Never", spec));
    let out = r.cmd(&["--live-restore"]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr
            .contains("the pod: shareProcessNamespace needs a PID 1 that outlives the run"),
        "{}",
        out.stderr
    );
}

/// A pod's pause lives as long as the pod and, once started, runs only its loop: it takes the
/// code it ran to start out of its page tables. Held just before, its resident code falls by a
/// quarter at least once it goes on.
#[test]
fn a_pods_pause_gives_back_the_code_it_ran_to_start() {
    if !is_root() {
        skip("namespaces need root");
        return;
    }
    let before = pauses();
    let r = PodRun::new(&private(
        "Never",
        "  shareProcessNamespace: true\n  containers:\n  - {name: side, command: [sleep, '600']}\n",
    ));
    let gate = r.dir.file("gate");
    let mut p = (r.cmd(&[]))
        .env("PODVISOR_STALL", "pause.settle@1")
        .env("PODVISOR_STALL_GATE", &gate)
        .start();
    wait_until("the pause held", || gate.exists());
    let pause = *pauses()
        .iter()
        .find(|p| !before.contains(p))
        .expect("the pod's pause");
    let held = code_kib(pause);
    assert!(held >= 256, "{held} KiB of code resident");
    std::fs::remove_file(&gate).unwrap();
    wait_until("its code given back", || code_kib(pause) * 4 <= held * 3);
    r.wait_event("side", "Started", 1);
    assert_eq!(client(&r, &["stop"]).code(), 0);
    assert_eq!(p.wait().code(), Some(0), "{:?}", p.stderr);
    p.assert_no_leftovers();
}

#[test]
fn sysctls_are_set_in_the_pods_ipc_namespace_or_refused_as_the_kubelet_refuses() {
    if !is_root() {
        skip("namespaces need root");
        return;
    }
    let host_value = std::fs::read_to_string("/proc/sys/kernel/shm_rmid_forced").unwrap();
    let sysctl_pod = |sysctls: &str| {
        private(
            "Never",
            &format!("  securityContext: {{sysctls: [{sysctls}]}}\n  containers:\n  - {{name: a, command: [sh, -c, 'echo rmid=$(cat /proc/sys/kernel/shm_rmid_forced) msgmax=$(cat /proc/sys/kernel/msgmax)']}}\n"),
        )
    };
    let r = run_to_end(
        &sysctl_pod("{name: kernel.shm_rmid_forced, value: '1'}"),
        &[],
    );
    assert!(
        r.log_lines("a", 1)[0].starts_with("rmid=1 "),
        "{:?}",
        r.log_lines("a", 1)
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/shm_rmid_forced").unwrap(),
        host_value,
        "the host's is untouched"
    );
    for (sysctl, extra, words) in [
        (
            "{name: kernel.msgmax, value: '9000'}",
            &[][..],
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted",
        ),
        (
            "{name: net.ipv4.tcp_syncookies, value: '1'}",
            &[][..],
            "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled",
        ),
        (
            "{name: kernel.pid_max, value: '9000'}",
            &["--allowed-unsafe-sysctls", "kernel.pid_max"][..],
            "--allowed-unsafe-sysctls: the sysctl \"kernel.pid_max\" is not known to be namespaced",
        ),
    ] {
        let r = PodRun::new(&sysctl_pod(sysctl));
        let out = r.cmd(extra).output();
        assert_eq!(out.code(), 2, "{out:?}");
        assert!(out.stderr.contains(words), "{}", out.stderr);
    }
    let r = run_to_end(
        &sysctl_pod("{name: kernel.msgmax, value: '9000'}"),
        &["--allowed-unsafe-sysctls", "kernel.msg*"],
    );
    assert!(
        r.log_lines("a", 1)[0].ends_with("msgmax=9000"),
        "{:?}",
        r.log_lines("a", 1)
    );
}

#[test]
fn exec_probes_run_in_the_containers_namespaces() {
    if !is_root() {
        skip("namespaces need root");
        return;
    }
    let spec = "  containers:
  - name: app
    command: [sleep, '600']
    readinessProbe:
      exec: {command: [sh, -c, '[ \"$(cat /proc/1/comm)\" = sleep ] && [ \"$(hostname)\" = web-0 ] && [ \"$(readlink /proc/self/ns/pid)\" = \"$(readlink /proc/1/ns/pid)\" ]']}
      periodSeconds: 1
      timeoutSeconds: 5
";
    let r = PodRun::new(&private("Always", spec));
    let mut p = r.cmd(&[]).start();
    wait_until("app is ready", || {
        r.reasons("app").iter().any(|x| x == "Ready")
    });
    let describe = client(&r, &["describe"]);
    assert!(
        describe
            .stdout
            .contains("uts pod's (hostname web-0), ipc pod's, pid per container, network host's"),
        "{}",
        describe.stdout
    );
    // `sleep` is PID 1 of its namespace: SIGTERM, which it does not handle, does nothing
    // there (as in any container), and the stop takes the grace, then SIGKILL.
    assert!(r.find("app", "Unhealthy").is_empty());
    let started = std::time::Instant::now();
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
    assert!(started.elapsed() >= std::time::Duration::from_millis(1500));
}
