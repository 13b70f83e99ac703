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
    let now_ms = now.as_millisecond().max(0) as u64;
    let within = format_duration(policy.within);
    let ns = pod.namespace().unwrap_or_default();
    let pod_ref = pod.object_ref(&());
    let uid = pod.uid().unwrap_or_default();
    let label = labels(&ns, sup);
    match decision {
        Decision::Nothing | Decision::Terminating | Decision::GaveUpAlready => Ok(()),
        Decision::BarePod {
            container,
            restarts,
        } => {
            if first_report(ctx, sup, &uid) {
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
            let Some(OwnerRead::Found(owner)) = owners.get_mut(&o.uid) else {
                return Ok(());
            };
            let gave_up = mark(pod, &container, restarts, now);
            if !update_history(owner, |h| h.gave_up = Some(gave_up)).await? {
                report.retry_in(CONFLICT_RETRY);
                return Ok(());
            }
            ctx.metrics.gave_up.get_or_create(&label).inc();
            let types = (EventType::Warning, EventType::Warning);
            publish_both(ctx, pod, sup, types, "GaveUp", &message).await;
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
                let Some(OwnerRead::Found(owner)) = owners.get_mut(&o.uid) else {
                    return Ok(());
                };
                let refresh = mark(pod, &container, restarts, now);
                if !update_history(owner, |h| h.refreshes.push(refresh)).await? {
                    report.retry_in(CONFLICT_RETRY);
                    return Ok(());
                }
                // Counted once recorded: a conflict does not use up the owner's interval.
                ctx.state().limiter.record(&ns, &o.uid, now_ms);
            }
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            match pods.evict(&pod.name_any(), &EvictParams::default()).await {
                Ok(_) => {
                    ctx.state().evict_backoff.remove(&uid);
                    ctx.metrics.pod_restarts.get_or_create(&label).inc();
                    let types = (EventType::Warning, EventType::Normal);
                    publish_both(ctx, pod, sup, types, "PodRestarting", &message).await;
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
