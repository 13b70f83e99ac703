//! Probes of running instances: their workers, the attempts that fall due, and what the
//! published results do (`started`, `ready`, probe kills).

use std::cmp::Reverse;
use std::time::Duration;

use crate::clock::Instant;
use crate::probe::{Outcome, ProbeKind, ProbeResult, Worker};

use super::container::ProbeSlot;
use super::{event_of, ContainerState, Effect, EventType, InstanceId, Kind, Pod};

impl Pod {
    /// Whether a `probe_due` entry still stands for a worker's next run.
    pub(super) fn probe_entry_live(
        &self,
        (at, i, instance, kind): (Instant, usize, u32, ProbeKind),
    ) -> bool {
        let c = &self.containers[i];
        if c.instance != instance || !c.live() {
            return false;
        }
        if self.stopping.is_some() && kind != ProbeKind::Readiness {
            return false;
        }
        c.probes
            .iter()
            .any(|s| s.worker.kind == kind && s.worker.next_run() == Some(at))
    }

    /// The instance runs (its postStart, if any, completed): its probe workers begin.
    pub(super) fn become_running(&mut self, i: usize) {
        let probes = self.plan.containers[i].probes;
        let gated = probes.startup.is_some();
        let seed = self.plan.probe_jitter_seed;
        let admitted_at = self.admitted_at.unwrap_or(Instant::ZERO);
        let c = &mut self.containers[i];
        let Some(started_at) = c.up_since() else {
            return;
        };
        let instance = c.instance;
        c.state = ContainerState::Running { started_at };
        c.probes = [
            ProbeKind::Startup,
            ProbeKind::Liveness,
            ProbeKind::Readiness,
        ]
        .into_iter()
        .filter_map(|kind| {
            let p = probes.get(kind)?;
            let mut worker = Worker::new(kind, p.timing, started_at, gated);
            if let Some(seed) = seed {
                if started_at.saturating_since(admitted_at) < p.timing.period {
                    worker.delay_first(jitter(seed, i, kind, p.timing.period));
                }
            }
            Some(ProbeSlot {
                worker,
                in_flight: false,
                tick_kept: false,
            })
        })
        .collect();
        for s in &c.probes {
            if let Some(at) = s.worker.next_run() {
                self.probe_due
                    .push(Reverse((at, i, instance, s.worker.kind)));
            }
        }
    }

    /// Records an attempt; `true` when a published result changed (a full step must follow).
    pub(super) fn probed(
        &mut self,
        now: Instant,
        id: InstanceId,
        kind: ProbeKind,
        outcome: Outcome,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let stopping = self.stopping.is_some();
        let plan = &self.plan.containers[id.container];
        let probe_grace = plan.probes.get(kind).and_then(|p| p.grace);
        // As the kubelet's message: whether a failure would restart it.
        let restartable = self.policy_restarts(id.container, 1);
        let pod_grace = self.plan.grace;
        let Some(c) = self
            .containers
            .get_mut(id.container)
            .filter(|c| c.instance == id.instance)
        else {
            return false;
        };
        let Some(slot) = c.probes.iter().position(|s| s.worker.kind == kind) else {
            return false;
        };
        c.probes[slot].in_flight = false;
        // On pod termination liveness and startup end (a terminating container is never
        // probe-killed); readiness goes on.
        if (stopping && kind != ProbeKind::Readiness) || c.probes[slot].worker.next_run().is_none()
        {
            return false;
        }
        let what = kind.as_str();
        let said = match &outcome {
            Outcome::Success => None,
            Outcome::Failure(out) => Some(("Unhealthy", format!("{what} probe failed: {out}"))),
            Outcome::Warning(out) => Some(("ProbeWarning", format!("{what} probe warning: {out}"))),
            // The kubelet's words (prober.go): an error's result is "unknown".
            Outcome::Error(err) => Some((
                "Unhealthy",
                format!("{what} probe errored and resulted in unknown state: {err}"),
            )),
        };
        if let Some((reason, message)) = said {
            fx.push(event_of(c, EventType::Warning, reason, message));
        }
        let slot = &mut c.probes[slot];
        let published = slot.worker.report(outcome);
        if std::mem::take(&mut slot.tick_kept) && slot.worker.next_run().is_some() {
            slot.in_flight = true;
            fx.push(Effect::RunProbe(id, kind, now));
        }
        let Some(published) = published else {
            return false;
        };
        let name = c.name.clone();
        match (kind, published.result) {
            (ProbeKind::Startup, ProbeResult::Success) => {
                for s in &mut c.probes {
                    s.worker.startup_succeeded(now);
                    if let Some(at) = s.worker.next_run() {
                        self.probe_due.push(Reverse((
                            at,
                            id.container,
                            id.instance,
                            s.worker.kind,
                        )));
                    }
                }
            }
            (ProbeKind::Startup | ProbeKind::Liveness, ProbeResult::Failure) => {
                let mut message = format!("Container {name} failed {} probe", what.to_lowercase());
                if restartable {
                    message.push_str(", will be restarted");
                }
                let grace = probe_grace.unwrap_or(pod_grace);
                self.begin_kill(id.container, now, grace, message, false, fx);
            }
            _ => {}
        }
        true
    }

    /// Asks for the probe attempts that are due.
    pub(super) fn run_due_probes(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        while let Some(&Reverse(entry)) = self.probe_due.peek() {
            if entry.0 > now {
                break;
            }
            self.probe_due.pop();
            if !self.probe_entry_live(entry) {
                continue;
            }
            let (due, i, instance, kind) = entry;
            let c = &mut self.containers[i];
            let Some(slot) = c.probes.iter_mut().find(|s| s.worker.kind == kind) else {
                continue;
            };
            if !slot.worker.due(now) {
                continue;
            }
            if let Some(next) = slot.worker.next_run() {
                self.probe_due.push(Reverse((next, i, instance, kind)));
            }
            if slot.in_flight {
                slot.tick_kept = true;
            } else {
                slot.in_flight = true;
                fx.push(Effect::RunProbe(
                    InstanceId {
                        container: i,
                        instance,
                    },
                    kind,
                    due,
                ));
            }
        }
    }

    /// `started`: running, and the startup probe (if any) succeeded.
    pub(super) fn update_started(&mut self) {
        for c in &mut self.containers {
            c.started = matches!(c.state, ContainerState::Running { .. })
                && c.probes
                    .iter()
                    .filter(|s| s.worker.kind == ProbeKind::Startup)
                    .all(|s| s.worker.result() == ProbeResult::Success);
            c.ever_started |= c.started;
        }
    }

    /// `ready`, with a `Ready` / `NotReady` event when it flips.
    pub(super) fn update_ready(&mut self, fx: &mut Vec<Effect>) {
        for i in 0..self.containers.len() {
            if self.plan.containers[i].kind == Kind::Init {
                continue;
            }
            let c = &self.containers[i];
            let ready = c.started
                && c.probes
                    .iter()
                    .filter(|s| s.worker.kind == ProbeKind::Readiness)
                    .all(|s| s.worker.result() == ProbeResult::Success);
            if ready != c.ready {
                let name = c.name.clone();
                self.containers[i].ready = ready;
                fx.push(if ready {
                    let message = format!("Container {name} is ready");
                    self.container_event(i, EventType::Normal, "Ready", message)
                } else {
                    let message = format!("Container {name} is not ready");
                    self.container_event(i, EventType::Normal, "NotReady", message)
                });
            }
        }
    }
}

/// A pseudo-random fraction of `period` for the first probe of container `i`'s `kind` probe
/// (SplitMix64 of the seed and the probe's identity).
fn jitter(seed: u64, i: usize, kind: ProbeKind, period: Duration) -> Duration {
    let mut z = seed ^ ((i as u64) << 8) ^ (kind as u64);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let fraction = (z >> 11) as f64 / (1u64 << 53) as f64;
    period.mul_f64(fraction)
}
