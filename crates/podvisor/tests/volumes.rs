//! Volumes as the kubelet makes them: configMap, secret, downwardAPI and projected volumes are
//! read-only whatever the mount says; downwardAPI and projected files have the values and modes
//! asked for; a subPath cannot leave its volume; a subPathExpr is expanded from the container's
//! environment.

use crate::harness::*;

/// A pod of these tests: unlike the lifecycle tests' helper, its containers get roots of their
/// own, so that mount points such as /cache are made inside them, never on the host.
fn pod(policy: &str, containers: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n{containers}")
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: vols
  namespace: ns
  labels: {tier: web}
  annotations: {podvisor.io/root-from: host}
spec:
  restartPolicy: Never
  volumes:
  - {name: cm, configMap: {name: cfg}}
  - {name: sec, secret: {secretName: creds, defaultMode: 0400}}
  - name: down
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: name, fieldRef: {fieldPath: metadata.name}, mode: 0600}
      - {path: mem, resourceFieldRef: {containerName: app, resource: limits.memory, divisor: 1Mi}}
  - name: all
    projected:
      defaultMode: 0440
      sources:
      - configMap: {name: cfg, items: [{key: a, path: conf/a}]}
      - downwardAPI: {items: [{path: ns, fieldRef: {fieldPath: metadata.namespace}}]}
  containers:
  - name: app
    command: [sh, -c, 'for f in /cm/a /sec/token /down/labels /down/name /down/mem /all/conf/a /all/ns; do echo \"$f $(stat -L -c %a $f) $(cat $f | tr \"\\n\" \" \")\"; done; touch /cm/x 2>/dev/null && echo cm=writable; touch /down/x 2>/dev/null && echo down=writable; echo done']
    resources: {limits: {memory: 64Mi}}
    volumeMounts:
    - {name: cm, mountPath: /cm, readOnly: false}
    - {name: sec, mountPath: /sec}
    - {name: down, mountPath: /down}
    - {name: all, mountPath: /all}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {a: one}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {token: s3cret}
";

#[test]
fn api_volumes_are_read_only_with_their_values_and_modes() {
    if !is_root() {
        skip("volumes need root");
        return;
    }
    let r = PodRun::new(POD);
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    let log = r.log("app", 1);
    let lines: Vec<&str> = log
        .lines()
        .map(|l| l.splitn(4, ' ').nth(3).unwrap_or(""))
        .collect();
    for want in [
        "/cm/a 644 one",
        "/sec/token 400 s3cret",
        "/down/labels 644 tier=\"web\"",
        "/down/name 600 vols",
        "/down/mem 644 64",
        "/all/conf/a 440 one",
        "/all/ns 440 ns",
    ] {
        assert!(lines.contains(&want), "{want:?} in {lines:#?}");
    }
    assert!(!log.contains("writable"), "{log}");
    assert!(log.contains("done"));
}

#[test]
fn a_sub_path_cannot_leave_its_volume() {
    let r = PodRun::new(&pod(
        "Never",
        "  volumes: [{name: v, emptyDir: {}}]\n  containers:\n  - name: a\n    command: ['true']\n    volumeMounts: [{name: v, mountPath: /x, subPath: ../../etc}, {name: v, mountPath: rel}]\n",
    ));
    let out = Run::new(podvisor())
        .arg("validate")
        .arg(r.dir.file("pod.yaml"))
        .output();
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr.contains("spec.containers[0].volumeMounts[0].subPath: Invalid value: \"../../etc\": must not contain '..'"),
        "{out:?}"
    );
    assert!(
        out.stderr
            .contains("spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"rel\": must be an absolute path"),
        "{out:?}"
    );
    if !is_root() {
        return;
    }
    // A symlink in the volume that points out of it: the container does not start.
    let r = PodRun::new(&pod(
        "Never",
        "  initContainers:\n  - {name: link, command: [ln, -s, /etc, /v/out], volumeMounts: [{name: v, mountPath: /v}]}\n  volumes: [{name: v, emptyDir: {}}]\n  containers:\n  - name: a\n    command: ['true']\n    volumeMounts: [{name: v, mountPath: /x, subPath: out}]\n",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 1, "{out:?}");
    let failed: Vec<_> = r
        .events()
        .into_iter()
        .filter(|e| e["object"] == "a" && e["type"] == "Warning")
        .map(|e| e["message"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        failed
            .iter()
            .any(|m| m.contains("subPath \"out\" of volume \"v\" leads outside the volume")),
        "{failed:?}"
    );
}

#[test]
fn a_sub_path_expr_is_expanded_from_the_containers_environment() {
    // Checked as written: relative, no `..`, and not beside a subPath.
    let r = PodRun::new(&pod(
        "Never",
        "  volumes: [{name: v, emptyDir: {}}]\n  containers:\n  - name: a\n    command: ['true']\n    volumeMounts: [{name: v, mountPath: /x, subPathExpr: /$(A)}, {name: v, mountPath: /y, subPath: b, subPathExpr: $(B)}]\n",
    ));
    let out = Run::new(podvisor())
        .arg("validate")
        .arg(r.dir.file("pod.yaml"))
        .output();
    assert_eq!(out.code(), 2);
    for expected in [
        "spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: \"/$(A)\": must be a relative path",
        "spec.containers[0].volumeMounts[1].subPathExpr: Invalid value: \"$(B)\": subPathExpr and subPath are mutually exclusive",
    ] {
        assert!(out.stderr.contains(expected), "{expected}\n{out:?}");
    }
    if !is_root() {
        return;
    }
    // Each writer sees its own directory of the volume, named from the downward API.
    let writer = |name: &str| {
        format!("  - name: {name}\n    command: [sh, -c, 'echo $(ME) > /x/out']\n    env: [{{name: ME, value: {name}}}, {{name: POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]\n    volumeMounts: [{{name: v, mountPath: /x, subPathExpr: '$(POD)/$(ME)'}}]\n")
    };
    let r = PodRun::new(&pod(
        "Never",
        &format!(
            "  volumes: [{{name: v, emptyDir: {{}}}}]\n  initContainers:\n{}{}  containers:\n  - name: reader\n    command: [sh, -c, 'cat /v/p/one/out /v/p/two/out']\n    volumeMounts: [{{name: v, mountPath: /v}}]\n",
            writer("one"),
            writer("two")
        ),
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(r.log_lines("reader", 1), ["one", "two"]);
    // A variable with no value: the kubelet's CreateContainerConfigError, nothing created.
    let r = PodRun::new(&pod(
        "Always",
        "  volumes: [{name: v, emptyDir: {}}]\n  containers:\n  - name: app\n    command: [sleep, '600']\n    env: [{name: EMPTY, value: ''}]\n    volumeMounts: [{name: v, mountPath: /x, subPathExpr: '$(EMPTY)$(NOPE)'}]\n",
    ));
    let mut p = r.cmd(&[]).start();
    let failed = r.wait_event("app", "Failed", 1);
    assert_eq!(failed[0]["message"], "Error: missing value for EMPTY, NOPE");
    let s: serde_json::Value =
        serde_json::from_str(&client(&r, &["status", "-o", "json"]).stdout).unwrap();
    let c = &s["status"]["containerStatuses"][0];
    assert_eq!(
        c["state"]["waiting"]["reason"], "CreateContainerConfigError",
        "{c}"
    );
    assert!(r.find("app", "Created").is_empty());
    crate::probes::stop(&mut p);
}

#[test]
fn a_host_path_of_the_wrong_type_holds_the_pod_until_it_is_right() {
    let r = PodRun::new("");
    let missing = r.dir.file("later");
    let sock_dir = r.dir.file("");
    std::fs::write(
        r.dir.file("pod.yaml"),
        pod(
            "Always",
            &format!(
                "  volumes:\n  - {{name: d, hostPath: {{path: {}, type: Directory}}}}\n  - {{name: made, hostPath: {{path: {}/made-file, type: FileOrCreate}}}}\n  containers:\n  - {{name: app, command: [sleep, '600']}}\n",
                missing.display(),
                sock_dir.display()
            ),
        ),
    )
    .unwrap();
    let mut p = r.cmd(&[]).start();
    wait_until("a FailedMount", || {
        r.reasons("pod").iter().any(|x| x == "FailedMount")
    });
    let event = r
        .events()
        .into_iter()
        .find(|e| e["reason"] == "FailedMount")
        .unwrap();
    assert_eq!(event["type"], "Warning");
    assert_eq!(
        event["message"],
        format!(
            "MountVolume.SetUp failed for volume \"d\" : hostPath type check failed: {} is not a directory",
            missing.display()
        )
    );
    let status: serde_json::Value =
        serde_json::from_str(&client(&r, &["status", "-o", "json"]).stdout).unwrap();
    assert_eq!(status["status"]["phase"], "Pending");
    assert!(r.reasons("app").is_empty(), "nothing started");
    // Retried with backoff: once the directory is there, the pod starts.
    std::fs::create_dir(&missing).unwrap();
    wait_until("the app starts", || {
        r.reasons("app").iter().any(|x| x == "Started")
    });
    assert!(r.dir.file("made-file").is_file(), "FileOrCreate made it");
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
    // A stop while waiting for the mount ends the run at once.
    std::fs::remove_dir(&missing).unwrap();
    let mut p = r.cmd(&[]).start();
    wait_until("a second FailedMount", || {
        r.reasons("pod")
            .iter()
            .filter(|x| *x == "FailedMount")
            .count()
            >= 2
    });
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
    // An unknown type is bad input.
    std::fs::write(
        r.dir.file("pod.yaml"),
        pod(
            "Always",
            "  volumes: [{name: d, hostPath: {path: /x, type: Dir}}]\n  containers: [{name: a, command: ['true']}]\n",
        ),
    )
    .unwrap();
    let out = Run::new(podvisor())
        .arg("validate")
        .arg(r.dir.file("pod.yaml"))
        .output();
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr
            .contains("spec.volumes[0].hostPath.type: Unsupported value: \"Dir\""),
        "{out:?}"
    );
}

#[test]
fn a_memory_empty_dir_is_a_tmpfs_charged_to_the_writer_and_its_size_limit_evicts() {
    if !is_root() {
        skip("a tmpfs needs root");
        return;
    }
    // Written past its sizeLimit: the pod is evicted, Failed (exit 1), with the kubelet's words.
    let r = PodRun::new(&pod(
        "Always",
        "  volumes: [{name: cache, emptyDir: {medium: Memory, sizeLimit: 1Mi}}]
  containers:
  - name: app
    command: [sh, -c, 'stat -f -c %T /cache; head -c 3000000 /dev/zero > /cache/blob; exec sleep 600']
    resources: {limits: {memory: 64Mi}}
    volumeMounts: [{name: cache, mountPath: /cache}]
",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 1, "{out:?}");
    let evicted: Vec<_> = r
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "Evicted")
        .collect();
    assert_eq!(evicted.len(), 1, "{:?}", r.events());
    assert_eq!(
        evicted[0]["message"],
        "Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". "
    );
    assert!(r.log("app", 1).contains("stdout F tmpfs"));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(r.dir.file("").to_str().unwrap()),
        "the host saw a mount"
    );
    // No sizeLimit: what the container writes there counts against its memory limit.
    let r = PodRun::new(&pod(
        "Never",
        "  volumes: [{name: cache, emptyDir: {medium: Memory}}]
  containers:
  - name: app
    command: [sh, -c, 'head -c 40000000 /dev/zero > /cache/blob && echo wrote']
    resources: {limits: {memory: 16Mi}}
    volumeMounts: [{name: cache, mountPath: /cache}]
",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 1, "{out:?}");
    // The kernel either OOM-kills the writer or fails its write (ENOMEM): both say the pages
    // are charged to it; either way the 40 MB never land.
    let log = r.log("app", 1);
    assert!(
        r.reasons("app").iter().any(|x| x == "OOMKilled") || log.contains("Cannot allocate memory"),
        "{:?} {log}",
        r.events()
    );
    assert!(!log.contains("wrote"), "{log}");
}
