//! Scenario tests on a fake clock: a small simulated shell runs the effects (processes that
//! exit on schedule, or on SIGTERM after a delay, or never) and feeds the results back.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
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
}

fn runs(runs: &[(Option<u64>, i32)]) -> Script {
    Script {
        runs: runs.to_vec(),
        on_term: Some(0),
        start_fails: vec![],
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
            Effect::Event(_) => {}
            Effect::Finished(phase) => self.log.push(format!("t={t} finished {phase:?}")),
        }
    }

    /// Runs until the pod finishes or `limit` ms pass.
    fn run(&mut self, limit: u64) -> &mut Sim {
        self.feed(Input::Admit);
        while !self.pod.is_finished() {
            let next_exit = self
                .procs
                .iter()
                .filter_map(|(id, (at, st))| at.map(|a| (a, *id, *st)))
                .min_by_key(|e| (e.0, e.1));
            let deadline = self.pod.next_deadline();
            let stop = self.stop_at;
            let candidates = [next_exit.map(|e| e.0), deadline, stop];
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
            .map(|(name, kind)| ContainerPlan {
                name: name.to_string(),
                kind: *kind,
                restart: ContainerRestart {
                    policy: (*kind == Kind::Sidecar).then_some(RestartPolicy::Always),
                    rules: vec![],
                },
            })
            .collect(),
        backoff: BackoffPolicy::default(),
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
        let scripts = containers
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
                }
            })
            .collect();
        let mut sim = Sim::new(p, scripts);
        let stop = rng.next(120_000);
        sim.stop_at = Some(Instant::from_millis(stop));
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
