//! podvisor's own document, `Supervision`: staged instrumentation (seed 000) and whole-pod
//! restarts (seed 001). Parsed and validated here; enforced by the escalation work. Unknown
//! fields are reported by the loader (serde_ignored), like those of the Kubernetes types.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

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

/// Defaults: `debugAfterRestarts` 3, `disableAfterRestarts` 6 (SPEC.md).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagedInstrumentation {
    #[serde(default)]
    pub enabled: bool,
    /// Containers the stages apply to; all when absent.
    pub containers: Option<Vec<String>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub debug_env: BTreeMap<String, String>,
    pub debug_after_restarts: Option<u32>,
    pub disable_after_restarts: Option<u32>,
    #[serde(default)]
    pub logging: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRestart {
    pub after_container_restarts: u32,
    /// A duration as Kubernetes writes them (`10m`), checked by validation.
    pub within: String,
    pub max_pod_restarts: u32,
}
