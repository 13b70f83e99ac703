//! Staged instrumentation, verdicts, whole-pod restarts and giving up.

use super::*;
use crate::escalation::PodRestartPolicy;
use crate::stage::{StagePolicy, Verdict};

/// A pod whose containers are all staged with `policy`, crash-looping on a short backoff.
fn staged(containers: &[(&str, Kind)], policy: StagePolicy, verdict_after: u64) -> PodPlan {
    let mut p = plan(RestartPolicy::Always, containers);
    p.backoff = BackoffPolicy::new(ms(100), ms(400));
    for c in &mut p.containers {
        c.staged = true;
    }
    p.staging = Some(Staging {
        policy,
        verdict_after: ms(verdict_after),
    });
    p
}

fn stage_names(sim: &Sim, container: &str) -> Vec<&'static str> {
    sim.stages
        .iter()
        .filter(|(n, _)| n.starts_with(&format!("{container}#")))
        .map(|(_, s)| s.map_or("-", |s| s.as_str()))
        .collect()
}

fn events(sim: &Sim, reason: &str) -> Vec<String> {
    sim.events
        .iter()
        .filter(|e| e.split_whitespace().nth(1) == Some(reason))
        .cloned()
        .collect()
}

#[test]
fn each_start_runs_in_the_stage_its_restart_count_gives() {
    let mut sim = Sim::new(
        staged(&[("app", Kind::Main)], StagePolicy::default(), 600_000),
        vec![runs(&[(Some(10), 1)])],
    );
    sim.run(2_000);
    assert_eq!(
        stage_names(&sim, "app")[..8],
        ["Nominal", "Nominal", "Nominal", "Debug", "Debug", "Debug", "Disabled", "Disabled"]
    );
    let changes = events(&sim, "StageChanged");
    assert_eq!(changes.len(), 2, "{changes:#?}");
    assert!(
        changes[0].ends_with(
            "StageChanged app: Instrumentation stage Nominal → Debug at restart 3 of container app"
        ),
        "{changes:#?}"
    );
    assert!(
        changes[1]
            .ends_with("Instrumentation stage Debug → Disabled at restart 6 of container app"),
        "{changes:#?}"
    );
    // The container's current stage is the last start's.
    assert_eq!(sim.pod.containers()[0].stage, Some(Stage::Disabled));
}

#[test]
fn logging_skips_debug_and_unstaged_containers_get_no_stage() {
    let mut p = staged(
        &[
            ("init", Kind::Init),
            ("app", Kind::Main),
            ("side", Kind::Main),
        ],
        StagePolicy::new(Some(2), Some(4), true).unwrap(),
        600_000,
    );
    p.containers[2].staged = false;
    let mut sim = Sim::new(
        p,
        vec![runs(&[(Some(5), 0)]), runs(&[(Some(10), 1)]), forever()],
    );
    sim.run(3_000);
    assert_eq!(
        stage_names(&sim, "app")[..4],
        ["Nominal", "Nominal", "Disabled", "Disabled"]
    );
    // Init containers are staged too (once per pod start); `side` is not selected.
    assert_eq!(stage_names(&sim, "init"), ["Nominal"]);
    assert_eq!(stage_names(&sim, "side"), ["-"]);
    assert_eq!(sim.pod.containers()[2].stage, None);
}

#[test]
fn a_debug_exit_is_recorded_with_its_log() {
    let mut sim = Sim::new(
        staged(
            &[("app", Kind::Main)],
            StagePolicy::new(Some(1), Some(2), false).unwrap(),
            600_000,
        ),
        vec![runs(&[(Some(1_500), 3)])],
    );
    sim.run(4_000);
    // Instance 2 ran in Debug: its exit at t=3000 (started at 1500) is described, and its
    // log is asked for; Nominal and Disabled exits are not.
    assert_eq!(
        events(&sim, "DebugExit"),
        ["t=3000 DebugExit app: Container app exited with code 3 after 1.5s in stage Debug"]
    );
    assert_eq!(
        sim.events
            .iter()
            .filter(|e| e.contains("log tail"))
            .collect::<Vec<_>>(),
        ["t=3000 log tail app#2"]
    );
}

#[test]
fn the_add_on_is_blamed_after_clean_running_once_disabled() {
    // Crashes at once for 6 starts, then runs: Disabled from restart 6; blamed 5 s later.
    let mut script = runs(&[(Some(10), 1)]);
    script.runs = vec![(Some(10), 1); 6];
    script.runs.push((None, 0));
    let mut sim = Sim::new(
        staged(&[("app", Kind::Main)], StagePolicy::default(), 5_000),
        vec![script],
    );
    sim.run(30_000);
    let started = sim.started[&InstanceId {
        container: 0,
        instance: 7,
    }];
    let blamed = events(&sim, "InstrumentationBlamed");
    let at = started.since_origin().as_millis() + 5_000;
    assert_eq!(
        blamed,
        [format!("t={at} InstrumentationBlamed app: app ran 5s cleanly after the add-on was disabled at restart 6: the add-on is the likely cause")]
    );
    assert_eq!(
        sim.pod.containers()[0].judgement.verdict,
        Some(Verdict::Blamed)
    );
    assert!(events(&sim, "InstrumentationCleared").is_empty());
}

#[test]
fn the_add_on_is_cleared_when_the_app_crashes_without_it() {
    let mut sim = Sim::new(
        staged(&[("app", Kind::Main)], StagePolicy::default(), 5_000),
        vec![runs(&[(Some(10), 1)])],
    );
    sim.run(10_000);
    assert_eq!(
        events(&sim, "InstrumentationCleared")
            .iter()
            .map(|e| e.split_once(' ').unwrap().1)
            .collect::<Vec<_>>(),
        ["InstrumentationCleared app: app crashes without the add-on too (3 restarts since it was disabled at restart 6): look at the app"]
    );
    let c = &sim.pod.containers()[0];
    assert_eq!(c.judgement.verdict, Some(Verdict::Cleared));
    assert_eq!(c.judgement.disabled_at, Some(6));
    // Crashing instances never ran 5 s: no blame.
    assert!(events(&sim, "InstrumentationBlamed").is_empty());
}

fn escalating(after: u32, within: u64, max: u32) -> PodPlan {
    let mut p = plan(
        RestartPolicy::Always,
        &[
            ("init", Kind::Init),
            ("side", Kind::Sidecar),
            ("app", Kind::Main),
        ],
    );
    p.backoff = BackoffPolicy::new(ms(100), ms(400));
    p.pod_restart = Some(PodRestartPolicy::new(after, ms(within), max).unwrap());
    p
}

#[test]
fn restarts_within_the_window_restart_the_pod_then_it_gives_up() {
    let mut side = forever();
    side.on_term = Some(50);
    let mut sim = Sim::new(
        escalating(3, 60_000, 2),
        vec![runs(&[(Some(10), 0)]), side, runs(&[(Some(10), 1)])],
    );
    sim.run(60_000);
    // Each round: app starts, restarts 3 times (0, 100, 200 ms waits), and its 4th exit
    // restarts the pod instead: every container stops, volumes are wiped, init runs again.
    let restarting = events(&sim, "PodRestarting");
    assert_eq!(restarting.len(), 2, "{:#?}", sim.events);
    assert!(
        restarting[0].ends_with("PodRestarting pod: Container app was restarted 3 times within 1m0s: restarting the whole pod (pod restart 1 of 2): every container stops, emptyDir volumes are wiped, init containers run again"),
        "{restarting:#?}"
    );
    assert!(
        restarting[1].contains("(pod restart 2 of 2)"),
        "{restarting:#?}"
    );
    assert_eq!(events(&sim, "wipe").len(), 2, "{:#?}", sim.events);
    assert_eq!(sim.lines("spawn init").len(), 3);
    let gave_up = events(&sim, "GaveUp");
    assert_eq!(gave_up.len(), 1);
    assert!(
        gave_up[0].ends_with("GaveUp pod: Container app was restarted 3 times within 1m0s, and the whole pod has been restarted 2 times already (maxPodRestarts): giving up"),
        "{gave_up:#?}"
    );
    assert!(sim.pod.is_finished());
    assert_eq!(sim.pod.phase(), Phase::Failed);
    assert_eq!(sim.pod.failure().map(|(r, _)| r), Some("GaveUp"));
    assert_eq!(sim.pod.pod_restarts(), 2);
    assert!(sim.procs.is_empty(), "{:?}", sim.procs);
    // restartCount only grows: 3 restarts per round plus one per pod restart.
    let app = &sim.pod.containers()[2];
    assert_eq!(app.restart_count, 3 + 1 + 3 + 1 + 3);
    assert!(
        sim.log.last().unwrap().ends_with("finished Failed"),
        "{:#?}",
        sim.log
    );
}

#[test]
fn restarts_spread_wider_than_the_window_do_not_escalate() {
    // Each instance runs 1 s; 3 restarts within 1.5 s never happen.
    let mut sim = Sim::new(
        escalating(3, 1_500, 1),
        vec![runs(&[(Some(10), 0)]), forever(), runs(&[(Some(1_000), 1)])],
    );
    sim.run(20_000);
    assert!(
        events(&sim, "PodRestarting").is_empty(),
        "{:#?}",
        sim.events
    );
    assert!(sim.pod.containers()[2].restart_count > 10);
    assert_eq!(sim.pod.phase(), Phase::Running);
}

#[test]
fn stages_keep_escalating_across_pod_restarts() {
    let mut p = escalating(2, 60_000, 5);
    for c in &mut p.containers {
        c.staged = c.kind == Kind::Main;
    }
    p.staging = Some(Staging {
        policy: StagePolicy::new(Some(2), Some(4), false).unwrap(),
        verdict_after: ms(600_000),
    });
    let mut sim = Sim::new(
        p,
        vec![runs(&[(Some(10), 0)]), forever(), runs(&[(Some(10), 1)])],
    );
    sim.run(3_000);
    // Restarts 0, 1, 2, then a pod restart (restart 3), 4, 5, a pod restart (6) ...
    assert_eq!(
        stage_names(&sim, "app")[..7],
        ["Nominal", "Nominal", "Debug", "Debug", "Disabled", "Disabled", "Disabled"]
    );
}

#[test]
fn a_resumed_pod_goes_on_from_its_record() {
    let p = staged(
        &[
            ("init", Kind::Init),
            ("side", Kind::Sidecar),
            ("app", Kind::Main),
        ],
        StagePolicy::new(Some(1), Some(2), false).unwrap(),
        600_000,
    );
    let scripts = || vec![runs(&[(Some(10), 0)]), forever(), runs(&[(Some(10), 1)])];
    let mut sim = Sim::new(p.clone(), scripts());
    // app: restarts at once, then after 100, 200 and 400 ms: its 5th instance exits at
    // t=760, and at t=1050 it is backing off until t=1160 (delay 400 ms).
    sim.run(1_050);
    sim.now = Instant::from_millis(1_050);
    let app = &sim.pod.containers()[2];
    assert_eq!(app.restart_count, 4);
    assert!(app.backing_off());
    let record = saved(&sim);
    assert_eq!(
        record.containers[1].state,
        crate::record::StateRecord::Running(10)
    );

    // podvisor dies here; 50 ms later a new run takes the record up.
    let mut next = Sim::new(p, scripts());
    next.pod = Pod::resume(next.pod.plan().clone(), &record).unwrap();
    next.now = Instant::from_millis(1_100);
    next.run(3_000);
    let log = next.log.clone();
    // The completed init container does not run again; the sidecar, which vanished with the
    // run, starts again at once as a restart; app waits out the rest of its backoff.
    assert_eq!(
        log[..3],
        [
            "t=1100 spawn side#2",
            "t=1100 backoff app",
            "t=1160 spawn app#6"
        ],
        "{log:#?}"
    );
    assert!(next.lines("spawn init").is_empty());
    assert!(next.events[0].starts_with("t=1100 Resumed pod: Took up the state saved 50ms ago by podvisor (pid 42): restart counts init 0 (stage Nominal), side 0 (stage Nominal), app 4 (stage Disabled); whole-pod restarts 0"), "{:#?}", next.events);
    let side = &next.pod.containers()[1];
    assert_eq!(side.restart_count, 1);
    assert!(matches!(
        side.last_state,
        Some(ContainerState::Terminated {
            exit_code: 137,
            reason: TerminatedReason::ContainerStatusUnknown,
            ..
        })
    ));
    // Counts and stages go on: app's next start is restart 5, Disabled; its backoff goes on
    // doubling from where it was (capped at 400 ms).
    assert_eq!(stage_names(&next, "app")[0], "Disabled");
    let app = &next.pod.containers()[2];
    assert!(app.restart_count >= 5);
    assert_eq!(app.judgement.disabled_at, Some(2));
    assert_eq!(next.pod.phase(), Phase::Running);
}

#[test]
fn the_record_marks_a_pod_that_ended_by_itself_and_not_one_that_was_stopped() {
    let mut sim = Sim::new(
        plan(RestartPolicy::Never, &[("app", Kind::Main)]),
        vec![runs(&[(Some(10), 0)])],
    );
    sim.run(1_000);
    assert!(sim.pod.is_finished());
    assert_eq!(saved(&sim).ended.as_deref(), Some("Succeeded"));

    let mut sim = Sim::new(
        plan(RestartPolicy::Always, &[("app", Kind::Main)]),
        vec![forever()],
    );
    sim.stop_at = Some(Instant::from_millis(500));
    sim.run(5_000);
    assert!(sim.pod.is_finished());
    assert!(sim.pod.stop_requested());
    assert_eq!(saved(&sim).ended, None);
}

#[test]
fn a_record_naming_an_unknown_reason_is_refused() {
    let mut sim = Sim::new(
        plan(RestartPolicy::Never, &[("app", Kind::Main)]),
        vec![runs(&[(Some(10), 3)])],
    );
    sim.run(1_000);
    let mut r = saved(&sim);
    if let crate::record::StateRecord::Terminated(e) = &mut r.containers[0].state {
        e.reason = "Exploded".into();
    }
    let e = Pod::resume(sim.pod.plan().clone(), &r).unwrap_err();
    assert_eq!(
        e.to_string(),
        "container app: \"Exploded\" is not a reason a container terminates with"
    );
}
