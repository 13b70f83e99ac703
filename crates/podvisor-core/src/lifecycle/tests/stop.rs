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
