//! What the state machine runs: the pod and its containers as the spec layer plans them.

use std::time::Duration;

use crate::backoff::BackoffPolicy;
use crate::escalation::PodRestartPolicy;
use crate::probe::{ProbeKind, ProbeTiming};
use crate::restart::{ContainerRestart, RestartPolicy};
use crate::security::NonRoot;
use crate::stage::StagePolicy;

/// What kind of container, which decides its place in the start and stop order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum Kind {
    /// A regular init container: runs to completion, one at a time, before anything after it.
    Init,
    /// An init container with `restartPolicy: Always`.
    Sidecar,
    Main,
}

/// One probe of a container: its timing and the probe-level `terminationGracePeriodSeconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct ProbePlan {
    pub timing: ProbeTiming,
    pub grace: Option<Duration>,
}

/// The probes a container has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct Probes {
    pub startup: Option<ProbePlan>,
    pub liveness: Option<ProbePlan>,
    pub readiness: Option<ProbePlan>,
}

impl Probes {
    pub fn get(&self, kind: ProbeKind) -> Option<&ProbePlan> {
        match kind {
            ProbeKind::Startup => self.startup.as_ref(),
            ProbeKind::Liveness => self.liveness.as_ref(),
            ProbeKind::Readiness => self.readiness.as_ref(),
        }
    }
}

/// A lifecycle hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    PostStart,
    PreStop,
}

/// One container as the state machine needs it (the spec layer builds these).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct ContainerPlan {
    pub name: String,
    pub kind: Kind,
    pub restart: ContainerRestart,
    pub probes: Probes,
    pub post_start: bool,
    pub pre_stop: bool,
    /// Its starts are staged (the pod's `staging` applies to it).
    pub staged: bool,
    /// `runAsNonRoot`, checked before each start.
    pub non_root: Option<NonRoot>,
    /// The image it runs from, as the manifest names it: before each start the shell makes
    /// sure it is there (`Effect::EnsureImage`). `None`: it runs on the host's root.
    #[cfg_attr(feature = "spec", serde(default))]
    pub image: Option<String>,
    /// The pod's image volumes it mounts (indexes into `PodPlan::image_volumes`): each is made
    /// sure of before its starts (`Effect::EnsureVolumeImage`).
    #[cfg_attr(feature = "spec", serde(default))]
    pub image_volumes: Vec<usize>,
    /// Why its configuration cannot be made whatever happens (a `subPathExpr` that expands to
    /// nothing usable): it waits in `CreateContainerConfigError`.
    #[cfg_attr(feature = "spec", serde(default))]
    pub config_error: Option<String>,
}

impl ContainerPlan {
    /// A container with no probes and no hooks; sidecars restart `Always`.
    pub fn new(name: &str, kind: Kind) -> ContainerPlan {
        ContainerPlan {
            name: name.to_string(),
            kind,
            restart: ContainerRestart {
                policy: (kind == Kind::Sidecar).then_some(RestartPolicy::Always),
                rules: Vec::new(),
            },
            probes: Probes::default(),
            post_start: false,
            pre_stop: false,
            staged: false,
            non_root: None,
            image: None,
            image_volumes: Vec::new(),
            config_error: None,
        }
    }
}

/// The pod as the state machine needs it. Containers: init containers (and sidecars) in spec
/// order, then the main containers in spec order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct PodPlan {
    pub name: String,
    pub namespace: String,
    /// The pod's UID (the shell sets the one it keeps across runs).
    pub uid: String,
    pub restart_policy: RestartPolicy,
    pub grace: Duration,
    pub containers: Vec<ContainerPlan>,
    pub backoff: BackoffPolicy,
    /// Staged instrumentation, for the containers marked `staged`.
    pub staging: Option<Staging>,
    /// Whole-pod restarts and giving up (`Supervision.spec.podRestart`).
    pub pod_restart: Option<PodRestartPolicy>,
    /// Spreads first probes: a container started less than one probe period after the pod was
    /// admitted (podvisor's own start) has its first probe delayed by a pseudo-random fraction of
    /// the period derived from this seed, as the kubelet does right after it starts, so that a
    /// pod of many containers does not probe them all at the same instant. `None`: no jitter.
    pub probe_jitter_seed: Option<u64>,
    /// The kubelet's gate SidecarsRestartableDuringPodTermination (KEP-4438, alpha): a sidecar
    /// that exits while the pod terminates, before its turn to stop, is restarted.
    #[cfg_attr(feature = "spec", serde(default))]
    pub sidecars_restart_in_termination: bool,
    /// The references of the pod's image volumes (`volumes[].image.reference`), in order.
    #[cfg_attr(feature = "spec", serde(default))]
    pub image_volumes: Vec<String>,
    /// `activeDeadlineSeconds`: how long the pod may be active before it fails.
    #[cfg_attr(feature = "spec", serde(default))]
    pub active_deadline: Option<Duration>,
    /// `readinessGates`: the condition types that must be `True` too before the pod is Ready.
    #[cfg_attr(feature = "spec", serde(default))]
    pub readiness_gates: Vec<String>,
}

/// Staged instrumentation as the state machine needs it: when stages change, and how long a
/// Disabled container must run to blame the add-on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct Staging {
    pub policy: StagePolicy,
    pub verdict_after: Duration,
}
