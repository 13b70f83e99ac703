//! podvisor's own document, `Supervision`: staged instrumentation (seed 000) and whole-pod
//! restarts (seed 001), as the user wrote them. Validation (`validate.rs`) checks them through
//! the core's own types (`stage::StagePolicy`, `escalation::PodRestartPolicy`), which the plan
//! then carries. Unknown fields are reported by the loader (serde_ignored), like those of the
//! Kubernetes types.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::duration::{parse_duration, DurationError};
use crate::escalation::{PodRestartPolicy, PodRestartPolicyError};
use crate::stage::{StagePolicy, StagePolicyError, StagedEnv, DEFAULT_VERDICT_AFTER};

pub const API_VERSION: &str = "podvisor.io/v1alpha1";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Supervision {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SupervisionSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupervisionSpec {
    pub staged_instrumentation: Option<StagedInstrumentation>,
    pub pod_restart: Option<PodRestart>,
}

/// Restart-aware instrumentation stages (seed 000): each container start runs Nominal, then
/// Debug, then Disabled as its restarts pile up. Defaults: `debugAfterRestarts` 3,
/// `disableAfterRestarts` 6, `verdictAfter` 10m.
///
/// Also the cluster's Supervision CRD block (`schema` feature): one definition, so the local
/// document and the CRD cannot drift apart.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StagedInstrumentation {
    /// On when absent: writing the block asks for it; `enabled: false` keeps it written but off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Containers the stages apply to; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containers: Option<Vec<String>>,
    /// Variables of the Nominal and Debug stages (the add-on, e.g. LD_PRELOAD).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Variables added in the Debug stage.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub debug_env: BTreeMap<String, String>,
    /// Restarts after which starts run in Debug (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_after_restarts: Option<u32>,
    /// Restarts after which starts run Disabled (default 6; not below debugAfterRestarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_after_restarts: Option<u32>,
    /// The add-on already logs in Nominal: no Debug stage.
    #[serde(default, skip_serializing_if = "is_false")]
    pub logging: bool,
    /// Clean running after Disabled that blames the add-on, as Kubernetes writes durations
    /// (`10m`; default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict_after: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl StagedInstrumentation {
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    /// The stage thresholds (absent ones defaulted), or why they cannot be used.
    pub fn policy(&self) -> Result<StagePolicy, StagePolicyError> {
        StagePolicy::new(
            self.debug_after_restarts,
            self.disable_after_restarts,
            self.logging,
        )
    }

    /// `verdictAfter`, defaulted.
    pub fn verdict_after(&self) -> Result<Duration, DurationError> {
        self.verdict_after
            .as_deref()
            .map_or(Ok(DEFAULT_VERDICT_AFTER), parse_duration)
    }

    /// Whether container `name` is staged (all containers when `containers` is absent).
    pub fn selects(&self, name: &str) -> bool {
        self.containers
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
    }

    /// The variables of each stage, in the order written (keys sorted, as YAML maps have no
    /// order that the Kubernetes types keep).
    pub fn staged_env(&self) -> StagedEnv {
        let pairs = |m: &BTreeMap<String, String>| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Vec<_>>()
        };
        StagedEnv {
            env: pairs(&self.env),
            debug_env: pairs(&self.debug_env),
        }
    }
}

/// Whole-pod restarts (seed 001): when restarting one container does not help, refresh the
/// pod's shared context; past a limit, give up. Also the Supervision CRD's block.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PodRestart {
    /// A container restarted this many times ...
    pub after_container_restarts: u32,
    /// ... within this window (as Kubernetes writes durations: `10m`) restarts the whole pod.
    pub within: String,
    /// Whole-pod restarts after which podvisor gives up (GaveUp).
    pub max_pod_restarts: u32,
}

/// Why `podRestart` cannot be used: its window, or one of its numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodRestartError {
    #[error("within: Invalid value: {0}")]
    Within(DurationError),
    #[error(transparent)]
    Policy(#[from] PodRestartPolicyError),
}

impl PodRestartError {
    pub fn field(&self) -> &'static str {
        match self {
            PodRestartError::Within(_) => "within",
            PodRestartError::Policy(e) => e.field(),
        }
    }
}

impl PodRestart {
    /// Every value that cannot be used.
    pub fn problems(&self) -> Vec<PodRestartError> {
        match parse_duration(&self.within) {
            Err(e) => {
                let mut out = vec![PodRestartError::Within(e)];
                out.extend(
                    PodRestartPolicy::problems(
                        self.after_container_restarts,
                        Duration::from_secs(1),
                        self.max_pod_restarts,
                    )
                    .into_iter()
                    .map(PodRestartError::Policy),
                );
                out
            }
            Ok(within) => PodRestartPolicy::problems(
                self.after_container_restarts,
                within,
                self.max_pod_restarts,
            )
            .into_iter()
            .map(PodRestartError::Policy)
            .collect(),
        }
    }

    /// The policy as the core runs it, or why it cannot be used.
    pub fn policy(&self) -> Result<PodRestartPolicy, PodRestartError> {
        let within = parse_duration(&self.within).map_err(PodRestartError::Within)?;
        Ok(PodRestartPolicy::new(
            self.after_container_restarts,
            within,
            self.max_pod_restarts,
        )?)
    }
}
