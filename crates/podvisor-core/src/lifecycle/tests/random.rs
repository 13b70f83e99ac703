//! Random pods keep the invariants and always finish.

use super::*;

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
        // Escalation on some pods: stages, verdicts, whole-pod restarts and giving up.
        if rng.next(3) == 0 {
            p.pod_restart = Some(
                crate::escalation::PodRestartPolicy::new(
                    1 + rng.next(3) as u32,
                    ms(1_000 + rng.next(20_000)),
                    1 + rng.next(2) as u32,
                )
                .unwrap(),
            );
        }
        if rng.next(2) == 0 {
            let debug = 1 + rng.next(3) as u32;
            p.staging = Some(Staging {
                policy: crate::stage::StagePolicy::new(
                    Some(debug),
                    Some(debug + rng.next(3) as u32),
                    rng.next(2) == 0,
                )
                .unwrap(),
                verdict_after: ms(rng.next(5_000)),
            });
            for c in &mut p.containers {
                c.staged = rng.next(2) == 0;
            }
        }
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
        let again = scripts.clone();
        let plan_again = p.clone();
        let mut sim = Sim::new(p, scripts);
        let stop = rng.next(120_000);
        // podvisor itself dies at a random moment in some cases: the pod is taken up again.
        let crash = (rng.next(3) == 0).then(|| rng.next(stop + 1));
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
        if let Some(t) = crash {
            sim.run(t);
            sim.now = sim.now.max(Instant::from_millis(t));
            if !sim.pod.is_finished() {
                let record = saved(&sim);
                let pending: Vec<(Instant, Input)> = sim
                    .pending
                    .iter()
                    .filter(|(at, i)| {
                        *at > sim.now && !matches!(i, Input::Probed(..) | Input::HookDone(..))
                    })
                    .cloned()
                    .collect();
                let mut next = Sim::new(plan_again, again);
                next.pod = Pod::resume(next.pod.plan().clone(), &record).unwrap();
                // Counts and stages must go on from the record.
                next.max_restarts = sim
                    .pod
                    .containers()
                    .iter()
                    .map(|c| c.restart_count)
                    .collect();
                next.max_stages = sim.pod.containers().iter().map(|c| c.stage).collect();
                next.now = sim.now + ms(rng.next(2_000));
                next.stop_at = sim.stop_at.filter(|s| *s > next.now).or(Some(next.now));
                next.pending = pending;
                sim = next;
            }
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
