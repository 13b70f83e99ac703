//! `hostAliases`, `dnsPolicy` and `dnsConfig` as the API server checks them
//! (`ValidateHostAliases`, `validateDNSPolicy`, `validatePodDNSConfig`; search domains with the
//! relaxed rules of Kubernetes 1.34: `.` alone, and `_` in a label).

use k8s_openapi::api::core::v1::PodSpec;

use super::super::dns::{MAX_NAMESERVERS, MAX_SEARCHES, MAX_SEARCH_CHARS};
use super::{dns_subdomain, Problems};

pub(super) fn validate_dns(spec: &PodSpec, p: &mut Problems<'_>) {
    for (i, alias) in spec.host_aliases.iter().flatten().enumerate() {
        if let Some(why) = ip_address(&alias.ip) {
            p.push(
                &format!("hostAliases[{i}].ip"),
                format!("Invalid value: {:?}: {why}", alias.ip),
            );
        }
        for (j, name) in alias.hostnames.iter().flatten().enumerate() {
            if let Some(why) = dns_subdomain(name) {
                p.push(
                    &format!("hostAliases[{i}].hostnames[{j}]"),
                    format!("Invalid value: {name:?}: {why}"),
                );
            }
        }
    }
    let policy = spec.dns_policy.as_deref();
    if let Some(v) = policy {
        if !matches!(
            v,
            // "" is what the API server defaults to "ClusterFirst".
            "" | "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None"
        ) {
            p.push(
                "dnsPolicy",
                format!("Unsupported value: {v:?}: supported values: \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\""),
            );
        }
    }
    let config = spec.dns_config.as_ref();
    if policy == Some("None") {
        let Some(config) = config else {
            p.push(
                "dnsConfig",
                "Required value: must provide `dnsConfig` when `dnsPolicy` is None",
            );
            return;
        };
        if config.nameservers.as_ref().is_none_or(Vec::is_empty) {
            p.push(
                "dnsConfig.nameservers",
                "Required value: must provide at least one DNS nameserver when `dnsPolicy` is None",
            );
            return;
        }
    }
    let Some(config) = config else { return };
    let servers = config.nameservers.as_deref().unwrap_or_default();
    if servers.len() > MAX_NAMESERVERS {
        p.push(
            "dnsConfig.nameservers",
            format!(
                "Invalid value: {servers:?}: must not have more than {MAX_NAMESERVERS} nameservers"
            ),
        );
    }
    for (i, s) in servers.iter().enumerate() {
        if let Some(why) = ip_address(s) {
            p.push(
                &format!("dnsConfig.nameservers[{i}]"),
                format!("Invalid value: {s:?}: {why}"),
            );
        }
    }
    let searches = config.searches.as_deref().unwrap_or_default();
    if searches.len() > MAX_SEARCHES {
        p.push(
            "dnsConfig.searches",
            format!(
                "Invalid value: {searches:?}: must not have more than {MAX_SEARCHES} search paths"
            ),
        );
    }
    if searches.join(" ").len() > MAX_SEARCH_CHARS {
        p.push(
            "dnsConfig.searches",
            format!("Invalid value: {searches:?}: must not have more than {MAX_SEARCH_CHARS} characters (including spaces) in the search list"),
        );
    }
    for (i, s) in searches.iter().enumerate() {
        if s == "." {
            continue;
        }
        if let Some(why) = search_domain(s.strip_suffix('.').unwrap_or(s)) {
            p.push(
                &format!("dnsConfig.searches[{i}]"),
                format!("Invalid value: {s:?}: {why}"),
            );
        }
    }
    for (i, o) in config.options.iter().flatten().enumerate() {
        if o.name.as_deref().is_none_or(str::is_empty) {
            p.push(
                &format!("dnsConfig.options[{i}]"),
                "Required value: must not be empty",
            );
        }
    }
}

/// An IP address as the API server still reads these older fields: IPv4 with leading zeros
/// too (`010.001.002.003`).
fn ip_address(s: &str) -> Option<&'static str> {
    let sloppy_v4 = || {
        let parts: Vec<&str> = s.split('.').collect();
        parts.len() == 4
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.len() <= 3
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && p.parse::<u16>().is_ok_and(|n| n <= 255)
            })
    };
    match s.parse::<std::net::IpAddr>().is_ok() || sloppy_v4() {
        true => None,
        false => Some("must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"),
    }
}

/// A search domain: an RFC 1123 subdomain whose labels may also hold `_` (not at their end).
fn search_domain(s: &str) -> Option<&'static str> {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b[b.len() - 1].is_ascii_alphanumeric()
    };
    if s.len() > 253 {
        Some("must be no more than 253 characters")
    } else if !s.split('.').all(label_ok) {
        Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")
    } else {
        None
    }
}
