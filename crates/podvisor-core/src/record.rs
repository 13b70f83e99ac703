//! What must survive podvisor's own death: restart counts, exits, stages, verdicts, backoff,
//! restart windows and whole-pod restarts, with the times they depend on.
//!
//! A leaf shared by `podvisor run` (a `PodRecord`) and `podvisor init --supervision` (an
//! `InitRecord`). Times are milliseconds on the run's clock, which the shell anchors to the
//! Unix epoch, so a record still means the same after a reboot. The file format is the
//! shell's (`podvisor::state::record`): these types are what it holds, with serde's names.

use crate::stage::{Stage, Verdict};

/// The whole pod of a `podvisor run`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "supervision",
    serde(deny_unknown_fields, rename_all = "camelCase")
)]
pub struct PodRecord {
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    /// When the pod was created (first run on this state dir).
    pub created: u64,
    /// When this record was written, and by which podvisor process.
    pub saved: u64,
    pub saved_by: u32,
    /// The kernel's boot id when it was written: process ids mean nothing across a reboot.
    pub boot: String,
    pub pod_restarts: u32,
    /// In-place restarts of every container (`RestartAllContainers` rules) so far.
    pub restarts_all: u32,
    /// A `RestartAllContainers` teardown was under way (condition `AllContainersRestarting`).
    pub restarting_all: bool,
    /// Set when the pod ended by itself (`Succeeded`, `Failed`): the next run is a new pod.
    pub ended: Option<String>,
    pub containers: Vec<ContainerRecord>,
}

/// One container of a `PodRecord`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "supervision",
    serde(deny_unknown_fields, rename_all = "camelCase")
)]
pub struct ContainerRecord {
    pub name: String,
    pub restart_count: u32,
    pub instance: u32,
    /// Instance numbers taken without a start (a stray's, killed at a take-over): the
    /// container was started before only if `instance` is above it.
    #[cfg_attr(
        feature = "supervision",
        serde(default, skip_serializing_if = "is_zero")
    )]
    pub skipped: u32,
    pub next: NextRecord,
    pub stage: Option<Stage>,
    pub disabled_at: Option<u32>,
    pub verdict: Option<Verdict>,
    pub ever_started: bool,
    /// The CrashLoopBackOff entry: (current delay, last update), in ms.
    pub backoff: Option<(u64, u64)>,
    /// Restart times since the last whole-pod restart.
    pub window: Vec<u64>,
    pub state: StateRecord,
    pub last: Option<ExitRecord>,
    /// The process of the running instance (the shell fills it in).
    pub process: Option<ProcessRecord>,
}

/// What starts the container next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "supervision", serde(rename_all = "camelCase"))]
pub enum NextRecord {
    First,
    Policy,
}

/// The container's state, in short.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "supervision", serde(rename_all = "camelCase"))]
pub enum StateRecord {
    Waiting,
    /// Running (or being started) since.
    Running(u64),
    Terminated(ExitRecord),
}

/// One exit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "supervision",
    serde(deny_unknown_fields, rename_all = "camelCase")
)]
pub struct ExitRecord {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started: Option<u64>,
    pub finished: u64,
}

/// A process, identified so that a reused pid is never mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "supervision",
    serde(deny_unknown_fields, rename_all = "camelCase")
)]
pub struct ProcessRecord {
    pub pid: i32,
    /// Its start time in clock ticks since boot (/proc/PID/stat, field 22).
    pub start_ticks: u64,
}

/// What `podvisor init --supervision` keeps in its state dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "supervision",
    serde(deny_unknown_fields, rename_all = "camelCase")
)]
pub struct InitRecord {
    /// Container starts counted so far.
    pub starts: u32,
}

#[cfg(feature = "supervision")]
fn is_zero(n: &u32) -> bool {
    *n == 0
}
