//! Carries one pod's decision out: the owner's record first, then the eviction, events and
//! metrics; refusals become backoff and the Degraded condition, never errors.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, EvictParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use podvisor_core::duration::format_duration;
use podvisor_core::escalation::PodRestartPolicy;

use super::owner::{update_history, OwnerRead};
use super::report::publish;
use super::{labels, Context, Error, Report};
use crate::crd::Supervision;
use crate::decide::{Decision, Mark};

/// Eviction retries: 5 s doubling to 5 min (a PodDisruptionBudget frees up as pods become
/// ready, which takes seconds to minutes).
const EVICT_RETRY_FIRST: Duration = Duration::from_secs(5);
const EVICT_RETRY_MAX: Duration = Duration::from_secs(300);

fn mark(pod: &Pod, container: &str, restarts: u32, now: Timestamp) -> Mark {
    Mark {
        pod: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        container: container.to_string(),
        restarts,
        at: now.to_string(),
    }
}

/// A write of an owner's record that lost a race (409) is tried again this soon.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// The event on the pod, and the same on the Supervision naming the pod.
async fn publish_both(
    ctx: &Context,
    pod: &Pod,
    sup: &Supervision,
    (on_pod, on_sup): (EventType, EventType),
    reason: &str,
    message: &str,
) {
    publish(ctx, &pod.object_ref(&()), on_pod, reason, message).await;
    let about = format!("pod {}: {message}", pod.name_any());
    publish(ctx, &sup.object_ref(&()), on_sup, reason, &about).await;
}

/// Whether the pod's one "cannot be refreshed" event is still to be sent (and marks it sent).
pub(crate) fn first_report(ctx: &Context, sup: &Supervision, pod_uid: &str) -> bool {
    let mut st = ctx.state();
    let seen = st
        .seen
        .entry(sup.uid().unwrap_or_default())
        .or_default()
        .entry(pod_uid.to_string())
        .or_default();
    !std::mem::replace(&mut seen.reported_skip, true)
}

/// A `PodRestartSkipped` event on the pod, once per pod: the rule fired but nothing is done.
pub(crate) async fn report_skip(ctx: &Context, sup: &Supervision, pod: &Pod, message: &str) {
    if first_report(ctx, sup, &pod.uid().unwrap_or_default()) {
        let at = pod.object_ref(&());
        publish(ctx, &at, EventType::Warning, "PodRestartSkipped", message).await;
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn act(
    ctx: &Context,
    sup: &Supervision,
    pod: &Pod,
    owner_ref: Option<&OwnerReference>,
    owners: &mut BTreeMap<String, OwnerRead>,
    decision: Decision,
    policy: &PodRestartPolicy,
    now: Timestamp,
    report: &mut Report,
) -> Result<(), Error> {
    let mut acting = Acting {
        ctx,
        sup,
        pod,
        owners,
        policy,
        now,
        report,
        within: format_duration(policy.within),
        ns: pod.namespace().unwrap_or_default(),
        uid: pod.uid().unwrap_or_default(),
    };
    match decision {
        Decision::Nothing | Decision::Terminating | Decision::GaveUpAlready => Ok(()),
        Decision::BarePod {
            container,
            restarts,
        } => {
            acting.bare_pod(&container, restarts).await;
            Ok(())
        }
        Decision::GiveUp {
            container,
            restarts,
        } => {
            let o = owner_ref.expect("decide gives up only on owned pods");
            acting.give_up(o, &container, restarts).await
        }
        Decision::Refresh {
            container,
            restarts,
            record,
            number,
        } => {
            let o = owner_ref.expect("decide refreshes only owned pods");
            acting
                .refresh(o, &container, restarts, record, number)
                .await
        }
    }
}

/// One decision about one pod being carried out.
struct Acting<'a> {
    ctx: &'a Context,
    sup: &'a Supervision,
    pod: &'a Pod,
    owners: &'a mut BTreeMap<String, OwnerRead>,
    policy: &'a PodRestartPolicy,
    now: Timestamp,
    report: &'a mut Report,
    /// The policy's window, as messages write it.
    within: String,
    ns: String,
    uid: String,
}

impl Acting<'_> {
    fn now_ms(&self) -> u64 {
        self.now.as_millisecond().max(0) as u64
    }

    /// The rule fired on a pod nothing would make again: reported once, left alone.
    async fn bare_pod(&mut self, container: &str, restarts: u32) {
        let message = format!(
            "Container {container} was restarted {restarts} times within {}, but the pod has no controller to make it again: not evicted (podRestart needs a Deployment, ReplicaSet, StatefulSet, Job or DaemonSet)",
            self.within
        );
        report_skip(self.ctx, self.sup, self.pod, &message).await;
    }

    /// Past `maxPodRestarts`: recorded on the owner, then said on the pod and the Supervision.
    async fn give_up(
        &mut self,
        o: &OwnerReference,
        container: &str,
        restarts: u32,
    ) -> Result<(), Error> {
        let message = format!(
            "Container {container} was restarted {restarts} times within {}, and the pods of {} {} have been restarted {} times already (maxPodRestarts): giving up",
            self.within, o.kind, o.name, self.policy.max_pod_restarts
        );
        if self.ctx.config.dry_run {
            tracing::info!(pod = %self.pod.name_any(), "dry run: {message}");
            return Ok(());
        }
        let Some(OwnerRead::Found(owner)) = self.owners.get_mut(&o.uid) else {
            return Ok(());
        };
        let gave_up = mark(self.pod, container, restarts, self.now);
        if !update_history(owner, |h| h.gave_up = Some(gave_up)).await? {
            self.report.retry_in(CONFLICT_RETRY);
            return Ok(());
        }
        let label = labels(&self.ns, self.sup);
        self.ctx.metrics.gave_up.get_or_create(&label).inc();
        let types = (EventType::Warning, EventType::Warning);
        publish_both(self.ctx, self.pod, self.sup, types, "GaveUp", &message).await;
        Ok(())
    }

    /// A whole-pod restart: recorded on the owner (unless already), within the rate limits,
    /// then the eviction.
    async fn refresh(
        &mut self,
        o: &OwnerReference,
        container: &str,
        restarts: u32,
        record: bool,
        number: u32,
    ) -> Result<(), Error> {
        let now_ms = self.now_ms();
        let message = format!(
            "Container {container} was restarted {restarts} times within {}: restarting the whole pod (pod restart {number} of {}): evicted so that {} {} makes it again with fresh emptyDir volumes and init containers",
            self.within, self.policy.max_pod_restarts, o.kind, o.name
        );
        if self.ctx.config.dry_run {
            tracing::info!(pod = %self.pod.name_any(), "dry run: {message}");
            let at = self.pod.object_ref(&());
            let text = format!("would evict: {message}");
            publish(self.ctx, &at, EventType::Normal, "DryRun", &text).await;
            return Ok(());
        }
        if let Some((at, _)) = self.ctx.state().evict_backoff.get(&self.uid) {
            if now_ms < *at {
                self.report.retry_in(Duration::from_millis(at - now_ms));
                return Ok(());
            }
        }
        if record {
            let label = labels(&self.ns, self.sup);
            if let Err(wait) = self.ctx.state().limiter.check(&self.ns, &o.uid, now_ms) {
                tracing::info!(pod = %self.pod.name_any(), ?wait, "whole-pod restart rate-limited");
                self.ctx.metrics.rate_limited.get_or_create(&label).inc();
                self.report.retry_in(wait);
                return Ok(());
            }
            let Some(OwnerRead::Found(owner)) = self.owners.get_mut(&o.uid) else {
                return Ok(());
            };
            let refresh = mark(self.pod, container, restarts, self.now);
            if !update_history(owner, |h| h.refreshes.push(refresh)).await? {
                self.report.retry_in(CONFLICT_RETRY);
                return Ok(());
            }
            // Counted once recorded: a conflict does not use up the owner's interval.
            self.ctx.state().limiter.record(&self.ns, &o.uid, now_ms);
        }
        self.evict(&message).await
    }

    /// The Eviction API call, and what a refusal (a PodDisruptionBudget's 429) leads to.
    async fn evict(&mut self, message: &str) -> Result<(), Error> {
        let (ctx, pod) = (self.ctx, self.pod);
        let label = labels(&self.ns, self.sup);
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.ns);
        match pods.evict(&pod.name_any(), &EvictParams::default()).await {
            Ok(_) => {
                ctx.state().evict_backoff.remove(&self.uid);
                ctx.metrics.pod_restarts.get_or_create(&label).inc();
                let types = (EventType::Warning, EventType::Normal);
                publish_both(ctx, pod, self.sup, types, "PodRestarting", message).await;
                Ok(())
            }
            // Deleted meanwhile: the refresh happened another way; the record stands.
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            // 429: a PodDisruptionBudget (or the API's own rate limit) refuses for now.
            Err(kube::Error::Api(s)) if s.code == 429 || s.is_conflict() => {
                let now_ms = self.now_ms();
                let delay = {
                    let mut st = ctx.state();
                    let entry = st
                        .evict_backoff
                        .entry(self.uid.clone())
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
                let at = pod.object_ref(&());
                publish(ctx, &at, EventType::Warning, "EvictionRefused", &text).await;
                self.report.degraded.push(text);
                self.report.retry_in(delay);
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
