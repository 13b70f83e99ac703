//! A container's environment as the kubelet resolves it: `envFrom` sources, `env` entries with
//! `$(VAR)` expansion, `valueFrom` (ConfigMap and Secret keys, the downward API's fields and
//! resources).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar};

use super::plan::{HostFacts, PodFacts, POD_IP};
use super::Manifest;

/// The container's environment in the kubelet's order: `envFrom` sources first, then `env`
/// entries, each of which may refer to earlier ones with `$(VAR)`. A later definition wins.
pub(super) fn resolve_env(
    c: &Container,
    manifest: &Manifest,
    pod: &PodFacts<'_>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| match env
        .iter_mut()
        .find(|(name, _)| *name == k)
    {
        Some(slot) => slot.1 = v,
        None => env.push((k, v)),
    };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        // envFrom takes a ConfigMap's `data` only, as the kubelet does.
        if let Some(r) = &from.config_map_ref {
            for (k, v) in manifest
                .config_map(&r.name)
                .and_then(|m| m.data.as_ref())
                .into_iter()
                .flatten()
            {
                set(&mut env, format!("{prefix}{k}"), v.clone());
            }
        }
        if let Some(r) = &from.secret_ref {
            for (k, v) in manifest.secret_data(&r.name).into_iter().flatten() {
                set(&mut env, format!("{prefix}{k}"), v);
            }
        }
    }
    for var in c.env.iter().flatten() {
        if let Some(value) = env_value(var, c, manifest, pod, &env) {
            set(&mut env, var.name.clone(), value);
        }
    }
    env
}

fn env_value(
    var: &EnvVar,
    c: &Container,
    manifest: &Manifest,
    pod: &PodFacts<'_>,
    earlier: &[(String, String)],
) -> Option<String> {
    let Some(from) = &var.value_from else {
        let vars: BTreeMap<&str, &str> = earlier
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        return Some(expand(var.value.as_deref().unwrap_or(""), &vars));
    };
    if let Some(r) = &from.config_map_key_ref {
        return manifest.config_map_value(&r.name, &r.key);
    }
    if let Some(r) = &from.secret_key_ref {
        return manifest.secret_data(&r.name)?.remove(&r.key);
    }
    if let Some(f) = &from.field_ref {
        return field_value(&f.field_path, pod);
    }
    if let Some(r) = &from.resource_field_ref {
        return Some(resource_field(r, c, manifest, pod));
    }
    None
}

/// A `fieldRef`'s value (environment variables and downwardAPI volumes).
pub(super) fn field_value(path: &str, pod: &PodFacts<'_>) -> Option<String> {
    let quoted = |prefix: &str| path.strip_prefix(prefix).and_then(|r| r.strip_suffix("']"));
    Some(match path {
        "metadata.name" => pod.name.to_string(),
        "metadata.namespace" => pod.namespace.to_string(),
        "metadata.uid" => pod.host.uid.clone(),
        "spec.nodeName" => pod.host.hostname.clone(),
        "spec.serviceAccountName" => pod.service_account.to_string(),
        "status.podIP" | "status.podIPs" | "status.hostIP" | "status.hostIPs" => POD_IP.to_string(),
        "metadata.labels" => format_map(pod.labels),
        "metadata.annotations" => format_map(pod.annotations),
        _ => {
            if let Some(k) = quoted("metadata.labels['") {
                pod.labels.get(k).cloned().unwrap_or_default()
            } else if let Some(k) = quoted("metadata.annotations['") {
                pod.annotations.get(k).cloned().unwrap_or_default()
            } else {
                return None;
            }
        }
    })
}

/// A `resourceFieldRef`'s value, for container `c` unless it names another.
pub(super) fn resource_field(
    r: &k8s_openapi::api::core::v1::ResourceFieldSelector,
    c: &Container,
    manifest: &Manifest,
    pod: &PodFacts<'_>,
) -> String {
    let target = match r.container_name.as_deref() {
        Some(name) if name != c.name => manifest
            .workload
            .spec
            .containers
            .iter()
            .chain(manifest.workload.spec.init_containers.iter().flatten())
            .find(|x| x.name == name)
            .unwrap_or(c),
        _ => c,
    };
    resource_value(
        target,
        &r.resource,
        r.divisor.as_ref().map(|d| d.0.as_str()),
        pod.host,
    )
}

/// `limits.cpu`, `requests.memory` … as the downward API reports them: divided by the divisor
/// (default 1) and rounded up; a limit that is not set reports the node's capacity.
fn resource_value(
    c: &Container,
    resource: &str,
    divisor: Option<&str>,
    host: &HostFacts,
) -> String {
    let (section, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let res = c.resources.as_ref();
    let map = match section {
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => res.and_then(|r| r.limits.as_ref()),
    };
    let value = map
        .and_then(|m| m.get(name))
        .and_then(|q| parse_quantity(&q.0))
        .unwrap_or(match name {
            "cpu" => host.cpus as f64,
            "memory" => host.memory as f64,
            _ => 0.0,
        });
    let divisor = divisor
        .and_then(parse_quantity)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    format!("{}", (value / divisor).ceil() as u64)
}

/// A Kubernetes quantity (`500m`, `1.5`, `128Mi`, `1G`, `1e3`) as a number.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, factor) in suffixes {
        if let Some(number) = s.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    s.parse::<f64>().ok()
}

fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Kubernetes' `$(VAR)` expansion: a defined VAR is replaced, an undefined one is left as
/// written, `$$` is a literal `$`, and any other `$` stays as it is.
pub fn expand(input: &str, vars: &BTreeMap<&str, &str>) -> String {
    expand_with(input, |name| vars.get(name).copied())
}

/// `expand` with `lookup` giving each variable's value (`None`: left as written).
pub fn expand_with<'v>(input: &str, mut lookup: impl FnMut(&str) -> Option<&'v str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match lookup(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_as_kubernetes_does_it() {
        let vars: BTreeMap<&str, &str> = [("A", "1"), ("B", "two")].into_iter().collect();
        let cases = [
            ("$(A)", "1"),
            ("x$(A)y$(B)", "x1ytwo"),
            ("$(C)", "$(C)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("$A", "$A"),
            ("$(A", "$(A"),
            ("cost: 5$", "cost: 5$"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &vars), want, "{input:?}");
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("128Mi"), Some(134217728.0));
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("x"), None);
    }
}
