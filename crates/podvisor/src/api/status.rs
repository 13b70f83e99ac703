//! The pod as `kubectl get pod -o json` shows it: a v1 Pod whose `.status` is a PodStatus built
//! from the lifecycle core's view (phase, conditions, container states, lastState, ready,
//! started, restartCount), with wall-clock timestamps.

use std::collections::BTreeMap;
use std::time::SystemTime;

use podvisor_core::clock::Instant;
use podvisor_core::lifecycle::{ContainerState, Kind, Pod};
use serde_json::{json, Map, Value};

use crate::rfc3339::rfc3339_millis;

/// What the status needs beyond the core: the manifest's metadata and spec, and times.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The pod spec as the manifest gave it.
    pub spec: Value,
    /// Each container's image, in the core's container order.
    pub images: Vec<String>,
    pub created: SystemTime,
}

/// Maps the core's clock to wall-clock time.
pub type WallClock<'a> = &'a dyn Fn(Instant) -> SystemTime;

/// An API timestamp: RFC 3339 in whole seconds, UTC.
pub fn timestamp(at: SystemTime) -> String {
    let mut s = rfc3339_millis(at);
    // "2026-11-23T05:39:22.123Z" → "2026-11-23T05:39:22Z"
    s.replace_range(19..23, "");
    s
}

/// The v1 Pod. `condition_times`: when each condition last changed status; `container_id`:
/// the ID of a container's instance, if it ran.
pub fn pod_json(
    pod: &Pod,
    info: &PodInfo,
    wall: WallClock<'_>,
    condition_times: &BTreeMap<&'static str, SystemTime>,
    container_id: &dyn Fn(usize, u32) -> Option<String>,
) -> Value {
    let mut metadata = json!({
        "name": info.name,
        "namespace": info.namespace,
        "uid": info.uid,
        "creationTimestamp": timestamp(info.created),
    });
    if !info.labels.is_empty() {
        metadata["labels"] = json!(info.labels);
    }
    // podvisor's own annotations: each staged container's stage and verdict, and the
    // whole-pod restarts (docs/state.md).
    let mut annotations = info.annotations.clone();
    for c in pod.containers() {
        if let Some(stage) = c.stage {
            annotations.insert(format!("podvisor.io/stage.{}", c.name), stage.to_string());
        }
        if let Some(v) = c.judgement.verdict {
            annotations.insert(format!("podvisor.io/verdict.{}", c.name), v.as_str().into());
        }
    }
    annotations.insert(
        "podvisor.io/pod-restarts".into(),
        pod.pod_restarts().to_string(),
    );
    let may_restart_all = pod
        .plan()
        .containers
        .iter()
        .any(|c| c.restart.restarts_all());
    if may_restart_all || pod.restarts_all() > 0 {
        annotations.insert(
            "podvisor.io/all-containers-restarts".into(),
            pod.restarts_all().to_string(),
        );
    }
    metadata["annotations"] = json!(annotations);
    let conditions: Vec<Value> = pod
        .conditions()
        .into_iter()
        .map(|c| {
            let mut v = json!({
                "type": c.kind,
                "status": if c.status { "True" } else { "False" },
                "lastProbeTime": null,
                "lastTransitionTime": condition_times.get(c.kind).map(|t| timestamp(*t)),
            });
            if let Some(r) = c.reason {
                v["reason"] = r.into();
            }
            if let Some(m) = c.message {
                v["message"] = m.into();
            }
            v
        })
        .collect();
    let mut init = Vec::new();
    let mut main = Vec::new();
    for (i, (c, p)) in pod
        .containers()
        .iter()
        .zip(&pod.plan().containers)
        .enumerate()
    {
        let waiting = matches!(c.state, ContainerState::Waiting { .. });
        let state_id = (!waiting && c.instance > 0)
            .then(|| container_id(i, c.instance))
            .flatten();
        let last_instance = if waiting {
            c.instance
        } else {
            c.instance.saturating_sub(1)
        };
        let last_id = container_id(i, last_instance);
        let mut v = json!({
            "name": c.name,
            "state": state_json(&c.state, state_id.as_deref(), wall),
            "lastState": c.last_state.as_ref().map_or(json!({}), |s| state_json(s, last_id.as_deref(), wall)),
            "ready": pod.is_ready(i),
            "restartCount": c.restart_count,
            "image": info.images.get(i).cloned().unwrap_or_default(),
            "imageID": "",
            "started": c.started,
        });
        if let Some(id) = &state_id {
            v["containerID"] = id.clone().into();
        }
        match p.kind {
            Kind::Main => main.push(v),
            Kind::Init | Kind::Sidecar => init.push(v),
        }
    }
    let mut status = Map::new();
    status.insert("phase".into(), pod.phase().as_str().into());
    if let Some((reason, message)) = pod.failure() {
        status.insert("reason".into(), reason.into());
        status.insert("message".into(), message.into());
    }
    status.insert("conditions".into(), conditions.into());
    status.insert("hostIP".into(), "127.0.0.1".into());
    status.insert("hostIPs".into(), json!([{"ip": "127.0.0.1"}]));
    status.insert("podIP".into(), "127.0.0.1".into());
    status.insert("podIPs".into(), json!([{"ip": "127.0.0.1"}]));
    status.insert("startTime".into(), timestamp(info.created).into());
    if !init.is_empty() {
        status.insert("initContainerStatuses".into(), init.into());
    }
    status.insert("containerStatuses".into(), main.into());
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": info.spec,
        "status": status,
    })
}

fn state_json(state: &ContainerState, id: Option<&str>, wall: WallClock<'_>) -> Value {
    match state {
        ContainerState::Waiting { reason, message } => {
            let mut w = json!({"reason": reason.as_str()});
            if let Some(m) = message {
                w["message"] = m.clone().into();
            }
            json!({"waiting": w})
        }
        ContainerState::Running { started_at } => {
            json!({"running": {"startedAt": timestamp(wall(*started_at))}})
        }
        ContainerState::Terminated {
            exit_code,
            signal,
            reason,
            message,
            started_at,
            finished_at,
        } => {
            let mut t = json!({
                "exitCode": exit_code,
                "reason": reason.as_str(),
                "startedAt": started_at.map(|s| timestamp(wall(s))),
                "finishedAt": timestamp(wall(*finished_at)),
            });
            if let Some(s) = signal {
                t["signal"] = (*s).into();
            }
            if let Some(m) = message {
                t["message"] = m.clone().into();
            }
            if let Some(id) = id {
                t["containerID"] = id.into();
            }
            json!({"terminated": t})
        }
    }
}
