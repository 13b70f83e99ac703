//! A status line in its parts (`LineParts`): the Pod as one line of JSON, written whole or
//! as the JSON Patch from the line before, with what did not change since (the spec, each
//! container's status) taken from the last time it was made (`LineCache`).

use std::rc::Rc;

use k8s_openapi::api::core::v1::Pod as K8sPod;
use serde_json::value::RawValue;

use super::{ContainerInputs, SpecJson, WallClock};

/// Each container's status as JSON, in the core's order: the init containers' and sidecars'
/// (`initContainerStatuses`, none when the pod has none) and the others'.
#[derive(Debug, Default)]
pub struct ContainerParts {
    pub init: Option<Vec<Rc<str>>>,
    pub main: Vec<Rc<str>>,
}

/// `pod` (whose status has no containers' statuses) with `containers` and `spec` (which
/// `pod` leaves out) in the parts of its line: written straight from the typed Pod (no JSON
/// tree is built for the whole of it), and only in part: the spec is the JSON text the run
/// keeps (`SpecJson`), never serialized again, and each container's status was made only if
/// its inputs changed (`LineCache::container`).
pub fn pod_parts(mut pod: K8sPod, containers: ContainerParts, spec: &SpecJson) -> LineParts {
    let status = pod.status.take().map(|mut st| {
        // What is left is small: its members, in the typed order, each written as JSON text
        // once (no JSON tree); each list of container statuses goes where it belongs in that
        // order (an empty array holds its place).
        st.init_container_statuses = containers.init.as_ref().map(|_| Vec::new());
        st.container_statuses = Some(Vec::new());
        let text = serde_json::to_string(&st).unwrap_or_default();
        let mut lists = [
            ("initContainerStatuses", containers.init),
            ("containerStatuses", Some(containers.main)),
        ];
        members(&text)
            .into_iter()
            .map(|(key, value)| {
                let list = lists.iter_mut().find(|(k, _)| *k == key);
                match list.and_then(|(_, l)| l.take()) {
                    Some(parts) => (key, Part::List(parts)),
                    None => (key, Part::Json(value.into())),
                }
            })
            .collect()
    });
    LineParts {
        metadata: serde_json::to_string(&pod.metadata).unwrap_or_default(),
        spec: spec.clone(),
        status,
    }
}

/// The members of the JSON object `object`, in order, each value as its JSON text.
fn members(object: &str) -> Vec<(String, &str)> {
    struct Members;
    impl<'de> serde::de::Visitor<'de> for Members {
        type Value = Vec<(String, &'de str)>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut members = Vec::new();
            while let Some((key, value)) = map.next_entry::<String, &'de RawValue>()? {
                members.push((key, value.get()));
            }
            Ok(members)
        }
    }
    let mut reader = serde_json::Deserializer::from_str(object);
    serde::Deserializer::deserialize_map(&mut reader, Members).unwrap_or_default()
}

/// How a status line begins, before its metadata.
const LINE_HEAD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":"#;

/// The status line of `metadata` (JSON) and what follows it (`LineParts::after_metadata`).
pub fn line_of(metadata: &str, after: &str) -> String {
    let mut line = String::with_capacity(LINE_HEAD.len() + metadata.len() + after.len());
    line.push_str(LINE_HEAD);
    line.push_str(metadata);
    line.push_str(after);
    line
}

/// A status line in its parts: written whole, or as the JSON Patch (RFC 6902) that makes
/// the line before into it, which is what a watcher that asked for patches is sent.
#[derive(Debug, Clone)]
pub struct LineParts {
    metadata: String,
    spec: SpecJson,
    /// The status's members in order (none: no status).
    status: Option<Vec<(String, Part)>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    /// A member's value as JSON text.
    Json(Box<str>),
    /// A list of container statuses, each as JSON.
    List(Vec<Rc<str>>),
}

impl LineParts {
    /// The whole line.
    pub fn line(&self) -> String {
        let mut line = String::with_capacity(64 + self.metadata.len() + self.spec.text().len());
        line.push_str(LINE_HEAD);
        line.push_str(&self.metadata);
        self.write_after_metadata(&mut line);
        line
    }

    /// What follows the metadata in the line (`line_of` puts it back together). A status
    /// whose metadata is completed apart from the run loop is sent there in two parts: the
    /// metadata still typed, and this text.
    pub fn after_metadata(&self) -> String {
        let mut after = String::with_capacity(64 + self.spec.text().len());
        self.write_after_metadata(&mut after);
        after
    }

    fn write_after_metadata(&self, line: &mut String) {
        line.push_str(r#","spec":"#);
        line.push_str(self.spec.text());
        if let Some(status) = &self.status {
            line.push_str(r#","status":"#);
            write_status(line, status);
        }
        line.push('}');
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
        if !self.spec.same(&before.spec) {
            op("replace", "/spec", Some(self.spec.text()));
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
                                if !same(a, b) {
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

/// Whether two parts of lines are the same text: at once when they are the same part, as
/// what did not change since the line before is (taken from the `LineCache`).
fn same(a: &Rc<str>, b: &Rc<str>) -> bool {
    Rc::ptr_eq(a, b) || a == b
}

fn write_status(out: &mut String, members: &[(String, Part)]) {
    out.push('{');
    for (i, (key, part)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // The members are PodStatus's camelCase names: nothing to escape.
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        write_part(out, part);
    }
    out.push('}');
}

fn write_part(out: &mut String, part: &Part) {
    match part {
        Part::Json(text) => out.push_str(text),
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

/// What status lines serialized last, to use again where nothing changed: each container's
/// status by its place in the core's order, with the inputs it was made from. A cache is one
/// pod's, whose containers keep their places (`ContainerInputs::same_as`). (The spec is kept
/// as JSON text already: `SpecJson`.)
#[derive(Debug, Default)]
pub struct LineCache {
    containers: Vec<Option<(ContainerInputs<'static>, Rc<str>)>>,
}

impl LineCache {
    /// The status of the container at `at` as JSON: the one made before when its inputs are
    /// the same, else made and serialized now.
    pub fn container(
        &mut self,
        at: usize,
        inputs: &ContainerInputs,
        wall: WallClock<'_>,
    ) -> Rc<str> {
        if let Some(Some((kept, json))) = self.containers.get(at) {
            if inputs.same_as(kept) {
                return json.clone();
            }
        }
        let json: Rc<str> = serde_json::to_string(&inputs.status(wall))
            .unwrap_or_default()
            .into();
        if self.containers.len() <= at {
            self.containers.resize_with(at + 1, || None);
        }
        self.containers[at] = Some((inputs.kept(), json.clone()));
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;
    use std::time::SystemTime;

    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use podvisor_core::clock::Instant;
    use podvisor_core::lifecycle::{ContainerState, WaitingReason};
    use podvisor_core::spec::resources::Resources;
    use serde_json::json;

    /// A pod as its status is made: the pod without its containers' statuses, and each
    /// container's inputs (init containers apart).
    #[derive(Clone)]
    struct Case {
        pod: K8sPod,
        init: Option<Vec<ContainerInputs<'static>>>,
        main: Vec<ContainerInputs<'static>>,
    }

    fn wall(t: Instant) -> SystemTime {
        SystemTime::UNIX_EPOCH + t.since_origin()
    }

    /// The line serialized whole, as one struct, each container's status made afresh.
    fn whole(case: &Case, spec: &SpecJson) -> String {
        let spec = &spec.value().unwrap();
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
        let statuses = |list: &[ContainerInputs]| list.iter().map(|c| c.status(&wall)).collect();
        let status = case.pod.status.clone().map(|st| PodStatus {
            init_container_statuses: case.init.as_deref().map(statuses),
            container_statuses: Some(statuses(&case.main)),
            ..st
        });
        let ordered = Ordered {
            api_version: "v1",
            kind: "Pod",
            metadata: &case.pod.metadata,
            spec,
            status: status.as_ref(),
        };
        serde_json::to_string(&ordered).unwrap()
    }

    /// The line in its parts, each container's status from `cache` where it can be.
    fn parts(case: Case, spec: &SpecJson, cache: &mut LineCache) -> LineParts {
        let mut at = 0;
        let mut json = |list: Vec<ContainerInputs>| -> Vec<Rc<str>> {
            (list.iter())
                .map(|c| {
                    at += 1;
                    cache.container(at - 1, c, &wall)
                })
                .collect()
        };
        let containers = ContainerParts {
            init: case.init.map(&mut json),
            main: json(case.main),
        };
        pod_parts(case.pod, containers, spec)
    }

    /// A pod of `n` containers and an init container; container `changed` has `restarts`.
    fn a_pod(n: usize, changed: usize, restarts: u32) -> Case {
        let inputs = |i: usize| ContainerInputs {
            name: Cow::Owned(format!("c{i}")),
            // A key's pattern inside a string stays escaped, never taken for the key.
            state: Cow::Owned(ContainerState::Waiting {
                reason: WaitingReason::CrashLoopBackOff,
                message: Some(r#""containerStatuses":[]"#.into()),
            }),
            last_state: (i == changed && restarts > 0).then(|| {
                Cow::Owned(ContainerState::Terminated {
                    exit_code: 1,
                    signal: None,
                    reason: podvisor_core::lifecycle::TerminatedReason::Error,
                    message: None,
                    started_at: None,
                    finished_at: Instant::from_millis(1_000 * u64::from(restarts)),
                })
            }),
            ready: false,
            restart_count: if i == changed { restarts } else { 0 },
            started: false,
            pids: [None, (i == changed).then_some(100 + restarts as i32)],
            image: Cow::Borrowed("busybox"),
            image_id: Cow::Borrowed(""),
            stop_signal: None,
            volume_mounts: Cow::Borrowed(&[]),
            user: None,
            resources: [Resources::default(); 2],
        };
        Case {
            pod: K8sPod {
                metadata: ObjectMeta {
                    name: Some("p".into()),
                    ..Default::default()
                },
                spec: None,
                status: Some(PodStatus {
                    phase: Some("Running".into()),
                    conditions: Some(Vec::new()),
                    host_ip: Some("127.0.0.1".into()),
                    ..Default::default()
                }),
            },
            init: Some(vec![inputs(n)]),
            main: (0..n).map(inputs).collect(),
        }
    }

    #[test]
    fn a_line_written_in_part_is_the_line_written_whole() {
        let mut cache = LineCache::default();
        let mut spec = SpecJson::new(&json!({"containers": [{"name": "c0"}, {"name": "c1"}]}));
        for (changed, restarts) in [(0, 0), (1, 1), (1, 2), (2, 2), (3, 1)] {
            let case = a_pod(3, changed, restarts);
            let made = parts(case.clone(), &spec, &mut cache);
            let line = made.line();
            assert_eq!(line, whole(&case, &spec));
            // Put back together from its metadata and the rest, it is the same line.
            let metadata = serde_json::to_string(&case.pod.metadata).unwrap();
            assert_eq!(line_of(&metadata, &made.after_metadata()), line);
        }
        // A status whose inputs did not change is the one made before, not made again.
        let case = a_pod(3, 3, 1);
        // (Container `main[1]` is third in the core's order, after the init container.)
        let kept = cache.container(2, &case.main[1], &wall);
        assert!(Rc::ptr_eq(&kept, &cache.container(2, &case.main[1], &wall)));
        // Any input that can change makes it again.
        let changes: [fn(&mut ContainerInputs); 9] = [
            |c| c.restart_count += 1,
            |c| c.ready = !c.ready,
            |c| c.started = !c.started,
            |c| c.pids[0] = Some(7),
            |c| {
                c.state = Cow::Owned(ContainerState::Running {
                    started_at: Instant::from_millis(5),
                })
            },
            |c| {
                c.last_state = Some(Cow::Owned(ContainerState::Waiting {
                    reason: WaitingReason::CrashLoopBackOff,
                    message: None,
                }))
            },
            |c| c.image_id = Cow::Borrowed("busybox@sha256:cd"),
            |c| c.stop_signal = Some(Cow::Borrowed("SIGUSR1")),
            |c| c.resources[1].cpu_limit = Some(500),
        ];
        for (n, change) in changes.iter().enumerate() {
            let mut moved = case.main[1].clone();
            change(&mut moved);
            assert_ne!(moved, case.main[1], "change {n}");
            let made = cache.container(2, &moved, &wall);
            assert!(!Rc::ptr_eq(&kept, &made), "change {n}");
            assert_eq!(*made, *serde_json::to_string(&moved.status(&wall)).unwrap());
            // And back: the status as it was, made again.
            let back = cache.container(2, &case.main[1], &wall);
            assert_eq!(back, kept, "change {n}");
        }
        // A spec resized in place is written as it now is; so is a container resized.
        let resized = SpecJson::new(&json!({"containers": [{"name": "c0", "resources": {}}]}));
        let mut case = a_pod(3, 0, 5);
        case.main[1].resources[0].memory_request = Some(64 << 20);
        case.main[1].resources[1].memory_limit = Some(128 << 20);
        let line = parts(case.clone(), &resized, &mut cache).line();
        assert_eq!(line, whole(&case, &resized));
        assert!(
            line.contains(r#""allocatedResources":{"memory":"64Mi"}"#),
            "{line}"
        );
        // An image pulled since: its ID.
        case.main[2].image_id = Cow::Borrowed("busybox@sha256:ab");
        let line = parts(case.clone(), &resized, &mut cache).line();
        assert_eq!(line, whole(&case, &resized));
        // The same spec is written as it is kept, never serialized again; one changed is
        // written as it now is, and so is an equal spec made anew.
        let case = a_pod(3, 0, 5);
        let before = parts(case.clone(), &spec, &mut cache);
        assert!(before
            .spec
            .shared_with(&parts(case.clone(), &spec, &mut cache).spec));
        let mut changed = spec.value().unwrap();
        changed["containers"][1]["image"] = json!("busybox");
        spec = SpecJson::new(&changed);
        let line = parts(case.clone(), &spec, &mut cache).line();
        assert_eq!(line, whole(&case, &spec));
        assert!(line.contains(r#""image":"busybox""#), "{line}");
        let anew = SpecJson::new(&spec.value().unwrap());
        assert_eq!(parts(case.clone(), &anew, &mut cache).line(), line);
        // No init containers; no status.
        let mut case = a_pod(2, 0, 1);
        case.init = None;
        let mut fresh = LineCache::default();
        let line = parts(case.clone(), &spec, &mut fresh).line();
        assert_eq!(line, whole(&case, &spec));
        case.pod.status = None;
        let line = parts(case.clone(), &spec, &mut fresh).line();
        assert_eq!(line, whole(&case, &spec));
    }

    #[test]
    fn each_patch_makes_the_line_before_into_the_next_and_says_only_what_changed() {
        // A cache is one pod's: a pod of other containers has its own.
        let mut caches = std::collections::BTreeMap::<usize, LineCache>::new();
        let mut parts = |case: Case, spec: &SpecJson| {
            let cache = caches.entry(case.main.len()).or_default();
            parts(case, spec, cache)
        };
        let spec = SpecJson::new(&json!({"containers": [{"name": "c0"}]}));
        let with_reason = {
            let mut p = a_pod(3, 1, 4);
            p.pod.status.as_mut().unwrap().reason = Some("Evicted".into());
            p
        };
        let fewer = a_pod(2, 1, 4);
        let no_status = {
            let mut p = a_pod(2, 0, 0);
            p.pod.status = None;
            p
        };
        let resized = SpecJson::new(&json!({"containers": [{"name": "c0", "resources": {}}]}));
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
        let mut before = parts(a_pod(3, 0, 0), &spec);
        let mut doc: serde_json::Value = serde_json::from_str(&before.line()).unwrap();
        let mut sizes = Vec::new();
        for (case, spec) in steps {
            let parts = parts(case, spec);
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
        let patch = parts(a_pod(3, 1, 9), &spec)
            .patch_from(&parts(a_pod(3, 1, 8), &spec))
            .unwrap();
        assert!(patch.starts_with(one), "{patch}");
        assert_eq!(patch.matches(r#""op""#).count(), 1, "{patch}");
    }
}
