//! A status line in its parts (`LineParts`): the Pod as one line of JSON, written whole or
//! as the JSON Patch from the line before, with what did not change since (the spec, each
//! container's status) taken from the last time it was serialized (`LineCache`).

use std::rc::Rc;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod as K8sPod};

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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState as K8sState, ContainerStateWaiting, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
                host_ip: Some("127.0.0.1".into()),
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
