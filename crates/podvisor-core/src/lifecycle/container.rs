//! One container's status as the API shows it, and the bookkeeping behind it.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::clock::Instant;
use crate::escalation::RestartWindow;
use crate::probe::Worker;
use crate::stage::{Judgement, Stage};

use super::stop::Kill;
use super::ContainerState;

/// One container's status and bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStatus {
    pub name: String,
    pub state: ContainerState,
    pub last_state: Option<ContainerState>,
    pub restart_count: u32,
    /// The current (or last) instance number; 0 before the first start.
    pub instance: u32,
    /// The API's `ready`: running, started, and its readiness probe (if any) succeeded.
    pub ready: bool,
    /// The API's `started`: running and its startup probe (if any) succeeded.
    pub started: bool,
    /// The instrumentation stage of the current (or last) instance; `None` for a container
    /// without staged instrumentation, or before its first start.
    pub stage: Option<Stage>,
    /// The verdict on its add-on, once it has been Disabled.
    pub judgement: Judgement,
    /// Where the current instance's process is.
    pub(super) process: Process,
    /// What starts it next, besides its restart policy.
    pub(super) next: Next,
    /// Some instance of this container has been started (in the `started` sense).
    pub(super) ever_started: bool,
    /// Instance numbers taken without a start (see `Pod::skip_instances`).
    pub(super) skipped: u32,
    pub(super) backoff: Backoff,
    /// Its restarts since the last whole-pod restart (for `podRestart`).
    pub(super) window: RestartWindow,
    /// The probe workers of the running instance.
    pub(super) probes: Vec<ProbeSlot>,
    /// The current instance is being killed.
    pub(super) kill: Option<Kill>,
    /// Its configuration could not be made (`CreateContainerConfigError`): not tried again
    /// before then.
    pub(super) config_retry: Option<Instant>,
    /// Its image before the next start (`image`).
    pub(super) image: ImagePull,
}

/// Where the current instance's process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Process {
    /// No process: never started, or the instance ended.
    Down,
    /// A spawn was asked for; neither `Started` nor `StartFailed` has come back.
    Spawning,
    /// Alive since `since`; `post_start` while its postStart hook runs (it is not Running
    /// until the hook completes).
    Up { since: Instant, post_start: bool },
}

/// What starts a container that is down, besides its restart policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// A first start of this pod run: at admission, or after a whole-pod restart.
    First,
    /// `podvisor restart CONTAINER`: start again as soon as it is down, whatever its policy.
    Now,
    /// Its restart policy, the escalation rules and its backoff decide.
    ByPolicy,
}

/// One probe worker and whether an attempt is out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ProbeSlot {
    pub(super) worker: Worker,
    pub(super) in_flight: bool,
    /// A period came while an attempt was out: run again as soon as it ends (a Go ticker keeps
    /// one tick).
    pub(super) tick_kept: bool,
}

impl ContainerStatus {
    pub(super) fn new(name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.to_string(),
            state,
            last_state: None,
            restart_count: 0,
            instance: 0,
            ready: false,
            started: false,
            stage: None,
            judgement: Judgement::default(),
            process: Process::Down,
            next: Next::First,
            ever_started: false,
            skipped: 0,
            backoff: Backoff::default(),
            window: RestartWindow::default(),
            probes: Vec::new(),
            kill: None,
            config_retry: None,
            image: ImagePull::default(),
        }
    }

    /// Whether the current instance's process is alive (spawned and not yet exited).
    pub(super) fn live(&self) -> bool {
        matches!(self.process, Process::Up { .. })
    }

    /// Whether a process is alive or being started.
    pub(super) fn busy(&self) -> bool {
        self.process != Process::Down
    }

    /// When the live instance's process started.
    pub(super) fn up_since(&self) -> Option<Instant> {
        match self.process {
            Process::Up { since, .. } => Some(since),
            _ => None,
        }
    }

    /// Whether the container has run before: started, or restarted (a start that failed
    /// counts, as the kubelet counts a main container left `Created`). A sidecar's turn in the
    /// start order asks for more: the `ever_started` field alone.
    pub(super) fn ever_started(&self) -> bool {
        self.ever_started
            || self.restart_count > 0
            || matches!(
                self.state,
                ContainerState::Terminated {
                    started_at: Some(_),
                    ..
                }
            )
    }

    /// The last exit: the state if terminated, else (waiting to restart) the last state.
    pub(super) fn last_exit(&self) -> Option<&ContainerState> {
        match &self.state {
            t @ ContainerState::Terminated { .. } => Some(t),
            ContainerState::Waiting { .. } => self
                .last_state
                .as_ref()
                .filter(|s| matches!(s, ContainerState::Terminated { .. })),
            ContainerState::Running { .. } => None,
        }
    }

    /// After a whole-pod restart has stopped everything: a first start again, its last exit
    /// kept as `lastState`; `clear_window`: its restarts since the last whole-pod restart
    /// forgotten (not after an in-place restart of every container, which escalation counts).
    pub(super) fn start_over(&mut self, waiting: ContainerState, clear_window: bool) {
        if let ContainerState::Terminated { .. } = self.state {
            self.last_state = Some(self.state.clone());
        }
        self.state = waiting;
        self.next = Next::First;
        if clear_window {
            self.window.clear();
        }
    }

    pub(super) fn backing_off(&self) -> bool {
        matches!(
            self.state,
            ContainerState::Waiting {
                reason: super::WaitingReason::CrashLoopBackOff,
                ..
            }
        )
    }
}

/// Where a container's image stands before its next start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ImagePull {
    /// The shell said it is there, since the last start.
    pub(super) ready: bool,
    /// `Effect::EnsureImage` is out.
    pub(super) asked: bool,
    /// No new try before then.
    pub(super) retry_at: Option<Instant>,
    /// The current back-off of failed pulls.
    pub(super) backoff: Option<Duration>,
    /// The last pull's failure and when it came, while its back-off lasts.
    pub(super) failed: Option<String>,
    pub(super) failed_at: Option<Instant>,
    /// `ImagePullBackOff` has been said for this wait.
    pub(super) told: bool,
}
