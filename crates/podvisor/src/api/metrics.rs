//! Metrics for `--metrics-addr` (OpenMetrics text, by prometheus-client): the kubelet's
//! prober metrics under their names and labels (`prober_probe_total`,
//! `prober_probe_duration_seconds`), podvisor's restart counters and probe start delays, and
//! per-container CPU and memory read from each instance's cgroup, or from /proc for its main
//! process without one (cAdvisor's names `container_cpu_usage_seconds_total` and
//! `container_memory_working_set_bytes`; the working set is the resident size there).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::cgroup::UsageFiles;

use podvisor_core::probe::{Outcome, ProbeKind};
use podvisor_core::stage::{Stage, Verdict};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label names and values, in the order they are written.
type Labels = Vec<(&'static str, String)>;

/// Histogram bounds of probe durations, in seconds (Prometheus' defaults).
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

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

/// What the run loop counts between scrapes. A clone shares the counts (prometheus-client's
/// metrics are shared handles): a scrape renders them on a thread of its own while the loop
/// goes on counting.
#[derive(Debug)]
pub struct Counters {
    /// The pod's `namespace` and `pod` labels.
    pod: Labels,
    probes: Family<Labels, Counter>,
    durations: Family<Labels, Histogram, fn() -> Histogram>,
    probe_errors: Family<Labels, Counter>,
    start_delay: Histogram,
    state_writes: Histogram,
    starts: Histogram,
    /// Each container's probe series (by its index), kept once made: a probe runs every
    /// period, and finding its series by its labels (five strings made, hashed and compared,
    /// twice) cost more than the count.
    series: Vec<ProbeSeries>,
}

/// One container's handles on its series of `probes` and `durations`, by probe kind (and
/// result); each made at its first count, so that the text shows only series that counted.
#[derive(Debug, Default)]
struct ProbeSeries {
    counts: [[Option<Counter>; 3]; 3],
    durations: [Option<Histogram>; 3],
}

impl Clone for Counters {
    /// The same counts; the handles the loop keeps are not copied (a scrape only renders).
    fn clone(&self) -> Counters {
        Counters {
            pod: self.pod.clone(),
            probes: self.probes.clone(),
            durations: self.durations.clone(),
            probe_errors: self.probe_errors.clone(),
            start_delay: self.start_delay.clone(),
            state_writes: self.state_writes.clone(),
            starts: self.starts.clone(),
            series: Vec::new(),
        }
    }
}

impl Counters {
    pub fn new(namespace: &str, pod: &str) -> Counters {
        Counters {
            pod: vec![("namespace", namespace.into()), ("pod", pod.into())],
            probes: Family::default(),
            durations: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
            probe_errors: Family::default(),
            start_delay: Histogram::new(DELAY_BUCKETS),
            state_writes: Histogram::new(WRITE_BUCKETS),
            starts: Histogram::new(START_BUCKETS),
            series: Vec::new(),
        }
    }

    /// A probe attempt started `late` after it was due.
    pub fn probe_start(&mut self, late: Duration) {
        self.start_delay.observe(late.as_secs_f64());
    }

    /// A try of a probe errored (it is tried again, up to the kubelet's 3 tries).
    pub fn probe_error(&mut self, container: &str, kind: ProbeKind) {
        let labels = series_labels(&self.pod, container, &[("probe_type", kind.as_str())]);
        self.probe_errors.get_or_create(&labels).inc();
    }

    /// Starting a container instance (its cgroup, namespace, root, mounts, clone and exec)
    /// took `took`.
    pub fn container_start(&mut self, took: Duration) {
        self.starts.observe(took.as_secs_f64());
    }

    /// A write of the saved record took `took`.
    pub fn state_write(&mut self, took: Duration) {
        self.state_writes.observe(took.as_secs_f64());
    }

    /// A probe attempt of container `index` (named `container`) ended, after `took`.
    pub fn probe(
        &mut self,
        index: usize,
        container: &str,
        kind: ProbeKind,
        outcome: &Outcome,
        took: Duration,
    ) {
        // The kubelet's result label: errors count as unknown.
        let (result, r) = match outcome {
            Outcome::Success | Outcome::Warning(_) => ("successful", 0),
            Outcome::Failure(_) => ("failed", 1),
            Outcome::Error(_) => ("unknown", 2),
        };
        let k = match kind {
            ProbeKind::Liveness => 0,
            ProbeKind::Readiness => 1,
            ProbeKind::Startup => 2,
        };
        if self.series.len() <= index {
            self.series.resize_with(index + 1, ProbeSeries::default);
        }
        // Each handle is made at its series' first count, then kept.
        let Counters {
            pod,
            probes,
            durations,
            series,
            ..
        } = self;
        let (series, probe_type) = (&mut series[index], ("probe_type", kind.as_str()));
        series.counts[k][r]
            .get_or_insert_with(|| {
                let labels = series_labels(pod, container, &[probe_type, ("result", result)]);
                probes.get_or_create(&labels).clone()
            })
            .inc();
        series.durations[k]
            .get_or_insert_with(|| {
                durations
                    .get_or_create(&series_labels(pod, container, &[probe_type]))
                    .clone()
            })
            .observe(took.as_secs_f64());
    }
}

/// A series' labels: `container`, then the pod's labels, then `more` (the order the kubelet's
/// metrics have).
fn series_labels(pod: &Labels, container: &str, more: &[(&'static str, &str)]) -> Labels {
    let mut l = vec![("container", container.to_string())];
    l.extend(pod.iter().cloned());
    l.extend(more.iter().map(|&(k, v)| (k, v.to_string())));
    l
}

/// One container as the metrics show it: taken by the run loop, rendered apart from it.
#[derive(Debug)]
pub struct ContainerSample {
    pub name: String,
    pub restarts: u32,
    /// Process group of the running instance, if any.
    pub pgid: Option<i32>,
    /// CPU seconds and working set of the running instance, read when the text is made: from
    /// its cgroup's files, or without a cgroup from its main process.
    pub usage: Usage,
    /// Its instrumentation stage (staged containers only) and the verdict on its add-on.
    pub stage: Option<Stage>,
    pub verdict: Option<Verdict>,
}

/// Where a container's usage comes from.
#[derive(Debug)]
pub enum Usage {
    /// Its instance's cgroup.
    Cgroup(UsageFiles),
    /// Figures already read.
    #[cfg(test)]
    Read(f64, u64),
    /// Its main process (`pgid`), if it runs.
    Process,
}

/// What the pod is now, beside what was counted.
#[derive(Debug)]
pub struct PodSample {
    pub pod_restarts: u32,
    pub restarts_all: u32,
    pub containers: Vec<ContainerSample>,
}

/// The whole text: the counted metrics, then the pod's state now (each running container's
/// usage is read here, so this runs apart from the run loop).
pub fn render(counters: &Counters, now: &PodSample) -> String {
    let mut r = Registry::default();
    r.register(
        "prober_probe",
        "Cumulative number of a liveness, readiness or startup probe for a container by result.",
        counters.probes.clone(),
    );
    r.register(
        "prober_probe_duration_seconds",
        "Duration in seconds for a probe response.",
        counters.durations.clone(),
    );
    r.register(
        "podvisor_probe_errors",
        "Probe tries that could not run at all (each attempt is tried up to 3 times).",
        counters.probe_errors.clone(),
    );
    for (name, help, histogram) in [
        (
            "podvisor_probe_start_delay_seconds",
            "How late probe attempts started against their schedule.",
            &counters.start_delay,
        ),
        (
            "podvisor_state_write_seconds",
            "How long each write of the saved state took (write, fsync, rename, fsync of the directory).",
            &counters.state_writes,
        ),
        (
            "podvisor_container_start_seconds",
            "How long podvisor took to start a container instance: its cgroup, mount namespace, root and volumes, clone and exec (of starts made together, from when the one before it was done).",
            &counters.starts,
        ),
    ] {
        // A family of one: the pod's histogram, under the pod's labels.
        let histogram = histogram.clone();
        let family = Family::<Labels, Histogram, _>::new_with_constructor(move || histogram.clone());
        drop(family.get_or_create(&counters.pod));
        r.register(name, help, family);
    }
    register_restarts(&mut r, counters, now);
    register_stages(&mut r, counters, now);
    register_usage(&mut r, counters, &now.containers);
    let mut out = String::new();
    let _ = encode(&mut out, &r);
    out
}

/// The restart counters, as they are now.
fn register_restarts(r: &mut Registry, counters: &Counters, now: &PodSample) {
    let containers = Family::<Labels, Counter>::default();
    for c in &now.containers {
        let labels = series_labels(&counters.pod, &c.name, &[]);
        containers
            .get_or_create(&labels)
            .inc_by(u64::from(c.restarts));
    }
    r.register(
        "podvisor_container_restarts",
        "Restarts of a container (its restartCount).",
        containers,
    );
    for (name, help, n) in [
        (
            "podvisor_pod_restarts",
            "Whole-pod restarts.",
            now.pod_restarts,
        ),
        (
            "podvisor_all_containers_restarts",
            "In-place restarts of every container (restartPolicyRules with action RestartAllContainers).",
            now.restarts_all,
        ),
    ] {
        let family = Family::<Labels, Counter>::default();
        family.get_or_create(&counters.pod).inc_by(u64::from(n));
        r.register(name, help, family);
    }
}

/// Each staged container's stage, and the verdict on its add-on: 1 for the one it is, 0 for
/// the others.
fn register_stages(r: &mut Registry, counters: &Counters, now: &PodSample) {
    let stages = Family::<Labels, Gauge>::default();
    let verdicts = Family::<Labels, Gauge>::default();
    for c in &now.containers {
        if let Some(current) = c.stage {
            for stage in Stage::ALL {
                let labels = series_labels(&counters.pod, &c.name, &[("stage", stage.as_str())]);
                stages
                    .get_or_create(&labels)
                    .set(i64::from(stage == current));
            }
        }
        if let Some(verdict) = c.verdict {
            for v in [Verdict::Blamed, Verdict::Cleared] {
                let labels = series_labels(&counters.pod, &c.name, &[("verdict", v.as_str())]);
                verdicts.get_or_create(&labels).set(i64::from(v == verdict));
            }
        }
    }
    r.register(
        "podvisor_instrumentation_stage",
        "The stage of a staged container's current start (1) and the others (0).",
        stages,
    );
    r.register(
        "podvisor_instrumentation_verdict",
        "The verdict on a container's add-on once judged (1), the other (0).",
        verdicts,
    );
}

/// Each running container's CPU time and memory.
fn register_usage(r: &mut Registry, counters: &Counters, containers: &[ContainerSample]) {
    let groups: Vec<i32> = containers
        .iter()
        .filter(|c| matches!(c.usage, Usage::Process))
        .filter_map(|c| c.pgid)
        .collect();
    let from_proc = group_usage(&groups);
    let cpu = Family::<Labels, Counter<f64>>::default();
    let memory = Family::<Labels, Gauge>::default();
    for c in containers {
        let usage = match &c.usage {
            // A cgroup gone meanwhile: its instance ended since the scrape came.
            Usage::Cgroup(files) => files.read().map(|u| (u.cpu_seconds, u.working_set)),
            #[cfg(test)]
            Usage::Read(seconds, bytes) => Some((*seconds, *bytes)),
            Usage::Process => c.pgid.and_then(|g| from_proc.get(&g).copied()),
        };
        if let Some((seconds, bytes)) = usage {
            let labels = series_labels(&counters.pod, &c.name, &[]);
            cpu.get_or_create(&labels).inc_by(seconds);
            memory
                .get_or_create(&labels)
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }
    r.register(
        "container_cpu_usage_seconds",
        "CPU time of the container's running processes.",
        cpu,
    );
    r.register(
        "container_memory_working_set_bytes",
        "Resident memory of the container's processes.",
        memory,
    );
}

/// CPU seconds (user + system, with the children it has reaped) and resident bytes of each
/// container's main process (its group leader). Reading only the leaders keeps a scrape short
/// on a large pod; descendants still running are not counted.
fn group_usage(groups: &[i32]) -> BTreeMap<i32, (f64, u64)> {
    // Clock ticks and page size as Linux reports them in /proc (USER_HZ is 100 everywhere).
    let tick = 100.0;
    let page = 4096u64;
    let mut out = BTreeMap::new();
    for &pid in groups {
        let Some(stat) = crate::process::stat::ProcStat::read(pid) else {
            continue;
        };
        let cpu = stat.cpu_ticks as f64 / tick;
        out.insert(pid, (cpu, stat.rss_pages * page));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_has_the_kubelets_names_and_labels() {
        let mut c = Counters::new("ns", "p");
        c.probe(
            0,
            "app",
            ProbeKind::Readiness,
            &Outcome::Success,
            Duration::from_millis(3),
        );
        c.state_write(Duration::from_micros(150));
        let now = PodSample {
            pod_restarts: 2,
            restarts_all: 0,
            containers: vec![ContainerSample {
                name: "app".into(),
                restarts: 4,
                pgid: None,
                usage: Usage::Read(1.5, 4096),
                stage: Some(Stage::Debug),
                verdict: None,
            }],
        };
        let text = render(&c, &now);
        for line in [
            "prober_probe_total{container=\"app\",namespace=\"ns\",pod=\"p\",probe_type=\"Readiness\",result=\"successful\"} 1",
            "prober_probe_duration_seconds_bucket{le=\"0.005\",container=\"app\",namespace=\"ns\",pod=\"p\",probe_type=\"Readiness\"} 1",
            "podvisor_state_write_seconds_bucket{le=\"0.0002\",namespace=\"ns\",pod=\"p\"} 1",
            "podvisor_container_restarts_total{container=\"app\",namespace=\"ns\",pod=\"p\"} 4",
            "podvisor_pod_restarts_total{namespace=\"ns\",pod=\"p\"} 2",
            "podvisor_instrumentation_stage{container=\"app\",namespace=\"ns\",pod=\"p\",stage=\"Debug\"} 1",
            "podvisor_instrumentation_stage{container=\"app\",namespace=\"ns\",pod=\"p\",stage=\"Nominal\"} 0",
            "container_cpu_usage_seconds_total{container=\"app\",namespace=\"ns\",pod=\"p\"} 1.5",
            "container_memory_working_set_bytes{container=\"app\",namespace=\"ns\",pod=\"p\"} 4096",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }

    /// The handles kept per container count into the series the text shows, each result and
    /// kind apart, and a clone (a scrape's) sees the counts made after it was taken.
    #[test]
    fn kept_series_count_each_probe_and_result() {
        let mut c = Counters::new("ns", "p");
        let scrape = c.clone();
        let ms = Duration::from_millis;
        for _ in 0..3 {
            c.probe(1, "web", ProbeKind::Liveness, &Outcome::Success, ms(1));
        }
        let failed = Outcome::Failure("HTTP 500".into());
        c.probe(1, "web", ProbeKind::Liveness, &failed, ms(700));
        c.probe(0, "db", ProbeKind::Startup, &Outcome::Success, ms(2));
        let now = PodSample {
            pod_restarts: 0,
            restarts_all: 0,
            containers: Vec::new(),
        };
        let text = render(&scrape, &now);
        for line in [
            "prober_probe_total{container=\"web\",namespace=\"ns\",pod=\"p\",probe_type=\"Liveness\",result=\"successful\"} 3",
            "prober_probe_total{container=\"web\",namespace=\"ns\",pod=\"p\",probe_type=\"Liveness\",result=\"failed\"} 1",
            "prober_probe_total{container=\"db\",namespace=\"ns\",pod=\"p\",probe_type=\"Startup\",result=\"successful\"} 1",
            "prober_probe_duration_seconds_bucket{le=\"0.005\",container=\"web\",namespace=\"ns\",pod=\"p\",probe_type=\"Liveness\"} 3",
            "prober_probe_duration_seconds_count{container=\"web\",namespace=\"ns\",pod=\"p\",probe_type=\"Liveness\"} 4",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("probe_type=\"Readiness\""), "{text}");
    }
}
