//! `podvisor validate` through the binary: valid manifests pass silently; every problem of a
//! bad one is reported at once, each with file:line:column, field path and message, exit 2.

use crate::harness::*;

fn validate_text(name: &str, text: &str) -> Output {
    let dir = TempDir::new();
    let file = dir.file(name);
    std::fs::write(&file, text).unwrap();
    Run::new(podvisor()).arg("validate").arg(&file).output()
}

fn errors(out: &Output) -> Vec<String> {
    out.stderr
        .lines()
        .map(|l| {
            assert!(l.starts_with("error: "), "not an error line: {l:?}");
            // Drop the temp dir, keep `name:line:col: field: message`.
            let l = &l["error: ".len()..];
            let file_end = l.find(".yaml:").unwrap_or(0);
            let start = l[..file_end].rfind('/').map_or(0, |i| i + 1);
            l[start..].to_string()
        })
        .collect()
}

#[test]
fn the_examples_are_valid() {
    for example in [
        "examples/pods/web.yaml",
        "examples/pods/job.yaml",
        "examples/pods/crashloop.yaml",
        "examples/pods/restart-all.yaml",
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(example);
        let out = Run::new(podvisor()).arg("validate").arg(&path).output();
        assert_eq!(
            (out.code(), out.stderr.as_str(), out.stdout.as_str()),
            (0, "", ""),
            "{example}"
        );
    }
}

#[test]
fn every_problem_at_once_with_its_place() {
    let out = validate_text(
        "bad.yaml",
        "apiVersion: v1
kind: Pod
metadata:
  name: Web_App
spec:
  restartPolicy: Sometimes
  containers:
  - name: app
    image: nginx
    imagePullPolicyy: Always
    ports:
    - {containerPort: 80, name: http}
    livenessProbe:
      httpGet: {port: web}
      successThreshold: 2
  - name: app
    command: [sleep, '10']
    env:
    - name: A
      valueFrom:
        secretKeyRef: {name: creds, key: password}
",
    );
    assert_eq!(out.code(), 2);
    let got = errors(&out);
    let want = [
        "bad.yaml:10:5: spec.containers[0]: unknown field \"imagePullPolicyy\"",
        "bad.yaml:4:3: metadata.name: Invalid value: \"Web_App\"",
        "bad.yaml:6:3: spec.restartPolicy: Unsupported value: \"Sometimes\"",
        "bad.yaml:15:7: spec.containers[0].livenessProbe.successThreshold: Invalid value: must be 1",
        "bad.yaml:14:17: spec.containers[0].livenessProbe.httpGet.port: Invalid value: \"web\"",
        "bad.yaml:16:5: spec.containers[1].name: Duplicate value: \"app\"",
        "bad.yaml:16:5: spec.containers[1].image: Required value",
        "bad.yaml:21:9: spec.containers[1].env[0].valueFrom.secretKeyRef: Not found: Secret \"creds\"",
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (g, w) in got.iter().zip(want) {
        assert!(g.starts_with(w), "got {g:?}\nwant {w:?}...");
    }
}

#[test]
fn wrong_types_name_the_field() {
    let out = validate_text(
        "t.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, annotations: {podvisor.io/root-from: host}}\nspec:\n  containers:\n  - name: c\n    command: [x]\n    ports:\n    - containerPort: eighty\n",
    );
    assert_eq!(out.code(), 2);
    assert_eq!(
        errors(&out),
        ["t.yaml:9:7: spec.containers[0].ports[0].containerPort: invalid type: string \"eighty\", expected i32"]
    );
}

#[test]
fn a_volume_kind_podvisor_does_not_provide_is_refused() {
    let out = validate_text(
        "v.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, annotations: {podvisor.io/root-from: host}}\nspec:\n  volumes:\n  - name: data\n    nfs: {server: nas, path: /export}\n  containers:\n  - name: c\n    command: [x]\n    volumeMounts: [{name: data, mountPath: /data}]\n",
    );
    assert_eq!(out.code(), 2);
    assert_eq!(
        errors(&out),
        ["v.yaml:6:5: spec.volumes[0]: Unsupported value: volume \"data\": podvisor provides emptyDir, hostPath, configMap, secret, downwardAPI, projected and image volumes"]
    );
}

/// A pod the kubelet would not admit on this node (its OS, by field or label), or one whose
/// resource claims no driver here could prepare, is refused where it says so; a pod for
/// linux passes, by field and label.
#[test]
fn a_pod_for_another_os_or_with_resource_claims_is_refused_at_its_line() {
    let pod = |labels: &str, spec: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  annotations: {{podvisor.io/root-from: host}}\n  labels: {{{labels}}}\nspec:\n{spec}  containers:\n  - name: c\n    command: ['true']\n")
    };
    let out = validate_text(
        "w.yaml",
        &pod("kubernetes.io/os: windows", "  os: {name: windows}\n"),
    );
    assert_eq!(out.code(), 2, "{out:?}");
    assert_eq!(
        errors(&out),
        [
            "w.yaml:6:12: metadata.labels.kubernetes.io/os: PodOSSelectorNodeLabelDoesNotMatch: Failed to admit pod as the `kubernetes.io/os` label doesn't match node label: the pod's is \"windows\", this node's \"linux\"",
            "w.yaml:8:8: spec.os.name: PodOSNotSupported: Failed to admit pod as the OS field doesn't match node OS: the pod is for \"windows\", this node runs \"linux\"",
        ]
    );
    let out = validate_text("o.yaml", &pod("", "  os: {name: plan9}\n"));
    assert_eq!(
        errors(&out),
        ["o.yaml:8:3: spec.os: Unsupported value: \"plan9\": supported values: \"linux\", \"windows\""]
    );
    let claims = "  resourceClaims: [{name: gpu, resourceClaimName: gpu-claim}]\n";
    let text = pod("", claims).replace(
        "command: ['true']",
        "command: ['true']\n    resources: {claims: [{name: gpu}]}",
    );
    let out = validate_text("r.yaml", &text);
    assert_eq!(
        errors(&out),
        [
            "r.yaml:8:20: spec.resourceClaims[0]: Forbidden: claim \"gpu\": podvisor has no dynamic resource allocation (no driver here prepares a ResourceClaim), so the pod's containers could not get what it claims",
            "r.yaml:12:26: spec.containers[0].resources.claims[0]: Forbidden: claim \"gpu\": podvisor has no dynamic resource allocation",
        ]
    );
    // The same refusal from `run`, before anything starts.
    let dir = TempDir::new();
    let file = dir.file("w.yaml");
    std::fs::write(&file, pod("", "  os: {name: windows}\n")).unwrap();
    let out = Run::new(podvisor())
        .arg("run")
        .arg("--state-dir")
        .arg(dir.file("state"))
        .arg(&file)
        .output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("spec.os.name: PodOSNotSupported"),
        "{out:?}"
    );
    assert!(!dir.file("state").exists(), "{out:?}");
    let gates = "  readinessGates: [{conditionType: example.com/lb}, {conditionType: 'a b'}]\n";
    assert_eq!(
        errors(&validate_text("g.yaml", &pod("", gates))),
        ["g.yaml:8:54: spec.readinessGates[1].conditionType: Invalid value: \"a b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"]
    );
    let linux = pod("kubernetes.io/os: linux, app: a", "  os: {name: linux}\n");
    let out = validate_text("l.yaml", &linux);
    assert_eq!((out.code(), out.stderr.as_str()), (0, ""), "{out:?}");
}

#[test]
fn malformed_yaml_and_missing_files() {
    let out = validate_text("m.yaml", "a: [1, 2\nb: c\n");
    assert_eq!(out.code(), 2);
    let e = errors(&out);
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("m.yaml:2:"), "{e:?}");

    let out = Run::new(podvisor())
        .args(["validate", "/no/such/pod.yaml"])
        .output();
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr
            .starts_with("error: /no/such/pod.yaml: No such file or directory"),
        "{out:?}"
    );

    let out = Run::new(podvisor()).arg("validate").output();
    assert_eq!(out.code(), 2);
}

#[test]
fn one_workload_per_file_and_known_kinds_only() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, annotations: {podvisor.io/root-from: host}}\nspec:\n  containers: [{name: c, command: [x]}]\n";
    let out = validate_text("two.yaml", &format!("{pod}---\n{pod}"));
    assert_eq!(errors(&out), ["two.yaml:8:1: kind: a second workload: podvisor runs exactly one pod per file (the first is the document at line 1)"]);
    let out = validate_text(
        "svc.yaml",
        &format!("{pod}---\napiVersion: v1\nkind: Service\nmetadata: {{name: s}}\n"),
    );
    assert_eq!(out.code(), 2);
    assert!(
        errors(&out)[0].starts_with("svc.yaml:8:1: kind: v1 Service is not supported"),
        "{out:?}"
    );
    let out = validate_text(
        "none.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
    );
    assert!(errors(&out)[0].contains("no workload"), "{out:?}");
}

#[test]
fn templates_probes_and_init_containers() {
    let out = validate_text(
        "d.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, annotations: {podvisor.io/root-from: host}}
spec:
  selector: {}
  template:
    spec:
      initContainers:
      - name: setup
        command: [/bin/true]
        readinessProbe: {exec: {command: [/bin/true]}}
      containers:
      - name: c
        command: [x]
        livenessProbe: {exec: {command: [a]}, tcpSocket: {port: 1}}
        readinessProbe: {exec: {command: [a]}, terminationGracePeriodSeconds: 5, periodSeconds: -1}
",
    );
    let got = errors(&out);
    let want = [
        "d.yaml:11:9: spec.template.spec.initContainers[0].readinessProbe: Forbidden",
        "d.yaml:15:9: spec.template.spec.containers[0].livenessProbe: Forbidden: may not specify more than 1 handler type",
        "d.yaml:16:82: spec.template.spec.containers[0].readinessProbe.periodSeconds: Invalid value",
        "d.yaml:16:48: spec.template.spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: must not be set for readinessProbes",
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (g, w) in got.iter().zip(want) {
        assert!(g.starts_with(w), "got {g:?}\nwant {w:?}...");
    }
}

#[test]
fn supervision_is_checked_too() {
    let out = validate_text(
        "s.yaml",
        "apiVersion: v1
kind: Pod
metadata: {name: a, annotations: {podvisor.io/root-from: host}}
spec:
  containers: [{name: app, command: [x]}]
---
apiVersion: podvisor.io/v1alpha1
kind: Supervision
metadata: {name: default}
spec:
  stagedInstrumentation: {enabled: true, containers: [nope], debugAfterRestart: 3}
  podRestart: {afterContainerRestarts: 5, within: 10, maxPodRestarts: 3}
",
    );
    assert_eq!(out.code(), 2);
    let got = errors(&out);
    assert_eq!(
        got,
        [
            "s.yaml:11:62: spec.stagedInstrumentation: unknown field \"debugAfterRestart\"",
            "s.yaml:12:43: spec.podRestart.within: invalid type: integer `10`, expected a string",
        ]
    );
    // With the types right, the references are checked.
    let out = validate_text(
        "s.yaml",
        "apiVersion: v1
kind: Pod
metadata: {name: a, annotations: {podvisor.io/root-from: host}}
spec:
  containers: [{name: app, command: [x]}]
---
apiVersion: podvisor.io/v1alpha1
kind: Supervision
metadata: {name: default}
spec:
  stagedInstrumentation: {enabled: true, containers: [nope], debugAfterRestarts: 4, disableAfterRestarts: 2}
  podRestart: {afterContainerRestarts: 5, within: 10x, maxPodRestarts: 3}
",
    );
    assert_eq!(
        errors(&out),
        [
            "s.yaml:11:55: spec.stagedInstrumentation.containers[0]: Not found: no container \"nope\" in the pod",
            "s.yaml:11:85: spec.stagedInstrumentation.disableAfterRestarts: Invalid value: 2: must be >= debugAfterRestarts (4)",
            "s.yaml:12:43: spec.podRestart.within: Invalid value: invalid duration \"10x\": unknown unit \"x\" (ns, us, ms, s, m, h)",
        ]
    );
}

#[test]
fn supervision_numbers_must_be_usable() {
    let out = validate_text(
        "z.yaml",
        "apiVersion: v1
kind: Pod
metadata: {name: a, annotations: {podvisor.io/root-from: host}}
spec:
  containers: [{name: app, command: [x]}]
---
apiVersion: podvisor.io/v1alpha1
kind: Supervision
metadata: {name: default}
spec:
  stagedInstrumentation: {debugAfterRestarts: 0, verdictAfter: 0s}
  podRestart: {afterContainerRestarts: 0, within: 10m, maxPodRestarts: 0}
",
    );
    assert_eq!(out.code(), 2);
    assert_eq!(
        errors(&out),
        [
            "z.yaml:11:27: spec.stagedInstrumentation.debugAfterRestarts: Invalid value: 0: must be at least 1",
            "z.yaml:11:50: spec.stagedInstrumentation.verdictAfter: Invalid value: \"0s\": must be longer than zero",
            "z.yaml:12:16: spec.podRestart.afterContainerRestarts: Invalid value: 0: must be at least 1",
            "z.yaml:12:56: spec.podRestart.maxPodRestarts: Invalid value: 0: must be at least 1",
        ]
    );
}
