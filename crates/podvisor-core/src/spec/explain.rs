//! `podvisor explain`: what a pod's settings imply, per container, before it is deployed — how
//! soon it can be Ready, how long a hang goes unnoticed and when the kill comes, the restart
//! backoff schedule, the stage schedule, and warnings (with the fix) for settings that will
//! crash-loop or never become ready.
//!
//! The arithmetic follows the kubelet's prober worker (pkg/kubelet/prober/worker.go): a probe runs every
//! `periodSeconds`, an attempt lasts up to `timeoutSeconds`, `failureThreshold` failures in a
//! row publish Failure, `successThreshold` successes publish Success, nothing runs before
//! `initialDelaySeconds`, and liveness and readiness wait for startup.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Probe};

use super::plan::probe_timing;
use super::Manifest;
use crate::backoff::BackoffPolicy;
use crate::duration::format_duration;
use crate::escalation::PodRestartPolicy;
use crate::restart::Then;
use crate::stage::{Stage, CLEAR_AFTER_RESTARTS};

use super::exits::{explain_exits, ContainerExits};

/// A probe's timing in whole seconds (as Kubernetes writes them), for the arithmetic below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Timing {
    initial_delay: u64,
    period: u64,
    timeout: u64,
    success: u64,
    failure: u64,
    /// An HTTP, TCP or gRPC probe (as opposed to exec).
    network: bool,
}

impl Timing {
    fn of(p: &Probe) -> Timing {
        // The defaults live in one place, with the run plan's.
        let t = probe_timing(p);
        Timing {
            initial_delay: t.initial_delay.as_secs(),
            period: t.period.as_secs(),
            timeout: t.timeout.as_secs(),
            success: u64::from(t.success_threshold),
            failure: u64::from(t.failure_threshold),
            network: p.exec.is_none(),
        }
    }
}

/// What `explain` says about one container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerExplanation {
    pub name: String,
    /// Earliest time from start to Ready, if everything answers at once.
    pub earliest_ready: Duration,
    /// Latest time from start to Ready for an app that becomes healthy just in time, or `None`
    /// when there is no deadline (no startup probe: readiness waits forever).
    pub latest_ready: Option<Duration>,
    /// Time the app has to pass its startup (or first liveness) checks before it is killed.
    pub startup_window: Option<Duration>,
    /// Worst case from a hang to its detection by liveness, and to the SIGKILL after it.
    pub hang_detected: Option<Duration>,
    pub hang_killed: Option<Duration>,
    /// What it runs as and may do (its securityContext), in words.
    pub security: Vec<(&'static str, String)>,
    pub warnings: Vec<Warning>,
}

/// A setting that will hurt, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub field: String,
    pub problem: String,
    pub fix: String,
}

/// The whole explanation.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    pub pod: String,
    /// The pod's namespaces, in words.
    pub namespaces: String,
    pub containers: Vec<ContainerExplanation>,
    /// Delays before restarts 1, 2, 3, … of a container that keeps crashing at once.
    pub backoff: Vec<Duration>,
    /// Where that curve comes from (the node's settings), when the caller says.
    pub backoff_from: String,
    /// With staged instrumentation: which containers, when each stage begins, the verdict.
    pub instrumentation: Option<InstrumentationExplanation>,
    /// With `podRestart`: when the whole pod restarts, and when podvisor gives up.
    pub pod_restart: Option<PodRestartPolicy>,
    /// What each container's exit leads to, per exit code (init containers included).
    pub exits: Vec<ContainerExits>,
    /// Restart rules that can never apply, change nothing, or loop.
    pub exit_warnings: Vec<Warning>,
}

/// The stage schedule of the staged containers, and how their add-on is judged.
#[derive(Debug, Clone, PartialEq)]
pub struct InstrumentationExplanation {
    pub containers: Vec<String>,
    /// (first restart count, stage, earliest time after the first start at which that restart
    /// can happen: a container that crashes at once, restarted on the backoff schedule).
    pub schedule: Vec<(u32, Stage, Duration)>,
    pub verdict_after: Duration,
}

/// The signal that stops a container, and where it comes from (KEP-4960's order).
fn stop_signal(c: &Container) -> String {
    match c.lifecycle.as_ref().and_then(|l| l.stop_signal.as_deref()) {
        Some(s) => format!("{s} (lifecycle.stopSignal; needs the gate ContainerStopSignals)"),
        None => format!(
            "{} (the image's STOPSIGNAL when it runs from an image that has one)",
            crate::signals::DEFAULT_STOP_SIGNAL
        ),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Explains a manifest. `start_time`: how long the app takes to start, if the user knows it.
pub fn explain(
    manifest: &Manifest,
    backoff: BackoffPolicy,
    start_time: Option<Duration>,
) -> Explanation {
    let spec = &manifest.workload.spec;
    let pod_grace = spec
        .termination_grace_period_seconds
        .map_or(30, |g| g.max(0) as u64);
    let mut containers = Vec::new();
    let prefix = manifest.workload.kind.spec_path();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"));
    for (i, c) in init
        .map(|(i, c)| (format!("{prefix}.initContainers[{i}]"), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("{prefix}.containers[{i}]"), c)),
        )
    {
        let mut x = explain_container(&i, c, pod_grace, start_time);
        x.security = super::security::plan(spec, c, &explain_host()).summary();
        x.security.push(("stop signal", stop_signal(c)));
        containers.push(x);
    }
    let mut delays = vec![Duration::ZERO];
    let mut d = backoff.initial;
    while delays.len() < 12 {
        delays.push(d);
        if d >= backoff.max {
            break;
        }
        d = (d * 2).min(backoff.max);
    }
    let sup = manifest.supervision.as_ref();
    let instrumentation = sup
        .and_then(|s| s.spec.staged_instrumentation.as_ref())
        .filter(|s| s.is_enabled())
        .and_then(|s| {
            let policy = s.policy().ok()?;
            let schedule = policy
                .schedule()
                .into_iter()
                .map(|(n, stage)| {
                    // Restart n comes after the waits before restarts 1..=n.
                    let mut wait = Duration::ZERO;
                    let mut d = Duration::ZERO;
                    for k in 0..n {
                        wait += d;
                        d = if k == 0 {
                            backoff.initial
                        } else {
                            (d * 2).min(backoff.max)
                        };
                    }
                    (n, stage, wait)
                })
                .collect();
            let containers = spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
                .map(|c| c.name.clone())
                .filter(|n| s.selects(n))
                .collect();
            Some(InstrumentationExplanation {
                containers,
                schedule,
                verdict_after: s.verdict_after().ok()?,
            })
        });
    let (exits, exit_warnings) = explain_exits(spec, prefix);
    let name = manifest.workload.metadata.name.clone().unwrap_or_default();
    let namespace = manifest
        .workload
        .metadata
        .namespace
        .as_deref()
        .unwrap_or("default");
    Explanation {
        namespaces: super::security::namespaces(spec, &name, namespace).summary(),
        exits,
        exit_warnings,
        pod: name,
        containers,
        backoff: delays,
        backoff_from: String::new(),
        instrumentation,
        pod_restart: sup
            .and_then(|s| s.spec.pod_restart.as_ref())
            .and_then(|r| r.policy().ok()),
    }
}

/// A host for `explain`: what `ALL` and `privileged` mean is said in words, not counted.
fn explain_host() -> super::plan::HostFacts {
    super::plan::HostFacts {
        hostname: String::new(),
        uid: String::new(),
        cpus: 0,
        memory: 0,
        all_capabilities: crate::security::CapSet::all(40),
        seccomp_default: false,
    }
}

fn explain_container(
    path: &str,
    c: &Container,
    pod_grace: u64,
    start_time: Option<Duration>,
) -> ContainerExplanation {
    let timings = Timings {
        startup: c.startup_probe.as_ref().map(Timing::of),
        readiness: c.readiness_probe.as_ref().map(Timing::of),
        liveness: c.liveness_probe.as_ref().map(Timing::of),
    };
    let Timings {
        startup,
        readiness,
        liveness,
    } = timings;
    // Startup: the first attempt at initialDelay; the last allowed one failure-1 periods later.
    let startup_done_earliest = startup.map_or(0, |s| s.initial_delay);
    let startup_done_latest =
        startup.map(|s| s.initial_delay + (s.failure - 1) * s.period + s.timeout);
    // Readiness runs at once when startup succeeds, then every period.
    let (ready_earliest, ready_latest) = match readiness {
        // No readiness probe: ready once started, at once without a startup probe.
        None => (
            secs(startup_done_earliest),
            Some(secs(startup_done_latest.unwrap_or(0))),
        ),
        Some(r) => {
            let first = startup_done_earliest.max(r.initial_delay);
            let extra = (r.success - 1) * r.period;
            (
                secs(first + extra),
                startup_done_latest.map(|s| secs(s.max(r.initial_delay) + extra + r.timeout)),
            )
        }
    };
    // The window an app has to come up: the startup probe's, else liveness's first failures.
    let startup_window = match (startup, liveness) {
        (Some(s), _) => Some(secs(s.initial_delay + s.failure * s.period)),
        (None, Some(l)) => Some(secs(l.initial_delay + l.failure * l.period)),
        (None, None) => None,
    };
    let (hang_detected, hang_killed) = match liveness {
        None => (None, None),
        Some(l) => {
            let detected = secs(l.failure * l.period + l.timeout);
            let grace = c
                .liveness_probe
                .as_ref()
                .and_then(|p| p.termination_grace_period_seconds)
                .map_or(pod_grace, |g| g.max(0) as u64)
                .max(2);
            (Some(detected), Some(detected + secs(grace)))
        }
    };

    ContainerExplanation {
        name: c.name.clone(),
        earliest_ready: ready_earliest,
        latest_ready: ready_latest,
        startup_window,
        hang_detected,
        hang_killed,
        security: Vec::new(),
        warnings: warnings(path, c, pod_grace, start_time, timings, startup_window),
    }
}

/// The container's three probes, as their timings.
#[derive(Debug, Clone, Copy)]
struct Timings {
    startup: Option<Timing>,
    readiness: Option<Timing>,
    liveness: Option<Timing>,
}

/// What is likely wrong in the container's probes and hooks, each with the field and the fix.
fn warnings(
    path: &str,
    c: &Container,
    pod_grace: u64,
    start_time: Option<Duration>,
    timings: Timings,
    startup_window: Option<Duration>,
) -> Vec<Warning> {
    let Timings {
        startup,
        readiness,
        liveness,
    } = timings;
    let mut warnings = Vec::new();
    let warn = |w: &mut Vec<Warning>, field: &str, problem: String, fix: String| {
        w.push(Warning {
            field: format!("{path}.{field}"),
            problem,
            fix,
        });
    };

    for (field, probe) in [
        ("startupProbe", startup),
        ("readinessProbe", readiness),
        ("livenessProbe", liveness),
    ] {
        let Some(p) = probe else { continue };
        if p.timeout >= p.period {
            warn(
                &mut warnings,
                &format!("{field}.timeoutSeconds"),
                format!("timeoutSeconds ({}) ≥ periodSeconds ({}): a slow answer overlaps the next attempt, so one slow moment counts as several failures", p.timeout, p.period),
                if p.period > 1 {
                    format!("set timeoutSeconds below periodSeconds, e.g. timeoutSeconds: {}", (p.period / 2).max(1))
                } else {
                    format!("raise periodSeconds above timeoutSeconds, e.g. periodSeconds: {}", p.timeout + 1)
                },
            );
        }
        if p.failure == 1 && p.network && field != "startupProbe" {
            warn(
                &mut warnings,
                &format!("{field}.failureThreshold"),
                "failureThreshold 1 on a network probe: one dropped connection or slow answer fails it".to_string(),
                "use failureThreshold: 3 (the default)".to_string(),
            );
        }
    }
    if let (Some(r), Some(l)) = (&c.readiness_probe, &c.liveness_probe) {
        if same_check(r, l) {
            warn(
                &mut warnings,
                "livenessProbe",
                "liveness and readiness probes are identical: an overloaded app is restarted instead of being taken out of rotation, which adds load elsewhere and crash-loops under pressure".to_string(),
                "make liveness check only that the process is alive (a cheaper endpoint, a higher failureThreshold)".to_string(),
            );
        }
    }
    if let (Some(start), None, Some(window)) = (start_time, startup, startup_window) {
        if window < start {
            warn(
                &mut warnings,
                "livenessProbe",
                format!(
                    "liveness can fire before the app has started: it gets {} (initialDelaySeconds + failureThreshold × periodSeconds), it needs {}",
                    format_duration(window),
                    format_duration(start)
                ),
                format!(
                    "add a startupProbe with failureThreshold × periodSeconds ≥ {}, e.g. periodSeconds: 10, failureThreshold: {}",
                    format_duration(start),
                    start.as_secs().div_ceil(10) + 1
                ),
            );
        }
    }
    if let Some(start) = start_time {
        if let (Some(_), Some(window)) = (startup, startup_window) {
            if window < start {
                warn(
                    &mut warnings,
                    "startupProbe",
                    format!("the startup probe allows {}, the app needs {}: it is killed before it starts, every time", format_duration(window), format_duration(start)),
                    "raise startupProbe.failureThreshold".to_string(),
                );
            }
        }
    }
    if let Some(pre_stop) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        if let Some(s) = hook_sleep(pre_stop) {
            if s >= pod_grace {
                warn(
                    &mut warnings,
                    "lifecycle.preStop",
                    format!("preStop sleeps {s} s but the grace period is {pod_grace} s: SIGTERM comes only 2 s before SIGKILL, so the app never shuts down cleanly"),
                    format!("raise terminationGracePeriodSeconds above {} or shorten the preStop", s + 10),
                );
            }
        }
    }
    warnings
}

fn hook_sleep(h: &LifecycleHandler) -> Option<u64> {
    h.sleep.as_ref().map(|s| s.seconds.max(0) as u64)
}

/// Same handler and same timing.
fn same_check(a: &Probe, b: &Probe) -> bool {
    a.exec == b.exec
        && a.http_get == b.http_get
        && a.tcp_socket == b.tcp_socket
        && a.grpc == b.grpc
        && Timing::of(a) == Timing::of(b)
}

impl Explanation {
    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut out = format!("pod {}\n  namespaces: {}\n", self.pod, self.namespaces);
        let d = |x: Duration| format_duration(x);
        for c in &self.containers {
            out.push_str(&format!("\ncontainer {}\n", c.name));
            let latest = c.latest_ready.map_or(
                "no limit (without a startup probe, readiness waits as long as it takes)"
                    .to_string(),
                d,
            );
            out.push_str(&format!(
                "  ready:          at the earliest {} after start; at the latest {}\n",
                d(c.earliest_ready),
                latest
            ));
            match c.startup_window {
                Some(w) => out.push_str(&format!(
                    "  startup window: {} to start before it is killed\n",
                    d(w)
                )),
                None => out.push_str("  startup window: none (no startup or liveness probe)\n"),
            }
            match (c.hang_detected, c.hang_killed) {
                (Some(det), Some(kill)) => out.push_str(&format!(
                    "  a hang:         detected within {}, killed (SIGKILL) within {}\n",
                    d(det),
                    d(kill)
                )),
                _ => out.push_str("  a hang:         never detected (no liveness probe)\n"),
            }
            for (what, how) in &c.security {
                out.push_str(&format!("  {:<15} {how}\n", format!("{what}:")));
            }
            for w in &c.warnings {
                out.push_str(&format!(
                    "  warning: {}: {}\n           fix: {}\n",
                    w.field, w.problem, w.fix
                ));
            }
        }
        self.exits_text(&mut out);
        let schedule: Vec<String> = self.backoff.iter().map(|x| d(*x)).collect();
        out.push_str(&format!(
            "\nrestart backoff (CrashLoopBackOff): {}, then every {}\n",
            schedule.join(", "),
            schedule.last().cloned().unwrap_or_default()
        ));
        if !self.backoff_from.is_empty() {
            out.push_str(&format!("  from {}\n", self.backoff_from));
        }
        if let Some(i) = &self.instrumentation {
            out.push_str(&format!(
                "\ninstrumentation stages of {}:\n",
                i.containers.join(", ")
            ));
            for (n, stage, at) in &i.schedule {
                let when = if *n == 0 {
                    "from the first start".to_string()
                } else {
                    format!(
                        "from restart {n} (at the earliest {} after the first start, if it crashes at once)",
                        d(*at)
                    )
                };
                out.push_str(&format!("  {stage:<9} {when}\n"));
            }
            out.push_str(&format!(
                "  verdict:  once Disabled, {} of running without a restart blames the add-on \
                 (InstrumentationBlamed); {CLEAR_AFTER_RESTARTS} more restarts clear it \
                 (InstrumentationCleared)\n",
                d(i.verdict_after)
            ));
        }
        if let Some(r) = &self.pod_restart {
            out.push_str(&format!(
                "\nwhole-pod restart: a container that exits after {} restarts within {} restarts \
                 the whole pod (emptyDir wiped, init containers again), at most {} times; then the \
                 pod fails (GaveUp)\n",
                r.after_container_restarts,
                d(r.within),
                r.max_pod_restarts
            ));
            if self
                .exits
                .iter()
                .flat_map(|c| &c.rows)
                .any(|r| r.then == Then::RestartsAll)
            {
                out.push_str(
                    "  an exit that a RestartAllContainers rule matches counts as a restart of \
                     that container: once the limit is reached it restarts the whole pod (or \
                     gives up) instead of restarting every container in place\n",
                );
            }
        }
        out
    }

    /// Per container and exit code, what its exit leads to; then the rules' warnings.
    fn exits_text(&self, out: &mut String) {
        out.push_str(
            "\non exit (restartPolicyRules first, the first match wins; then the container's \
             restartPolicy, then the pod's):\n",
        );
        for c in &self.exits {
            out.push_str(&format!("  {} ({}):\n", c.name, c.kind));
            for r in &c.rows {
                out.push_str(&format!(
                    "    {:<15} {} ({})\n",
                    r.codes_text(),
                    r.then_text(),
                    r.by_text()
                ));
            }
        }
        for w in &self.exit_warnings {
            out.push_str(&format!(
                "  warning: {}: {}\n           fix: {}\n",
                w.field, w.problem, w.fix
            ));
        }
    }
}

impl Explanation {
    /// The report as JSON (`-o json`): durations in seconds.
    pub fn to_json(&self) -> serde_json::Value {
        let s = |d: Duration| serde_json::json!(d.as_secs_f64());
        let opt = |d: Option<Duration>| d.map_or(serde_json::Value::Null, s);
        serde_json::json!({
            "pod": self.pod,
            "namespaces": self.namespaces,
            "containers": self.containers.iter().map(|c| serde_json::json!({
                "name": c.name,
                "earliestReadySeconds": s(c.earliest_ready),
                "latestReadySeconds": opt(c.latest_ready),
                "startupWindowSeconds": opt(c.startup_window),
                "hangDetectedSeconds": opt(c.hang_detected),
                "hangKilledSeconds": opt(c.hang_killed),
                "security": c.security.iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
                "warnings": c.warnings.iter().map(|w| serde_json::json!({
                    "field": w.field, "problem": w.problem, "fix": w.fix,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "backoffSeconds": self.backoff.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(),
            "backoffFrom": self.backoff_from,
            "instrumentation": self.instrumentation.as_ref().map(|i| serde_json::json!({
                "containers": i.containers,
                "stages": i.schedule.iter().map(|(n, st, at)| serde_json::json!({
                    "stage": st.as_str(), "fromRestart": n, "earliestSeconds": at.as_secs_f64(),
                })).collect::<Vec<_>>(),
                "verdictAfterSeconds": i.verdict_after.as_secs_f64(),
                "clearAfterRestarts": CLEAR_AFTER_RESTARTS,
            })),
            "exits": self.exits.iter().map(|c| serde_json::json!({
                "name": c.name,
                "kind": c.kind,
                "codes": c.rows.iter().map(|r| serde_json::json!({
                    "exitCode": r.code,
                    "then": r.then_text(),
                    "decidedBy": r.by_text(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "exitWarnings": self.exit_warnings.iter().map(|w| serde_json::json!({
                "field": w.field, "problem": w.problem, "fix": w.fix,
            })).collect::<Vec<_>>(),
            "podRestart": self.pod_restart.map(|r| serde_json::json!({
                "afterContainerRestarts": r.after_container_restarts,
                "withinSeconds": r.within.as_secs_f64(),
                "maxPodRestarts": r.max_pod_restarts,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(containers: &str) -> Manifest {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  terminationGracePeriodSeconds: 20\n  containers:\n{containers}");
        crate::spec::load("p.yaml", &text).expect("valid")
    }

    #[test]
    fn timings_follow_the_prober() {
        let m = manifest(
            "  - name: app
    command: [x]
    startupProbe: {httpGet: {port: 80}, periodSeconds: 5, failureThreshold: 12}
    readinessProbe: {httpGet: {port: 80, path: /ready}, periodSeconds: 2, successThreshold: 2}
    livenessProbe: {httpGet: {port: 80, path: /live}, periodSeconds: 10, timeoutSeconds: 2, failureThreshold: 3, terminationGracePeriodSeconds: 5}
",
        );
        let e = explain(&m, BackoffPolicy::default(), None);
        let c = &e.containers[0];
        // Readiness runs as soon as startup succeeds; a second success one period later.
        assert_eq!(c.earliest_ready, secs(2));
        // Startup's last chance: 0 + 11 × 5 s + 1 s timeout; then readiness 2 s + 1 s.
        assert_eq!(c.latest_ready, Some(secs(56 + 2 + 1)));
        assert_eq!(c.startup_window, Some(secs(60)));
        // Three failures 10 s apart, the last one timing out after 2 s; probe grace 5 s.
        assert_eq!(c.hang_detected, Some(secs(32)));
        assert_eq!(c.hang_killed, Some(secs(37)));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(e.backoff, [0, 10, 20, 40, 80, 160, 300].map(secs));
        let text = e.to_text();
        assert!(
            text.contains("detected within 32s, killed (SIGKILL) within 37s"),
            "{text}"
        );
    }

    #[test]
    fn warnings_with_their_fix() {
        let m = manifest(
            "  - name: app
    command: [x]
    readinessProbe: {tcpSocket: {port: 80}, periodSeconds: 5, timeoutSeconds: 5, failureThreshold: 1}
    livenessProbe: {tcpSocket: {port: 80}, periodSeconds: 5, timeoutSeconds: 5, failureThreshold: 1}
    lifecycle: {preStop: {sleep: {seconds: 30}}}
",
        );
        let e = explain(&m, BackoffPolicy::default(), Some(secs(60)));
        let fields: Vec<&str> = e.containers[0]
            .warnings
            .iter()
            .map(|w| w.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.containers[0].readinessProbe.timeoutSeconds",
                "spec.containers[0].readinessProbe.failureThreshold",
                "spec.containers[0].livenessProbe.timeoutSeconds",
                "spec.containers[0].livenessProbe.failureThreshold",
                "spec.containers[0].livenessProbe",
                "spec.containers[0].livenessProbe",
                "spec.containers[0].lifecycle.preStop",
            ]
        );
        let start = &e.containers[0].warnings[5];
        assert!(start.problem.contains("it gets 5s"), "{start:?}");
        assert!(start.fix.contains("failureThreshold: 7"), "{start:?}");
    }
}
