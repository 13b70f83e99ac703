//! The node's settings on the command line of `run` and `explain`, as the kubelet takes them
//! (`--config`, a KubeletConfiguration file; `--feature-gates`), and podvisor's own
//! `--backoff-initial` / `--backoff-max` over the curve they give.

use std::time::Duration;

use podvisor_core::backoff::BackoffPolicy;
use podvisor_core::duration::format_duration;
use podvisor_core::spec::node::{read_config, FeatureGates, NodeSettings};

use super::manifest::duration;

/// The node settings flags.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// The node's settings: a KubeletConfiguration file (kubelet.config.k8s.io/v1beta1) of which
    /// podvisor honours crashLoopBackOff.maxContainerRestartPeriod and featureGates
    #[arg(long = "config", value_name = "FILE")]
    config: Option<String>,
    /// Kubelet feature gates, NAME=true|false,... (KubeletCrashLoopBackOffMax: on;
    /// ReduceDefaultCrashLoopBackOffDecay, ContainerStopSignals,
    /// SidecarsRestartableDuringPodTermination: off), over the file's
    #[arg(long, value_name = "LIST")]
    feature_gates: Option<String>,
    /// First CrashLoopBackOff delay, over the node's curve (10s; any duration)
    #[arg(long, value_name = "DUR", value_parser = duration)]
    backoff_initial: Option<Duration>,
    /// Longest CrashLoopBackOff delay, over the node's curve (5m; any duration)
    #[arg(long, value_name = "DUR", value_parser = duration)]
    backoff_max: Option<Duration>,
}

/// The node's settings in force.
#[derive(Debug, Clone)]
pub struct Node {
    pub backoff: BackoffPolicy,
    /// Where the backoff curve comes from.
    pub backoff_from: String,
    pub gates: FeatureGates,
}

impl NodeArgs {
    /// The node's settings: the CrashLoopBackOff curve in force, with where it comes from,
    /// and the gates; bad settings are reported here (`Err`: the exit code, 2).
    pub fn node(&self) -> Result<Node, i32> {
        let fail = |msg: String| {
            super::write_err(&format!("error: {msg}\n"));
            2
        };
        let file = match &self.config {
            None => None,
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| fail(format!("{path}: {e}")))?;
                Some(read_config(path, &text).map_err(|e| fail(e.to_string()))?)
            }
        };
        let settings = NodeSettings::new(file.as_ref(), self.feature_gates.as_deref())
            .map_err(|e| fail(format!("--feature-gates: {e}")))?;
        let node = settings.backoff().map_err(|e| {
            fail(match &self.config {
                Some(path) => format!("{path}: {e}"),
                None => e,
            })
        })?;
        let mut from = format!("the node's settings ({})", settings.describe());
        for (flag, d) in [
            ("--backoff-initial", self.backoff_initial),
            ("--backoff-max", self.backoff_max),
        ] {
            if let Some(d) = d {
                from.push_str(&format!("; {flag} {}", format_duration(d)));
            }
        }
        let backoff = BackoffPolicy::new(
            self.backoff_initial.unwrap_or(node.initial),
            self.backoff_max.unwrap_or(node.max),
        );
        Ok(Node {
            backoff,
            backoff_from: from,
            gates: settings.gates,
        })
    }
}
