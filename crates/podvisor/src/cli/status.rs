//! `podvisor status [-o wide|json|yaml|describe] [-w]` and `podvisor describe`: the running
//! pod as `kubectl get pod` and `kubectl describe pod` show it, from the status API.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::Value;

use super::client::{self, age, now_secs, parse_time, ClientError};

/// `podvisor status`' and `podvisor describe`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The pod's state dir (default: the only running pod)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Output format
    #[arg(short, long, value_enum, value_name = "FORMAT")]
    output: Option<Format>,
    /// Print again on every change (Ctrl-C to end)
    #[arg(short, long)]
    watch: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    #[value(skip)]
    Table,
    Wide,
    Json,
    Yaml,
    Describe,
}

pub fn main(a: StatusArgs, describe: bool) -> i32 {
    let default = if describe {
        Format::Describe
    } else {
        Format::Table
    };
    client::exit_code(run(a.state_dir, a.output.unwrap_or(default), a.watch))
}

fn run(dir: Option<PathBuf>, format: Format, watch: bool) -> Result<(), ClientError> {
    let dir = client::state_dir(dir)?;
    if !watch {
        let text = client::call(&dir, "GET", "/status")?;
        let pod: Value = serde_json::from_str(&text)
            .map_err(|e| ClientError(format!("the pod's answer is not JSON: {e}")))?;
        let out = match format {
            Format::Describe => {
                let events = client::call(&dir, "GET", "/events")?;
                describe_text(&pod, &events)
            }
            _ => render(&pod, format, true),
        };
        super::write_out(&out);
        return Ok(());
    }
    let r = client::request(&dir, "GET", "/status?watch=1")?;
    let mut first = true;
    client::stream_lines(r, |line| {
        let pod: Value = serde_json::from_str(line).map_err(std::io::Error::other)?;
        let out = match format {
            // One object per line while watching (`jq` and scripts read them as they come).
            Format::Json => format!("{line}\n"),
            Format::Yaml => format!("---\n{}", yaml(&pod)),
            Format::Describe => format!("{}\n", describe_text(&pod, "")),
            _ => render(&pod, format, first),
        };
        first = false;
        let mut stdout = std::io::stdout().lock();
        std::io::Write::write_all(&mut stdout, out.as_bytes())?;
        std::io::Write::flush(&mut stdout)
    })
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).unwrap_or_else(|e| format!("# cannot write YAML: {e}\n"))
}

fn render(pod: &Value, format: Format, header: bool) -> String {
    match format {
        Format::Json => format!("{}\n", pretty(pod)),
        Format::Yaml => yaml(pod),
        _ => table(pod, format == Format::Wide, header),
    }
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_str().unwrap_or("")
}

/// The names of the pod's sidecars (init containers with `restartPolicy: Always`).
fn sidecar_names(pod: &Value) -> Vec<&str> {
    pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always")
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// The STATUS column as kubectl's printer computes it.
pub fn pod_reason(pod: &Value) -> String {
    let status = &pod["status"];
    let mut reason = s(status, &["phase"]).to_string();
    let init = status["initContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let sidecars = sidecar_names(pod);
    let mut initializing = false;
    let regular_init = init
        .iter()
        .filter(|c| !sidecars.contains(&s(c, &["name"])))
        .count();
    for (i, c) in init.iter().enumerate() {
        let sidecar = sidecars.contains(&s(c, &["name"]));
        let t = &c["state"]["terminated"];
        let w = &c["state"]["waiting"];
        if t.is_object() && t["exitCode"] == 0 {
            continue;
        }
        if sidecar && c["started"] == true {
            continue;
        }
        initializing = true;
        if t.is_object() {
            reason = match t["reason"].as_str() {
                Some(r) if !r.is_empty() => format!("Init:{r}"),
                _ => format!("Init:ExitCode:{}", t["exitCode"]),
            };
        } else if w.is_object()
            && s(w, &["reason"]) != "PodInitializing"
            && !s(w, &["reason"]).is_empty()
        {
            reason = format!("Init:{}", s(w, &["reason"]));
        } else {
            reason = format!("Init:{i}/{regular_init}");
        }
        break;
    }
    if !initializing {
        let mut running = false;
        for c in status["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .rev()
        {
            let w = &c["state"]["waiting"];
            let t = &c["state"]["terminated"];
            if w.is_object() && !s(w, &["reason"]).is_empty() {
                reason = s(w, &["reason"]).to_string();
            } else if t.is_object() {
                reason = match t["reason"].as_str() {
                    Some(r) if !r.is_empty() => r.to_string(),
                    _ => format!("ExitCode:{}", t["exitCode"]),
                };
            } else if c["ready"] == true && c["state"]["running"].is_object() {
                running = true;
            }
        }
        if reason == "Completed" && running {
            reason = "Running".into();
        }
    }
    // A pod that failed as a whole (podvisor's GaveUp) says so rather than its last exit.
    match status["reason"].as_str() {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => reason,
    }
}

/// A staged container's stage (and the verdict on its add-on), from the pod's annotations.
fn stage_of(pod: &Value, container: &str) -> Option<String> {
    let a = &pod["metadata"]["annotations"];
    let stage = a[format!("podvisor.io/stage.{container}")].as_str()?;
    Some(
        match a[format!("podvisor.io/verdict.{container}")].as_str() {
            Some(v) => format!("{stage} ({v})"),
            None => stage.to_string(),
        },
    )
}

fn table(pod: &Value, wide: bool, header: bool) -> String {
    let status = &pod["status"];
    let now = now_secs();
    let main = status["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let init = status["initContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let sidecars = sidecar_names(pod);
    let counted: Vec<&Value> = main
        .iter()
        .chain(init.iter().filter(|c| sidecars.contains(&s(c, &["name"]))))
        .collect();
    let ready = counted.iter().filter(|c| c["ready"] == true).count();
    let restarts: u64 = main
        .iter()
        .chain(&init)
        .map(|c| c["restartCount"].as_u64().unwrap_or(0))
        .sum();
    let last_restart = main
        .iter()
        .chain(&init)
        .filter_map(|c| parse_time(s(c, &["lastState", "terminated", "finishedAt"])))
        .fold(None, |a: Option<f64>, t| Some(a.map_or(t, |a| a.max(t))));
    let restarts = match last_restart {
        Some(t) if restarts > 0 => format!("{restarts} ({} ago)", age(now - t)),
        _ => restarts.to_string(),
    };
    let created = parse_time(s(pod, &["metadata", "creationTimestamp"])).unwrap_or(now);
    let mut rows = vec![vec![
        s(pod, &["metadata", "name"]).to_string(),
        format!("{ready}/{}", counted.len()),
        pod_reason(pod),
        restarts,
        age(now - created),
    ]];
    let mut head = vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"];
    if wide {
        head.extend(["IP", "NODE"]);
        rows[0].push(s(status, &["podIP"]).to_string());
        rows[0].push(crate::process::sys::hostname());
    }
    let mut out = String::new();
    if header {
        rows.insert(0, head.iter().map(|h| h.to_string()).collect());
    }
    out.push_str(&columns(&rows));
    // Per container: kind, ready, state and reason, restarts, last exit, age of the state.
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
    for c in init.iter().chain(&main) {
        let name = s(c, &["name"]);
        let kind = if main.iter().any(|m| s(m, &["name"]) == name) {
            "main"
        } else if sidecars.contains(&name) {
            "sidecar"
        } else {
            "init"
        };
        let st = &c["state"];
        let (state, since) = if st["running"].is_object() {
            (
                "Running".to_string(),
                parse_time(s(st, &["running", "startedAt"])),
            )
        } else if st["terminated"].is_object() {
            (
                format!("Terminated ({})", s(st, &["terminated", "reason"])),
                parse_time(s(st, &["terminated", "finishedAt"])),
            )
        } else {
            (
                format!("Waiting ({})", s(st, &["waiting", "reason"])),
                parse_time(s(c, &["lastState", "terminated", "finishedAt"])),
            )
        };
        let last = &c["lastState"]["terminated"];
        let last_exit = if last.is_object() {
            let when = parse_time(s(last, &["finishedAt"]))
                .map(|t| format!(" {} ago", age(now - t)))
                .unwrap_or_default();
            format!("{} ({}){when}", last["exitCode"], s(last, &["reason"]))
        } else {
            "-".into()
        };
        rows.push(vec![
            name.to_string(),
            kind.to_string(),
            c["ready"].as_bool().unwrap_or(false).to_string(),
            state,
            c["restartCount"].as_u64().unwrap_or(0).to_string(),
            last_exit,
            since.map_or("-".into(), |t| age(now - t)),
        ]);
        if wide {
            let stage = stage_of(pod, name).unwrap_or_else(|| "-".into());
            rows.last_mut().expect("just pushed").push(stage);
        }
    }
    if header {
        out.push('\n');
    }
    out.push_str(&columns(&rows));
    out
}

/// Left-aligned columns, three spaces apart, as kubectl prints them.
fn columns(rows: &[Vec<String>]) -> String {
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

/// `kubectl describe pod`, in short.
pub(crate) fn describe_text(pod: &Value, events: &str) -> String {
    let now = now_secs();
    let status = &pod["status"];
    let mut o = String::new();
    let _ = writeln!(o, "Name:         {}", s(pod, &["metadata", "name"]));
    let _ = writeln!(o, "Namespace:    {}", s(pod, &["metadata", "namespace"]));
    let _ = writeln!(o, "UID:          {}", s(pod, &["metadata", "uid"]));
    let _ = writeln!(o, "Start Time:   {}", s(status, &["startTime"]));
    let labels: Vec<String> = pod["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    let _ = writeln!(
        o,
        "Labels:       {}",
        if labels.is_empty() {
            "<none>".into()
        } else {
            labels.join("\n              ")
        }
    );
    let _ = writeln!(o, "Status:       {}", s(status, &["phase"]));
    if let Some(reason) = status["reason"].as_str() {
        let _ = writeln!(o, "Reason:       {reason}");
        let _ = writeln!(o, "Message:      {}", s(status, &["message"]));
    }
    let _ = writeln!(o, "IP:           {}", s(status, &["podIP"]));
    let _ = writeln!(
        o,
        "Pod Restarts: {}",
        s(
            pod,
            &["metadata", "annotations", "podvisor.io/pod-restarts"]
        )
    );
    if let Some(n) = pod["metadata"]["annotations"]["podvisor.io/all-containers-restarts"].as_str()
    {
        let _ = writeln!(o, "All Restarts: {n} (RestartAllContainers)");
    }
    if let Some(cgroups) = pod["metadata"]["annotations"]["podvisor.io/cgroups"].as_str() {
        let _ = writeln!(o, "Cgroups:      {cgroups}");
    }
    if let Some(root) = pod["metadata"]["annotations"]["podvisor.io/root"].as_str() {
        let _ = writeln!(o, "Root:         {root}");
    }
    let spec_of = |name: &str| -> Value {
        pod["spec"]["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(pod["spec"]["containers"].as_array().into_iter().flatten())
            .find(|c| s(c, &["name"]) == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    for (title, key) in [
        ("Init Containers", "initContainerStatuses"),
        ("Containers", "containerStatuses"),
    ] {
        let Some(list) = status[key].as_array() else {
            continue;
        };
        let _ = writeln!(o, "{title}:");
        for c in list {
            let name = s(c, &["name"]);
            let spec = spec_of(name);
            let _ = writeln!(o, "  {name}:");
            if let Some(id) = c["containerID"].as_str() {
                let _ = writeln!(o, "    Container ID:   {id}");
            }
            let _ = writeln!(o, "    Image:          {}", s(c, &["image"]));
            let cmd: Vec<String> = spec["command"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(spec["args"].as_array().into_iter().flatten())
                .map(|a| a.as_str().unwrap_or("").to_string())
                .collect();
            let _ = writeln!(o, "    Command:        {}", cmd.join(" "));
            state_lines(&mut o, "State", &c["state"]);
            if c["lastState"].as_object().is_some_and(|m| !m.is_empty()) {
                state_lines(&mut o, "Last State", &c["lastState"]);
            }
            let _ = writeln!(o, "    Ready:          {}", c["ready"] == true);
            let _ = writeln!(o, "    Restart Count:  {}", c["restartCount"]);
            if let Some(stage) = stage_of(pod, name) {
                let _ = writeln!(o, "    Stage:          {stage}");
            }
            // As kubectl: each section with one `name: quantity` line per resource.
            for (label, key) in [("Limits", "limits"), ("Requests", "requests")] {
                if let Some(m) = spec["resources"][key].as_object().filter(|m| !m.is_empty()) {
                    let _ = writeln!(o, "    {label}:");
                    for (k, v) in m {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                        let _ = writeln!(
                            o,
                            "      {k}:{}{v}",
                            " ".repeat(14usize.saturating_sub(k.len()))
                        );
                    }
                }
            }
            let usage_key = format!("podvisor.io/usage.{name}");
            if let Some(usage) = pod["metadata"]["annotations"][usage_key.as_str()].as_str() {
                let _ = writeln!(o, "    Usage:          {usage}");
            }
            for (label, field) in [
                ("Startup", "startupProbe"),
                ("Liveness", "livenessProbe"),
                ("Readiness", "readinessProbe"),
            ] {
                if spec[field].is_object() {
                    let _ = writeln!(
                        o,
                        "    {label}:{}{}",
                        " ".repeat(16 - label.len() - 1),
                        probe_line(&spec[field])
                    );
                }
            }
        }
    }
    let _ = writeln!(o, "Conditions:\n  Type              Status");
    for c in status["conditions"].as_array().into_iter().flatten() {
        let _ = writeln!(o, "  {:<18}{}", s(c, &["type"]), s(c, &["status"]));
    }
    let _ = writeln!(o, "Events:");
    let rows: Vec<Vec<String>> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| {
            let when = parse_time(s(&e, &["time"])).map_or("-".into(), |t| age(now - t));
            let object = s(&e, &["object"]);
            let from = if object == "pod" {
                "pod".to_string()
            } else {
                format!("{{{object}}}")
            };
            vec![
                s(&e, &["type"]).to_string(),
                s(&e, &["reason"]).to_string(),
                when,
                from,
                s(&e, &["message"]).to_string(),
            ]
        })
        .collect();
    if rows.is_empty() {
        o.push_str("  <none>\n");
    } else {
        let mut all = vec![["Type", "Reason", "Age", "Object", "Message"]
            .iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>()];
        all.extend(rows);
        for line in columns(&all).lines() {
            let _ = writeln!(o, "  {line}");
        }
    }
    o
}

fn state_lines(o: &mut String, label: &str, st: &Value) {
    let pad = " ".repeat(16 - label.len() - 1);
    if let Some(r) = st["running"].as_object() {
        let _ = writeln!(o, "    {label}:{pad}Running");
        let _ = writeln!(
            o,
            "      Started:      {}",
            r["startedAt"].as_str().unwrap_or("")
        );
    } else if let Some(t) = st["terminated"].as_object() {
        let _ = writeln!(o, "    {label}:{pad}Terminated");
        let _ = writeln!(
            o,
            "      Reason:       {}",
            t["reason"].as_str().unwrap_or("")
        );
        let _ = writeln!(o, "      Exit Code:    {}", t["exitCode"]);
        if let Some(sig) = t.get("signal") {
            let _ = writeln!(o, "      Signal:       {sig}");
        }
        let _ = writeln!(
            o,
            "      Started:      {}",
            t["startedAt"].as_str().unwrap_or("")
        );
        let _ = writeln!(
            o,
            "      Finished:     {}",
            t["finishedAt"].as_str().unwrap_or("")
        );
    } else if let Some(w) = st["waiting"].as_object() {
        let _ = writeln!(o, "    {label}:{pad}Waiting");
        let _ = writeln!(
            o,
            "      Reason:       {}",
            w["reason"].as_str().unwrap_or("")
        );
        if let Some(m) = w.get("message").and_then(Value::as_str) {
            let _ = writeln!(o, "      Message:      {m}");
        }
    }
}

/// `http-get http://:8080/healthz delay=0s timeout=1s period=10s #success=1 #failure=3`.
fn probe_line(p: &Value) -> String {
    let action = if let Some(e) = p["exec"].as_object() {
        let cmd: Vec<&str> = e["command"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        format!("exec [{}]", cmd.join(" "))
    } else if let Some(h) = p["httpGet"].as_object() {
        format!(
            "http-get {}://{}:{}{}",
            h.get("scheme")
                .and_then(Value::as_str)
                .unwrap_or("HTTP")
                .to_lowercase(),
            h.get("host").and_then(Value::as_str).unwrap_or(""),
            h["port"]
                .as_str()
                .map_or(h["port"].to_string(), String::from),
            h.get("path").and_then(Value::as_str).unwrap_or("/")
        )
    } else if let Some(t) = p["tcpSocket"].as_object() {
        format!(
            "tcp-socket :{}",
            t["port"]
                .as_str()
                .map_or(t["port"].to_string(), String::from)
        )
    } else if let Some(g) = p["grpc"].as_object() {
        format!(
            "grpc <pod>:{} {}",
            g["port"],
            g.get("service").and_then(Value::as_str).unwrap_or("")
        )
    } else {
        "?".into()
    };
    let n = |k: &str, d: i64| p[k].as_i64().filter(|v| *v > 0).unwrap_or(d);
    format!(
        "{action} delay={}s timeout={}s period={}s #success={} #failure={}",
        p["initialDelaySeconds"].as_i64().unwrap_or(0),
        n("timeoutSeconds", 1),
        n("periodSeconds", 10),
        n("successThreshold", 1),
        n("failureThreshold", 3)
    )
}
