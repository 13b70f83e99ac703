//! In-place resize (KEP-1287) through the binary, as `kubectl patch pod --subresource resize`:
//! cgroups changed in place for `NotRequired` (read back from the cgroup files), a restart for
//! `RestartContainer`, a memory limit never set below what is in use (`PodResizeInProgress`,
//! `Error`), `Infeasible` beyond the node (asked again by a run that takes the pod up), the API
//! server's refusals, and the allocation kept by a run that takes the pod up again after a
//! kill -9. cgroup v2: `guest_v2.rs`.

use std::path::Path;

use serde_json::{json, Value};

use crate::harness::*;
use crate::probes::stop;
use crate::resources::{cgroup_dir, cgroups_here, container_pid, status};

/// `podvisor patch --subresource resize -p PATCH` against the run, with more flags.
fn patch(r: &PodRun, patch: &str, extra: &[&str]) -> Output {
    let mut args = vec!["patch", "--subresource", "resize", "-p", patch];
    args.extend_from_slice(extra);
    client(r, &args)
}

/// `patch` (JSON merge) that must be accepted; the status after it.
fn patched(r: &PodRun, body: &str) -> Value {
    let out = patch(r, body, &[]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    status(r)
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

fn condition<'a>(s: &'a Value, kind: &str) -> Option<&'a Value> {
    s["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// The running container's pid, once it runs.
fn running_pid(r: &PodRun, restarts: u64) -> i32 {
    let mut pid = None;
    wait_until("the container runs", || {
        // Until the run serves its socket, there is no status yet.
        let out = client(r, &["status", "-o", "json"]).stdout;
        let Ok(s) = serde_json::from_str::<Value>(&out) else {
            return false;
        };
        let c = &s["status"]["containerStatuses"][0];
        pid = (c["restartCount"] == restarts && c["state"]["running"].is_object())
            .then(|| container_pid(r, 0))
            .flatten();
        pid.is_some()
    });
    pid.unwrap()
}

const SLEEPER: &str = "  containers:\n  - name: app\n    command: [sleep, '600']\n";

#[test]
fn cpu_and_memory_resized_in_place_without_a_restart_and_kept_after_a_kill() {
    if !cgroups_here() {
        return;
    }
    let r = PodRun::new(&pod(
        "Always",
        &format!("{SLEEPER}    resources: {{limits: {{cpu: 500m, memory: 64Mi}}, requests: {{cpu: 250m, memory: 32Mi}}}}\n"),
    ));
    let mut p = r.cmd(&[]).start();
    let pid = running_pid(&r, 0);
    let cpu = cgroup_dir(pid, "cpu").unwrap();
    let memory = cgroup_dir(pid, "memory").unwrap();
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "50000");
    assert_eq!(
        read(&memory, "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );

    // The first generation, which the status and its conditions observed (KEP-5067).
    let generations = |s: &Value| {
        let of = |kind: &str| condition(s, kind).map(|c| c["observedGeneration"].clone());
        [
            s["metadata"]["generation"].clone(),
            s["status"]["observedGeneration"].clone(),
            of("PodScheduled").unwrap_or_default(),
            of("Ready").unwrap_or_default(),
        ]
    };
    let s = status(&r);
    assert_eq!(generations(&s), [1, 1, 1, 1].map(Value::from));
    // Requests below limits: Burstable, which a resize may not change.
    assert_eq!(s["status"]["qosClass"], "Burstable", "{s}");
    let out = patch(
        &r,
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"1","memory":"96Mi"},"requests":{"cpu":"500m"}}}]}}"#,
        &[],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert_eq!(out.stdout, "pod/p patched");
    // The spec changed: a new generation, observed.
    assert_eq!(generations(&status(&r)), [2, 2, 1, 2].map(Value::from));
    // The same cgroup, changed: no restart.
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "100000");
    assert_eq!(read(&cpu, "cpu.shares"), "512");
    assert_eq!(
        read(&memory, "memory.limit_in_bytes"),
        (96u64 << 20).to_string()
    );
    // The pod's cgroup holds its one container's limit.
    let pod_memory = memory.parent().unwrap();
    assert_eq!(
        read(pod_memory, "memory.limit_in_bytes"),
        (96u64 << 20).to_string()
    );
    let s = status(&r);
    let c = &s["status"]["containerStatuses"][0];
    assert_eq!(c["restartCount"], 0, "{c}");
    assert_eq!(container_pid(&r, 0), Some(pid));
    assert_eq!(
        s["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "96Mi"
    );
    assert_eq!(
        c["allocatedResources"],
        serde_json::json!({"cpu": "500m", "memory": "32Mi"})
    );
    assert_eq!(
        c["resources"],
        serde_json::json!({"limits": {"cpu": "1", "memory": "96Mi"}, "requests": {"cpu": "500m", "memory": "32Mi"}})
    );
    assert!(condition(&s, "PodResizeInProgress").is_none(), "{s}");
    assert!(condition(&s, "PodResizePending").is_none(), "{s}");
    assert_eq!(r.reasons("pod"), ["ResizeStarted", "ResizeCompleted"]);
    // The same patch again changes nothing.
    let again = patch(
        &r,
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"1","memory":"96Mi"},"requests":{"cpu":"500m"}}}]}}"#,
        &[],
    );
    assert_eq!(
        again.stdout, "pod/p patched (no change)",
        "{}",
        again.stderr
    );
    assert_eq!(generations(&status(&r)), [2, 2, 1, 2].map(Value::from));

    // A run killed with -9: the next takes the pod up with what the resize allocated.
    p.signal("KILL");
    p.wait();
    let mut second = r.cmd(&[]).start();
    let pid = running_pid(&r, 1);
    let memory = cgroup_dir(pid, "memory").unwrap();
    assert_eq!(
        read(&memory, "memory.limit_in_bytes"),
        (96u64 << 20).to_string()
    );
    let s = status(&r);
    assert_eq!(
        s["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "1"
    );
    assert_eq!(generations(&s), [2, 2, 1, 2].map(Value::from));
    assert_eq!(
        s["status"]["containerStatuses"][0]["allocatedResources"]["cpu"],
        "500m"
    );
    stop(&mut second);
}

#[test]
fn a_resize_policy_of_restart_container_restarts_it_with_the_new_limit() {
    if !cgroups_here() {
        return;
    }
    let r = PodRun::new(&pod(
        "Always",
        &format!("{SLEEPER}    resources: {{limits: {{cpu: 500m, memory: 64Mi}}}}\n    resizePolicy: [{{resourceName: memory, restartPolicy: RestartContainer}}]\n"),
    ));
    let mut p = r.cmd(&[]).start();
    running_pid(&r, 0);
    // A JSON patch, as `kubectl patch --type json`.
    let out = patch(
        &r,
        r#"[{"op":"replace","path":"/spec/containers/0/resources/limits/memory","value":"128Mi"}]"#,
        &["--type", "json"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let pid = running_pid(&r, 1);
    let memory = cgroup_dir(pid, "memory").unwrap();
    assert_eq!(
        read(&memory, "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
    );
    // The pod's cgroup follows (else it would cap the container at the old limit).
    assert_eq!(
        read(memory.parent().unwrap(), "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
    );
    let killing = r.find("app", "Killing");
    assert_eq!(
        killing[0]["message"], "Container app resize requires restart",
        "{killing:?}"
    );
    // Restarted at once: no back-off, no crash.
    assert!(r.find("app", "BackOff").is_empty());
    // cpu's policy is NotRequired: in place, no second restart.
    let out = patch(
        &r,
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"700m"}}}]}}"#,
        &["--type", "strategic"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let cpu = cgroup_dir(pid, "cpu").unwrap();
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "70000");
    let s = status(&r);
    assert_eq!(s["status"]["containerStatuses"][0]["restartCount"], 1);
    assert_eq!(container_pid(&r, 0), Some(pid));
    stop(&mut p);
}

#[test]
fn a_memory_limit_is_never_set_below_what_the_container_uses() {
    if !cgroups_here() {
        return;
    }
    let r = PodRun::new(&pod(
        "Always",
        &format!(
            "  containers:\n  - name: app\n    command: [{}, alloc, '40', hold]\n    resources: {{limits: {{memory: 128Mi}}, requests: {{memory: 8Mi}}}}\n",
            testbin().display()
        ),
    ));
    let mut p = r.cmd(&[]).start();
    let pid = running_pid(&r, 0);
    wait_until("40 MiB allocated", || {
        r.log("app", 1).contains("allocated 40")
    });
    let s = patched(
        &r,
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":"16Mi"}}}]}}"#,
    );
    let c = condition(&s, "PodResizeInProgress").unwrap_or_else(|| panic!("{s}"));
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "Error");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("less than current memory usage"),
        "{c}"
    );
    // Allocated, not applied: the cgroup keeps its limit, the container runs on.
    let memory = cgroup_dir(pid, "memory").unwrap();
    assert_eq!(
        read(&memory, "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
    );
    let cs = &s["status"]["containerStatuses"][0];
    assert_eq!(cs["allocatedResources"]["memory"], "8Mi");
    assert_eq!(cs["resources"]["limits"]["memory"], "128Mi");
    assert_eq!(cs["restartCount"], 0);
    assert_eq!(r.find("pod", "ResizeError").len(), 1);
    // Raised back above the use: done, the error gone.
    let out = patch(
        &r,
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":"100Mi"}}}]}}"#,
        &[],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert_eq!(
        read(&memory, "memory.limit_in_bytes"),
        (100u64 << 20).to_string()
    );
    let s = status(&r);
    assert!(condition(&s, "PodResizeInProgress").is_none(), "{s}");
    stop(&mut p);
}

#[test]
fn the_api_servers_refusals_and_an_infeasible_resize() {
    if !cgroups_here() {
        return;
    }
    let r = PodRun::new(&pod(
        "Always",
        &format!("{SLEEPER}    resources: {{limits: {{cpu: 100m, memory: 64Mi}}}}\n"),
    ));
    let mut p = r.cmd(&[]).start();
    running_pid(&r, 0);
    let refused = |body: &str, want: &str| {
        let out = patch(&r, body, &[]);
        assert_eq!(out.code(), 1, "{body}: {}", out.stdout);
        assert_eq!(
            out.stderr,
            format!("error: The Pod \"p\" is invalid: {want}")
        );
    };
    refused(
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"50m"}}}]}}"#,
        "spec: Invalid value: \"Guaranteed\": Pod QOS Class may not change as a result of resizing",
    );
    refused(
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":null}}}]}}"#,
        "spec.containers[0].resources.limits[memory]: Forbidden: resource limits cannot be removed",
    );
    refused(
        r#"{"spec":{"containers":[{"name":"app","image":"other"}]}}"#,
        "spec: Forbidden: only cpu and memory resources are mutable",
    );
    // Beyond the node: allocated nothing, said so.
    let out = patch(
        &r,
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"100000"}}}]}}"#,
        &["--type", "strategic"],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let s = status(&r);
    let c = condition(&s, "PodResizePending").unwrap_or_else(|| panic!("{s}"));
    assert_eq!(c["reason"], "Infeasible");
    let cpus = std::thread::available_parallelism().unwrap().get() * 1000;
    assert_eq!(
        c["message"],
        format!("Node didn't have enough capacity: cpu, requested: 100000000, capacity: {cpus}")
    );
    assert_eq!(
        s["status"]["containerStatuses"][0]["allocatedResources"]["cpu"],
        "100m"
    );
    assert_eq!(r.find("pod", "ResizeInfeasible").len(), 1);
    assert_eq!(s["metadata"]["generation"], 2);

    // Killed with -9, the run after it still asks (the spec outlives a kubelet's restart, at
    // the API server): the same spec and generation, Infeasible again, the allocation kept.
    p.signal("KILL");
    p.wait();
    let mut second = r.cmd(&[]).start();
    let pid = running_pid(&r, 1);
    let s = status(&r);
    let c = condition(&s, "PodResizePending").unwrap_or_else(|| panic!("{s}"));
    assert_eq!(c["reason"], "Infeasible");
    assert_eq!(s["metadata"]["generation"], 2);
    assert_eq!(
        s["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "100000"
    );
    assert_eq!(
        s["status"]["containerStatuses"][0]["allocatedResources"]["cpu"],
        "100m"
    );
    let cpu = cgroup_dir(pid, "cpu").unwrap();
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "10000");
    // A resize that fits ends the wait.
    let s = patched(
        &r,
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"200m"}}}]}}"#,
    );
    assert!(condition(&s, "PodResizePending").is_none(), "{s}");
    assert_eq!(s["metadata"]["generation"], 3);
    assert_eq!(
        s["status"]["containerStatuses"][0]["allocatedResources"]["cpu"],
        "200m"
    );
    stop(&mut second);

    // A resize that waited and fits when the pod is taken up (the node has grown: here, the
    // record says so as a run would have saved it) is allocated then.
    let saved = podvisor::state::record::ResizeRecord {
        containers: [(
            "app".into(),
            json!({"limits": {"cpu": "200m", "memory": "64Mi"}}),
        )]
        .into(),
        generation: Some(4),
        desired: Some(
            [(
                "app".into(),
                json!({"limits": {"cpu": "300m", "memory": "64Mi"}}),
            )]
            .into(),
        ),
    };
    let file = r.dir.file("state").join("resize");
    std::fs::write(&file, podvisor::state::record::encode_resize(&saved)).unwrap();
    let mut third = r.cmd(&[]).start();
    let pid = running_pid(&r, 2);
    let s = status(&r);
    assert!(condition(&s, "PodResizePending").is_none(), "{s}");
    assert_eq!(s["metadata"]["generation"], 4);
    assert_eq!(
        s["status"]["containerStatuses"][0]["allocatedResources"]["cpu"],
        "300m"
    );
    assert_eq!(
        read(&cgroup_dir(pid, "cpu").unwrap(), "cpu.cfs_quota_us"),
        "30000"
    );
    // Allocated, it is saved so: the record asks for nothing more.
    let text = std::fs::read_to_string(&file).unwrap();
    let kept = podvisor::state::record::decode_resize(&text).unwrap();
    assert_eq!((kept.desired, kept.generation), (None, Some(4)));
    assert_eq!(kept.containers["app"]["limits"]["cpu"], "300m");
    stop(&mut third);
}

#[test]
fn resize_policies_are_checked_as_the_api_server_checks_them() {
    let dir = TempDir::new();
    let file = dir.file("pod.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {podvisor.io/root-from: host}}\nspec:\n  restartPolicy: Never\n  initContainers:\n  - name: setup\n    command: ['true']\n    resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}]\n  containers:\n  - name: app\n    command: [sleep, '1']\n    resizePolicy:\n    - {resourceName: cpu, restartPolicy: RestartContainer}\n    - {resourceName: cpu, restartPolicy: NotRequired}\n    - {resourceName: gpu, restartPolicy: Sometimes}\n",
    )
    .unwrap();
    let out = Run::new(podvisor()).arg("validate").arg(&file).output();
    assert_eq!(out.code(), 2);
    let f = file.display();
    let want = [
        "9:5: spec.initContainers[0].resizePolicy: Forbidden: may not be set for non-sidecar init containers",
        "14:27: spec.containers[0].resizePolicy[0].restartPolicy: Invalid value: \"RestartContainer\": must be 'NotRequired' when `restartPolicy` is 'Never'",
        "15:8: spec.containers[0].resizePolicy[1].resourceName: Duplicate value: \"cpu\"",
        "16:8: spec.containers[0].resizePolicy[2].resourceName: Unsupported value: \"gpu\": supported values: \"cpu\", \"memory\"",
        "16:27: spec.containers[0].resizePolicy[2].restartPolicy: Unsupported value: \"Sometimes\": supported values: \"NotRequired\", \"RestartContainer\"",
    ];
    let want: Vec<String> = want.iter().map(|w| format!("error: {f}:{w}")).collect();
    assert_eq!(out.stderr, want.join("\n"));
}
