//! From a validated manifest to what `podvisor run` executes: the lifecycle's `PodPlan` with
//! defaults applied, and for each container how it runs (`exec`).

mod exec;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::document::supervision::StagedInstrumentation;
use k8s_openapi::api::core::v1::{Container, Probe};

pub use super::env::{expand, parse_quantity};
use super::resources::Resources;
use super::volumes::{volume_plan, VolumePlan};
use super::Manifest;
use crate::backoff::BackoffPolicy;
use crate::lifecycle::Staging;
use crate::lifecycle::{ContainerPlan, Kind, PodPlan, ProbePlan, Probes};
use crate::namespaces::PodNamespaces;
use crate::probe::ProbeTiming;
use crate::restart::{ContainerRestart, ExitCodes, RestartPolicy, RestartRule, RuleAction};
use crate::security::{ImageUser, VolumeOwnership};
use crate::stage::StagedEnv;
use exec::container_exec;
pub use exec::{ContainerExec, Handler, ImageRoot, StdioPlan};

/// Facts about the host that the downward API exposes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    pub hostname: String,
    /// The pod's UID (podvisor makes one per run).
    pub uid: String,
    /// Logical CPUs and memory in bytes: a resource with no limit reports the node's.
    pub cpus: u64,
    pub memory: u64,
    /// The capabilities podvisor holds (its effective set): what `ALL` and `privileged` give,
    /// as containerd gives the capabilities of its own process (`WithAllCurrentCapabilities`),
    /// which in a restricted host are fewer than the kernel knows.
    pub all_capabilities: crate::security::CapSet,
    /// The kubelet's `--seccomp-default`: RuntimeDefault for containers that name no profile.
    pub seccomp_default: bool,
}

/// The pod annotation that gives containers the host's root read-write (`writable`).
pub const HOST_ROOT: &str = "podvisor.io/host-root";

/// The pod annotation that says where containers' roots come from: `image` (each container's
/// image, pulled or loaded into podvisor's image store: the default, as under the kubelet) or
/// `host` (the host's root under a private layer).
pub const ROOT_FROM: &str = "podvisor.io/root-from";

/// Whether a pod with these annotations runs its containers from their images: unless it
/// asks for the host's root.
pub fn roots_from_images(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ROOT_FROM))
        .is_none_or(|v| v != "host")
}

/// The pod's IP, and the host's (docs/pods.md).
pub const POD_IP: &str = "127.0.0.1";

/// Everything `podvisor run` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct RunPlan {
    pub namespace: String,
    /// Shared with the pod's state machine (`Pod::new`), which holds the same plan.
    pub pod: std::sync::Arc<PodPlan>,
    /// Same order as `pod.containers`.
    pub exec: Vec<ContainerExec>,
    pub volumes: Vec<VolumePlan>,
    /// `fsGroup`: the group that owns the volumes that support it.
    pub ownership: VolumeOwnership,
    /// The pod's UTS, IPC and PID namespaces and its sysctls.
    pub namespaces: PodNamespaces,
    /// The pod's effective requests and limits (its cgroup's).
    pub pod_resources: Resources,
    /// `podvisor.io/host-root: writable`: containers write to the host's root instead of a
    /// private layer.
    pub host_root_writable: bool,
    /// The variables of staged instrumentation (for the containers `pod.staging` applies to).
    pub staged_env: StagedEnv,
    /// Each container's root is its image (unless `podvisor.io/root-from: host`).
    #[cfg_attr(feature = "spec", serde(default))]
    pub root_from_image: bool,
    /// `imagePullSecrets`: the `.dockerconfigjson` of each such Secret of the file, in order
    /// (a name the file has no such Secret for is left out, as the kubelet goes on without it).
    #[cfg_attr(feature = "spec", serde(default))]
    pub pull_secrets: Vec<String>,
    /// The kubelet's feature gate ContainerStopSignals (alpha, off): containers' status shows
    /// their stop signal, and `lifecycle.stopSignal` may be set.
    #[cfg_attr(feature = "spec", serde(default))]
    pub container_stop_signals: bool,
    /// The spec sets pod-level `resources` (KEP-2837): `pod_resources` are those, and a
    /// container without a limit has the pod's in its own cgroup. Only on cgroup v2.
    #[cfg_attr(feature = "spec", serde(default))]
    pub pod_level_resources: bool,
    /// `hostAliases`, `dnsPolicy` and `dnsConfig`: the pod's `/etc/hosts` and
    /// `/etc/resolv.conf`.
    #[cfg_attr(feature = "spec", serde(default))]
    pub dns: super::dns::PodDns,
}

/// A probe's timing with the API's defaults (`SetDefaults_Probe`) for what it leaves out or
/// sets to 0 (`initialDelaySeconds` stays 0).
pub fn probe_timing(p: &Probe) -> ProbeTiming {
    let d = ProbeTiming::default();
    let secs = |v: Option<i32>, default: Duration| {
        v.filter(|v| *v > 0)
            .map_or(default, |v| Duration::from_secs(v as u64))
    };
    let count = |v: Option<i32>, default: u32| v.filter(|v| *v > 0).map_or(default, |v| v as u32);
    ProbeTiming {
        initial_delay: secs(p.initial_delay_seconds, Duration::ZERO),
        period: secs(p.period_seconds, d.period),
        timeout: secs(p.timeout_seconds, d.timeout),
        success_threshold: count(p.success_threshold, d.success_threshold),
        failure_threshold: count(p.failure_threshold, d.failure_threshold),
    }
}

/// The kubelet's default grace (`DefaultTerminationGracePeriodSeconds`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

fn restart_policy(s: Option<&str>) -> Option<RestartPolicy> {
    match s? {
        "Always" => Some(RestartPolicy::Always),
        "OnFailure" => Some(RestartPolicy::OnFailure),
        "Never" => Some(RestartPolicy::Never),
        _ => None,
    }
}

/// Builds the run plan of a valid manifest.
pub fn plan(manifest: &Manifest, host: &HostFacts, backoff: BackoffPolicy) -> RunPlan {
    let w = &manifest.workload;
    let name = w.metadata.name.clone().unwrap_or_default();
    let namespace = w
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let meta = w.template_metadata.as_ref();
    let labels = meta
        .and_then(|m| m.labels.clone())
        .or_else(|| w.metadata.labels.clone())
        .unwrap_or_default();
    let annotations = meta
        .and_then(|m| m.annotations.clone())
        .or_else(|| w.metadata.annotations.clone())
        .unwrap_or_default();
    let root_from_image = roots_from_images(Some(&annotations));
    let facts = PodFacts {
        name: &name,
        namespace: &namespace,
        labels: &labels,
        annotations: &annotations,
        service_account: w.spec.service_account_name.as_deref().unwrap_or("default"),
        host,
    };
    // Validation has refused what these could not use.
    let staged = manifest
        .supervision
        .as_ref()
        .and_then(|s| s.spec.staged_instrumentation.as_ref())
        .filter(|s| s.is_enabled());
    let staging = staged.and_then(|s| {
        Some(Staging {
            policy: s.policy().ok()?,
            verdict_after: s.verdict_after().ok()?,
        })
    });
    let pod_restart = manifest
        .supervision
        .as_ref()
        .and_then(|s| s.spec.pod_restart.as_ref())
        .and_then(|r| r.policy().ok());
    // The pod's image volumes, in order: each container names those it mounts.
    let image_volumes: Vec<(&str, String)> = (w.spec.volumes.iter().flatten())
        .filter_map(|v| {
            let reference = v.image.as_ref()?.reference.clone().unwrap_or_default();
            Some((v.name.as_str(), reference))
        })
        .collect();
    let mut containers = Vec::new();
    let mut exec = Vec::new();
    for (_, kind, c) in super::containers_in_order(&w.spec, "spec") {
        let x = container_exec(c, manifest, &facts);
        let mut p = container_plan(c, kind, staged);
        // On the host's root the default user is root; from an image, the image's user (the
        // shell sets the check once it has the image).
        p.non_root = x.security.non_root(ImageUser::root());
        p.config_error = x.mount_error.clone();
        if root_from_image {
            p.image = Some(c.image.clone().unwrap_or_default());
        }
        for m in c.volume_mounts.iter().flatten() {
            let v = image_volumes.iter().position(|(n, _)| *n == m.name);
            if let Some(v) = v.filter(|v| !p.image_volumes.contains(v)) {
                p.image_volumes.push(v);
            }
        }
        containers.push(p);
        exec.push(x);
    }
    let grace = w
        .spec
        .termination_grace_period_seconds
        .map_or(DEFAULT_GRACE, |s| Duration::from_secs(s.max(0) as u64));
    let volumes = w
        .spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| volume_plan(v, manifest, &facts))
        .collect();
    // Pod-level resources (KEP-2837) when the spec sets them, else the containers' sum.
    let allocation = super::resources::allocate(&w.spec);
    for (x, (_, r)) in exec.iter_mut().zip(&allocation.containers) {
        x.resources = *r;
    }
    let pod_resources = allocation.pod;
    RunPlan {
        volumes,
        ownership: super::security::volume_ownership(&w.spec),
        namespaces: super::security::namespaces(&w.spec, &name, &namespace),
        pod_resources,
        host_root_writable: annotations.get(HOST_ROOT).is_some_and(|v| v == "writable"),
        root_from_image,
        pull_secrets: (w.spec.image_pull_secrets.iter().flatten())
            .filter_map(|r| manifest.secret_data(&r.name)?.remove(".dockerconfigjson"))
            .collect(),
        // The node's gate: its shell sets it.
        container_stop_signals: false,
        pod_level_resources: allocation.pod_level,
        dns: super::dns::PodDns::of(&w.spec),
        namespace: namespace.clone(),
        pod: std::sync::Arc::new(PodPlan {
            name,
            namespace: namespace.clone(),
            uid: host.uid.clone(),
            restart_policy: restart_policy(w.spec.restart_policy.as_deref()).unwrap_or_default(),
            grace,
            containers,
            backoff,
            staging,
            pod_restart,
            // The shell seeds it (podvisor run); a plan alone is deterministic.
            probe_jitter_seed: None,
            sidecars_restart_in_termination: false,
            image_volumes: image_volumes.into_iter().map(|(_, r)| r).collect(),
            active_deadline: (w.spec.active_deadline_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(s as u64)),
            readiness_gates: (w.spec.readiness_gates.iter().flatten())
                .map(|g| g.condition_type.clone())
                .collect(),
        }),
        exec,
        staged_env: staged.map(|s| s.staged_env()).unwrap_or_default(),
    }
}

impl RunPlan {
    /// Each container's stop signal, as its status shows it: only with the gate
    /// ContainerStopSignals (as the kubelet fills the field in only then).
    pub fn stop_signal_names(&self) -> Vec<String> {
        match self.container_stop_signals {
            true => self.exec.iter().map(|x| x.stop_signal().0).collect(),
            false => Vec::new(),
        }
    }
}

/// One container as the core runs it: its kind, restart policy and rules, probes, hooks, and
/// whether its starts are staged.
fn container_plan(
    c: &Container,
    kind: Kind,
    staged: Option<&StagedInstrumentation>,
) -> ContainerPlan {
    let probe = |p: &Option<Probe>| {
        p.as_ref().map(|p| ProbePlan {
            timing: probe_timing(p),
            grace: p
                .termination_grace_period_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64)),
        })
    };
    let lifecycle = c.lifecycle.as_ref();
    ContainerPlan {
        name: c.name.clone(),
        kind,
        restart: container_restart(c),
        probes: Probes {
            startup: probe(&c.startup_probe),
            liveness: probe(&c.liveness_probe),
            readiness: probe(&c.readiness_probe),
        },
        post_start: lifecycle.is_some_and(|l| l.post_start.is_some()),
        pre_stop: lifecycle.is_some_and(|l| l.pre_stop.is_some()),
        staged: staged.is_some_and(|s| s.selects(&c.name)),
        non_root: None,
        image: None,
        image_volumes: Vec::new(),
        config_error: None,
    }
}

/// The container's `restartPolicy` and `restartPolicyRules` as the core reads them.
pub(crate) fn container_restart(c: &Container) -> ContainerRestart {
    ContainerRestart {
        policy: restart_policy(c.restart_policy.as_deref()),
        rules: restart_rules(c),
    }
}

/// The container's `restartPolicyRules` (validation refused unknown actions and operators).
fn restart_rules(c: &Container) -> Vec<RestartRule> {
    c.restart_policy_rules
        .iter()
        .flatten()
        .filter_map(|r| {
            let action = match r.action.as_str() {
                "Restart" => RuleAction::Restart,
                "RestartAllContainers" => RuleAction::RestartAllContainers,
                _ => return None,
            };
            let codes = r.exit_codes.as_ref()?;
            let values = codes.values.clone().unwrap_or_default();
            let exit_codes = match codes.operator.as_str() {
                "In" => ExitCodes::In(values),
                "NotIn" => ExitCodes::NotIn(values),
                _ => return None,
            };
            Some(RestartRule { action, exit_codes })
        })
        .collect()
}

/// What the downward API reads of the pod and its host.
pub(super) struct PodFacts<'a> {
    pub(super) name: &'a str,
    pub(super) namespace: &'a str,
    pub(super) labels: &'a BTreeMap<String, String>,
    pub(super) annotations: &'a BTreeMap<String, String>,
    pub(super) service_account: &'a str,
    pub(super) host: &'a HostFacts,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostFacts {
        HostFacts {
            all_capabilities: crate::security::CapSet::all(40),
            seccomp_default: false,
            hostname: "node1".into(),
            uid: "uid-1".into(),
            cpus: 2,
            memory: 1 << 30,
        }
    }

    #[test]
    fn a_sub_path_expr_is_expanded_with_the_containers_environment() {
        let text = r#"
apiVersion: v1
kind: Pod
metadata: {name: web-0, annotations: {podvisor.io/root-from: host}}
spec:
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: app
    command: [app]
    env:
    - {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: EMPTY, value: ''}
    - {name: UP, value: '..'}
    volumeMounts:
    - {name: data, mountPath: /a, subPathExpr: 'logs/$(POD)/$$(x)'}
    - {name: data, mountPath: /b, subPath: plain}
  - name: missing
    command: [app]
    env: [{name: EMPTY, value: ''}]
    volumeMounts: [{name: data, mountPath: /a, subPathExpr: '$(NOPE)-$(EMPTY)-$(NOPE)'}]
  - name: up
    command: [app]
    env: [{name: UP, value: '..'}]
    volumeMounts: [{name: data, mountPath: /a, subPathExpr: 'x/$(UP)/y'}]
"#;
        let manifest = crate::spec::load("web.yaml", text).expect("valid");
        let plan = plan(&manifest, &host(), BackoffPolicy::default());
        let subs: Vec<_> = plan.exec[0]
            .mounts
            .iter()
            .map(|m| m.sub_path.as_deref())
            .collect();
        assert_eq!(subs, [Some("logs/web-0/$(x)"), Some("plain")]);
        assert_eq!(plan.pod.containers[0].config_error, None);
        assert_eq!(
            plan.pod.containers[1].config_error.as_deref(),
            Some("missing value for EMPTY, NOPE")
        );
        assert_eq!(
            plan.pod.containers[2].config_error.as_deref(),
            Some("unable to provision SubPath `x/../y`: must not contain '..'")
        );
    }

    #[test]
    fn plans_a_pod_with_everything_resolved() {
        let text = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo, annotations: {podvisor.io/root-from: host}}
spec:
  selector: {}
  template:
    metadata: {labels: {app: web}}
    spec:
      restartPolicy: Always
      terminationGracePeriodSeconds: 5
      initContainers:
      - {name: setup, command: [sh, -c, 'echo $(POD)'], env: [{name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}
      - {name: side, restartPolicy: Always, command: [sleep, '100']}
      containers:
      - name: app
        command: [app, --greet=$(GREETING), --ns=$(NS), $(UNDEFINED), $$(ESCAPED)]
        args: [--ip=$(IP)]
        workingDir: /tmp
        resources: {limits: {memory: 64Mi}}
        envFrom:
        - configMapRef: {name: cfg}
          prefix: CFG_
        - secretRef: {name: creds}
        env:
        - {name: GREETING, valueFrom: {configMapKeyRef: {name: cfg, key: greeting}}}
        - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
        - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
        - {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
        - {name: CPU, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
        - {name: BOTH, value: '$(NS)/$(APP)'}
        - {name: password, value: overridden}
        restartPolicy: Always
        restartPolicyRules:
        - {action: Restart, exitCodes: {operator: In, values: [42]}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {greeting: hello, other: x}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
data: {password: c2VjcmV0}
"#;
        let manifest = crate::spec::load("web.yaml", text).expect("valid");
        let plan = plan(&manifest, &host(), BackoffPolicy::default());
        assert_eq!(plan.namespace, "demo");
        assert_eq!(plan.pod.name, "web");
        assert_eq!(plan.pod.grace, Duration::from_secs(5));
        let kinds: Vec<(&str, Kind)> = plan
            .pod
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("setup", Kind::Init),
                ("side", Kind::Sidecar),
                ("app", Kind::Main)
            ]
        );
        assert_eq!(
            plan.pod.containers[2].restart.rules,
            [RestartRule {
                action: RuleAction::Restart,
                exit_codes: ExitCodes::In(vec![42])
            }]
        );
        assert_eq!(plan.exec[0].argv, ["sh", "-c", "echo web"]);
        let app = &plan.exec[2];
        assert_eq!(
            app.argv,
            [
                "app",
                "--greet=hello",
                "--ns=demo",
                "$(UNDEFINED)",
                "$(ESCAPED)",
                "--ip=127.0.0.1"
            ]
        );
        assert_eq!(app.working_dir.as_deref(), Some("/tmp"));
        let env: BTreeMap<&str, &str> = app
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(env["CFG_greeting"], "hello");
        assert_eq!(env["CFG_other"], "x");
        assert_eq!(env["password"], "overridden");
        assert_eq!(env["APP"], "web");
        assert_eq!(env["NODE"], "node1");
        assert_eq!(env["MEM"], "64");
        assert_eq!(env["CPU"], "2");
        assert_eq!(env["BOTH"], "demo/web");
        // envFrom comes first, env after, in order.
        let order: Vec<&str> = app.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(order[..3], ["CFG_greeting", "CFG_other", "password"]);
    }

    #[test]
    fn defaults() {
        let manifest = crate::spec::load(
            "p.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {podvisor.io/root-from: host}}\nspec:\n  containers: [{name: c, command: [x]}]\n",
        )
        .unwrap();
        let plan = plan(&manifest, &host(), BackoffPolicy::default());
        assert_eq!(plan.namespace, "default");
        assert_eq!(plan.pod.restart_policy, RestartPolicy::Always);
        assert_eq!(plan.pod.grace, DEFAULT_GRACE);
    }
}
