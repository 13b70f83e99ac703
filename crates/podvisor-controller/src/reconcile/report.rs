//! What a reconcile tells: Events (best effort) and the Supervision's status, whose
//! conditions move their `lastTransitionTime` only when they change.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::ResourceExt;
use serde_json::json;

use super::{Context, Error};
use crate::crd::{Supervision, SupervisionStatus};

/// Publishes an event; a failure to publish is logged, never fatal (events are best effort, as
/// the kubelet's are).
pub(crate) async fn publish(
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
pub(crate) fn status(
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

pub(crate) async fn patch_status(
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

/// The status as it was, with `Degraded` saying that the API failed: what `reconcile` reports,
/// best effort, before its error goes to `error_policy`.
pub(crate) fn api_failed_status(
    sup: &Supervision,
    now: Timestamp,
    message: String,
) -> SupervisionStatus {
    let mut st = sup.status.clone().unwrap_or_default();
    let since = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map_or(Time(now), |c| c.last_transition_time.clone());
    st.conditions.retain(|c| c.type_ != "Degraded");
    st.conditions.push(Condition {
        type_: "Degraded".into(),
        status: "True".into(),
        reason: "APIError".into(),
        message,
        observed_generation: sup.metadata.generation,
        last_transition_time: since,
    });
    st
}
