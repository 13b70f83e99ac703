//! postStart and preStop results.

use crate::clock::Instant;

use super::container::Process;
use super::{event_of, ContainerState, Effect, EventType, Hook, InstanceId, Pod, WaitingReason};

impl Pod {
    pub(super) fn hook_done(
        &mut self,
        now: Instant,
        id: InstanceId,
        hook: Hook,
        result: Result<(), String>,
        fx: &mut Vec<Effect>,
    ) {
        let grace = self.plan.grace;
        let Some(c) = self.current(id) else {
            return;
        };
        match hook {
            Hook::PostStart => {
                let Process::Up {
                    since,
                    post_start: true,
                } = c.process
                else {
                    return;
                };
                c.process = Process::Up {
                    since,
                    post_start: false,
                };
                match result {
                    Ok(()) => self.become_running(id.container),
                    Err(message) => {
                        // The hook's output stays out of the event (it may hold secrets).
                        fx.push(event_of(
                            c,
                            EventType::Warning,
                            "FailedPostStartHook",
                            "PostStartHook failed".into(),
                        ));
                        c.state = ContainerState::Waiting {
                            reason: WaitingReason::PostStartHookError,
                            message: Some(message),
                        };
                        self.begin_kill(
                            id.container,
                            now,
                            grace,
                            "FailedPostStartHook".into(),
                            false,
                            fx,
                        );
                    }
                }
            }
            Hook::PreStop => {
                let Some(k) = c.kill.as_mut().filter(|k| k.pre_stop_running) else {
                    return;
                };
                k.pre_stop_running = false;
                if result.is_err() {
                    fx.push(event_of(
                        c,
                        EventType::Warning,
                        "FailedPreStopHook",
                        "PreStopHook failed".into(),
                    ));
                }
            }
        }
    }
}
