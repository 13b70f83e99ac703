//! What crosses between the core and the shell: inputs in, effects out.

use crate::clock::Instant;
use crate::probe::{Outcome, ProbeKind};
use crate::stage::Stage;

use super::{Hook, Phase};
use crate::security::NonRoot;

/// Identifies one run of one container: inputs about an older instance are stale and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId {
    pub container: usize,
    pub instance: u32,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    /// 128+N for death by signal N, as Kubernetes reports it.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }
}

/// How an instance ended: its status, whether the kernel's OOM killer struck in its cgroup
/// (the runtime then reports `OOMKilled`, as containerd does from the OOM event), and its
/// termination message (`terminationMessagePath`, or its log's end), if it left one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub status: ExitStatus,
    pub oom_killed: bool,
    pub message: Option<String>,
}

impl From<ExitStatus> for Exit {
    fn from(status: ExitStatus) -> Exit {
        Exit {
            status,
            oom_killed: false,
            message: None,
        }
    }
}

/// What the shell tells the state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The pod is admitted: begin.
    Admit,
    /// The instance's process runs, since the time given: when the shell saw its start made
    /// (a shell that makes a batch of starts before it reports them keeps each one's own
    /// time, so that containers started one after the other do not all seem to have started
    /// when the batch ended; a time after the step's is taken as the step's).
    Started(InstanceId, Instant),
    /// The instance's process could not be started (exec failed): `message` says why.
    StartFailed(InstanceId, String),
    Exited(InstanceId, Exit),
    /// The instance's process is gone and nobody saw how (its keeper was killed): `String`
    /// says why. Terminated `ContainerStatusUnknown`, exit code 137.
    Lost(InstanceId, String),
    /// A probe attempt asked for by `Effect::RunProbe` ended.
    Probed(InstanceId, ProbeKind, Outcome),
    /// A hook asked for by `Effect::RunHook` ended: `Err` says why it failed.
    HookDone(InstanceId, Hook, Result<(), String>),
    /// A deadline from `next_deadline` has passed.
    Tick,
    /// Stop the pod gracefully (SIGTERM to podvisor, `podvisor stop`).
    Stop,
    /// The eviction manager evicts the pod (an emptyDir past its `sizeLimit`), with this
    /// message: Failed with reason `Evicted`, every container killed with a grace of 0 (the
    /// 2 s floor still applies; no preStop), as the kubelet's `evictPod(pod, 0, …)`.
    Evict(String),
    /// `podvisor restart CONTAINER`: stop that container gracefully (if it runs) and start it
    /// again at once, whatever its policy; its restartCount grows, its backoff is untouched.
    /// Ignored for a regular init container (only a pod restart runs those again).
    RestartContainer(usize),
    /// An in-place resize changed a resource whose `resizePolicy` is `RestartContainer`: as
    /// `RestartContainer`, with the kubelet's message ("Container NAME resize requires
    /// restart"); no backoff, no crash.
    ResizeRestart(usize),
    /// `podvisor restart`: stop every container gracefully, then start the pod again from its
    /// init containers (a whole-pod restart, event `PodRestarting`).
    RestartPod,
    /// How `Effect::EnsureImage` for this container went.
    Image(usize, ImageReport),
    /// How `Effect::EnsureVolumeImage` for this image volume went (`non_root` is not looked at).
    VolumeImage(usize, ImageReport),
}

/// What the shell says of a container's image before a start (the kubelet's
/// `EnsureImageExists`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageReport {
    /// It is being pulled (`Pulling`); `Ready` or `Failed` follows.
    Pulling,
    /// It is there: `pulled` is the `Pulled` message of a pull just made (`None`: it was
    /// present already); `non_root` the `runAsNonRoot` check with the image's user.
    Ready {
        pulled: Option<String>,
        non_root: Option<NonRoot>,
        /// Of an image volume: the containers whose mounts of it cannot be made from this image
        /// (a `subPath` that it does not have), each with why: they wait in
        /// `CreateContainerError`.
        unmountable: Vec<(usize, String)>,
    },
    /// It cannot be had now: why, and the message.
    Failed {
        reason: ImageFailure,
        message: String,
    },
}

/// Why a container's image cannot be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFailure {
    /// The pull failed (`ErrImagePull`, then `ImagePullBackOff` while the back-off lasts).
    Pull,
    /// The image's name does not parse (`InvalidImageName`): nothing can be pulled or run.
    InvalidName,
    /// Not present and the policy is `Never` (`ErrImageNeverPull`).
    NeverPull,
    /// The image is there but the container cannot be made from it (its user is not in its
    /// `/etc/passwd`): `CreateContainerError`.
    Create,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event as docs/events.md lists them; the shell adds the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventType,
    pub reason: String,
    /// `pod` or the container's name.
    pub object: String,
    pub message: String,
    pub exit_code: Option<i32>,
    /// The container's restart count and stage when the event happened (`None` for the pod).
    pub restart_count: Option<u32>,
    pub stage: Option<Stage>,
}

/// How many lines of its log a Debug instance leaves in an event when it exits.
pub const LOG_TAIL_LINES: usize = 20;

/// What the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Start the instance, its environment made for its instrumentation stage (`None`: not
    /// staged), and report `Input::Started` or `Input::StartFailed`.
    Spawn(InstanceId, Option<Stage>),
    Signal(InstanceId, Signal),
    /// Run one attempt of this probe (bounded by its timeout) and report `Input::Probed`. The
    /// instant is when the attempt was due (the shell may measure how late it starts).
    RunProbe(InstanceId, ProbeKind, Instant),
    /// Run the hook and report `Input::HookDone`.
    RunHook(InstanceId, Hook),
    Event(Event),
    /// The pod reached a terminal phase and nothing runs any more.
    Finished(Phase),
    /// A whole-pod restart has stopped everything: the shell wipes the emptyDir volumes before
    /// the init containers run again.
    WipeVolumes,
    /// The instance ran in the Debug stage and exited: record the end of its log as an event
    /// (`DebugLogTail`), to help diagnose the crash.
    LogTail(InstanceId),
    /// Make sure container `i`'s image is there for its next start, pulling it as its policy
    /// says, and report `Input::Image`.
    EnsureImage(usize),
    /// Make sure the image of image volume `v` (`PodPlan::image_volumes`) is there, pulling it
    /// as its `pullPolicy` says, and report `Input::VolumeImage`. Asked once per pod (and again
    /// after a whole-pod restart), before the first start of a container that mounts it.
    EnsureVolumeImage(usize),
}
