//! `podvisor run [FLAGS] FILE`: runs the pod in FILE in the foreground until it is Succeeded or
//! Failed, or until SIGTERM / SIGINT (then graceful termination). Exit 0 when Succeeded or
//! stopped on request, 1 when Failed, 2 on bad input.

use std::path::PathBuf;

use podvisor_core::lifecycle::Phase;
use podvisor_core::spec::plan::{plan, HostFacts, RunPlan};

use podvisor_core::spec::node::Gate;

use super::manifest::{load, size};
use crate::process::sys;
use crate::state::logs::LogLimits;
use crate::state::StateDir;
use crate::status::PodInfo;
use crate::supervisor::{self, events::EventSink, Settings};

/// `podvisor run`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Logs and state (default $XDG_STATE_HOME/podvisor/NS/POD; as root /var/lib/podvisor/NS/POD)
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Also write events as JSON lines to FILE (- for stdout)
    #[arg(long, value_name = "FILE|-")]
    events: Option<String>,
    #[command(flatten)]
    node: super::node::NodeArgs,
    /// Rotate a container's log file past SIZE
    #[arg(long, value_name = "SIZE", default_value = "10Mi", value_parser = size)]
    log_max_size: u64,
    /// Log files kept per container instance
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    log_max_files: u32,
    /// Serve Prometheus metrics on ADDR (host:port) at /metrics
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<String>,
    /// Start from zero when the state dir's saved state cannot be used (it is moved aside, not
    /// deleted)
    #[arg(long)]
    reset_state: bool,
    /// Most processes the pod's containers may have at once (the kubelet's --pod-max-pids);
    /// needs cgroups
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pod_max_pids: Option<u64>,
    /// Who manages the pods' cgroups, as the kubelet's cgroupDriver: systemd (a transient
    /// scope per pod, Delegate=yes, over D-Bus), cgroupfs (podvisor writes the tree), or auto
    /// (systemd where it is PID 1 on cgroup v2)
    #[arg(long, value_name = "DRIVER", default_value = "auto", value_parser = cgroup_driver)]
    cgroup_driver: crate::cgroup::Driver,
    /// The containers outlive this run: they are held by a keeper process, SIGTERM/SIGINT (or
    /// a crash) end only the supervisor, and `run` again on the state dir takes them over.
    /// `podvisor stop` stops the pod
    #[arg(long)]
    live_restore: bool,
    /// Give containers that name no seccomp profile the runtime's default one (RuntimeDefault),
    /// as the kubelet's --seccomp-default
    #[arg(long)]
    seccomp_default: bool,
    /// Where `Localhost` seccomp profiles are (the kubelet's `<root-dir>/seccomp`; default
    /// /etc/podvisor/seccomp, for others than root $XDG_CONFIG_HOME/podvisor/seccomp)
    #[arg(long, value_name = "DIR")]
    seccomp_profile_root: Option<PathBuf>,
    /// Registry settings for pulls: DIR/HOST/hosts.toml (mirrors, CAs), as containerd's
    /// config_path (default /etc/podvisor/certs.d, for others than root
    /// $XDG_CONFIG_HOME/podvisor/certs.d)
    #[arg(long, value_name = "DIR")]
    registry_config: Option<PathBuf>,
    /// Without root, what mounts an image's layers: kernel (its overlay, in a user namespace:
    /// Linux 5.11 and later), fuse-overlayfs, or auto (the kernel's, and fuse-overlayfs where
    /// the kernel refuses and it is installed)
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = rootless_overlay)]
    rootless_overlay: supervisor::RootlessOverlay,
    /// Namespaced sysctls a pod may set besides the safe ones: names, or prefixes ending in
    /// `*`, comma-separated (the kubelet's --allowed-unsafe-sysctls)
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    allowed_unsafe_sysctls: Vec<String>,
    /// No event lines on stderr
    #[arg(short, long)]
    quiet: bool,
    /// The pod manifest: a Pod, or the pod template of a Deployment, StatefulSet, DaemonSet or
    /// Job (- for stdin)
    file: String,
}

/// What the process that read the manifest hands to the one that supervises the pod.
#[derive(serde::Serialize, serde::Deserialize)]
struct Handoff {
    plan: RunPlan,
    info: PodInfo,
}

pub fn main(a: RunArgs) -> i32 {
    let (run_plan, info) = match read_in_child(&a) {
        Ok(planned) => planned,
        Err(code) => return code,
    };
    supervise(a, run_plan, info)
}

/// Reads, checks and plans the manifest in a child process of its own
/// (`sys::run_in_child`), which hands the plan back through a pipe: the code and memory that
/// reading YAML and the Kubernetes types take go with that child, and the process that
/// supervises the pod for hours never held them. Where no child can be made, this process
/// reads.
fn read_in_child(a: &RunArgs) -> Result<(RunPlan, PodInfo), i32> {
    let work = |out: &mut std::fs::File| match read_manifest(a) {
        Ok((plan, info)) => {
            use std::io::Write;
            let mut w = std::io::BufWriter::new(out);
            let handoff = Handoff { plan, info };
            let written = serde_json::to_writer(&mut w, &handoff).map_err(std::io::Error::from);
            match written.and_then(|()| w.flush()) {
                Ok(()) => 0,
                Err(e) => {
                    super::write_err(&format!("error: {}: handing the plan over: {e}\n", a.file));
                    1
                }
            }
        }
        Err(code) => code,
    };
    let Some(done) = sys::run_in_child(work) else {
        return read_manifest(a);
    };
    let failed = |why: String| {
        super::write_err(&format!("error: {}: {why}\n", a.file));
        Err(1)
    };
    match done {
        Err(e) => failed(format!("reading it in a child process: {e}")),
        Ok(sys::ChildWork {
            exit: sys::Exit::Code(0),
            output,
        }) => match serde_json::from_slice::<Handoff>(&output) {
            Ok(h) => Ok((h.plan, h.info)),
            Err(e) => failed(format!("the plan the reading process handed over: {e}")),
        },
        Ok(sys::ChildWork {
            exit: sys::Exit::Code(code),
            ..
        }) => Err(code),
        Ok(sys::ChildWork {
            exit: sys::Exit::Signal(signal),
            ..
        }) => failed(format!(
            "the process reading it was killed by signal {signal}"
        )),
    }
}

/// A `lifecycle.stopSignal` needs the kubelet's gate ContainerStopSignals (the API server and
/// the kubelet drop the field when it is off: refused here rather than passed over).
fn stop_signals_allowed(plan: &RunPlan) -> Result<(), String> {
    if plan.container_stop_signals {
        return Ok(());
    }
    match (plan.exec.iter().zip(&plan.pod.containers)).find(|(x, _)| x.stop_signal.is_some()) {
        Some((_, c)) => Err(format!(
            "container {:?}: lifecycle.stopSignal needs the feature gate ContainerStopSignals (alpha, off in the kubelet of 1.36): --feature-gates ContainerStopSignals=true",
            c.name
        )),
        None => Ok(()),
    }
}

/// Reads, checks and plans the manifest: bad input is reported here (exit 2).
fn read_manifest(a: &RunArgs) -> Result<(RunPlan, PodInfo), i32> {
    let manifest = load(&a.file)?;
    let (cpus, memory) = sys::cpus_and_memory();
    let host = HostFacts {
        hostname: sys::hostname(),
        uid: pod_uid(),
        cpus,
        memory,
        all_capabilities: crate::security::held_capabilities(),
        seccomp_default: a.seccomp_default,
    };
    let node = a.node.node()?;
    let mut run_plan = plan(&manifest, &host, node.backoff);
    run_plan.container_stop_signals = node.gates.enabled(Gate::ContainerStopSignals);
    std::sync::Arc::make_mut(&mut run_plan.pod).sidecars_restart_in_termination = node
        .gates
        .enabled(Gate::SidecarsRestartableDuringPodTermination);
    if let Err(why) = stop_signals_allowed(&run_plan) {
        super::write_err(&format!("error: {}: {why}\n", a.file));
        return Err(2);
    }
    let w = &manifest.workload;
    let images: Vec<String> = (w.spec.init_containers.iter().flatten())
        .chain(&w.spec.containers)
        .map(|c| c.image.clone().unwrap_or_default())
        .collect();
    if let Err(why) = admit(&run_plan, &a.allowed_unsafe_sysctls) {
        super::write_err(&format!("error: {}: {why}\n", a.file));
        return Err(2);
    }
    let meta = w.template_metadata.as_ref();
    let info = PodInfo {
        name: run_plan.pod.name.clone(),
        namespace: run_plan.namespace.clone(),
        uid: host.uid.clone(),
        labels: meta
            .and_then(|m| m.labels.clone())
            .or_else(|| w.metadata.labels.clone())
            .unwrap_or_default(),
        annotations: meta
            .and_then(|m| m.annotations.clone())
            .or_else(|| w.metadata.annotations.clone())
            .unwrap_or_default(),
        spec: crate::status::SpecJson::new(&serde_json::to_value(&w.spec).unwrap_or_default()),
        image_ids: run_plan
            .exec
            .iter()
            .map(|x| {
                x.image
                    .as_ref()
                    .map(|r| r.image_id.clone())
                    .unwrap_or_default()
            })
            .collect(),
        stop_signals: run_plan.stop_signal_names(),
        volume_mounts: (w.spec.init_containers.iter().flatten())
            .chain(&w.spec.containers)
            .map(volume_mount_statuses)
            .collect(),
        images,
        generation: 1,
        qos_class: podvisor_core::spec::resize::qos_class(&w.spec)
            .as_str()
            .to_string(),
        created: std::time::SystemTime::now(),
    };
    Ok((run_plan, info))
}

/// A container's `volumeMounts` as the kubelet reports them in its status (the gate
/// RecursiveReadOnlyMounts, on since 1.31): a read-only mount's `recursiveReadOnly` resolved
/// as the mount is made, `Enabled` or `Disabled`; a writable mount's left out.
fn volume_mount_statuses(
    c: &k8s_openapi::api::core::v1::Container,
) -> Vec<k8s_openapi::api::core::v1::VolumeMountStatus> {
    let status = |m: &k8s_openapi::api::core::v1::VolumeMount| {
        use podvisor_core::spec::volumes::RecursiveReadOnly;
        let read_only = m.read_only == Some(true);
        let mode = RecursiveReadOnly::of(m.recursive_read_only.as_deref());
        // As the mount is made; `Enabled` where the kernel cannot: the kubelet's `Disabled`.
        let recursive =
            (mode.resolve(read_only, sys::recursive_read_only_mounts())).unwrap_or(false);
        let mode = if recursive { "Enabled" } else { "Disabled" };
        k8s_openapi::api::core::v1::VolumeMountStatus {
            name: m.name.clone(),
            mount_path: m.mount_path.clone(),
            read_only: read_only.then_some(true),
            recursive_read_only: read_only.then(|| mode.to_string()),
            ..Default::default()
        }
    };
    c.volume_mounts.iter().flatten().map(status).collect()
}

/// What the kubelet checks when it admits a pod or makes its sandbox: its sysctls
/// (`SysctlForbidden`) and the length of an FQDN hostname.
fn admit(plan: &RunPlan, allowed_unsafe: &[String]) -> Result<(), String> {
    use podvisor_core::namespaces::{admit_sysctl, unsafe_pattern_problem, MAX_FQDN};
    if let Some(why) = allowed_unsafe
        .iter()
        .find_map(|p| unsafe_pattern_problem(p))
    {
        return Err(format!("--allowed-unsafe-sysctls: {why}"));
    }
    let ns = &plan.namespaces;
    for (i, (name, _)) in ns.sysctls.iter().enumerate() {
        if let Err(why) = admit_sysctl(name, allowed_unsafe, !ns.own_ipc) {
            return Err(format!(
                "spec.securityContext.sysctls[{i}]: forbidden sysctl: {why} (the kubelet's SysctlForbidden: pods share the host's network here; --allowed-unsafe-sysctls lets namespaced ones through)"
            ));
        }
    }
    if let Some(h) = ns.hostname.as_ref().filter(|h| h.len() > MAX_FQDN) {
        return Err(format!(
            "spec.setHostnameAsFQDN: Failed to construct FQDN from pod hostname and cluster domain, FQDN {h} is too long ({MAX_FQDN} characters is the max, {} characters requested)",
            h.len()
        ));
    }
    Ok(())
}

/// Supervises the planned pod until it ends: its exit code.
fn supervise(a: RunArgs, run_plan: RunPlan, info: PodInfo) -> i32 {
    // The run may hold the pod for months: the loader's tables go (`sys::forget_relocations`).
    let _ = sys::forget_relocations();
    let state_dir = match a.state_dir {
        Some(dir) => StateDir::new(dir),
        None => StateDir::default_for(&run_plan.namespace, &run_plan.pod.name),
    };
    let json: Option<Box<dyn supervisor::events::WriteDebug>> = match a.events.as_deref() {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout())),
        Some(path) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(f) => Some(Box::new(f)),
            Err(e) => {
                super::write_err(&format!("error: --events {path}: {e}\n"));
                return 2;
            }
        },
    };
    let metrics = match a.metrics_addr.as_deref() {
        None => None,
        Some(addr) => match std::net::TcpListener::bind(addr) {
            Ok(l) => Some(l),
            Err(e) => {
                super::write_err(&format!("error: --metrics-addr {addr}: {e}\n"));
                return 2;
            }
        },
    };
    let settings = Settings {
        logs: LogLimits {
            max_size: a.log_max_size,
            max_files: a.log_max_files,
        },
        metrics,
        reset_state: a.reset_state,
        pod_max_pids: a.pod_max_pids,
        cgroup_driver: a.cgroup_driver,
        live_restore: a.live_restore,
        seccomp_profiles: a
            .seccomp_profile_root
            .clone()
            .unwrap_or_else(crate::security::default_seccomp_profiles),
        registry_config: a
            .registry_config
            .clone()
            .unwrap_or_else(crate::image::hosts::default_dir),
        rootless_overlay: a.rootless_overlay,
    };
    match supervisor::run(
        run_plan,
        info,
        state_dir,
        EventSink::new(json, !a.quiet),
        settings,
    ) {
        Ok(outcome) if outcome.detached => {
            if !a.quiet {
                super::write_err(
                    "podvisor: live restore: the pod's containers run on under their keepers; `podvisor run --live-restore` of the manifest on this state dir takes them over (then `podvisor stop` stops them)\n",
                );
            }
            0
        }
        Ok(outcome) if outcome.stopped || outcome.phase == Phase::Succeeded => 0,
        Ok(_) => 1,
        Err(e) => {
            super::write_err(&format!("error: {e}\n"));
            // A busy state dir or a saved state that cannot be used is a usage problem, like
            // bad input.
            if e.is_usage() {
                2
            } else {
                1
            }
        }
    }
}

/// A UUID-shaped identifier for this run of the pod (v4 layout, from the clock and pid: it
/// only has to differ between runs).
fn pod_uid() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let x = nanos ^ (u128::from(std::process::id()) << 64);
    let h = format!("{x:032x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn rootless_overlay(s: &str) -> Result<supervisor::RootlessOverlay, String> {
    use supervisor::RootlessOverlay;
    match s {
        "auto" => Ok(RootlessOverlay::Auto),
        "kernel" => Ok(RootlessOverlay::Kernel),
        "fuse-overlayfs" => Ok(RootlessOverlay::FuseOverlayfs),
        _ => Err("one of auto, kernel, fuse-overlayfs".to_string()),
    }
}

fn cgroup_driver(s: &str) -> Result<crate::cgroup::Driver, String> {
    use crate::cgroup::Driver;
    match s {
        "auto" => Ok(Driver::Auto),
        "systemd" => Ok(Driver::Systemd),
        "cgroupfs" => Ok(Driver::Cgroupfs),
        _ => Err("one of auto, systemd, cgroupfs".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, VolumeMount};

    #[test]
    fn volume_mounts_are_reported_as_the_kubelet_reports_them() {
        let mount = |path: &str, read_only: Option<bool>, rro: Option<&str>| VolumeMount {
            name: "d".into(),
            mount_path: path.into(),
            read_only,
            recursive_read_only: rro.map(String::from),
            ..Default::default()
        };
        let c = Container {
            name: "app".into(),
            volume_mounts: Some(vec![
                mount("/w", None, None),
                mount("/w2", Some(false), None),
                mount("/ro", Some(true), None),
                mount("/rro", Some(true), Some("Enabled")),
                mount("/off", Some(true), Some("Disabled")),
            ]),
            ..Default::default()
        };
        let got = serde_json::to_value(super::volume_mount_statuses(&c)).unwrap();
        let want = serde_json::json!([
            {"name": "d", "mountPath": "/w"},
            {"name": "d", "mountPath": "/w2"},
            {"name": "d", "mountPath": "/ro", "readOnly": true, "recursiveReadOnly": "Disabled"},
            {"name": "d", "mountPath": "/rro", "readOnly": true, "recursiveReadOnly": "Enabled"},
            {"name": "d", "mountPath": "/off", "readOnly": true, "recursiveReadOnly": "Disabled"},
        ]);
        assert_eq!(got, want);
        assert!(super::volume_mount_statuses(&Container::default()).is_empty());
    }
}
