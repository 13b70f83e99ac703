//! The `Supervision` custom resource (podvisor.io/v1alpha1, namespaced): a label selector plus
//! the same `podRestart` and `stagedInstrumentation` blocks as podvisor's local document (the
//! very types of `podvisor_core::spec::supervision`), and the status the controller reports.
//!
//! The CRD's schema is generated from these types (`podvisor-controller crd`) and checked in as
//! `deploy/crd.yaml`; a test fails when the two differ. Validation of the numbers is the core's
//! own (`StagePolicy::problems`, `PodRestartPolicy::problems`), so a cluster refuses exactly
//! what `podvisor validate` refuses.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use std::collections::BTreeMap;

use kube::core::{ParseExpressionError, Selector, SelectorExt};
use kube::CustomResource;
use podvisor_core::escalation::PodRestartPolicy;
use podvisor_core::spec::supervision::{PodRestart, StagedInstrumentation};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which pods are supervised, and how.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "podvisor.io",
    version = "v1alpha1",
    kind = "Supervision",
    namespaced,
    status = "SupervisionStatus",
    shortname = "sv",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Pods","type":"integer","jsonPath":".status.selectedPods"}"#,
    printcolumn = r#"{"name":"Pod restarts","type":"integer","jsonPath":".status.podRestarts"}"#,
    printcolumn = r#"{"name":"Gave up","type":"integer","jsonPath":".status.gaveUp"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SupervisionSpec {
    /// The pods of this namespace that are supervised. Required, and must not be empty: an
    /// empty selector would select every pod of the namespace.
    pub selector: LabelSelector,
    /// Restart-aware instrumentation stages, applied in the pods by `podvisor init` (the
    /// webhook puts it there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_instrumentation: Option<StagedInstrumentation>,
    /// Whole-pod restarts: applied by the controller through the Eviction API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_restart: Option<PodRestart>,
}

/// What the controller last saw and did.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SupervisionStatus {
    /// The generation the status is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the spec is usable and selects pods), Degraded (an eviction was refused or the
    /// API failed), GaveUp (an owner's pods passed maxPodRestarts).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Pods the selector matches.
    #[serde(default)]
    pub selected_pods: u32,
    /// Whole-pod restarts made, summed over the selected pods' owners' records.
    #[serde(default)]
    pub pod_restarts: u32,
    /// Owners (ReplicaSets, StatefulSets, …) given up on.
    #[serde(default)]
    pub gave_up: u32,
}

/// A reason the spec cannot be used, with its field path under `spec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl SupervisionSpec {
    /// Every reason this spec cannot be used (empty: usable). The messages are the core's,
    /// as `podvisor validate` prints them for the local document.
    pub fn problems(&self) -> Vec<SpecProblem> {
        let mut out = Vec::new();
        let sel = &self.selector;
        let labels_empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty());
        let exprs_empty = sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
        if labels_empty && exprs_empty {
            out.push(SpecProblem {
                field: "spec.selector".into(),
                message: "Invalid value: {}: an empty selector selects every pod in the \
                          namespace; name the supervised pods' labels"
                    .into(),
            });
        }
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            let field = format!("spec.selector.matchExpressions[{i}]");
            let values = e.values.as_ref().map_or(0, |v| v.len());
            let problem = match e.operator.as_str() {
                "In" | "NotIn" if values == 0 => {
                    Some(format!("values: Required value: operator {} needs values", e.operator))
                }
                "Exists" | "DoesNotExist" if values > 0 => Some(format!(
                    "values: Forbidden: operator {} takes no values",
                    e.operator
                )),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => None,
                other => Some(format!(
                    "operator: Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""
                )),
            };
            if let Some(message) = problem {
                out.push(SpecProblem { field, message });
            }
        }
        if let Some(si) = &self.staged_instrumentation {
            for e in podvisor_core::stage::StagePolicy::problems(
                si.debug_after_restarts,
                si.disable_after_restarts,
            ) {
                out.push(SpecProblem {
                    field: format!("spec.stagedInstrumentation.{}", e.field()),
                    message: strip_field(&e.to_string(), e.field()),
                });
            }
            if let Err(e) = si.verdict_after() {
                out.push(SpecProblem {
                    field: "spec.stagedInstrumentation.verdictAfter".into(),
                    message: format!("Invalid value: {e}"),
                });
            }
        }
        if let Some(pr) = &self.pod_restart {
            for e in pr.problems() {
                out.push(SpecProblem {
                    field: format!("spec.podRestart.{}", e.field()),
                    message: strip_field(&e.to_string(), e.field()),
                });
            }
        }
        out
    }

    /// The selector as kube-rs matches labels with it (`Err`: one it cannot read).
    pub fn label_selector(&self) -> Result<Selector, ParseExpressionError> {
        Selector::try_from(self.selector.clone())
    }

    /// Whether the selector matches these labels (a selector it cannot read matches nothing).
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.label_selector().is_ok_and(|s| s.matches(labels))
    }

    /// The whole-pod restart policy as the core runs it, when the spec asks for one and is
    /// usable.
    pub fn pod_restart_policy(&self) -> Option<PodRestartPolicy> {
        self.pod_restart.as_ref().and_then(|p| p.policy().ok())
    }
}

/// The core's messages start with their field; the status names the full path instead.
fn strip_field(message: &str, field: &str) -> String {
    message
        .strip_prefix(field)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message)
        .to_string()
}

/// The CRD as YAML: what `podvisor-controller crd` prints and `deploy/crd.yaml` holds.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    let crd = Supervision::crd();
    let body = serde_saphyr::to_string(&crd).expect("a CRD serializes");
    format!(
        "# Generated by `podvisor-controller crd` from crates/podvisor-controller/src/crd.rs: do not edit.\n{body}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> SupervisionSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn a_usable_spec_has_no_problems() {
        let s = spec(
            "selector: {matchLabels: {app: web}}\npodRestart: {afterContainerRestarts: 5, within: 10m, maxPodRestarts: 3}\n",
        );
        assert_eq!(s.problems(), []);
        let p = s.pod_restart_policy().unwrap();
        assert_eq!(p.within.as_secs(), 600);
    }

    #[test]
    fn every_problem_is_named_with_its_field() {
        let s = spec(
            "selector: {}\nstagedInstrumentation: {debugAfterRestarts: 5, disableAfterRestarts: 2, verdictAfter: soon}\npodRestart: {afterContainerRestarts: 0, within: 10x, maxPodRestarts: 0}\n",
        );
        let fields: Vec<String> = s.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "spec.selector",
                "spec.stagedInstrumentation.disableAfterRestarts",
                "spec.stagedInstrumentation.verdictAfter",
                "spec.podRestart.within",
                "spec.podRestart.afterContainerRestarts",
                "spec.podRestart.maxPodRestarts",
            ]
        );
        let order = &s.problems()[1];
        assert_eq!(
            order.message,
            "Invalid value: 2: must be >= debugAfterRestarts (5)"
        );
        assert!(s.pod_restart_policy().is_none());
    }

    #[test]
    fn selector_operators_are_checked() {
        let mut s = spec("selector: {matchExpressions: [{key: app, operator: In}, {key: b, operator: Maybe}, {key: c, operator: Exists, values: [x]}]}\n");
        let msgs: Vec<String> = s.problems().into_iter().map(|p| p.to_string()).collect();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        assert!(msgs[0].starts_with("spec.selector.matchExpressions[0]: values: Required"));
        assert!(msgs[1].contains("Unsupported value: \"Maybe\""));
        assert!(msgs[2].contains("takes no values"));
        s.selector.match_expressions = None;
        s.selector.match_labels = Some(BTreeMap::from([("app".into(), "web".into())]));
        assert_eq!(s.problems(), []);
    }
}
