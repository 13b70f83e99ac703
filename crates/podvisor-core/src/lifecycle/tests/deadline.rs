//! `activeDeadlineSeconds`: the pod fails past it and its containers stop with its grace;
//! a pod taken up again counts from when it was created.

use super::*;

fn deadline_events(sim: &Sim) -> Vec<&String> {
    (sim.events.iter())
        .filter(|e| e.contains("DeadlineExceeded"))
        .collect()
}

const TOLD: &str =
    "DeadlineExceeded pod: Pod was active on the node longer than the specified deadline";

#[test]
fn past_its_active_deadline_the_pod_fails_and_its_containers_stop_with_its_grace() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.grace = Duration::from_secs(5);
    p.active_deadline = Some(Duration::from_secs(3));
    let mut polite = forever();
    polite.on_term = Some(300);
    let mut sim = Sim::new(p, vec![polite]);
    sim.run(100_000);
    // The timer wakes the pod at the deadline: SIGTERM then, the pod Failed once it exits.
    assert_eq!(
        sim.log,
        [
            "t=0 spawn app#1",
            "t=3000 term app#1",
            "t=3300 finished Failed"
        ]
    );
    assert_eq!(deadline_events(&sim), [&format!("t=3000 {TOLD}")]);
    assert_eq!(sim.pod.phase(), Phase::Failed);
    // Without one, the same pod runs on.
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.active_deadline = None;
    let mut sim = Sim::new(p, vec![forever()]);
    sim.run(100_000);
    assert_eq!(sim.log, ["t=0 spawn app#1"]);
    assert_eq!(sim.pod.phase(), Phase::Running);
}

#[test]
fn a_pod_taken_up_again_counts_its_deadline_from_when_it_was_created() {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.active_deadline = Some(Duration::from_secs(10));
    let mut sim = Sim::new(p.clone(), vec![forever()]);
    sim.run(4_000);
    sim.now = Instant::from_millis(4_000);
    // Created at 0; taken up by the next run at 6 s: it fails at 10 s, not at 16 s.
    let record = saved(&sim);
    let mut next = Sim::new(p.clone(), vec![forever()]);
    next.pod = Pod::resume_adopting(p, &record, &BTreeMap::new()).unwrap();
    next.now = Instant::from_millis(6_000);
    next.run(100_000);
    assert_eq!(deadline_events(&next), [&format!("t=10000 {TOLD}")]);
    assert_eq!(next.pod.phase(), Phase::Failed);
}
