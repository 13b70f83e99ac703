//! Scenario tests on a fake clock, one file per concern: a small simulated shell runs the effects (processes that
//! exit on schedule, or on SIGTERM after a delay, or never) and feeds the results back.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use super::*;
use crate::backoff::BackoffPolicy;
use crate::probe::{Outcome, ProbeKind, ProbeTiming};
use crate::restart::{ContainerRestart, ExitCodes, RestartPolicy, RestartRule, RuleAction};
use crate::stage::Stage;

mod adopt;
mod config;
mod deadline;
mod escalation;
mod image_volumes;
mod images;
mod probes;
mod random;
mod restart_all;
mod restarts;
mod stop;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How every instance of one container behaves.
#[derive(Clone)]
struct Script {
    /// Run time and exit code of instance n (1-based); the last entry repeats.
    runs: Vec<(Option<u64>, i32)>,
    /// How long after SIGTERM the process exits (143); `None`: it ignores SIGTERM.
    on_term: Option<u64>,
    /// Instances whose start fails (exec error).
    start_fails: Vec<u32>,
    /// A probe attempt's outcome from (kind, instance, ms since the instance started).
    probe: Rc<dyn Fn(ProbeKind, u32, u64) -> Outcome>,
    /// How long a probe attempt takes.
    probe_ms: u64,
    /// How long each hook takes (`None`: it never ends) and whether it fails.
    post_start: (Option<u64>, bool),
    pre_stop: (Option<u64>, bool),
}

fn runs(runs: &[(Option<u64>, i32)]) -> Script {
    Script {
        runs: runs.to_vec(),
        on_term: Some(0),
        start_fails: vec![],
        probe: Rc::new(|_, _, _| Outcome::Success),
        probe_ms: 10,
        post_start: (Some(0), false),
        pre_stop: (Some(0), false),
    }
}

fn forever() -> Script {
    runs(&[(None, 0)])
}

/// How the n-th (1-based) image check of container i goes (see `Sim::image`).
type ImageScript = Rc<dyn Fn(usize, u32) -> (u64, Result<bool, ImageFailure>)>;

struct Sim {
    pod: Pod,
    now: Instant,
    scripts: Vec<Script>,
    /// Live processes: when each exits and how.
    procs: BTreeMap<InstanceId, (Option<Instant>, ExitStatus)>,
    /// `t=MS what` lines, for readable assertions.
    log: Vec<String>,
    stop_at: Option<Instant>,
    max_restarts: Vec<u32>,
    max_stages: Vec<Option<Stage>>,
    /// Probe and hook results still to come back.
    pending: Vec<(Instant, Input)>,
    started: BTreeMap<InstanceId, Instant>,
    /// `t=MS Reason object: message` for events other than Created/Started/exits/BackOff.
    events: Vec<String>,
    /// The stage each instance was spawned in.
    stages: Vec<(String, Option<Stage>)>,
    /// How the n-th (1-based) image check of container i goes: how long it takes and
    /// whether it pulls (`Ok(true)`), finds it there (`Ok(false)`) or fails.
    image: ImageScript,
    image_checks: Vec<u32>,
    /// Image volume v's checks go through `image` as container `VOLUME + v`.
    volume_checks: Vec<u32>,
    /// What a volume's image that is there says cannot be mounted (container, why).
    unmountable: Vec<(usize, String)>,
}

/// Where image volumes' checks are numbered in `Sim::image`.
const VOLUME: usize = 1000;

impl Sim {
    fn new(plan: PodPlan, scripts: Vec<Script>) -> Sim {
        let n = scripts.len();
        let volumes = plan.image_volumes.len();
        Sim {
            pod: Pod::new(plan),
            now: Instant::ZERO,
            scripts,
            procs: BTreeMap::new(),
            log: vec![],
            stop_at: None,
            max_restarts: vec![0; n],
            max_stages: vec![None; n],
            pending: vec![],
            started: BTreeMap::new(),
            events: vec![],
            stages: vec![],
            image: Rc::new(|_, _| (0, Ok(false))),
            image_checks: vec![0; n],
            volume_checks: vec![0; volumes],
            unmountable: vec![],
        }
    }

    fn name(&self, id: InstanceId) -> String {
        format!(
            "{}#{}",
            self.pod.plan().containers[id.container].name,
            id.instance
        )
    }

    fn feed(&mut self, input: Input) {
        let fx = self.pod.step(self.now, input);
        for e in fx {
            self.apply(e);
        }
        // Invariants after every step.
        for (i, c) in self.pod.containers().iter().enumerate() {
            assert!(
                c.restart_count >= self.max_restarts[i],
                "restartCount went down"
            );
            self.max_restarts[i] = c.restart_count;
            assert!(
                c.stage >= self.max_stages[i],
                "the stage of {} went back from {:?} to {:?}",
                c.name,
                self.max_stages[i],
                c.stage
            );
            self.max_stages[i] = c.stage;
            let live = self.procs.keys().filter(|id| id.container == i).count();
            assert!(live <= 1, "two live instances of {}", c.name);
        }
    }

    fn apply(&mut self, e: Effect) {
        let t = self.now.since_origin().as_millis();
        match e {
            Effect::Spawn(id, stage) => {
                self.log.push(format!("t={t} spawn {}", self.name(id)));
                self.stages.push((self.name(id), stage));
                let script = &self.scripts[id.container];
                if script.start_fails.contains(&id.instance) {
                    self.feed(Input::StartFailed(id, "exec: no such file".into()));
                    return;
                }
                let (run, code) =
                    script.runs[(id.instance as usize - 1).min(script.runs.len() - 1)];
                self.procs
                    .insert(id, (run.map(|r| self.now + ms(r)), ExitStatus::Code(code)));
                self.started.insert(id, self.now);
                self.feed(Input::Started(id, self.now));
            }
            Effect::Signal(id, sig) => {
                self.log
                    .push(format!("t={t} {sig:?} {}", self.name(id)).to_lowercase());
                let on_term = self.scripts[id.container].on_term;
                if let Some(p) = self.procs.get_mut(&id) {
                    match sig {
                        Signal::Kill => *p = (Some(self.now), ExitStatus::Signal(9)),
                        Signal::Term => {
                            if let Some(d) = on_term {
                                let at = self.now + ms(d);
                                if p.0.is_none_or(|e| at < e) {
                                    *p = (Some(at), ExitStatus::Signal(15));
                                }
                            }
                        }
                    }
                }
            }
            Effect::Event(ev) if ev.reason == "BackOff" => {
                self.log.push(format!("t={t} backoff {}", ev.object));
            }
            Effect::Event(ev) => {
                if !["Created", "Started", "Completed", "Error"].contains(&ev.reason.as_str()) {
                    self.events
                        .push(format!("t={t} {} {}: {}", ev.reason, ev.object, ev.message));
                }
            }
            Effect::RunProbe(id, kind, _) => {
                self.log
                    .push(format!("t={t} probe {kind:?} {}", self.name(id)).to_lowercase());
                let script = &self.scripts[id.container];
                let since = (self.now - self.started[&id]).as_millis() as u64;
                let outcome = (script.probe)(kind, id.instance, since);
                let at = self.now + ms(script.probe_ms);
                self.pending.push((at, Input::Probed(id, kind, outcome)));
            }
            Effect::RunHook(id, hook) => {
                self.log
                    .push(format!("t={t} hook {hook:?} {}", self.name(id)).to_lowercase());
                let script = &self.scripts[id.container];
                let (takes, fails) = match hook {
                    Hook::PostStart => script.post_start,
                    Hook::PreStop => script.pre_stop,
                };
                if let Some(d) = takes {
                    let result = if fails {
                        Err("hook failed".into())
                    } else {
                        Ok(())
                    };
                    self.pending
                        .push((self.now + ms(d), Input::HookDone(id, hook, result)));
                }
            }
            Effect::Finished(phase) => self.log.push(format!("t={t} finished {phase:?}")),
            Effect::WipeVolumes => self.events.push(format!("t={t} wipe volumes")),
            Effect::LogTail(id) => self
                .events
                .push(format!("t={t} log tail {}", self.name(id))),
            Effect::EnsureImage(i) => {
                let name = self.pod.plan().containers[i].name.clone();
                self.log.push(format!("t={t} ensure image {name}"));
                self.image_checks[i] += 1;
                let n = self.image_checks[i];
                self.answer_image(i, n, &|r| Input::Image(i, r));
            }
            Effect::EnsureVolumeImage(v) => {
                self.log.push(format!("t={t} ensure volume image {v}"));
                self.volume_checks[v] += 1;
                let n = self.volume_checks[v];
                self.answer_image(VOLUME + v, n, &|r| Input::VolumeImage(v, r));
            }
        }
    }

    /// Answers the `n`-th image check of `which` (a container, or `VOLUME + v`) as `image`
    /// says: `Pulling` at once when it pulls, the end when the check takes.
    fn answer_image(&mut self, which: usize, n: u32, input: &dyn Fn(ImageReport) -> Input) {
        let (takes, how) = (self.image)(which, n);
        let report = match how {
            Ok(pulls) => {
                if pulls {
                    self.feed(input(ImageReport::Pulling));
                }
                ImageReport::Ready {
                    pulled: pulls.then(|| "pulled".to_string()),
                    non_root: None,
                    unmountable: match which >= VOLUME {
                        true => self.unmountable.clone(),
                        false => Vec::new(),
                    },
                }
            }
            Err(reason) => ImageReport::Failed {
                reason,
                message: "no such host".into(),
            },
        };
        self.pending.push((self.now + ms(takes), input(report)));
    }

    /// Runs until the pod finishes or `limit` ms pass.
    fn run(&mut self, limit: u64) -> &mut Sim {
        self.feed(Input::Admit);
        let mut steps = 0u32;
        while !self.pod.is_finished() {
            steps += 1;
            assert!(
                steps < 200_000,
                "no progress at t={:?}: {:#?}",
                self.now,
                &self.log[self.log.len().saturating_sub(20)..],
            );
            let next_exit = self
                .procs
                .iter()
                .filter_map(|(id, (at, st))| at.map(|a| (a, *id, *st)))
                .min_by_key(|e| (e.0, e.1));
            let deadline = self.pod.next_deadline();
            let stop = self.stop_at;
            let next_result = self.pending.iter().map(|p| p.0).min();
            let candidates = [next_exit.map(|e| e.0), deadline, stop, next_result];
            let Some(next) = candidates.iter().flatten().min().copied() else {
                break;
            };
            if next.since_origin() > ms(limit) {
                break;
            }
            self.now = next.max(self.now);
            if stop == Some(next) {
                self.stop_at = None;
                self.log
                    .push(format!("t={} stop", next.since_origin().as_millis()));
                self.feed(Input::Stop);
            } else if next_result == Some(next) {
                let i = self.pending.iter().position(|p| p.0 == next).unwrap();
                let (_, input) = self.pending.remove(i);
                self.feed(input);
            } else if let Some((at, id, st)) = next_exit.filter(|e| e.0 == next) {
                let _ = at;
                self.procs.remove(&id);
                self.feed(Input::Exited(id, st.into()));
            } else {
                self.feed(Input::Tick);
            }
        }
        self
    }

    fn lines(&self, what: &str) -> Vec<String> {
        self.log
            .iter()
            .filter(|l| l.contains(what))
            .cloned()
            .collect()
    }
}

fn plan(policy: RestartPolicy, containers: &[(&str, Kind)]) -> PodPlan {
    PodPlan {
        namespace: "ns".into(),
        uid: "u".into(),
        name: "pod".into(),
        restart_policy: policy,
        grace: Duration::from_secs(30),
        containers: containers
            .iter()
            .map(|(name, kind)| ContainerPlan::new(name, *kind))
            .collect(),
        backoff: BackoffPolicy::default(),
        staging: None,
        pod_restart: None,
        probe_jitter_seed: None,
        sidecars_restart_in_termination: false,
        active_deadline: None,
        image_volumes: Vec::new(),
        readiness_gates: Vec::new(),
    }
}

/// Saves the pod's record as the shell does (through serde's form of it), as of `sim.now`.
fn saved(sim: &Sim) -> crate::record::PodRecord {
    let mut r = crate::record::PodRecord {
        pod: "ns/pod".into(),
        uid: "u".into(),
        created: 0,
        saved: sim.now.since_origin().as_millis() as u64,
        saved_by: 42,
        boot: "b".into(),
        pod_restarts: 0,
        restarts_all: 0,
        restarting_all: false,
        ended: None,
        containers: vec![],
    };
    sim.pod.record_into(&mut r);
    #[cfg(feature = "supervision")]
    let r = serde_json::from_str(&serde_json::to_string(&r).expect("writes")).expect("reads back");
    r
}
