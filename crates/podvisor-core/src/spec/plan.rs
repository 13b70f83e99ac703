//! From a validated manifest to what `podvisor run` executes: the lifecycle's `PodPlan` with
//! defaults applied, and for each container its argv and environment, resolved as the kubelet
//! resolves them (`$(VAR)` expansion, `valueFrom`, `envFrom`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::document::supervision::StagedInstrumentation;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, LifecycleHandler, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::env::resolve_env;
pub use super::env::{expand, parse_quantity};
use super::resources::Resources;
use super::volumes::{volume_plan, MountPlan, VolumePlan};
use super::Manifest;
use crate::backoff::BackoffPolicy;
use crate::lifecycle::Staging;
use crate::lifecycle::{ContainerPlan, Kind, PodPlan, ProbePlan, Probes};
use crate::namespaces::PodNamespaces;
use crate::probe::{ProbeKind, ProbeTiming};
use crate::restart::{ContainerRestart, ExitCodes, RestartPolicy, RestartRule, RuleAction};
use crate::security::{ImageUser, SecurityPlan, VolumeOwnership};
use crate::stage::StagedEnv;

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

/// A container started from an image: what the shell found in the image store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct ImageRoot {
    /// The image as the manifest names it.
    pub image: String,
    /// Its normalized name in the store.
    pub name: String,
    /// `imageID`: `REPOSITORY@sha256:…`.
    pub image_id: String,
    /// The unpacked layers, top first.
    pub lower_dirs: Vec<String>,
    /// The image's `/etc/passwd` as its merged layers show it (the file of the layer that
    /// shows it), if it has one: its users are named there.
    #[cfg_attr(feature = "spec", serde(default))]
    pub passwd: Option<String>,
    /// The image's `/etc/group`, found the same way.
    #[cfg_attr(feature = "spec", serde(default))]
    pub group: Option<String>,
    /// The image's `User` (`uid`, `name`, `uid:gid`, `name:group`), "" for root.
    pub user: String,
    /// The image's `StopSignal`, if it has one.
    #[cfg_attr(feature = "spec", serde(default))]
    pub stop_signal: Option<String>,
}

/// The pod's IP, and the host's (docs/pods.md).
pub const POD_IP: &str = "127.0.0.1";

/// How to run one container, its probes and its hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct ContainerExec {
    /// `command` then `args`, `$(VAR)` expanded.
    pub argv: Vec<String>,
    /// Whether the manifest set `command`, and `args` (an image's Entrypoint and Cmd fill in
    /// what it did not).
    pub command_given: bool,
    pub args_given: bool,
    /// `imagePullPolicy`, as written.
    #[cfg_attr(feature = "spec", serde(default))]
    pub pull_policy: Option<String>,
    /// The image the container runs from (`podvisor.io/root-from: image`), once found.
    #[cfg_attr(feature = "spec", serde(default))]
    pub image: Option<Box<ImageRoot>>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    pub startup: Option<Box<Handler>>,
    pub liveness: Option<Box<Handler>>,
    pub readiness: Option<Box<Handler>>,
    pub post_start: Option<Box<Handler>>,
    pub pre_stop: Option<Box<Handler>>,
    /// `volumeMounts`, in order (a `subPathExpr` expanded into `sub_path`).
    pub mounts: Vec<MountPlan>,
    /// Why a mount cannot be made from the manifest (a `subPathExpr` that expands to nothing
    /// usable): the kubelet's `CreateContainerConfigError`.
    #[cfg_attr(feature = "spec", serde(default))]
    pub mount_error: Option<String>,
    /// Requests and limits, requests defaulted from limits.
    pub resources: Resources,
    /// What it runs as and may do: the pod's and its own `securityContext`.
    pub security: SecurityPlan,
    /// `lifecycle.stopSignal` (KEP-4960).
    #[cfg_attr(feature = "spec", serde(default))]
    pub stop_signal: Option<String>,
}

impl ContainerExec {
    /// The signal that stops it, by the runtimes' order: its `lifecycle.stopSignal`, else
    /// its image's `StopSignal`, else SIGTERM; as (name, number).
    pub fn stop_signal(&self) -> (String, i32) {
        use crate::signals::{name_of, number, DEFAULT_STOP_SIGNAL};
        let image = self.image.as_ref().and_then(|i| i.stop_signal.as_deref());
        match self.stop_signal.as_deref().or(image).and_then(number) {
            Some(n) => (name_of(n), n),
            None => (DEFAULT_STOP_SIGNAL.to_string(), 15),
        }
    }

    pub fn probe(&self, kind: ProbeKind) -> Option<&Handler> {
        match kind {
            ProbeKind::Startup => self.startup.as_deref(),
            ProbeKind::Liveness => self.liveness.as_deref(),
            ProbeKind::Readiness => self.readiness.as_deref(),
        }
    }
}

/// A probe or hook action, resolved: named ports looked up, `$(VAR)` expanded, host defaulted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub enum Handler {
    Exec {
        command: Vec<String>,
    },
    Http {
        /// `http` or `https`.
        scheme: String,
        host: String,
        port: u16,
        path: String,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: String,
        port: u16,
    },
    Grpc {
        port: u16,
        service: String,
    },
    Sleep(Duration),
    /// What cannot run (a tcpSocket hook, which the API accepts and the kubelet fails at run
    /// time; a port that does not resolve): running it is an error with this message.
    Invalid(String),
}

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

fn container_exec(c: &Container, manifest: &Manifest, pod: &PodFacts<'_>) -> ContainerExec {
    let env = resolve_env(c, manifest, pod);
    let vars: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let argv = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .map(|a| expand(a, &vars))
        .collect();
    // Probe and hook commands see only the literal values of the container's own `env`
    // (`ExpandContainerCommandOnlyStatic`).
    let statics: BTreeMap<&str, &str> = c
        .env
        .iter()
        .flatten()
        .filter(|v| v.value_from.is_none())
        .map(|v| (v.name.as_str(), v.value.as_deref().unwrap_or("")))
        .collect();
    let probe = |p: &Option<Probe>| {
        p.as_ref().map(|p| {
            if let Some(e) = &p.exec {
                exec_handler(e.command.as_deref(), &statics)
            } else if let Some(h) = &p.http_get {
                http_handler(h, c)
            } else if let Some(t) = &p.tcp_socket {
                match resolve_port(&t.port, c) {
                    Ok(port) => Handler::Tcp {
                        host: t.host.clone().unwrap_or_else(|| POD_IP.to_string()),
                        port,
                    },
                    Err(e) => Handler::Invalid(e),
                }
            } else if let Some(g) = &p.grpc {
                Handler::Grpc {
                    port: u16::try_from(g.port).unwrap_or(0),
                    service: g.service.clone().unwrap_or_default(),
                }
            } else {
                Handler::Invalid("probe has no handler".into())
            }
        })
    };
    let hook = |h: Option<&LifecycleHandler>| {
        h.map(|h| {
            if let Some(e) = &h.exec {
                exec_handler(e.command.as_deref(), &statics)
            } else if let Some(g) = &h.http_get {
                http_handler(g, c)
            } else if let Some(s) = &h.sleep {
                Handler::Sleep(Duration::from_secs(s.seconds.max(0) as u64))
            } else if h.tcp_socket.is_some() {
                Handler::Invalid("tcpSocket is not supported in a lifecycle hook".into())
            } else {
                Handler::Invalid("hook has no handler".into())
            }
        })
    };
    let mut mount_error = None;
    let mut mounts = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let sub_path = match m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            None => Ok(m.sub_path.clone().filter(|p| !p.is_empty())),
            Some(expr) => expand_sub_path(expr, &vars).map(Some),
        };
        mounts.push(MountPlan {
            volume: m.name.clone(),
            path: m.mount_path.clone(),
            sub_path: sub_path.unwrap_or_else(|e| {
                mount_error.get_or_insert(e);
                None
            }),
            read_only: m.read_only.unwrap_or(false),
        });
    }
    let lifecycle = c.lifecycle.as_ref();
    ContainerExec {
        argv,
        command_given: c.command.as_ref().is_some_and(|v| !v.is_empty()),
        args_given: c.args.as_ref().is_some_and(|v| !v.is_empty()),
        image: None,
        pull_policy: c.image_pull_policy.clone(),
        env,
        working_dir: c.working_dir.clone(),
        startup: probe(&c.startup_probe).map(Box::new),
        liveness: probe(&c.liveness_probe).map(Box::new),
        readiness: probe(&c.readiness_probe).map(Box::new),
        post_start: hook(lifecycle.and_then(|l| l.post_start.as_ref())).map(Box::new),
        pre_stop: hook(lifecycle.and_then(|l| l.pre_stop.as_ref())).map(Box::new),
        mounts,
        mount_error,
        resources: Resources::of(c.resources.as_ref()),
        security: super::security::plan(&manifest.workload.spec, c, pod.host),
        stop_signal: lifecycle.and_then(|l| l.stop_signal.clone()),
    }
}

/// A `subPathExpr` expanded with the container's environment, as the kubelet's
/// `ExpandContainerVolumeMounts` and `makeMounts`: a variable with no value (absent or empty)
/// is an error, and so is a result that is absolute or has a `..` element.
fn expand_sub_path(expr: &str, vars: &BTreeMap<&str, &str>) -> Result<String, String> {
    let mut missing = BTreeSet::new();
    let sub = super::env::expand_with(expr, |name| {
        let value = vars.get(name).copied().filter(|v| !v.is_empty());
        if value.is_none() {
            missing.insert(name.to_string());
        }
        Some(value.unwrap_or(""))
    });
    if !missing.is_empty() {
        let names: Vec<String> = missing.into_iter().collect();
        return Err(format!("missing value for {}", names.join(", ")));
    }
    if sub.starts_with('/') {
        return Err(format!(
            "error SubPath `{sub}` must not be an absolute path"
        ));
    }
    if sub.split('/').any(|e| e == "..") {
        return Err(format!(
            "unable to provision SubPath `{sub}`: must not contain '..'"
        ));
    }
    Ok(sub)
}

fn exec_handler(command: Option<&[String]>, statics: &BTreeMap<&str, &str>) -> Handler {
    Handler::Exec {
        command: command
            .unwrap_or_default()
            .iter()
            .map(|a| expand(a, statics))
            .collect(),
    }
}

fn http_handler(h: &HTTPGetAction, c: &Container) -> Handler {
    let port = match resolve_port(&h.port, c) {
        Ok(port) => port,
        Err(e) => return Handler::Invalid(e),
    };
    Handler::Http {
        scheme: h.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase(),
        host: h.host.clone().unwrap_or_else(|| POD_IP.to_string()),
        port,
        path: h.path.clone().unwrap_or_default(),
        headers: h
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
    }
}

/// A port by number, or by the name of one of the container's ports (`findPortByName`, with the
/// kubelet's last resort of a number written as a string).
fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .or_else(|| name.parse().ok())
            .ok_or_else(|| format!("port {name} not found"))?,
    };
    u16::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("invalid port number: {n}"))
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
