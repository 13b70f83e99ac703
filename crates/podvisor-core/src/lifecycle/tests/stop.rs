//! Graceful stops: SIGTERM, grace, SIGKILL, and the sidecar order.

use super::*;

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
fn a_sidecar_that_exits_during_termination_is_restarted_only_with_its_gate() {
    // The sidecar crashes 200 ms into the stop; the main container takes 3 s to go.
    let run = |gate: bool| {
        let mut p = plan(
            RestartPolicy::Always,
            &[("side", Kind::Sidecar), ("app", Kind::Main)],
        );
        p.sidecars_restart_in_termination = gate;
        let mut slow = forever();
        slow.on_term = Some(3000);
        let side = runs(&[(Some(1200), 1), (None, 0)]);
        let mut sim = Sim::new(p, vec![side, slow]);
        sim.stop_at = Some(Instant::from_millis(1000));
        sim.run(100_000);
        sim
    };
    // As the kubelet of 1.36: a sidecar down during termination stays down.
    let sim = run(false);
    assert_eq!(sim.lines("spawn"), ["t=0 spawn side#1", "t=0 spawn app#1"]);
    assert_eq!(sim.lines("finished"), ["t=4000 finished Failed"]);
    // KEP-4438: it is started again (its first restart: at once) and stops in its turn, after
    // the main container.
    let sim = run(true);
    assert_eq!(
        sim.lines("spawn"),
        ["t=0 spawn side#1", "t=0 spawn app#1", "t=1200 spawn side#2"]
    );
    assert_eq!(
        sim.lines("term"),
        ["t=1000 term app#1", "t=4000 term side#2"]
    );
    assert_eq!(sim.pod.containers()[0].restart_count, 1);
    assert_eq!(sim.lines("finished"), ["t=4000 finished Failed"]);
}
