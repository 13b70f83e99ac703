//! The node's settings, as the kubelet takes them: feature gates (`--feature-gates`, and the
//! file's `featureGates`, the flag winning) and a KubeletConfiguration file (`--config`) of
//! which podvisor honours `crashLoopBackOff.maxContainerRestartPeriod` (any other field is
//! refused by name, never silently passed over); validated as the kubelet validates them, and
//! what they decide: the CrashLoopBackOff curve (`newCrashLoopBackOff` in pkg/kubelet).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::backoff::{BackoffPolicy, DEFAULT_INITIAL, DEFAULT_MAX};
use crate::document::{read_one_document, typed, Problems, SpecError, SpecErrors};
use crate::duration::{format_duration, parse_duration};

/// The KubeletConfiguration's group and version.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";

/// KEP-4603's curve (`reducedInitialCrashLoopBackOff`, `reducedMaxCrashLoopBackOff`).
pub const REDUCED_INITIAL: Duration = Duration::from_secs(1);
pub const REDUCED_MAX: Duration = Duration::from_secs(60);

/// The kubelet feature gates podvisor honours, with their stage and their default in the
/// kubelet of 1.36.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gate {
    /// KEP-5593 (beta, on): `crashLoopBackOff.maxContainerRestartPeriod` is honoured.
    KubeletCrashLoopBackOffMax,
    /// KEP-4603 (alpha, off): the curve starts at 1 s and stops at 60 s.
    ReduceDefaultCrashLoopBackOffDecay,
    /// KEP-4960 (alpha, off): `lifecycle.stopSignal`, and each container's stop signal in
    /// its status.
    ContainerStopSignals,
    /// KEP-4438 (alpha in 1.37, off): a sidecar that exits while the pod terminates, before
    /// its turn to stop, is restarted.
    SidecarsRestartableDuringPodTermination,
}

const GATES: [(Gate, &str, &str, bool); 4] = [
    (
        Gate::SidecarsRestartableDuringPodTermination,
        "SidecarsRestartableDuringPodTermination",
        "ALPHA",
        false,
    ),
    (
        Gate::ContainerStopSignals,
        "ContainerStopSignals",
        "ALPHA",
        false,
    ),
    (
        Gate::KubeletCrashLoopBackOffMax,
        "KubeletCrashLoopBackOffMax",
        "BETA",
        true,
    ),
    (
        Gate::ReduceDefaultCrashLoopBackOffDecay,
        "ReduceDefaultCrashLoopBackOffDecay",
        "ALPHA",
        false,
    ),
];

/// The gates in force: the defaults, then what was set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<Gate, bool>,
}

impl FeatureGates {
    /// Whether `gate` is on.
    pub fn enabled(&self, gate: Gate) -> bool {
        let default = GATES.iter().find(|g| g.0 == gate).is_some_and(|g| g.3);
        self.set.get(&gate).copied().unwrap_or(default)
    }

    /// Sets gate `name`, as the kubelet's `--feature-gates` does (`Err`: its words).
    pub fn set(&mut self, name: &str, on: bool) -> Result<(), String> {
        let Some(gate) = GATES.iter().find(|g| g.1 == name) else {
            let known: Vec<&str> = GATES.iter().map(|g| g.1).collect();
            return Err(format!(
                "unrecognized feature gate: {name} (podvisor honours {})",
                known.join(", ")
            ));
        };
        self.set.insert(gate.0, on);
        Ok(())
    }

    /// Applies the flag's `Name=bool,Name=bool` list.
    pub fn set_from_flag(&mut self, list: &str) -> Result<(), String> {
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("missing bool value for {item}"))?;
            let on = parse_bool(value.trim()).ok_or_else(|| {
                format!("invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax")
            })?;
            self.set(name.trim(), on)?;
        }
        Ok(())
    }

    /// Each gate podvisor honours: (name, stage, on).
    pub fn list(&self) -> Vec<(&'static str, &'static str, bool)> {
        GATES
            .iter()
            .map(|g| (g.1, g.2, self.enabled(g.0)))
            .collect()
    }
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The fields of a KubeletConfiguration that podvisor honours.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KubeletConfiguration {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    crash_loop_back_off: Option<CrashLoopBackOff>,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CrashLoopBackOff {
    #[serde(default)]
    max_container_restart_period: Option<String>,
}

/// A node settings file, read: the gates it sets and its maximum restart period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigFile {
    pub feature_gates: Vec<(String, bool)>,
    pub max_container_restart_period: Option<Duration>,
}

/// Reads a KubeletConfiguration file: `Err` names each problem with its line:column (an
/// unknown field among them: podvisor honours only the fields above).
pub fn read_config(file: &str, text: &str) -> Result<ConfigFile, SpecErrors> {
    let fail = |errors: Vec<SpecError>| SpecErrors {
        file: file.to_string(),
        errors,
    };
    let doc = &read_one_document(file, text, "KubeletConfiguration")?;
    let mut errors = Vec::new();
    let mut p = Problems {
        doc,
        prefix: String::new(),
        errors: &mut errors,
    };
    let field = |key: &str| doc.value.get(key).and_then(|v| v.as_str());
    for (key, want) in [
        ("apiVersion", API_VERSION),
        ("kind", "KubeletConfiguration"),
    ] {
        match field(key) {
            None => p.push(key, "Required value"),
            Some(got) if got != want => {
                p.push(
                    key,
                    format!("Unsupported value: {got:?}: expected {want:?}"),
                );
            }
            Some(_) => {}
        }
    }
    if !errors.is_empty() {
        return Err(fail(errors));
    }
    let Some(config) = typed::<KubeletConfiguration>(doc, &mut errors) else {
        return Err(fail(errors));
    };
    let mut p = Problems {
        doc,
        prefix: String::new(),
        errors: &mut errors,
    };
    let period_path = "crashLoopBackOff.maxContainerRestartPeriod";
    let period = config
        .crash_loop_back_off
        .and_then(|c| c.max_container_restart_period)
        .and_then(|text| match parse_duration(&text) {
            Ok(d) => Some(d),
            Err(e) => {
                p.push(period_path, format!("Invalid value: {text:?}: {e}"));
                None
            }
        });
    if !errors.is_empty() {
        return Err(fail(errors));
    }
    Ok(ConfigFile {
        feature_gates: config.feature_gates.into_iter().collect(),
        max_container_restart_period: period,
    })
}

/// The node's settings in force: gates and the maximum restart period, if set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSettings {
    pub gates: FeatureGates,
    pub max_container_restart_period: Option<Duration>,
}

impl NodeSettings {
    /// The file's settings, then the flag's gates over them (the kubelet's precedence).
    pub fn new(
        file: Option<&ConfigFile>,
        gates_flag: Option<&str>,
    ) -> Result<NodeSettings, String> {
        let mut gates = FeatureGates::default();
        for (name, on) in file.iter().flat_map(|f| &f.feature_gates) {
            gates
                .set(name, *on)
                .map_err(|e| format!("featureGates: {e}"))?;
        }
        if let Some(list) = gates_flag {
            gates.set_from_flag(list)?;
        }
        Ok(NodeSettings {
            gates,
            max_container_restart_period: file.and_then(|f| f.max_container_restart_period),
        })
    }

    /// The CrashLoopBackOff curve, validated as the kubelet validates its configuration
    /// (`Err`: its words): the default 10 s to 300 s; with ReduceDefaultCrashLoopBackOffDecay
    /// 1 s to 60 s; with KubeletCrashLoopBackOffMax the maximum is the node's
    /// `maxContainerRestartPeriod` (defaulted to 300 s, as the kubelet's defaulting does,
    /// and so over the reduced 60 s too), and an initial delay above it is lowered to it.
    pub fn backoff(&self) -> Result<BackoffPolicy, String> {
        let gate_max = self.gates.enabled(Gate::KubeletCrashLoopBackOffMax);
        let (mut initial, mut max) =
            match self.gates.enabled(Gate::ReduceDefaultCrashLoopBackOffDecay) {
                true => (REDUCED_INITIAL, REDUCED_MAX),
                false => (DEFAULT_INITIAL, DEFAULT_MAX),
            };
        match (gate_max, self.max_container_restart_period) {
            (false, Some(_)) => {
                return Err("invalid configuration: FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set".into());
            }
            (false, None) => {}
            (true, period) => {
                let period = period.unwrap_or(DEFAULT_MAX);
                if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&period) {
                    return Err(format!(
                        "invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod (got: {} seconds) must be set between 1s and 300s",
                        period.as_secs_f64()
                    ));
                }
                max = period;
                initial = initial.min(max);
            }
        }
        Ok(BackoffPolicy::new(initial, max))
    }

    /// Where the curve comes from (its gates and setting), for `explain`.
    pub fn describe(&self) -> String {
        let on: Vec<String> = (self.gates.list().into_iter())
            .filter(|(name, _, _)| name.contains("CrashLoopBackOff"))
            .map(|(name, _, on)| format!("{name}={on}"))
            .collect();
        let period = match self.max_container_restart_period {
            Some(d) => format!("maxContainerRestartPeriod {}", format_duration(d)),
            None => "maxContainerRestartPeriod not set".into(),
        };
        format!("{}; {period}", on.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn curve(file: Option<&str>, flag: Option<&str>) -> Result<(Duration, Duration), String> {
        let file = file
            .map(|t| {
                read_config(
                    "node.yaml",
                    &format!("apiVersion: {API_VERSION}\nkind: KubeletConfiguration\n{t}"),
                )
            })
            .transpose()
            .map_err(|e| e.to_string())?;
        let b = NodeSettings::new(file.as_ref(), flag)?.backoff()?;
        Ok((b.initial, b.max))
    }

    #[test]
    fn the_curve_as_the_kubelet_of_1_36_makes_it() {
        assert_eq!(curve(None, None), Ok((S(10), S(300))));
        let period = |p: &str| format!("crashLoopBackOff: {{maxContainerRestartPeriod: {p}}}\n");
        assert_eq!(curve(Some(&period("60s")), None), Ok((S(10), S(60))));
        // A maximum under 10 s lowers the initial delay to it: a constant interval.
        assert_eq!(curve(Some(&period("3s")), None), Ok((S(3), S(3))));
        // KEP-4603's gate: 1 s, and 60 s unless KubeletCrashLoopBackOffMax's defaulted 300 s
        // takes over (the kubelet's defaulting sets it whenever that gate is on).
        let reduce = "ReduceDefaultCrashLoopBackOffDecay=true";
        assert_eq!(curve(None, Some(reduce)), Ok((S(1), S(300))));
        let both = "ReduceDefaultCrashLoopBackOffDecay=true,KubeletCrashLoopBackOffMax=false";
        assert_eq!(curve(None, Some(both)), Ok((S(1), S(60))));
        assert_eq!(curve(Some(&period("60s")), Some(reduce)), Ok((S(1), S(60))));
        // The file's gates, and the flag over them.
        let file_gates = "featureGates: {ReduceDefaultCrashLoopBackOffDecay: true}\n";
        assert_eq!(curve(Some(file_gates), None), Ok((S(1), S(300))));
        assert_eq!(
            curve(
                Some(file_gates),
                Some("ReduceDefaultCrashLoopBackOffDecay=false")
            ),
            Ok((S(10), S(300)))
        );
    }

    #[test]
    fn what_the_kubelet_refuses_is_refused_in_its_words() {
        let period = |p: &str| format!("crashLoopBackOff: {{maxContainerRestartPeriod: {p}}}\n");
        assert_eq!(
            curve(Some(&period("500ms")), None),
            Err("invalid configuration: CrashLoopBackOff.MaxContainerRestartPeriod (got: 0.5 seconds) must be set between 1s and 300s".into())
        );
        assert!(curve(Some(&period("301s")), None)
            .unwrap_err()
            .contains("(got: 301 seconds)"));
        assert_eq!(
            curve(Some(&period("60s")), Some("KubeletCrashLoopBackOffMax=false")),
            Err("invalid configuration: FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set".into())
        );
        assert!(curve(None, Some("NoSuchGate=true"))
            .unwrap_err()
            .starts_with("unrecognized feature gate: NoSuchGate"));
        assert!(curve(None, Some("KubeletCrashLoopBackOffMax=maybe"))
            .unwrap_err()
            .contains("strconv.ParseBool"));
        // A field podvisor does not honour, and a bad duration, at their line:column.
        let err = curve(
            Some("crashLoopBackOff: {maxContainerRestartPeriod: 60s}\nmaxPods: 10\n"),
            None,
        )
        .unwrap_err();
        assert_eq!(err, "node.yaml:4:1: unknown field \"maxPods\"");
        let err = curve(Some(&period("soon")), None).unwrap_err();
        assert!(
            err.starts_with("node.yaml:3:")
                && err.contains(
                    "crashLoopBackOff.maxContainerRestartPeriod: Invalid value: \"soon\""
                ),
            "{err}"
        );
        let err = read_config("node.yaml", "apiVersion: v1\nkind: Pod\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("node.yaml:1:")
                && err.contains("expected \"kubelet.config.k8s.io/v1beta1\""),
            "{err}"
        );
    }
}
