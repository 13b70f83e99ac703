//! What `run` does before its loop: this process made ready to supervise, the state dir
//! locked, and what keeps the containers apart (root layer, cgroups, mount namespace).

use std::time::SystemTime;

use podvisor_core::lifecycle::EventType;
use podvisor_core::spec::plan::RunPlan;
use podvisor_core::spec::volumes::VolumePlan;

use super::rootfs::{root_layer, RootLayer};
use super::sandbox::{Power, Sandbox};
use super::{persist, RunError, Settings};
use crate::cgroup::{PodCgroups, Unenforceable};
use crate::process::starters::{self, Starters};
use crate::process::sys::{self, SigSet, SignalFd};
use crate::security;
use crate::status::PodInfo;
use podvisor_core::security::ImageUser;

/// This process made ready to supervise: the probes' jitter seed, the open-files limit, the
/// signals it waits for (returned: the mask the containers get back, and the signalfd), the
/// subreaper, no inherited descriptor for the containers, and the low descriptors kept.
pub(super) fn take_process(plan: &mut RunPlan) -> Result<(SigSet, SignalFd), RunError> {
    // First probes of the containers started now spread over their period (see PodPlan).
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    std::sync::Arc::make_mut(&mut plan.pod).probe_jitter_seed =
        Some(nanos ^ u64::from(std::process::id()).rotate_left(32));
    let _ = sys::raise_open_files_limit();
    let mut set = SigSet::empty();
    for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT] {
        set.add(sig);
    }
    // SIGPIPE blocked too: a write to a keeper or client that has gone is EPIPE, not the
    // run's death (podvisor keeps the SIGPIPE disposition it inherited, for its containers).
    let mut blocked = set;
    blocked.add(libc::SIGPIPE);
    let mask = sys::set_signal_mask(&blocked)?;
    let signals = SignalFd::new(&set)?;
    // Orphans of containers come back to us (and are reaped) rather than to the host's init.
    sys::set_child_subreaper()?;
    // Nothing podvisor inherited reaches the containers.
    sys::cloexec_inherited()?;
    // Before the pod's pipes and logs are open, so that the kept descriptors are low.
    // A set for each starter (`process::starters`) and one for this thread's own spawns.
    sys::reserve_low_fd_sets(starters::STARTERS + 1)?;
    Ok((mask, signals))
}

/// Without a keeper, the threads that make this run's containers (`process::starters`), before
/// the first start. They inherit the signals `take_process` blocked and the mount namespace
/// `isolate` gave this thread. None where they cannot be started (the starts are then made one
/// after the other) or under a keeper, which makes the containers.
pub(super) fn starters(live_restore: bool) -> Option<Starters> {
    if live_restore {
        return None;
    }
    // Their memory, freed, goes back with the rest (`settle_memory`).
    sys::one_heap();
    Starters::new("run.start").ok()
}

/// What keeps the containers apart: a private root layer (or a note why there is none), the
/// cgroups, and a mount namespace of podvisor's own for `medium: Memory` volumes.
pub(super) fn isolate(
    plan: &RunPlan,
    dir: &crate::state::StateDir,
    settings: &Settings,
    info: &mut PodInfo,
    taken: &mut persist::TakenUp,
) -> Result<(Option<RootLayer>, PodCgroups), RunError> {
    let root_layer = root_layer(plan, dir, settings.rootless_overlay)?;
    // What the kubelet's DNS configurer warns about at the pod's sandbox.
    for w in root_layer.iter().flat_map(|l| &l.dns_warnings) {
        taken.notes.push(persist::pod_note(
            EventType::Warning,
            w.reason,
            w.message.clone(),
        ));
    }
    if root_layer.is_none() && !plan.host_root_writable {
        taken.notes.push(persist::pod_note(
            EventType::Warning,
            "HostRoot",
            "not running as root: containers write to the host's root filesystem (no private writable layer, /tmp shared)".into(),
        ));
    }
    // The images as the manifest names them (they are pulled after this).
    let mut images: Vec<&str> = (plan.pod.containers.iter())
        .filter_map(|c| c.image.as_deref())
        .collect();
    images.sort_unstable();
    images.dedup();
    let rootless = match root_layer.as_ref().map(|l| &l.user_map) {
        Some(security::subids::UserMap::Range { uids, gids }) => format!(
            "rootless (user namespace: uids 0-{uids}, gids 0-{gids} from /etc/subuid, /etc/subgid)"
        ),
        _ => "rootless (user namespace)".into(),
    };
    let root_note = match &root_layer {
        Some(l) => {
            let mut note = match plan.root_from_image {
                true => format!("images ({}), private layer per start", images.join(", ")),
                false if plan.host_root_writable && l.rootless.is_none() => {
                    "host's, writable (podvisor.io/host-root)".into()
                }
                false => "private layer per start".into(),
            };
            if let Some(r) = &l.rootless {
                note = format!("{note}, {rootless}");
                match (&r.fuse_overlayfs, r.fuse_only) {
                    (Some(_), true) => note.push_str(", layers by fuse-overlayfs"),
                    (Some(_), false) => note
                        .push_str(", layers by fuse-overlayfs where the kernel refuses an overlay"),
                    (None, _) => {}
                }
            }
            note
        }
        None => "host's (not root)".into(),
    };
    info.annotations
        .insert("podvisor.io/root".into(), root_note);
    // A `medium: Memory` emptyDir is a tmpfs in podvisor's own mount namespace: its
    // containers see it, the host never does, and it cannot outlive the run.
    let memory = plan
        .volumes
        .iter()
        .find(|v| matches!(v, VolumePlan::EmptyDir { memory: true, .. }));
    if let (Some(v), true) = (memory, settings.live_restore) {
        // Its tmpfs lives in this run's mount namespace: it cannot outlive the run.
        let user = plan
            .exec
            .iter()
            .zip(&plan.pod.containers)
            .find(|(x, _)| x.mounts.iter().any(|m| m.volume == v.name()));
        return Err(Unenforceable {
            container: user.map_or_else(String::new, |(_, c)| c.name.clone()),
            field: "--live-restore",
            needs: "volumes that outlive the run",
            why: format!("emptyDir volume {:?} has medium: Memory, whose tmpfs ends with the run; use a disk emptyDir", v.name()),
        }
        .into());
    }
    if memory.is_some() && sys::getuid() == 0 {
        sys::private_mount_namespace()?;
    }
    // The cgroups last, after what can refuse the run here (a refusal later undoes them:
    // `prepare::remove_pod_cgroup`). Those of containers taken over stay as they are.
    let keep: Vec<String> = taken
        .found
        .adopted
        .iter()
        .map(|a| {
            let name = &plan.pod.containers[a.container].name;
            crate::cgroup::instance_dir(name, a.instance)
        })
        .collect();
    let cgroups = PodCgroups::set_up(
        plan,
        dir.path(),
        settings.pod_max_pids,
        settings.cgroup_driver,
        &keep,
    )?;
    info.annotations
        .insert("podvisor.io/cgroups".into(), cgroups.note.clone());
    Ok((root_layer, cgroups))
}

/// The pod's namespaces: as root made (or, taking over from keepers, taken from a container
/// found running), rootless each container's own, else the host's.
pub(super) fn sandbox(
    plan: &RunPlan,
    root_layer: Option<&RootLayer>,
    taken: &persist::TakenUp,
    live_restore: bool,
) -> Result<Sandbox, RunError> {
    let power = match root_layer {
        _ if sys::getuid() == 0 => Power::Root,
        Some(l) if l.rootless.is_some() => Power::Rootless,
        _ => Power::None,
    };
    let running = taken.found.adopted.first().map(|a| a.process.pid);
    Ok(Sandbox::make(
        &plan.namespaces,
        power,
        running,
        live_restore,
    )?)
}

/// What each container runs as and may do, on the host's root (its `/etc` names the users):
/// a profile or a user that cannot be had refuses the run. A container of an image gets its
/// credentials again once its image is known (`images`).
pub(super) fn credentials(
    plan: &RunPlan,
    root_layer: Option<&RootLayer>,
    settings: &Settings,
) -> Result<Vec<sys::Credentials>, RunError> {
    let mut compiled = security::Compiled::default();
    let mut all = Vec::with_capacity(plan.exec.len());
    for i in 0..plan.exec.len() {
        let profiles = settings.seccomp_profiles.clone();
        all.push(credentials_of(
            plan,
            i,
            root_layer,
            profiles,
            &mut compiled,
        )?);
    }
    Ok(all)
}

/// Container `i`'s credentials.
pub(super) fn credentials_of(
    plan: &RunPlan,
    i: usize,
    root_layer: Option<&RootLayer>,
    seccomp_profiles: std::path::PathBuf,
    compiled: &mut security::Compiled,
) -> Result<sys::Credentials, crate::cgroup::Unenforceable> {
    let (x, c) = (&plan.exec[i], &plan.pod.containers[i]);
    // Rootless, a container is born in a user namespace only with a root of its own (see
    // `spawn`): on the host's root it keeps this user.
    let own_root = !plan.host_root_writable || x.security.read_only_root;
    let user_map = root_layer
        .filter(|l| l.rootless.is_some() && own_root)
        .map(|l| l.user_map.clone());
    let host = security::Host::this(user_map, seccomp_profiles);
    // An image names its users in its own /etc/passwd and /etc/group (as its merged layers
    // show them), and runs as its `User` when the securityContext sets none.
    let (etc, image) = match &x.image {
        Some(i) => (
            security::users::Etc {
                passwd: i.passwd.as_ref().map(std::path::PathBuf::from),
                group: i.group.as_ref().map(std::path::PathBuf::from),
            },
            match i.user.split(':').next().unwrap_or("") {
                "" => ImageUser::root(),
                user => ImageUser {
                    uid: user.parse().ok(),
                    name: user.to_string(),
                },
            },
        ),
        None => (
            security::users::Etc::of_root(std::path::Path::new("/")),
            ImageUser::root(),
        ),
    };
    security::credentials(&c.name, &x.security, &etc, &image, &host, compiled)
}

/// The volumes' group ownership (`fsGroup`) as this run can give it. Without root, volumes
/// are made by podvisor's user outside the containers' user namespace: `fsGroup: 0` there is
/// its own group, and another group cannot be given to them (refused, by field).
pub(super) fn volume_ownership(
    plan: &RunPlan,
) -> Result<podvisor_core::security::VolumeOwnership, Unenforceable> {
    let mut ownership = plan.ownership.clone();
    match ownership.fs_group {
        _ if sys::getuid() == 0 => {}
        None => {}
        Some(0) => ownership.fs_group = Some(sys::getgid()),
        Some(g) => {
            return Err(Unenforceable {
                container: plan.pod.containers[0].name.clone(),
                field: "securityContext.fsGroup",
                needs: "root",
                why: format!(
                    "podvisor runs as uid {} without root: its volumes are made outside the containers' user namespace, where it can give them only its own group (fsGroup 0 inside), not {g}",
                    sys::getuid()
                ),
            })
        }
    }
    Ok(ownership)
}
