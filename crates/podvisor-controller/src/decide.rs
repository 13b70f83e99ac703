//! The controller's decision for one pod: a pure function of the pod (its status as the API
//! server reports it), what the controller has seen of its restarts, the owner's record of
//! whole-pod restarts, and `now`. No API calls, no clock reads: `reconcile.rs` acts on it.
//!
//! The rule is the core's own (`escalation::PodRestartPolicy::on_exit` over a
//! `RestartWindow`), the same code `podvisor run` uses: a container restarted
//! `afterContainerRestarts` times within `within` refreshes the pod (here: an eviction, so that
//! its controller makes a new one with fresh emptyDirs and init containers), and once the
//! owner's pods have been refreshed `maxPodRestarts` times the controller gives up.
//!
//! A pod status holds a restart *count*, not the times, so the window is fed from what the
//! controller observes: each newly counted restart at its container's last exit
//! (`lastState.terminated.finishedAt`), or, when several were counted at once, the others at
//! the earliest time they can have happened (the previous observation; the pod's start for a
//! pod seen for the first time). Early times only make the count within `within` smaller, so a
//! controller restart can delay a refresh, never cause one that the rule would not.
//!
//! Restarts the kubelet makes itself with a `RestartAllContainers` rule (KEP-5532) are its
//! own, not a crash loop to escalate: while the pod's condition `AllContainersRestarting` is
//! True the pod is left alone, and the restarts counted in an observation during which that
//! condition changed (its `lastTransitionTime` is not before the previous look) are not fed to
//! the window: one restart-all raises every container's count at once. This errs the same way:
//! it can delay a refresh, never cause one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use podvisor_core::clock::Instant;
use podvisor_core::escalation::{Escalate, PodRestartPolicy, RestartWindow};
use serde::{Deserialize, Serialize};

/// The owner annotation holding its [`History`].
pub const HISTORY_ANNOTATION: &str = "podvisor.io/pod-restart-history";

/// What the controller has seen of one pod's containers (kept in memory, per pod uid).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSeen {
    containers: BTreeMap<String, ContainerSeen>,
    /// That the pod cannot be refreshed (no controller owner, or one that cannot be used) was
    /// reported already: its event is sent once.
    pub reported_skip: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct ContainerSeen {
    restarts: u32,
    at_ms: u64,
    window: RestartWindow,
}

/// The whole-pod restarts of one owner (a ReplicaSet, StatefulSet, …), kept as JSON in the
/// owner's `podvisor.io/pod-restart-history` annotation so that a controller restart forgets nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct History {
    #[serde(default)]
    pub refreshes: Vec<Mark>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gave_up: Option<Mark>,
}

/// One whole-pod restart (or the give-up): which pod, for which container, when (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mark {
    pub pod: String,
    pub uid: String,
    pub container: String,
    pub restarts: u32,
    pub at: String,
}

/// The annotation cannot be read: the record is refused, never reset.
#[derive(Debug, thiserror::Error)]
#[error("annotation {HISTORY_ANNOTATION}: {0}")]
pub struct HistoryError(#[from] serde_json::Error);

impl History {
    /// The record in an owner's annotations (none yet: empty).
    pub fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<History, HistoryError> {
        match annotations.and_then(|a| a.get(HISTORY_ANNOTATION)) {
            None => Ok(History::default()),
            Some(text) => Ok(serde_json::from_str(text)?),
        }
    }

    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a History serializes")
    }

    /// Whole-pod restarts made for this owner.
    pub fn pod_restarts(&self) -> u32 {
        self.refreshes.len() as u32
    }

    fn has_refreshed(&self, uid: &str) -> bool {
        self.refreshes.iter().any(|m| m.uid == uid)
    }
}

/// What to do about one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do.
    Nothing,
    /// The pod is already being deleted (an eviction went through).
    Terminating,
    /// Refresh the pod through the Eviction API. `record`: add it to the owner's history first
    /// (false when the history already holds this pod: an earlier eviction was refused or
    /// interrupted, and is retried without counting twice).
    Refresh {
        container: String,
        restarts: u32,
        record: bool,
        /// This refresh's number for the owner (1-based).
        number: u32,
    },
    /// The rule fired for a pod without a controller owner: an eviction would delete it for
    /// good, so the controller only reports.
    BarePod { container: String, restarts: u32 },
    /// The owner's pods have been refreshed `maxPodRestarts` times: give up (record it once).
    GiveUp { container: String, restarts: u32 },
    /// Given up on this owner earlier.
    GaveUpAlready,
}

/// The pod's controller owner, if any (`ownerReferences[].controller: true`).
pub fn controller_owner(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// The statuses of the pod's init containers (sidecars restart too), then its containers.
pub fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let status = pod.status.as_ref();
    let init = status.and_then(|s| s.init_container_statuses.as_ref());
    let main = status.and_then(|s| s.container_statuses.as_ref());
    init.into_iter().flatten().chain(main.into_iter().flatten())
}

fn millis(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> u64 {
    t.0.as_millisecond().max(0) as u64
}

/// The pod's `AllContainersRestarting` condition (KEP-5532): whether the kubelet is restarting
/// every container now, and when the condition last changed.
pub fn all_containers_restarting(pod: &Pod) -> (bool, Option<u64>) {
    let condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "AllContainersRestarting"));
    match condition {
        None => (false, None),
        Some(c) => (
            c.status == "True",
            c.last_transition_time.as_ref().map(millis),
        ),
    }
}

/// Feeds what the pod's status shows now into what has been seen of it.
pub fn observe(seen: &mut PodSeen, pod: &Pod, policy: &PodRestartPolicy, now_ms: u64) {
    let pod_start = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(now_ms, millis);
    let (restarting_all, changed_at) = all_containers_restarting(pod);
    for cs in statuses(pod) {
        let count = cs.restart_count.max(0) as u32;
        let last_exit = cs
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.finished_at.as_ref().map_or(now_ms, millis));
        let entry = seen
            .containers
            .entry(cs.name.clone())
            .or_insert_with(|| ContainerSeen {
                restarts: 0,
                at_ms: pod_start,
                window: RestartWindow::default(),
            });
        // Restarts of every container by the kubelet since the last look are not counted.
        let kubelets = restarting_all || changed_at.is_some_and(|t| t >= entry.at_ms);
        if count > entry.restarts && !kubelets {
            let new = count - entry.restarts;
            // All but the newest at the earliest they can have happened; the newest at the
            // exit that caused it.
            let earliest = entry.at_ms;
            for _ in 1..new.min(policy.after_container_restarts + 1) {
                entry.window.record(Instant::from_millis(earliest), policy);
            }
            let newest = last_exit.unwrap_or(now_ms).max(earliest);
            entry.window.record(Instant::from_millis(newest), policy);
        }
        entry.restarts = count;
        entry.at_ms = now_ms;
    }
}

/// The decision for `pod` under `policy`, given what has been seen of it and its owner's
/// record (`None`: a bare pod, or an owner not read).
pub fn decide(
    pod: &Pod,
    policy: &PodRestartPolicy,
    seen: &PodSeen,
    history: Option<&History>,
    now_ms: u64,
) -> Decision {
    if pod.metadata.deletion_timestamp.is_some() {
        return Decision::Terminating;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Decision::Nothing;
    }
    if all_containers_restarting(pod).0 {
        // The kubelet is restarting every container (a RestartAllContainers rule).
        return Decision::Nothing;
    }
    let owned = controller_owner(pod).is_some();
    let empty = History::default();
    let history = history.unwrap_or(&empty);
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    if owned && history.has_refreshed(uid) {
        // Recorded but not evicted yet: retry the eviction, count it once.
        let m = history
            .refreshes
            .iter()
            .find(|m| m.uid == uid)
            .expect("found");
        return Decision::Refresh {
            container: m.container.clone(),
            restarts: m.restarts,
            record: false,
            number: history
                .refreshes
                .iter()
                .position(|x| x.uid == uid)
                .unwrap_or(0) as u32
                + 1,
        };
    }
    if owned && history.gave_up.is_some() {
        return Decision::GaveUpAlready;
    }
    let now = Instant::from_millis(now_ms);
    let pod_restarts = history.pod_restarts();
    for (name, c) in &seen.containers {
        let verdict = policy.on_exit(&c.window, now, pod_restarts);
        let restarts = c.window.count(now, policy.within);
        match verdict {
            Escalate::No => continue,
            _ if !owned => {
                return Decision::BarePod {
                    container: name.clone(),
                    restarts,
                }
            }
            Escalate::RestartPod => {
                return Decision::Refresh {
                    container: name.clone(),
                    restarts,
                    record: true,
                    number: pod_restarts + 1,
                }
            }
            Escalate::GiveUp => {
                return Decision::GiveUp {
                    container: name.clone(),
                    restarts,
                }
            }
        }
    }
    Decision::Nothing
}
