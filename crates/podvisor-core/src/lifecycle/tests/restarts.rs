//! Starts, restarts, backoff, policies, init containers and sidecars.

use super::*;

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
fn exit_code_rules_decide_first() {
    let mut p = plan(RestartPolicy::Never, &[("app", Kind::Main)]);
    p.containers[0].restart = ContainerRestart {
        policy: Some(RestartPolicy::Never),
        rules: vec![RestartRule {
            action: RuleAction::Restart,
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
    pod.step(Instant::ZERO, Input::Started(first, Instant::ZERO));
    pod.step(
        Instant::from_millis(10),
        Input::Exited(first, ExitStatus::Code(1).into()),
    );
    assert_eq!(pod.containers()[0].instance, 2);
    // A second exit report for instance 1 changes nothing.
    let fx = pod.step(
        Instant::from_millis(20),
        Input::Exited(first, ExitStatus::Code(1).into()),
    );
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(pod.containers()[0].restart_count, 1);
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
fn a_resize_that_requires_a_restart_restarts_at_once_with_the_kubelets_message() {
    let mut sim = Sim::new(
        plan(RestartPolicy::Always, &[("a", Kind::Main)]),
        vec![forever()],
    );
    sim.run(1_000);
    sim.now = Instant::from_millis(1_000);
    sim.feed(Input::ResizeRestart(0));
    sim.run(2_000);
    assert_eq!(
        sim.log,
        ["t=0 spawn a#1", "t=1000 term a#1", "t=1000 spawn a#2"]
    );
    assert!(
        sim.events
            .iter()
            .any(|e| e == "t=1000 Killing a: Container a resize requires restart"),
        "{:?}",
        sim.events
    );
    assert_eq!(sim.pod.containers()[0].restart_count, 1);
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

#[test]
fn an_exits_termination_message_is_its_terminated_states_and_stays_in_last_state() {
    let mut pod = Pod::new(plan(RestartPolicy::Always, &[("app", Kind::Main)]));
    pod.step(Instant::ZERO, Input::Admit);
    let id = |instance| InstanceId {
        container: 0,
        instance,
    };
    pod.step(Instant::ZERO, Input::Started(id(1), Instant::ZERO));
    let exit = |message: &str| Exit {
        status: ExitStatus::Code(2),
        oom_killed: false,
        message: Some(message.to_string()),
    };
    pod.step(
        Instant::from_millis(50),
        Input::Exited(id(1), exit("no config\n")),
    );
    let message_of = |s: Option<&ContainerState>| match s {
        Some(ContainerState::Terminated { message, .. }) => message.clone(),
        other => panic!("{other:?}"),
    };
    // Restarted at once (a first crash is): the message is the last state's, and stays it
    // while the next instance runs.
    let c = &pod.containers()[0];
    assert_eq!(
        message_of(c.last_state.as_ref()),
        Some("no config\n".into())
    );
    pod.step(
        Instant::from_millis(60),
        Input::Started(id(2), Instant::from_millis(60)),
    );
    let c = &pod.containers()[0];
    assert_eq!(
        message_of(c.last_state.as_ref()),
        Some("no config\n".into())
    );
    // An empty message is none.
    pod.step(Instant::from_millis(90), Input::Exited(id(2), exit("")));
    assert_eq!(message_of(pod.containers()[0].last_state.as_ref()), None);
}

#[test]
fn an_oom_kill_is_oomkilled_137_and_restarts_by_policy_with_backoff() {
    let mut pod = Pod::new(plan(RestartPolicy::OnFailure, &[("app", Kind::Main)]));
    pod.step(Instant::ZERO, Input::Admit);
    let first = InstanceId {
        container: 0,
        instance: 1,
    };
    pod.step(Instant::ZERO, Input::Started(first, Instant::ZERO));
    let oom = Exit {
        status: ExitStatus::Signal(9),
        oom_killed: true,
        message: None,
    };
    let fx = pod.step(Instant::from_millis(50), Input::Exited(first, oom.clone()));
    let event = fx
        .iter()
        .find_map(|e| match e {
            Effect::Event(ev) if ev.reason == "OOMKilled" => Some(ev.clone()),
            _ => None,
        })
        .expect("an OOMKilled event");
    assert_eq!(event.exit_code, Some(137));
    assert_eq!(event.kind, EventType::Warning);
    let c = &pod.containers()[0];
    assert!(
        matches!(
            c.last_state.as_ref().or(Some(&c.state)),
            Some(ContainerState::Terminated {
                exit_code: 137,
                reason: TerminatedReason::OOMKilled,
                ..
            })
        ),
        "{:?} / {:?}",
        c.state,
        c.last_state
    );
    // Counted as any failure: restarted at once (first restart), then backed off.
    assert_eq!(c.restart_count, 1);
    let second = InstanceId {
        container: 0,
        instance: 2,
    };
    pod.step(
        Instant::from_millis(60),
        Input::Started(second, Instant::from_millis(60)),
    );
    pod.step(Instant::from_millis(100), Input::Exited(second, oom));
    assert!(matches!(
        pod.containers()[0].state,
        ContainerState::Waiting {
            reason: WaitingReason::CrashLoopBackOff,
            ..
        }
    ));
}

#[test]
fn an_eviction_kills_with_no_grace_and_no_pre_stop_and_fails_the_pod() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.containers[0].pre_stop = true;
    p.grace = Duration::from_secs(30);
    let mut pod = Pod::new(p);
    pod.step(Instant::ZERO, Input::Admit);
    let first = InstanceId {
        container: 0,
        instance: 1,
    };
    pod.step(Instant::ZERO, Input::Started(first, Instant::ZERO));
    let message = "Usage of EmptyDir volume \"cache\" exceeds the limit \"1Mi\". ".to_string();
    let fx = pod.step(Instant::from_millis(1_000), Input::Evict(message.clone()));
    assert!(
        fx.iter().any(|e| matches!(e, Effect::Event(ev) if ev.reason == "Evicted" && ev.message == message && ev.kind == EventType::Warning)),
        "{fx:?}"
    );
    assert!(
        !fx.iter().any(|e| matches!(e, Effect::RunHook(..))),
        "no preStop: {fx:?}"
    );
    assert!(fx.contains(&Effect::Signal(first, Signal::Term)), "{fx:?}");
    // SIGKILL after the 2 s floor, not the pod's 30 s.
    assert_eq!(pod.next_deadline(), Some(Instant::from_millis(3_000)));
    let fx = pod.step(Instant::from_millis(3_000), Input::Tick);
    assert!(fx.contains(&Effect::Signal(first, Signal::Kill)), "{fx:?}");
    let fx = pod.step(
        Instant::from_millis(3_010),
        Input::Exited(first, ExitStatus::Signal(9).into()),
    );
    assert!(fx.contains(&Effect::Finished(Phase::Failed)), "{fx:?}");
    assert_eq!(pod.failure(), Some(("Evicted", message.as_str())));
    assert_eq!(pod.containers()[0].restart_count, 0, "not restarted");
}
