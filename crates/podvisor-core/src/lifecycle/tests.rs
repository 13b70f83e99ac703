//! Scenario tests on a fake clock: a small simulated shell runs the effects (processes that
//! exit on schedule, or on SIGTERM after a delay, or never) and feeds the results back.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use super::*;
use crate::probe::ProbeTiming;
use crate::restart::{ExitCodes, RestartRule};

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
    /// Probe and hook results still to come back.
    pending: Vec<(Instant, Input)>,
    started: BTreeMap<InstanceId, Instant>,
    /// `t=MS Reason object: message` for events other than Created/Started/exits/BackOff.
    events: Vec<String>,
}

impl Sim {
    fn new(plan: PodPlan, scripts: Vec<Script>) -> Sim {
        let n = scripts.len();
        Sim {
            pod: Pod::new(plan),
            now: Instant::ZERO,
            scripts,
            procs: BTreeMap::new(),
            log: vec![],
            stop_at: None,
            max_restarts: vec![0; n],
            pending: vec![],
            started: BTreeMap::new(),
            events: vec![],
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
            let live = self.procs.keys().filter(|id| id.container == i).count();
            assert!(live <= 1, "two live instances of {}", c.name);
        }
    }

    fn apply(&mut self, e: Effect) {
        let t = self.now.since_origin().as_millis();
        match e {
            Effect::Spawn(id) => {
                self.log.push(format!("t={t} spawn {}", self.name(id)));
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
                self.feed(Input::Started(id));
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
        }
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
                self.feed(Input::Exited(id, st));
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
        name: "pod".into(),
        restart_policy: policy,
        grace: Duration::from_secs(30),
        containers: containers
            .iter()
            .map(|(name, kind)| ContainerPlan::new(name, *kind))
            .collect(),
        backoff: BackoffPolicy::default(),
        probe_jitter_seed: None,
    }
}

#[test]
fn crash_loop_follows_the_backoff_schedule() {
    let mut sim = Sim::new(
        plan(RestartPolicy::Always, &[("app", Kind::Main)]),
        vec![runs(&[(Some(100), 1)])],
    );
    sim.run(200_000);
    assert_eq!(
        sim.lines("spawn"),
        [
            "t=0 spawn app#1",
            "t=100 spawn app#2",    // first restart: at once
            "t=10200 spawn app#3",  // exit at 200 + 10 s
            "t=30300 spawn app#4",  // exit at 10300 + 20 s
            "t=70400 spawn app#5",  // + 40 s
            "t=150500 spawn app#6", // + 80 s
        ]
    );
    assert_eq!(
        sim.lines("backoff").len(),
        5,
        "one per wait, the last one still running"
    );
    let c = &sim.pod.containers()[0];
    assert_eq!(c.restart_count, 5);
    assert_eq!(sim.pod.phase(), Phase::Running);
    // Waiting in CrashLoopBackOff shows the kubelet's message and the last exit.
    assert!(
        matches!(&c.state, ContainerState::Waiting { reason: WaitingReason::CrashLoopBackOff, message: Some(m) } if m == "back-off 2m40s restarting failed container=app pod=pod"),
        "{:?}",
        c.state
    );
    assert!(matches!(
        c.last_state,
        Some(ContainerState::Terminated {
            exit_code: 1,
            reason: TerminatedReason::Error,
            ..
        })
    ));
}

#[test]
fn backoff_resets_after_ten_minutes_of_running() {
    // Quick crashes, then one instance that runs 11 minutes, then quick crashes again.
    let script = runs(&[
        (Some(100), 1),
        (Some(100), 1),
        (Some(100), 1),
        (Some(660_000), 1),
        (Some(100), 1),
    ]);
    let mut sim = Sim::new(
        plan(RestartPolicy::Always, &[("app", Kind::Main)]),
        vec![script],
    );
    sim.run(700_000);
    let spawns = sim.lines("spawn");
    // #4 starts at 30300 and exits at 690300, more than 600 s after the last decision: at once.
    assert_eq!(spawns[3], "t=30300 spawn app#4");
    assert_eq!(spawns[4], "t=690300 spawn app#5");
}

#[test]
fn on_failure_and_never() {
    // OnFailure: a failure restarts, a success completes the pod.
    let mut sim = Sim::new(
        plan(RestartPolicy::OnFailure, &[("job", Kind::Main)]),
        vec![runs(&[(Some(100), 3), (Some(100), 0)])],
    );
    sim.run(60_000);
    assert_eq!(sim.lines("spawn"), ["t=0 spawn job#1", "t=100 spawn job#2"]);
    assert_eq!(sim.lines("finished"), ["t=200 finished Succeeded"]);

    // Never: the first failure fails the pod.
    let mut sim = Sim::new(
        plan(RestartPolicy::Never, &[("job", Kind::Main)]),
        vec![runs(&[(Some(100), 3)])],
    );
    sim.run(60_000);
    assert_eq!(sim.lines("spawn"), ["t=0 spawn job#1"]);
    assert_eq!(sim.lines("finished"), ["t=100 finished Failed"]);

    // Always: even a success restarts.
    let mut sim = Sim::new(
        plan(RestartPolicy::Always, &[("app", Kind::Main)]),
        vec![runs(&[(Some(100), 0)])],
    );
    sim.run(1_000);
    assert_eq!(
        sim.lines("spawn")[..2],
        ["t=0 spawn app#1", "t=100 spawn app#2"]
    );
}

#[test]
fn two_main_containers_finish_together() {
    let p = plan(
        RestartPolicy::Never,
        &[("a", Kind::Main), ("b", Kind::Main)],
    );
    let mut sim = Sim::new(p, vec![runs(&[(Some(100), 0)]), runs(&[(Some(300), 0)])]);
    sim.run(10_000);
    assert_eq!(sim.lines("spawn"), ["t=0 spawn a#1", "t=0 spawn b#1"]);
    assert_eq!(sim.lines("finished"), ["t=300 finished Succeeded"]);
    let p = plan(
        RestartPolicy::Never,
        &[("a", Kind::Main), ("b", Kind::Main)],
    );
    let mut sim = Sim::new(p, vec![runs(&[(Some(100), 1)]), runs(&[(Some(300), 0)])]);
    sim.run(10_000);
    assert_eq!(sim.lines("finished"), ["t=300 finished Failed"]);
}

#[test]
fn init_containers_run_in_order_before_the_main_ones() {
    let p = plan(
        RestartPolicy::Always,
        &[("a", Kind::Init), ("b", Kind::Init), ("app", Kind::Main)],
    );
    let mut sim = Sim::new(
        p,
        vec![runs(&[(Some(100), 0)]), runs(&[(Some(50), 0)]), forever()],
    );
    sim.run(10_000);
    assert_eq!(
        sim.lines("spawn"),
        ["t=0 spawn a#1", "t=100 spawn b#1", "t=150 spawn app#1"]
    );
    assert_eq!(sim.pod.phase(), Phase::Running);
    // Before init completes, the main container waits with PodInitializing.
    let p = plan(
        RestartPolicy::Always,
        &[("a", Kind::Init), ("app", Kind::Main)],
    );
    let mut pod = Pod::new(p);
    pod.step(Instant::ZERO, Input::Admit);
    assert!(matches!(
        pod.containers()[1].state,
        ContainerState::Waiting {
            reason: WaitingReason::PodInitializing,
            ..
        }
    ));
    assert_eq!(pod.phase(), Phase::Pending);
}

#[test]
fn a_failed_init_container_under_each_policy() {
    let scripts = || {
        vec![
            runs(&[(Some(100), 1), (Some(100), 1), (Some(100), 0)]),
            forever(),
        ]
    };
    // Never: the pod fails and the main container never starts.
    let p = plan(
        RestartPolicy::Never,
        &[("init", Kind::Init), ("app", Kind::Main)],
    );
    let mut sim = Sim::new(p, scripts());
    sim.run(100_000);
    assert_eq!(sim.lines("spawn"), ["t=0 spawn init#1"]);
    assert_eq!(sim.lines("finished"), ["t=100 finished Failed"]);
    // Always / OnFailure: the init container is retried with backoff; the pod stays Pending.
    for policy in [RestartPolicy::Always, RestartPolicy::OnFailure] {
        let p = plan(policy, &[("init", Kind::Init), ("app", Kind::Main)]);
        let mut sim = Sim::new(p, scripts());
        sim.run(5_000);
        assert_eq!(
            sim.lines("spawn"),
            ["t=0 spawn init#1", "t=100 spawn init#2"]
        );
        assert_eq!(sim.pod.phase(), Phase::Pending);
        let mut sim = Sim::new(
            plan(policy, &[("init", Kind::Init), ("app", Kind::Main)]),
            scripts(),
        );
        sim.run(100_000);
        assert_eq!(
            sim.lines("spawn"),
            [
                "t=0 spawn init#1",
                "t=100 spawn init#2",
                "t=10200 spawn init#3",
                "t=10300 spawn app#1"
            ]
        );
    }
}

#[test]
fn sidecars_start_in_order_and_stop_last_in_reverse() {
    let p = plan(
        RestartPolicy::Never,
        &[
            ("s1", Kind::Sidecar),
            ("setup", Kind::Init),
            ("s2", Kind::Sidecar),
            ("app", Kind::Main),
        ],
    );
    let mut s1 = forever();
    s1.on_term = Some(100);
    let mut s2 = forever();
    s2.on_term = Some(50);
    let mut sim = Sim::new(
        p,
        vec![s1, runs(&[(Some(100), 0)]), s2, runs(&[(Some(1000), 0)])],
    );
    sim.run(100_000);
    assert_eq!(
        sim.log,
        [
            "t=0 spawn s1#1",
            "t=0 spawn setup#1",
            "t=100 spawn s2#1",
            "t=100 spawn app#1",
            // The main container completes: the pod Succeeded, and the sidecars are stopped,
            // the last one first.
            "t=1100 term s2#1",
            "t=1150 term s1#1",
            "t=1250 finished Succeeded",
        ]
    );
}

#[test]
fn sidecars_restart_whatever_the_pod_policy() {
    let p = plan(
        RestartPolicy::Never,
        &[("side", Kind::Sidecar), ("app", Kind::Main)],
    );
    let mut sim = Sim::new(
        p,
        vec![runs(&[(Some(100), 0), (None, 0)]), runs(&[(Some(5000), 0)])],
    );
    sim.run(100_000);
    assert_eq!(
        sim.lines("spawn"),
        ["t=0 spawn side#1", "t=0 spawn app#1", "t=100 spawn side#2"]
    );
    assert_eq!(sim.lines("finished"), ["t=5000 finished Succeeded"]);
}

#[test]
fn stop_sends_sigterm_then_sigkill_after_the_grace() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.grace = Duration::from_secs(5);
    let mut stubborn = forever();
    stubborn.on_term = None;
    let mut sim = Sim::new(p, vec![stubborn]);
    sim.stop_at = Some(Instant::from_millis(1000));
    sim.run(100_000);
    assert_eq!(
        sim.log,
        [
            "t=0 spawn app#1",
            "t=1000 stop",
            "t=1000 term app#1",
            "t=6000 kill app#1",
            "t=6000 finished Failed"
        ]
    );
    assert!(matches!(
        sim.pod.containers()[0].state,
        ContainerState::Terminated { exit_code: 137, .. }
    ));

    // A grace under 2 s is raised to 2 s; a polite process exits on SIGTERM (143).
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.grace = Duration::ZERO;
    let mut polite = forever();
    polite.on_term = Some(300);
    let mut sim = Sim::new(p.clone(), vec![polite]);
    sim.stop_at = Some(Instant::from_millis(1000));
    sim.run(100_000);
    assert_eq!(
        sim.log,
        [
            "t=0 spawn app#1",
            "t=1000 stop",
            "t=1000 term app#1",
            "t=1300 finished Failed"
        ]
    );
    let mut stubborn = forever();
    stubborn.on_term = None;
    let mut sim = Sim::new(p, vec![stubborn]);
    sim.stop_at = Some(Instant::from_millis(1000));
    sim.run(100_000);
    assert_eq!(sim.lines("kill"), ["t=3000 kill app#1"]);
}

#[test]
fn stop_takes_mains_first_then_sidecars() {
    let p = plan(
        RestartPolicy::Always,
        &[
            ("side", Kind::Sidecar),
            ("a", Kind::Main),
            ("b", Kind::Main),
        ],
    );
    let mut a = forever();
    a.on_term = Some(200);
    let mut b = forever();
    b.on_term = Some(500);
    let mut sim = Sim::new(p, vec![forever(), a, b]);
    sim.stop_at = Some(Instant::from_millis(1000));
    sim.run(100_000);
    assert_eq!(
        sim.log[3..],
        [
            "t=1000 stop",
            "t=1000 term a#1",
            "t=1000 term b#1",
            "t=1500 term side#1",
            "t=1500 finished Failed"
        ]
    );
}

#[test]
fn a_stop_while_backing_off_ends_at_once() {
    let mut sim = Sim::new(
        plan(RestartPolicy::Always, &[("app", Kind::Main)]),
        vec![runs(&[(Some(100), 1)])],
    );
    sim.stop_at = Some(Instant::from_millis(5000));
    sim.run(100_000);
    assert_eq!(sim.lines("finished"), ["t=5000 finished Failed"]);
    assert_eq!(sim.lines("spawn").len(), 2);
}

#[test]
fn exit_code_rules_decide_first() {
    let mut p = plan(RestartPolicy::Never, &[("app", Kind::Main)]);
    p.containers[0].restart = ContainerRestart {
        policy: Some(RestartPolicy::Never),
        rules: vec![RestartRule {
            exit_codes: ExitCodes::In(vec![42]),
        }],
    };
    let mut sim = Sim::new(
        p,
        vec![runs(&[(Some(100), 42), (Some(100), 42), (Some(100), 1)])],
    );
    sim.run(100_000);
    assert_eq!(
        sim.lines("spawn"),
        [
            "t=0 spawn app#1",
            "t=100 spawn app#2",
            "t=10200 spawn app#3"
        ]
    );
    assert_eq!(sim.lines("finished"), ["t=10300 finished Failed"]);
}

#[test]
fn a_failed_start_is_start_error_and_backs_off() {
    let mut script = runs(&[(None, 0)]);
    script.start_fails = vec![1, 2];
    let mut sim = Sim::new(
        plan(RestartPolicy::Always, &[("app", Kind::Main)]),
        vec![script],
    );
    sim.run(60_000);
    assert_eq!(
        sim.lines("spawn"),
        ["t=0 spawn app#1", "t=0 spawn app#2", "t=10000 spawn app#3"]
    );
    let c = &sim.pod.containers()[0];
    assert!(matches!(c.state, ContainerState::Running { .. }));
    assert!(matches!(
        &c.last_state,
        Some(ContainerState::Terminated {
            exit_code: 128,
            reason: TerminatedReason::StartError,
            message: Some(_),
            ..
        })
    ));
    assert_eq!(c.restart_count, 2);
}

#[test]
fn stale_inputs_are_ignored() {
    let mut pod = Pod::new(plan(RestartPolicy::Always, &[("app", Kind::Main)]));
    pod.step(Instant::ZERO, Input::Admit);
    let first = InstanceId {
        container: 0,
        instance: 1,
    };
    pod.step(Instant::ZERO, Input::Started(first));
    pod.step(
        Instant::from_millis(10),
        Input::Exited(first, ExitStatus::Code(1)),
    );
    assert_eq!(pod.containers()[0].instance, 2);
    // A second exit report for instance 1 changes nothing.
    let fx = pod.step(
        Instant::from_millis(20),
        Input::Exited(first, ExitStatus::Code(1)),
    );
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(pod.containers()[0].restart_count, 1);
}

/// A tiny deterministic generator, so that the property test needs no dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn random_pods_keep_the_invariants_and_always_finish() {
    // Invariants checked after every step by `Sim::feed`: never two live instances of one
    // container, restartCount never decreases. And a stop always ends the pod.
    let mut rng = Lcg(7);
    for case in 0..300 {
        let policy = [
            RestartPolicy::Always,
            RestartPolicy::OnFailure,
            RestartPolicy::Never,
        ][rng.next(3) as usize];
        let kinds = [Kind::Init, Kind::Sidecar, Kind::Main];
        let n = 1 + rng.next(4) as usize;
        let mut containers: Vec<(String, Kind)> = (0..n)
            .map(|i| (format!("c{i}"), kinds[rng.next(3) as usize]))
            .collect();
        containers.sort_by_key(|(_, k)| *k == Kind::Main);
        containers.push(("main".into(), Kind::Main));
        let refs: Vec<(&str, Kind)> = containers.iter().map(|(n, k)| (n.as_str(), *k)).collect();
        let mut p = plan(policy, &refs);
        p.grace = ms(rng.next(5000));
        // Probes and hooks on sidecars and main containers, some of them failing or hanging.
        for c in p.containers.iter_mut().filter(|c| c.kind != Kind::Init) {
            let timing = |rng: &mut Lcg| ProbePlan {
                timing: ProbeTiming {
                    initial_delay: ms(rng.next(3000)),
                    period: ms(1000 + rng.next(3000)),
                    timeout: ms(1000),
                    success_threshold: 1,
                    failure_threshold: 1 + rng.next(3) as u32,
                },
                grace: (rng.next(2) == 0).then(|| ms(rng.next(3000))),
            };
            c.probes.startup = (rng.next(3) == 0).then(|| timing(&mut rng));
            c.probes.liveness = (rng.next(2) == 0).then(|| timing(&mut rng));
            c.probes.readiness = (rng.next(2) == 0).then(|| timing(&mut rng));
            c.post_start = rng.next(3) == 0;
            c.pre_stop = rng.next(3) == 0;
        }
        let scripts: Vec<Script> = containers
            .iter()
            .map(|_| {
                let runs: Vec<(Option<u64>, i32)> = (0..4)
                    .map(|_| {
                        (
                            if rng.next(5) == 0 {
                                None
                            } else {
                                Some(rng.next(3000))
                            },
                            rng.next(3) as i32,
                        )
                    })
                    .collect();
                Script {
                    runs,
                    on_term: if rng.next(4) == 0 {
                        None
                    } else {
                        Some(rng.next(1000))
                    },
                    start_fails: if rng.next(6) == 0 { vec![1] } else { vec![] },
                    probe: {
                        let flaky = rng.next(3);
                        Rc::new(move |_, _, since| {
                            if flaky > 0 && since % (flaky * 1700) < 900 {
                                Outcome::Failure("down".into())
                            } else {
                                Outcome::Success
                            }
                        })
                    },
                    probe_ms: rng.next(1500),
                    post_start: ((rng.next(5) != 0).then(|| rng.next(2000)), rng.next(4) == 0),
                    pre_stop: ((rng.next(5) != 0).then(|| rng.next(8000)), rng.next(4) == 0),
                }
            })
            .collect();
        let n = scripts.len();
        let mut sim = Sim::new(p, scripts);
        let stop = rng.next(120_000);
        sim.stop_at = Some(Instant::from_millis(stop));
        // `podvisor restart` of a container or of the whole pod, at random moments.
        for _ in 0..rng.next(3) {
            let at = Instant::from_millis(rng.next(stop + 1));
            let input = match rng.next(3) {
                0 => Input::RestartPod,
                _ => Input::RestartContainer(rng.next(n as u64) as usize),
            };
            sim.pending.push((at, input));
        }
        sim.run(stop + 10_000);
        assert!(
            sim.pod.is_finished(),
            "case {case}: not finished: {:#?}",
            sim.log
        );
        assert!(
            sim.procs.is_empty(),
            "case {case}: processes left: {:?}",
            sim.procs
        );
    }
}

#[test]
fn conditions_follow_init_and_readiness() {
    let p = plan(
        RestartPolicy::Never,
        &[
            ("a", Kind::Init),
            ("side", Kind::Sidecar),
            ("app", Kind::Main),
        ],
    );
    let mut pod = Pod::new(p);
    let show = |pod: &Pod| -> Vec<String> {
        pod.conditions()
            .iter()
            .map(|c| {
                format!(
                    "{}={} {}",
                    c.kind,
                    c.status,
                    c.message.clone().or(c.reason.clone()).unwrap_or_default()
                )
            })
            .collect()
    };
    pod.step(Instant::ZERO, Input::Admit);
    assert_eq!(
        show(&pod),
        [
            "PodScheduled=true ",
            "Initialized=false containers with incomplete status: [a side]",
            "ContainersReady=false containers with unready status: [side app]",
            "Ready=false containers with unready status: [side app]",
        ]
    );
    let id = |c, i| InstanceId {
        container: c,
        instance: i,
    };
    pod.step(Instant::ZERO, Input::Started(id(0, 1)));
    pod.step(
        Instant::from_millis(5),
        Input::Exited(id(0, 1), ExitStatus::Code(0)),
    );
    pod.step(Instant::from_millis(6), Input::Started(id(1, 1)));
    pod.step(Instant::from_millis(7), Input::Started(id(2, 1)));
    assert_eq!(
        show(&pod)[1..],
        ["Initialized=true ", "ContainersReady=true ", "Ready=true "]
    );
    assert_eq!(pod.phase(), Phase::Running);
    pod.step(
        Instant::from_millis(9),
        Input::Exited(id(2, 1), ExitStatus::Code(0)),
    );
    assert_eq!(pod.phase(), Phase::Succeeded);
    assert_eq!(
        show(&pod)[2..],
        [
            "ContainersReady=false PodCompleted",
            "Ready=false PodCompleted"
        ]
    );
}

fn probe(delay: u64, period: u64, failure: u32) -> ProbePlan {
    ProbePlan {
        timing: ProbeTiming {
            initial_delay: ms(delay),
            period: ms(period),
            timeout: ms(1000),
            success_threshold: 1,
            failure_threshold: failure,
        },
        grace: None,
    }
}

fn with_probe(f: impl Fn(ProbeKind, u32, u64) -> Outcome + 'static) -> Script {
    Script {
        probe: Rc::new(f),
        ..forever()
    }
}

#[test]
fn readiness_starts_failed_and_follows_the_probe() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.containers[0].probes.readiness = Some(probe(5000, 1000, 2));
    // Ready after 6.5 s of running, down from 10 s to 12 s.
    let script = with_probe(|_, _, since| {
        if (6500..20_000).contains(&since) && !(10_000..12_000).contains(&since) {
            Outcome::Success
        } else {
            Outcome::Failure("HTTP probe failed with statuscode: 503".into())
        }
    });
    let mut sim = Sim::new(p, vec![script]);
    sim.run(14_500);
    let probes: Vec<String> = sim.lines("probe");
    assert_eq!(
        probes[0], "t=5000 probe readiness app#1",
        "nothing before the delay"
    );
    assert_eq!(probes[1], "t=6000 probe readiness app#1");
    assert_eq!(
        sim.events,
        [
            "t=5010 Unhealthy app: Readiness probe failed: HTTP probe failed with statuscode: 503",
            "t=6010 Unhealthy app: Readiness probe failed: HTTP probe failed with statuscode: 503",
            "t=7010 Ready app: Container app is ready",
            "t=10010 Unhealthy app: Readiness probe failed: HTTP probe failed with statuscode: 503",
            // failureThreshold 2: the second failure in a row publishes.
            "t=11010 Unhealthy app: Readiness probe failed: HTTP probe failed with statuscode: 503",
            "t=11010 NotReady app: Container app is not ready",
            "t=12010 Ready app: Container app is ready",
        ]
    );
    // Readiness never restarts anything.
    assert_eq!(sim.lines("spawn").len(), 1);
    let ready = sim.pod.conditions();
    assert!(ready.iter().all(|c| c.status), "{ready:?}");
}

#[test]
fn liveness_failure_kills_with_the_probes_grace_and_restarts() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.grace = Duration::from_secs(500);
    let mut live = probe(0, 1000, 3);
    live.grace = Some(Duration::from_secs(5));
    p.containers[0].probes.liveness = Some(live);
    // Instance 1 hangs after 2 s and ignores SIGTERM; instance 2 is healthy.
    let mut script = with_probe(|_, instance, since| {
        if instance == 1 && since >= 2000 {
            Outcome::Failure("timeout".into())
        } else {
            Outcome::Success
        }
    });
    script.on_term = None;
    let mut sim = Sim::new(p, vec![script]);
    sim.run(20_000);
    // Failures at 2, 3 and 4 s: published at the third, then the worker holds.
    assert_eq!(
        sim.lines("app#1")
            .iter()
            .filter(|l| !l.contains("probe"))
            .collect::<Vec<_>>(),
        ["t=0 spawn app#1", "t=4010 term app#1", "t=9010 kill app#1"]
    );
    assert!(
        sim.lines("probe liveness app#1")
            .iter()
            .all(|l| l.as_str() <= "t=4000 z"),
        "no probe while killing: {:?}",
        sim.lines("probe liveness app#1")
    );
    assert!(sim.events.contains(
        &"t=4010 Killing app: Container app failed liveness probe, will be restarted".to_string()
    ));
    assert_eq!(
        sim.lines("spawn"),
        ["t=0 spawn app#1", "t=9010 spawn app#2"]
    );
    let c = &sim.pod.containers()[0];
    assert_eq!(c.restart_count, 1);
    assert!(matches!(
        c.last_state,
        Some(ContainerState::Terminated { exit_code: 137, .. })
    ));

    // Under Never the kill is final and the message says nothing of a restart.
    let mut p = plan(RestartPolicy::Never, &[("app", Kind::Main)]);
    p.containers[0].probes.liveness = Some(probe(0, 1000, 1));
    let mut sim = Sim::new(p, vec![with_probe(|_, _, _| Outcome::Failure("no".into()))]);
    sim.run(60_000);
    assert!(sim
        .events
        .contains(&"t=10 Killing app: Container app failed liveness probe".to_string()));
    assert_eq!(sim.lines("finished"), ["t=10 finished Failed"]);
}

#[test]
fn startup_gates_liveness_and_readiness_and_its_failure_kills() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.containers[0].probes.startup = Some(probe(0, 1000, 10));
    p.containers[0].probes.liveness = Some(probe(0, 10_000, 1));
    p.containers[0].probes.readiness = Some(probe(0, 10_000, 1));
    // Starts answering after 3.5 s.
    let script = with_probe(|kind, _, since| match kind {
        ProbeKind::Startup if since < 3500 => Outcome::Failure("refused".into()),
        _ => Outcome::Success,
    });
    let mut sim = Sim::new(p.clone(), vec![script]);
    sim.run(5_000);
    assert_eq!(
        sim.lines("probe"),
        [
            "t=0 probe startup app#1",
            "t=1000 probe startup app#1",
            "t=2000 probe startup app#1",
            "t=3000 probe startup app#1",
            "t=4000 probe startup app#1",
            // Startup published Success at 4010: readiness and liveness at once.
            "t=4010 probe liveness app#1",
            "t=4010 probe readiness app#1",
        ]
    );
    assert_eq!(
        sim.events.last().unwrap(),
        "t=4020 Ready app: Container app is ready"
    );
    assert!(sim.pod.containers()[0].started);

    // A startup probe that never succeeds kills after failureThreshold × period.
    let script = with_probe(|_, _, _| Outcome::Failure("refused".into()));
    let mut sim = Sim::new(p, vec![script]);
    sim.run(11_000);
    assert!(sim.events.contains(
        &"t=9010 Killing app: Container app failed startup probe, will be restarted".to_string()
    ));
    assert!(!sim.pod.containers()[0].started || sim.pod.containers()[0].instance == 2);
}

#[test]
fn probe_errors_are_not_counted() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.containers[0].probes.liveness = Some(probe(0, 1000, 2));
    let script = with_probe(|_, _, since| match since {
        0..1000 => Outcome::Failure("one".into()),
        1000..5000 => Outcome::Error("port not found".into()),
        _ => Outcome::Failure("two".into()),
    });
    let mut sim = Sim::new(p, vec![script]);
    sim.run(5_500);
    assert_eq!(sim.lines("term"), ["t=5010 term app#1"]);
    assert!(sim
        .events
        .contains(&"t=1010 Unhealthy app: Liveness probe errored: port not found".to_string()));
}

#[test]
fn a_period_during_a_slow_attempt_is_kept_for_after_it() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.containers[0].probes.liveness = Some(probe(0, 1000, 3));
    let mut script = with_probe(|_, _, _| Outcome::Failure("timeout".into()));
    script.probe_ms = 3000; // a hung target: every attempt lasts its timeout of 3 s
    let mut sim = Sim::new(p, vec![script]);
    sim.run(9_500);
    assert_eq!(
        sim.lines("probe liveness app#1"),
        [
            "t=0 probe liveness app#1",
            "t=3000 probe liveness app#1",
            "t=6000 probe liveness app#1"
        ]
    );
    assert_eq!(sim.lines("term"), ["t=9000 term app#1"]);
}

#[test]
fn on_pod_stop_liveness_ends_and_readiness_goes_on() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.grace = Duration::from_secs(10);
    p.containers[0].probes.liveness = Some(probe(0, 1000, 1));
    p.containers[0].probes.readiness = Some(probe(0, 1000, 1));
    let mut script = with_probe(|_, _, since| {
        if since >= 2000 {
            Outcome::Failure("shutting down".into())
        } else {
            Outcome::Success
        }
    });
    script.on_term = Some(4500);
    let mut sim = Sim::new(p, vec![script]);
    sim.stop_at = Some(Instant::from_millis(1500));
    sim.run(60_000);
    let after_stop: Vec<String> = sim
        .lines("probe")
        .into_iter()
        .filter(|l| l.as_str() >= "t=2")
        .collect();
    assert!(
        after_stop.iter().all(|l| l.contains("readiness")),
        "{after_stop:?}"
    );
    assert_eq!(after_stop.len(), 4);
    assert!(sim
        .events
        .contains(&"t=2010 NotReady app: Container app is not ready".to_string()));
    assert_eq!(
        sim.lines("kill"),
        Vec::<String>::new(),
        "never probe-killed"
    );
}

#[test]
fn post_start_blocks_running_and_its_failure_kills() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.containers[0].post_start = true;
    p.containers[0].pre_stop = true;
    p.containers[0].probes.readiness = Some(probe(0, 1000, 1));
    let mut script = forever();
    script.post_start = (Some(2000), false);
    let mut sim = Sim::new(p.clone(), vec![script]);
    sim.run(1_500);
    assert!(matches!(
        sim.pod.containers()[0].state,
        ContainerState::Waiting {
            reason: WaitingReason::ContainerCreating,
            ..
        }
    ));
    assert!(
        sim.lines("probe").is_empty(),
        "no probe before postStart ends"
    );
    sim.run(3_000);
    assert!(matches!(
        sim.pod.containers()[0].state,
        ContainerState::Running { started_at } if started_at == Instant::ZERO
    ));
    assert_eq!(sim.lines("probe")[0], "t=2000 probe readiness app#1");

    // A failing postStart: event, PostStartHookError, killed through preStop, restarted.
    let mut script = forever();
    script.post_start = (Some(100), true);
    script.pre_stop = (Some(300), false);
    let mut sim = Sim::new(p, vec![script]);
    sim.run(250);
    assert!(matches!(
        sim.pod.containers()[0].state,
        ContainerState::Waiting {
            reason: WaitingReason::PostStartHookError,
            ..
        }
    ));
    sim.run(1_000);
    assert_eq!(
        sim.log[..5],
        [
            "t=0 spawn app#1",
            "t=0 hook poststart app#1",
            "t=100 hook prestop app#1",
            "t=400 term app#1",
            "t=400 spawn app#2",
        ]
    );
    assert_eq!(
        sim.events[..2],
        [
            "t=100 FailedPostStartHook app: PostStartHook failed",
            "t=100 Killing app: FailedPostStartHook",
        ]
    );
}

#[test]
fn pre_stop_runs_before_sigterm_inside_the_grace() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.grace = Duration::from_secs(10);
    p.containers[0].pre_stop = true;
    // A failing preStop: event, then SIGTERM at once.
    let mut script = forever();
    script.pre_stop = (Some(1500), true);
    script.on_term = None;
    let mut sim = Sim::new(p.clone(), vec![script]);
    sim.stop_at = Some(Instant::from_millis(1000));
    sim.run(60_000);
    assert_eq!(
        sim.log[1..],
        [
            "t=1000 stop",
            "t=1000 hook prestop app#1",
            "t=2500 term app#1",
            // 1 whole second came off the grace of 10 s.
            "t=11500 kill app#1",
            "t=11500 finished Failed",
        ]
    );
    assert!(sim
        .events
        .contains(&"t=2500 FailedPreStopHook app: PreStopHook failed".to_string()));

    // A preStop that overruns the grace is abandoned; SIGTERM still gets 2 s.
    let mut script = forever();
    script.pre_stop = (None, false);
    script.on_term = None;
    let mut sim = Sim::new(p, vec![script]);
    sim.stop_at = Some(Instant::from_millis(1000));
    sim.run(60_000);
    assert_eq!(
        sim.log[2..],
        [
            "t=1000 hook prestop app#1",
            "t=11000 term app#1",
            "t=13000 kill app#1",
            "t=13000 finished Failed",
        ]
    );
}

#[test]
fn the_next_container_waits_for_a_sidecars_startup_probe() {
    let mut p = plan(
        RestartPolicy::Always,
        &[("side", Kind::Sidecar), ("app", Kind::Main)],
    );
    p.containers[0].probes.startup = Some(probe(0, 1000, 30));
    let script = with_probe(|_, _, since| {
        if since >= 2500 {
            Outcome::Success
        } else {
            Outcome::Failure("refused".into())
        }
    });
    let mut sim = Sim::new(p, vec![script, forever()]);
    sim.run(5_000);
    assert_eq!(
        sim.lines("spawn"),
        ["t=0 spawn side#1", "t=3010 spawn app#1"]
    );
}

#[test]
fn first_probes_spread_over_a_period_only_right_after_podvisor_starts() {
    let names: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    let kinds: Vec<(&str, Kind)> = names.iter().map(|n| (n.as_str(), Kind::Main)).collect();
    let mut p = plan(RestartPolicy::Always, &kinds);
    p.probe_jitter_seed = Some(42);
    for c in &mut p.containers {
        c.probes.readiness = Some(probe(0, 1000, 3));
    }
    let scripts = vec![runs(&[(Some(1500), 1), (None, 0)]); 20];
    let mut sim = Sim::new(p, scripts);
    sim.run(1_499);
    let first: Vec<u64> = sim
        .lines("probe readiness")
        .iter()
        .map(|l| l[2..l.find(' ').unwrap()].parse().unwrap())
        .collect();
    assert_eq!(
        first.len(),
        20 + first.iter().filter(|&&t| t >= 1000).count()
    );
    assert!(first.iter().all(|&t| t < 1500));
    let distinct: std::collections::BTreeSet<u64> = first.iter().map(|t| t / 100).collect();
    assert!(distinct.len() >= 5, "spread over the period: {first:?}");
    // The second instances start at 1.5 s, more than a period after podvisor started: no
    // jitter, probed at once.
    sim.run(1_600);
    assert_eq!(
        sim.lines("probe readiness")
            .iter()
            .filter(|l| l.starts_with("t=1500 ") && l.ends_with("#2"))
            .count(),
        20
    );
}

#[test]
fn restart_one_container_now_whatever_its_policy() {
    let mut sim = Sim::new(
        plan(
            RestartPolicy::Never,
            &[("a", Kind::Main), ("b", Kind::Main)],
        ),
        vec![forever(), forever()],
    );
    sim.run(1_000);
    sim.now = Instant::from_millis(1_000);
    sim.feed(Input::RestartContainer(0));
    sim.run(2_000);
    assert_eq!(
        sim.log,
        [
            "t=0 spawn a#1",
            "t=0 spawn b#1",
            "t=1000 term a#1",
            "t=1000 spawn a#2"
        ]
    );
    let a = &sim.pod.containers()[0];
    assert_eq!(a.restart_count, 1);
    assert!(matches!(
        a.last_state,
        Some(ContainerState::Terminated { exit_code: 143, .. })
    ));
    assert_eq!(sim.pod.containers()[1].restart_count, 0);
    assert_eq!(sim.pod.phase(), Phase::Running);
}

#[test]
fn restart_the_whole_pod_reruns_init_containers() {
    let p = plan(
        RestartPolicy::Always,
        &[
            ("init", Kind::Init),
            ("side", Kind::Sidecar),
            ("app", Kind::Main),
        ],
    );
    let mut side = forever();
    side.on_term = Some(100);
    let mut sim = Sim::new(p, vec![runs(&[(Some(50), 0)]), side, forever()]);
    sim.run(1_000);
    sim.now = Instant::from_millis(1_000);
    sim.feed(Input::RestartPod);
    sim.run(3_000);
    assert_eq!(
        sim.log,
        [
            "t=0 spawn init#1",
            "t=50 spawn side#1",
            "t=50 spawn app#1",
            "t=1000 term app#1",
            "t=1000 term side#1",
            "t=1100 spawn init#2",
            "t=1150 spawn side#2",
            "t=1150 spawn app#2",
        ]
    );
    assert!(sim
        .events
        .iter()
        .any(|e| e.starts_with("t=1000 PodRestarting pod: ")));
    assert!(sim.events.contains(&"t=1100 wipe volumes".to_string()));
    assert!(sim.pod.containers().iter().all(|c| c.restart_count == 1));
    assert!(!sim.pod.is_finished());
    assert_eq!(sim.pod.phase(), Phase::Running);
    // A stop afterwards still ends the pod.
    sim.stop_at = Some(Instant::from_millis(4_000));
    sim.run(10_000);
    assert!(sim.pod.is_finished());
}
