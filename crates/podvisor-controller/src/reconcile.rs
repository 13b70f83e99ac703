//! `reconcile(Supervision, ctx) -> Action`, as the kube-rs examples write controllers: list the
//! selected pods (the selector goes to the API server), let `decide` judge each, then act through the API
//! (owner annotation, Eviction API, Events, the Supervision's status) and say when to look
//! again. Nothing here decides: every rule is in `decide.rs`, `ratelimit.rs` and the core.
//!
//! A reconcile never fails for what a user wrote: a spec that cannot be used, a selector that
//! matches nothing, a refused eviction or an unreadable record become conditions and events.
//! Only the API failing (5xx, timeouts) returns an error, which `error_policy` retries with
//! backoff (kube-runtime's scheduler), so the controller never crash-loops.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::api::{
    Api, ApiResource, DynamicObject, EvictParams, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use podvisor_core::duration::format_duration;
use podvisor_core::escalation::PodRestartPolicy;
use serde_json::json;

use crate::crd::{Supervision, SupervisionStatus};
use crate::decide::{self, Decision, History, Mark, PodSeen, HISTORY_ANNOTATION};
use crate::metrics::Metrics;
use crate::ratelimit::{Limits, RateLimiter};

/// The controller's name: field manager, event reporter.
pub const MANAGER: &str = "podvisor-controller";

/// Settings from the command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// Decide and report, never evict or write records.
    pub dry_run: bool,
    pub limits: Limits,
    /// How often a Supervision is looked at without a change (the restart window moves).
    pub resync: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dry_run: false,
            limits: Limits::default(),
            resync: Duration::from_secs(60),
        }
    }
}

/// The wall clock, given: tests pass a fixed one.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// What a reconcile shares with the next.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub config: Config,
    pub clock: Clock,
    state: Mutex<State>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    /// Per Supervision uid, per pod uid.
    seen: HashMap<String, HashMap<String, PodSeen>>,
    limiter: RateLimiter,
    /// Per pod uid: when an eviction may be retried, and the delay after the next refusal.
    evict_backoff: HashMap<String, (u64, Duration)>,
}

impl Context {
    pub fn new(
        client: Client,
        metrics: Arc<Metrics>,
        config: Config,
        clock: Clock,
        instance: Option<String>,
    ) -> Context {
        let recorder = Recorder::new(
            client.clone(),
            kube::runtime::events::Reporter {
                controller: MANAGER.into(),
                instance,
            },
        );
        let state = State {
            limiter: RateLimiter::new(config.limits),
            ..State::default()
        };
        Context {
            client,
            recorder,
            metrics,
            config,
            clock,
            state: Mutex::new(state),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Only the API failing is an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

/// Eviction retries: 5 s doubling to 5 min (a PodDisruptionBudget frees up as pods become
/// ready, which takes seconds to minutes).
const EVICT_RETRY_FIRST: Duration = Duration::from_secs(5);
const EVICT_RETRY_MAX: Duration = Duration::from_secs(300);

/// What one reconcile found, for the status.
#[derive(Debug, Default)]
struct Report {
    degraded: Vec<String>,
    retry: Option<Duration>,
}

impl Report {
    fn retry_in(&mut self, d: Duration) {
        self.retry = Some(self.retry.map_or(d, |r| r.min(d)));
    }
}

/// One owner, read once per reconcile.
struct Owner {
    api: Api<DynamicObject>,
    object: DynamicObject,
    history: Result<History, String>,
}

pub async fn reconcile(sup: Arc<Supervision>, ctx: Arc<Context>) -> Result<Action, Error> {
    let now = (ctx.clock)();
    let now_ms = now.as_millisecond().max(0) as u64;
    let ns = sup.namespace().unwrap_or_default();
    let sups: Api<Supervision> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.metrics
        .reconciles
        .get_or_create(&labels(&ns, &sup))
        .inc();

    let problems = sup.spec.problems();
    let selector = Selector::try_from(sup.spec.selector.clone());
    if !problems.is_empty() || selector.is_err() {
        let mut text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        if let Err(e) = &selector {
            text.push(format!("spec.selector: {e}"));
        }
        let message = text.join("; ");
        publish(
            &ctx,
            &sup.object_ref(&()),
            EventType::Warning,
            "InvalidSpec",
            &message,
        )
        .await;
        let status = status(
            &sup,
            now,
            0,
            0,
            0,
            ("False", "InvalidSpec", message),
            None,
            None,
        );
        patch_status(&sups, &sup, status).await?;
        return Ok(Action::await_change());
    }
    let selector = selector.expect("checked");
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let listed = pod_api
        .list(&ListParams::default().labels_from(&selector))
        .await?;
    let mut pods: Vec<Pod> = listed
        .items
        .into_iter()
        .filter(|p| selector.matches(p.labels()))
        .collect();
    pods.sort_by_key(|p| p.name_any());
    let sup_uid = sup.uid().unwrap_or_default();
    forget_gone_pods(&ctx, &sup_uid, &pods, now_ms);
    let selected = pods.len() as u32;
    if pods.is_empty() {
        let message = format!(
            "spec.selector ({selector}) matches no pod in namespace {ns}: nothing is supervised"
        );
        let status = status(
            &sup,
            now,
            0,
            0,
            0,
            ("False", "NoPodsSelected", message),
            None,
            None,
        );
        patch_status(&sups, &sup, status).await?;
        return Ok(Action::requeue(ctx.config.resync));
    }
    let Some(policy) = sup.spec.pod_restart_policy() else {
        let message = format!(
            "{selected} pods selected; no podRestart: only the webhook's staged instrumentation applies"
        );
        let status = status(
            &sup,
            now,
            selected,
            0,
            0,
            ("True", "Supervising", message),
            None,
            None,
        );
        patch_status(&sups, &sup, status).await?;
        return Ok(Action::requeue(ctx.config.resync));
    };

    let mut report = Report::default();
    let mut owners: BTreeMap<String, Option<Owner>> = BTreeMap::new();
    for pod in &pods {
        let uid = pod.uid().unwrap_or_default();
        let seen = {
            let mut st = ctx.state();
            let seen = st
                .seen
                .entry(sup_uid.clone())
                .or_default()
                .entry(uid.clone())
                .or_default();
            decide::observe(seen, pod, &policy, now_ms);
            seen.clone()
        };
        let restarted = seen_any_restart(pod);
        let owner_ref = decide::controller_owner(pod).cloned();
        let mut history = None;
        if let (Some(o), true) = (&owner_ref, restarted) {
            if !owners.contains_key(&o.uid) {
                let read = read_owner(&ctx.client, &ns, o).await?;
                owners.insert(o.uid.clone(), read);
            }
            match owners.get(&o.uid).and_then(|x| x.as_ref()) {
                // The owner is gone: its pods are being deleted with it.
                None => continue,
                Some(Owner {
                    history: Err(e), ..
                }) => {
                    let message = format!(
                        "the record of {} {} cannot be read ({e}): refusing to act on its pods until it is fixed or removed",
                        o.kind, o.name
                    );
                    publish(
                        &ctx,
                        &pod.object_ref(&()),
                        EventType::Warning,
                        "RecordUnreadable",
                        &message,
                    )
                    .await;
                    report.degraded.push(message);
                    continue;
                }
                Some(Owner { history: Ok(h), .. }) => history = Some(h.clone()),
            }
        }
        let decision = decide::decide(pod, &policy, &seen, history.as_ref(), now_ms);
        act(
            &ctx,
            &sup,
            pod,
            owner_ref.as_ref(),
            &mut owners,
            decision,
            &policy,
            now,
            &mut report,
        )
        .await?;
    }

    let histories: Vec<&History> = owners
        .values()
        .flatten()
        .filter_map(|o| o.history.as_ref().ok())
        .collect();
    let restarts = histories.iter().map(|h| h.pod_restarts()).sum();
    let gave_up: Vec<String> = owners
        .values()
        .flatten()
        .filter(|o| o.history.as_ref().is_ok_and(|h| h.gave_up.is_some()))
        .map(|o| {
            format!(
                "{} {}",
                o.object.types.as_ref().map_or("", |t| t.kind.as_str()),
                o.object.name_any()
            )
        })
        .collect();
    let ready = (
        "True",
        "Supervising",
        format!("{selected} pods selected; {restarts} whole-pod restarts recorded by their owners"),
    );
    let degraded = (!report.degraded.is_empty()).then(|| report.degraded.join("; "));
    let gave_up_msg = (!gave_up.is_empty()).then(|| {
        format!(
            "gave up on {} owner(s) after maxPodRestarts ({}): {}",
            gave_up.len(),
            policy.max_pod_restarts,
            gave_up.join(", ")
        )
    });
    let st = status(
        &sup,
        now,
        selected,
        restarts,
        gave_up.len() as u32,
        ready,
        degraded,
        gave_up_msg,
    );
    patch_status(&sups, &sup, st).await?;
    let next = report
        .retry
        .map_or(ctx.config.resync, |r| r.min(ctx.config.resync));
    Ok(Action::requeue(next))
}

/// On an API error: retry with kube-runtime's backoff, never exit.
pub fn error_policy(sup: Arc<Supervision>, err: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(supervision = %sup.name_any(), error = %err, "reconcile failed; retrying");
    let ns = sup.namespace().unwrap_or_default();
    ctx.metrics
        .reconcile_errors
        .get_or_create(&labels(&ns, &sup))
        .inc();
    Action::requeue(Duration::from_secs(10))
}

fn labels(ns: &str, sup: &Supervision) -> crate::metrics::Labels {
    vec![
        ("namespace".to_string(), ns.to_string()),
        ("supervision".to_string(), sup.name_any()),
    ]
}

fn seen_any_restart(pod: &Pod) -> bool {
    let s = pod.status.as_ref();
    let all = s
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .chain(
            s.and_then(|s| s.init_container_statuses.as_ref())
                .into_iter()
                .flatten(),
        );
    all.into_iter().any(|c| c.restart_count > 0)
}

/// Forgets what was seen of pods the Supervision no longer selects (deleted, relabelled).
/// Eviction retries long past are forgotten too (the pod is gone or evicted by then).
fn forget_gone_pods(ctx: &Context, sup_uid: &str, pods: &[Pod], now_ms: u64) {
    let live: std::collections::HashSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
    let mut st = ctx.state();
    let seen = st.seen.entry(sup_uid.to_string()).or_default();
    seen.retain(|uid, _| live.contains(uid));
    let hour = 3_600_000;
    st.evict_backoff.retain(|_, (at, _)| *at + hour > now_ms);
}

/// The owner's API (from its reference: group, version, kind; the plural as the built-in
/// controllers' kinds form it), the object, and its record. `None`: it no longer exists.
async fn read_owner(client: &Client, ns: &str, o: &OwnerReference) -> Result<Option<Owner>, Error> {
    let (group, version) = match o.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", o.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &o.kind);
    let plural = format!("{}s", o.kind.to_ascii_lowercase());
    let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let Some(object) = api.get_opt(&o.name).await? else {
        return Ok(None);
    };
    let history =
        History::from_annotations(object.metadata.annotations.as_ref()).map_err(|e| e.to_string());
    Ok(Some(Owner {
        api,
        object,
        history,
    }))
}

/// Writes the owner's record, conditional on the resourceVersion read (409 if it moved).
async fn write_history(owner: &mut Owner, history: History) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {
        "resourceVersion": owner.object.metadata.resource_version,
        "annotations": {HISTORY_ANNOTATION: history.to_annotation()},
    }});
    let name = owner.object.name_any();
    let updated = owner
        .api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    owner.object = updated;
    owner.history = Ok(history);
    Ok(())
}

fn mark(pod: &Pod, container: &str, restarts: u32, now: Timestamp) -> Mark {
    Mark {
        pod: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        container: container.to_string(),
        restarts,
        at: now.to_string(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn act(
    ctx: &Context,
    sup: &Supervision,
    pod: &Pod,
    owner_ref: Option<&OwnerReference>,
    owners: &mut BTreeMap<String, Option<Owner>>,
    decision: Decision,
    policy: &PodRestartPolicy,
    now: Timestamp,
    report: &mut Report,
) -> Result<(), Error> {
    let now_ms = now.as_millisecond().max(0) as u64;
    let within = format_duration(policy.within);
    let ns = pod.namespace().unwrap_or_default();
    let pod_ref = pod.object_ref(&());
    let sup_ref = sup.object_ref(&());
    let uid = pod.uid().unwrap_or_default();
    let label = labels(&ns, sup);
    match decision {
        Decision::Nothing | Decision::Terminating | Decision::GaveUpAlready => Ok(()),
        Decision::BarePod {
            container,
            restarts,
        } => {
            let first = {
                let mut st = ctx.state();
                let seen = st
                    .seen
                    .entry(sup.uid().unwrap_or_default())
                    .or_default()
                    .entry(uid)
                    .or_default();
                !std::mem::replace(&mut seen.reported_bare, true)
            };
            if first {
                let message = format!(
                    "Container {container} was restarted {restarts} times within {within}, but the pod has no controller to make it again: not evicted (podRestart needs a Deployment, ReplicaSet, StatefulSet, Job or DaemonSet)"
                );
                publish(
                    ctx,
                    &pod_ref,
                    EventType::Warning,
                    "PodRestartSkipped",
                    &message,
                )
                .await;
            }
            Ok(())
        }
        Decision::GiveUp {
            container,
            restarts,
        } => {
            let o = owner_ref.expect("decide gives up only on owned pods");
            let message = format!(
                "Container {container} was restarted {restarts} times within {within}, and the pods of {} {} have been restarted {} times already (maxPodRestarts): giving up",
                o.kind, o.name, policy.max_pod_restarts
            );
            if ctx.config.dry_run {
                tracing::info!(pod = %pod.name_any(), "dry run: {message}");
                return Ok(());
            }
            let Some(Some(owner)) = owners.get_mut(&o.uid) else {
                return Ok(());
            };
            let mut h = owner.history.clone().unwrap_or_default();
            h.gave_up = Some(mark(pod, &container, restarts, now));
            match write_history(owner, h).await {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    report.retry_in(Duration::from_secs(1));
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
            ctx.metrics.gave_up.get_or_create(&label).inc();
            publish(ctx, &pod_ref, EventType::Warning, "GaveUp", &message).await;
            publish(
                ctx,
                &sup_ref,
                EventType::Warning,
                "GaveUp",
                &format!("pod {}: {message}", pod.name_any()),
            )
            .await;
            Ok(())
        }
        Decision::Refresh {
            container,
            restarts,
            record,
            number,
        } => {
            let o = owner_ref.expect("decide refreshes only owned pods");
            let message = format!(
                "Container {container} was restarted {restarts} times within {within}: restarting the whole pod (pod restart {number} of {}): evicted so that {} {} makes it again with fresh emptyDir volumes and init containers",
                policy.max_pod_restarts, o.kind, o.name
            );
            if ctx.config.dry_run {
                tracing::info!(pod = %pod.name_any(), "dry run: {message}");
                publish(
                    ctx,
                    &pod_ref,
                    EventType::Normal,
                    "DryRun",
                    &format!("would evict: {message}"),
                )
                .await;
                return Ok(());
            }
            if let Some((at, _)) = ctx.state().evict_backoff.get(&uid) {
                if now_ms < *at {
                    report.retry_in(Duration::from_millis(at - now_ms));
                    return Ok(());
                }
            }
            if record {
                if let Err(wait) = ctx.state().limiter.check(&ns, &o.uid, now_ms) {
                    tracing::info!(pod = %pod.name_any(), ?wait, "whole-pod restart rate-limited");
                    ctx.metrics.rate_limited.get_or_create(&label).inc();
                    report.retry_in(wait);
                    return Ok(());
                }
                let Some(Some(owner)) = owners.get_mut(&o.uid) else {
                    return Ok(());
                };
                let mut h = owner.history.clone().unwrap_or_default();
                h.refreshes.push(mark(pod, &container, restarts, now));
                match write_history(owner, h).await {
                    // Counted once recorded: a conflict does not use up the owner's interval.
                    Ok(()) => ctx.state().limiter.record(&ns, &o.uid, now_ms),
                    Err(kube::Error::Api(s)) if s.is_conflict() => {
                        report.retry_in(Duration::from_secs(1));
                        return Ok(());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            match pods.evict(&pod.name_any(), &EvictParams::default()).await {
                Ok(_) => {
                    ctx.state().evict_backoff.remove(&uid);
                    ctx.metrics.pod_restarts.get_or_create(&label).inc();
                    publish(ctx, &pod_ref, EventType::Warning, "PodRestarting", &message).await;
                    publish(
                        ctx,
                        &sup_ref,
                        EventType::Normal,
                        "PodRestarting",
                        &format!("pod {}: {message}", pod.name_any()),
                    )
                    .await;
                    Ok(())
                }
                // Deleted meanwhile: the refresh happened another way; the record stands.
                Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
                // 429: a PodDisruptionBudget (or the API's own rate limit) refuses for now.
                Err(kube::Error::Api(s)) if s.code == 429 || s.is_conflict() => {
                    let delay = {
                        let mut st = ctx.state();
                        let entry = st
                            .evict_backoff
                            .entry(uid)
                            .or_insert((0, EVICT_RETRY_FIRST));
                        let delay = entry.1;
                        *entry = (
                            now_ms + delay.as_millis() as u64,
                            (delay * 2).min(EVICT_RETRY_MAX),
                        );
                        delay
                    };
                    let text = format!(
                        "Eviction of pod {} refused ({} {}): {}; retrying in {}",
                        pod.name_any(),
                        s.code,
                        s.reason,
                        s.message,
                        format_duration(delay)
                    );
                    ctx.metrics.evictions_refused.get_or_create(&label).inc();
                    publish(ctx, &pod_ref, EventType::Warning, "EvictionRefused", &text).await;
                    report.degraded.push(text);
                    report.retry_in(delay);
                    Ok(())
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// Publishes an event; a failure to publish is logged, never fatal (events are best effort, as
/// the kubelet's are).
async fn publish(
    ctx: &Context,
    regarding: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(note, 1024)),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, regarding).await {
        tracing::warn!(reason, error = %e, "could not publish an event");
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[allow(clippy::too_many_arguments)]
fn status(
    sup: &Supervision,
    now: Timestamp,
    selected: u32,
    pod_restarts: u32,
    gave_up: u32,
    ready: (&str, &str, String),
    degraded: Option<String>,
    gave_up_msg: Option<String>,
) -> SupervisionStatus {
    let old = sup
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let gen = sup.metadata.generation;
    let cond = |type_: &str, status: &str, reason: &str, message: String| {
        // lastTransitionTime moves only when the status does (metav1.Condition's rule).
        let since = old
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or(Time(now), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: gen,
            last_transition_time: since,
        }
    };
    let (rs, rr, rm) = ready;
    let conditions = vec![
        cond("Ready", rs, rr, rm),
        match degraded {
            Some(m) => cond("Degraded", "True", "ActionsFailing", m),
            None => cond("Degraded", "False", "AsExpected", String::new()),
        },
        match gave_up_msg {
            Some(m) => cond("GaveUp", "True", "MaxPodRestarts", m),
            None => cond("GaveUp", "False", "WithinLimits", String::new()),
        },
    ];
    SupervisionStatus {
        observed_generation: gen,
        conditions,
        selected_pods: selected,
        pod_restarts,
        gave_up,
    }
}

async fn patch_status(
    api: &Api<Supervision>,
    sup: &Supervision,
    status: SupervisionStatus,
) -> Result<(), Error> {
    if sup.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let patch = json!({"status": status});
    match api
        .patch_status(
            &sup.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Deleted while being reconciled: nothing left to report on.
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}
