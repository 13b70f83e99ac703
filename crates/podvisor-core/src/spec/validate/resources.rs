//! Resources: names, quantities in the API's grammar, requests at most limits, what a kernel
//! can enforce; pod-level resources (KEP-2837) against the containers'.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::Problems;

/// `resources`, as `ValidateResourceRequirements` (pkg/apis/core/validation/validation.go):
/// standard names, quantities in the API's grammar, nothing negative, requests at most their
/// limits; plus what a kernel cannot enforce (a memory limit under one page).
pub(super) fn validate_resources(c: &Container, path: &str, p: &mut Problems<'_>) {
    if let Some(r) = &c.resources {
        validate_requirements(r, &format!("{path}.resources"), false, p);
    }
}

/// `resizePolicy` (KEP-1287): cpu and memory once each, `NotRequired` or `RestartContainer`;
/// only `NotRequired` in a pod that never restarts, none on a regular init container (it is
/// never resized).
pub(super) fn validate_resize_policy(
    c: &Container,
    path: &str,
    plain_init: bool,
    never: bool,
    p: &mut Problems<'_>,
) {
    let Some(policies) = &c.resize_policy else {
        return;
    };
    if plain_init {
        p.push(
            &format!("{path}.resizePolicy"),
            "Forbidden: may not be set for non-sidecar init containers",
        );
        return;
    }
    let mut seen = Vec::new();
    for (i, policy) in policies.iter().enumerate() {
        let at = format!("{path}.resizePolicy[{i}]");
        let name = policy.resource_name.as_str();
        if !matches!(name, "cpu" | "memory") {
            p.push(
                &format!("{at}.resourceName"),
                format!("Unsupported value: {name:?}: supported values: \"cpu\", \"memory\""),
            );
        } else if seen.contains(&name) {
            p.push(
                &format!("{at}.resourceName"),
                format!("Duplicate value: {name:?}"),
            );
        }
        seen.push(name);
        let restart = policy.restart_policy.as_str();
        match restart {
            "NotRequired" => {}
            "RestartContainer" if never => p.push(
                &format!("{at}.restartPolicy"),
                "Invalid value: \"RestartContainer\": must be 'NotRequired' when `restartPolicy` is 'Never'",
            ),
            "RestartContainer" => {}
            other => p.push(
                &format!("{at}.restartPolicy"),
                format!("Unsupported value: {other:?}: supported values: \"NotRequired\", \"RestartContainer\""),
            ),
        }
    }
}

/// `resources` at `path`, of a container or (`pod_level`) of the pod, which may name only
/// cpu and memory (KEP-2837).
pub(super) fn validate_requirements(
    r: &k8s_openapi::api::core::v1::ResourceRequirements,
    path: &str,
    pod_level: bool,
    p: &mut Problems<'_>,
) {
    use crate::spec::resources::{Quantity, QuantityError};
    let mut parsed = |section: &str, map: Option<&BTreeMap<String, _>>| {
        let mut out = BTreeMap::new();
        for (name, q) in map.into_iter().flatten() {
            let q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity = q;
            let at = format!("{path}.{section}.{name}");
            let standard = matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
                || name.starts_with("hugepages-");
            if pod_level && !matches!(name.as_str(), "cpu" | "memory") {
                p.push(
                    &at,
                    format!("Unsupported value: {name:?}: supported values: \"cpu\", \"memory\""),
                );
                continue;
            }
            if !standard && !name.contains('/') {
                p.push(
                    &at,
                    format!("Invalid value: {name:?}: must be a standard resource for containers"),
                );
                continue;
            }
            match Quantity::parse(&q.0) {
                Ok(v) => {
                    out.insert(name.clone(), (v, q.0.clone()));
                }
                Err(e @ QuantityError::Negative) | Err(e @ QuantityError::TooLarge) => {
                    p.push(&at, format!("Invalid value: {:?}: {e}", q.0))
                }
                Err(e @ QuantityError::Syntax) => {
                    p.push(&at, format!("Invalid value: {:?}: {e}", q.0))
                }
            }
        }
        out
    };
    let limits = parsed("limits", r.limits.as_ref());
    let requests = parsed("requests", r.requests.as_ref());
    for (name, (request, text)) in &requests {
        if let Some((limit, limit_text)) = limits.get(name) {
            if request > limit {
                p.push(
                    &format!("{path}.requests"),
                    format!("Invalid value: {text:?}: must be less than or equal to {name} limit of {limit_text}"),
                );
            }
        }
    }
    if let Some((limit, text)) = limits.get("memory") {
        if (1..PAGE).contains(&limit.value()) {
            p.push(
                &format!("{path}.limits.memory"),
                format!("Invalid value: {text:?}: a memory limit below one page (4Ki) cannot be enforced by the kernel"),
            );
        }
    }
}

/// Pod-level resources against the containers' (KEP-2837): no container's limit above the
/// pod's, the containers' aggregate request (init containers and sidecars counted as for
/// scheduling) not above the pod's request.
pub(super) fn validate_pod_resources(spec: &PodSpec, p: &mut Problems<'_>) {
    use crate::spec::resources::{pod_effective, Resources};
    let pod = Resources::of(spec.resources.as_ref());
    let mut each = Vec::new();
    for (at, kind, c) in crate::spec::containers_in_order(spec, "") {
        let at = at.trim_start_matches('.');
        let r = Resources::of(c.resources.as_ref());
        for (name, own, limit) in [
            ("cpu", r.cpu_limit, pod.cpu_limit),
            ("memory", r.memory_limit, pod.memory_limit),
        ] {
            if let (Some(own), Some(limit)) = (own, limit) {
                if own > limit {
                    p.push(
                        &format!("{at}.resources.limits.{name}"),
                        format!("Invalid value: {own}: must be less than or equal to the pod's {name} limit of {limit} ({})", unit(name)),
                    );
                }
            }
        }
        each.push((kind, r));
    }
    let aggregate = pod_effective(&each);
    let explicit = |name: &str| {
        (spec.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .is_some_and(|m| m.contains_key(name))
    };
    for (name, sum, request) in [
        ("cpu", aggregate.cpu_request, pod.cpu_request),
        ("memory", aggregate.memory_request, pod.memory_request),
    ] {
        if let (Some(sum), Some(request), true) = (sum, request, explicit(name)) {
            if sum > request {
                p.push(
                    &format!("resources.requests.{name}"),
                    format!("Invalid value: {request}: must be greater than or equal to the containers' aggregate {name} request of {sum} ({})", unit(name)),
                );
            }
        }
    }
}

/// The unit podvisor's resource numbers are in.
fn unit(name: &str) -> &'static str {
    match name {
        "cpu" => "millicores",
        _ => "bytes",
    }
}

/// The smallest memory limit a kernel can enforce.
const PAGE: u64 = 4096;
