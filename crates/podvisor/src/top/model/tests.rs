//! The view model's unit tests: rows, sort, filter, confirmations, selection, gone pods.

use super::*;
use crate::status::print::parse_time;
use serde_json::{json, Value};

fn status(name: &str, containers: Value) -> ApiPod {
    let pod = json!({
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-11-25T10:00:00Z",
                     "annotations": {"podvisor.io/pod-restarts": "0", "podvisor.io/stage.app": "Debug"}},
        "spec": {},
        "status": {"phase": "Running", "containerStatuses": containers},
    });
    serde_json::from_value(pod).expect("a v1 Pod")
}

fn running(name: &str, restarts: i64, ready: bool) -> Value {
    json!({"name": name, "ready": ready, "started": true, "restartCount": restarts,
           "image": "", "imageID": "",
           "state": {"running": {"startedAt": "2026-11-25T10:00:50Z"}}})
}

fn model() -> Model {
    let mut m = Model::default();
    m.on_status(
        "/s/a".into(),
        status(
            "web",
            json!([running("app", 3, true), running("side", 0, true)]),
        ),
    );
    m.on_status(
        "/s/b".into(),
        status(
            "crashy",
            json!([{"name": "app", "ready": false, "restartCount": 7, "image": "", "imageID": "",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
        ),
    );
    m
}

fn now() -> f64 {
    parse_time("2026-11-25T10:01:10Z").unwrap()
}

/// The selected row's pod dir and container.
fn selection(m: &Model) -> Option<(PathBuf, Option<String>)> {
    let rows = m.rows(now());
    let i = m.selected_index(&rows)?;
    Some((rows[i].dir.clone(), rows[i].container.clone()))
}

fn names(m: &Model) -> Vec<String> {
    m.rows(now()).iter().map(|r| r.cells[0].clone()).collect()
}

#[test]
fn rows_as_kubectl_shows_them_sorted_and_filtered() {
    let mut m = model();
    let rows = m.rows(now());
    assert_eq!(
        rows[0].cells[..5],
        ["ns/crashy", "0/1", "CrashLoopBackOff", "7", "70s"]
    );
    assert!(rows[0].warn);
    assert_eq!(rows[2].cells[..5], ["ns/web", "2/2", "Running", "3", "70s"]);
    assert_eq!(
        rows[3].cells[..6],
        ["  app", "✓", "Running", "3", "20s", "Debug"]
    );
    // By restarts: the container with more first, pods by their total.
    m.key(Key::Char('s'), now());
    assert_eq!(m.sort, Sort::Restarts);
    assert_eq!(
        names(&m),
        ["ns/crashy", "  app", "ns/web", "  app", "  side"]
    );
    // A filter keeps a pod whose name or containers match.
    for k in "/side".chars().map(Key::Char).chain([Key::Enter]) {
        m.key(k, now());
    }
    assert_eq!(m.filter, "side");
    assert_eq!(names(&m), ["ns/web", "  side"]);
    m.key(Key::Char('/'), now());
    m.key(Key::Esc, now());
    assert_eq!(names(&m).len(), 5);
}

#[test]
fn actions_are_confirmed_before_they_go() {
    let mut m = model();
    // Down to crashy's app, then r: a question, and nothing until y.
    m.key(Key::Down, now());
    assert_eq!(m.key(Key::Char('r'), now()), []);
    let action = Action::RestartContainer {
        dir: "/s/b".into(),
        container: "app".into(),
    };
    assert_eq!(m.confirm, Some(action.clone()));
    assert_eq!(m.key(Key::Char('y'), now()), [Command::Act(action)]);
    // n cancels.
    m.key(Key::Char('x'), now());
    assert!(matches!(m.confirm, Some(Action::StopPod { .. })));
    assert_eq!(m.key(Key::Char('n'), now()), []);
    assert_eq!(m.message.as_deref(), Some("cancelled"));
    // Enter opens the selected container's log.
    assert_eq!(
        m.key(Key::Enter, now()),
        [Command::OpenLog {
            dir: "/s/b".into(),
            container: "app".into(),
            previous: false
        }]
    );
    assert_eq!(m.focus, Focus::Logs);
}

#[test]
fn the_selection_follows_its_row_and_gone_pods_go() {
    let mut m = model();
    m.key(Key::End, now());
    assert_eq!(selection(&m), Some(("/s/a".into(), Some("side".into()))));
    // A new pod sorted before it does not move the selection.
    m.on_status(
        "/s/c".into(),
        status("alpha", json!([running("x", 0, true)])),
    );
    assert_eq!(selection(&m), Some(("/s/a".into(), Some("side".into()))));
    // Its run ends: listed as Gone, then dropped.
    m.on_gone(&"/s/a".into(), now());
    let rows = m.rows(now());
    let web = rows.iter().find(|r| r.cells[0] == "ns/web").unwrap();
    assert_eq!(web.cells[2], "Gone");
    m.forget_gone(now() + 10.0, 5.0);
    assert!(!names(&m).contains(&"ns/web".to_string()));
    assert_eq!(selection(&m).map(|s| s.0), Some("/s/c".into()));
}

#[test]
fn events_of_one_pod_newest_first() {
    let mut m = model();
    let ev = |t: &str, r: &str| EventLine {
        time: t.into(),
        type_: "Normal".into(),
        reason: r.into(),
        object: "app".into(),
        message: String::new(),
        restart_count: None,
        stage: None,
        exit_code: None,
    };
    m.on_event("/s/a".into(), ev("2026-11-25T10:00:01.000Z", "Created"));
    m.on_event("/s/a".into(), ev("2026-11-25T10:00:01.000Z", "Started"));
    m.on_event("/s/b".into(), ev("2026-11-25T10:00:02.000Z", "BackOff"));
    let reasons = |d: Option<&PathBuf>| -> Vec<String> {
        m.events(d).iter().map(|e| e.reason.clone()).collect()
    };
    // Same millisecond: the later one first.
    assert_eq!(reasons(Some(&"/s/a".into())), ["Started", "Created"]);
    assert_eq!(reasons(None), ["BackOff", "Started", "Created"]);
}

#[test]
fn narrow_terminals_keep_the_first_columns() {
    assert_eq!(Model::columns(40), 3);
    assert_eq!(Model::columns(60), 5);
    assert_eq!(Model::columns(120), COLUMNS.len());
}
