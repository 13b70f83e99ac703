//! What the webhook makes of a pod: a pure function of the pod, the Supervisions of its
//! namespace and the injection settings, giving the mutated pod (the JSONPatch is its diff).
//!
//! For a pod that a Supervision with `stagedInstrumentation` selects, it adds:
//! - an init container (the `podvisor` image) running `podvisor copy-self` into an emptyDir,
//!   which the containers run podvisor from (the image is `FROM scratch`: no `cp`);
//! - the Supervision's staged instrumentation as a document in the pod annotation
//!   `podvisor.io/supervision`, mounted as a file by a downwardAPI volume (so the stage env
//!   `podvisor init` applies is the Supervision's, read-only, without a ConfigMap to manage);
//! - an emptyDir for the start counts (it survives container restarts, not the pod: docs/escalation.md),
//!   with a directory per container that `podvisor init` makes (`--state-dir
//!   /podvisor/state/NAME`), so each container counts its own starts whatever user it runs as
//!   (a subPath directory would be made by the kubelet, owned by root);
//! - each selected container's `command` wrapped: `podvisor init --supervision … --state-dir …
//!   --container NAME -- COMMAND…` (its `args` follow, as the runtime appends them).
//!
//! In a Guaranteed pod the init container asks for small equal requests and limits, so that
//! the pod stays Guaranteed (its QoS class, which an in-place resize may not change).
//!
//! A selected container without `command` is left alone: the image's entrypoint is unknown to
//! a webhook (it would need the image's config), and a guess would run the wrong program. The
//! annotation `podvisor.io/injection-skipped` says which and why.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource,
    ObjectFieldSelector, Pod, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use podvisor_core::spec::resize::{qos_class, QosClass};
use podvisor_core::spec::supervision::StagedInstrumentation;
use serde::Serialize;

use crate::crd::Supervision;

/// The label (on a pod, or on its namespace) that opts in.
pub const INJECT_LABEL: &str = "podvisor.io/inject";
/// Set on an injected pod: the Supervision applied.
pub const INJECTED_ANNOTATION: &str = "podvisor.io/injected";
/// Why a pod, or some of its containers, were left alone.
pub const SKIPPED_ANNOTATION: &str = "podvisor.io/injection-skipped";
/// The staged-instrumentation document `podvisor init` reads.
pub const SUPERVISION_ANNOTATION: &str = "podvisor.io/supervision";

pub const BIN_VOLUME: &str = "podvisor-bin";
pub const STATE_VOLUME: &str = "podvisor-state";
pub const SUPERVISION_VOLUME: &str = "podvisor-supervision";
pub const BIN_DIR: &str = "/podvisor/bin";
pub const STATE_DIR: &str = "/podvisor/state";
pub const SUPERVISION_DIR: &str = "/podvisor/supervision";
pub const SUPERVISION_FILE: &str = "supervision.yaml";
pub const INIT_CONTAINER: &str = "podvisor-install";

/// Settings of the injection (command-line flags of the controller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The `podvisor` image (FROM scratch, `/podvisor`).
    pub image: String,
    pub image_pull_policy: Option<String>,
}

/// What became of the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Wrapped these containers with the named Supervision; some may have been skipped.
    Injected {
        supervision: String,
        wrapped: Vec<String>,
        skipped: Vec<String>,
    },
    /// Nothing injected; the reason is in the annotation too.
    Skipped(String),
    /// Injected earlier (a reinvocation, or the second of two matching webhooks): unchanged.
    AlreadyInjected,
}

/// The pod with podvisor injected (or annotated with why not), and what happened.
pub fn inject(
    pod: &Pod,
    namespace: &str,
    sups: &[Arc<Supervision>],
    s: &Settings,
) -> (Pod, Outcome) {
    let mut out = pod.clone();
    if pod.annotations().contains_key(INJECTED_ANNOTATION) {
        return (out, Outcome::AlreadyInjected);
    }
    let skip = |mut out: Pod, why: String| {
        out.annotations_mut()
            .insert(SKIPPED_ANNOTATION.into(), why.clone());
        (out, Outcome::Skipped(why))
    };
    let mut matching: Vec<&Supervision> = sups
        .iter()
        .map(|sup| &**sup)
        .filter(|sup| sup.namespace().as_deref() == Some(namespace))
        .filter(|sup| sup.spec.problems().is_empty())
        .filter(|sup| sup.spec.selects(pod.labels()))
        .filter(|sup| {
            sup.spec
                .staged_instrumentation
                .as_ref()
                .is_some_and(|si| si.is_enabled())
        })
        .collect();
    matching.sort_by_key(|sup| sup.name_any());
    let Some(sup) = matching.first() else {
        return skip(
            out,
            format!("no usable Supervision with stagedInstrumentation in namespace {namespace} selects this pod"),
        );
    };
    let si = sup.spec.staged_instrumentation.as_ref().expect("filtered");
    let spec = out.spec.get_or_insert_with(Default::default);
    let mut wrapped = Vec::new();
    let mut skipped = Vec::new();
    for c in spec.containers.iter_mut().filter(|c| si.selects(&c.name)) {
        match c.command.as_ref() {
            None => skipped.push(format!(
                "{}: no command (the image's entrypoint is unknown to a webhook; set command to have it wrapped)",
                c.name
            )),
            Some(cmd) if cmd.first().is_some_and(|a| a.starts_with(BIN_DIR)) => {
                skipped.push(format!("{}: already runs podvisor", c.name))
            }
            Some(_) => {
                wrap(c);
                wrapped.push(c.name.clone());
            }
        }
    }
    if matching.len() > 1 {
        let others: Vec<String> = matching[1..].iter().map(|s| s.name_any()).collect();
        skipped.push(format!(
            "Supervisions {} also select this pod; {} (first by name) applies",
            others.join(", "),
            sup.name_any()
        ));
    }
    if wrapped.is_empty() {
        let why = if skipped.is_empty() {
            format!(
                "Supervision {} selects none of this pod's containers",
                sup.name_any()
            )
        } else {
            skipped.join("; ")
        };
        return skip(pod.clone(), why);
    }
    // A Guaranteed pod stays Guaranteed: its QoS class is what the kubelet places it by, and an
    // in-place resize (KEP-1287) may never change it.
    let guaranteed = qos_class(spec) == QosClass::Guaranteed;
    add_volumes(spec);
    spec.init_containers
        .get_or_insert_with(Vec::new)
        .push(install_container(s, guaranteed));
    let a = out.annotations_mut();
    a.insert(INJECTED_ANNOTATION.into(), sup.name_any());
    a.insert(SUPERVISION_ANNOTATION.into(), document(&sup.name_any(), si));
    if !skipped.is_empty() {
        a.insert(SKIPPED_ANNOTATION.into(), skipped.join("; "));
    }
    let outcome = Outcome::Injected {
        supervision: sup.name_any(),
        wrapped,
        skipped,
    };
    (out, outcome)
}

/// `podvisor init … -- COMMAND…`; the container's `args` stay and follow.
fn wrap(c: &mut Container) {
    let cmd = c.command.take().unwrap_or_default();
    let mut wrapped = vec![
        format!("{BIN_DIR}/podvisor"),
        "init".into(),
        "--supervision".into(),
        format!("{SUPERVISION_DIR}/{SUPERVISION_FILE}"),
        "--state-dir".into(),
        format!("{STATE_DIR}/{}", c.name),
        "--container".into(),
        c.name.clone(),
        "--".into(),
    ];
    wrapped.extend(cmd);
    c.command = Some(wrapped);
    let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
    mounts.push(VolumeMount {
        name: BIN_VOLUME.into(),
        mount_path: BIN_DIR.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    });
    mounts.push(VolumeMount {
        name: STATE_VOLUME.into(),
        mount_path: STATE_DIR.into(),
        ..VolumeMount::default()
    });
    mounts.push(VolumeMount {
        name: SUPERVISION_VOLUME.into(),
        mount_path: SUPERVISION_DIR.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    });
}

fn add_volumes(spec: &mut k8s_openapi::api::core::v1::PodSpec) {
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    for name in [BIN_VOLUME, STATE_VOLUME] {
        volumes.push(Volume {
            name: name.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    volumes.push(Volume {
        name: SUPERVISION_VOLUME.into(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: SUPERVISION_FILE.into(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.annotations['{SUPERVISION_ANNOTATION}']"),
                    ..ObjectFieldSelector::default()
                }),
                ..DownwardAPIVolumeFile::default()
            }]),
            ..DownwardAPIVolumeSource::default()
        }),
        ..Volume::default()
    });
}

/// What the install container asks for in a Guaranteed pod (requests equal to limits): enough
/// to copy one binary; below what the pod's own containers ask, so the pod's effective
/// requests do not grow.
const GUARANTEED_INSTALL: [(&str, &str); 2] = [("cpu", "50m"), ("memory", "32Mi")];

fn install_container(s: &Settings, guaranteed: bool) -> Container {
    let amounts = || {
        let q = |(k, v): &(&str, &str)| (k.to_string(), Quantity(v.to_string()));
        GUARANTEED_INSTALL.iter().map(q).collect()
    };
    let resources = guaranteed.then(|| ResourceRequirements {
        limits: Some(amounts()),
        requests: Some(amounts()),
        ..ResourceRequirements::default()
    });
    Container {
        resources,
        name: INIT_CONTAINER.into(),
        image: Some(s.image.clone()),
        image_pull_policy: s.image_pull_policy.clone(),
        command: Some(vec![
            "/podvisor".into(),
            "copy-self".into(),
            format!("{BIN_DIR}/podvisor"),
        ]),
        volume_mounts: Some(vec![VolumeMount {
            name: BIN_VOLUME.into(),
            mount_path: BIN_DIR.into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    }
}

/// The document `podvisor init --supervision` reads: the Supervision's staged instrumentation
/// only (podRestart is the controller's, and init refuses it).
pub fn document(name: &str, si: &StagedInstrumentation) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Doc<'a> {
        api_version: &'a str,
        kind: &'a str,
        metadata: BTreeMap<&'a str, &'a str>,
        spec: Spec<'a>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Spec<'a> {
        staged_instrumentation: &'a StagedInstrumentation,
    }
    let doc = Doc {
        api_version: podvisor_core::spec::supervision::API_VERSION,
        kind: "Supervision",
        metadata: BTreeMap::from([("name", name)]),
        spec: Spec {
            staged_instrumentation: si,
        },
    };
    serde_saphyr::to_string(&doc).expect("a Supervision document serializes")
}
