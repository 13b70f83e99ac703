//! Container restart rules (KEP-5307) and in-place restarts of every container (KEP-5532).

use super::*;
use crate::escalation::PodRestartPolicy;

fn rule(action: RuleAction, codes: ExitCodes) -> RestartRule {
    RestartRule {
        action,
        exit_codes: codes,
    }
}

/// `policy` plus `rules` on container `i`.
fn with_rules(p: &mut PodPlan, i: usize, policy: RestartPolicy, rules: Vec<RestartRule>) {
    p.containers[i].restart = ContainerRestart {
        policy: Some(policy),
        rules,
    };
}

/// The e2e shape: an init container, a sidecar, and a main container whose exit code 88
/// restarts every container.
fn e2e_pod(pod_policy: RestartPolicy) -> PodPlan {
    let mut p = plan(
        pod_policy,
        &[
            ("setup", Kind::Init),
            ("side", Kind::Sidecar),
            ("app", Kind::Main),
        ],
    );
    with_rules(
        &mut p,
        2,
        RestartPolicy::Never,
        vec![rule(
            RuleAction::RestartAllContainers,
            ExitCodes::In(vec![88]),
        )],
    );
    p.containers[1].pre_stop = true;
    p.containers[2].pre_stop = true;
    p
}

fn condition(pod: &Pod) -> Option<Condition> {
    pod.conditions()
        .into_iter()
        .find(|c| c.kind == "AllContainersRestarting")
}

#[test]
fn exit_88_restarts_every_container_in_place() {
    let scripts = vec![
        runs(&[(Some(10), 0)]),
        forever(),
        runs(&[(Some(100), 88), (None, 0)]),
    ];
    let mut sim = Sim::new(e2e_pod(RestartPolicy::Never), scripts);
    // The sidecar takes 500 ms to go after SIGTERM: the teardown is seen half-way.
    sim.scripts[1].on_term = Some(500);
    assert_eq!(
        condition(&sim.pod),
        Some(Condition {
            kind: "AllContainersRestarting",
            status: false,
            reason: None,
            message: None
        })
    );
    sim.run(300);
    assert!(sim.pod.restarting_all());
    assert_eq!(
        condition(&sim.pod),
        Some(Condition {
            kind: "AllContainersRestarting",
            status: true,
            reason: Some("RestartAllContainersStarted".into()),
            message: Some("container exited with restart policy rule".into()),
        })
    );
    sim.run(5_000);
    assert_eq!(
        sim.log,
        [
            "t=0 spawn setup#1",
            "t=10 spawn side#1",
            "t=10 spawn app#1",
            // No preStop, grace 0: SIGTERM at once, SIGKILL at the 2 s floor if needed.
            "t=110 term side#1",
            "t=610 spawn setup#2",
            "t=620 spawn side#2",
            "t=620 spawn app#2",
        ]
    );
    assert!(!sim.pod.restarting_all());
    assert_eq!(condition(&sim.pod).map(|c| c.status), Some(false));
    // Every container that had run counts one restart more; their last states are kept.
    let counts: Vec<u32> = sim
        .pod
        .containers()
        .iter()
        .map(|c| c.restart_count)
        .collect();
    assert_eq!(counts, [1, 1, 1]);
    let app = &sim.pod.containers()[2];
    assert!(matches!(
        app.last_state,
        Some(ContainerState::Terminated { exit_code: 88, .. })
    ));
    assert_eq!(sim.pod.restarts_all(), 1);
    assert_eq!(sim.pod.pod_restarts(), 0);
    // Volumes are kept: no wipe.
    assert!(
        !sim.events.iter().any(|e| e.contains("wipe")),
        "{:#?}",
        sim.events
    );
    let restarting: Vec<&String> = sim
        .events
        .iter()
        .filter(|e| e.contains("RestartingAllContainers"))
        .collect();
    assert_eq!(restarting.len(), 1);
    assert!(
        restarting[0].starts_with(
            "t=110 RestartingAllContainers pod: Container app exited with code 88, matching its \
             restartPolicyRules[0] (RestartAllContainers)"
        ),
        "{restarting:?}"
    );
    assert!(sim
        .events
        .iter()
        .any(|e| e == "t=110 Killing side: Stopping container side to restart all containers"));
}

#[test]
fn the_pod_is_pending_while_it_initializes_again() {
    let scripts = vec![
        runs(&[(Some(10), 0), (Some(1_000), 0)]),
        forever(),
        runs(&[(Some(100), 88), (None, 0)]),
    ];
    let mut sim = Sim::new(e2e_pod(RestartPolicy::Always), scripts);
    sim.run(50);
    assert_eq!(sim.pod.phase(), Phase::Running);
    sim.run(500);
    // setup#2 runs from t=110 to t=1110.
    assert_eq!(sim.pod.phase(), Phase::Pending);
    let init = sim
        .pod
        .conditions()
        .into_iter()
        .find(|c| c.kind == "Initialized");
    // Once the regular containers have run, Initialized stays True (KEP-5532).
    assert_eq!(init.map(|c| c.status), Some(true));
    sim.run(2_000);
    assert_eq!(sim.pod.phase(), Phase::Running);
}

#[test]
fn repeated_restarts_of_everything_back_off() {
    let scripts = vec![runs(&[(Some(10), 0)]), forever(), runs(&[(Some(100), 88)])];
    let mut sim = Sim::new(e2e_pod(RestartPolicy::Always), scripts);
    sim.run(40_000);
    assert_eq!(
        sim.lines("spawn app"),
        [
            "t=10 spawn app#1",
            // The first restart of everything is at once…
            "t=120 spawn app#2",
            // …then the trigger's CrashLoopBackOff spaces them: 10 s, then 20 s.
            "t=10230 spawn app#3",
            "t=30340 spawn app#4",
        ]
    );
    assert_eq!(sim.lines("backoff app").len(), 3);
    assert_eq!(sim.pod.restarts_all(), 3);
}

#[test]
fn under_never_an_init_container_failing_after_the_restart_fails_the_pod() {
    let scripts = vec![
        runs(&[(Some(10), 0), (Some(10), 1)]),
        forever(),
        runs(&[(Some(100), 88)]),
    ];
    let mut sim = Sim::new(e2e_pod(RestartPolicy::Never), scripts);
    sim.run(10_000);
    assert_eq!(
        sim.lines("spawn"),
        [
            "t=0 spawn setup#1",
            "t=10 spawn side#1",
            "t=10 spawn app#1",
            "t=110 spawn setup#2",
        ]
    );
    assert_eq!(sim.lines("finished"), ["t=120 finished Failed"]);
    assert_eq!(
        condition(&sim.pod).and_then(|c| c.reason),
        Some("PodFailed".into())
    );
}

#[test]
fn not_in_rules_restart_on_any_other_code() {
    let mut p = plan(RestartPolicy::Never, &[("app", Kind::Main)]);
    with_rules(
        &mut p,
        0,
        RestartPolicy::Never,
        vec![rule(RuleAction::Restart, ExitCodes::NotIn(vec![0]))],
    );
    let mut sim = Sim::new(p, vec![runs(&[(Some(10), 3), (Some(10), 0)])]);
    sim.run(60_000);
    assert_eq!(sim.lines("spawn"), ["t=0 spawn app#1", "t=10 spawn app#2"]);
    assert_eq!(sim.lines("finished"), ["t=20 finished Succeeded"]);
    // No RestartAllContainers rule: no condition.
    assert_eq!(condition(&sim.pod), None);
}

#[test]
fn init_container_rules_restart_it_until_an_exit_they_do_not_cover() {
    // restartPolicy Never on the init container, Restart on 42: 42 restarts it, 0 completes it.
    let mut p = plan(
        RestartPolicy::Always,
        &[("fetch", Kind::Init), ("app", Kind::Main)],
    );
    with_rules(
        &mut p,
        0,
        RestartPolicy::Never,
        vec![rule(RuleAction::Restart, ExitCodes::In(vec![42]))],
    );
    let scripts = || vec![runs(&[(Some(10), 42), (Some(10), 0)]), forever()];
    let mut sim = Sim::new(p.clone(), scripts());
    sim.run(1_000);
    assert_eq!(
        sim.lines("spawn"),
        [
            "t=0 spawn fetch#1",
            "t=10 spawn fetch#2",
            "t=20 spawn app#1"
        ]
    );
    // An exit the rules do not cover, with the container's own Never: the pod fails, even
    // though the pod's policy is Always.
    let mut sim = Sim::new(p, vec![runs(&[(Some(10), 42), (Some(10), 1)]), forever()]);
    sim.run(1_000);
    assert_eq!(sim.lines("finished"), ["t=20 finished Failed"]);
}

#[test]
fn an_init_container_rule_can_restart_everything() {
    let mut p = plan(
        RestartPolicy::Always,
        &[
            ("one", Kind::Init),
            ("two", Kind::Init),
            ("app", Kind::Main),
        ],
    );
    with_rules(
        &mut p,
        1,
        RestartPolicy::OnFailure,
        vec![rule(
            RuleAction::RestartAllContainers,
            ExitCodes::In(vec![7]),
        )],
    );
    let scripts = vec![
        runs(&[(Some(10), 0)]),
        runs(&[(Some(10), 7), (Some(10), 0)]),
        forever(),
    ];
    let mut sim = Sim::new(p, scripts);
    sim.run(1_000);
    assert_eq!(
        sim.lines("spawn"),
        [
            "t=0 spawn one#1",
            "t=10 spawn two#1",
            // two's 7 restarts everything: one runs again first.
            "t=20 spawn one#2",
            "t=30 spawn two#2",
            "t=40 spawn app#1",
        ]
    );
    let counts: Vec<u32> = sim
        .pod
        .containers()
        .iter()
        .map(|c| c.restart_count)
        .collect();
    // app had never run: nothing to count.
    assert_eq!(counts, [1, 1, 0]);
}

#[test]
fn a_sidecar_rule_restarts_everything() {
    let mut p = plan(
        RestartPolicy::Never,
        &[("side", Kind::Sidecar), ("app", Kind::Main)],
    );
    with_rules(
        &mut p,
        0,
        RestartPolicy::Always,
        vec![rule(
            RuleAction::RestartAllContainers,
            ExitCodes::In(vec![3]),
        )],
    );
    let scripts = vec![runs(&[(Some(50), 3), (None, 0)]), runs(&[(Some(1_000), 0)])];
    let mut sim = Sim::new(p, scripts);
    sim.run(10_000);
    assert_eq!(
        sim.log[..4],
        [
            "t=0 spawn side#1",
            "t=0 spawn app#1",
            "t=50 term app#1",
            "t=50 spawn side#2",
        ]
    );
    // app, killed by the teardown, starts again although it is Never and had not exited.
    assert_eq!(
        sim.lines("spawn app"),
        ["t=0 spawn app#1", "t=50 spawn app#2"]
    );
    assert_eq!(sim.lines("finished"), ["t=1050 finished Succeeded"]);
}

#[test]
fn a_stop_during_the_teardown_ends_it() {
    let scripts = vec![runs(&[(Some(10), 0)]), forever(), runs(&[(Some(100), 88)])];
    let mut sim = Sim::new(e2e_pod(RestartPolicy::Never), scripts);
    sim.scripts[1].on_term = None;
    sim.stop_at = Some(Instant::from_millis(500));
    sim.run(10_000);
    assert!(!sim.pod.restarting_all());
    // The sidecar ignores SIGTERM: SIGKILL at the 2 s floor; nothing starts again.
    assert_eq!(
        sim.log[3..],
        [
            "t=110 term side#1",
            "t=500 stop",
            "t=2110 kill side#1",
            "t=2110 finished Failed",
        ]
    );
}

#[test]
fn restarts_of_everything_count_towards_pod_restart_escalation() {
    let mut p = e2e_pod(RestartPolicy::Always);
    p.backoff = BackoffPolicy::new(ms(100), ms(400));
    p.pod_restart = Some(PodRestartPolicy {
        after_container_restarts: 3,
        within: Duration::from_secs(60),
        max_pod_restarts: 1,
    });
    let scripts = vec![runs(&[(Some(10), 0)]), forever(), runs(&[(Some(100), 88)])];
    let mut sim = Sim::new(p, scripts);
    sim.run(60_000);
    // Three restarts of everything in the window, then the next exit escalates to a
    // whole-pod restart (volumes wiped); three more, and the next escalation gives up.
    let kinds: Vec<&str> = sim
        .events
        .iter()
        .filter_map(|e| e.split_whitespace().nth(1))
        .filter(|r| ["RestartingAllContainers", "PodRestarting", "GaveUp"].contains(r))
        .collect();
    assert_eq!(
        kinds,
        [
            "RestartingAllContainers",
            "RestartingAllContainers",
            "RestartingAllContainers",
            "PodRestarting",
            "RestartingAllContainers",
            "RestartingAllContainers",
            "RestartingAllContainers",
            "GaveUp"
        ],
        "{:#?}",
        sim.events
    );
    assert_eq!(sim.lines("finished").len(), 1);
}

#[test]
fn a_run_that_died_during_the_teardown_finishes_the_restart() {
    let p = e2e_pod(RestartPolicy::Never);
    let scripts = || {
        vec![
            runs(&[(Some(10), 0)]),
            forever(),
            runs(&[(Some(100), 88), (None, 0)]),
        ]
    };
    let mut sim = Sim::new(p.clone(), scripts());
    sim.scripts[1].on_term = None;
    sim.run(1_000);
    sim.now = Instant::from_millis(1_000);
    assert!(sim.pod.restarting_all());
    let record = saved(&sim);
    assert!(record.restarting_all);
    assert_eq!(record.restarts_all, 1);

    let mut next = Sim::new(p, scripts());
    next.pod = Pod::resume(next.pod.plan().clone(), &record).unwrap();
    next.now = Instant::from_millis(1_100);
    next.run(3_000);
    assert_eq!(
        next.lines("spawn"),
        [
            "t=1100 spawn setup#2",
            "t=1110 spawn side#2",
            "t=1110 spawn app#2"
        ]
    );
    assert_eq!(next.pod.restarts_all(), 1);
    let counts: Vec<u32> = next
        .pod
        .containers()
        .iter()
        .map(|c| c.restart_count)
        .collect();
    assert_eq!(counts, [1, 1, 1]);
}
