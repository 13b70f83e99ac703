//! `volumeMounts` as the API server checks them: a volume of the pod, an absolute mount path,
//! a subPath that stays inside, `mountPropagation` and `recursiveReadOnly`.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, VolumeMount};

use super::Problems;

/// `volumeMounts`: a volume of the pod, an absolute mount path, a subPath that stays inside.
pub(super) fn validate_mounts(
    c: &Container,
    path: &str,
    volumes: &BTreeSet<&str>,
    p: &mut Problems<'_>,
) {
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        if !volumes.contains(m.name.as_str()) {
            p.push(
                &format!("{path}.volumeMounts[{i}].name"),
                format!("Not found: {:?}: no volume of that name", m.name),
            );
        }
        // validateLocalDescendingPath: relative, and no `..` element; subPathExpr too, as
        // written (what it expands to is checked at each start).
        let sub_path = m.sub_path.as_deref().filter(|s| !s.is_empty());
        let expr = m.sub_path_expr.as_deref().filter(|s| !s.is_empty());
        for (field, sub) in [("subPath", sub_path), ("subPathExpr", expr)] {
            let Some(sub) = sub else { continue };
            let at = format!("{path}.volumeMounts[{i}].{field}");
            if sub.starts_with('/') {
                p.push(
                    &at,
                    format!("Invalid value: {sub:?}: must be a relative path"),
                );
            } else if sub.split('/').any(|e| e == "..") {
                p.push(
                    &at,
                    format!("Invalid value: {sub:?}: must not contain '..'"),
                );
            }
        }
        if let (Some(_), Some(expr)) = (sub_path, expr) {
            p.push(
                &format!("{path}.volumeMounts[{i}].subPathExpr"),
                format!("Invalid value: {expr:?}: subPathExpr and subPath are mutually exclusive"),
            );
        }
        if !m.mount_path.starts_with('/') {
            p.push(
                &format!("{path}.volumeMounts[{i}].mountPath"),
                format!(
                    "Invalid value: {:?}: must be an absolute path",
                    m.mount_path
                ),
            );
        }
        let at = format!("{path}.volumeMounts[{i}]");
        validate_propagation(c, m, &at, p);
        validate_recursive_read_only(m, &at, p);
    }
}

/// `mountPropagation`: one of the API's values, `Bidirectional` for a privileged container
/// only (`validateMountPropagation`); and `Bidirectional` is not applied here.
fn validate_propagation(c: &Container, m: &VolumeMount, at: &str, p: &mut Problems<'_>) {
    let Some(mode) = m.mount_propagation.as_deref() else {
        return;
    };
    let at = format!("{at}.mountPropagation");
    match mode {
        "None" | "HostToContainer" => {}
        "Bidirectional" => {
            let sc = c.security_context.as_ref();
            if sc.and_then(|s| s.privileged) != Some(true) {
                p.push(
                    &at,
                    "Forbidden: Bidirectional mount propagation is available only to privileged containers",
                );
            } else {
                // Its mounts would have to join the host's peer group, which the container's
                // own root (made private so that nothing of it reaches the host) cuts.
                p.push(
                    &at,
                    "Unsupported value: \"Bidirectional\": podvisor does not propagate a container's mounts back to the host (\"HostToContainer\" and \"None\" are supported)",
                );
            }
        }
        v => p.push(
            &at,
            format!("Unsupported value: {v:?}: supported values: \"Bidirectional\", \"HostToContainer\", \"None\""),
        ),
    }
}

/// `recursiveReadOnly` (`validateMountRecursiveReadOnly`): `IfPossible` and `Enabled` only on
/// a `readOnly` mount without propagation.
fn validate_recursive_read_only(m: &VolumeMount, at: &str, p: &mut Problems<'_>) {
    let Some(mode) = m.recursive_read_only.as_deref() else {
        return;
    };
    let at = format!("{at}.recursiveReadOnly");
    match mode {
        "Disabled" => {}
        "IfPossible" | "Enabled" => {
            if m.read_only != Some(true) {
                p.push(&at, "Forbidden: may only be specified when readOnly is true");
            }
            if m.mount_propagation.as_deref().is_some_and(|v| v != "None") {
                p.push(
                    &at,
                    "Forbidden: may only be specified when mountPropagation is None or not specified",
                );
            }
        }
        v => p.push(
            &at,
            format!("Unsupported value: {v:?}: supported values: \"Disabled\", \"Enabled\", \"IfPossible\""),
        ),
    }
}
