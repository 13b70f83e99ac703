//! Whether an exited container is restarted: the pod's `restartPolicy`, the container's own
//! `restartPolicy` and its `restartPolicyRules` on exit codes (KEP-5307), and sidecars.
//!
//! Reproduces `ShouldContainerBeRestarted` (pkg/kubelet/container/helpers.go) and
//! `ContainerShouldRestart` / `findMatchingContainerRestartRule` (pkg/api/v1/pod/util.go).

/// `restartPolicy` of a pod or a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum RestartPolicy {
    #[default]
    Always,
    OnFailure,
    Never,
}

/// How a rule matches an exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum ExitCodes {
    In(Vec<i32>),
    NotIn(Vec<i32>),
}

impl ExitCodes {
    pub fn matches(&self, code: i32) -> bool {
        match self {
            ExitCodes::In(v) => v.contains(&code),
            ExitCodes::NotIn(v) => !v.contains(&code),
        }
    }
}

/// What a matching rule does (`ContainerRestartRuleAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum RuleAction {
    /// Restart the container that exited (KEP-5307).
    Restart,
    /// Restart every container of the pod in place (KEP-5532): all are killed without
    /// preStop or grace, then the pod starts again from its first init container; volumes
    /// and their contents stay.
    RestartAllContainers,
}

impl RuleAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleAction::Restart => "Restart",
            RuleAction::RestartAllContainers => "RestartAllContainers",
        }
    }
}

/// One of a container's `restartPolicyRules`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct RestartRule {
    pub action: RuleAction,
    pub exit_codes: ExitCodes,
}

/// The restart-relevant part of a container's spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct ContainerRestart {
    /// The container's own policy; for an init container `Always` makes it a sidecar.
    pub policy: Option<RestartPolicy>,
    pub rules: Vec<RestartRule>,
}

impl ContainerRestart {
    /// The first rule whose exit codes match (`FindMatchingContainerRestartRule`), with its
    /// index. Rules count only beside a container-level `restartPolicy` (validation asks for
    /// one), as `ContainerShouldRestart` reads them.
    pub fn matching_rule(&self, exit_code: i32) -> Option<(usize, &RestartRule)> {
        self.policy?;
        self.rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.exit_codes.matches(exit_code))
    }

    /// Whether some rule restarts every container.
    pub fn restarts_all(&self) -> bool {
        self.policy.is_some()
            && self
                .rules
                .iter()
                .any(|r| r.action == RuleAction::RestartAllContainers)
    }
}

/// What an exit leads to for a container of the given kind, and what decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub then: Then,
    pub by: DecidedBy,
}

/// What happens after an exit (before backoff and escalation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// A regular init container succeeded: the next one (or the sidecars and main
    /// containers) starts.
    Completes,
    /// The container stays terminated.
    Stays,
    /// A regular init container failed and is not restarted: the pod fails.
    FailsPod,
    /// The container is started again.
    Restarts,
    /// Every container is restarted in place.
    RestartsAll,
}

/// What decided an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// `restartPolicyRules[n]` matched.
    Rule(usize),
    /// The container's own `restartPolicy`.
    ContainerPolicy(RestartPolicy),
    /// The pod's `restartPolicy`.
    PodPolicy(RestartPolicy),
    /// A regular init container that exits 0 is done.
    Success,
}

/// What an exit with `exit_code` leads to for a container: `regular_init` for an init container
/// without `restartPolicy: Always`, which runs once to success. A matching
/// `RestartAllContainers` rule restarts everything whatever the kind and code (the kubelet reads
/// every exit for it); a regular init container that succeeded is done; one that failed is
/// restarted by a matching rule or its policy, else the pod fails
/// (`ShouldAllContainersRestart` in pkg/kubelet/container/helpers.go, `ContainerShouldRestart`
/// in pkg/api/v1/pod/util.go).
pub fn outcome(
    pod_policy: RestartPolicy,
    container: &ContainerRestart,
    regular_init: bool,
    exit_code: i32,
) -> Outcome {
    let done = Outcome {
        then: Then::Completes,
        by: DecidedBy::Success,
    };
    if let Some((n, rule)) = container.matching_rule(exit_code) {
        let then = match rule.action {
            RuleAction::RestartAllContainers => Then::RestartsAll,
            RuleAction::Restart if regular_init && exit_code == 0 => return done,
            RuleAction::Restart => Then::Restarts,
        };
        return Outcome {
            then,
            by: DecidedBy::Rule(n),
        };
    }
    if regular_init && exit_code == 0 {
        return done;
    }
    let (policy, by) = match container.policy {
        Some(p) => (p, DecidedBy::ContainerPolicy(p)),
        None => (pod_policy, DecidedBy::PodPolicy(pod_policy)),
    };
    let restart = match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => exit_code != 0,
        RestartPolicy::Never => false,
    };
    let then = match (restart, regular_init) {
        (true, _) => Then::Restarts,
        (false, true) => Then::FailsPod,
        (false, false) => Then::Stays,
    };
    Outcome { then, by }
}

/// Whether a regular (or sidecar) container that exited with `exit_code` is started again,
/// on its own or with every other container.
/// `pod_terminating`: the pod is being stopped, so nothing restarts.
pub fn should_restart(
    pod_policy: RestartPolicy,
    container: &ContainerRestart,
    exit_code: i32,
    pod_terminating: bool,
) -> bool {
    !pod_terminating
        && matches!(
            outcome(pod_policy, container, false, exit_code).then,
            Then::Restarts | Then::RestartsAll
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use RestartPolicy::*;

    fn plain() -> ContainerRestart {
        ContainerRestart::default()
    }

    #[test]
    fn pod_policy_table() {
        let cases = [
            (Always, 0, true),
            (Always, 1, true),
            (OnFailure, 0, false),
            (OnFailure, 1, true),
            (OnFailure, 137, true),
            (Never, 0, false),
            (Never, 1, false),
        ];
        for (policy, code, want) in cases {
            assert_eq!(
                should_restart(policy, &plain(), code, false),
                want,
                "{policy:?} exit {code}"
            );
        }
    }

    #[test]
    fn nothing_restarts_while_the_pod_stops() {
        assert!(!should_restart(Always, &plain(), 1, true));
    }

    #[test]
    fn the_containers_policy_overrides_the_pods() {
        let c = ContainerRestart {
            policy: Some(Never),
            rules: vec![],
        };
        assert!(!should_restart(Always, &c, 1, false));
        let c = ContainerRestart {
            policy: Some(OnFailure),
            rules: vec![],
        };
        assert!(should_restart(Never, &c, 2, false));
        assert!(!should_restart(Never, &c, 0, false));
    }

    #[test]
    fn exit_code_rules_come_first() {
        // The e2e example: policy Never plus Restart on exit code 42.
        let c = ContainerRestart {
            policy: Some(Never),
            rules: vec![RestartRule {
                action: RuleAction::Restart,
                exit_codes: ExitCodes::In(vec![42]),
            }],
        };
        assert!(should_restart(Always, &c, 42, false));
        assert!(!should_restart(Always, &c, 1, false));
        // NotIn: restart on anything but the listed codes.
        let c = ContainerRestart {
            policy: Some(Never),
            rules: vec![RestartRule {
                action: RuleAction::Restart,
                exit_codes: ExitCodes::NotIn(vec![0, 3]),
            }],
        };
        assert!(should_restart(Never, &c, 1, false));
        assert!(!should_restart(Never, &c, 3, false));
        assert!(!should_restart(Never, &c, 0, false));
    }

    #[test]
    fn restart_all_rules_and_the_first_match() {
        let rule = |action, codes| RestartRule {
            action,
            exit_codes: codes,
        };
        let c = ContainerRestart {
            policy: Some(Never),
            rules: vec![
                rule(RuleAction::Restart, ExitCodes::In(vec![42])),
                rule(
                    RuleAction::RestartAllContainers,
                    ExitCodes::In(vec![42, 88]),
                ),
            ],
        };
        // 42 matches the first rule first.
        let then = |code| outcome(Always, &c, false, code);
        assert_eq!(
            then(42),
            Outcome {
                then: Then::Restarts,
                by: DecidedBy::Rule(0)
            }
        );
        assert_eq!(
            then(88),
            Outcome {
                then: Then::RestartsAll,
                by: DecidedBy::Rule(1)
            }
        );
        assert_eq!(
            then(1),
            Outcome {
                then: Then::Stays,
                by: DecidedBy::ContainerPolicy(Never)
            }
        );
        assert!(c.restarts_all());
        // Without a container-level policy the rules are not read (validation refuses them).
        let c = ContainerRestart {
            policy: None,
            rules: c.rules,
        };
        assert_eq!(
            outcome(Never, &c, false, 88),
            Outcome {
                then: Then::Stays,
                by: DecidedBy::PodPolicy(Never)
            }
        );
        assert!(!c.restarts_all());
    }
}
