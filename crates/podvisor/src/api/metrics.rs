//! Prometheus text for `--metrics-addr`: the kubelet's prober metrics under their names and
//! labels (`prober_probe_total`, `prober_probe_duration_seconds`), podvisor's restart counters
//! and probe start delays, and per-container CPU and memory read from /proc for each
//! container's main process (cAdvisor's names `container_cpu_usage_seconds_total` and
//! `container_memory_working_set_bytes`; the working set is the resident size here).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use podvisor_core::probe::{Outcome, ProbeKind};

/// Histogram bounds of probe durations, in seconds (Prometheus' defaults).
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Counters the run loop keeps.
#[derive(Debug, Default)]
pub struct Counters {
    /// (container, probe type, result) → attempts.
    probes: BTreeMap<(String, &'static str, &'static str), u64>,
    /// (container, probe type) → bucket counts, sum, count.
    durations: BTreeMap<(String, &'static str), ([u64; BUCKETS.len()], f64, u64)>,
    pub pod_restarts: u64,
    /// How late probe attempts started against their schedule: bucket counts, sum, count.
    start_delay: ([u64; DELAY_BUCKETS.len()], f64, u64),
}

/// Histogram bounds of probe start delays, in seconds.
const DELAY_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0];

impl Counters {
    /// A probe attempt started `late` after it was due.
    pub fn probe_start(&mut self, late: Duration) {
        let secs = late.as_secs_f64();
        for (i, b) in DELAY_BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.start_delay.0[i] += 1;
            }
        }
        self.start_delay.1 += secs;
        self.start_delay.2 += 1;
    }

    pub fn probe(&mut self, container: &str, kind: ProbeKind, outcome: &Outcome, took: Duration) {
        // The kubelet's result label: errors count as unknown.
        let result = match outcome {
            Outcome::Success | Outcome::Warning(_) => "successful",
            Outcome::Failure(_) => "failed",
            Outcome::Error(_) => "unknown",
        };
        *self
            .probes
            .entry((container.to_string(), kind.as_str(), result))
            .or_default() += 1;
        let secs = took.as_secs_f64();
        let h = self
            .durations
            .entry((container.to_string(), kind.as_str()))
            .or_insert(([0; BUCKETS.len()], 0.0, 0));
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.0[i] += 1;
            }
        }
        h.1 += secs;
        h.2 += 1;
    }
}

/// One container as the metrics show it.
#[derive(Debug)]
pub struct ContainerSample<'a> {
    pub name: &'a str,
    pub restarts: u32,
    /// Process group of the running instance, if any.
    pub pgid: Option<i32>,
}

/// The whole text.
pub fn render(
    pod: &str,
    namespace: &str,
    counters: &Counters,
    containers: &[ContainerSample<'_>],
) -> String {
    let mut o = String::new();
    let base = |c: &str| format!("container=\"{c}\",namespace=\"{namespace}\",pod=\"{pod}\"");
    o.push_str("# HELP prober_probe_total Cumulative number of a liveness, readiness or startup probe for a container by result.\n# TYPE prober_probe_total counter\n");
    for ((c, kind, result), n) in &counters.probes {
        let _ = writeln!(
            o,
            "prober_probe_total{{{},probe_type=\"{kind}\",result=\"{result}\"}} {n}",
            base(c)
        );
    }
    o.push_str("# HELP prober_probe_duration_seconds Duration in seconds for a probe response.\n# TYPE prober_probe_duration_seconds histogram\n");
    for ((c, kind), (buckets, sum, count)) in &counters.durations {
        let labels = format!("{},probe_type=\"{kind}\"", base(c));
        for (b, n) in BUCKETS.iter().zip(buckets) {
            let _ = writeln!(
                o,
                "prober_probe_duration_seconds_bucket{{{labels},le=\"{b}\"}} {n}"
            );
        }
        let _ = writeln!(
            o,
            "prober_probe_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(o, "prober_probe_duration_seconds_sum{{{labels}}} {sum}");
        let _ = writeln!(o, "prober_probe_duration_seconds_count{{{labels}}} {count}");
    }
    o.push_str("# HELP podvisor_probe_start_delay_seconds How late probe attempts started against their schedule.\n# TYPE podvisor_probe_start_delay_seconds histogram\n");
    let (buckets, sum, count) = &counters.start_delay;
    let pod_labels = format!("namespace=\"{namespace}\",pod=\"{pod}\"");
    for (b, n) in DELAY_BUCKETS.iter().zip(buckets) {
        let _ = writeln!(
            o,
            "podvisor_probe_start_delay_seconds_bucket{{{pod_labels},le=\"{b}\"}} {n}"
        );
    }
    let _ = writeln!(
        o,
        "podvisor_probe_start_delay_seconds_bucket{{{pod_labels},le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(
        o,
        "podvisor_probe_start_delay_seconds_sum{{{pod_labels}}} {sum}"
    );
    let _ = writeln!(
        o,
        "podvisor_probe_start_delay_seconds_count{{{pod_labels}}} {count}"
    );
    o.push_str("# HELP podvisor_container_restarts_total Restarts of a container (its restartCount).\n# TYPE podvisor_container_restarts_total counter\n");
    for c in containers {
        let _ = writeln!(
            o,
            "podvisor_container_restarts_total{{{}}} {}",
            base(c.name),
            c.restarts
        );
    }
    o.push_str("# HELP podvisor_pod_restarts_total Whole-pod restarts.\n# TYPE podvisor_pod_restarts_total counter\n");
    let _ = writeln!(
        o,
        "podvisor_pod_restarts_total{{namespace=\"{namespace}\",pod=\"{pod}\"}} {}",
        counters.pod_restarts
    );
    let groups: Vec<i32> = containers.iter().filter_map(|c| c.pgid).collect();
    let usage = group_usage(&groups);
    o.push_str("# HELP container_cpu_usage_seconds_total CPU time of the container's running processes.\n# TYPE container_cpu_usage_seconds_total counter\n");
    for c in containers {
        if let Some((cpu, _)) = c.pgid.and_then(|g| usage.get(&g)) {
            let _ = writeln!(
                o,
                "container_cpu_usage_seconds_total{{{}}} {cpu}",
                base(c.name)
            );
        }
    }
    o.push_str("# HELP container_memory_working_set_bytes Resident memory of the container's processes.\n# TYPE container_memory_working_set_bytes gauge\n");
    for c in containers {
        if let Some((_, mem)) = c.pgid.and_then(|g| usage.get(&g)) {
            let _ = writeln!(
                o,
                "container_memory_working_set_bytes{{{}}} {mem}",
                base(c.name)
            );
        }
    }
    o
}

/// CPU seconds (user + system, with the children it has reaped) and resident bytes of each
/// container's main process (its group leader). Reading only the leaders keeps a scrape short
/// on a large pod (the run loop answers it); descendants still running are not counted.
fn group_usage(groups: &[i32]) -> BTreeMap<i32, (f64, u64)> {
    // Clock ticks and page size as Linux reports them in /proc (USER_HZ is 100 everywhere).
    let tick = 100.0;
    let page = 4096u64;
    let mut out = BTreeMap::new();
    for &pid in groups {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command, which ends with the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        // f[0] is field 3 (state): utime is field 14 … cstime 17, rss 24.
        let num = |i: usize| {
            f.get(i - 3)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0)
        };
        let cpu = (num(14) + num(15) + num(16) + num(17)) as f64 / tick;
        out.insert(pid, (cpu, num(24).max(0) as u64 * page));
    }
    out
}
