//! Live restore: containers that outlived the run before are taken over, their exits while
//! podvisor was away recorded at their own times, and a lost one reported as the kubelet does.

use super::*;
use crate::lifecycle::Survivor;

fn readiness(period: u64) -> ProbePlan {
    ProbePlan {
        timing: ProbeTiming {
            initial_delay: ms(0),
            period: ms(period),
            timeout: ms(1000),
            success_threshold: 1,
            failure_threshold: 1,
        },
        grace: None,
    }
}

/// An init container, a sidecar with a readiness probe and an app, run for `until` ms and
/// saved: the record a run killed at that time leaves.
fn saved_at(until: u64, app: Script) -> (PodPlan, crate::record::PodRecord) {
    let mut p = plan(
        RestartPolicy::Always,
        &[
            ("init", Kind::Init),
            ("side", Kind::Sidecar),
            ("app", Kind::Main),
        ],
    );
    p.containers[1].probes.readiness = Some(readiness(1_000));
    p.containers[2].post_start = true;
    let mut sim = Sim::new(p.clone(), vec![runs(&[(Some(10), 0)]), forever(), app]);
    sim.run(until);
    sim.now = Instant::from_millis(until);
    (p, saved(&sim))
}

/// The next run at `at`, with `survivors`; processes that run on are put back in the sim.
fn adopt(
    p: PodPlan,
    record: &crate::record::PodRecord,
    survivors: &[(&str, Survivor)],
    at: u64,
) -> Sim {
    let found: BTreeMap<String, Survivor> = survivors
        .iter()
        .map(|(n, s)| (n.to_string(), s.clone()))
        .collect();
    let scripts = vec![runs(&[(Some(10), 0)]), forever(), forever()];
    let mut next = Sim::new(p.clone(), scripts);
    next.pod = Pod::resume_adopting(p, record, &found).unwrap();
    next.now = Instant::from_millis(at);
    for (i, c) in next.pod.containers().iter().enumerate() {
        if let ContainerState::Running { started_at } = c.state {
            let id = InstanceId {
                container: i,
                instance: c.instance,
            };
            let running = survivors
                .iter()
                .any(|(n, s)| *n == c.name && *s == Survivor::Running);
            if running {
                next.procs.insert(id, (None, ExitStatus::Code(0)));
                next.started.insert(id, started_at);
            }
        }
    }
    next
}

#[test]
fn running_containers_are_taken_over_without_a_start() {
    let (p, record) = saved_at(5_000, forever());
    let mut next = adopt(
        p,
        &record,
        &[("side", Survivor::Running), ("app", Survivor::Running)],
        7_000,
    );
    next.run(9_000);
    // Nothing spawned, no postStart again, restart counts unchanged.
    assert!(next.lines("spawn").is_empty(), "{:#?}", next.log);
    assert!(next.lines("hook").is_empty(), "{:#?}", next.log);
    let adopted: Vec<&String> = next
        .events
        .iter()
        .filter(|e| e.contains("Adopted"))
        .collect();
    assert_eq!(adopted.len(), 2, "{:#?}", next.events);
    assert!(adopted[0].starts_with(
        "t=7000 Adopted side: Took over container side from the previous podvisor run: running for 6.99s"
    ), "{adopted:#?}");
    for c in next.pod.containers() {
        assert_eq!(c.restart_count, 0, "{}", c.name);
    }
    // The probe starts again at once and the sidecar is ready within one period.
    assert_eq!(
        next.lines("probe readiness side")[0],
        "t=7000 probe readiness side#1"
    );
    assert!(next.pod.containers()[1].ready);
    assert!(matches!(
        next.pod.containers()[1].state,
        ContainerState::Running { started_at } if started_at == Instant::from_millis(10)
    ));
    assert_eq!(next.pod.phase(), Phase::Running);
}

#[test]
fn an_exit_while_away_counts_from_its_own_finish_time() {
    // app crashed once already (restarted at once, as a first crash is): its next restart
    // waits out the first backoff step.
    let (p, record) = saved_at(5_000, runs(&[(Some(100), 1), (None, 0)]));
    let exit = Exit {
        status: ExitStatus::Code(3),
        oom_killed: false,
        message: Some("told before it ended".into()),
    };
    let finished_at = Instant::from_millis(6_000);
    let mut next = adopt(
        p,
        &record,
        &[
            ("side", Survivor::Running),
            ("app", Survivor::Exited { exit, finished_at }),
        ],
        8_000,
    );
    next.run(30_000);
    let app = &next.pod.containers()[2];
    // Restarted 10 s (the backoff) after it really finished, not after the adoption: at
    // t=16000.
    assert_eq!(
        next.lines("spawn app"),
        ["t=16000 spawn app#3"],
        "{:#?}",
        next.log
    );
    assert_eq!(app.restart_count, 2);
    match &app.last_state {
        Some(ContainerState::Terminated {
            exit_code,
            reason,
            finished_at: f,
            started_at,
            message,
            ..
        }) => {
            assert_eq!(*exit_code, 3);
            assert_eq!(*reason, TerminatedReason::Error);
            assert_eq!(message.as_deref(), Some("told before it ended"));
            assert_eq!(*f, finished_at);
            assert_eq!(*started_at, Some(Instant::from_millis(110)));
        }
        other => panic!("{other:?}"),
    }
    assert!(next.lines("spawn side").is_empty());
}

#[test]
fn a_container_whose_keeper_died_is_lost_and_restarted() {
    let (p, record) = saved_at(5_000, forever());
    let mut next = adopt(
        p,
        &record,
        &[("side", Survivor::Running), ("app", Survivor::Running)],
        7_000,
    );
    next.feed(Input::Admit);
    let app = InstanceId {
        container: 2,
        instance: 1,
    };
    next.procs.remove(&app);
    next.now = Instant::from_millis(7_500);
    next.feed(Input::Lost(
        app,
        "its keeper ended without recording an exit".into(),
    ));
    next.run(20_000);
    let c = &next.pod.containers()[2];
    assert_eq!(c.restart_count, 1);
    assert!(
        matches!(
            &c.last_state,
            Some(ContainerState::Terminated {
                exit_code: 137,
                reason: TerminatedReason::ContainerStatusUnknown,
                message: Some(m),
                ..
            }) if m == "The container could not be located: its keeper ended without recording an exit"
        ),
        "{:?}",
        c.last_state
    );
    assert!(
        next.events.iter().any(|e| e.starts_with(
            "t=7500 ContainerStatusUnknown app: Container app: The container could not be located"
        )),
        "{:#?}",
        next.events
    );
}

#[test]
fn containers_not_found_are_lost_as_before() {
    let (p, record) = saved_at(5_000, forever());
    let mut next = adopt(p, &record, &[("side", Survivor::Running)], 7_000);
    next.run(9_000);
    assert_eq!(
        next.lines("spawn"),
        ["t=7000 spawn app#2"],
        "{:#?}",
        next.log
    );
    assert_eq!(next.pod.containers()[1].restart_count, 0);
    assert_eq!(next.pod.containers()[2].restart_count, 1);
}

#[test]
fn a_lost_container_is_told_when_the_pod_is_taken_up() {
    let (p, record) = saved_at(5_000, forever());
    let mut next = adopt(p, &record, &[("side", Survivor::Running)], 7_000);
    next.run(9_000);
    let lost: Vec<_> = (next.events.iter())
        .filter(|e| e.contains(" ContainerStatusUnknown "))
        .collect();
    assert_eq!(
        lost,
        ["t=7000 ContainerStatusUnknown app: Container app: The container could not be located when podvisor resumed the pod: it was running when the previous run ended"],
        "{:#?}",
        next.events
    );
}

#[test]
fn instance_numbers_skipped_for_a_stray_count_no_restart() {
    // The app had not started when the record was saved; a stray took instance 1 (the shell
    // killed it): the app starts as instance 2, its first start, restartCount 0.
    let (p, mut record) = saved_at(0, forever());
    let app = record
        .containers
        .iter_mut()
        .find(|c| c.name == "app")
        .unwrap();
    assert_eq!(app.instance, 0, "{app:?}");
    app.instance = 1;
    app.skipped = 1;
    let mut next = adopt(p, &record, &[], 1_000);
    next.run(5_000);
    assert_eq!(
        next.lines("spawn app"),
        ["t=1010 spawn app#2"],
        "{:#?}",
        next.log
    );
    assert_eq!(next.pod.containers()[2].restart_count, 0);
}
