//! In-place resize of a pod's containers (KEP-1287, GA in Kubernetes 1.35): what the API
//! server accepts on the `resize` subresource (`ValidatePodResize`), and what the kubelet then
//! decides: whether the node can hold the new requests, and for each container whether its
//! cgroup is changed in place or the container restarted (its `resizePolicy`). Pure: the shell
//! applies the patch, writes the cgroups and feeds the restarts.

use k8s_openapi::api::core::v1::{Container, ContainerResizePolicy, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::resources::{pod_effective, Allocation, Resources};
use crate::document::yaml::Document;
use crate::document::{Problems, SpecError};
use crate::lifecycle::Kind;

/// A pod's QoS class, as `ComputePodQOS` derives it from cpu and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// The QoS class of `spec`: BestEffort when no container requests or limits cpu or memory;
/// Guaranteed when every container limits both and requests what it limits (a request left
/// out is the limit); Burstable otherwise. A pod with resources of its own (KEP-2837) is
/// classed by them alone, as `ComputePodQOS` does.
pub fn qos_class(spec: &PodSpec) -> QosClass {
    let pod = Resources::of(spec.resources.as_ref());
    let pod_level = pod.cpu_request.is_some()
        || pod.memory_request.is_some()
        || pod.cpu_limit.is_some()
        || pod.memory_limit.is_some();
    let all: Vec<Resources> = match pod_level {
        true => vec![pod],
        false => super::containers_in_order(spec, "")
            .map(|(_, _, c)| Resources::of(c.resources.as_ref()))
            .collect(),
    };
    let none = all.iter().all(|r| {
        r.cpu_request.unwrap_or(0) == 0
            && r.memory_request.unwrap_or(0) == 0
            && r.cpu_limit.is_none()
            && r.memory_limit.is_none()
    });
    if none {
        return QosClass::BestEffort;
    }
    let guaranteed = all.iter().all(|r| {
        r.cpu_limit.is_some()
            && r.memory_limit.is_some()
            && r.cpu_request == r.cpu_limit
            && r.memory_request == r.memory_limit
    });
    if guaranteed {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The API server's checks of a resize (`old` → `new`): only the cpu and memory of regular
/// containers and sidecars change, no limit is removed, the new resources are valid as at
/// creation, and the QoS class stays. Empty when the resize is accepted.
pub fn check_resize(old: &PodSpec, new: &PodSpec) -> Vec<SpecError> {
    let mut errors = Vec::new();
    let doc = Document::unplaced(serde_json::Value::Null);
    let mut p = Problems {
        doc: &doc,
        prefix: String::new(),
        errors: &mut errors,
    };
    let same_shape = |a: &Option<Vec<Container>>, b: &Option<Vec<Container>>| {
        let names = |v: &Option<Vec<Container>>| -> Vec<String> {
            v.iter().flatten().map(|c| c.name.clone()).collect()
        };
        names(a) == names(b)
    };
    if !same_shape(&old.init_containers, &new.init_containers)
        || old.containers.len() != new.containers.len()
        || old
            .containers
            .iter()
            .zip(&new.containers)
            .any(|(a, b)| a.name != b.name)
    {
        p.push(
            "spec",
            "Forbidden: only cpu and memory resources are mutable",
        );
        return strip(errors);
    }
    // Everything but the cpu and memory of each container must be as it was.
    let mut unchanged = new.clone();
    let olds = super::containers_in_order(old, "spec").map(|(_, _, c)| c);
    let news = containers_mut(&mut unchanged);
    for (o, n) in olds.zip(news) {
        n.resources = with_cpu_and_memory_of(n.resources.take(), o.resources.as_ref());
    }
    if !same(&unchanged, old) {
        p.push(
            "spec",
            "Forbidden: only cpu and memory resources are mutable",
        );
    }
    let olds = super::containers_in_order(old, "spec");
    for ((path, kind, n), (_, _, o)) in super::containers_in_order(new, "spec").zip(olds) {
        if n.resources == o.resources {
            continue;
        }
        if kind == Kind::Init {
            p.push(
                &format!("{path}.resources"),
                "Forbidden: resources for non-sidecar init containers are immutable",
            );
            continue;
        }
        for name in ["cpu", "memory"] {
            let limit = |r: Option<&ResourceRequirements>| {
                r.and_then(|r| r.limits.as_ref())
                    .is_some_and(|l| l.contains_key(name))
            };
            if limit(o.resources.as_ref()) && !limit(n.resources.as_ref()) {
                p.push(
                    &format!("{path}.resources.limits[{name}]"),
                    "Forbidden: resource limits cannot be removed",
                );
            }
        }
        if let Some(r) = &n.resources {
            super::validate::resources_at(r, &format!("{path}.resources"), &mut p);
        }
    }
    if p.errors.is_empty() {
        let was = qos_class(old);
        if qos_class(new) != was {
            p.push(
                "spec",
                format!(
                    "Invalid value: {:?}: Pod QOS Class may not change as a result of resizing",
                    was.as_str()
                ),
            );
        }
    }
    strip(errors)
}

/// Problems of a request have no place in a file.
fn strip(mut errors: Vec<SpecError>) -> Vec<SpecError> {
    for e in &mut errors {
        e.pos = None;
    }
    errors
}

fn same(a: &PodSpec, b: &PodSpec) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

fn containers_mut(spec: &mut PodSpec) -> impl Iterator<Item = &mut Container> {
    let init = spec.init_containers.iter_mut().flatten();
    init.chain(spec.containers.iter_mut())
}

/// `r` with its cpu and memory (requests and limits) those of `from`.
fn with_cpu_and_memory_of(
    r: Option<ResourceRequirements>,
    from: Option<&ResourceRequirements>,
) -> Option<ResourceRequirements> {
    let mut r = r.unwrap_or_default();
    type Map = Option<std::collections::BTreeMap<String, K8sQuantity>>;
    let put = |to: &mut Map, from: &Map| {
        let mut m = to.take().unwrap_or_default();
        for name in ["cpu", "memory"] {
            m.remove(name);
            if let Some(q) = from.as_ref().and_then(|f| f.get(name)) {
                m.insert(name.to_string(), q.clone());
            }
        }
        *to = (!m.is_empty() || from.is_some()).then_some(m);
    };
    let empty = ResourceRequirements::default();
    let from = from.unwrap_or(&empty);
    put(&mut r.limits, &from.limits);
    put(&mut r.requests, &from.requests);
    (r != ResourceRequirements::default() || from != &empty).then_some(r)
}

/// What the kubelet does for one container whose allocated resources changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeAction {
    /// Nothing its cgroup holds changed (a memory request).
    None,
    /// Its cgroup is changed in place.
    InPlace,
    /// Its `resizePolicy` says to restart it for a resource that changed.
    Restart,
}

/// The smallest `cpu.shares` (2) and the smallest effective CPU limit (10m) the kubelet
/// treats as equal to anything below them (`MinShares`, `MinMilliCPULimit`).
const MIN_CPU_REQUEST_MILLI: u64 = 2;
const MIN_CPU_LIMIT_MILLI: u64 = 10;

/// What to do for a container running with `applied` now allocated `allocated`
/// (`computePodResizeAction`): cpu request and limit and memory limit are compared (a memory
/// request is not in any cgroup); a changed resource whose policy is `RestartContainer`
/// restarts the container, otherwise its cgroup changes in place.
pub fn resize_action(
    policies: &[ContainerResizePolicy],
    applied: &Resources,
    allocated: &Resources,
) -> ResizeAction {
    let low = |a: Option<u64>, b: Option<u64>, floor: u64| {
        a.unwrap_or(0) <= floor && b.unwrap_or(0) <= floor
    };
    let cpu = !(applied.cpu_request == allocated.cpu_request
        || low(
            applied.cpu_request,
            allocated.cpu_request,
            MIN_CPU_REQUEST_MILLI,
        ))
        || !(applied.cpu_limit == allocated.cpu_limit
            || low(applied.cpu_limit, allocated.cpu_limit, MIN_CPU_LIMIT_MILLI));
    let memory = applied.memory_limit != allocated.memory_limit;
    let restarts = |name: &str| {
        policies
            .iter()
            .any(|p| p.resource_name == name && p.restart_policy == "RestartContainer")
    };
    if (cpu && restarts("cpu")) || (memory && restarts("memory")) {
        ResizeAction::Restart
    } else if cpu || memory {
        ResizeAction::InPlace
    } else {
        ResizeAction::None
    }
}

/// The kubelet's admission of a resize on this node (`canResizePod`): the pod's requests
/// after it must fit the node's capacity (`cpu_milli`, `memory` bytes), else the resize is
/// `Infeasible` with this message. (One pod per node here: nothing else can make it
/// `Deferred`.)
pub fn admit_resize(allocation: &Allocation, cpu_milli: u64, memory: u64) -> Result<(), String> {
    let pod = if allocation.pod_level {
        allocation.pod
    } else {
        pod_effective(&allocation.containers)
    };
    let cpu = pod.cpu_request.unwrap_or(0);
    let mem = pod.memory_request.unwrap_or(0);
    if mem > memory {
        Err(format!(
            "Node didn't have enough capacity: memory, requested: {mem}, capacity: {memory}"
        ))
    } else if cpu > cpu_milli {
        Err(format!(
            "Node didn't have enough capacity: cpu, requested: {cpu}, capacity: {cpu_milli}"
        ))
    } else {
        Ok(())
    }
}

/// CPU in the API's canonical form: `500m`, `2`.
pub fn cpu_text(milli: u64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Memory in the API's canonical binary form: `128Mi`, or bytes.
pub fn memory_text(bytes: u64) -> String {
    for (suffix, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `r` as the API shows resources (`containerStatuses[].resources`): requests and limits of
/// cpu and memory that are set.
pub fn requirements(r: &Resources) -> ResourceRequirements {
    let map = |cpu: Option<u64>, memory: Option<u64>| {
        let mut m = std::collections::BTreeMap::new();
        if let Some(c) = cpu {
            m.insert("cpu".to_string(), K8sQuantity(cpu_text(c)));
        }
        if let Some(b) = memory {
            m.insert("memory".to_string(), K8sQuantity(memory_text(b)));
        }
        (!m.is_empty()).then_some(m)
    };
    ResourceRequirements {
        requests: map(r.cpu_request, r.memory_request),
        limits: map(r.cpu_limit, r.memory_limit),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    const GUARANTEED: &str = "containers:\n- name: app\n  resources: {limits: {cpu: 500m, memory: 64Mi}}\n  resizePolicy: [{resourceName: memory, restartPolicy: RestartContainer}]\n";

    fn messages(old: &str, new: &str) -> Vec<String> {
        check_resize(&spec(old), &spec(new))
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    #[test]
    fn qos_classes() {
        assert_eq!(qos_class(&spec(GUARANTEED)), QosClass::Guaranteed);
        let burstable = "containers:\n- name: a\n  resources: {requests: {cpu: 100m}}\n";
        assert_eq!(qos_class(&spec(burstable)), QosClass::Burstable);
        assert_eq!(
            qos_class(&spec("containers:\n- name: a\n")),
            QosClass::BestEffort
        );
        // Resources of the pod's own class it, whatever its containers say (KEP-2837).
        let pod = "resources: {limits: {cpu: '1', memory: 64Mi}}\ncontainers:\n- name: a\n  resources: {requests: {cpu: 100m}}\n";
        assert_eq!(qos_class(&spec(pod)), QosClass::Guaranteed);
        let pod = "resources: {requests: {memory: 64Mi}}\ncontainers:\n- name: a\n  resources: {limits: {cpu: '1', memory: 64Mi}}\n";
        assert_eq!(qos_class(&spec(pod)), QosClass::Burstable);
    }

    #[test]
    fn the_api_servers_resize_checks() {
        let bigger = "containers:\n- name: app\n  resources: {limits: {cpu: '1', memory: 128Mi}}\n  resizePolicy: [{resourceName: memory, restartPolicy: RestartContainer}]\n";
        assert!(messages(GUARANTEED, bigger).is_empty());
        // Guaranteed to Burstable.
        let burst = "containers:\n- name: app\n  resources: {limits: {cpu: '1', memory: 128Mi}, requests: {cpu: 500m}}\n  resizePolicy: [{resourceName: memory, restartPolicy: RestartContainer}]\n";
        assert_eq!(
            messages(GUARANTEED, burst),
            ["spec: Invalid value: \"Guaranteed\": Pod QOS Class may not change as a result of resizing"]
        );
        let removed = "containers:\n- name: app\n  resources: {requests: {cpu: 500m, memory: 64Mi}}\n  resizePolicy: [{resourceName: memory, restartPolicy: RestartContainer}]\n";
        assert_eq!(
            messages(GUARANTEED, removed),
            [
                "spec.containers[0].resources.limits[cpu]: Forbidden: resource limits cannot be removed",
                "spec.containers[0].resources.limits[memory]: Forbidden: resource limits cannot be removed"
            ]
        );
        let other = "containers:\n- name: app\n  resources: {limits: {cpu: 500m, memory: 64Mi, ephemeral-storage: 1Gi}}\n  resizePolicy: [{resourceName: memory, restartPolicy: RestartContainer}]\n";
        assert_eq!(
            messages(GUARANTEED, other),
            ["spec: Forbidden: only cpu and memory resources are mutable"]
        );
        let policy = "containers:\n- name: app\n  resources: {limits: {cpu: 500m, memory: 64Mi}}\n";
        assert_eq!(
            messages(GUARANTEED, policy),
            ["spec: Forbidden: only cpu and memory resources are mutable"]
        );
        let over = "containers:\n- name: app\n  resources: {limits: {cpu: 500m, memory: 64Mi}, requests: {cpu: '2'}}\n";
        let old = "containers:\n- name: app\n  resources: {limits: {cpu: 500m, memory: 64Mi}, requests: {cpu: 100m}}\n";
        assert_eq!(
            messages(old, over),
            ["spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 500m"]
        );
        let init = "initContainers:\n- name: setup\n  resources: {requests: {cpu: 100m}}\ncontainers:\n- name: app\n  resources: {requests: {cpu: 100m}}\n";
        let init2 = "initContainers:\n- name: setup\n  resources: {requests: {cpu: 200m}}\ncontainers:\n- name: app\n  resources: {requests: {cpu: 100m}}\n";
        assert_eq!(
            messages(init, init2),
            ["spec.initContainers[0].resources: Forbidden: resources for non-sidecar init containers are immutable"]
        );
    }

    #[test]
    fn the_kubelets_resize_actions() {
        let policies: Vec<ContainerResizePolicy> = vec![ContainerResizePolicy {
            resource_name: "memory".into(),
            restart_policy: "RestartContainer".into(),
        }];
        let r = |cpu: u64, mem: u64| Resources {
            cpu_request: Some(cpu),
            cpu_limit: Some(cpu),
            memory_request: Some(mem),
            memory_limit: Some(mem),
        };
        assert_eq!(
            resize_action(&policies, &r(500, 64), &r(500, 64)),
            ResizeAction::None
        );
        assert_eq!(
            resize_action(&policies, &r(500, 64), &r(900, 64)),
            ResizeAction::InPlace
        );
        assert_eq!(
            resize_action(&policies, &r(500, 64), &r(900, 128)),
            ResizeAction::Restart
        );
        assert_eq!(
            resize_action(&[], &r(500, 64), &r(500, 128)),
            ResizeAction::InPlace
        );
        // A memory request is in no cgroup.
        let mut more = r(500, 64);
        more.memory_request = Some(32);
        assert_eq!(
            resize_action(&policies, &r(500, 64), &more),
            ResizeAction::None
        );
        // Below the smallest shares, requests are the same.
        let tiny = |c| Resources {
            cpu_request: Some(c),
            ..Default::default()
        };
        assert_eq!(resize_action(&[], &tiny(1), &tiny(2)), ResizeAction::None);
    }

    #[test]
    fn admission_against_the_nodes_capacity() {
        let a = super::super::resources::allocate(&spec(
            "containers:\n- name: a\n  resources: {requests: {cpu: '3', memory: 1Gi}}\n",
        ));
        assert_eq!(admit_resize(&a, 4000, 8 << 30), Ok(()));
        assert_eq!(
            admit_resize(&a, 2000, 8 << 30).unwrap_err(),
            "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"
        );
        assert_eq!(
            admit_resize(&a, 4000, 1 << 29).unwrap_err(),
            "Node didn't have enough capacity: memory, requested: 1073741824, capacity: 536870912"
        );
    }

    #[test]
    fn canonical_quantities() {
        assert_eq!(cpu_text(500), "500m");
        assert_eq!(cpu_text(2000), "2");
        assert_eq!(memory_text(128 << 20), "128Mi");
        assert_eq!(memory_text(1 << 30), "1Gi");
        assert_eq!(memory_text(1000), "1000");
    }
}
