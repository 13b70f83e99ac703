//! podvisor's own document, `Supervision`: staged instrumentation and whole-pod restarts
//! (docs/escalation.md), as the user wrote them. `problems` checks them through the core's own
//! types (`stage::StagePolicy`, `escalation::PodRestartPolicy`), which the plan then carries,
//! so that `run`, `init` and the controller refuse the same values with the same words. Unknown
//! fields are reported by the reader (serde_ignored), like those of the Kubernetes types.
//!
//! One schema and one reader for both builds: `podvisor run` reads the document beside a pod
//! (`spec::load`), `podvisor init --supervision FILE` reads a file holding just this document
//! (`read_for_container`), in the small PID 1 build too.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::yaml::Document;
use super::{typed, Problems, SpecError, SpecErrors};
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
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: SupervisionSpec,
}

/// The document's metadata: what one written by hand, or exported from a cluster (`kubectl get
/// supervision NAME -o yaml`), holds. podvisor uses none of it; the fields an API server writes
/// are accepted so that an exported document reads as it is.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub generate_name: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    pub creation_timestamp: Option<String>,
    pub deletion_timestamp: Option<String>,
    pub finalizers: Option<Vec<String>>,
    pub owner_references: Option<serde_json::Value>,
    pub managed_fields: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupervisionSpec {
    pub staged_instrumentation: Option<StagedInstrumentation>,
    pub pod_restart: Option<PodRestart>,
}

/// Restart-aware instrumentation stages (docs/escalation.md): each container start runs Nominal, then
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

/// Whole-pod restarts (docs/escalation.md): when restarting one container does not help, refresh the
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

impl Supervision {
    /// Every value that cannot be used, as (field path, message); what the pod holds (the
    /// containers named) is checked by the pod's validation.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut push = |field: String, message: String| out.push((field, message));
        // The errors' texts start with their field: the path says it.
        let bare = |text: String| match text.split_once(": ") {
            Some((_, m)) => m.to_string(),
            None => text,
        };
        if let Some(s) = &self.spec.staged_instrumentation {
            const F: &str = "spec.stagedInstrumentation";
            for e in StagePolicy::problems(s.debug_after_restarts, s.disable_after_restarts) {
                push(format!("{F}.{}", e.field()), bare(e.to_string()));
            }
            match s.verdict_after() {
                Err(e) => push(format!("{F}.verdictAfter"), format!("Invalid value: {e}")),
                Ok(d) if d.is_zero() => push(
                    format!("{F}.verdictAfter"),
                    "Invalid value: \"0s\": must be longer than zero".to_string(),
                ),
                Ok(_) => {}
            }
        }
        if let Some(r) = &self.spec.pod_restart {
            for e in r.problems() {
                push(
                    format!("spec.podRestart.{}", e.field()),
                    bare(e.to_string()),
                );
            }
        }
        out
    }
}

/// Reads a file that holds just a Supervision document, for a container's PID 1 (`podvisor
/// init --supervision FILE`): the same reader, schema and checks as `podvisor run`, plus what
/// a container can use: staged instrumentation is required, `podRestart` refused (a container
/// cannot restart its own pod). `Err` holds every problem with its line:column.
pub fn read_for_container(file: &str, text: &str) -> Result<Supervision, SpecErrors> {
    let doc = super::read_one_document(file, text, "Supervision")?;
    let mut errors = Vec::new();
    let sup = read_one(&doc, &mut errors);
    match sup {
        Some(sup) if errors.is_empty() => Ok(sup),
        _ => Err(SpecErrors {
            file: file.to_string(),
            errors,
        }),
    }
}

fn read_one(doc: &Document, errors: &mut Vec<SpecError>) -> Option<Supervision> {
    let mut p = Problems {
        doc,
        prefix: String::new(),
        errors,
    };
    if !doc.value.is_object() {
        p.push(
            "",
            "the document must be a mapping with apiVersion and kind",
        );
        return None;
    }
    let field = |key: &str| doc.value.get(key).and_then(|v| v.as_str());
    for (key, want) in [("apiVersion", API_VERSION), ("kind", "Supervision")] {
        match field(key) {
            None => p.push(key, "Required value"),
            Some(got) if got != want => p.push(
                key,
                format!("Unsupported value: {got:?}: expected {want:?} (the file holds just the Supervision document)"),
            ),
            Some(_) => {}
        }
    }
    if !p.errors.is_empty() {
        return None;
    }
    let sup: Supervision = typed(doc, p.errors)?;
    for (field, message) in sup.problems() {
        p.push(&field, message);
    }
    if sup.spec.pod_restart.is_some() {
        p.push(
            "spec.podRestart",
            "Forbidden: a container cannot restart its own pod: podRestart is for podvisor run and the cluster controller",
        );
    }
    if sup.spec.staged_instrumentation.is_none() {
        p.push(
            "spec.stagedInstrumentation",
            "Required value: podvisor init --supervision applies staged instrumentation",
        );
    }
    Some(sup)
}
