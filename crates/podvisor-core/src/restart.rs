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
    fn matches(&self, code: i32) -> bool {
        match self {
            ExitCodes::In(v) => v.contains(&code),
            ExitCodes::NotIn(v) => !v.contains(&code),
        }
    }
}

/// One of a container's `restartPolicyRules`. `Restart` is the only action Kubernetes defines.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct RestartRule {
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

/// Whether a regular (or sidecar) container that exited with `exit_code` is started again.
/// `pod_terminating`: the pod is being stopped, so nothing restarts.
pub fn should_restart(
    pod_policy: RestartPolicy,
    container: &ContainerRestart,
    exit_code: i32,
    pod_terminating: bool,
) -> bool {
    if pod_terminating {
        return false;
    }
    // The first rule whose exit codes match decides (its only action is Restart).
    if container
        .rules
        .iter()
        .any(|r| r.exit_codes.matches(exit_code))
    {
        return true;
    }
    match container.policy.unwrap_or(pod_policy) {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => exit_code != 0,
        RestartPolicy::Never => false,
    }
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
                exit_codes: ExitCodes::In(vec![42]),
            }],
        };
        assert!(should_restart(Always, &c, 42, false));
        assert!(!should_restart(Always, &c, 1, false));
        // NotIn: restart on anything but the listed codes.
        let c = ContainerRestart {
            policy: Some(Never),
            rules: vec![RestartRule {
                exit_codes: ExitCodes::NotIn(vec![0, 3]),
            }],
        };
        assert!(should_restart(Never, &c, 1, false));
        assert!(!should_restart(Never, &c, 3, false));
        assert!(!should_restart(Never, &c, 0, false));
    }
}
