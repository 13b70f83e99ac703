//! Readiness gates and the conditions they wait for, through the binary: a pod whose
//! containers are ready is not Ready until every gate's condition is `True`
//! (`ReadinessGatesNotReady`, with the kubelet's messages); `podvisor patch --subresource
//! status` sets such conditions as `kubectl patch pod --subresource status` does (strategic
//! merge by type, merge, JSON patch), keeps only the types the node does not own, and a run
//! that takes the pod up again after a kill -9 keeps them.

use serde_json::Value;

use crate::harness::*;
use crate::probes::stop;
use crate::resources::status;

const GATED: &str = "  readinessGates:
  - conditionType: example.com/lb
  - conditionType: example.com/dns
  containers:
  - name: app
    command: [sleep, '600']
";

/// `podvisor patch --subresource status -p PATCH` against the run, with more flags.
fn patch(r: &PodRun, patch: &str, extra: &[&str]) -> Output {
    let mut args = vec!["patch", "--subresource", "status", "-p", patch];
    args.extend_from_slice(extra);
    client(r, &args)
}

/// The condition of `kind`: (status, reason, message).
fn condition(s: &Value, kind: &str) -> Option<(String, String, String)> {
    let c = (s["status"]["conditions"].as_array()?.iter()).find(|c| c["type"] == kind)?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Some((text(&c["status"]), text(&c["reason"]), text(&c["message"])))
}

/// The status once the app runs and is ready.
fn when_app_is_ready(r: &PodRun) -> Value {
    let mut seen = Value::Null;
    wait_until("app is ready", || {
        let out = client(r, &["status", "-o", "json"]).stdout;
        seen = serde_json::from_str(&out).unwrap_or(Value::Null);
        seen["status"]["containerStatuses"][0]["ready"] == true
    });
    seen
}

#[test]
fn readiness_gates_hold_ready_until_their_conditions_are_set_true() {
    let r = PodRun::new(&pod("Always", GATED));
    let mut p = r.cmd(&[]).start();
    let s = when_app_is_ready(&r);
    let not_there = "corresponding condition of pod readiness gate \"example.com/lb\" does not exist., corresponding condition of pod readiness gate \"example.com/dns\" does not exist.";
    assert_eq!(
        condition(&s, "Ready"),
        Some((
            "False".into(),
            "ReadinessGatesNotReady".into(),
            not_there.into()
        )),
        "{s}"
    );
    assert_eq!(condition(&s, "ContainersReady").unwrap().0, "True");

    // A strategic merge patch: conditions merged by type. One gate True, the other Unknown.
    let out = patch(
        &r,
        r#"{"status":{"conditions":[{"type":"example.com/lb","status":"True"},{"type":"example.com/dns","status":"Unknown","reason":"Waiting"}]}}"#,
        &[],
    );
    assert_eq!(
        (out.code(), out.stdout.as_str()),
        (0, "pod/p patched"),
        "{out:?}"
    );
    let s = status(&r);
    assert_eq!(
        condition(&s, "Ready"),
        Some((
            "False".into(),
            "ReadinessGatesNotReady".into(),
            "the status of pod readiness gate \"example.com/dns\" is not \"True\", but Unknown"
                .into()
        )),
        "{s}"
    );
    assert_eq!(
        condition(&s, "example.com/dns"),
        Some(("Unknown".into(), "Waiting".into(), String::new()))
    );
    let lb = (s["status"]["conditions"].as_array().unwrap().iter())
        .find(|c| c["type"] == "example.com/lb")
        .unwrap();
    assert!(lb["lastTransitionTime"].is_string(), "{lb}");

    // The other made True by a JSON patch, as `kubectl patch --type json`; a change to a
    // condition the node owns (Ready) is not kept: the node writes it.
    let out = patch(
        &r,
        r#"[{"op":"add","path":"/status/conditions/-","value":{"type":"example.com/dns","status":"True"}},{"op":"add","path":"/status/conditions/-","value":{"type":"Ready","status":"False"}}]"#,
        &["--type", "json"],
    );
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        out.stderr.contains("Duplicate value: \"example.com/dns\""),
        "{out:?}"
    );
    let out = patch(
        &r,
        r#"{"status":{"conditions":[{"type":"example.com/dns","status":"True"},{"type":"Ready","status":"False"}]}}"#,
        &[],
    );
    assert_eq!(out.code(), 0, "{out:?}");
    let s = status(&r);
    assert_eq!(condition(&s, "Ready").unwrap().0, "True", "{s}");
    // The same patch again changes nothing.
    let out = patch(
        &r,
        r#"{"status":{"conditions":[{"type":"example.com/dns","status":"True"}]}}"#,
        &[],
    );
    assert_eq!(out.stdout, "pod/p patched (no change)", "{out:?}");
    // A bad type is refused as the API server refuses it.
    let out = patch(
        &r,
        r#"{"status":{"conditions":[{"type":"a b","status":"True"}]}}"#,
        &[],
    );
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        out.stderr
            .contains("status.conditions[6].type: Invalid value: \"a b\""),
        "{out:?}"
    );

    // A run killed with -9: the next takes the pod up with the conditions it was given.
    p.signal("KILL");
    p.wait();
    let mut second = r.cmd(&[]).start();
    let s = when_app_is_ready(&r);
    assert_eq!(condition(&s, "Ready").unwrap().0, "True", "{s}");
    // A merge patch replaces the list: the gates' conditions are gone, and Ready with them.
    let out = patch(
        &r,
        r#"{"status":{"conditions":[{"type":"example.com/lb","status":"False"}]}}"#,
        &["--type", "merge"],
    );
    assert_eq!(out.code(), 0, "{out:?}");
    let s = status(&r);
    assert_eq!(condition(&s, "example.com/dns"), None, "{s}");
    assert_eq!(
        condition(&s, "Ready").unwrap().2,
        "the status of pod readiness gate \"example.com/lb\" is not \"True\", but False, corresponding condition of pod readiness gate \"example.com/dns\" does not exist."
    );
    // Stopped (deleted, as `kubectl delete pod`): the next run is a new pod, without them.
    let out = client(&r, &["stop"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(second.wait().code(), Some(0));
    let mut third = r.cmd(&[]).start();
    let s = when_app_is_ready(&r);
    assert_eq!(condition(&s, "example.com/lb"), None, "{s}");
    // Stopped by SIGTERM (the pod kept, as a service manager's stop), with a conditions
    // file that cannot be read: the next run is refused, not reset.
    let out = patch(
        &r,
        r#"{"status":{"conditions":[{"type":"example.com/lb","status":"True"}]}}"#,
        &[],
    );
    assert_eq!(out.code(), 0, "{out:?}");
    stop(&mut third);
    let file = r.dir.file("state").join("conditions");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, &text[..text.len() / 2]).unwrap();
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("conditions"), "{out:?}");
    // --reset-state moves it aside (StateReset) and the pod goes on without them.
    let mut fourth = r.cmd(&["--reset-state"]).start();
    let s = when_app_is_ready(&r);
    assert_eq!(condition(&s, "example.com/lb"), None, "{s}");
    assert!(r.reasons("pod").contains(&"StateReset".to_string()));
    assert_eq!(
        s["status"]["containerStatuses"][0]["restartCount"], 1,
        "{s}"
    );
    stop(&mut fourth);
}
