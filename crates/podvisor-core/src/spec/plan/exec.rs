//! How one container runs: its argv and environment, resolved as the kubelet resolves them
//! (`$(VAR)` expansion, `valueFrom`, `envFrom`), its mounts' `subPathExpr`s expanded, and its
//! probes and hooks made `Handler`s (named ports looked up, hosts defaulted).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, LifecycleHandler, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{expand, PodFacts, POD_IP};
use crate::probe::ProbeKind;
use crate::security::SecurityPlan;
use crate::spec::env::resolve_env;
use crate::spec::resources::Resources;
use crate::spec::termination::TerminationMessage;
use crate::spec::volumes::{MountPlan, Propagation, RecursiveReadOnly};
use crate::spec::Manifest;

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
    /// `terminationMessagePath` and `terminationMessagePolicy`.
    #[cfg_attr(feature = "spec", serde(default))]
    pub termination: TerminationMessage,
    /// `stdin`, `stdinOnce` and `tty`: what its standard streams are.
    #[cfg_attr(feature = "spec", serde(default))]
    pub stdio: StdioPlan,
}

/// A container's standard streams, as CRI gives them: with `tty`, a terminal of its own is
/// its stdin, stdout and stderr (and its controlling terminal), its output logged as stdout;
/// without, pipes. With `stdin`, its stdin stays open (it is what `kubectl attach` writes
/// to); without it (and no terminal), it is /dev/null. (`stdinOnce` closes that stdin when
/// the first attach ends: with no attach here, nothing reads it.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "spec", serde(deny_unknown_fields))]
pub struct StdioPlan {
    pub stdin: bool,
    pub tty: bool,
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

pub(super) fn container_exec(
    c: &Container,
    manifest: &Manifest,
    pod: &PodFacts<'_>,
) -> ContainerExec {
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
            propagation: Propagation::of(m.mount_propagation.as_deref()),
            recursive_read_only: RecursiveReadOnly::of(m.recursive_read_only.as_deref()),
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
        security: crate::spec::security::plan(&manifest.workload.spec, c, pod.host),
        stop_signal: lifecycle.and_then(|l| l.stop_signal.clone()),
        termination: TerminationMessage::of(
            c.termination_message_path.as_deref(),
            c.termination_message_policy.as_deref(),
        ),
        stdio: StdioPlan {
            stdin: c.stdin.unwrap_or(false),
            tty: c.tty.unwrap_or(false),
        },
    }
}

/// A `subPathExpr` expanded with the container's environment, as the kubelet's
/// `ExpandContainerVolumeMounts` and `makeMounts`: a variable with no value (absent or empty)
/// is an error, and so is a result that is absolute or has a `..` element.
fn expand_sub_path(expr: &str, vars: &BTreeMap<&str, &str>) -> Result<String, String> {
    let mut missing = BTreeSet::new();
    let sub = crate::spec::env::expand_with(expr, |name| {
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
