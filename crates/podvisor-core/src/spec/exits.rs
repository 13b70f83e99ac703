//! What each container's exit leads to, per exit code, for `explain`: its
//! `restartPolicyRules` first (KEP-5307, KEP-5532), then its own `restartPolicy`, then the
//! pod's, as the kubelet reads them (`restart::outcome`); and warnings about rules that can
//! never apply, change nothing, or restart every container in a loop.

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::explain::Warning;
use super::plan::container_restart;
use crate::restart::{outcome, ContainerRestart, DecidedBy, RestartPolicy, RuleAction, Then};

/// Exit codes a process can have: 0–255 (death by signal N is 128+N).
const CODES: std::ops::RangeInclusive<i32> = 0..=255;

/// One container's exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerExits {
    pub name: String,
    /// `init`, `sidecar` or `main`.
    pub kind: &'static str,
    pub rows: Vec<ExitRow>,
}

/// What exit code(s) lead to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitRow {
    /// `Some(code)`, or `None` for every code not listed before.
    pub code: Option<i32>,
    pub then: Then,
    pub by: DecidedBy,
}

impl ExitRow {
    pub fn codes_text(&self) -> String {
        self.code
            .map_or_else(|| "any other code".to_string(), |c| c.to_string())
    }

    pub fn then_text(&self) -> &'static str {
        match self.then {
            Then::Completes => "completes: the next container starts",
            Then::Stays => "nothing: it stays terminated",
            Then::FailsPod => "the pod fails",
            Then::Restarts => "restart this container",
            Then::RestartsAll => "restart all containers (in place, volumes kept)",
        }
    }

    pub fn by_text(&self) -> String {
        let policy = |p: RestartPolicy| match p {
            RestartPolicy::Always => "Always",
            RestartPolicy::OnFailure => "OnFailure",
            RestartPolicy::Never => "Never",
        };
        match self.by {
            DecidedBy::Rule(n) => format!("restartPolicyRules[{n}]"),
            DecidedBy::ContainerPolicy(p) => format!("its restartPolicy: {}", policy(p)),
            DecidedBy::PodPolicy(p) => format!("the pod's restartPolicy: {}", policy(p)),
            DecidedBy::Success => "init container succeeded".to_string(),
        }
    }
}

/// Every container's exits, init containers first, and the warnings about its rules. `prefix`:
/// where the pod spec sits (`spec`, `spec.template.spec`).
pub fn explain_exits(spec: &PodSpec, prefix: &str) -> (Vec<ContainerExits>, Vec<Warning>) {
    let pod_policy = match spec.restart_policy.as_deref() {
        Some("OnFailure") => RestartPolicy::OnFailure,
        Some("Never") => RestartPolicy::Never,
        _ => RestartPolicy::Always,
    };
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for (path, kind, c) in super::containers_in_order(spec, prefix) {
        let restart = container_restart(c);
        let regular_init = kind == crate::lifecycle::Kind::Init;
        let kind = match kind {
            crate::lifecycle::Kind::Init => "init",
            crate::lifecycle::Kind::Sidecar => "sidecar",
            crate::lifecycle::Kind::Main => "main",
        };
        let mut codes: Vec<i32> = vec![0];
        for r in &restart.rules {
            let (crate::restart::ExitCodes::In(v) | crate::restart::ExitCodes::NotIn(v)) =
                &r.exit_codes;
            codes.extend(v.iter().copied().filter(|c| CODES.contains(c)));
        }
        codes.sort_unstable();
        codes.dedup();
        let other = (1..).find(|c| !codes.contains(c)).unwrap_or(1);
        let rows = codes
            .iter()
            .map(|&code| (Some(code), code))
            .chain([(None, other)])
            .map(|(code, sample)| {
                let o = outcome(pod_policy, &restart, regular_init, sample);
                ExitRow {
                    code,
                    then: o.then,
                    by: o.by,
                }
            })
            .collect();
        warnings.extend(rule_warnings(&path, c, &restart, pod_policy, regular_init));
        out.push(ContainerExits {
            name: c.name.clone(),
            kind,
            rows,
        });
    }
    (out, warnings)
}

/// Rules that can never apply, that change nothing, or that restart every container in a loop.
fn rule_warnings(
    path: &str,
    c: &Container,
    restart: &ContainerRestart,
    pod_policy: RestartPolicy,
    regular_init: bool,
) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if restart.policy.is_none() {
        // Validation refuses rules without a container-level policy.
        return warnings;
    }
    let without_rules = ContainerRestart {
        policy: restart.policy,
        rules: Vec::new(),
    };
    for (n, rule) in restart.rules.iter().enumerate() {
        let field = format!("{path}.restartPolicyRules[{n}]");
        // The codes this rule decides: it matches them and no earlier rule does.
        let decided: Vec<i32> = CODES
            .filter(|&code| restart.matching_rule(code).map(|(m, _)| m) == Some(n))
            .collect();
        if decided.is_empty() {
            let problem = if restart.rules[..n]
                .iter()
                .any(|r| CODES.clone().any(|code| r.exit_codes.matches(code)))
            {
                format!(
                    "restartPolicyRules[{n}] never applies: every exit code it matches is matched \
                     by an earlier rule first (the first matching rule wins)"
                )
            } else {
                format!("restartPolicyRules[{n}] matches no exit code (exit codes are 0–255)")
            };
            warnings.push(Warning {
                field,
                problem,
                fix: "remove it, or move it before the rule that shadows it, or list the exit \
                      codes it is meant for"
                    .into(),
            });
            continue;
        }
        match rule.action {
            RuleAction::Restart => {
                let already = decided.iter().all(|&code| {
                    outcome(pod_policy, &without_rules, regular_init, code).then == Then::Restarts
                });
                if already && !regular_init {
                    warnings.push(Warning {
                        field,
                        problem: format!(
                            "restartPolicyRules[{n}] changes nothing: the container's \
                             restartPolicy already restarts {} on these exit codes",
                            c.name
                        ),
                        fix: "remove it, or set restartPolicy: Never and keep the rules for the \
                              codes that should restart"
                            .into(),
                    });
                }
            }
            RuleAction::RestartAllContainers if decided.contains(&0) => {
                warnings.push(Warning {
                    field,
                    problem: format!(
                        "restartPolicyRules[{n}] restarts every container when {} exits 0: \
                         each successful run starts the pod over, so it never completes{}",
                        c.name,
                        if regular_init {
                            " and never gets past its init containers"
                        } else {
                            ""
                        }
                    ),
                    fix: "match only the exit codes that mean \"start over\", e.g. operator: \
                          In, values: [88]"
                        .into(),
                });
            }
            RuleAction::RestartAllContainers if regular_init => {
                warnings.push(Warning {
                    field,
                    problem: format!(
                        "restartPolicyRules[{n}] on init container {} restarts every container, \
                         which runs {} again: a failure that persists restarts the pod forever \
                         (each time after the CrashLoopBackOff delay)",
                        c.name, c.name
                    ),
                    fix: "make sure a rerun can succeed, or bound the loop with a Supervision \
                          podRestart (maxPodRestarts, then GaveUp)"
                        .into(),
                });
            }
            RuleAction::RestartAllContainers => {}
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> PodSpec {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n{text}");
        crate::spec::load("p.yaml", &text)
            .expect("valid")
            .workload
            .spec
    }

    #[test]
    fn each_code_with_what_decides_it() {
        let s = spec(
            "  restartPolicy: Never
  initContainers:
  - name: setup
    command: [x]
  - name: side
    command: [x]
    restartPolicy: Always
    restartPolicyRules:
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [3]}}
  containers:
  - name: app
    command: [x]
    restartPolicy: Never
    restartPolicyRules:
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [88]}}
    - {action: Restart, exitCodes: {operator: NotIn, values: [0]}}
",
        );
        let (exits, warnings) = explain_exits(&s, "spec");
        assert!(warnings.is_empty(), "{warnings:#?}");
        let table: Vec<(String, Vec<String>)> = exits
            .iter()
            .map(|c| {
                (
                    format!("{} ({})", c.name, c.kind),
                    c.rows
                        .iter()
                        .map(|r| format!("{}: {} ({})", r.codes_text(), r.then_text(), r.by_text()))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            table,
            [
                (
                    "setup (init)".to_string(),
                    vec![
                        "0: completes: the next container starts (init container succeeded)"
                            .to_string(),
                        "any other code: the pod fails (the pod's restartPolicy: Never)".into(),
                    ]
                ),
                (
                    "side (sidecar)".into(),
                    vec![
                        "0: restart this container (its restartPolicy: Always)".into(),
                        "3: restart all containers (in place, volumes kept) \
                         (restartPolicyRules[0])"
                            .into(),
                        "any other code: restart this container (its restartPolicy: Always)".into(),
                    ]
                ),
                (
                    "app (main)".into(),
                    vec![
                        "0: nothing: it stays terminated (its restartPolicy: Never)".into(),
                        "88: restart all containers (in place, volumes kept) \
                         (restartPolicyRules[0])"
                            .into(),
                        "any other code: restart this container (restartPolicyRules[1])".into(),
                    ]
                ),
            ]
        );
    }

    #[test]
    fn rules_that_never_apply_change_nothing_or_loop() {
        let s = spec(
            "  initContainers:
  - name: fetch
    command: [x]
    restartPolicy: OnFailure
    restartPolicyRules:
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [7]}}
    - {action: RestartAllContainers, exitCodes: {operator: NotIn, values: [1]}}
  containers:
  - name: app
    command: [x]
    restartPolicy: Always
    restartPolicyRules:
    - {action: Restart, exitCodes: {operator: In, values: [42]}}
    - {action: Restart, exitCodes: {operator: NotIn, values: []}}
    - {action: RestartAllContainers, exitCodes: {operator: In, values: [88]}}
    - {action: Restart, exitCodes: {operator: In, values: []}}
",
        );
        let (_, warnings) = explain_exits(&s, "spec");
        let seen: Vec<(&str, &str)> = warnings
            .iter()
            .map(|w| {
                let gist = w.problem.split(':').next().unwrap_or("");
                (w.field.as_str(), gist)
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "spec.initContainers[0].restartPolicyRules[0]",
                    "restartPolicyRules[0] on init container fetch restarts every container, which runs fetch again"
                ),
                (
                    "spec.initContainers[0].restartPolicyRules[1]",
                    "restartPolicyRules[1] restarts every container when fetch exits 0"
                ),
                (
                    "spec.containers[0].restartPolicyRules[0]",
                    "restartPolicyRules[0] changes nothing"
                ),
                (
                    "spec.containers[0].restartPolicyRules[1]",
                    "restartPolicyRules[1] changes nothing"
                ),
                (
                    "spec.containers[0].restartPolicyRules[2]",
                    "restartPolicyRules[2] never applies"
                ),
                (
                    "spec.containers[0].restartPolicyRules[3]",
                    "restartPolicyRules[3] never applies"
                ),
            ],
            "{warnings:#?}"
        );
    }
}
