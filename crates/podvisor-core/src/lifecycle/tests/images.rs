//! Images before each start, as the kubelet's image manager: a failed pull waits in
//! `ErrImagePull`, then `ImagePullBackOff`, tried again after 10 s doubling to 300 s; `Never`
//! with no image waits in `ErrImageNeverPull`; nothing counts as a restart; a container that
//! starts again makes sure of its image again.

use super::*;

fn pod_of_an_image() -> PodPlan {
    let mut p = plan(RestartPolicy::Always, &[("app", Kind::Main)]);
    p.containers[0].image = Some("registry.test/app:v1".into());
    p
}

#[test]
fn a_failed_pull_backs_off_ten_seconds_doubling_then_the_container_starts() {
    let mut sim = Sim::new(pod_of_an_image(), vec![forever()]);
    // Four pulls fail (each takes 100 ms), the fifth pulls.
    sim.image = Rc::new(|_, n| {
        (
            100,
            if n < 5 {
                Err(ImageFailure::Pull)
            } else {
                Ok(true)
            },
        )
    });
    sim.run(160_000);
    let tries: Vec<&String> = sim
        .log
        .iter()
        .filter(|l| l.contains("ensure image"))
        .collect();
    assert_eq!(
        tries[..5],
        [
            "t=0 ensure image app",
            "t=10100 ensure image app",
            "t=30200 ensure image app",
            "t=70300 ensure image app",
            "t=150400 ensure image app",
        ]
    );
    assert!(
        sim.log.contains(&"t=150500 spawn app#1".to_string()),
        "{:#?}",
        sim.log
    );
    let first: Vec<&str> = sim.events.iter().take(4).map(String::as_str).collect();
    assert_eq!(
        first,
        [
            "t=100 Failed app: Failed to pull image \"registry.test/app:v1\": no such host",
            "t=100 Failed app: Error: ErrImagePull",
            "t=1100 Failed app: Error: ImagePullBackOff",
            "t=10200 Failed app: Failed to pull image \"registry.test/app:v1\": no such host",
        ]
    );
    assert!(
        sim.log.contains(&"t=1100 backoff app".to_string()),
        "{:#?}",
        sim.log
    );
    assert!(
        sim.events
            .contains(&"t=150400 Pulling app: Pulling image \"registry.test/app:v1\"".to_string()),
        "{:#?}",
        sim.events
    );
    assert!(sim
        .events
        .contains(&"t=150500 Pulled app: pulled".to_string()));
    assert_eq!(sim.pod.containers()[0].restart_count, 0);
}

#[test]
fn the_back_off_stops_at_five_minutes_and_the_state_says_why() {
    let mut sim = Sim::new(pod_of_an_image(), vec![forever()]);
    sim.image = Rc::new(|_, _| (0, Err(ImageFailure::Pull)));
    sim.run(1_300_000);
    let tries: Vec<u64> = sim
        .log
        .iter()
        .filter(|l| l.contains("ensure image"))
        .map(|l| l[2..l.find(' ').unwrap()].parse().unwrap())
        .collect();
    let gaps: Vec<u64> = tries.windows(2).map(|w| (w[1] - w[0]) / 1000).collect();
    assert_eq!(gaps[..7], [10, 20, 40, 80, 160, 300, 300]);
    let app = &sim.pod.containers()[0];
    assert_eq!(
        app.state,
        ContainerState::Waiting {
            reason: WaitingReason::ImagePullBackOff,
            message: Some(
                "Back-off pulling image \"registry.test/app:v1\": ErrImagePull: no such host"
                    .into()
            ),
        }
    );
    assert_eq!(app.restart_count, 0);
}

#[test]
fn never_without_the_image_waits_and_each_start_looks_again() {
    let mut sim = Sim::new(pod_of_an_image(), vec![runs(&[(Some(1_000), 1)])]);
    // Not there for the first two looks; then there, and the container crash-loops.
    sim.image = Rc::new(|_, n| {
        (
            0,
            if n < 3 {
                Err(ImageFailure::NeverPull)
            } else {
                Ok(false)
            },
        )
    });
    sim.run(35_000);
    assert_eq!(
        sim.lines("ensure image")[..4],
        [
            "t=0 ensure image app",
            "t=10000 ensure image app",
            "t=20000 ensure image app",
            // Its restart after its first crash (at once, as the kubelet's) looks again.
            "t=21000 ensure image app",
        ]
    );
    assert!(sim
        .events
        .contains(&"t=0 ErrImageNeverPull app: no such host".to_string()));
    assert!(sim.events.contains(
        &"t=20000 Pulled app: Container image \"registry.test/app:v1\" already present on machine"
            .to_string()
    ));
}

#[test]
fn a_name_that_does_not_parse_waits_in_invalid_image_name_and_is_looked_at_again() {
    let mut sim = Sim::new(pod_of_an_image(), vec![forever()]);
    sim.image = Rc::new(|_, _| (0, Err(ImageFailure::InvalidName)));
    sim.run(25_000);
    assert_eq!(
        sim.lines("ensure image"),
        [
            "t=0 ensure image app",
            "t=10000 ensure image app",
            "t=20000 ensure image app"
        ]
    );
    assert!(sim
        .events
        .contains(&"t=0 InspectFailed app: no such host".to_string()));
    assert!(sim
        .events
        .contains(&"t=0 Failed app: Error: InvalidImageName".to_string()));
    let app = &sim.pod.containers()[0];
    assert!(matches!(
        app.state,
        ContainerState::Waiting {
            reason: WaitingReason::InvalidImageName,
            ..
        }
    ));
    assert_eq!(app.restart_count, 0);
    assert_eq!(sim.pod.phase(), Phase::Pending);
}
