//! Pod manifests: multi-document YAML into the Kubernetes API types (k8s-openapi), with unknown
//! fields rejected as `kubectl --validate=strict` does, and every problem reported with its
//! file, field path and line:column. Validation (`validate.rs`) collects every problem, not the
//! first.
//!
//! Accepted: exactly one workload (a v1 Pod, or the pod template of an apps/v1 Deployment,
//! StatefulSet or DaemonSet, or of a batch/v1 Job), plus any number of ConfigMaps and Secrets
//! and at most one podvisor `Supervision`.

pub mod dns;
mod env;
pub mod exits;
pub mod explain;
pub mod node;
pub mod plan;
pub mod resize;
pub mod resources;
pub mod security;
pub mod termination;
pub mod validate;
pub mod volumes;

use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use crate::document::supervision::{self, Supervision};
use crate::document::{typed, Problems};
pub use crate::document::{yaml, SpecError, SpecErrors};
use yaml::Document;

/// The workload kinds whose pod podvisor runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    Pod,
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
}

impl WorkloadKind {
    fn from_type(api_version: &str, kind: &str) -> Option<WorkloadKind> {
        match (api_version, kind) {
            ("v1", "Pod") => Some(WorkloadKind::Pod),
            ("apps/v1", "Deployment") => Some(WorkloadKind::Deployment),
            ("apps/v1", "StatefulSet") => Some(WorkloadKind::StatefulSet),
            ("apps/v1", "DaemonSet") => Some(WorkloadKind::DaemonSet),
            ("batch/v1", "Job") => Some(WorkloadKind::Job),
            _ => None,
        }
    }

    /// Where the pod spec sits in a document of this kind.
    pub fn spec_path(self) -> &'static str {
        match self {
            WorkloadKind::Pod => "spec",
            _ => "spec.template.spec",
        }
    }
}

/// The pod to run, as the user wrote it (no defaults applied yet).
#[derive(Debug, Clone)]
pub struct Workload {
    pub kind: WorkloadKind,
    /// The workload's own metadata (a Deployment's name names the pod).
    pub metadata: ObjectMeta,
    /// The pod template's metadata, for templates (labels, annotations).
    pub template_metadata: Option<ObjectMeta>,
    pub spec: PodSpec,
}

/// A whole manifest file, parsed.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub file: String,
    pub workload: Workload,
    pub config_maps: Vec<ConfigMap>,
    pub secrets: Vec<Secret>,
    pub supervision: Option<Supervision>,
    /// Where each document's fields were written, for validation messages.
    documents: Vec<Document>,
    workload_doc: usize,
    supervision_doc: Option<usize>,
}

impl Manifest {
    /// The ConfigMap of that name in this file.
    pub fn config_map(&self, name: &str) -> Option<&ConfigMap> {
        self.config_maps
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(name))
    }

    /// A key of a ConfigMap of this file: `data`, else `binaryData` (as text).
    pub fn config_map_value(&self, name: &str, key: &str) -> Option<String> {
        let m = self.config_map(name)?;
        m.data
            .as_ref()
            .and_then(|d| d.get(key).cloned())
            .or_else(|| {
                let bytes = m.binary_data.as_ref()?.get(key)?;
                Some(String::from_utf8_lossy(&bytes.0).into_owned())
            })
    }

    /// The keys and values of a Secret of this file: `data` decoded, `stringData` on top (as
    /// the API server merges them).
    pub fn secret_data(&self, name: &str) -> Option<std::collections::BTreeMap<String, String>> {
        let s = self
            .secrets
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(name))?;
        let mut out = std::collections::BTreeMap::new();
        for (k, v) in s.data.iter().flatten() {
            out.insert(k.clone(), String::from_utf8_lossy(&v.0).into_owned());
        }
        for (k, v) in s.string_data.iter().flatten() {
            out.insert(k.clone(), v.clone());
        }
        Some(out)
    }
}

fn str_field<'a>(doc: &'a Document, key: &str) -> Option<&'a str> {
    doc.value.get(key).and_then(|v| v.as_str())
}

/// Parses and validates a manifest. `file` names it in messages (`-` for stdin).
/// The pod's containers in the kubelet's order, init containers first: each with its path
/// under `prefix` (`spec.initContainers[0]`), its kind (an init container with
/// `restartPolicy: Always` is a sidecar) and itself.
pub(crate) fn containers_in_order<'a>(
    spec: &'a PodSpec,
    prefix: &'a str,
) -> impl Iterator<
    Item = (
        String,
        crate::lifecycle::Kind,
        &'a k8s_openapi::api::core::v1::Container,
    ),
> + 'a {
    use crate::lifecycle::Kind;
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(move |(i, c)| {
            let kind = match c.restart_policy.as_deref() {
                Some("Always") => Kind::Sidecar,
                _ => Kind::Init,
            };
            (format!("{prefix}.initContainers[{i}]"), kind, c)
        });
    let main = (spec.containers.iter().enumerate())
        .map(move |(i, c)| (format!("{prefix}.containers[{i}]"), Kind::Main, c));
    init.chain(main)
}

pub fn load(file: &str, text: &str) -> Result<Manifest, SpecErrors> {
    let fail = |errors: Vec<SpecError>| SpecErrors {
        file: file.to_string(),
        errors,
    };
    let documents = crate::document::read_documents(file, text)?;
    let mut errors = Vec::new();
    let mut workload: Option<(usize, Workload)> = None;
    let mut config_maps = Vec::new();
    let mut secrets = Vec::new();
    let mut supervision: Option<(usize, Supervision)> = None;

    for (i, doc) in documents.iter().enumerate() {
        let mut problems = Problems {
            doc,
            prefix: String::new(),
            errors: &mut errors,
        };
        if !doc.value.is_object() {
            problems.push("", "a document must be a mapping with apiVersion and kind");
            continue;
        }
        let (Some(api_version), Some(kind)) =
            (str_field(doc, "apiVersion"), str_field(doc, "kind"))
        else {
            let missing = if str_field(doc, "apiVersion").is_none() {
                "apiVersion"
            } else {
                "kind"
            };
            problems.push(missing, format!("{missing} is required"));
            continue;
        };
        if let Some(kind) = WorkloadKind::from_type(api_version, kind) {
            if let Some((first, _)) = &workload {
                problems.push(
                    "kind",
                    format!(
                        "a second workload: podvisor runs exactly one pod per file (the first is the document at line {})",
                        documents[*first].pos.line
                    ),
                );
                continue;
            }
            if let Some(w) = read_workload(kind, doc, problems.errors) {
                workload = Some((i, w));
            }
            continue;
        }
        match (api_version, kind) {
            ("v1", "ConfigMap") => config_maps.extend(typed::<ConfigMap>(doc, &mut errors)),
            ("v1", "Secret") => secrets.extend(typed::<Secret>(doc, &mut errors)),
            (supervision::API_VERSION, "Supervision") => {
                if supervision.is_some() {
                    problems.push("kind", "a second Supervision: at most one per file");
                } else {
                    supervision = typed::<Supervision>(doc, &mut errors).map(|s| (i, s));
                }
            }
            _ => problems.push(
                "kind",
                format!(
                    "{api_version} {kind} is not supported: expected a v1 Pod, an apps/v1 \
                     Deployment, StatefulSet or DaemonSet, a batch/v1 Job, a v1 ConfigMap or \
                     Secret, or a {} Supervision",
                    supervision::API_VERSION
                ),
            ),
        }
    }
    let Some((workload_doc, workload)) = workload else {
        if errors.is_empty() {
            errors.push(SpecError {
                path: String::new(),
                pos: None,
                message: "no workload: expected a Pod, Deployment, StatefulSet, DaemonSet or Job"
                    .to_string(),
            });
        }
        return Err(fail(errors));
    };
    let manifest = Manifest {
        file: file.to_string(),
        workload,
        config_maps,
        secrets,
        supervision_doc: supervision.as_ref().map(|(i, _)| *i),
        supervision: supervision.map(|(_, s)| s),
        documents,
        workload_doc,
    };
    validate::validate(&manifest, &mut errors);
    if errors.is_empty() {
        Ok(manifest)
    } else {
        Err(fail(errors))
    }
}

fn read_workload(
    kind: WorkloadKind,
    doc: &Document,
    errors: &mut Vec<SpecError>,
) -> Option<Workload> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
    let (metadata, template_metadata, spec) = match kind {
        WorkloadKind::Pod => {
            let pod: core::Pod = typed(doc, errors)?;
            (pod.metadata, None, pod.spec)
        }
        WorkloadKind::Deployment => {
            let d: apps::Deployment = typed(doc, errors)?;
            (d.metadata, d.spec.template.metadata, d.spec.template.spec)
        }
        WorkloadKind::StatefulSet => {
            let d: apps::StatefulSet = typed(doc, errors)?;
            (d.metadata, d.spec.template.metadata, d.spec.template.spec)
        }
        WorkloadKind::DaemonSet => {
            let d: apps::DaemonSet = typed(doc, errors)?;
            (d.metadata, d.spec.template.metadata, d.spec.template.spec)
        }
        WorkloadKind::Job => {
            let d: batch::Job = typed(doc, errors)?;
            let t = d.spec.map(|s| s.template);
            (
                d.metadata,
                t.as_ref().and_then(|t| t.metadata.clone()),
                t.and_then(|t| t.spec),
            )
        }
    };
    let Some(spec) = spec else {
        errors.push(SpecError {
            pos: Some(doc.position(kind.spec_path())),
            path: kind.spec_path().to_string(),
            message: "the pod spec is required".to_string(),
        });
        return None;
    };
    Some(Workload {
        kind,
        metadata,
        template_metadata,
        spec,
    })
}
