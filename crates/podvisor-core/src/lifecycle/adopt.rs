//! Containers that outlived the run before this one (live restore): a keeper held them while no
//! podvisor ran, and the shell found them again.
//!
//! What the kubelet does with a runtime's container status after its own restart, here with
//! the keepers' word: a container still running is taken over as the same instance (no start,
//! no `Started`, no postStart, its restart count and stage unchanged; its probes begin again
//! with their periods, as after a kubelet restart); one that exited while podvisor was away
//! gets its real exit at its real finish time, and the restart decision and CrashLoopBackOff go
//! on from that time; one whose keeper died with nothing recorded is lost, and `Lost` reports
//! it as the kubelet reports a container it cannot find (`ContainerStatusUnknown`, 137).

use std::time::Duration;

use crate::clock::Instant;
use crate::duration::format_duration;

use super::container::Process;
use super::{
    set_exit_code, ContainerState, Effect, EventType, Exit, InstanceId, Pod, TerminatedReason,
};

/// What the shell found of a container the record says was running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Survivor {
    /// Its process still runs, held by its keeper.
    Running,
    /// It exited while no podvisor ran: how, and when.
    Exited { exit: Exit, finished_at: Instant },
}

impl Pod {
    /// At admission: each survivor taken over (`Adopted`, its probes begin) or its exit while
    /// podvisor was away recorded at its own finish time.
    pub(super) fn admit_survivors(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        // Told as a keeper's death is: the kubelet's word for a container it cannot find.
        for i in std::mem::take(&mut self.unlocated) {
            let Some(ContainerState::Terminated {
                message: Some(m), ..
            }) = &self.containers[i].last_state
            else {
                continue;
            };
            let text = format!("Container {}: {m}", self.containers[i].name);
            let mut e = self.container_event(i, EventType::Warning, "ContainerStatusUnknown", text);
            set_exit_code(&mut e, 137);
            fx.push(e);
        }
        for (i, found) in std::mem::take(&mut self.adopted) {
            let id = InstanceId {
                container: i,
                instance: self.containers[i].instance,
            };
            let since = self.containers[i].up_since().unwrap_or(now);
            match found {
                Survivor::Running => {
                    let up = format_duration(Duration::from_millis(
                        now.saturating_since(since).as_millis() as u64,
                    ));
                    let message = format!(
                        "Took over container {} from the previous podvisor run: running for {up}, not restarted",
                        self.containers[i].name
                    );
                    fx.push(self.container_event(i, EventType::Normal, "Adopted", message));
                    self.become_running(i);
                }
                Survivor::Exited { exit, finished_at } => {
                    let message = format!(
                        "Container {} exited while no podvisor ran; its keeper recorded the exit",
                        self.containers[i].name
                    );
                    fx.push(self.container_event(i, EventType::Normal, "Adopted", message));
                    self.exited(finished_at.max(since), id, exit, fx);
                }
            }
        }
    }

    /// The process of instance `id` is gone without an exit status (its keeper died): the
    /// kubelet's `ContainerStatusUnknown`, exit code 137.
    pub(super) fn lost(&mut self, now: Instant, id: InstanceId, why: String, fx: &mut Vec<Effect>) {
        let Some(c) = self.current(id) else { return };
        let started_at = c.up_since();
        c.process = Process::Down;
        c.probes.clear();
        let message = format!("The container could not be located: {why}");
        c.state = ContainerState::Terminated {
            exit_code: 137,
            signal: None,
            reason: TerminatedReason::ContainerStatusUnknown,
            message: Some(message.clone()),
            started_at,
            finished_at: now,
        };
        let text = format!("Container {}: {message}", c.name);
        let mut e = self.container_event(
            id.container,
            EventType::Warning,
            "ContainerStatusUnknown",
            text,
        );
        set_exit_code(&mut e, 137);
        fx.push(e);
    }
}
