//! Image volumes, as the kubelet's `SyncPod` pulls them: once for the pod, before the first
//! start of a container that mounts one; the pull's events are the pod's; a container that
//! mounts a volume whose image cannot be had waits (`ErrImagePull`, then `ImagePullBackOff`
//! on the image back-off) while the others go on; a whole-pod restart makes sure again.

use super::*;

/// `init` and `app` mount the image volume `tools` (volume 0); `side` mounts nothing.
fn pod_with_an_image_volume() -> PodPlan {
    let mut p = plan(
        RestartPolicy::Always,
        &[
            ("init", Kind::Init),
            ("app", Kind::Main),
            ("other", Kind::Main),
        ],
    );
    p.image_volumes = vec!["registry.test/tools:v1".into()];
    p.containers[0].image_volumes = vec![0];
    p.containers[1].image_volumes = vec![0];
    p
}

#[test]
fn an_image_volume_is_pulled_once_for_the_pod_and_its_events_are_the_pods() {
    let mut sim = Sim::new(
        pod_with_an_image_volume(),
        // app crashes every 100 ms: its restarts do not pull again.
        vec![runs(&[(Some(10), 0)]), runs(&[(Some(100), 1)]), forever()],
    );
    sim.image = Rc::new(|_, _| (200, Ok(true)));
    sim.run(60_000);
    assert_eq!(sim.lines("ensure"), ["t=0 ensure volume image 0"]);
    assert!(
        sim.log.starts_with(&[
            "t=0 ensure volume image 0".to_string(),
            "t=200 spawn init#1".to_string(),
            "t=210 spawn app#1".to_string(),
            "t=210 spawn other#1".to_string(),
        ]),
        "{:#?}",
        sim.log
    );
    assert!(sim.pod.containers()[1].restart_count >= 3);
    assert_eq!(
        sim.events[..2],
        [
            "t=0 Pulling pod: Pulling image \"registry.test/tools:v1\"",
            "t=200 Pulled pod: pulled",
        ]
    );
}

#[test]
fn a_volume_that_cannot_be_pulled_holds_back_only_the_containers_that_mount_it() {
    let mut p = pod_with_an_image_volume();
    // No init container here: `app` mounts the volume, `other` does not.
    p.containers.remove(0);
    p.containers[0].image_volumes = vec![0];
    let mut sim = Sim::new(p, vec![forever(), forever()]);
    // Three pulls fail (each takes 100 ms), the fourth pulls.
    sim.image = Rc::new(|_, n| {
        (
            100,
            if n < 4 {
                Err(ImageFailure::Pull)
            } else {
                Ok(true)
            },
        )
    });
    sim.run(2_000);
    // `other` runs at once; `app` waits, first in ErrImagePull, then ImagePullBackOff.
    assert!(sim.log.contains(&"t=0 spawn other#1".to_string()));
    assert_eq!(
        sim.events[..4],
        [
            "t=0 Ready other: Container other is ready",
            "t=100 Failed pod: Failed to pull image \"registry.test/tools:v1\": no such host",
            "t=100 Failed app: Error: ErrImagePull",
            "t=1100 Failed app: Error: ImagePullBackOff",
        ],
        "{:#?}",
        sim.events
    );
    assert!(
        sim.log.contains(&"t=1100 backoff pod".to_string()),
        "{:#?}",
        sim.log
    );
    let ContainerState::Waiting { reason, message } = &sim.pod.containers()[0].state else {
        panic!("{:?}", sim.pod.containers()[0].state);
    };
    assert_eq!(*reason, WaitingReason::ImagePullBackOff);
    assert_eq!(
        message.as_deref(),
        Some("Back-off pulling image \"registry.test/tools:v1\": ErrImagePull: no such host")
    );
    // The image back-off: tried again after 10 s, then 20 s; then it starts.
    sim.run(40_000);
    assert_eq!(
        sim.lines("ensure"),
        [
            "t=0 ensure volume image 0",
            "t=10100 ensure volume image 0",
            "t=30200 ensure volume image 0",
        ]
    );
    sim.run(80_000);
    assert_eq!(sim.lines("ensure").len(), 4);
    assert!(
        sim.log.contains(&"t=70400 spawn app#1".to_string()),
        "{:#?}",
        sim.log
    );
    assert_eq!(sim.pod.containers()[0].restart_count, 0);
}

#[test]
fn never_without_the_image_waits_in_err_image_never_pull_and_a_pod_restart_looks_again() {
    let mut sim = Sim::new(
        pod_with_an_image_volume(),
        vec![runs(&[(Some(10), 0)]), forever(), forever()],
    );
    // Absent at first (Never), there at the second look.
    sim.image = Rc::new(|_, n| {
        (
            0,
            if n == 1 {
                Err(ImageFailure::NeverPull)
            } else {
                Ok(false)
            },
        )
    });
    sim.run(5_000);
    let ContainerState::Waiting { reason, .. } = &sim.pod.containers()[0].state else {
        panic!("{:?}", sim.pod.containers()[0].state);
    };
    assert_eq!(*reason, WaitingReason::ErrImageNeverPull);
    assert_eq!(
        sim.events[..2],
        [
            "t=0 ErrImageNeverPull pod: no such host",
            "t=0 Failed init: Error: ErrImageNeverPull",
        ]
    );
    // Looked at again at the next sync (10 s): there now.
    sim.run(20_000);
    assert!(
        sim.log.contains(&"t=10000 spawn init#1".to_string()),
        "{:#?}",
        sim.log
    );
    assert!(sim
        .events
        .contains(&"t=10000 Pulled pod: Container image \"registry.test/tools:v1\" already present on machine".to_string()));
    // A whole-pod restart refreshes what the pod shares: the volume is made sure of again.
    sim.now = Instant::from_millis(20_000);
    sim.feed(Input::RestartPod);
    sim.run(25_000);
    assert_eq!(
        sim.lines("ensure"),
        [
            "t=0 ensure volume image 0",
            "t=10000 ensure volume image 0",
            "t=20000 ensure volume image 0",
        ]
    );
}

#[test]
fn a_container_that_cannot_mount_the_volume_waits_in_create_container_error_the_others_go_on() {
    let mut p = pod_with_an_image_volume();
    p.containers.remove(0);
    p.containers[0].image_volumes = vec![0];
    p.containers[1].image_volumes = vec![0];
    let mut sim = Sim::new(p, vec![forever(), forever()]);
    sim.image = Rc::new(|_, _| (100, Ok(false)));
    let why = "subPath \"etc\" of image volume \"tools\": \"etc\" does not exist in the image";
    sim.unmountable = vec![(0, why.to_string())];
    sim.run(25_000);
    // `other` mounts it too (another subPath, or none) and starts once the image is there.
    assert_eq!(
        sim.lines("spawn"),
        ["t=100 spawn other#1"],
        "{:#?}",
        sim.log
    );
    // `app` is never created: no restart is counted, and each sync (every 10 s) says it again.
    assert_eq!(
        sim.events
            .iter()
            .filter(|e| e.contains("app:"))
            .collect::<Vec<_>>(),
        [
            &format!("t=100 Failed app: Error: {why}"),
            &format!("t=10100 Failed app: Error: {why}"),
            &format!("t=20100 Failed app: Error: {why}"),
        ],
        "{:#?}",
        sim.events
    );
    let app = &sim.pod.containers()[0];
    assert_eq!(app.restart_count, 0);
    assert_eq!(
        app.state,
        ContainerState::Waiting {
            reason: WaitingReason::CreateContainerError,
            message: Some(why.to_string()),
        }
    );
    // The volume's image was made sure of once.
    assert_eq!(sim.lines("ensure"), ["t=0 ensure volume image 0"]);
}

#[test]
fn a_volume_no_container_mounts_is_pulled_too_and_its_failures_hold_back_nothing() {
    let mut p = pod_with_an_image_volume();
    // Nobody mounts it: the pod runs at once, and the volume is pulled as the kubelet pulls
    // every image volume of a pod, failing twice and backing off as an image does.
    p.containers.remove(0);
    p.containers[0].image_volumes.clear();
    let mut sim = Sim::new(p, vec![forever(), forever()]);
    sim.image = Rc::new(|_, n| {
        (
            100,
            if n < 3 {
                Err(ImageFailure::Pull)
            } else {
                Ok(true)
            },
        )
    });
    sim.run(40_000);
    assert!(
        sim.log.starts_with(&[
            "t=0 ensure volume image 0".to_string(),
            "t=0 spawn app#1".to_string(),
            "t=0 spawn other#1".to_string(),
        ]),
        "{:#?}",
        sim.log
    );
    assert_eq!(
        sim.lines("ensure"),
        [
            "t=0 ensure volume image 0",
            "t=10100 ensure volume image 0",
            "t=30200 ensure volume image 0",
        ]
    );
    let pulls: Vec<&String> = (sim.events.iter())
        .filter(|e| e.contains(" pod: "))
        .collect();
    assert_eq!(
        pulls,
        [
            "t=100 Failed pod: Failed to pull image \"registry.test/tools:v1\": no such host",
            "t=10200 Failed pod: Failed to pull image \"registry.test/tools:v1\": no such host",
            "t=30200 Pulling pod: Pulling image \"registry.test/tools:v1\"",
            "t=30300 Pulled pod: pulled",
        ],
    );
    // The pod's BackOff once each failure has settled, as for a volume a container waits for.
    assert_eq!(
        sim.lines("backoff"),
        ["t=1100 backoff pod", "t=11200 backoff pod"]
    );
    for c in sim.pod.containers() {
        assert!(matches!(c.state, ContainerState::Running { .. }), "{c:?}");
        assert_eq!(c.restart_count, 0);
    }
}
