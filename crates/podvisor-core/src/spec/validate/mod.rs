//! The API server's checks for the fields podvisor uses, plus podvisor's own (a container
//! must have a `command`: images are not pulled, so their entrypoints are unknown). Every
//! problem is collected, each with its field path and position.
//!
//! Rules and messages follow pkg/apis/core/validation/validation.go where it has them.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};

use super::{Manifest, Problems, SpecError, WorkloadKind};

mod admission;
mod dns;
mod mounts;
mod probes;
mod resources;

use mounts::validate_mounts;
use probes::validate_probes_and_hooks;
use resources::{
    validate_pod_resources, validate_requirements, validate_resize_policy, validate_resources,
};

/// `resources` at `path` as at creation (a resize's new resources are checked the same way).
pub(crate) fn resources_at(
    r: &k8s_openapi::api::core::v1::ResourceRequirements,
    path: &str,
    p: &mut Problems<'_>,
) {
    validate_requirements(r, path, false, p);
}

/// Adds every problem of `manifest` to `errors`.
pub fn validate(manifest: &Manifest, errors: &mut Vec<SpecError>) {
    let doc = &manifest.documents[manifest.workload_doc];
    let w = &manifest.workload;
    let mut top = Problems {
        doc,
        prefix: String::new(),
        errors,
    };
    match w.metadata.name.as_deref() {
        None | Some("") => top.push("metadata.name", "Required value: a name for the pod"),
        Some(name) => {
            if let Some(why) = dns_subdomain(name) {
                top.push("metadata.name", format!("Invalid value: {name:?}: {why}"));
            }
        }
    }
    for (at, meta) in [
        ("metadata", Some(&w.metadata)),
        ("spec.template.metadata", w.template_metadata.as_ref()),
    ] {
        let value = meta
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(super::plan::HOST_ROOT));
        if let Some(v) = value.filter(|v| *v != "writable") {
            top.push(
                &format!("{at}.annotations.{}", super::plan::HOST_ROOT),
                format!("Unsupported value: {v:?}: supported values: \"writable\""),
            );
        }
        let root_from = meta
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(super::plan::ROOT_FROM));
        if let Some(v) = root_from.filter(|v| !matches!(v.as_str(), "host" | "image")) {
            top.push(
                &format!("{at}.annotations.{}", super::plan::ROOT_FROM),
                format!("Unsupported value: {v:?}: supported values: \"host\", \"image\""),
            );
        }
    }
    admission::validate_os_label(w, &mut top);
    let mut p = Problems {
        doc,
        prefix: w.kind.spec_path().to_string(),
        errors: top.errors,
    };
    validate_pod_spec(&w.spec, manifest, &mut p);
    if w.kind == WorkloadKind::Job {
        if let Some(policy) = w.spec.restart_policy.as_deref() {
            if policy == "Always" {
                p.push("restartPolicy", "Unsupported value: \"Always\": a Job's pod must use \"OnFailure\" or \"Never\"");
            }
        }
    }
    if let (Some(sup), Some(i)) = (&manifest.supervision, manifest.supervision_doc) {
        let mut p = Problems {
            doc: &manifest.documents[i],
            prefix: String::new(),
            errors: p.errors,
        };
        validate_supervision(sup, w, &mut p);
    }
}

fn validate_pod_spec(spec: &PodSpec, manifest: &Manifest, p: &mut Problems<'_>) {
    validate_active_deadline(spec, manifest.workload.kind, p);
    if let Some(r) = &spec.resources {
        validate_requirements(r, "resources", true, p);
        validate_pod_resources(spec, p);
    }
    if let Some(policy) = spec.restart_policy.as_deref() {
        if !matches!(policy, "Always" | "OnFailure" | "Never") {
            p.push("restartPolicy", format!("Unsupported value: {policy:?}: supported values: \"Always\", \"OnFailure\", \"Never\""));
        }
    }
    if let Some(grace) = spec.termination_grace_period_seconds {
        if grace < 0 {
            p.push(
                "terminationGracePeriodSeconds",
                "Invalid value: must be >= 0",
            );
        }
    }
    if spec.containers.is_empty() {
        p.push("containers", "Required value: at least one container");
    }
    admission::validate_admission(spec, p);
    for (i, gate) in spec.readiness_gates.iter().flatten().enumerate() {
        if let Some(why) = qualified_name(&gate.condition_type) {
            let at = format!("readinessGates[{i}].conditionType");
            p.push(
                &at,
                format!("Invalid value: {:?}: {why}", gate.condition_type),
            );
        }
    }
    validate_downward_volumes(spec, p);
    validate_ephemeral(spec, p);
    dns::validate_dns(spec, p);
    super::security::validate(spec, p);
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let provided = v.empty_dir.is_some()
            || v.host_path.is_some()
            || v.config_map.is_some()
            || v.secret.is_some()
            || v.downward_api.is_some()
            || v.projected.is_some()
            || v.image.is_some();
        if !provided {
            p.push(
                &format!("volumes[{i}]"),
                format!(
                    "Unsupported value: volume {:?}: podvisor provides emptyDir, hostPath, configMap, secret, downwardAPI, projected and image volumes",
                    v.name
                ),
            );
        }
    }
    validate_image_volumes(spec, p);
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let Some(e) = &v.empty_dir else { continue };
        if let Some(m) = e.medium.as_deref().filter(|m| !matches!(*m, "" | "Memory")) {
            p.push(
                &format!("volumes[{i}].emptyDir.medium"),
                format!("Unsupported value: {m:?}: supported values: \"\", \"Memory\""),
            );
        }
        if let Some(q) = &e.size_limit {
            if let Err(why) = super::resources::Quantity::parse(&q.0) {
                p.push(
                    &format!("volumes[{i}].emptyDir.sizeLimit"),
                    format!("Invalid value: {:?}: {why}", q.0),
                );
            }
        }
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let kind = v.host_path.as_ref().and_then(|h| h.type_.as_deref());
        if let Some(t) = kind.filter(|t| super::volumes::HostPathType::parse(t).is_none()) {
            p.push(
                &format!("volumes[{i}].hostPath.type"),
                format!("Unsupported value: {t:?}: supported values: \"\", \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\""),
            );
        }
    }
    let mut names: BTreeMap<&str, String> = BTreeMap::new();
    let volumes: BTreeSet<&str> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (format!("initContainers[{i}]"), c, true));
    let regular = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("containers[{i}]"), c, false));
    for (path, c, is_init) in init.chain(regular) {
        if let Some(first) = names.get(c.name.as_str()) {
            p.push(
                &format!("{path}.name"),
                format!("Duplicate value: {:?} (also {first})", c.name),
            );
        } else {
            names.insert(&c.name, path.clone());
        }
        let sidecar = is_init && c.restart_policy.as_deref() == Some("Always");
        validate_container(c, &path, is_init && !sidecar, manifest, &volumes, p);
    }
}

fn validate_container(
    c: &Container,
    path: &str,
    plain_init: bool,
    manifest: &Manifest,
    volumes: &BTreeSet<&str>,
    p: &mut Problems<'_>,
) {
    let at = |field: &str| format!("{path}.{field}");
    if c.name.is_empty() {
        p.push(&at("name"), "Required value");
    } else if let Some(why) = dns_label(&c.name) {
        p.push(&at("name"), format!("Invalid value: {:?}: {why}", c.name));
    }
    let w = &manifest.workload;
    let annotations = (w.template_metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .or(w.metadata.annotations.as_ref());
    if super::plan::roots_from_images(annotations) {
        if c.image.as_ref().is_none_or(|i| i.trim().is_empty()) {
            p.push(
                &at("image"),
                format!(
                    "Required value: the pod's containers run from their images (or, with \
                     the annotation {}: host, on this host's root)",
                    super::plan::ROOT_FROM
                ),
            );
        }
    } else if c.command.as_ref().is_none_or(|cmd| cmd.is_empty()) {
        p.push(
            &at("command"),
            format!(
                "Required value: the pod's containers run on this host's root ({}: host), so \
                 there is no image entrypoint to fall back on: set command, or run them from \
                 their images (without that annotation)",
                super::plan::ROOT_FROM
            ),
        );
    }
    validate_restart(c, path, p);
    validate_resources(c, path, p);
    let never = w.spec.restart_policy.as_deref() == Some("Never");
    validate_resize_policy(c, path, plain_init, never, p);
    validate_ports(c, path, p);
    for (i, env) in c.env.iter().flatten().enumerate() {
        validate_env(env, &format!("{path}.env[{i}]"), manifest, p);
    }
    validate_env_from(c, path, manifest, p);
    validate_mounts(c, path, volumes, p);
    admission::validate_container_claims(c, path, p);
    validate_termination_message(c, path, p);
    let os = (w.spec.os.as_ref()).map(|o| o.name.as_str());
    validate_probes_and_hooks(c, path, plain_init, os, p);
}

/// At most this many `restartPolicyRules` per container, and this many exit codes per rule
/// (the API server's limits).
const MAX_RESTART_RULES: usize = 20;
const MAX_EXIT_CODE_VALUES: usize = 255;

/// The container's `restartPolicy` (`Always` on an init container makes it a sidecar) and its
/// `restartPolicyRules` (KEP-5307, with the `RestartAllContainers` action of KEP-5532), with
/// the API server's limits and messages.
fn validate_restart(c: &Container, path: &str, p: &mut Problems<'_>) {
    let at = |field: &str| format!("{path}.{field}");
    if let Some(policy) = c.restart_policy.as_deref() {
        if !matches!(policy, "Always" | "OnFailure" | "Never") {
            p.push(
                &at("restartPolicy"),
                format!(
                    "Unsupported value: {policy:?}: supported values: \"Always\", \"OnFailure\", \"Never\""
                ),
            );
        }
    }
    let rules = c.restart_policy_rules.as_deref().unwrap_or_default();
    if rules.is_empty() {
        return;
    }
    if c.restart_policy.is_none() {
        p.push(
            &at("restartPolicy"),
            "Required value: must specify restartPolicy when restart rules are used",
        );
    }
    if rules.len() > MAX_RESTART_RULES {
        p.push(
            &at("restartPolicyRules"),
            format!(
                "Too many: {}: must have at most {MAX_RESTART_RULES} items",
                rules.len()
            ),
        );
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{path}.restartPolicyRules[{i}]");
        if !matches!(rule.action.as_str(), "Restart" | "RestartAllContainers") {
            p.push(
                &format!("{at}.action"),
                format!(
                    "Unsupported value: {:?}: supported values: \"Restart\", \"RestartAllContainers\"",
                    rule.action
                ),
            );
        }
        let Some(codes) = &rule.exit_codes else {
            p.push(
                &format!("{at}.exitCodes"),
                "Required value: must be specified",
            );
            continue;
        };
        if !matches!(codes.operator.as_str(), "In" | "NotIn") {
            p.push(
                &format!("{at}.exitCodes.operator"),
                format!(
                    "Unsupported value: {:?}: supported values: \"In\", \"NotIn\"",
                    codes.operator
                ),
            );
        }
        let values = codes.values.as_deref().unwrap_or_default();
        if values.len() > MAX_EXIT_CODE_VALUES {
            p.push(
                &format!("{at}.exitCodes.values"),
                format!(
                    "Too many: {}: must have at most {MAX_EXIT_CODE_VALUES} items",
                    values.len()
                ),
            );
        }
    }
}

/// `ephemeralContainers`: added to a running pod by `kubectl debug`, never in a manifest
/// podvisor runs; `restartPolicy` and `restartPolicyRules` are refused on them as the API
/// server does, and the list itself because podvisor would not run it.
fn validate_ephemeral(spec: &PodSpec, p: &mut Problems<'_>) {
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let at = format!("ephemeralContainers[{i}]");
        if c.restart_policy.is_some() {
            p.push(
                &format!("{at}.restartPolicy"),
                "Forbidden: cannot be set for an Ephemeral Container",
            );
        }
        if c.restart_policy_rules
            .as_ref()
            .is_some_and(|r| !r.is_empty())
        {
            p.push(
                &format!("{at}.restartPolicyRules"),
                "Forbidden: cannot be set for an Ephemeral Container",
            );
        }
        p.push(
            &at,
            "Forbidden: ephemeral containers are added to a running pod (kubectl debug); \
             podvisor does not run them",
        );
    }
}

/// `activeDeadlineSeconds`: 1 to 2^32 - 1, and not in the template of a workload whose pods
/// run for good (the apps/v1 validation of each refuses it, in its words).
fn validate_active_deadline(spec: &PodSpec, kind: super::WorkloadKind, p: &mut Problems<'_>) {
    use super::WorkloadKind;
    let Some(s) = spec.active_deadline_seconds else {
        return;
    };
    let refused = match kind {
        WorkloadKind::Deployment => {
            Some("Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported")
        }
        WorkloadKind::StatefulSet => {
            Some("Forbidden: activeDeadlineSeconds in StatefulSet is not Supported")
        }
        WorkloadKind::DaemonSet => Some("activeDeadlineSeconds must be nil for daemon sets"),
        WorkloadKind::Pod | WorkloadKind::Job => None,
    };
    if let Some(why) = refused {
        let why = match kind {
            WorkloadKind::DaemonSet => format!("Invalid value: {s}: {why}"),
            _ => why.to_string(),
        };
        p.push("activeDeadlineSeconds", why);
    } else if !(1..=i64::from(u32::MAX)).contains(&s) {
        p.push(
            "activeDeadlineSeconds",
            format!("Invalid value: {s}: must be between 1 and 4294967295, inclusive"),
        );
    }
}

/// Port numbers, and names unique and valid (IANA_SVC_NAME).
fn validate_ports(c: &Container, path: &str, p: &mut Problems<'_>) {
    let mut port_names = BTreeSet::new();
    for (i, port) in c.ports.iter().flatten().enumerate() {
        if !(1..=65535).contains(&port.container_port) {
            p.push(
                &format!("{path}.ports[{i}].containerPort"),
                format!(
                    "Invalid value: {}: must be between 1 and 65535, inclusive",
                    port.container_port
                ),
            );
        }
        if let Some(name) = &port.name {
            if !port_names.insert(name.as_str()) {
                p.push(
                    &format!("{path}.ports[{i}].name"),
                    format!("Duplicate value: {name:?}"),
                );
            } else if let Some(why) = port_name(name) {
                p.push(
                    &format!("{path}.ports[{i}].name"),
                    format!("Invalid value: {name:?}: {why}"),
                );
            }
        }
    }
}

/// `envFrom`: the ConfigMaps and Secrets named are in this file (unless optional).
fn validate_env_from(c: &Container, path: &str, manifest: &Manifest, p: &mut Problems<'_>) {
    for (i, from) in c.env_from.iter().flatten().enumerate() {
        let at = format!("{path}.envFrom[{i}]");
        let config_map = from.config_map_ref.as_ref().map(|r| {
            let found = manifest.config_map(&r.name).is_some();
            ("configMapRef", "ConfigMap", &r.name, r.optional, found)
        });
        let secret = from.secret_ref.as_ref().map(|r| {
            let found = manifest.secret_data(&r.name).is_some();
            ("secretRef", "Secret", &r.name, r.optional, found)
        });
        for (field, kind, name, optional, found) in config_map.into_iter().chain(secret) {
            let at = format!("{at}.{field}.name");
            key_ref(p, &at, kind, name, None, optional, Some(found));
        }
    }
}

/// Image volumes as `validateImageVolumeSource`: a reference, a known pull policy.
fn validate_image_volumes(spec: &PodSpec, p: &mut Problems<'_>) {
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let Some(image) = &v.image else { continue };
        if image
            .reference
            .as_deref()
            .is_none_or(|r| r.trim().is_empty())
        {
            p.push(&format!("volumes[{i}].image.reference"), "Required value");
        }
        let policy = image.pull_policy.as_deref();
        if let Some(policy) = policy.filter(|x| !matches!(*x, "Always" | "IfNotPresent" | "Never"))
        {
            p.push(
                &format!("volumes[{i}].image.pullPolicy"),
                format!("Unsupported value: {policy:?}: supported values: \"Always\", \"IfNotPresent\", \"Never\""),
            );
        }
    }
}

/// `terminationMessagePolicy` as the API server checks it; `terminationMessagePath` must be
/// absolute, as runc refuses a mount whose destination is not (the API server lets it by).
fn validate_termination_message(c: &Container, path: &str, p: &mut Problems<'_>) {
    // "" is defaulted to File, as the API server does.
    let policy = c.termination_message_policy.as_deref();
    if let Some(policy) = policy.filter(|v| !["", "File", "FallbackToLogsOnError"].contains(v)) {
        p.push(
            &format!("{path}.terminationMessagePolicy"),
            format!("Unsupported value: {policy:?}: supported values: \"File\", \"FallbackToLogsOnError\""),
        );
    }
    let file = c.termination_message_path.as_deref().unwrap_or_default();
    if !file.is_empty() && !file.starts_with('/') {
        p.push(
            &format!("{path}.terminationMessagePath"),
            format!("Invalid value: {file:?}: must be an absolute path (the file is bound there in the container)"),
        );
    }
}

fn validate_env(env: &EnvVar, path: &str, manifest: &Manifest, p: &mut Problems<'_>) {
    if env.name.is_empty() {
        p.push(&format!("{path}.name"), "Required value");
    }
    let Some(from) = &env.value_from else { return };
    if env.value.as_ref().is_some_and(|v| !v.is_empty()) {
        p.push(
            &format!("{path}.valueFrom"),
            "Invalid value: may not be specified when `value` is not empty",
        );
    }
    if let Some(r) = &from.config_map_key_ref {
        let found = manifest
            .config_map(&r.name)
            .map(|_| manifest.config_map_value(&r.name, &r.key).is_some());
        let at = format!("{path}.valueFrom.configMapKeyRef");
        key_ref(
            p,
            &at,
            "ConfigMap",
            &r.name,
            Some(&r.key),
            r.optional,
            found,
        );
    }
    if let Some(r) = &from.secret_key_ref {
        let found = manifest
            .secret_data(&r.name)
            .map(|d| d.contains_key(&r.key));
        let at = format!("{path}.valueFrom.secretKeyRef");
        key_ref(p, &at, "Secret", &r.name, Some(&r.key), r.optional, found);
    }
    if let Some(f) = &from.field_ref {
        let supported = [
            "metadata.name",
            "metadata.namespace",
            "metadata.uid",
            "spec.nodeName",
            "spec.serviceAccountName",
            "status.podIP",
            "status.podIPs",
            "status.hostIP",
            "status.hostIPs",
        ];
        let ok = supported.contains(&f.field_path.as_str())
            || f.field_path.starts_with("metadata.labels['")
            || f.field_path.starts_with("metadata.annotations['")
            || f.field_path == "metadata.labels"
            || f.field_path == "metadata.annotations";
        if !ok {
            p.push(
                &format!("{path}.valueFrom.fieldRef.fieldPath"),
                format!("Unsupported value: {:?}", f.field_path),
            );
        }
    }
}

/// A reference to a ConfigMap or Secret (and a key of it) of this file. `found`: `None` if the
/// object is missing, else whether the key (or, without one, the object) is there.
fn key_ref(
    p: &mut Problems<'_>,
    path: &str,
    kind: &str,
    name: &str,
    key: Option<&str>,
    optional: Option<bool>,
    found: Option<bool>,
) {
    if optional.unwrap_or(false) || found == Some(true) {
        return;
    }
    let what = match (found, key) {
        (None, _) | (_, None) => format!("{kind} {name:?} is not in this file"),
        (Some(_), Some(key)) => format!("{kind} {name:?} has no key {key:?}"),
    };
    p.push(path, format!("Not found: {what}"));
}

/// The Supervision's fields, checked through the core's own types so that `run`, `init` and
/// the controller refuse the same values with the same words.
fn validate_supervision(sup: &super::Supervision, w: &super::Workload, p: &mut Problems<'_>) {
    let all: BTreeSet<&str> = w
        .spec
        .containers
        .iter()
        .chain(w.spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    if let Some(s) = &sup.spec.staged_instrumentation {
        for (i, name) in s.containers.iter().flatten().enumerate() {
            if !all.contains(name.as_str()) {
                p.push(
                    &format!("spec.stagedInstrumentation.containers[{i}]"),
                    format!("Not found: no container {name:?} in the pod"),
                );
            }
        }
    }
    for (field, message) in sup.problems() {
        p.push(&field, message);
    }
}

/// RFC 1123 label: lower-case alphanumerics and '-', starting and ending alphanumeric, ≤ 63.
pub(super) fn dns_label(s: &str) -> Option<&'static str> {
    let ok_chars = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ends_ok = s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if s.len() > 63 {
        Some("must be no more than 63 characters")
    } else if !ok_chars || !ends_ok {
        Some("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character")
    } else {
        None
    }
}

/// RFC 1123 subdomain: dot-separated labels, ≤ 253.
fn dns_subdomain(s: &str) -> Option<&'static str> {
    if s.len() > 253 {
        return Some("must be no more than 253 characters");
    }
    if s.split('.').any(|l| l.is_empty() || dns_label(l).is_some()) {
        return Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character");
    }
    None
}

/// A qualified name, as label keys and condition types are (apimachinery's
/// `IsQualifiedName`): an optional RFC 1123 subdomain prefix and `/`, then a name of at most
/// 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
pub fn qualified_name(s: &str) -> Option<&'static str> {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    if let Some(why) = prefix.and_then(|p| match p.is_empty() {
        true => Some("prefix part must be non-empty"),
        false => dns_subdomain(p).map(|_| "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
    }) {
        return Some(why);
    }
    let inner = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    let ends = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    if name.is_empty() {
        Some("name part must be non-empty")
    } else if name.len() > 63 {
        Some("name part must be no more than 63 characters")
    } else if !name.bytes().all(inner) || !ends(name.bytes().next()) || !ends(name.bytes().last()) {
        Some("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")
    } else {
        None
    }
}

/// IANA service name, as for container port names: ≤ 15, lower-case alphanumerics and '-',
/// at least one letter, no leading, trailing or double '-'.
fn port_name(s: &str) -> Option<&'static str> {
    if s.len() > 15 {
        return Some("must be no more than 15 characters");
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Some("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !s.bytes().any(|b| b.is_ascii_lowercase()) {
        return Some("must contain at least one letter (a-z)");
    }
    if s.starts_with('-') || s.ends_with('-') || s.contains("--") {
        return Some("must not begin or end with a hyphen, nor contain adjacent hyphens");
    }
    None
}

/// downwardAPI items of `downwardAPI` and `projected` volumes, as `validateDownwardAPIVolumeFile`:
/// a relative path without `..`, exactly one of fieldRef and resourceFieldRef, a fieldRef the
/// volume can show, a resourceFieldRef naming a container of the pod.
fn validate_downward_volumes(spec: &PodSpec, p: &mut Problems<'_>) {
    use k8s_openapi::api::core::v1::DownwardAPIVolumeFile;
    let names: BTreeSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    let mut check = |at: String, it: &DownwardAPIVolumeFile| {
        if it.path.starts_with('/') || it.path.split('/').any(|s| s == "..") {
            p.push(
                &format!("{at}.path"),
                format!(
                    "Invalid value: {:?}: must be a relative path without '..'",
                    it.path
                ),
            );
        }
        match (&it.field_ref, &it.resource_field_ref) {
            (Some(f), None) => {
                let path = f.field_path.as_str();
                let ok = matches!(
                    path,
                    "metadata.name"
                        | "metadata.namespace"
                        | "metadata.uid"
                        | "metadata.labels"
                        | "metadata.annotations"
                ) || (path.starts_with("metadata.labels['")
                    || path.starts_with("metadata.annotations['"))
                    && path.ends_with("']");
                if !ok {
                    p.push(&format!("{at}.fieldRef.fieldPath"), format!("Unsupported value: {path:?}: supported values: \"metadata.annotations\", \"metadata.labels\", \"metadata.name\", \"metadata.namespace\", \"metadata.uid\""));
                }
            }
            (None, Some(r)) => match r.container_name.as_deref() {
                None | Some("") => p.push(
                    &format!("{at}.resourceFieldRef.containerName"),
                    "Required value",
                ),
                Some(n) if !names.contains(n) => p.push(
                    &format!("{at}.resourceFieldRef.containerName"),
                    format!("Not found: {n:?}: no container of that name"),
                ),
                Some(_) => {}
            },
            _ => p.push(
                &at,
                "Invalid value: exactly one of fieldRef and resourceFieldRef must be set",
            ),
        }
    };
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        for (j, it) in v
            .downward_api
            .iter()
            .flat_map(|d| d.items.iter().flatten())
            .enumerate()
        {
            check(format!("volumes[{i}].downwardAPI.items[{j}]"), it);
        }
        for (k, source) in v
            .projected
            .iter()
            .flat_map(|pr| pr.sources.iter().flatten())
            .enumerate()
        {
            for (j, it) in source
                .downward_api
                .iter()
                .flat_map(|d| d.items.iter().flatten())
                .enumerate()
            {
                check(
                    format!("volumes[{i}].projected.sources[{k}].downwardAPI.items[{j}]"),
                    it,
                );
            }
        }
    }
}
