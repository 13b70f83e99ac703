//! Tests that run inside the cgroup v2 VM (`vm::cgroup_v2_in_a_vm` boots it and runs them from
//! each place a user starts podvisor: a login session's scope, a service, the root cgroup, a
//! cgroup delegated to an ordinary user). Ignored on the host, whose hierarchy is not the one
//! they test; the VM runs them with `--ignored`. `PODVISOR_VM_TOP` is where the pods' parent
//! must be made, `PODVISOR_VM_START` the cgroup the test was started in.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::harness::*;
use crate::probes::stop;
use crate::resources::{assert_usage, container_pid, status};

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(
        std::env::var_os(name).unwrap_or_else(|| panic!("{name} is not set: run in the VM")),
    )
}

/// The cgroup directory of `pid` on the unified hierarchy.
fn cgroup_of(pid: i32) -> PathBuf {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'))
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
        .trim()
        .to_string()
}

/// The pod cgroup the run on `r` recorded.
fn recorded(r: &PodRun) -> Option<PathBuf> {
    let text = std::fs::read_to_string(r.dir.file("state").join("cgroups")).ok()?;
    text.lines().find(|l| l.starts_with('/')).map(PathBuf::from)
}

/// A pod dir writable by whoever the test runs as.
fn pod_run(manifest: &str) -> PodRun {
    let r = PodRun::new(manifest);
    std::fs::set_permissions(r.dir.file(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    r
}

fn running_pid(r: &PodRun) -> i32 {
    let mut pid = None;
    wait_until("the container runs", || {
        pid = container_pid(r, 0);
        pid.is_some()
    });
    pid.unwrap()
}

mod placement {
    use super::*;

    /// The kubelet's numbers in the instance's files, the pod's pids.max in the pod's, all
    /// under the podvisor parent at the top, podvisor itself where it was started; all gone
    /// after SIGTERM.
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn limits_land_in_the_instance_cgroup_and_go_with_the_pod() {
        let top = env_path("PODVISOR_VM_TOP");
        let start = env_path("PODVISOR_VM_START");
        let r = pod_run(&pod(
            "Never",
            "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 64Mi, cpu: 250m}, requests: {cpu: 100m}}\n",
        ));
        let mut p = r.cmd(&["--pod-max-pids", "50"]).start();
        let pid = running_pid(&r);
        let instance = cgroup_of(pid);
        let pod_dir = recorded(&r).unwrap();
        assert_eq!(pod_dir.parent().unwrap(), top.join("podvisor"));
        assert_eq!(instance, pod_dir.join("app-1"));
        assert_eq!(read(&instance, "memory.max"), (64 << 20).to_string());
        assert_eq!(read(&instance, "memory.swap.max"), "0");
        assert_eq!(read(&instance, "memory.oom.group"), "1");
        assert_eq!(read(&instance, "cpu.max"), "25000 100000");
        // 100m: 102 shares, weight 1 + (102 - 2) × 9999 / 262142.
        assert_eq!(read(&instance, "cpu.weight"), "4");
        assert_eq!(read(&pod_dir, "pids.max"), "50");
        for dir in [top.join("podvisor"), pod_dir.clone()] {
            let enabled = read(&dir, "cgroup.subtree_control");
            assert_eq!(enabled, "cpu memory pids", "{}", dir.display());
            assert_eq!(read(&dir, "cgroup.procs"), "", "{}", dir.display());
        }
        // podvisor stays where it was started.
        assert_eq!(cgroup_of(p.init_pid()), start);
        let s = status(&r);
        let note = s["metadata"]["annotations"]["podvisor.io/cgroups"]
            .as_str()
            .unwrap();
        assert!(note.starts_with("v2, cgroupfs driver ("), "{note}");
        // Usage from the instance's cgroup, as on v1.
        assert_usage(&s, "app");
        let text = client(&r, &["describe"]).stdout;
        assert!(
            text.contains("Cgroups:      v2, cgroupfs driver ("),
            "{text}"
        );
        stop(&mut p);
        assert!(!pod_dir.exists(), "{}", pod_dir.display());
        assert!(!top.join("podvisor").exists());
        assert!(!r.dir.file("state").join("cgroups").exists());
    }

    /// As root a container's process is born in its cgroup (clone3's `CLONE_INTO_CGROUP`):
    /// no migration into it, which on every start would wait for an RCU grace period in the
    /// kernel. The kernel's `cgroup_attach_task` tracepoint records every migration; a
    /// process the test moves into the same cgroup shows that it records them here.
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn as_root_a_container_is_born_in_its_cgroup() {
        if !is_root() {
            // Rootless, a container is cloned in its user namespace and joins its cgroup.
            return;
        }
        let tracing = Path::new("/sys/kernel/tracing");
        if !tracing.join("trace").exists() {
            let ok = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev"])
                .arg(tracing)
                .status()
                .unwrap();
            assert!(ok.success(), "mount tracefs");
        }
        // On from boot (the VM's `trace_event`): turning a tracepoint on patches the running
        // kernel's code, which is left to the kernel's start.
        let event = tracing.join("events/cgroup/cgroup_attach_task");
        assert_eq!(read(&event, "enable"), "1", "{}", event.display());
        // Started by the run, and by its keeper under live restore.
        for extra in [&[][..], &["--live-restore"]] {
            std::fs::write(tracing.join("trace"), "").unwrap();
            let r = pod_run(&pod(
                "Never",
                "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 64Mi}}\n",
            ));
            let mut p = r.cmd(extra).start();
            let pid = running_pid(&r);
            let instance = cgroup_of(pid);
            assert!(instance.ends_with("app-1"), "{}", instance.display());
            let mut moved = std::process::Command::new("sleep")
                .arg("600")
                .spawn()
                .unwrap();
            std::fs::write(instance.join("cgroup.procs"), moved.id().to_string()).unwrap();
            let _ = moved.kill();
            let _ = moved.wait();
            let trace = std::fs::read_to_string(tracing.join("trace")).unwrap();
            let into: Vec<&str> = trace
                .lines()
                .filter(|l| l.contains("cgroup_attach_task:") && l.contains("/app-1 "))
                .collect();
            assert_eq!(into.len(), 1, "{extra:?}: {trace}");
            assert!(
                into[0].contains(&format!(" pid={} ", moved.id())),
                "{trace}"
            );
            assert_eq!(client(&r, &["stop"]).code(), 0);
            assert_eq!(p.wait().code(), Some(0));
        }
        // Such a child has memory of its own: a step that fails, and the exec, are told
        // through a pipe, with the step and its path.
        for (spec, expect) in [
            (
                "command: ['true'], workingDir: /no/such/dir",
                "cannot chdir to its working directory /no/such/dir: No such file or directory",
            ),
            (
                "command: [/no/such/program]",
                "exec: \"/no/such/program\": executable file not found",
            ),
        ] {
            let r = pod_run(&pod(
                "Never",
                &format!("  containers:\n  - {{name: app, {spec}, resources: {{limits: {{memory: 64Mi}}}}}}\n"),
            ));
            let out = r.cmd(&[]).output();
            assert_eq!(out.code(), 1, "{out:?}");
            let failed = r.events().into_iter().find(|e| e["reason"] == "Failed");
            let message = failed.as_ref().and_then(|e| e["message"].as_str());
            assert!(message.is_some_and(|m| m.contains(expect)), "{failed:?}");
        }
    }

    /// Pod-level resources (KEP-2837): the pod cgroup's limits are the spec's, and a
    /// container that sets no limit has the pod's in its own cgroup.
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn pod_level_resources_limit_the_pod_and_its_containers_without_limits() {
        let r = pod_run(&pod(
            "Never",
            "  resources: {limits: {memory: 96Mi, cpu: 500m}}
  containers:
  - name: app
    command: [sleep, '600']
  - name: small
    command: [sleep, '600']
    resources: {limits: {memory: 32Mi}}
",
        ));
        let mut p = r.cmd(&[]).start();
        let pid = running_pid(&r);
        let pod_dir = recorded(&r).unwrap();
        assert_eq!(read(&pod_dir, "memory.max"), (96 << 20).to_string());
        assert_eq!(read(&pod_dir, "cpu.max"), "50000 100000");
        let app = cgroup_of(pid);
        assert_eq!(app, pod_dir.join("app-1"));
        assert_eq!(read(&app, "memory.max"), (96 << 20).to_string());
        assert_eq!(read(&app, "cpu.max"), "50000 100000");
        let small = pod_dir.join("small-1");
        wait_until("small runs", || small.join("memory.max").exists());
        assert_eq!(read(&small, "memory.max"), (32 << 20).to_string());
        stop(&mut p);
        assert!(!pod_dir.exists(), "{}", pod_dir.display());
    }

    /// In-place resize (KEP-1287) on v2: `memory.max`, `cpu.max` and `cpu.weight` of the
    /// instance and the pod changed without a restart; a memory limit below what is in use
    /// (which v2 would answer with an OOM kill) is not written: `PodResizeInProgress`, `Error`.
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn a_resize_changes_the_cgroup_files_in_place() {
        let r = pod_run(&pod(
            "Never",
            &format!(
                "  containers:\n  - name: app\n    command: [{}, alloc, '24', hold]\n    resources: {{limits: {{memory: 64Mi, cpu: 250m}}, requests: {{cpu: 100m, memory: 8Mi}}}}\n",
                testbin().display()
            ),
        ));
        let mut p = r.cmd(&[]).start();
        let pid = running_pid(&r);
        let app = cgroup_of(pid);
        let pod_dir = recorded(&r).unwrap();
        let resize = |patch: &str| {
            let out = client(&r, &["patch", "--subresource", "resize", "-p", patch]);
            assert_eq!(out.code(), 0, "{}", out.stderr);
        };
        resize(
            r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":"96Mi","cpu":"500m"},"requests":{"cpu":"200m"}}}]}}"#,
        );
        assert_eq!(read(&app, "memory.max"), (96 << 20).to_string());
        assert_eq!(read(&app, "cpu.max"), "50000 100000");
        // 200m: 204 shares, weight 1 + (204 - 2) × 9999 / 262142.
        assert_eq!(read(&app, "cpu.weight"), "8");
        assert_eq!(read(&pod_dir, "memory.max"), (96 << 20).to_string());
        assert_eq!(read(&pod_dir, "cpu.max"), "50000 100000");
        assert_eq!(container_pid(&r, 0), Some(pid));
        wait_until("24 MiB in use", || r.log("app", 1).contains("allocated 24"));
        resize(
            r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":"12Mi"}}}]}}"#,
        );
        let s = status(&r);
        let c = (s["status"]["conditions"].as_array().unwrap().iter())
            .find(|c| c["type"] == "PodResizeInProgress")
            .unwrap_or_else(|| panic!("{s}"))
            .clone();
        assert_eq!(c["reason"], "Error", "{c}");
        assert_eq!(read(&app, "memory.max"), (96 << 20).to_string());
        assert_eq!(s["status"]["containerStatuses"][0]["restartCount"], 0);
        assert_eq!(container_pid(&r, 0), Some(pid));
        stop(&mut p);
    }

    /// `--live-restore` on v2: the instance's cgroup and its limits stay while no podvisor
    /// runs, and the next run takes the container over in it.
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn a_container_taken_over_keeps_its_cgroup_and_limits() {
        let r = pod_run(&pod(
            "Always",
            "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 64Mi}}\n",
        ));
        let mut first = r.cmd(&["--live-restore"]).start();
        let pid = running_pid(&r);
        let instance = cgroup_of(pid);
        let pod_dir = recorded(&r).unwrap();
        assert_eq!(instance, pod_dir.join("app-1"));
        first.signal("KILL");
        first.wait();
        let mut second = r.cmd(&["--live-restore"]).start();
        wait_until("app adopted", || {
            r.events().iter().any(|e| e["reason"] == "Adopted")
        });
        assert_eq!(container_pid(&r, 0), Some(pid));
        assert_eq!(cgroup_of(pid), instance);
        assert_eq!(read(&instance, "memory.max"), (64 << 20).to_string());
        assert_usage(&status(&r), "app");
        assert_eq!(client(&r, &["stop"]).code(), 0);
        assert_eq!(second.wait().code(), Some(0));
        first.assert_no_leftovers();
        assert!(!pod_dir.exists(), "{}", pod_dir.display());
    }

    /// As root, the device program on each instance's cgroup: a container may make any device
    /// node but open only runc's devices; a privileged one, every device (here /dev/kmsg's
    /// numbers, 1:11).
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn a_container_opens_only_the_devices_its_cgroup_program_allows() {
        if !is_root() {
            // Rootless, a user namespace cannot make a device node at all.
            return;
        }
        for (sc, want) in [
            ("", "made refused null"),
            (
                "    securityContext: {privileged: true}\n",
                "made opened null",
            ),
        ] {
            let r = pod_run(&pod("Never", ""));
            let node = r.dir.file("made");
            let script = format!(
                "mknod {} c 1 11 && echo made; (exec 3<{}) 2>/dev/null && echo opened || echo refused; (exec 3<>/dev/null) && echo null",
                node.display(),
                node.display()
            );
            std::fs::write(
                r.dir.file("pod.yaml"),
                pod(
                    "Never",
                    &format!(
                        "  containers:\n  - name: app\n    command: [sh, -c, '{script}']\n{sc}"
                    ),
                ),
            )
            .unwrap();
            let out = r.cmd(&[]).output();
            assert_eq!(out.code(), 0, "{sc}: {out:?}");
            assert_eq!(r.log_lines("app", 1).join(" "), want, "{sc}");
        }
    }

    /// `mountPropagation: HostToContainer`: what the host mounts below the volume's source
    /// once the container runs reaches the container's mount of it, and not a mount of it
    /// without (`None`, private); started by the run and by keepers. (This kernel propagates
    /// mounts into a new mount namespace; the host of `tests/mount_options.rs` may not.)
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn host_to_container_receives_what_the_host_mounts_later() {
        if !is_root() {
            // The test mounts a tmpfs for the volume.
            return;
        }
        for extra in [&[][..], &["--live-restore"][..]] {
            let r = pod_run("");
            let volume = r.dir.file("vol");
            let _shared = crate::mount_options::TestMount::new(&volume, "--make-shared");
            let script = "for i in $(seq 300); do [ -e /late/sub/marker ] && break; sleep 0.1; done; echo late: $(ls /late/sub); echo none: $(ls /none/sub)";
            let manifest = crate::mount_options::pod(
                &volume,
                &format!(
                    "  - name: app
    command: [sh, -c, '{script}']
    volumeMounts:
    - {{name: d, mountPath: /late, mountPropagation: HostToContainer}}
    - {{name: d, mountPath: /none}}
"
                ),
            );
            std::fs::write(r.dir.file("pod.yaml"), manifest).unwrap();
            let mut p = r.cmd(extra).start();
            running_pid(&r);
            let _later =
                crate::mount_options::TestMount::new(&volume.join("sub"), "--make-private");
            std::fs::write(volume.join("sub").join("marker"), "").unwrap();
            assert_eq!(p.wait().code(), Some(0), "{extra:?}: {:?}", p.stderr);
            assert_eq!(
                r.log_lines("app", 1),
                ["late: marker", "none:"],
                "{extra:?}"
            );
        }
    }

    /// A hog past its limit: OOMKilled, 137, told by podvisor or (`extra`: `--live-restore`)
    /// by its keeper, from the cgroup's memory.events.
    fn hog_is_oomkilled(extra: &[&str]) {
        let r = pod_run(&pod(
            "Never",
            &format!(
                "  containers:\n  - name: hog\n    command: [{}, alloc, '300']\n    resources: {{limits: {{memory: 64Mi}}}}\n",
                testbin().display()
            ),
        ));
        let out = r.cmd(extra).output();
        assert_eq!(out.code(), 1, "{out:?}");
        let killed: Vec<_> = r
            .events()
            .into_iter()
            .filter(|e| e["reason"] == "OOMKilled")
            .collect();
        assert_eq!(killed.len(), 1, "{:?}", r.events());
        assert_eq!(killed[0]["exitCode"], 137);
        assert!(!r.log("hog", 1).contains("allocated"));
        assert!(recorded(&r).is_none(), "the pod's cgroup is gone");
    }

    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn a_memory_hog_is_oomkilled_with_137() {
        hog_is_oomkilled(&[]);
    }

    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn a_memory_hog_under_a_keeper_is_oomkilled_with_137() {
        hog_is_oomkilled(&["--live-restore"]);
    }

    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn the_pods_pids_limit_stops_a_fork_bomb() {
        let r = pod_run(&pod(
            "Never",
            "  containers:\n  - name: forks\n    command: [sh, -c, 'p=; for i in $(seq 30); do sleep 5 & p=\"$p $!\"; done; echo started=$(echo $p | wc -w); kill $p; echo done']\n",
        ));
        let out = r.cmd(&["--pod-max-pids", "10"]).output();
        let log = r.log("forks", 1);
        assert!(!log.contains("started=30"), "{out:?}\n{log}");
        assert!(log.contains("fork"), "{log}");
        assert!(recorded(&r).is_none());
    }

    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn a_killed_runs_cgroups_are_removed_by_the_next() {
        let r = pod_run(&pod(
            "Always",
            "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 16Mi}}\n",
        ));
        let mut first = r.cmd(&[]).start();
        let pid = running_pid(&r);
        let old = cgroup_of(pid);
        first.signal("KILL");
        first.wait();
        wait_until("the container is gone", || {
            !Path::new(&format!("/proc/{pid}")).exists()
        });
        assert!(old.exists(), "{}", old.display());
        let mut second = r.cmd(&[]).start();
        wait_until("a new instance runs", || {
            container_pid(&r, 0).is_some_and(|p| p != pid)
        });
        assert!(!old.exists() || cgroup_of(container_pid(&r, 0).unwrap()) == old);
        let pod_dir = recorded(&r).unwrap();
        stop(&mut second);
        assert!(!pod_dir.exists(), "{}", pod_dir.display());
    }
}

mod rootless_top {
    use super::*;

    /// Started in the top of its delegation, alone there, podvisor moves itself into a leaf
    /// and puts the pods beside it.
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn podvisor_moves_itself_into_a_leaf_beside_the_pods() {
        let top = env_path("PODVISOR_VM_TOP");
        let r = pod_run(&pod(
            "Never",
            "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 32Mi}}\n",
        ));
        let script = format!(
            "echo $$ > {}/cgroup.procs && exec {} run -q --state-dir {} {}",
            top.display(),
            podvisor().display(),
            r.dir.file("state").display(),
            r.dir.file("pod.yaml").display()
        );
        let mut p = Run::new("sh").args(["-c", &script]).start();
        let pid = running_pid(&r);
        assert_eq!(cgroup_of(p.init_pid()), top.join("podvisor-supervisor"));
        let pod_dir = recorded(&r).unwrap();
        assert_eq!(cgroup_of(pid), pod_dir.join("app-1"));
        assert_eq!(pod_dir.parent().unwrap(), top.join("podvisor"));
        assert_eq!(read(&cgroup_of(pid), "memory.max"), (32 << 20).to_string());
        stop(&mut p);
        assert!(!pod_dir.exists());
    }
}

mod errors {
    use super::*;

    const LIMITED: &str = "  containers:\n  - name: app\n    command: ['true']\n  - name: capped\n    command: ['true']\n    resources: {limits: {memory: 64Mi}}\n";
    const UNLIMITED: &str = "  containers:\n  - name: app\n    command: ['true']\n";

    /// A pod with a limit is refused with one line naming the cgroup, what is missing and
    /// the fix, exit 2, before any container starts, nothing left; one without limits runs.
    fn refused(expect: &[&str]) {
        let start = env_path("PODVISOR_VM_START");
        let r = pod_run(&pod("Never", LIMITED));
        let out = r.cmd(&[]).output();
        assert_eq!(out.code(), 2, "{out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{out:?}");
        assert!(
            lines[0].starts_with("error: container \"capped\": resources.limits.memory"),
            "{out:?}"
        );
        for e in expect {
            assert!(lines[0].contains(e), "{e:?} in {out:?}");
        }
        assert!(!r.dir.file("state").join("logs").join("app").exists());
        assert!(recorded(&r).is_none());
        let mut dir = Some(start.as_path());
        while let Some(d) = dir.filter(|d| d.starts_with("/sys/fs/cgroup")) {
            assert!(!d.join("podvisor").exists(), "{}", d.display());
            dir = d.parent();
        }
        let r = pod_run(&pod("Never", UNLIMITED));
        let out = r.cmd(&[]).output();
        assert_eq!(out.code(), 0, "{out:?}");
    }

    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn controller_missing() {
        refused(&[
            "user@1001.service: the memory controller is not available here",
            "Delegate=yes",
        ]);
    }

    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn not_delegated() {
        refused(&["session-2.scope: not delegated to uid 1002", "Delegate=yes"]);
    }

    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn busy() {
        refused(&[
            "user@1003.service: holds other processes",
            "systemd-run --scope",
        ]);
    }

    /// As root in a mount namespace whose cgroupfs is read-only (a container's, typically).
    #[test]
    #[ignore = "runs in the cgroup v2 VM (vm::cgroup_v2_in_a_vm)"]
    fn read_only() {
        let r = pod_run(&pod("Never", LIMITED));
        let script = format!(
            "mount --bind /sys/fs/cgroup /sys/fs/cgroup && mount -o remount,bind,ro /sys/fs/cgroup && exec {} run -q --state-dir {} {}",
            podvisor().display(),
            r.dir.file("state").display(),
            r.dir.file("pod.yaml").display()
        );
        let out = Run::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .output();
        assert_eq!(out.code(), 2, "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
        assert!(
            out.stderr
                .contains("/sys/fs/cgroup/podvisor: the cgroup filesystem is read-only"),
            "{out:?}"
        );
        assert!(!Path::new("/sys/fs/cgroup/podvisor").exists());
        assert!(!r.dir.file("state").join("logs").join("app").exists());
    }
}

/// In the VM that boots systemd (`vm::systemd_driver_in_a_vm`): the systemd driver, chosen by
/// `auto`, as root (the system manager) and as an ordinary user (the user's manager over the
/// user bus). `PODVISOR_VM_SLICE` is where the pods' scopes must be.
mod systemd {
    use super::*;

    fn systemctl(args: &[&str]) -> String {
        let user = !is_root();
        let out = Run::new("systemctl")
            .args(user.then_some("--user"))
            .args(args)
            .output();
        out.stdout.trim().to_string()
    }

    /// The unit of the pod cgroup `pod_dir` (`…/UNIT.scope/pod`).
    fn unit_of(pod_dir: &Path) -> String {
        let scope = pod_dir.parent().unwrap();
        scope.file_name().unwrap().to_str().unwrap().to_string()
    }

    fn wait_gone(unit: &str, scope: &Path) {
        wait_until("systemd removes the scope", || {
            systemctl(&["show", "-p", "LoadState", "--value", unit]) == "not-found"
                && !scope.exists()
        });
    }

    /// podvisor in the scope's `supervisor` leaf, the pod and its instances beside it with
    /// the kubelet's numbers, the scope delegated; nothing left once the run ends.
    #[test]
    #[ignore = "runs in the systemd VM (vm::systemd_driver_in_a_vm)"]
    fn a_pod_gets_a_delegated_scope_with_the_limits_below_it() {
        let slice = env_path("PODVISOR_VM_SLICE");
        let r = pod_run(&pod(
            "Never",
            "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 64Mi, cpu: 250m}, requests: {cpu: 100m}}\n",
        ));
        let mut p = r.cmd(&["--pod-max-pids", "50"]).start();
        let pid = running_pid(&r);
        let pod_dir = recorded(&r).unwrap();
        let scope = pod_dir.parent().unwrap().to_path_buf();
        let unit = unit_of(&pod_dir);
        assert!(
            unit.starts_with("podvisor-ns_p-") && unit.ends_with(".scope"),
            "{unit}"
        );
        assert_eq!(scope.parent().unwrap(), slice);
        assert_eq!(pod_dir.file_name().unwrap(), "pod");
        assert_eq!(cgroup_of(p.init_pid()), scope.join("supervisor"));
        let instance = cgroup_of(pid);
        assert_eq!(instance, pod_dir.join("app-1"));
        assert_eq!(read(&instance, "memory.max"), (64 << 20).to_string());
        assert_eq!(read(&instance, "memory.oom.group"), "1");
        assert_eq!(read(&instance, "cpu.max"), "25000 100000");
        assert_eq!(read(&instance, "cpu.weight"), "4");
        assert_eq!(read(&pod_dir, "pids.max"), "50");
        assert_eq!(read(&scope, "cgroup.subtree_control"), "cpu memory pids");
        assert_eq!(
            systemctl(&["show", "-p", "Delegate", "--value", &unit]),
            "yes"
        );
        assert_eq!(
            systemctl(&["show", "-p", "ActiveState", "--value", &unit]),
            "active"
        );
        let s = status(&r);
        let note = s["metadata"]["annotations"]["podvisor.io/cgroups"]
            .as_str()
            .unwrap();
        assert!(
            note.starts_with(&format!("v2, systemd driver ({unit} in podvisor.slice")),
            "{note}"
        );
        stop(&mut p);
        assert!(!pod_dir.exists());
        wait_gone(&unit, &scope);
    }

    /// kill -9: the containers die with podvisor, the scope goes (empty) or is stopped by the
    /// next run on the state dir, which starts a new one.
    #[test]
    #[ignore = "runs in the systemd VM (vm::systemd_driver_in_a_vm)"]
    fn a_killed_runs_scope_gives_way_to_the_next() {
        let r = pod_run(&pod(
            "Always",
            "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 16Mi}}\n",
        ));
        let mut first = r.cmd(&[]).start();
        let pid = running_pid(&r);
        let unit = unit_of(&recorded(&r).unwrap());
        first.signal("KILL");
        first.wait();
        wait_until("the container is gone", || {
            !Path::new(&format!("/proc/{pid}")).exists()
        });
        let mut second = r.cmd(&[]).start();
        wait_until("a new instance runs", || {
            container_pid(&r, 0).is_some_and(|p| p != pid)
        });
        let pod_dir = recorded(&r).unwrap();
        assert_eq!(unit_of(&pod_dir), unit);
        // The instance numbers go on from the saved state (app-2, …), in the new scope.
        let instance = cgroup_of(container_pid(&r, 0).unwrap());
        assert_eq!(instance.parent().unwrap(), pod_dir);
        stop(&mut second);
        wait_gone(&unit, pod_dir.parent().unwrap());
    }

    /// `podvisor run` as a systemd service (its main process): it moves into the pod's scope,
    /// and the service still ends with podvisor's exit code.
    #[test]
    #[ignore = "runs in the systemd VM (vm::systemd_driver_in_a_vm)"]
    fn as_a_service() {
        let r = pod_run(&pod(
            "Never",
            "  containers:\n  - name: app\n    command: [sh, -c, 'sleep 2; exit 3']\n    resources: {limits: {memory: 16Mi}}\n",
        ));
        let out = r
            .cmd_under(
                &[
                    "systemd-run",
                    "--wait",
                    "--collect",
                    "--quiet",
                    "--unit",
                    "podvisor-as-service",
                ],
                &[],
            )
            .output_within(std::time::Duration::from_secs(60));
        // The pod failed (exit 3): podvisor run exits 1, and so does the service.
        assert_eq!(out.code(), 1, "{out:?}");
        assert!(
            r.events().iter().any(|e| e["reason"] == "Started"),
            "{:?}",
            r.events()
        );
        assert!(recorded(&r).is_none());
    }

    /// `--cgroup-driver cgroupfs` on a systemd host: podvisor writes its own parent.
    #[test]
    #[ignore = "runs in the systemd VM (vm::systemd_driver_in_a_vm)"]
    fn cgroupfs_when_asked() {
        let r = pod_run(&pod(
            "Never",
            "  containers:\n  - name: app\n    command: [sleep, '600']\n    resources: {limits: {memory: 16Mi}}\n",
        ));
        let mut p = r.cmd(&["--cgroup-driver", "cgroupfs"]).start();
        running_pid(&r);
        let pod_dir = recorded(&r).unwrap();
        assert_eq!(
            pod_dir.parent().unwrap(),
            Path::new("/sys/fs/cgroup/podvisor")
        );
        stop(&mut p);
        assert!(!pod_dir.exists());
    }
}
