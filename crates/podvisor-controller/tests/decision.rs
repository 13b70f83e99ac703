//! The decision, a pure function of (pod, what was seen, the owner's record, now), on pod
//! statuses as the API server and `podvisor status -o json` give them.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use podvisor_controller::decide::{decide, observe, Decision, History, Mark, PodSeen};
use podvisor_core::escalation::PodRestartPolicy;

use crate::{fixture, ms};

fn policy() -> PodRestartPolicy {
    // afterContainerRestarts 5 within 10m, maxPodRestarts 3.
    PodRestartPolicy::new(5, Duration::from_secs(600), 3).unwrap()
}

fn seen_once(pod: &Pod, now: u64) -> PodSeen {
    let mut seen = PodSeen::default();
    observe(&mut seen, pod, &policy(), now);
    seen
}

/// The app container's status, to move it on as the kubelet would.
fn crash(pod: &mut Pod, restarts: i32, finished: &str) {
    let cs = &mut pod
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0];
    cs.restart_count = restarts;
    let t = cs.last_state.as_mut().unwrap().terminated.as_mut().unwrap();
    t.finished_at = Some(Time(finished.parse().unwrap()));
}

fn mark(uid: &str) -> Mark {
    Mark {
        pod: "web-old".into(),
        uid: uid.into(),
        container: "app".into(),
        restarts: 5,
        at: "2026-11-23T09:00:00Z".into(),
    }
}

#[test]
fn five_restarts_within_ten_minutes_of_a_replicaset_pod_refresh_it() {
    // Started 10:00:00, fifth restart's exit at 10:06:41; looked at at 10:07:00.
    let pod = fixture("replicaset-crashloop.json");
    let now = ms("2026-11-23T10:07:00Z");
    let seen = seen_once(&pod, now);
    let d = decide(&pod, &policy(), &seen, Some(&History::default()), now);
    assert_eq!(
        d,
        Decision::Refresh {
            container: "app".into(),
            restarts: 5,
            record: true,
            number: 1
        }
    );
    // Ten minutes after the pod started, its first restarts may have been before the window:
    // a controller that has just seen the pod does not count them.
    let later = ms("2026-11-23T10:10:01Z");
    let seen = seen_once(&pod, later);
    assert_eq!(
        decide(&pod, &policy(), &seen, None, later),
        Decision::Nothing
    );
}

#[test]
fn an_old_pod_is_refreshed_only_for_restarts_the_controller_watched() {
    // The same pod, started three hours ago: 5 restarts, times unknown.
    let mut pod = fixture("replicaset-crashloop.json");
    pod.status.as_mut().unwrap().start_time = Some(Time("2026-11-23T07:00:00Z".parse().unwrap()));
    let p = policy();
    let mut seen = PodSeen::default();
    let t0 = ms("2026-11-23T10:07:00Z");
    observe(&mut seen, &pod, &p, t0);
    assert_eq!(decide(&pod, &p, &seen, None, t0), Decision::Nothing);
    // Four more crashes, two minutes apart, each seen: with the last one seen (10:06:41)
    // that is five within ten minutes.
    for (i, at) in ["10:08:41", "10:10:41", "10:12:41", "10:14:41"]
        .iter()
        .enumerate()
    {
        crash(&mut pod, 6 + i as i32, &format!("2026-11-23T{at}Z"));
        let now = ms(&format!("2026-11-23T{at}Z")) + 5_000;
        observe(&mut seen, &pod, &p, now);
        let d = decide(&pod, &p, &seen, Some(&History::default()), now);
        if i < 3 {
            assert_eq!(d, Decision::Nothing, "after crash {}", 6 + i);
        } else {
            assert!(
                matches!(
                    d,
                    Decision::Refresh {
                        restarts: 5,
                        record: true,
                        ..
                    }
                ),
                "{d:?}"
            );
        }
    }
    // Restarts counted several at once (the controller was away): the newest at its exit,
    // the others at the earliest possible, the previous look.
    let now = ms("2026-11-23T10:40:00Z");
    crash(&mut pod, 14, "2026-11-23T10:39:00Z");
    observe(&mut seen, &pod, &p, now);
    // 10:14:46 (earliest of the 4 unseen) is within 10m of 10:40? No: only the newest counts.
    assert_eq!(
        decide(&pod, &p, &seen, Some(&History::default()), now),
        Decision::Nothing
    );
}

#[test]
fn past_max_pod_restarts_the_owner_is_given_up_once() {
    let pod = fixture("replicaset-crashloop.json");
    let now = ms("2026-11-23T10:07:00Z");
    let seen = seen_once(&pod, now);
    let mut h = History {
        refreshes: vec![mark("a"), mark("b")],
        gave_up: None,
    };
    assert!(matches!(
        decide(&pod, &policy(), &seen, Some(&h), now),
        Decision::Refresh {
            number: 3,
            record: true,
            ..
        }
    ));
    h.refreshes.push(mark("c"));
    assert_eq!(
        decide(&pod, &policy(), &seen, Some(&h), now),
        Decision::GiveUp {
            container: "app".into(),
            restarts: 5
        }
    );
    h.gave_up = Some(mark("d"));
    assert_eq!(
        decide(&pod, &policy(), &seen, Some(&h), now),
        Decision::GaveUpAlready
    );
}

#[test]
fn a_recorded_refresh_is_retried_not_counted_again() {
    let pod = fixture("replicaset-crashloop.json");
    let now = ms("2026-11-23T10:07:00Z");
    let seen = PodSeen::default();
    let h = History {
        refreshes: vec![mark("x"), mark("9f6a2d3e-1c4b-4e8f-a7d2-6b5c0e9f1a32")],
        gave_up: None,
    };
    assert_eq!(
        decide(&pod, &policy(), &seen, Some(&h), now),
        Decision::Refresh {
            container: "app".into(),
            restarts: 5,
            record: false,
            number: 2
        }
    );
}

#[test]
fn a_pod_being_deleted_or_finished_is_left_alone() {
    let mut pod = fixture("replicaset-crashloop.json");
    let now = ms("2026-11-23T10:07:00Z");
    let seen = seen_once(&pod, now);
    pod.metadata.deletion_timestamp = Some(Time("2026-11-23T10:06:50Z".parse().unwrap()));
    assert_eq!(
        decide(&pod, &policy(), &seen, None, now),
        Decision::Terminating
    );
    pod.metadata.deletion_timestamp = None;
    pod.status.as_mut().unwrap().phase = Some("Failed".into());
    assert_eq!(decide(&pod, &policy(), &seen, None, now), Decision::Nothing);
}

#[test]
fn a_bare_pod_from_podvisor_status_is_reported_not_evicted() {
    // `podvisor status -o json` of a pod whose app container restarted 6 times in under a
    // minute (backoff 1s): no ownerReferences.
    let pod = fixture("podvisor-status-crashloop.json");
    let start = pod.status.as_ref().unwrap().start_time.clone().unwrap();
    let now = start.0.as_millisecond() as u64 + 60_000;
    let seen = seen_once(&pod, now);
    assert_eq!(
        decide(&pod, &policy(), &seen, None, now),
        Decision::BarePod {
            container: "app".into(),
            restarts: 5
        }
    );
}

#[test]
fn an_unreadable_record_is_refused_not_reset() {
    use std::collections::BTreeMap;
    let bad = BTreeMap::from([(
        podvisor_controller::decide::HISTORY_ANNOTATION.to_string(),
        "{\"refreshes\": 3}".to_string(),
    )]);
    let e = History::from_annotations(Some(&bad)).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("annotation podvisor.io/pod-restart-history:"),
        "{e}"
    );
    let h = History {
        refreshes: vec![mark("a")],
        gave_up: Some(mark("b")),
    };
    let again = BTreeMap::from([(
        podvisor_controller::decide::HISTORY_ANNOTATION.to_string(),
        h.to_annotation(),
    )]);
    assert_eq!(History::from_annotations(Some(&again)).unwrap(), h);
    assert_eq!(History::from_annotations(None).unwrap(), History::default());
}

/// Gives the pod a `RestartAllContainers` rule on app's exit code 1 and the condition
/// `AllContainersRestarting` as the kubelet writes it.
fn restarting_all(pod: &mut Pod, status: &str, changed: &str) {
    let app = &mut pod.spec.as_mut().unwrap().containers[0];
    app.restart_policy = Some("Never".into());
    app.restart_policy_rules = Some(vec![k8s_openapi::api::core::v1::ContainerRestartRule {
        action: "RestartAllContainers".into(),
        exit_codes: Some(
            k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes {
                operator: "In".into(),
                values: Some(vec![1]),
            },
        ),
    }]);
    let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
    conditions.retain(|c| c.type_ != "AllContainersRestarting");
    conditions.push(k8s_openapi::api::core::v1::PodCondition {
        type_: "AllContainersRestarting".into(),
        status: status.into(),
        last_transition_time: Some(Time(changed.parse().unwrap())),
        reason: (status == "True").then(|| "RestartAllContainersStarted".into()),
        message: (status == "True").then(|| "container exited with restart policy rule".into()),
        ..Default::default()
    });
}

#[test]
fn restarts_the_kubelet_makes_with_restart_all_containers_are_not_escalated() {
    // The fixture's five restarts, each a restart of every container by the kubelet: while
    // the condition is True the pod is left alone…
    let mut pod = fixture("replicaset-crashloop.json");
    let now = ms("2026-11-23T10:07:00Z");
    restarting_all(&mut pod, "True", "2026-11-23T10:06:41Z");
    let seen = seen_once(&pod, now);
    assert_eq!(
        decide(&pod, &policy(), &seen, Some(&History::default()), now),
        Decision::Nothing
    );
    // …and once it is False again, the restarts counted while it changed are the kubelet's.
    restarting_all(&mut pod, "False", "2026-11-23T10:06:43Z");
    let seen = seen_once(&pod, now);
    assert_eq!(
        decide(&pod, &policy(), &seen, Some(&History::default()), now),
        Decision::Nothing
    );
    // Restarts seen later without a restart of everything in between count as before.
    let mut seen = seen;
    for (n, (at, look)) in [
        ("2026-11-23T10:07:10Z", "2026-11-23T10:07:11Z"),
        ("2026-11-23T10:07:20Z", "2026-11-23T10:07:21Z"),
        ("2026-11-23T10:07:30Z", "2026-11-23T10:07:31Z"),
        ("2026-11-23T10:07:40Z", "2026-11-23T10:07:41Z"),
        ("2026-11-23T10:07:50Z", "2026-11-23T10:07:51Z"),
    ]
    .into_iter()
    .enumerate()
    {
        crash(&mut pod, 6 + n as i32, at);
        observe(&mut seen, &pod, &policy(), ms(look));
    }
    let now = ms("2026-11-23T10:07:52Z");
    assert!(
        matches!(
            decide(&pod, &policy(), &seen, Some(&History::default()), now),
            Decision::Refresh { restarts: 5, .. }
        ),
        "{:?}",
        decide(&pod, &policy(), &seen, Some(&History::default()), now)
    );
}
