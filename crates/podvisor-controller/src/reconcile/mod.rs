//! `reconcile(Supervision, ctx) -> Action`, as the kube-rs examples write controllers: list the
//! selected pods (the selector goes to the API server), let `decide` judge each, then act through the API
//! (owner annotation, Eviction API, Events, the Supervision's status) and say when to look
//! again. Nothing here decides: every rule is in `decide.rs`, `ratelimit.rs` and the core.
//!
//! A reconcile never fails for what a user wrote: a spec that cannot be used, a selector that
//! matches nothing, a refused eviction or an unreadable record become conditions and events.
//! Only the API failing (5xx, timeouts) returns an error, which `error_policy` retries with
//! backoff (kube-runtime's scheduler), so the controller never crash-loops.
//!
//! `act.rs` carries a decision out, `owner.rs` reads and writes the owners' records,
//! `report.rs` makes the events and the status.

mod act;
mod owner;
mod report;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::core::SelectorExt;
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::{Client, Resource, ResourceExt};

use crate::crd::Supervision;
use crate::decide::{self, Decision, History, PodSeen};
use crate::metrics::Metrics;
use crate::ratelimit::{Limits, RateLimiter};
use owner::OwnerRead;
use podvisor_core::escalation::PodRestartPolicy;
use report::{patch_status, publish, status};

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
pub(crate) struct State {
    /// Per Supervision uid, per pod uid.
    pub(crate) seen: HashMap<String, HashMap<String, PodSeen>>,
    pub(crate) limiter: RateLimiter,
    /// Per pod uid: when an eviction may be retried, and the delay after the next refusal.
    pub(crate) evict_backoff: HashMap<String, (u64, Duration)>,
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

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Only the API failing is an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

/// What one reconcile found, for the status.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) degraded: Vec<String>,
    pub(crate) retry: Option<Duration>,
}

impl Report {
    pub(crate) fn retry_in(&mut self, d: Duration) {
        self.retry = Some(self.retry.map_or(d, |r| r.min(d)));
    }
}

pub async fn reconcile(sup: Arc<Supervision>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = reconcile_once(sup.clone(), ctx.clone()).await;
    if let Err(e) = &result {
        // Say so on the Supervision if the API takes that write; the error is retried anyway.
        let now = (ctx.clock)();
        let ns = sup.namespace().unwrap_or_default();
        let sups: Api<Supervision> = Api::namespaced(ctx.client.clone(), &ns);
        let status = report::api_failed_status(
            &sup,
            now,
            format!("the last reconcile failed: {e}; retrying"),
        );
        let _ = patch_status(&sups, &sup, status).await;
    }
    result
}

async fn reconcile_once(sup: Arc<Supervision>, ctx: Arc<Context>) -> Result<Action, Error> {
    let now = (ctx.clock)();
    let ns = sup.namespace().unwrap_or_default();
    let sups: Api<Supervision> = Api::namespaced(ctx.client.clone(), &ns);
    ctx.metrics
        .reconciles
        .get_or_create(&labels(&ns, &sup))
        .inc();

    let problems = sup.spec.problems();
    let selector = sup.spec.label_selector();
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
    let pods = selected_pods(&ctx, &ns, &selector).await?;
    let sup_uid = sup.uid().unwrap_or_default();
    forget_gone_pods(&ctx, &sup_uid, &pods, now.as_millisecond().max(0) as u64);
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
        let ready = ("True", "Supervising", message);
        let status = status(&sup, now, selected, 0, 0, ready, None, None);
        patch_status(&sups, &sup, status).await?;
        return Ok(Action::requeue(ctx.config.resync));
    };

    let mut report = Report::default();
    let mut owners: BTreeMap<String, OwnerRead> = BTreeMap::new();
    for pod in &pods {
        let mut one = OnePod {
            ctx: &ctx,
            sup: &sup,
            policy: &policy,
            now,
            owners: &mut owners,
            report: &mut report,
        };
        one.supervise(pod).await?;
    }
    let st = summary(&sup, now, selected, &owners, &policy, &report);
    patch_status(&sups, &sup, st).await?;
    let next = report
        .retry
        .map_or(ctx.config.resync, |r| r.min(ctx.config.resync));
    Ok(Action::requeue(next))
}

/// The pods the selector matches, by name.
async fn selected_pods(
    ctx: &Context,
    ns: &str,
    selector: &kube::core::Selector,
) -> Result<Vec<Pod>, Error> {
    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let listed = pod_api
        .list(&ListParams::default().labels_from(selector))
        .await?;
    let mut pods: Vec<Pod> = listed
        .items
        .into_iter()
        .filter(|p| selector.matches(p.labels()))
        .collect();
    pods.sort_by_key(|p| p.name_any());
    Ok(pods)
}

/// One pass over one selected pod: what is seen of it, its owner's record, the decision and
/// what is done about it.
struct OnePod<'a> {
    ctx: &'a Arc<Context>,
    sup: &'a Supervision,
    policy: &'a PodRestartPolicy,
    now: Timestamp,
    /// Owners read in this pass, by uid: each once.
    owners: &'a mut BTreeMap<String, OwnerRead>,
    report: &'a mut Report,
}

impl OnePod<'_> {
    async fn supervise(&mut self, pod: &Pod) -> Result<(), Error> {
        let (ctx, sup, policy) = (self.ctx, self.sup, self.policy);
        let now_ms = self.now.as_millisecond().max(0) as u64;
        let uid = pod.uid().unwrap_or_default();
        let seen = {
            let mut st = ctx.state();
            let seen = st
                .seen
                .entry(sup.uid().unwrap_or_default())
                .or_default()
                .entry(uid.clone())
                .or_default();
            decide::observe(seen, pod, policy, now_ms);
            seen.clone()
        };
        let owner_ref = decide::controller_owner(pod).cloned();
        let mut history = None;
        let mut refused = None;
        if let (Some(o), true) = (&owner_ref, seen_any_restart(pod)) {
            if !self.owners.contains_key(&o.uid) {
                let ns = sup.namespace().unwrap_or_default();
                let read = owner::read_owner(&ctx.client, &ns, o).await?;
                self.owners.insert(o.uid.clone(), read);
            }
            match &self.owners[&o.uid] {
                OwnerRead::Gone => return Ok(()),
                OwnerRead::Refused(why) => refused = Some(why.clone()),
                OwnerRead::Found(owner) => match &owner.history {
                    Ok(h) => history = Some(h.clone()),
                    Err(e) => {
                        let message = format!(
                            "the record of {} {} cannot be read ({e}): refusing to act on its pods until it is fixed or removed",
                            o.kind, o.name
                        );
                        let at = pod.object_ref(&());
                        publish(ctx, &at, EventType::Warning, "RecordUnreadable", &message).await;
                        self.report.degraded.push(message);
                        return Ok(());
                    }
                },
            }
        }
        let decision = decide::decide(pod, policy, &seen, history.as_ref(), now_ms);
        if let Some(why) = refused {
            self.refused(pod, &decision, &why).await;
            return Ok(());
        }
        act::act(
            ctx,
            sup,
            pod,
            owner_ref.as_ref(),
            self.owners,
            decision,
            policy,
            self.now,
            self.report,
        )
        .await
    }

    /// The rule fired, but the owner cannot be used: reported once per pod.
    async fn refused(&mut self, pod: &Pod, decision: &Decision, why: &str) {
        let (Decision::Refresh {
            container,
            restarts,
            ..
        }
        | Decision::GiveUp {
            container,
            restarts,
        }) = decision
        else {
            return;
        };
        let message = format!(
            "Container {container} was restarted {restarts} times within {}, but {why}: not evicted",
            podvisor_core::duration::format_duration(self.policy.within)
        );
        act::report_skip(self.ctx, self.sup, pod, &message).await;
        self.report.degraded.push(message);
    }
}

/// The status after a pass: pods selected, the whole-pod restarts and give-ups their owners
/// recorded, and what could not be done.
fn summary(
    sup: &Supervision,
    now: Timestamp,
    selected: u32,
    owners: &BTreeMap<String, OwnerRead>,
    policy: &PodRestartPolicy,
    report: &Report,
) -> crate::crd::SupervisionStatus {
    let histories: Vec<&History> = owners
        .values()
        .filter_map(OwnerRead::found)
        .filter_map(|o| o.history.as_ref().ok())
        .collect();
    let restarts = histories.iter().map(|h| h.pod_restarts()).sum();
    let gave_up: Vec<String> = owners
        .values()
        .filter_map(OwnerRead::found)
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
    status(
        sup,
        now,
        selected,
        restarts,
        gave_up.len() as u32,
        ready,
        degraded,
        gave_up_msg,
    )
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

pub(crate) fn labels(ns: &str, sup: &Supervision) -> crate::metrics::Labels {
    vec![
        ("namespace".to_string(), ns.to_string()),
        ("supervision".to_string(), sup.name_any()),
    ]
}

fn seen_any_restart(pod: &Pod) -> bool {
    decide::statuses(pod).any(|c| c.restart_count > 0)
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
