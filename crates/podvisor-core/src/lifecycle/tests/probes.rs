//! Conditions, probes and hooks.

use super::*;

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
    pod.step(Instant::ZERO, Input::Started(id(0, 1), Instant::ZERO));
    pod.step(
        Instant::from_millis(5),
        Input::Exited(id(0, 1), ExitStatus::Code(0).into()),
    );
    pod.step(
        Instant::from_millis(6),
        Input::Started(id(1, 1), Instant::from_millis(6)),
    );
    pod.step(
        Instant::from_millis(7),
        Input::Started(id(2, 1), Instant::from_millis(7)),
    );
    assert_eq!(
        show(&pod)[1..],
        ["Initialized=true ", "ContainersReady=true ", "Ready=true "]
    );
    assert_eq!(pod.phase(), Phase::Running);
    pod.step(
        Instant::from_millis(9),
        Input::Exited(id(2, 1), ExitStatus::Code(0).into()),
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

#[test]
fn readiness_gates_hold_ready_until_their_conditions_are_true() {
    let mut p = plan(RestartPolicy::Never, &[("app", Kind::Main)]);
    p.readiness_gates = vec!["example.com/lb".into(), "example.com/dns".into()];
    let mut pod = Pod::new(p);
    pod.step(Instant::ZERO, Input::Admit);
    let ready = |pod: &Pod, others: &[(&str, &str)]| {
        let others: Vec<(String, String)> = (others.iter())
            .map(|(k, s)| (k.to_string(), s.to_string()))
            .collect();
        let all = pod.conditions_given(&others);
        let show = |c: &Condition| {
            let why = c.message.clone().or(c.reason.clone()).unwrap_or_default();
            format!("{}={} {why}", c.kind, c.status)
        };
        [show(&all[2]), show(&all[3])]
    };
    // Containers not ready: Ready says so, as ContainersReady does; the gates come after.
    assert_eq!(
        ready(&pod, &[])[1],
        "Ready=false containers with unready status: [app]"
    );
    let app = InstanceId {
        container: 0,
        instance: 1,
    };
    pod.step(Instant::ZERO, Input::Started(app, Instant::ZERO));
    assert_eq!(
        ready(&pod, &[]),
        [
            "ContainersReady=true ".to_string(),
            "Ready=false corresponding condition of pod readiness gate \"example.com/lb\" does not exist., corresponding condition of pod readiness gate \"example.com/dns\" does not exist.".to_string(),
        ]
    );
    let half = [("example.com/lb", "True"), ("example.com/dns", "Unknown")];
    assert_eq!(
        ready(&pod, &half)[1],
        "Ready=false the status of pod readiness gate \"example.com/dns\" is not \"True\", but Unknown"
    );
    assert_eq!(
        ready(&pod, &half[..1])[1].split(' ').next(),
        Some("Ready=false")
    );
    let all = [
        ("example.com/dns", "True"),
        ("example.com/lb", "True"),
        ("other", "False"),
    ];
    assert_eq!(ready(&pod, &all)[1], "Ready=true ");
    // The reason is ReadinessGatesNotReady.
    let others = vec![("example.com/lb".to_string(), "False".to_string())];
    let r = &pod.conditions_given(&others)[3];
    assert_eq!(r.reason.as_deref(), Some("ReadinessGatesNotReady"));
    // A pod that ended is not Ready, gates or not.
    pod.step(
        Instant::from_millis(9),
        Input::Exited(app, ExitStatus::Code(0).into()),
    );
    assert_eq!(ready(&pod, &all)[1], "Ready=false PodCompleted");
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
        .contains(&"t=1010 Unhealthy app: Liveness probe errored and resulted in unknown state: port not found".to_string()));
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
fn a_sidecar_whose_start_failed_still_holds_back_the_next_container() {
    // A failed start counts as a restart, but the sidecar has not started: what follows it
    // waits for its next instance's startup probe, as the kubelet waits.
    let mut p = plan(
        RestartPolicy::Always,
        &[("side", Kind::Sidecar), ("app", Kind::Main)],
    );
    p.containers[0].probes.startup = Some(probe(0, 1000, 30));
    let mut script = with_probe(|_, _, since| {
        if since >= 2500 {
            Outcome::Success
        } else {
            Outcome::Failure("refused".into())
        }
    });
    script.start_fails = vec![1];
    let mut sim = Sim::new(p.clone(), vec![script.clone(), forever()]);
    sim.run(5_000);
    assert_eq!(
        sim.lines("spawn"),
        ["t=0 spawn side#1", "t=0 spawn side#2", "t=3010 spawn app#1"]
    );
    // The same after podvisor restarts from a record saved before side has started: the
    // record keeps "not started" (its restart count does not say it started).
    let mut sim = Sim::new(p.clone(), vec![script.clone(), forever()]);
    sim.run(1_500);
    sim.now = Instant::from_millis(1_500);
    let record = saved(&sim);
    assert!(!record.containers[0].ever_started);
    let mut next = Sim::new(p, vec![script, forever()]);
    next.pod = Pod::resume(next.pod.plan().clone(), &record).unwrap();
    next.now = Instant::from_millis(1_500);
    next.run(3_000);
    assert_eq!(next.lines("spawn"), ["t=1500 spawn side#3"]);
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
fn a_start_reported_after_its_batch_keeps_its_own_time_and_probe_phase() {
    // Three containers started one after the other at 1.7, 1.8 and 1.9 s (more than a period
    // after admission: no jitter), reported to the core together at 2 s, as a shell reports
    // a batch of starts once it is made.
    let mut p = plan(
        RestartPolicy::Always,
        &[("a", Kind::Main), ("b", Kind::Main), ("c", Kind::Main)],
    );
    p.probe_jitter_seed = Some(42);
    for c in &mut p.containers {
        c.probes.readiness = Some(probe(0, 1000, 3));
    }
    let mut pod = Pod::new(p);
    pod.step(Instant::ZERO, Input::Admit);
    let id = |c| InstanceId {
        container: c,
        instance: 1,
    };
    // Each probe asked for is answered at once (a success), and noted: (container, due).
    let mut probes = Vec::new();
    let mut step = |pod: &mut Pod, now: Instant, input: Input| {
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            for f in pod.step(now, input) {
                if let Effect::RunProbe(id, kind, due) = f {
                    probes.push((id.container, due.since_origin().as_millis()));
                    inputs.push(Input::Probed(id, kind, Outcome::Success));
                }
            }
        }
    };
    let now = Instant::from_millis(2_000);
    for (c, at) in [(0, 1_700), (1, 1_800), (2, 1_900)] {
        step(
            &mut pod,
            now,
            Input::Started(id(c), Instant::from_millis(at)),
        );
    }
    let running_since = |c: &ContainerStatus| match c.state {
        ContainerState::Running { started_at } => Some(started_at),
        _ => None,
    };
    let started: Vec<Option<Instant>> = pod.containers().iter().map(running_since).collect();
    assert_eq!(
        started,
        [1_700, 1_800, 1_900].map(|t| Some(Instant::from_millis(t)))
    );
    // Each first probe was due at its own start; the next ones keep those phases.
    let mut t = 2_000;
    while t <= 3_000 {
        if pod
            .next_deadline()
            .is_some_and(|d| d <= Instant::from_millis(t))
        {
            step(&mut pod, Instant::from_millis(t), Input::Tick);
        }
        t += 1;
    }
    let due: Vec<(usize, u128)> = probes.iter().copied().filter(|p| p.1 > 2_000).collect();
    assert_eq!(due, [(0, 2_700), (1, 2_800), (2, 2_900)], "{probes:?}");
    // A time after the step's is taken as the step's.
    let mut late = Pod::new(plan(RestartPolicy::Always, &[("a", Kind::Main)]));
    late.step(Instant::ZERO, Input::Admit);
    late.step(
        Instant::from_millis(10),
        Input::Started(id(0), Instant::from_millis(99)),
    );
    assert_eq!(
        running_since(&late.containers()[0]),
        Some(Instant::from_millis(10))
    );
}
