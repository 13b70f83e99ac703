//! Container states and pod phases with the names Kubernetes gives them.

use crate::clock::Instant;

/// Why a container is waiting (`state.waiting.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitingReason {
    ContainerCreating,
    PodInitializing,
    CrashLoopBackOff,
    CreateContainerError,
    /// The container's configuration cannot be made (`runAsNonRoot` with a root user): it is
    /// not created, and tried again after the kubelet's sync backoff.
    CreateContainerConfigError,
    PostStartHookError,
    /// The image could not be pulled; then, while the image back-off lasts, `ImagePullBackOff`.
    ErrImagePull,
    ImagePullBackOff,
    /// Not present, and the pull policy is `Never`.
    ErrImageNeverPull,
    /// The image's name does not parse.
    InvalidImageName,
}

impl WaitingReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitingReason::ContainerCreating => "ContainerCreating",
            WaitingReason::PodInitializing => "PodInitializing",
            WaitingReason::CrashLoopBackOff => "CrashLoopBackOff",
            WaitingReason::CreateContainerError => "CreateContainerError",
            WaitingReason::CreateContainerConfigError => "CreateContainerConfigError",
            WaitingReason::PostStartHookError => "PostStartHookError",
            WaitingReason::ErrImagePull => "ErrImagePull",
            WaitingReason::ImagePullBackOff => "ImagePullBackOff",
            WaitingReason::ErrImageNeverPull => "ErrImageNeverPull",
            WaitingReason::InvalidImageName => "InvalidImageName",
        }
    }
}

/// Why a container terminated (`state.terminated.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminatedReason {
    Completed,
    Error,
    OOMKilled,
    StartError,
    /// The container was running when podvisor itself died; the next run could not find it
    /// (as the kubelet reports a container that vanished, exit code 137).
    ContainerStatusUnknown,
}

impl TerminatedReason {
    pub fn as_str(self) -> &'static str {
        match self {
            TerminatedReason::Completed => "Completed",
            TerminatedReason::Error => "Error",
            TerminatedReason::OOMKilled => "OOMKilled",
            TerminatedReason::StartError => "StartError",
            TerminatedReason::ContainerStatusUnknown => "ContainerStatusUnknown",
        }
    }

    pub fn parse(s: &str) -> Option<TerminatedReason> {
        [
            TerminatedReason::Completed,
            TerminatedReason::Error,
            TerminatedReason::OOMKilled,
            TerminatedReason::StartError,
            TerminatedReason::ContainerStatusUnknown,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// `state` and `lastState` of a container.
#[derive(Debug, Clone, PartialEq)]
pub enum ContainerState {
    Waiting {
        reason: WaitingReason,
        message: Option<String>,
    },
    Running {
        started_at: Instant,
    },
    Terminated {
        exit_code: i32,
        signal: Option<i32>,
        reason: TerminatedReason,
        message: Option<String>,
        started_at: Option<Instant>,
        finished_at: Instant,
    },
}

/// The pod's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    /// Terminal phases stick (the status manager never leaves them).
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}
