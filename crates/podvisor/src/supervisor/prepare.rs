//! What a run makes once its root layer and cgroups are there (`setup::isolate`): the
//! containers' credentials, the image pulls, the pod's namespaces, the volumes and the
//! metrics endpoint; and, when one of them refuses the run, the undoing of the cgroups.

use podvisor_core::spec::plan::RunPlan;

use super::images::Images;
use super::rootfs::RootLayer;
use super::sandbox::Sandbox;
use super::volumes::Volumes;
use super::{persist, setup, RunError, Settings, TOKEN_METRICS, TOKEN_METRICS_LISTEN};
use crate::api::Server;
use crate::cgroup::PodCgroups;
use crate::process::failpoint;
use crate::process::sys::{self, Epoll};
use crate::state::StateDir;
use crate::status::PodInfo;

/// What the run holds besides its root layer and cgroups.
pub(super) struct Prepared {
    pub credentials: Vec<sys::Credentials>,
    pub images: Option<Images>,
    pub sandbox: Sandbox,
    pub volumes: Volumes,
    pub metrics: Option<Server>,
}

/// Everything else the run needs before its containers start, made after `isolate`: a
/// refusal here is undone with `remove_pod_cgroup`.
pub(super) fn prepare(
    plan: &RunPlan,
    dir: &StateDir,
    settings: &mut Settings,
    info: &mut PodInfo,
    taken: &persist::TakenUp,
    root_layer: Option<&RootLayer>,
    epoll: &Epoll,
) -> Result<Prepared, RunError> {
    failpoint::stall("run.prepare");
    let credentials = setup::credentials(plan, root_layer, settings)?;
    let images = Images::new(
        plan,
        epoll,
        settings.seccomp_profiles.clone(),
        settings.registry_config.clone(),
    )?;
    let sandbox = setup::sandbox(plan, root_layer, taken, settings.live_restore)?;
    info.annotations
        .insert("podvisor.io/namespaces".into(), sandbox.note());
    // A resumed pod keeps its emptyDir volumes: it was never stopped as a whole.
    let volumes = Volumes::prepare(
        &dir.volumes_dir(),
        &plan.volumes,
        &setup::volume_ownership(plan)?,
        taken.resumed,
    )?;
    let metrics = match settings.metrics.take() {
        Some(l) => Some(Server::metrics(
            l,
            epoll,
            TOKEN_METRICS_LISTEN,
            TOKEN_METRICS,
        )?),
        None => None,
    };
    Ok(Prepared {
        credentials,
        images,
        sandbox,
        volumes,
        metrics,
    })
}

/// Removes the pod cgroup the run made: at its end, and when it is refused after `isolate`
/// (in `prepare`, or while it takes up what the last run left) unless it holds containers
/// taken over from keepers, which stay for the next run as after a crash. Mounts need
/// nothing: a memory emptyDir's tmpfs is in the run's own mount namespace and ends with it.
pub(super) fn remove_pod_cgroup(cgroups: &mut PodCgroups, dir: &StateDir) {
    if let Some(pod) = cgroups.pod.take() {
        if let Err(e) = pod.remove(dir.path()) {
            eprintln!("podvisor: {e}");
        }
    }
}
