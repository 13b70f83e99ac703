//! `CreateContainerConfigError`: a container whose configuration cannot be made is not
//! created, its restart count does not move, and the start is tried again every 10 s.

use super::*;
use crate::security::{ImageUser, NonRoot};

fn root_under_non_root() -> Option<NonRoot> {
    Some(NonRoot {
        run_as_user: None,
        image: ImageUser::root(),
    })
}

#[test]
fn a_config_error_holds_the_container_back_and_is_tried_again_every_ten_seconds() {
    let mut p = plan(
        RestartPolicy::Always,
        &[("ok", Kind::Main), ("app", Kind::Main)],
    );
    p.containers[1].non_root = root_under_non_root();
    let mut sim = Sim::new(p, vec![forever(), forever()]);
    sim.run(25_000);
    // The other container runs; app is never spawned.
    assert_eq!(sim.log, ["t=0 spawn ok#1"]);
    let failed: Vec<_> = sim
        .events
        .iter()
        .filter(|e| e.contains("Failed app"))
        .collect();
    assert_eq!(failed.len(), 3, "{:?}", sim.events);
    for (e, t) in failed.iter().zip([0, 10_000, 20_000]) {
        assert!(
            e.starts_with(&format!(
                "t={t} Failed app: Error: container has runAsNonRoot and image will run as root (pod: \"pod_ns(u)\""
            )),
            "{e}"
        );
    }
    let app = &sim.pod.containers()[1];
    assert_eq!(app.restart_count, 0);
    assert!(matches!(
        app.state,
        ContainerState::Waiting {
            reason: WaitingReason::CreateContainerConfigError,
            ..
        }
    ));
}

#[test]
fn an_init_container_held_back_keeps_the_app_from_starting() {
    let mut p = plan(
        RestartPolicy::Always,
        &[("setup", Kind::Init), ("app", Kind::Main)],
    );
    p.containers[0].non_root = Some(NonRoot {
        run_as_user: Some(0),
        image: ImageUser::root(),
    });
    let mut sim = Sim::new(p, vec![runs(&[(Some(10), 0)]), forever()]);
    sim.run(15_000);
    assert!(sim.log.is_empty(), "{:?}", sim.log);
    assert!(
        sim.events[0]
            .starts_with("t=0 Failed setup: Error: container's runAsUser breaks non-root policy"),
        "{:?}",
        sim.events
    );
    // A user that is not root lets it through.
    let mut p = plan(
        RestartPolicy::Always,
        &[("setup", Kind::Init), ("app", Kind::Main)],
    );
    p.containers[0].non_root = Some(NonRoot {
        run_as_user: Some(1000),
        image: ImageUser::root(),
    });
    let mut sim = Sim::new(p, vec![runs(&[(Some(10), 0)]), forever()]);
    sim.run(15_000);
    assert_eq!(sim.log, ["t=0 spawn setup#1", "t=10 spawn app#1"]);
}

#[test]
fn a_sub_path_expr_with_no_value_is_a_config_error_too() {
    let mut p = plan(
        RestartPolicy::Always,
        &[("ok", Kind::Main), ("app", Kind::Main)],
    );
    p.containers[1].config_error = Some("missing value for SHARD".into());
    let mut sim = Sim::new(p, vec![forever(), forever()]);
    sim.run(15_000);
    assert_eq!(sim.log, ["t=0 spawn ok#1"]);
    let failed: Vec<_> = (sim.events.iter())
        .filter(|e| e.contains("Failed app"))
        .collect();
    assert_eq!(
        failed,
        [
            "t=0 Failed app: Error: missing value for SHARD",
            "t=10000 Failed app: Error: missing value for SHARD",
        ]
    );
    assert_eq!(
        sim.pod.containers()[1].state,
        ContainerState::Waiting {
            reason: WaitingReason::CreateContainerConfigError,
            message: Some("missing value for SHARD".into()),
        }
    );
}
