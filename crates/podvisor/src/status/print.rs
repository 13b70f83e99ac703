//! A pod as kubectl prints it: `get pod` (the STATUS column's reason, READY, RESTARTS, AGE,
//! and podvisor's per-container table) and `describe pod`, read from the typed v1 Pod the run
//! serves; and the times and ages kubectl writes. `status`, `describe` and `top` print through
//! here, so they agree.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, Pod, PodStatus, Probe, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::EventLine;

/// Seconds since the epoch of an API timestamp.
pub fn secs(t: &Time) -> f64 {
    t.0.as_millisecond() as f64 / 1000.0
}

/// Seconds since the epoch of a written timestamp (`2026-11-23T05:39:22Z`, fractions allowed).
pub fn parse_time(t: &str) -> Option<f64> {
    let ts: jiff::Timestamp = t.parse().ok()?;
    Some(ts.as_second() as f64 + f64::from(ts.subsec_nanosecond()) / 1e9)
}

/// A timestamp as the API writes it (`2026-11-23T05:39:22Z`), or nothing.
pub fn written(t: &Option<Time>) -> String {
    (t.as_ref())
        .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// A kubectl-style age: `45s`, `3m12s`, `5h`, `2d`.
pub fn age(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..=119 => format!("{s}s"),
        120..=599 => format!("{}m{}s", s / 60, s % 60),
        600..=10_799 => format!("{}m", s / 60),
        10_800..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

pub fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn status(pod: &Pod) -> PodStatus {
    pod.status.clone().unwrap_or_default()
}

/// The pod's `namespace/name`.
pub fn full_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("?")
    )
}

/// Every container status of a pod: init containers (and sidecars) first.
pub fn container_statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let s = pod.status.as_ref();
    let init = s.and_then(|s| s.init_container_statuses.as_ref());
    let main = s.and_then(|s| s.container_statuses.as_ref());
    init.into_iter().flatten().chain(main.into_iter().flatten())
}

/// The names of the pod's sidecars (init containers with `restartPolicy: Always`).
pub fn sidecar_names(pod: &Pod) -> Vec<&str> {
    let spec = pod.spec.as_ref();
    let init = spec.and_then(|s| s.init_containers.as_ref());
    init.into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect()
}

/// The containers READY counts, as kubectl's printer: the main containers and the sidecars.
pub fn ready_counted(pod: &Pod) -> Vec<&ContainerStatus> {
    let sidecars = sidecar_names(pod);
    let s = pod.status.as_ref();
    let main = s.and_then(|s| s.container_statuses.as_ref());
    let init = s.and_then(|s| s.init_container_statuses.as_ref());
    main.into_iter()
        .flatten()
        .chain(
            init.into_iter()
                .flatten()
                .filter(|c| sidecars.contains(&c.name.as_str())),
        )
        .collect()
}

/// READY as kubectl prints it: `1/2`.
pub fn ready_column(pod: &Pod) -> String {
    let counted = ready_counted(pod);
    let ready = counted.iter().filter(|c| c.ready).count();
    format!("{ready}/{}", counted.len())
}

/// The STATUS column as kubectl's printer computes it.
pub fn pod_reason(pod: &Pod) -> String {
    let status = status(pod);
    let mut reason = status.phase.clone().unwrap_or_default();
    let sidecars = sidecar_names(pod);
    let init = status.init_container_statuses.clone().unwrap_or_default();
    let regular_init = init
        .iter()
        .filter(|c| !sidecars.contains(&c.name.as_str()))
        .count();
    let mut initializing = false;
    for (i, c) in init.iter().enumerate() {
        let state = c.state.clone().unwrap_or_default();
        if state.terminated.as_ref().is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if sidecars.contains(&c.name.as_str()) && c.started == Some(true) {
            continue;
        }
        initializing = true;
        let waiting = state.waiting.and_then(|w| w.reason).unwrap_or_default();
        reason = if let Some(t) = state.terminated {
            match t.reason.filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None => format!("Init:ExitCode:{}", t.exit_code),
            }
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{regular_init}")
        };
        break;
    }
    if !initializing {
        reason = main_reason(&status, reason);
    }
    // A pod that failed as a whole (podvisor's GaveUp) says so rather than its last exit.
    match status.reason.filter(|r| !r.is_empty()) {
        Some(r) => r,
        None => reason,
    }
}

/// The STATUS once the init containers are done: the last main container's waiting or
/// terminated reason, `Running` where one runs ready and another completed.
fn main_reason(status: &PodStatus, mut reason: String) -> String {
    let mut running = false;
    for c in status.container_statuses.iter().flatten().rev() {
        let state = c.state.clone().unwrap_or_default();
        let waiting = state.waiting.and_then(|w| w.reason).unwrap_or_default();
        if !waiting.is_empty() {
            reason = waiting;
        } else if let Some(t) = state.terminated {
            reason = match t.reason.filter(|r| !r.is_empty()) {
                Some(r) => r,
                None => format!("ExitCode:{}", t.exit_code),
            };
        } else if c.ready && state.running.is_some() {
            running = true;
        }
    }
    if reason == "Completed" && running {
        reason = "Running".into();
    }
    reason
}

/// An annotation of the pod.
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// A staged container's stage (and the verdict on its add-on), from the pod's annotations.
pub fn stage_of(pod: &Pod, container: &str) -> Option<String> {
    let stage = annotation(pod, &format!("podvisor.io/stage.{container}"))?;
    Some(
        match annotation(pod, &format!("podvisor.io/verdict.{container}")) {
            Some(v) => format!("{stage} ({v})"),
            None => stage.to_string(),
        },
    )
}

/// RESTARTS as kubectl prints it: the sum, and how long ago the last one was.
pub fn restarts_column(pod: &Pod, now: f64) -> String {
    let all: Vec<&ContainerStatus> = container_statuses(pod).collect();
    let restarts: i64 = all.iter().map(|c| i64::from(c.restart_count)).sum();
    let last_restart = all
        .iter()
        .filter_map(|c| last_terminated(c)?.finished_at.as_ref().map(secs))
        .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.max(t))));
    match last_restart {
        Some(t) if restarts > 0 => format!("{restarts} ({} ago)", age(now - t)),
        _ => restarts.to_string(),
    }
}

fn last_terminated(
    c: &ContainerStatus,
) -> Option<&k8s_openapi::api::core::v1::ContainerStateTerminated> {
    c.last_state.as_ref()?.terminated.as_ref()
}

/// `podvisor status`: the pod's row as `kubectl get pod` (with `wide`, its IP and node), then
/// one row per container.
pub fn table(pod: &Pod, wide: bool, header: bool) -> String {
    let now = now_secs();
    let mut rows = vec![pod_row(pod, wide, now)];
    let head = pod_head(wide);
    if header {
        rows.insert(0, head.iter().map(|h| h.to_string()).collect());
    }
    let mut out = columns(&rows);
    if header {
        out.push('\n');
    }
    out.push_str(&columns(&container_rows(pod, wide, header, now)));
    out
}

/// The columns of `pod_row`, as `kubectl get pods` heads them.
pub fn pod_head(wide: bool) -> Vec<&'static str> {
    let mut head = vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
    if wide {
        head.extend(["IP", "NODE"]);
    }
    head
}

/// A pod's `kubectl get pods` row: name, ready, status, restarts, age (wide: IP and node).
pub fn pod_row(pod: &Pod, wide: bool, now: f64) -> Vec<String> {
    let created = pod.metadata.creation_timestamp.as_ref().map_or(now, secs);
    let mut row = vec![
        pod.metadata.name.clone().unwrap_or_default(),
        ready_column(pod),
        pod_reason(pod),
        restarts_column(pod, now),
        age(now - created),
    ];
    if wide {
        row.push(status(pod).pod_ip.unwrap_or_default());
        row.push(crate::process::sys::hostname());
    }
    row
}

/// Per container: kind, ready, state and reason, restarts, last exit, age of the state.
fn container_rows(pod: &Pod, wide: bool, header: bool, now: f64) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    if header {
        let mut head = vec![
            "CONTAINER",
            "KIND",
            "READY",
            "STATE",
            "RESTARTS",
            "LAST EXIT",
            "AGE",
        ];
        if wide {
            head.push("STAGE");
        }
        rows.push(head.iter().map(|h| h.to_string()).collect());
    }
    let sidecars = sidecar_names(pod);
    let main = status(pod).container_statuses.unwrap_or_default();
    for c in container_statuses(pod) {
        let kind = if main.iter().any(|m| m.name == c.name) {
            "main"
        } else if sidecars.contains(&c.name.as_str()) {
            "sidecar"
        } else {
            "init"
        };
        let (state, since) = state_column(c);
        let last_exit = match last_terminated(c) {
            Some(t) => {
                let when = (t.finished_at.as_ref())
                    .map(|f| format!(" {} ago", age(now - secs(f))))
                    .unwrap_or_default();
                let reason = t.reason.as_deref().unwrap_or_default();
                format!("{} ({reason}){when}", t.exit_code)
            }
            None => "-".into(),
        };
        let mut row = vec![
            c.name.clone(),
            kind.to_string(),
            c.ready.to_string(),
            state,
            c.restart_count.to_string(),
            last_exit,
            since.map_or("-".into(), |t| age(now - t)),
        ];
        if wide {
            row.push(stage_of(pod, &c.name).unwrap_or_else(|| "-".into()));
        }
        rows.push(row);
    }
    rows
}

/// A container's STATE cell, and since when it is in it.
fn state_column(c: &ContainerStatus) -> (String, Option<f64>) {
    let st = c.state.clone().unwrap_or_default();
    if let Some(r) = st.running {
        ("Running".into(), r.started_at.as_ref().map(secs))
    } else if let Some(t) = st.terminated {
        let reason = t.reason.unwrap_or_default();
        (
            format!("Terminated ({reason})"),
            t.finished_at.as_ref().map(secs),
        )
    } else {
        let reason = st.waiting.and_then(|w| w.reason).unwrap_or_default();
        let since = last_terminated(c).and_then(|t| t.finished_at.as_ref().map(secs));
        (format!("Waiting ({reason})"), since)
    }
}

/// Left-aligned columns, three spaces apart, as kubectl prints them.
pub fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}   ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `kubectl describe pod`, in short: the pod, each container, the conditions and `events`
/// (the API's event lines).
pub fn describe(pod: &Pod, events: &str) -> String {
    let mut o = describe_pod(pod);
    let status = status(pod);
    for (title, list) in [
        ("Init Containers", &status.init_container_statuses),
        ("Containers", &status.container_statuses),
    ] {
        let Some(list) = list else { continue };
        let _ = writeln!(o, "{title}:");
        for c in list {
            describe_container(&mut o, pod, c);
        }
    }
    let _ = writeln!(o, "Conditions:\n  Type              Status");
    for c in status.conditions.iter().flatten() {
        let _ = writeln!(o, "  {:<18}{}", c.type_, c.status);
    }
    let _ = writeln!(o, "Events:");
    o.push_str(&describe_events(events));
    o
}

/// The pod's own lines of `describe`.
fn describe_pod(pod: &Pod) -> String {
    let status = status(pod);
    let meta = &pod.metadata;
    let mut o = String::new();
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let _ = writeln!(o, "Name:         {}", text(&meta.name));
    let _ = writeln!(o, "Namespace:    {}", text(&meta.namespace));
    let _ = writeln!(o, "UID:          {}", text(&meta.uid));
    let _ = writeln!(o, "Start Time:   {}", written(&status.start_time));
    let labels: Vec<String> = (meta.labels.iter().flatten())
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let labels = match labels.is_empty() {
        true => "<none>".to_string(),
        false => labels.join("\n              "),
    };
    let _ = writeln!(o, "Labels:       {labels}");
    let _ = writeln!(o, "Status:       {}", text(&status.phase));
    if let Some(reason) = &status.reason {
        let _ = writeln!(o, "Reason:       {reason}");
        let _ = writeln!(o, "Message:      {}", text(&status.message));
    }
    let _ = writeln!(o, "IP:           {}", text(&status.pod_ip));
    if let Some(qos) = &status.qos_class {
        let _ = writeln!(o, "QoS Class:    {qos}");
    }
    let restarts = annotation(pod, "podvisor.io/pod-restarts").unwrap_or_default();
    let _ = writeln!(o, "Pod Restarts: {restarts}");
    if let Some(n) = annotation(pod, "podvisor.io/all-containers-restarts") {
        let _ = writeln!(o, "All Restarts: {n} (RestartAllContainers)");
    }
    for (label, key) in [
        ("Cgroups:     ", "podvisor.io/cgroups"),
        ("Root:        ", "podvisor.io/root"),
        ("Namespaces:  ", "podvisor.io/namespaces"),
    ] {
        if let Some(v) = annotation(pod, key) {
            let _ = writeln!(o, "{label} {v}");
        }
    }
    o
}

/// One container's lines of `describe`.
fn describe_container(o: &mut String, pod: &Pod, c: &ContainerStatus) {
    let spec = spec_of(pod, &c.name).unwrap_or_default();
    let _ = writeln!(o, "  {}:", c.name);
    if let Some(id) = &c.container_id {
        let _ = writeln!(o, "    Container ID:   {id}");
    }
    let _ = writeln!(o, "    Image:          {}", c.image);
    // As kubectl: where the container runs from its image, the image it ran.
    if !c.image_id.is_empty() {
        let _ = writeln!(o, "    Image ID:       {}", c.image_id);
    }
    let cmd: Vec<String> = (spec.command.iter().flatten())
        .chain(spec.args.iter().flatten())
        .cloned()
        .collect();
    let _ = writeln!(o, "    Command:        {}", cmd.join(" "));
    if let Some(st) = &c.state {
        state_lines(o, "State", st);
    }
    if let Some(last) = c
        .last_state
        .as_ref()
        .filter(|s| **s != ContainerState::default())
    {
        state_lines(o, "Last State", last);
    }
    let _ = writeln!(o, "    Ready:          {}", c.ready);
    let _ = writeln!(o, "    Restart Count:  {}", c.restart_count);
    if let Some(stage) = stage_of(pod, &c.name) {
        let _ = writeln!(o, "    Stage:          {stage}");
    }
    resource_lines(o, spec.resources.as_ref());
    if let Some(usage) = annotation(pod, &format!("podvisor.io/usage.{}", c.name)) {
        let _ = writeln!(o, "    Usage:          {usage}");
    }
    for (label, probe) in [
        ("Startup", &spec.startup_probe),
        ("Liveness", &spec.liveness_probe),
        ("Readiness", &spec.readiness_probe),
    ] {
        if let Some(p) = probe {
            let pad = " ".repeat(16 - label.len() - 1);
            let _ = writeln!(o, "    {label}:{pad}{}", probe_line(p));
        }
    }
}

/// The container's spec, by name.
fn spec_of(pod: &Pod, name: &str) -> Option<Container> {
    let spec = pod.spec.as_ref()?;
    (spec.init_containers.iter().flatten())
        .chain(&spec.containers)
        .find(|c| c.name == name)
        .cloned()
}

/// As kubectl: each section with one `name: quantity` line per resource.
fn resource_lines(o: &mut String, resources: Option<&ResourceRequirements>) {
    let Some(r) = resources else { return };
    for (label, map) in [("Limits", &r.limits), ("Requests", &r.requests)] {
        let Some(m) = map.as_ref().filter(|m| !m.is_empty()) else {
            continue;
        };
        let _ = writeln!(o, "    {label}:");
        for (k, v) in m {
            let pad = " ".repeat(14usize.saturating_sub(k.len()));
            let _ = writeln!(o, "      {k}:{pad}{}", v.0);
        }
    }
}

/// The events of `describe`, from the API's event lines.
fn describe_events(events: &str) -> String {
    let now = now_secs();
    let rows: Vec<Vec<String>> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<EventLine>(l).ok())
        .map(|e| {
            let when = parse_time(&e.time).map_or("-".into(), |t| age(now - t));
            let from = match e.object.as_str() {
                "pod" => "pod".to_string(),
                object => format!("{{{object}}}"),
            };
            vec![e.type_, e.reason, when, from, e.message]
        })
        .collect();
    if rows.is_empty() {
        return "  <none>\n".into();
    }
    let mut all = vec![["Type", "Reason", "Age", "Object", "Message"]
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()];
    all.extend(rows);
    columns(&all).lines().map(|l| format!("  {l}\n")).collect()
}

fn state_lines(o: &mut String, label: &str, st: &ContainerState) {
    let pad = " ".repeat(16 - label.len() - 1);
    let time = written;
    if let Some(r) = &st.running {
        let _ = writeln!(o, "    {label}:{pad}Running");
        let _ = writeln!(o, "      Started:      {}", time(&r.started_at));
    } else if let Some(t) = &st.terminated {
        let _ = writeln!(o, "    {label}:{pad}Terminated");
        let reason = t.reason.as_deref().unwrap_or_default();
        let _ = writeln!(o, "      Reason:       {reason}");
        // Its termination message (or why it could not start), as kubectl shows it, its
        // lines under the first.
        if let Some(m) = t
            .message
            .as_deref()
            .map(|m| m.trim_end())
            .filter(|m| !m.is_empty())
        {
            let m = m.replace('\n', "\n                    ");
            let _ = writeln!(o, "      Message:      {m}");
        }
        let _ = writeln!(o, "      Exit Code:    {}", t.exit_code);
        if let Some(sig) = t.signal {
            let _ = writeln!(o, "      Signal:       {sig}");
        }
        let _ = writeln!(o, "      Started:      {}", time(&t.started_at));
        let _ = writeln!(o, "      Finished:     {}", time(&t.finished_at));
    } else if let Some(w) = &st.waiting {
        let _ = writeln!(o, "    {label}:{pad}Waiting");
        let reason = w.reason.as_deref().unwrap_or_default();
        let _ = writeln!(o, "      Reason:       {reason}");
        if let Some(m) = &w.message {
            let _ = writeln!(o, "      Message:      {m}");
        }
    }
}

/// `http-get http://:8080/healthz delay=0s timeout=1s period=10s #success=1 #failure=3`.
fn probe_line(p: &Probe) -> String {
    let port = |p: &IntOrString| match p {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    let action = if let Some(e) = &p.exec {
        format!("exec [{}]", e.command.clone().unwrap_or_default().join(" "))
    } else if let Some(h) = &p.http_get {
        format!(
            "http-get {}://{}:{}{}",
            h.scheme.as_deref().unwrap_or("HTTP").to_lowercase(),
            h.host.as_deref().unwrap_or(""),
            port(&h.port),
            h.path.as_deref().unwrap_or("/")
        )
    } else if let Some(t) = &p.tcp_socket {
        format!("tcp-socket :{}", port(&t.port))
    } else if let Some(g) = &p.grpc {
        let service = g.service.as_deref().unwrap_or("");
        format!("grpc <pod>:{} {service}", g.port)
    } else {
        "?".into()
    };
    let n = |v: Option<i32>, d: i32| v.filter(|v| *v > 0).unwrap_or(d);
    format!(
        "{action} delay={}s timeout={}s period={}s #success={} #failure={}",
        p.initial_delay_seconds.unwrap_or(0),
        n(p.timeout_seconds, 1),
        n(p.period_seconds, 10),
        n(p.success_threshold, 1),
        n(p.failure_threshold, 3)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_ages() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_time("2000-03-01T00:00:01Z"), Some(951_868_801.0));
        assert_eq!(
            parse_time("2026-11-23T05:39:22.123Z"),
            Some(1_795_412_362.123)
        );
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(age(5.0), "5s");
        assert_eq!(age(130.0), "2m10s");
        assert_eq!(age(3600.0), "60m");
        assert_eq!(age(4.0 * 3600.0), "4h");
        assert_eq!(age(3.0 * 86_400.0), "3d");
    }
}
