//! Probes and the lifecycle: handlers, thresholds, named ports, probe-level grace, hooks and
//! the stop signal (pkg/apis/core/validation/validation.go).

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Problems;

/// Probes and lifecycle hooks, which a plain init container may not have, and the stop
/// signal (`os`: the pod's `spec.os.name`).
pub(super) fn validate_probes_and_hooks(
    c: &Container,
    path: &str,
    plain_init: bool,
    os: Option<&str>,
    p: &mut Problems<'_>,
) {
    let at = |field: &str| format!("{path}.{field}");
    let probes = [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ];
    for (field, probe) in probes {
        let Some(probe) = probe else { continue };
        if plain_init {
            p.push(
                &at(field),
                "Forbidden: may not be set for init containers without restartPolicy=Always",
            );
            continue;
        }
        validate_probe(probe, &at(field), field, c, p);
    }
    if plain_init && c.lifecycle.is_some() {
        p.push(
            &at("lifecycle"),
            "Forbidden: may not be set for init containers without restartPolicy=Always",
        );
    }
    if let Some(signal) = c.lifecycle.as_ref().and_then(|l| l.stop_signal.as_deref()) {
        validate_stop_signal(signal, &at("lifecycle.stopSignal"), os, p);
    }
}

/// `lifecycle.stopSignal` (KEP-4960): only with `spec.os.name`, and one of that OS's
/// signals (Windows: SIGKILL, SIGTERM).
fn validate_stop_signal(signal: &str, path: &str, os: Option<&str>, p: &mut Problems<'_>) {
    let supported = match os {
        None | Some("") => {
            p.push(
                path,
                "Forbidden: may not be set for containers with empty `spec.os.name`",
            );
            return;
        }
        Some("windows") => vec!["SIGKILL".to_string(), "SIGTERM".to_string()],
        Some(_) => crate::signals::linux_stop_signals(),
    };
    let supported: Vec<&str> = supported.iter().map(String::as_str).collect();
    crate::spec::security::one_of(Some(signal), &supported, path, p);
}

fn validate_probe(probe: &Probe, path: &str, kind: &str, c: &Container, p: &mut Problems<'_>) {
    let at = |field: &str| format!("{path}.{field}");
    let handlers = [
        probe.exec.is_some(),
        probe.http_get.is_some(),
        probe.tcp_socket.is_some(),
        probe.grpc.is_some(),
    ];
    match handlers.iter().filter(|h| **h).count() {
        0 => p.push(
            path,
            "Required value: must specify a handler type (exec, httpGet, tcpSocket or grpc)",
        ),
        1 => {}
        _ => p.push(path, "Forbidden: may not specify more than 1 handler type"),
    }
    for (field, value) in [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ] {
        if value.is_some_and(|v| v < 0) {
            p.push(
                &at(field),
                "Invalid value: must be greater than or equal to 0",
            );
        }
    }
    if kind != "readinessProbe" && probe.success_threshold.is_some_and(|v| v != 1) {
        p.push(&at("successThreshold"), "Invalid value: must be 1");
    }
    match (kind, probe.termination_grace_period_seconds) {
        ("readinessProbe", Some(_)) => p.push(
            &at("terminationGracePeriodSeconds"),
            "Invalid value: must not be set for readinessProbes",
        ),
        (_, Some(g)) if g <= 0 => p.push(
            &at("terminationGracePeriodSeconds"),
            "Invalid value: must be greater than 0",
        ),
        _ => {}
    }
    let named_port = |port: &IntOrString, field: &str, p: &mut Problems<'_>| match port {
        IntOrString::Int(n) if !(1..=65535).contains(n) => {
            p.push(
                field,
                format!("Invalid value: {n}: must be between 1 and 65535, inclusive"),
            );
        }
        IntOrString::String(name)
            if !c
                .ports
                .iter()
                .flatten()
                .any(|cp| cp.name.as_deref() == Some(name.as_str())) =>
        {
            p.push(
                field,
                format!("Invalid value: {name:?}: no container port of that name"),
            );
        }
        _ => {}
    };
    if let Some(h) = &probe.http_get {
        named_port(&h.port, &format!("{path}.httpGet.port"), p);
    }
    if let Some(t) = &probe.tcp_socket {
        named_port(&t.port, &format!("{path}.tcpSocket.port"), p);
    }
    if let Some(g) = &probe.grpc {
        if !(1..=65535).contains(&g.port) {
            p.push(
                &format!("{path}.grpc.port"),
                format!(
                    "Invalid value: {}: must be between 1 and 65535, inclusive",
                    g.port
                ),
            );
        }
    }
}
