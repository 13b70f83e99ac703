//! The pod as a saved record, and a pod taken back up from one after podvisor itself died.
//!
//! What is kept: restart counts, instance numbers, exits, stages, verdicts, backoff entries,
//! restart windows and whole-pod restarts. What a resume does with them:
//! - a container that was running (or being started) when the record was written and that
//!   the shell found held by its keeper (live restore) is the same instance (`adopt`);
//! - one it did not find vanished with the run: it shows `lastState` terminated `ContainerStatusUnknown` (137, as the
//!   kubelet reports a container it lost) and starts again at once as a restart (its count
//!   grows by one, its backoff and restart window are not touched: the run failed, not it);
//! - a container waiting out its CrashLoopBackOff waits out the rest of it (times are on the
//!   run's clock, anchored to the epoch, so the wait that passed while no podvisor ran counts);
//! - an init container that completed stays completed (it does not run twice), one that
//!   exited for good stays exited;
//! - stages, verdicts and the pod-restart count go on from where they were;
//! - a run that ended while it was restarting every container in place (`RestartAllContainers`)
//!   finishes that restart: every container starts again from the first init container.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::clock::Instant;
use crate::duration::format_duration;
use crate::escalation::RestartWindow;
use crate::record::{ContainerRecord, ExitRecord, NextRecord, PodRecord, StateRecord};
use crate::stage::Judgement;

use super::container::{Next, Process};
use super::{initial_waiting, ContainerState, Effect, EventType, Pod, Survivor, TerminatedReason};

/// Why a record cannot be taken up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("container {container}: {message}")]
pub struct ResumeError {
    pub container: String,
    pub message: String,
}

/// The record a pod was resumed from, for its `Resumed` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Resumed {
    saved: Instant,
    saved_by: u32,
}

impl Pod {
    /// Fills in what the core knows: the pod-restart count, whether the pod has ended by
    /// itself, and each container (its process left for the shell to fill in).
    pub fn record_into(&self, r: &mut PodRecord) {
        r.pod_restarts = self.pod_restarts;
        r.restarts_all = self.restarts_all;
        r.restarting_all = self.restarting_all();
        r.ended = (self.finished && !self.stop_requested()).then(|| self.phase.as_str().into());
        r.containers = self
            .containers
            .iter()
            .map(|c| ContainerRecord {
                name: c.name.clone(),
                restart_count: c.restart_count,
                instance: c.instance,
                skipped: c.skipped,
                next: match c.next {
                    Next::First | Next::Now => NextRecord::First,
                    Next::ByPolicy => NextRecord::Policy,
                },
                stage: c.stage,
                disabled_at: c.judgement.disabled_at,
                verdict: c.judgement.verdict,
                ever_started: c.ever_started,
                backoff: c.backoff.entry().map(|(d, at)| (ms(d), at_ms(at))),
                window: c.window.times().map(at_ms).collect(),
                state: match (&c.process, &c.state) {
                    (Process::Up { since, .. }, _) => StateRecord::Running(at_ms(*since)),
                    (Process::Spawning, _) => StateRecord::Running(at_ms(self.last_now)),
                    (Process::Down, s) => {
                        exit_record(s).map_or(StateRecord::Waiting, StateRecord::Terminated)
                    }
                },
                last: c.last_state.as_ref().and_then(exit_record),
                process: None,
            })
            .collect();
    }

    /// Marks the record as changed (a write that failed is tried again).
    pub fn mark_changed(&mut self) {
        self.changed = true;
    }

    /// Whether something the record holds has changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// A pod taken up from `record` (see the module's doc). Containers of the plan that the
    /// record does not name start afresh; records of containers no longer planned are dropped.
    pub fn resume(
        plan: impl Into<std::sync::Arc<super::PodPlan>>,
        record: &PodRecord,
    ) -> Result<Pod, ResumeError> {
        Pod::resume_adopting(plan, record, &BTreeMap::new())
    }

    /// `resume`, with what the shell found of the containers the record says were running
    /// (by name; live restore, see `adopt`): those in `survivors` are the same instance,
    /// taken over at admission; the others are lost. A record taken up during an in-place
    /// restart of every container adopts nothing: that restart is finished instead.
    pub fn resume_adopting(
        plan: impl Into<std::sync::Arc<super::PodPlan>>,
        record: &PodRecord,
        survivors: &BTreeMap<String, Survivor>,
    ) -> Result<Pod, ResumeError> {
        let mut pod = Pod::new(plan);
        // The same pod: its active deadline counts from when it was created.
        pod.active_since = Some(Instant::from_millis(record.created));
        pod.pod_restarts = record.pod_restarts;
        pod.restarts_all = record.restarts_all;
        let saved = Instant::from_millis(record.saved);
        pod.resumed = Some(Resumed {
            saved,
            saved_by: record.saved_by,
        });
        let mut adopted = Vec::new();
        let mut unlocated = Vec::new();
        for i in 0..pod.containers.len() {
            let Some(r) = record
                .containers
                .iter()
                .find(|r| r.name == pod.containers[i].name)
            else {
                continue;
            };
            let bad = |message: String| ResumeError {
                container: r.name.clone(),
                message,
            };
            let waiting = initial_waiting(&pod.plan, i);
            let c = &mut pod.containers[i];
            c.restart_count = r.restart_count;
            c.instance = r.instance;
            c.skipped = r.skipped;
            c.stage = r.stage;
            c.judgement = Judgement {
                disabled_at: r.disabled_at,
                verdict: r.verdict,
            };
            c.ever_started = r.ever_started;
            if let Some((delay, at)) = r.backoff {
                c.backoff =
                    Backoff::restore(Duration::from_millis(delay), Instant::from_millis(at));
            }
            c.window = RestartWindow::from_times(r.window.iter().map(|t| Instant::from_millis(*t)));
            let last = r.last.as_ref().map(exit_state).transpose().map_err(bad)?;
            match (&r.state, r.next) {
                (StateRecord::Running(since), _) => {
                    let since = Instant::from_millis(*since);
                    let found = survivors.get(&r.name).filter(|_| !record.restarting_all);
                    if let Some(found) = found {
                        c.last_state = last;
                        c.state = ContainerState::Running { started_at: since };
                        c.process = Process::Up {
                            since,
                            post_start: false,
                        };
                        c.next = Next::ByPolicy;
                        c.ever_started = true;
                        adopted.push((i, found.clone()));
                        continue;
                    }
                    c.last_state = Some(ContainerState::Terminated {
                        exit_code: 137,
                        signal: None,
                        reason: TerminatedReason::ContainerStatusUnknown,
                        message: Some(
                            "The container could not be located when podvisor resumed the pod: \
                             it was running when the previous run ended"
                                .into(),
                        ),
                        started_at: Some(since),
                        finished_at: saved,
                    });
                    c.state = waiting;
                    c.next = Next::First;
                    unlocated.push(i);
                }
                (StateRecord::Waiting, NextRecord::First) => {
                    c.last_state = last;
                    c.state = waiting;
                    c.next = Next::First;
                }
                (StateRecord::Waiting, NextRecord::Policy) => match last {
                    // Waiting to restart: its last exit is its state again, as after a stop;
                    // reconciling puts it back in CrashLoopBackOff (or restarts it).
                    Some(exit) => {
                        c.state = exit;
                        c.next = Next::ByPolicy;
                    }
                    None => {
                        c.state = waiting;
                        c.next = Next::First;
                    }
                },
                (StateRecord::Terminated(e), _) => {
                    c.state = exit_state(e).map_err(bad)?;
                    c.last_state = last;
                    c.next = Next::ByPolicy;
                }
            }
        }
        pod.adopted = adopted;
        pod.unlocated = unlocated;
        if record.restarting_all {
            // The run ended during an in-place restart of every container: what it was killing
            // went with it, so the teardown is over and the pod starts again from its first init
            // container, volumes kept.
            for i in 0..pod.containers.len() {
                let waiting = initial_waiting(&pod.plan, i);
                pod.containers[i].start_over(waiting, false);
            }
        }
        Ok(pod)
    }

    /// The `Resumed` event, once, when the resumed pod is admitted.
    pub(super) fn resumed_event(&mut self, now: Instant) -> Option<Effect> {
        let r = self.resumed.take()?;
        let counts: Vec<String> = self
            .containers
            .iter()
            .map(|c| match c.stage {
                Some(s) => format!("{} {} (stage {s})", c.name, c.restart_count),
                None => format!("{} {}", c.name, c.restart_count),
            })
            .collect();
        let message = format!(
            "Took up the state saved {} ago by podvisor (pid {}): restart counts {}; whole-pod \
             restarts {}",
            format_duration(Duration::from_millis(ms(now.saturating_since(r.saved)))),
            r.saved_by,
            counts.join(", "),
            self.pod_restarts
        );
        Some(self.pod_event(EventType::Normal, "Resumed", message))
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn at_ms(at: Instant) -> u64 {
    ms(at.since_origin())
}

/// A terminated state as an exit; `None` for the others.
fn exit_record(s: &ContainerState) -> Option<ExitRecord> {
    Some(match s {
        ContainerState::Terminated {
            exit_code,
            signal,
            reason,
            message,
            started_at,
            finished_at,
        } => ExitRecord {
            exit_code: *exit_code,
            signal: *signal,
            reason: reason.as_str().into(),
            message: message.clone(),
            started: started_at.map(at_ms),
            finished: at_ms(*finished_at),
        },
        _ => return None,
    })
}

fn exit_state(e: &ExitRecord) -> Result<ContainerState, String> {
    let reason = TerminatedReason::parse(&e.reason)
        .ok_or_else(|| format!("{:?} is not a reason a container terminates with", e.reason))?;
    Ok(ContainerState::Terminated {
        exit_code: e.exit_code,
        signal: e.signal,
        reason,
        message: e.message.clone(),
        started_at: e.started.map(Instant::from_millis),
        finished_at: Instant::from_millis(e.finished),
    })
}
