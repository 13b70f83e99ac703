//! The controller's API traffic against the fake API server: what it reads, writes and posts
//! for each case, with bodies and errors as the real API server sends them.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::Api;
use podvisor_controller::crd::Supervision;
use podvisor_controller::decide::HISTORY_ANNOTATION;
use podvisor_controller::metrics::Metrics;
use podvisor_controller::ratelimit::Limits;
use podvisor_controller::reconcile::{error_policy, reconcile, Config, Context};
use serde_json::{json, Value};

use crate::fakeapi::{json_reply, status_error, FakeApi, Reply, Seen};
use crate::fixture;

const NS: &str = "shop";
const RS: &str = "/apis/apps/v1/namespaces/shop/replicasets/web-7d9f8c6b5d";
const PODS: &str = "/api/v1/namespaces/shop/pods";
const POD: &str = "web-7d9f8c6b5d-k8w2p";
const POD_UID: &str = "9f6a2d3e-1c4b-4e8f-a7d2-6b5c0e9f1a32";
const STATUS: &str = "/apis/podvisor.io/v1alpha1/namespaces/shop/supervisions/web/status";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

fn eviction_path(pod: &str) -> String {
    format!("{PODS}/{pod}/eviction")
}

pub fn supervision(spec: Value) -> Supervision {
    serde_json::from_value(json!({
        "apiVersion": "podvisor.io/v1alpha1", "kind": "Supervision",
        "metadata": {"name": "web", "namespace": NS, "uid": "0c3f6a0e-7b1d-4d6e-9e2a-5f8c1b7d3a90",
                     "generation": 1, "resourceVersion": "900"},
        "spec": spec,
    }))
    .unwrap()
}

pub fn web_supervision() -> Supervision {
    supervision(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "podRestart": {"afterContainerRestarts": 5, "within": "10m", "maxPodRestarts": 3},
    }))
}

fn replicaset(annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web-7d9f8c6b5d", "namespace": NS, "uid": "5b0e9c1a-3f7d-4c2e-9a51-0d7c2b8e4f10",
                     "resourceVersion": "100", "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                          "uid": "1d2c3b4a-0000-4000-8000-000000000001", "controller": true}]},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d9f8c6b5d"}}},
    })
}

fn history_of(rs: &Value) -> Value {
    let text = rs["metadata"]["annotations"][HISTORY_ANNOTATION]
        .as_str()
        .unwrap_or("{}");
    serde_json::from_str(text).unwrap()
}

/// The API server's state for one test: pods, one ReplicaSet, and the answers to evictions.
pub struct World {
    pub pods: Vec<Pod>,
    rs: Value,
    evictions: Vec<Reply>,
    list_error: Option<Reply>,
    rs_conflict: bool,
    rs_forbidden: bool,
}

impl World {
    pub fn new(pods: Vec<Pod>) -> Arc<Mutex<World>> {
        Arc::new(Mutex::new(World {
            pods,
            rs: replicaset(json!({})),
            evictions: Vec::new(),
            list_error: None,
            rs_conflict: false,
            rs_forbidden: false,
        }))
    }
}

pub fn route(world: Arc<Mutex<World>>) -> Box<dyn FnMut(&Seen) -> Reply + Send> {
    Box::new(move |s: &Seen| {
        let mut w = world.lock().unwrap();
        if s.is("GET", PODS) {
            if let Some(e) = w.list_error.take() {
                return e;
            }
            return json_reply(
                200,
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "48300"},
                       "items": w.pods}),
            );
        }
        if s.is("GET", RS) {
            if w.rs_forbidden {
                return json_reply(
                    403,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "replicasets.apps \"web-7d9f8c6b5d\" is forbidden: User \"system:serviceaccount:podvisor-system:podvisor-controller\" cannot get resource \"replicasets\" in API group \"apps\" in the namespace \"shop\"",
                    "reason": "Forbidden", "details": {"name": "web-7d9f8c6b5d", "group": "apps", "kind": "replicasets"}, "code": 403}),
                );
            }
            return json_reply(200, w.rs.clone());
        }
        if s.is("PATCH", RS) {
            let rv = s.body["metadata"]["resourceVersion"].as_str().unwrap_or("");
            if w.rs_conflict || rv != w.rs["metadata"]["resourceVersion"].as_str().unwrap() {
                return status_error(
                    409,
                    "Conflict",
                    "Operation cannot be fulfilled on replicasets.apps \"web-7d9f8c6b5d\": the object has been modified; please apply your changes to the latest version and try again",
                );
            }
            for (k, v) in s.body["metadata"]["annotations"].as_object().unwrap() {
                w.rs["metadata"]["annotations"][k] = v.clone();
            }
            let next = rv.parse::<u64>().unwrap() + 1;
            w.rs["metadata"]["resourceVersion"] = json!(next.to_string());
            return json_reply(200, w.rs.clone());
        }
        if s.method == "POST" && s.path().ends_with("/eviction") {
            if w.evictions.is_empty() {
                // Evicted: the pod is being deleted, as the API server marks it.
                let name = s.path().split('/').nth_back(1).unwrap().to_string();
                for p in w
                    .pods
                    .iter_mut()
                    .filter(|p| p.metadata.name.as_deref() == Some(name.as_str()))
                {
                    p.metadata.deletion_timestamp =
                        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            "2026-11-23T10:07:00Z".parse().unwrap(),
                        ));
                }
                return json_reply(
                    201,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                );
            }
            return w.evictions.remove(0);
        }
        if s.is("POST", EVENTS) {
            return json_reply(201, s.body.clone());
        }
        if s.is("PATCH", STATUS) {
            let mut sup = serde_json::to_value(web_supervision()).unwrap();
            sup["status"] = s.body["status"].clone();
            return json_reply(200, sup);
        }
        status_error(
            404,
            "NotFound",
            &format!(
                "the server could not find the requested resource ({} {})",
                s.method, s.uri
            ),
        )
    })
}

/// A context on the fake API with a clock the test moves.
fn context(world: &Arc<Mutex<World>>, config: Config) -> (Arc<Context>, FakeApi, Arc<AtomicI64>) {
    let (client, fake) = FakeApi::start(route(world.clone()));
    let now = Arc::new(AtomicI64::new(
        "2026-11-23T10:07:00Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_millisecond(),
    ));
    let clock = {
        let now = now.clone();
        Arc::new(move || jiff::Timestamp::from_millisecond(now.load(Ordering::SeqCst)).unwrap())
    };
    let ctx = Context::new(
        client,
        Arc::new(Metrics::default()),
        config,
        clock,
        Some("test-0".into()),
    );
    (Arc::new(ctx), fake, now)
}

fn last_status(fake: &FakeApi) -> Value {
    let patch = fake
        .requests()
        .into_iter()
        .rev()
        .find(|s| s.is("PATCH", STATUS))
        .expect("a status patch");
    patch.body["status"].clone()
}

fn condition(status: &Value, type_: &str) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap();
    (
        c["status"].as_str().unwrap().into(),
        c["reason"].as_str().unwrap().into(),
        c["message"].as_str().unwrap().into(),
    )
}

#[tokio::test]
async fn a_crash_looping_pod_is_evicted_and_recorded_on_its_replicaset() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    let (ctx, fake, _) = context(&world, Config::default());
    let sup = Arc::new(web_supervision());
    let action = reconcile(sup.clone(), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
    assert_eq!(
        fake.lines(),
        [
            format!("GET {PODS}"),
            format!("GET {RS}"),
            format!("PATCH {RS}"),
            format!("POST {}", eviction_path(POD)),
            format!("POST {EVENTS}"),
            format!("POST {EVENTS}"),
            format!("PATCH {STATUS}"),
        ]
    );
    let reqs = fake.requests();
    assert!(
        reqs[0].uri.contains("labelSelector=app%3Dweb"),
        "{}",
        reqs[0].uri
    );
    // The record is written first, conditional on the resourceVersion read.
    assert_eq!(reqs[2].body["metadata"]["resourceVersion"], "100");
    let h = history_of(&world.lock().unwrap().rs);
    assert_eq!(h["refreshes"][0]["uid"], POD_UID);
    assert_eq!(h["refreshes"][0]["container"], "app");
    // kube-rs' eviction body: the pod's name (the API server takes the rest from the path).
    assert_eq!(reqs[3].body["metadata"]["name"], POD);
    let events = fake.events();
    assert_eq!(events[0].0, "Pod");
    assert_eq!(events[0].1, "PodRestarting");
    assert!(
        events[0].2.starts_with("Container app was restarted 5 times within 10m0s: restarting the whole pod (pod restart 1 of 3)"),
        "{}",
        events[0].2
    );
    assert_eq!(
        (events[1].0.as_str(), events[1].1.as_str()),
        ("Supervision", "PodRestarting")
    );
    let status = last_status(&fake);
    assert_eq!(status["selectedPods"], 1);
    assert_eq!(status["podRestarts"], 1);
    assert_eq!(condition(&status, "Ready").0, "True");
    assert_eq!(condition(&status, "Degraded").0, "False");
    assert!(ctx.metrics.encode().contains(
        "podvisor_controller_pod_restarts_total{namespace=\"shop\",supervision=\"web\"} 1"
    ));

    // The eviction went through: the pod is terminating, and nothing more is done.
    fake.clear();
    world.lock().unwrap().pods[0].metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-23T10:07:00Z".parse().unwrap(),
        ));
    reconcile(sup, ctx).await.unwrap();
    assert_eq!(
        fake.lines(),
        [
            format!("GET {PODS}"),
            format!("GET {RS}"),
            format!("PATCH {STATUS}")
        ]
    );
}

fn pdb_refusal() -> Reply {
    // What the API server answers when a PodDisruptionBudget does not allow the eviction.
    json_reply(
        429,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Cannot evict pod as it would violate the pod's disruption budget.",
               "reason": "TooManyRequests",
               "details": {"causes": [{"reason": "DisruptionBudget",
                   "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]},
               "code": 429}),
    )
}

#[tokio::test]
async fn a_disruption_budget_refusal_is_reported_and_retried_with_backoff() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    world.lock().unwrap().evictions = vec![pdb_refusal(), pdb_refusal()];
    let (ctx, fake, now) = context(&world, Config::default());
    let sup = Arc::new(web_supervision());
    let action = reconcile(sup.clone(), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));
    let events = fake.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "EvictionRefused");
    assert!(events[0].2.contains("(429 TooManyRequests): Cannot evict pod as it would violate the pod's disruption budget.; retrying in 5s"), "{}", events[0].2);
    let (degraded, _, message) = condition(&last_status(&fake), "Degraded");
    assert_eq!(degraded, "True");
    assert!(message.contains("disruption budget"));

    // One second later: still backing off, no eviction asked.
    fake.clear();
    now.fetch_add(1_000, Ordering::SeqCst);
    reconcile(sup.clone(), ctx.clone()).await.unwrap();
    assert!(
        !fake.lines().iter().any(|l| l.ends_with("/eviction")),
        "{:?}",
        fake.lines()
    );

    // After 5 s: asked again (the record is not written twice), refused again: 10 s now.
    fake.clear();
    now.fetch_add(5_000, Ordering::SeqCst);
    let action = reconcile(sup.clone(), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
    assert!(
        !fake.lines().contains(&format!("PATCH {RS}")),
        "{:?}",
        fake.lines()
    );

    // The budget allows it now.
    fake.clear();
    now.fetch_add(10_000, Ordering::SeqCst);
    reconcile(sup, ctx.clone()).await.unwrap();
    assert!(fake
        .lines()
        .contains(&format!("POST {}", eviction_path(POD))));
    assert_eq!(fake.events()[0].1, "PodRestarting");
    assert_eq!(
        history_of(&world.lock().unwrap().rs)["refreshes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(condition(&last_status(&fake), "Degraded").0, "False");
    assert!(ctx.metrics.encode().contains(
        "podvisor_controller_evictions_refused_total{namespace=\"shop\",supervision=\"web\"} 2"
    ));
}

#[tokio::test]
async fn a_conflict_on_the_owner_defers_the_eviction() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    world.lock().unwrap().rs_conflict = true;
    let (ctx, fake, now) = context(&world, Config::default());
    let sup = Arc::new(web_supervision());
    let action = reconcile(sup.clone(), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(1)));
    assert!(
        !fake.lines().iter().any(|l| l.ends_with("/eviction")),
        "{:?}",
        fake.lines()
    );
    assert!(fake.events().is_empty());
    // A second later the owner is read again and written: the conflict did not use up the
    // owner's one restart per minute.
    world.lock().unwrap().rs_conflict = false;
    now.fetch_add(1_000, Ordering::SeqCst);
    fake.clear();
    reconcile(sup, ctx).await.unwrap();
    assert!(
        fake.lines()
            .contains(&format!("POST {}", eviction_path(POD))),
        "{:?}",
        fake.lines()
    );
}

#[tokio::test]
async fn a_pod_deleted_while_being_evicted_is_not_an_error() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    world.lock().unwrap().evictions = vec![status_error(
        404,
        "NotFound",
        "pods \"web-7d9f8c6b5d-k8w2p\" not found",
    )];
    let (ctx, fake, _) = context(&world, Config::default());
    reconcile(Arc::new(web_supervision()), ctx).await.unwrap();
    assert!(fake.events().is_empty(), "{:?}", fake.events());
    // The refresh stays recorded: the pod is gone, as an eviction would have made it.
    assert_eq!(
        history_of(&world.lock().unwrap().rs)["refreshes"][0]["uid"],
        POD_UID
    );
}

#[tokio::test]
async fn api_failures_are_errors_the_error_policy_retries() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    world.lock().unwrap().list_error = Some(status_error(
        500,
        "InternalError",
        "etcdserver: request timed out",
    ));
    let (ctx, fake, _) = context(&world, Config::default());
    let sup = Arc::new(web_supervision());
    let err = reconcile(sup.clone(), ctx.clone()).await.unwrap_err();
    assert!(
        err.to_string().contains("etcdserver: request timed out"),
        "{err}"
    );
    // The Supervision says so, when the API takes that write.
    let (degraded, reason, message) = condition(&last_status(&fake), "Degraded");
    assert_eq!((degraded.as_str(), reason.as_str()), ("True", "APIError"));
    assert!(
        message.contains("etcdserver: request timed out"),
        "{message}"
    );
    assert_eq!(
        error_policy(sup.clone(), &err, ctx.clone()),
        Action::requeue(Duration::from_secs(10))
    );
    world.lock().unwrap().list_error = Some(Reply::ConnectionError("connection timed out".into()));
    let err = reconcile(sup.clone(), ctx.clone()).await.unwrap_err();
    assert!(err.to_string().contains("Kubernetes API"), "{err}");
    assert!(ctx.metrics.encode().contains(
        "podvisor_controller_reconcile_errors_total{namespace=\"shop\",supervision=\"web\"} 1"
    ));
    // And when the API answers again, the work is done.
    reconcile(sup, ctx).await.unwrap();
}

#[tokio::test]
async fn an_unusable_spec_is_a_condition_and_an_event_never_a_crash() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    let (ctx, fake, _) = context(&world, Config::default());
    let sup = supervision(json!({
        "selector": {},
        "stagedInstrumentation": {"debugAfterRestarts": 6, "disableAfterRestarts": 3},
        "podRestart": {"afterContainerRestarts": 5, "within": "10m", "maxPodRestarts": 3},
    }));
    let action = reconcile(Arc::new(sup), ctx).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        fake.lines(),
        [format!("POST {EVENTS}"), format!("PATCH {STATUS}")]
    );
    let (ready, reason, message) = condition(&last_status(&fake), "Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert_eq!(
        message,
        "spec.selector: Invalid value: {}: an empty selector selects every pod in the namespace; name the supervised pods' labels; \
         spec.stagedInstrumentation.disableAfterRestarts: Invalid value: 3: must be >= debugAfterRestarts (6)"
    );
    assert_eq!(fake.events()[0].1, "InvalidSpec");
}

#[tokio::test]
async fn a_selector_that_matches_nothing_is_reported() {
    let world = World::new(vec![]);
    let (ctx, fake, _) = context(&world, Config::default());
    reconcile(Arc::new(web_supervision()), ctx).await.unwrap();
    let (ready, reason, message) = condition(&last_status(&fake), "Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "NoPodsSelected")
    );
    assert_eq!(
        message,
        "spec.selector (app=web) matches no pod in namespace shop: nothing is supervised"
    );
}

fn refreshes(n: usize) -> Value {
    let marks: Vec<Value> = (0..n)
        .map(|i| json!({"pod": format!("web-7d9f8c6b5d-old{i}"), "uid": format!("old-{i}"), "container": "app",
                         "restarts": 5, "at": "2026-11-23T09:00:00Z"}))
        .collect();
    json!({HISTORY_ANNOTATION: json!({"refreshes": marks}).to_string()})
}

#[tokio::test]
async fn giving_up_is_recorded_once_with_events_and_a_condition() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    world.lock().unwrap().rs = replicaset(refreshes(3));
    let (ctx, fake, _) = context(&world, Config::default());
    let sup = Arc::new(web_supervision());
    reconcile(sup.clone(), ctx.clone()).await.unwrap();
    assert!(!fake.lines().iter().any(|l| l.ends_with("/eviction")));
    assert_eq!(
        history_of(&world.lock().unwrap().rs)["gaveUp"]["uid"],
        POD_UID
    );
    let events = fake.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        (events[0].0.as_str(), events[0].1.as_str()),
        ("Pod", "GaveUp")
    );
    assert!(events[0].2.ends_with("the pods of ReplicaSet web-7d9f8c6b5d have been restarted 3 times already (maxPodRestarts): giving up"), "{}", events[0].2);
    let status = last_status(&fake);
    assert_eq!(status["gaveUp"], 1);
    assert_eq!(status["podRestarts"], 3);
    let (gave_up, _, message) = condition(&status, "GaveUp");
    assert_eq!(gave_up, "True");
    assert_eq!(
        message,
        "gave up on 1 owner(s) after maxPodRestarts (3): ReplicaSet web-7d9f8c6b5d"
    );
    // Once.
    fake.clear();
    reconcile(sup, ctx).await.unwrap();
    assert_eq!(
        fake.lines(),
        [
            format!("GET {PODS}"),
            format!("GET {RS}"),
            format!("PATCH {STATUS}")
        ]
    );
    assert!(fake.events().is_empty());
}

#[tokio::test]
async fn an_unreadable_record_is_refused_and_reported() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    world.lock().unwrap().rs = replicaset(json!({HISTORY_ANNOTATION: "{not json"}));
    let (ctx, fake, _) = context(&world, Config::default());
    reconcile(Arc::new(web_supervision()), ctx).await.unwrap();
    assert!(!fake
        .lines()
        .iter()
        .any(|l| l.ends_with("/eviction") || l.starts_with("PATCH /apis/apps")));
    assert_eq!(fake.events()[0].1, "RecordUnreadable");
    let (degraded, _, message) = condition(&last_status(&fake), "Degraded");
    assert_eq!(degraded, "True");
    assert!(
        message.contains("the record of ReplicaSet web-7d9f8c6b5d cannot be read"),
        "{message}"
    );
    // Untouched.
    assert_eq!(
        world.lock().unwrap().rs["metadata"]["annotations"][HISTORY_ANNOTATION],
        "{not json"
    );
}

#[tokio::test]
async fn dry_run_reports_and_writes_nothing() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    let config = Config {
        dry_run: true,
        ..Config::default()
    };
    let (ctx, fake, _) = context(&world, config);
    reconcile(Arc::new(web_supervision()), ctx).await.unwrap();
    assert_eq!(
        fake.lines(),
        [
            format!("GET {PODS}"),
            format!("GET {RS}"),
            format!("POST {EVENTS}"),
            format!("PATCH {STATUS}")
        ]
    );
    assert_eq!(fake.events()[0].1, "DryRun");
    assert!(fake.events()[0]
        .2
        .starts_with("would evict: Container app was restarted 5 times"));
}

#[tokio::test]
async fn a_bare_pod_gets_one_event_and_no_eviction() {
    let mut pod = fixture("podvisor-status-crashloop.json");
    pod.metadata.namespace = Some(NS.into());
    let start = pod.status.as_ref().unwrap().start_time.clone().unwrap().0;
    let world = World::new(vec![pod]);
    let (ctx, fake, now) = context(&world, Config::default());
    now.store(start.as_millisecond() + 60_000, Ordering::SeqCst);
    let sup = Arc::new(web_supervision());
    reconcile(sup.clone(), ctx.clone()).await.unwrap();
    reconcile(sup, ctx).await.unwrap();
    let events = fake.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "PodRestartSkipped");
    assert!(events[0]
        .2
        .contains("the pod has no controller to make it again: not evicted"));
    assert!(!fake.lines().iter().any(|l| l.ends_with("/eviction")));
}

#[tokio::test]
async fn whole_pod_restarts_are_rate_limited_per_owner() {
    // Two crash-looping pods of the same ReplicaSet: one eviction per owner per interval.
    let a = fixture("replicaset-crashloop.json");
    let mut b = a.clone();
    b.metadata.name = Some("web-7d9f8c6b5d-q7m4z".into());
    b.metadata.uid = Some("2b7e1f4a-9c3d-4a6b-8e5f-1d0c9b8a7f62".into());
    let world = World::new(vec![a, b]);
    let config = Config {
        limits: Limits {
            owner_interval: Duration::from_secs(60),
            ..Limits::default()
        },
        ..Config::default()
    };
    let (ctx, fake, now) = context(&world, config);
    let sup = Arc::new(web_supervision());
    let action = reconcile(sup.clone(), ctx.clone()).await.unwrap();
    let evictions: Vec<String> = fake
        .lines()
        .into_iter()
        .filter(|l| l.ends_with("/eviction"))
        .collect();
    assert_eq!(evictions, [format!("POST {}", eviction_path(POD))]);
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
    assert!(ctx.metrics.encode().contains(
        "podvisor_controller_rate_limited_total{namespace=\"shop\",supervision=\"web\"} 1"
    ));
    // A minute later the second goes (the first is terminating by then).
    fake.clear();
    world.lock().unwrap().pods[0].metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-23T10:07:01Z".parse().unwrap(),
        ));
    now.fetch_add(60_000, Ordering::SeqCst);
    reconcile(sup, ctx).await.unwrap();
    let evictions: Vec<String> = fake
        .lines()
        .into_iter()
        .filter(|l| l.ends_with("/eviction"))
        .collect();
    assert_eq!(
        evictions,
        ["POST /api/v1/namespaces/shop/pods/web-7d9f8c6b5d-q7m4z/eviction"]
    );
    assert_eq!(
        history_of(&world.lock().unwrap().rs)["refreshes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn two_replicas_elect_one_leader_through_a_lease() {
    use podvisor_controller::lease::Elector;
    let lease: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    let path = "/apis/coordination.k8s.io/v1/namespaces/podvisor-system/leases/podvisor-controller";
    let route = {
        let lease = lease.clone();
        Box::new(move |s: &Seen| {
            let mut l = lease.lock().unwrap();
            if s.is("GET", path) {
                return match l.as_ref() {
                    Some(v) => json_reply(200, v.clone()),
                    None => status_error(
                        404,
                        "NotFound",
                        "leases.coordination.k8s.io \"podvisor-controller\" not found",
                    ),
                };
            }
            let create = s.is(
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/podvisor-system/leases",
            );
            let replace = s.is("PUT", path);
            if create || replace {
                let current = l.as_ref().map(|v| v["metadata"]["resourceVersion"].clone());
                let sent = s.body["metadata"]["resourceVersion"].clone();
                if (create && current.is_some()) || (replace && current != Some(sent)) {
                    return status_error(409, "Conflict", "Operation cannot be fulfilled on leases.coordination.k8s.io \"podvisor-controller\": the object has been modified");
                }
                let mut v = s.body.clone();
                let rv = current
                    .and_then(|c| c.as_str().map(|c| c.parse::<u64>().unwrap()))
                    .unwrap_or(0)
                    + 1;
                v["metadata"]["resourceVersion"] = json!(rv.to_string());
                *l = Some(v.clone());
                return json_reply(if create { 201 } else { 200 }, v);
            }
            status_error(404, "NotFound", "not found")
        })
    };
    let (client, _fake) = FakeApi::start(route);
    let elector = |id: &str| Elector {
        api: Api::namespaced(client.clone(), "podvisor-system"),
        name: "podvisor-controller".into(),
        identity: id.into(),
        duration: Duration::from_secs(15),
    };
    let (a, b) = (elector("a"), elector("b"));
    let t = |s: i64| jiff::Timestamp::from_second(1_800_000_000 + s).unwrap();
    assert!(a.try_lead(t(0)).await.unwrap(), "a creates the lease");
    assert!(
        !b.try_lead(t(1)).await.unwrap(),
        "b waits while a's lease holds"
    );
    assert!(a.try_lead(t(5)).await.unwrap(), "a renews");
    assert!(
        !b.try_lead(t(19)).await.unwrap(),
        "renewed at 5 s: held until 20 s"
    );
    assert!(
        b.try_lead(t(21)).await.unwrap(),
        "a stopped renewing: b takes over"
    );
    let held = lease.lock().unwrap().clone().unwrap();
    assert_eq!(held["spec"]["holderIdentity"], "b");
    assert_eq!(held["spec"]["leaseTransitions"], 1);
    assert!(
        !a.try_lead(t(22)).await.unwrap(),
        "a finds it lost the lease"
    );
}

#[tokio::test]
async fn the_watch_resumes_from_a_bookmark() {
    // The API server sends a BOOKMARK with a newer resourceVersion; a watch that ends is
    // started again from it, not from the list's.
    let pod = serde_json::to_value(fixture("replicaset-crashloop.json")).unwrap();
    let watches = Arc::new(Mutex::new(0));
    let route = {
        let watches = watches.clone();
        Box::new(move |s: &Seen| {
            if s.is("GET", PODS) && !s.uri.contains("watch=true") {
                return json_reply(
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList",
                    "metadata": {"resourceVersion": "48300"}, "items": [pod]}),
                );
            }
            if s.is("GET", PODS) {
                let mut n = watches.lock().unwrap();
                *n += 1;
                if *n > 1 {
                    return status_error(500, "InternalError", "the test ends here");
                }
                let mut modified = pod.clone();
                modified["metadata"]["resourceVersion"] = json!("48350");
                modified["status"]["containerStatuses"][0]["restartCount"] = json!(6);
                let lines = [
                    json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "48320", "annotations": {"k8s.io/initial-events-end": "true"}}}}),
                    json!({"type": "MODIFIED", "object": modified}),
                    json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": "48400"}}}),
                ];
                let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
                return Reply::Bytes(200, body.into_bytes());
            }
            status_error(404, "NotFound", "not found")
        })
    };
    let (client, fake) = FakeApi::start(route);
    let api: Api<Pod> = Api::namespaced(client, NS);
    let mut stream = watcher(api, watcher::Config::default().labels("app=web")).boxed();
    let mut restart_counts = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while fake
        .requests()
        .iter()
        .filter(|s| s.uri.contains("watch=true"))
        .count()
        < 2
    {
        let ev = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("watch events")
            .unwrap();
        if let Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) = ev {
            restart_counts.push(p.status.unwrap().container_statuses.unwrap()[0].restart_count)
        }
    }
    assert_eq!(restart_counts, [5, 6]);
    let watches: Vec<String> = fake
        .requests()
        .into_iter()
        .filter(|s| s.uri.contains("watch=true"))
        .map(|s| s.uri)
        .collect();
    assert!(
        watches[0].contains("resourceVersion=48300"),
        "{}",
        watches[0]
    );
    assert!(
        watches[0].contains("allowWatchBookmarks=true"),
        "{}",
        watches[0]
    );
    assert!(
        watches[1].contains("resourceVersion=48400"),
        "{}",
        watches[1]
    );
}

#[tokio::test]
async fn an_owner_of_a_kind_it_does_not_handle_is_reported_once() {
    let mut pod = fixture("replicaset-crashloop.json");
    let owner = &mut pod.metadata.owner_references.as_mut().unwrap()[0];
    owner.api_version = "argoproj.io/v1alpha1".into();
    owner.kind = "Rollout".into();
    owner.name = "web".into();
    let world = World::new(vec![pod]);
    let (ctx, fake, _) = context(&world, Config::default());
    let sup = Arc::new(web_supervision());
    reconcile(sup.clone(), ctx.clone()).await.unwrap();
    reconcile(sup, ctx).await.unwrap();
    assert!(
        !fake
            .lines()
            .iter()
            .any(|l| l.contains("argoproj") || l.ends_with("/eviction")),
        "{:?}",
        fake.lines()
    );
    let events = fake.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "PodRestartSkipped");
    assert!(events[0].2.contains("its owner Rollout web (argoproj.io/v1alpha1) is not a kind podvisor-controller refreshes pods of"), "{}", events[0].2);
    assert_eq!(condition(&last_status(&fake), "Degraded").0, "True");
}

#[tokio::test]
async fn an_owner_it_may_not_read_is_reported_not_retried_as_an_error() {
    let world = World::new(vec![fixture("replicaset-crashloop.json")]);
    world.lock().unwrap().rs_forbidden = true;
    let (ctx, fake, _) = context(&world, Config::default());
    reconcile(Arc::new(web_supervision()), ctx).await.unwrap();
    assert!(!fake.lines().iter().any(|l| l.ends_with("/eviction")));
    let events = fake.events();
    assert_eq!(events[0].1, "PodRestartSkipped");
    assert!(
        events[0].2.contains(
            "cannot be read (403 Forbidden: replicasets.apps \"web-7d9f8c6b5d\" is forbidden"
        ),
        "{}",
        events[0].2
    );
}

/// No eviction was posted and the owner's record was not touched.
fn assert_no_refresh(lines: &[String]) {
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("eviction") || l.starts_with("PATCH /apis/apps")),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn restarts_of_every_container_by_the_kubelet_are_left_to_it() {
    // The fixture's five restarts were the kubelet's own (a RestartAllContainers rule), and
    // it is restarting every container again now: the condition says so. No eviction.
    let mut pod = fixture("replicaset-crashloop.json");
    let status = pod.status.as_mut().unwrap();
    status.conditions.as_mut().unwrap().push(
        serde_json::from_value(json!({
            "type": "AllContainersRestarting", "status": "True",
            "lastTransitionTime": "2026-11-23T10:06:41Z",
            "reason": "RestartAllContainersStarted",
            "message": "container exited with restart policy rule",
        }))
        .unwrap(),
    );
    let world = World::new(vec![pod]);
    let (ctx, fake, _) = context(&world, Config::default());
    let sup = Arc::new(web_supervision());
    reconcile(sup.clone(), ctx.clone()).await.unwrap();
    assert_no_refresh(&fake.lines());
    let status = last_status(&fake);
    assert_eq!(status["podRestarts"], 0);

    // Once the condition is False again, what it raised is not counted either.
    fake.clear();
    let conditions = world.lock().unwrap().pods[0]
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c.type_ == "AllContainersRestarting")
        .map(|c| {
            c.status = "False".into();
            c.reason = None;
            c.message = None;
            c.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-23T10:06:43Z".parse().unwrap(),
            ));
        });
    assert!(conditions.is_some());
    reconcile(sup, ctx).await.unwrap();
    assert_no_refresh(&fake.lines());
}
