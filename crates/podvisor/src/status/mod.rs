//! The pod as the API shows it: a v1 `Pod` (k8s-openapi's types) whose status is built from
//! the lifecycle core's view (phase, conditions, container states, lastState, ready, started,
//! restartCount), with wall-clock timestamps; and how kubectl prints one (`print`). The run
//! builds it (`pod`), serializes it once per change, and every reader (`status`, `describe`,
//! `logs`, `top`) reads it back as the same types.

pub mod print;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    ContainerState as K8sState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod as K8sPod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use podvisor_core::clock::Instant;
use podvisor_core::lifecycle::{ContainerState, Kind, Pod};

pub use k8s_openapi::api::core::v1::Pod as ApiPod;

/// What the status needs beyond the core: the manifest's metadata and spec, and times.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The pod spec as the manifest gave it, as JSON: the supervisor only hands it on (the
    /// API types' code for a whole spec would stay resident in it for nothing).
    pub spec: serde_json::Value,
    /// Each container's image, in the core's container order.
    pub images: Vec<String>,
    /// Each container's `imageID` (`REPOSITORY@sha256:…`) when it runs from an image, else "".
    #[serde(default)]
    pub image_ids: Vec<String>,
    /// Each container's stop signal (`containerStatuses[].stopSignal`), with the gate
    /// ContainerStopSignals; empty without it.
    #[serde(default)]
    pub stop_signals: Vec<String>,
    pub created: SystemTime,
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

/// The v1 Pod. `condition_times`: when each condition last changed status; `container_id`:
/// the ID of a container's instance, if it ran.
pub fn pod(
    pod: &Pod,
    info: &PodInfo,
    wall: WallClock<'_>,
    condition_times: &BTreeMap<&'static str, SystemTime>,
    container_id: &dyn Fn(usize, u32) -> Option<String>,
) -> K8sPod {
    let conditions = pod
        .conditions()
        .into_iter()
        .map(|c| PodCondition {
            type_: c.kind.to_string(),
            status: if c.status { "True" } else { "False" }.to_string(),
            last_transition_time: condition_times.get(c.kind).map(|t| time(*t)),
            reason: c.reason,
            message: c.message,
            ..Default::default()
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
        let status = ContainerStatus {
            name: c.name.clone(),
            state: Some(state(&c.state, state_id.as_deref(), wall)),
            // An empty object when there is none, as the API server writes it.
            last_state: Some(
                c.last_state
                    .as_ref()
                    .map_or_else(K8sState::default, |s| state(s, last_id.as_deref(), wall)),
            ),
            ready: pod.is_ready(i),
            restart_count: c.restart_count as i32,
            image: info.images.get(i).cloned().unwrap_or_default(),
            image_id: info.image_ids.get(i).cloned().unwrap_or_default(),
            started: Some(c.started),
            container_id: state_id,
            stop_signal: info.stop_signals.get(i).cloned(),
            ..Default::default()
        };
        match p.kind {
            Kind::Main => main.push(status),
            Kind::Init | Kind::Sidecar => init.push(status),
        }
    }
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
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(main),
        ..Default::default()
    };
    K8sPod {
        metadata: metadata(pod, info),
        spec: None,
        status: Some(status),
    }
}

/// `pod` as one line of JSON in kubectl's order, with `spec` (which `pod` leaves out).
pub fn pod_json(pod: K8sPod, spec: &serde_json::Value, cache: &mut LineCache) -> String {
    pod_parts(pod, spec, cache).line()
}

/// `pod` with `spec` in the parts of its line: written straight from the typed Pod (no JSON
/// tree is built for the whole of it), and only in part, since a status line of a pod of
/// 100 containers goes out on every change while one container changes: the spec and each
/// container's status are serialized again only when they changed since the last time
/// (`cache`).
pub fn pod_parts(mut pod: K8sPod, spec: &serde_json::Value, cache: &mut LineCache) -> LineParts {
    let status = pod.status.take().map(|mut st| {
        let lists = [
            ("initContainerStatuses", st.init_container_statuses.take()),
            ("containerStatuses", st.container_statuses.take()),
        ];
        // What is left is small: its members, in the typed order; each list of container
        // statuses goes where it belongs in that order (an empty array holds its place).
        st.init_container_statuses = lists[0].1.as_ref().map(|_| Vec::new());
        st.container_statuses = lists[1].1.as_ref().map(|_| Vec::new());
        let members = match serde_json::to_value(&st) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let mut at = 0;
        let mut lists = lists.map(|(key, list)| {
            let parts: Option<Vec<Rc<str>>> = list.map(|list| {
                (list.into_iter())
                    .map(|c| {
                        at += 1;
                        cache.container(at - 1, c)
                    })
                    .collect()
            });
            (key, parts)
        });
        members
            .into_iter()
            .map(|(key, value)| {
                let list = lists.iter_mut().find(|(k, _)| *k == key);
                match list.and_then(|(_, l)| l.take()) {
                    Some(parts) => (key, Part::List(parts)),
                    None => (key, Part::Value(value)),
                }
            })
            .collect()
    });
    LineParts {
        metadata: serde_json::to_string(&pod.metadata).unwrap_or_default(),
        spec: cache.spec(spec),
        status,
    }
}

/// A status line in its parts: written whole, or as the JSON Patch (RFC 6902) that makes
/// the line before into it, which is what a watcher that asked for patches is sent.
#[derive(Debug, Clone)]
pub struct LineParts {
    metadata: String,
    spec: Rc<str>,
    /// The status's members in order (none: no status).
    status: Option<Vec<(String, Part)>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Value(serde_json::Value),
    /// A list of container statuses, each as JSON.
    List(Vec<Rc<str>>),
}

impl LineParts {
    /// The whole line.
    pub fn line(&self) -> String {
        let mut line = String::with_capacity(64 + self.metadata.len() + self.spec.len());
        line.push_str(r#"{"apiVersion":"v1","kind":"Pod","metadata":"#);
        line.push_str(&self.metadata);
        line.push_str(r#","spec":"#);
        line.push_str(&self.spec);
        if let Some(status) = &self.status {
            line.push_str(r#","status":"#);
            write_status(&mut line, status);
        }
        line.push('}');
        line
    }

    /// The JSON Patch from `before` to this line (`None`: they are the same): what changed,
    /// each container's status apart; the status whole when its members are not the same.
    pub fn patch_from(&self, before: &LineParts) -> Option<String> {
        let mut ops = Vec::new();
        let mut op = |kind: &str, path: &str, value: Option<&str>| {
            ops.push(match value {
                Some(v) => format!(r#"{{"op":"{kind}","path":"{path}","value":{v}}}"#),
                None => format!(r#"{{"op":"{kind}","path":"{path}"}}"#),
            });
        };
        if self.metadata != before.metadata {
            op("replace", "/metadata", Some(&self.metadata));
        }
        if self.spec != before.spec {
            op("replace", "/spec", Some(&self.spec));
        }
        let whole = |status: &[(String, Part)]| {
            let mut text = String::new();
            write_status(&mut text, status);
            text
        };
        match (&self.status, &before.status) {
            (None, None) => {}
            (None, Some(_)) => op("remove", "/status", None),
            (Some(now), None) => op("add", "/status", Some(&whole(now))),
            (Some(now), Some(was))
                if now.len() != was.len() || now.iter().zip(was).any(|((a, _), (b, _))| a != b) =>
            {
                op("replace", "/status", Some(&whole(now)))
            }
            (Some(now), Some(was)) => {
                for ((key, now), (_, was)) in now.iter().zip(was) {
                    // The members are camelCase names: nothing to escape in a path.
                    match (now, was) {
                        (Part::List(now), Part::List(was)) if now.len() == was.len() => {
                            for (i, (a, b)) in now.iter().zip(was).enumerate() {
                                if a != b {
                                    op("replace", &format!("/status/{key}/{i}"), Some(a));
                                }
                            }
                        }
                        (now, was) if now != was => {
                            let mut value = String::new();
                            write_part(&mut value, now);
                            op("replace", &format!("/status/{key}"), Some(&value));
                        }
                        _ => {}
                    }
                }
            }
        }
        (!ops.is_empty()).then(|| format!("[{}]", ops.join(",")))
    }
}

fn write_status(out: &mut String, members: &[(String, Part)]) {
    out.push('{');
    for (i, (key, part)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).unwrap_or_default());
        out.push(':');
        write_part(out, part);
    }
    out.push('}');
}

fn write_part(out: &mut String, part: &Part) {
    match part {
        Part::Value(v) => out.push_str(&serde_json::to_string(v).unwrap_or_default()),
        Part::List(parts) => {
            out.push('[');
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(p);
            }
            out.push(']');
        }
    }
}

/// What status lines serialized last, to use again where nothing changed: the spec, and
/// each container's status by its place (init containers first).
#[derive(Debug, Default)]
pub struct LineCache {
    spec: Option<(serde_json::Value, Rc<str>)>,
    containers: Vec<(ContainerStatus, Rc<str>)>,
}

impl LineCache {
    fn spec(&mut self, spec: &serde_json::Value) -> Rc<str> {
        match &self.spec {
            Some((s, json)) if s == spec => json.clone(),
            _ => {
                let json: Rc<str> = serde_json::to_string(spec).unwrap_or_default().into();
                self.spec = Some((spec.clone(), json.clone()));
                json
            }
        }
    }

    fn container(&mut self, at: usize, status: ContainerStatus) -> Rc<str> {
        if self.containers.get(at).is_some_and(|(s, _)| *s == status) {
            return self.containers[at].1.clone();
        }
        let json: Rc<str> = serde_json::to_string(&status).unwrap_or_default().into();
        if at < self.containers.len() {
            self.containers[at] = (status, json.clone());
        } else {
            self.containers.push((status, json.clone()));
        }
        json
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The line serialized whole, as one struct.
    fn whole(pod: &K8sPod, spec: &serde_json::Value) -> String {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Ordered<'a> {
            api_version: &'a str,
            kind: &'a str,
            metadata: &'a ObjectMeta,
            spec: &'a serde_json::Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            status: Option<&'a PodStatus>,
        }
        let ordered = Ordered {
            api_version: "v1",
            kind: "Pod",
            metadata: &pod.metadata,
            spec,
            status: pod.status.as_ref(),
        };
        serde_json::to_string(&ordered).unwrap()
    }

    /// A pod of `n` containers and an init container; container `changed` has `restarts`.
    fn a_pod(n: usize, changed: usize, restarts: i32) -> K8sPod {
        let status = |i: usize| ContainerStatus {
            name: format!("c{i}"),
            restart_count: if i == changed { restarts } else { 0 },
            // A key's pattern inside a string stays escaped, never taken for the key.
            state: Some(K8sState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("CrashLoopBackOff".into()),
                    message: Some(r#""containerStatuses":[]"#.into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        K8sPod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(Vec::new()),
                host_ip: Some(POD_IP.into()),
                init_container_statuses: Some(vec![status(n)]),
                container_statuses: Some((0..n).map(status).collect()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_line_written_in_part_is_the_line_written_whole() {
        let mut cache = LineCache::default();
        let spec = json!({"containers": [{"name": "c0"}, {"name": "c1"}]});
        for (changed, restarts) in [(0, 0), (1, 1), (1, 2), (2, 2), (3, 1)] {
            let pod = a_pod(3, changed, restarts);
            assert_eq!(pod_json(pod.clone(), &spec, &mut cache), whole(&pod, &spec));
        }
        // A spec resized in place is written as it now is.
        let resized = json!({"containers": [{"name": "c0", "resources": {}}]});
        let pod = a_pod(3, 0, 5);
        assert_eq!(
            pod_json(pod.clone(), &resized, &mut cache),
            whole(&pod, &resized)
        );
        // No init containers; no status.
        let mut pod = a_pod(2, 0, 1);
        pod.status.as_mut().unwrap().init_container_statuses = None;
        let mut fresh = LineCache::default();
        assert_eq!(pod_json(pod.clone(), &spec, &mut fresh), whole(&pod, &spec));
        pod.status = None;
        assert_eq!(pod_json(pod.clone(), &spec, &mut fresh), whole(&pod, &spec));
    }

    #[test]
    fn each_patch_makes_the_line_before_into_the_next_and_says_only_what_changed() {
        let mut cache = LineCache::default();
        let spec = json!({"containers": [{"name": "c0"}]});
        let with_reason = {
            let mut p = a_pod(3, 1, 4);
            p.status.as_mut().unwrap().reason = Some("Evicted".into());
            p
        };
        let fewer = a_pod(2, 1, 4);
        let no_status = K8sPod {
            status: None,
            ..a_pod(2, 0, 0)
        };
        let resized = json!({"containers": [{"name": "c0", "resources": {}}]});
        let steps = [
            (a_pod(3, 0, 0), &spec),
            (a_pod(3, 1, 1), &spec),
            (a_pod(3, 1, 1), &spec),
            (a_pod(3, 1, 2), &resized),
            (with_reason, &resized),
            (a_pod(3, 1, 4), &resized),
            (fewer, &resized),
            (no_status, &resized),
            (a_pod(3, 2, 1), &spec),
        ];
        let mut before = pod_parts(a_pod(3, 0, 0), &spec, &mut cache);
        let mut doc: serde_json::Value = serde_json::from_str(&before.line()).unwrap();
        let mut sizes = Vec::new();
        for (pod, spec) in steps {
            let parts = pod_parts(pod, spec, &mut cache);
            match parts.patch_from(&before) {
                Some(patch) => {
                    sizes.push(patch.len());
                    let patch: json_patch::Patch = serde_json::from_str(&patch).unwrap();
                    json_patch::patch(&mut doc, &patch).unwrap();
                }
                None => sizes.push(0),
            }
            assert_eq!(serde_json::to_string(&doc).unwrap(), parts.line());
            before = parts;
        }
        // Unchanged: nothing; one container changed: its status alone.
        assert_eq!(sizes[0], 0);
        assert_eq!(sizes[2], 0);
        let one = r#"[{"op":"replace","path":"/status/containerStatuses/1","value":"#;
        let patch = pod_parts(a_pod(3, 1, 9), &spec, &mut cache)
            .patch_from(&pod_parts(a_pod(3, 1, 8), &spec, &mut cache))
            .unwrap();
        assert!(patch.starts_with(one), "{patch}");
        assert_eq!(patch.matches(r#""op""#).count(), 1, "{patch}");
    }
}
