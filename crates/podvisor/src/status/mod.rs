//! The pod as the API shows it: a v1 `Pod` (k8s-openapi's types) whose status is built from
//! the lifecycle core's view (phase, conditions, container states, lastState, ready, started,
//! restartCount), with wall-clock timestamps; and how kubectl prints one (`print`). The run
//! builds it (`pod`), serializes it once per change, and every reader (`status`, `describe`,
//! `logs`, `top`) reads it back as the same types.

mod line;
pub mod print;
mod spec;

pub use line::{line_of, pod_parts, ContainerParts, LineCache, LineParts};
pub use spec::SpecJson;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    ContainerState as K8sState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, ContainerUser, HostIP, LinuxContainerUser,
    Pod as K8sPod, PodCondition, PodIP, PodStatus, ResourceRequirements, VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use podvisor_core::clock::Instant;
use podvisor_core::lifecycle::{ContainerState, Pod};
use podvisor_core::spec::resize::requirements;
use podvisor_core::spec::resources::Resources;

pub use k8s_openapi::api::core::v1::Pod as ApiPod;

/// What the status needs beyond the core: the manifest's metadata and spec, and times.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The pod spec as the manifest gave it, as compact JSON text (`SpecJson`): the
    /// supervisor only hands it on. A change (a resize) makes a new one.
    pub spec: SpecJson,
    /// Each container's image, in the core's container order.
    pub images: Vec<String>,
    /// Each container's `imageID` (`REPOSITORY@sha256:…`) when it runs from an image, else "".
    #[serde(default)]
    pub image_ids: Vec<String>,
    /// Each container's stop signal (`containerStatuses[].stopSignal`), with the gate
    /// ContainerStopSignals; empty without it.
    #[serde(default)]
    pub stop_signals: Vec<String>,
    /// Each container's `containerStatuses[].volumeMounts`, in the core's container order:
    /// its mounts as the manifest names them, a read-only one's `recursiveReadOnly`
    /// resolved to `Enabled` or `Disabled` (what this kernel does with `IfPossible`).
    #[serde(default)]
    pub volume_mounts: Vec<Vec<VolumeMountStatus>>,
    /// `metadata.generation`: 1, and one more for each resize that changed the spec, as the
    /// API server counts a pod's generations (KEP-5067); also the status's
    /// `observedGeneration` and its conditions'.
    #[serde(default = "first_generation")]
    pub generation: i64,
    /// `status.qosClass`, as the API server sets it at creation (a resize may not change it).
    #[serde(default)]
    pub qos_class: String,
    pub created: SystemTime,
}

fn first_generation() -> i64 {
    1
}

/// An event as the API serves it and `--events` writes it, one JSON object per line
/// (docs/events.md).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    /// RFC 3339 with milliseconds, UTC.
    pub time: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    /// The container's name, or `pod`.
    pub object: String,
    pub message: String,
    pub restart_count: Option<u32>,
    pub stage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

impl EventLine {
    /// The readable line `run` prints and `events` shows: time, type, reason, object,
    /// message; a message of several lines (a log tail) keeps to its column.
    pub fn text(&self) -> String {
        let head = format!(
            "{}  {:<7}  {:<10}  {:<12}  ",
            self.time, self.type_, self.reason, self.object
        );
        let pad = format!("\n{}", " ".repeat(head.chars().count()));
        format!("{head}{}\n", self.message.replace('\n', &pad))
    }
}

/// Maps the core's clock to wall-clock time.
pub type WallClock<'a> = &'a dyn Fn(Instant) -> SystemTime;

/// The IP every pod has: podvisor's containers share the host's network.
const POD_IP: &str = "127.0.0.1";

/// An API timestamp (written in whole seconds, UTC).
pub fn time(at: SystemTime) -> Time {
    Time(jiff::Timestamp::try_from(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}

/// The v1 Pod without its containers' statuses (`ContainerInputs` makes each, `LineCache`
/// keeps them). `condition_times`: when each condition last changed status; `outside`: the
/// conditions set from outside, type and status, which the readiness gates wait for.
pub fn pod(
    pod: &Pod,
    info: &PodInfo,
    condition_times: &BTreeMap<&'static str, SystemTime>,
    outside: &[(String, String)],
) -> K8sPod {
    let conditions = pod
        .conditions_given(outside)
        .into_iter()
        .map(|c| PodCondition {
            type_: c.kind.to_string(),
            status: if c.status { "True" } else { "False" }.to_string(),
            last_transition_time: condition_times.get(c.kind).map(|t| time(*t)),
            // The scheduler's, written once at the first generation; the kubelet's, now.
            observed_generation: Some(match c.kind {
                "PodScheduled" => 1,
                _ => info.generation,
            }),
            reason: c.reason,
            message: c.message,
            ..Default::default()
        })
        .collect();
    let (reason, message) = pod.failure().unzip();
    let status = PodStatus {
        phase: Some(pod.phase().as_str().to_string()),
        reason: reason.map(String::from),
        message: message.map(String::from),
        conditions: Some(conditions),
        host_ip: Some(POD_IP.into()),
        host_ips: Some(vec![HostIP { ip: POD_IP.into() }]),
        pod_ip: Some(POD_IP.into()),
        pod_ips: Some(vec![PodIP { ip: POD_IP.into() }]),
        start_time: Some(time(info.created)),
        observed_generation: Some(info.generation),
        qos_class: Some(info.qos_class.clone()).filter(|q| !q.is_empty()),
        ..Default::default()
    };
    K8sPod {
        metadata: metadata(pod, info),
        spec: None,
        status: Some(status),
    }
}

/// What one container's status is made from, borrowed from the core and the run: the same
/// inputs make the same status, so that a status line makes and serializes again only the
/// containers whose inputs changed (a pod of 100 containers sends one on every change while
/// one of them changes). `kept` is the owned copy `LineCache` compares the next ones with.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerInputs<'a> {
    pub name: Cow<'a, str>,
    pub state: Cow<'a, ContainerState>,
    pub last_state: Option<Cow<'a, ContainerState>>,
    pub ready: bool,
    pub restart_count: u32,
    pub started: bool,
    /// The process IDs of the instances `state` and `last_state` are of, if they ran.
    pub pids: [Option<i32>; 2],
    pub image: Cow<'a, str>,
    pub image_id: Cow<'a, str>,
    pub stop_signal: Option<Cow<'a, str>>,
    /// Its mounts (from the manifest, the same for the pod's life).
    pub volume_mounts: Cow<'a, [VolumeMountStatus]>,
    /// Who its process runs as (`user.linux`), once an instance was made.
    pub user: Option<Identity<'a>>,
    /// The resources allocated, and those applied to the instance (its allocation when it
    /// does not run).
    pub resources: [Resources; 2],
}

/// The identity a container's process runs as: its user, its group and its supplementary
/// groups (the primary one among them), as CRI reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity<'a> {
    pub uid: u32,
    pub gid: u32,
    pub groups: Cow<'a, [u32]>,
}

impl<'a> ContainerInputs<'a> {
    /// Container `i`'s: `pid_of` gives the process ID of one of its instances, if it ran;
    /// `identity`, who its instances run as.
    pub fn of(
        pod: &'a Pod,
        info: &'a PodInfo,
        i: usize,
        pid_of: &dyn Fn(usize, u32) -> Option<i32>,
        resources: [Resources; 2],
        identity: Identity<'a>,
    ) -> Self {
        let c = &pod.containers()[i];
        let waiting = matches!(c.state, ContainerState::Waiting { .. });
        let state_pid = (!waiting && c.instance > 0)
            .then(|| pid_of(i, c.instance))
            .flatten();
        let last_instance = if waiting {
            c.instance
        } else {
            c.instance.saturating_sub(1)
        };
        let text = |list: &'a [String]| Cow::Borrowed(list.get(i).map_or("", String::as_str));
        ContainerInputs {
            name: Cow::Borrowed(&c.name),
            state: Cow::Borrowed(&c.state),
            last_state: c.last_state.as_ref().map(Cow::Borrowed),
            ready: pod.is_ready(i),
            restart_count: c.restart_count,
            started: c.started,
            pids: [state_pid, pid_of(i, last_instance)],
            image: text(&info.images),
            image_id: text(&info.image_ids),
            stop_signal: info.stop_signals.get(i).map(|s| Cow::Borrowed(s.as_str())),
            volume_mounts: Cow::Borrowed(info.volume_mounts.get(i).map_or(&[][..], Vec::as_slice)),
            // As a runtime reports it: of a container it made (which a waiting one that never
            // ran is not).
            user: (c.instance > 0).then_some(identity),
            resources,
        }
    }

    /// Whether these inputs make the same status as `kept`, made for the same container of
    /// the same pod. Its name, image and mounts come from the manifest and stay what they were
    /// for the pod's life, so they are not compared again: with 100 containers a line would
    /// read 200 more strings, each elsewhere in memory, to learn that nothing changed. The
    /// rest is compared whole (a field added to the inputs must be named here).
    pub fn same_as(&self, kept: &ContainerInputs) -> bool {
        let ContainerInputs {
            name,
            state,
            last_state,
            ready,
            restart_count,
            started,
            pids,
            image,
            image_id,
            stop_signal,
            volume_mounts,
            user,
            resources,
        } = self;
        debug_assert!(*name == kept.name && *image == kept.image);
        debug_assert!(*volume_mounts == kept.volume_mounts);
        *ready == kept.ready
            && *restart_count == kept.restart_count
            && *started == kept.started
            && *pids == kept.pids
            && *resources == kept.resources
            && *state == kept.state
            && *last_state == kept.last_state
            && *image_id == kept.image_id
            && *stop_signal == kept.stop_signal
            && *user == kept.user
    }

    /// An owned copy.
    pub fn kept(&self) -> ContainerInputs<'static> {
        let own = |s: &Cow<'_, str>| Cow::Owned(s.to_string());
        ContainerInputs {
            name: own(&self.name),
            state: Cow::Owned(ContainerState::clone(&self.state)),
            last_state: (self.last_state.as_deref()).map(|s| Cow::Owned(s.clone())),
            ready: self.ready,
            restart_count: self.restart_count,
            started: self.started,
            pids: self.pids,
            image: own(&self.image),
            image_id: own(&self.image_id),
            stop_signal: self.stop_signal.as_ref().map(own),
            volume_mounts: Cow::Owned(self.volume_mounts.to_vec()),
            user: self.user.as_ref().map(|u| Identity {
                uid: u.uid,
                gid: u.gid,
                groups: Cow::Owned(u.groups.to_vec()),
            }),
            resources: self.resources,
        }
    }

    /// The container's status, made from these inputs alone (and the wall clock, which does
    /// not move): what lets `LineCache` use a status again while its inputs are the same.
    pub fn status(&self, wall: WallClock<'_>) -> ContainerStatus {
        let id = |pid: Option<i32>| pid.map(|p| format!("podvisor://{p}"));
        let [state_id, last_id] = self.pids.map(id);
        let [allocated, actual] = self.resources;
        ContainerStatus {
            name: self.name.to_string(),
            state: Some(state(&self.state, state_id.as_deref(), wall)),
            // An empty object when there is none, as the API server writes it.
            last_state: Some(
                (self.last_state.as_ref())
                    .map_or_else(K8sState::default, |s| state(s, last_id.as_deref(), wall)),
            ),
            ready: self.ready,
            restart_count: self.restart_count as i32,
            image: self.image.to_string(),
            image_id: self.image_id.to_string(),
            started: Some(self.started),
            container_id: state_id,
            stop_signal: self.stop_signal.as_ref().map(|s| s.to_string()),
            volume_mounts: Some(self.volume_mounts.to_vec()).filter(|v| !v.is_empty()),
            user: self.user.as_ref().map(|u| ContainerUser {
                linux: Some(LinuxContainerUser {
                    uid: i64::from(u.uid),
                    gid: i64::from(u.gid),
                    supplemental_groups: Some(u.groups.iter().map(|g| i64::from(*g)).collect())
                        .filter(|g: &Vec<i64>| !g.is_empty()),
                }),
            }),
            allocated_resources: requirements(&allocated).requests,
            resources: Some(requirements(&actual))
                .filter(|r| *r != ResourceRequirements::default()),
            ..Default::default()
        }
    }
}

/// The manifest's metadata, with podvisor's own annotations (docs/state.md): each staged
/// container's stage and verdict, and the whole-pod restarts.
fn metadata(pod: &Pod, info: &PodInfo) -> ObjectMeta {
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
    ObjectMeta {
        name: Some(info.name.clone()),
        namespace: Some(info.namespace.clone()),
        uid: Some(info.uid.clone()),
        generation: Some(info.generation),
        creation_timestamp: Some(time(info.created)),
        labels: (!info.labels.is_empty()).then(|| info.labels.clone()),
        annotations: Some(annotations),
        ..Default::default()
    }
}

fn state(state: &ContainerState, id: Option<&str>, wall: WallClock<'_>) -> K8sState {
    match state {
        ContainerState::Waiting { reason, message } => K8sState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.as_str().to_string()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        ContainerState::Running { started_at } => K8sState {
            running: Some(ContainerStateRunning {
                started_at: Some(time(wall(*started_at))),
            }),
            ..Default::default()
        },
        ContainerState::Terminated {
            exit_code,
            signal,
            reason,
            message,
            started_at,
            finished_at,
        } => K8sState {
            terminated: Some(ContainerStateTerminated {
                exit_code: *exit_code,
                signal: *signal,
                reason: Some(reason.as_str().to_string()),
                message: message.clone(),
                started_at: started_at.map(|s| time(wall(s))),
                finished_at: Some(time(wall(*finished_at))),
                container_id: id.map(String::from),
            }),
            ..Default::default()
        },
    }
}
