//! Carrying out the effects the pod's lifecycle core decides, and feeding back the inputs
//! they cause.

use std::collections::VecDeque;
use std::io;
use std::time::SystemTime;

use podvisor_core::clock::Clock;
use podvisor_core::lifecycle::{Effect, EventType, Input, Signal};

use super::Supervisor;
use crate::probe::Owner;
use crate::process::sys;

impl Supervisor {
    /// Feeds an input and carries out the effects, including those of the inputs they cause.
    ///
    /// Starts wait until the inputs at hand are taken or an effect that acts on processes
    /// comes (`acts_on_processes`), then go together (`spawn_all`), so that a pod's many
    /// containers start side by side; until then, only events and image checks are
    /// carried out, and each start's input is fed after them.
    pub(super) fn feed(&mut self, input: Input) -> io::Result<()> {
        let mut queue: VecDeque<Input> = VecDeque::from([input]);
        let mut starts = Vec::new();
        loop {
            let Some(input) = queue.pop_front() else {
                if starts.is_empty() {
                    return Ok(());
                }
                queue.extend(self.spawn_all(std::mem::take(&mut starts)));
                continue;
            };
            let now = self.clock.now();
            for effect in self.pod.step(now, input) {
                if !starts.is_empty() && acts_on_processes(&effect) {
                    queue.extend(self.spawn_all(std::mem::take(&mut starts)));
                }
                match effect {
                    Effect::Spawn(id, stage) => {
                        starts.push((id, stage));
                    }
                    Effect::EnsureImage(i) => queue.extend(self.ensure_image(i)),
                    Effect::EnsureVolumeImage(v) => queue.extend(self.ensure_volume_image(v)),
                    Effect::LogTail(id) => {
                        let event = self.log_tail(id)?;
                        self.pending.push((SystemTime::now(), event));
                    }
                    Effect::Signal(id, signal) => {
                        if let Some(instance) = self.instances.get(id) {
                            let sig = match signal {
                                // Its stop signal: lifecycle.stopSignal, the image's, SIGTERM.
                                Signal::Term => self.plan.exec[id.container].stop_signal().1,
                                Signal::Kill => libc::SIGKILL,
                            };
                            let _ = sys::send_signal(-instance.pid, sig);
                        }
                    }
                    Effect::Event(event) => self.pending.push((SystemTime::now(), event)),
                    Effect::WipeVolumes => {
                        // What cannot be removed stays: told, and the pod goes on (its
                        // containers start again with it) rather than the run ending.
                        for (volume, why) in self.volumes.wipe() {
                            let message = format!("emptyDir volume {volume} cannot be emptied for the pod restart: {why}; what cannot be removed stays in it");
                            self.note(EventType::Warning, "VolumeWipeFailed", message);
                        }
                        crate::process::failpoint::hit("run.volumes.wiped");
                    }
                    Effect::Finished(phase) => self.finished = Some(phase),
                    Effect::RunProbe(id, kind, due) => {
                        self.counters.probe_start(self.clock.now() - due);
                        if let Some(input) = self.start_probe(id, kind) {
                            queue.push_back(input);
                        }
                    }
                    Effect::RunHook(id, hook) => {
                        let owner = Owner::Hook(id, hook);
                        if self.task_handler(owner).is_none() {
                            queue.push_back(Input::HookDone(id, hook, Ok(())));
                        } else if let Some(input) = self.start_task(owner, None) {
                            queue.push_back(input);
                        }
                    }
                }
            }
        }
    }
}

/// Whether an effect acts on the pod's processes or what they share, so that the starts
/// decided before it must be made first: all but events, image checks and log tails.
fn acts_on_processes(effect: &Effect) -> bool {
    !matches!(
        effect,
        Effect::Spawn(..)
            | Effect::Event(_)
            | Effect::EnsureImage(_)
            | Effect::EnsureVolumeImage(_)
            | Effect::LogTail(_)
    )
}
