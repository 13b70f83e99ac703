//! Prometheus text for `--metrics-addr`: the kubelet's prober metrics under their names and
//! labels (`prober_probe_total`, `prober_probe_duration_seconds`), podvisor's restart counters
//! and probe start delays, and per-container CPU and memory read from /proc for each
//! container's main process (cAdvisor's names `container_cpu_usage_seconds_total` and
//! `container_memory_working_set_bytes`; the working set is the resident size here).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use podvisor_core::probe::{Outcome, ProbeKind};
use podvisor_core::stage::{Stage, Verdict};

/// Histogram bounds of probe durations, in seconds (Prometheus' defaults).
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Counters the run loop keeps.
#[derive(Debug)]
pub struct Counters {
    /// (container, probe type, result) → attempts.
    probes: BTreeMap<(String, &'static str, &'static str), u64>,
    /// (container, probe type) → bucket counts, sum, count.
    durations: BTreeMap<(String, &'static str), ([u64; BUCKETS.len()], f64, u64)>,
    /// (container, probe type) → tries that errored (could not run at all).
    probe_errors: BTreeMap<(String, &'static str), u64>,
    /// How late probe attempts started against their schedule.
    start_delay: Histogram,
    /// How long each write of the saved record took (fsyncs included).
    state_writes: Histogram,
    /// How long podvisor took to start each container instance, to its exec.
    starts: Histogram,
}

/// Bucket counts (each bound's, cumulative), sum and count of one histogram.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, b) in self.bounds.iter().enumerate() {
            if secs <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    /// Prometheus text.
    fn render(&self, o: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, n) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(o, "{name}_bucket{{{labels},le=\"{b}\"}} {n}");
        }
        let _ = writeln!(o, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(o, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(o, "{name}_count{{{labels}}} {}", self.count);
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            probes: BTreeMap::new(),
            durations: BTreeMap::new(),
            probe_errors: BTreeMap::new(),
            start_delay: Histogram::new(&DELAY_BUCKETS),
            state_writes: Histogram::new(&WRITE_BUCKETS),
            starts: Histogram::new(&START_BUCKETS),
        }
    }
}

/// Histogram bounds of state writes, in seconds: a write is two fsyncs.
const WRITE_BUCKETS: [f64; 12] = [
    0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0,
];

/// Histogram bounds of container starts, in seconds.
const START_BUCKETS: [f64; 16] = [
    0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.02, 0.05,
    0.1, 0.5, 1.0,
];

/// Histogram bounds of probe start delays, in seconds.
const DELAY_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0];

impl Counters {
    /// A probe attempt started `late` after it was due.
    pub fn probe_start(&mut self, late: Duration) {
        self.start_delay.observe(late);
    }

    /// A try of a probe errored (it is tried again, up to the kubelet's 3 tries).
    pub fn probe_error(&mut self, container: &str, kind: ProbeKind) {
        *self
            .probe_errors
            .entry((container.to_string(), kind.as_str()))
            .or_default() += 1;
    }

    /// Starting a container instance (its cgroup, namespace, root, mounts, clone and exec)
    /// took `took`.
    pub fn container_start(&mut self, took: Duration) {
        self.starts.observe(took);
    }

    /// A write of the saved record took `took`.
    pub fn state_write(&mut self, took: Duration) {
        self.state_writes.observe(took);
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
    /// CPU seconds and working set of the running instance from its cgroup; without one,
    /// they are read from its main process.
    pub usage: Option<(f64, u64)>,
    /// Its instrumentation stage (staged containers only) and the verdict on its add-on.
    pub stage: Option<Stage>,
    pub verdict: Option<Verdict>,
}

/// The whole text.
pub fn render(
    pod: &str,
    namespace: &str,
    counters: &Counters,
    pod_restarts: u32,
    restarts_all: u32,
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
    o.push_str("# HELP podvisor_probe_errors_total Probe tries that could not run at all (each attempt is tried up to 3 times).\n# TYPE podvisor_probe_errors_total counter\n");
    for ((c, kind), n) in &counters.probe_errors {
        let _ = writeln!(
            o,
            "podvisor_probe_errors_total{{{},probe_type=\"{kind}\"}} {n}",
            base(c)
        );
    }
    let pod_labels = format!("namespace=\"{namespace}\",pod=\"{pod}\"");
    counters.start_delay.render(
        &mut o,
        "podvisor_probe_start_delay_seconds",
        "How late probe attempts started against their schedule.",
        &pod_labels,
    );
    counters.state_writes.render(
        &mut o,
        "podvisor_state_write_seconds",
        "How long each write of the saved state took (write, fsync, rename, fsync of the directory).",
        &pod_labels,
    );
    counters.starts.render(
        &mut o,
        "podvisor_container_start_seconds",
        "How long podvisor took to start a container instance: its cgroup, mount namespace, root and volumes, clone and exec.",
        &pod_labels,
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
        pod_restarts
    );
    o.push_str("# HELP podvisor_all_containers_restarts_total In-place restarts of every container (restartPolicyRules with action RestartAllContainers).\n# TYPE podvisor_all_containers_restarts_total counter\n");
    let _ = writeln!(
        o,
        "podvisor_all_containers_restarts_total{{namespace=\"{namespace}\",pod=\"{pod}\"}} {restarts_all}"
    );
    o.push_str("# HELP podvisor_instrumentation_stage The stage of a staged container's current start (1) and the others (0).\n# TYPE podvisor_instrumentation_stage gauge\n");
    for c in containers {
        let Some(current) = c.stage else { continue };
        for stage in Stage::ALL {
            let _ = writeln!(
                o,
                "podvisor_instrumentation_stage{{{},stage=\"{stage}\"}} {}",
                base(c.name),
                u8::from(stage == current)
            );
        }
    }
    o.push_str("# HELP podvisor_instrumentation_verdict The verdict on a container's add-on once judged (1), the other (0).\n# TYPE podvisor_instrumentation_verdict gauge\n");
    for c in containers {
        let Some(verdict) = c.verdict else { continue };
        for v in [Verdict::Blamed, Verdict::Cleared] {
            let _ = writeln!(
                o,
                "podvisor_instrumentation_verdict{{{},verdict=\"{}\"}} {}",
                base(c.name),
                v.as_str(),
                u8::from(v == verdict)
            );
        }
    }
    let groups: Vec<i32> = containers
        .iter()
        .filter(|c| c.usage.is_none())
        .filter_map(|c| c.pgid)
        .collect();
    let usage = group_usage(&groups);
    o.push_str("# HELP container_cpu_usage_seconds_total CPU time of the container's running processes.\n# TYPE container_cpu_usage_seconds_total counter\n");
    let usage_of = |c: &ContainerSample<'_>| {
        c.usage
            .or_else(|| c.pgid.and_then(|g| usage.get(&g).copied()))
    };
    for c in containers {
        if let Some((cpu, _)) = usage_of(c) {
            let _ = writeln!(
                o,
                "container_cpu_usage_seconds_total{{{}}} {cpu}",
                base(c.name)
            );
        }
    }
    o.push_str("# HELP container_memory_working_set_bytes Resident memory of the container's processes.\n# TYPE container_memory_working_set_bytes gauge\n");
    for c in containers {
        if let Some((_, mem)) = usage_of(c) {
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
