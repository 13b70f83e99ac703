//! What the node decides about a pod before anything of it runs: the API server's checks of
//! `spec.os`, then the kubelet's admission of a pod's OS (pkg/kubelet/lifecycle/predicate.go:
//! the pod's `os.name`, and its `kubernetes.io/os` label, against the node's OS), and the
//! resource claims that no driver here can prepare. A pod the kubelet would not admit is
//! refused here with the kubelet's reason, before anything starts.

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::super::Workload;
use super::Problems;

/// The OS of this node, as a pod's `spec.os.name` and the `kubernetes.io/os` label spell it.
const NODE_OS: &str = "linux";

/// The well-known label naming a node's (and a pod's) OS.
const OS_LABEL: &str = "kubernetes.io/os";

/// The pod spec's part: `os` and `resourceClaims` (prefix: the spec's path).
pub(super) fn validate_admission(spec: &PodSpec, p: &mut Problems<'_>) {
    if let Some(os) = &spec.os {
        match os.name.as_str() {
            "" => p.push("os.name", "Required value: cannot be empty"),
            NODE_OS => {}
            "windows" => p.push(
                "os.name",
                format!(
                    "PodOSNotSupported: Failed to admit pod as the OS field doesn't match node OS: \
                     the pod is for \"windows\", this node runs {NODE_OS:?}"
                ),
            ),
            other => p.push(
                "os",
                format!("Unsupported value: {other:?}: supported values: \"linux\", \"windows\""),
            ),
        }
    }
    for (i, claim) in spec.resource_claims.iter().flatten().enumerate() {
        p.push(
            &format!("resourceClaims[{i}]"),
            format!(
                "Forbidden: claim {:?}: podvisor has no dynamic resource allocation (no driver \
                 here prepares a ResourceClaim), so the pod's containers could not get what it \
                 claims",
                claim.name
            ),
        );
    }
}

/// A container's `resources.claims` (prefix: the spec's path; `at`: the container's path).
pub(super) fn validate_container_claims(c: &Container, at: &str, p: &mut Problems<'_>) {
    let claims = (c.resources.as_ref()).and_then(|r| r.claims.as_deref());
    for (i, claim) in claims.unwrap_or_default().iter().enumerate() {
        p.push(
            &format!("{at}.resources.claims[{i}]"),
            format!(
                "Forbidden: claim {:?}: podvisor has no dynamic resource allocation",
                claim.name
            ),
        );
    }
}

/// The pod's `kubernetes.io/os` label (prefix: none): the kubelet refuses a pod whose label
/// names another OS than the node's (`PodOSSelectorNodeLabelDoesNotMatch`).
pub(super) fn validate_os_label(w: &Workload, p: &mut Problems<'_>) {
    let (at, meta) = match &w.template_metadata {
        Some(m) => ("spec.template.metadata", m),
        None => ("metadata", &w.metadata),
    };
    let label = (meta.labels.as_ref()).and_then(|l| l.get(OS_LABEL));
    if let Some(os) = label.filter(|os| *os != NODE_OS) {
        p.push(
            &format!("{at}.labels.{OS_LABEL}"),
            format!(
                "PodOSSelectorNodeLabelDoesNotMatch: Failed to admit pod as the `{OS_LABEL}` \
                 label doesn't match node label: the pod's is {os:?}, this node's {NODE_OS:?}"
            ),
        );
    }
}
