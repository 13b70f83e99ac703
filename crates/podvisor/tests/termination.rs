//! Termination messages through the binary: what an instance writes at its
//! `terminationMessagePath` (the end of it) is its `state.terminated.message`, in `status`
//! and `describe`; under `FallbackToLogsOnError` a failure that wrote none gets its log's
//! end; each instance starts with an empty file; a bad policy or path is refused.

use serde_json::Value;

use crate::harness::*;

/// A pod on the host's root under a private layer per start (the file is bound in it).
fn pod(policy: &str, containers: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: why, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n  containers:\n{containers}")
}

/// `status -o json`'s container statuses, by name.
fn statuses(r: &PodRun) -> Vec<(String, Value)> {
    let out = client(r, &["status", "-o", "json"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let pod: Value = serde_json::from_str(&out.stdout).unwrap();
    let list = pod["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .clone();
    (list.into_iter())
        .map(|c| (c["name"].as_str().unwrap().to_string(), c))
        .collect()
}

fn message(status: &[(String, Value)], name: &str, state: &str) -> Option<String> {
    let (_, c) = status.iter().find(|(n, _)| n == name).unwrap();
    let terminated = &c[state]["terminated"];
    assert!(terminated.is_object(), "{name}: {c}");
    terminated["message"].as_str().map(str::to_string)
}

/// file: 5,000 bytes, of which the last 4,096 are the message (the file wins over the log,
/// whatever the policy); logs: 100 lines of 35 bytes, of which the last 80 and of them the
/// last 2,048 bytes; clean: exits 0, so no message from its log; custom: a path of its own in
/// a read-only root, written by user 1000.
const SAYERS: &str = "  - name: file
    command: [sh, -c, 'echo out; head -c 904 /dev/zero | tr \"\\0\" a > /dev/termination-log; head -c 4096 /dev/zero | tr \"\\0\" b >> /dev/termination-log; exit 3']
    terminationMessagePolicy: FallbackToLogsOnError
  - name: logs
    command: [sh, -c, 'i=100; while [ $i -lt 200 ]; do echo \"line $i of what it said before it\"; i=$((i+1)); done; exit 1']
    terminationMessagePolicy: FallbackToLogsOnError
  - name: clean
    command: [sh, -c, 'echo fine']
    terminationMessagePolicy: FallbackToLogsOnError
  - name: custom
    command: [sh, -c, 'echo \"written by $(id -u)\" > /srv/why/message; exit 0']
    terminationMessagePath: /srv/why/message
    securityContext: {runAsUser: 1000, readOnlyRootFilesystem: true}
";

#[test]
fn an_instances_message_is_the_end_of_its_file_or_under_fallback_of_its_log() {
    if !is_root() {
        skip("the file is bound in a root of the container's own, which a user without root gets only in a user namespace, where /dev is the host's");
        return;
    }
    // Run by podvisor, and under keepers (which write the logs and tell the exits).
    for extra in [&[][..], &["--live-restore"][..]] {
        let r = PodRun::new(&pod("Never", SAYERS));
        let mut p = r.cmd(extra).start();
        let status = p.wait();
        p.drain();
        p.assert_no_leftovers();
        assert_eq!(status.code(), Some(1), "{extra:?}: {:?}", p.stderr);
        let s = statuses(&r);
        assert_eq!(message(&s, "file", "state"), Some("b".repeat(4096)));
        let lines: String = (120..200)
            .map(|i| format!("line {i} of what it said before it\n"))
            .collect();
        assert!(lines.len() > 2048);
        let tail = &lines[lines.len() - 2048..];
        assert_eq!(
            message(&s, "logs", "state").as_deref(),
            Some(tail),
            "{extra:?}"
        );
        assert_eq!(message(&s, "clean", "state"), None);
        assert_eq!(
            message(&s, "custom", "state").as_deref(),
            Some("written by 1000\n")
        );
        // describe shows it as kubectl does, under the reason.
        let out = client(&r, &["describe"]);
        assert_eq!(out.code(), 0, "{out:?}");
        let said = "      Reason:       Completed\n      Message:      written by 1000\n      Exit Code:    0\n";
        assert!(out.stdout.contains(said), "{}", out.stdout);
        // Nothing of it on the host.
        assert!(!std::path::Path::new("/srv/why").exists());
    }
}

#[test]
fn each_instance_starts_with_an_empty_file_and_the_last_ones_message_stays_in_last_state() {
    if !is_root() {
        skip("the file is bound in a root of the container's own (root only, see above)");
        return;
    }
    // The first instance writes a message and fails; the second (restarted at once, as a
    // first crash is) writes none and succeeds: its file was empty.
    let r = PodRun::new(&pod(
        "OnFailure",
        "  - name: app
    command: [sh, -c, 'if [ -e /v/ran ]; then exit 0; fi; touch /v/ran; echo \"no config in /etc/app\" > /dev/termination-log; exit 2']
    volumeMounts: [{name: v, mountPath: /v}]
  volumes: [{name: v, emptyDir: {}}]
",
    ));
    let mut p = r.cmd(&[]).start();
    let status = p.wait();
    p.drain();
    p.assert_no_leftovers();
    assert_eq!(status.code(), Some(0), "{:?}", p.stderr);
    let s = statuses(&r);
    assert_eq!(message(&s, "app", "state"), None);
    assert_eq!(
        message(&s, "app", "lastState").as_deref(),
        Some("no config in /etc/app\n")
    );
}

#[test]
fn a_policy_or_path_the_api_refuses_is_refused_at_its_line() {
    let r = PodRun::new(&pod(
        "Never",
        "  - name: app
    command: ['true']
    terminationMessagePolicy: Logs
  - name: other
    command: ['true']
    terminationMessagePath: var/why
",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    for said in [
        "pod.yaml:10:5: spec.containers[0].terminationMessagePolicy: Unsupported value: \"Logs\": supported values: \"File\", \"FallbackToLogsOnError\"",
        "pod.yaml:13:5: spec.containers[1].terminationMessagePath: Invalid value: \"var/why\": must be an absolute path",
    ] {
        assert!(out.stderr.contains(said), "{said}\n{}", out.stderr);
    }
}
