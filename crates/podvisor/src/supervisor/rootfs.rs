//! The pod's filesystem before and around its containers: the root each container start gets
//! (`RootLayer`, as root or rootless), the wait for volumes whose hostPath check fails
//! (`MountGate`, as the kubelet's `MountVolume.SetUp` retries), and the eviction manager's
//! emptyDir `sizeLimit` check.

use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use podvisor_core::clock::{Clock, Instant};
use podvisor_core::lifecycle::{EventType, Input};
use podvisor_core::namespaces::PidNamespace;
use podvisor_core::spec::dns::DnsWarning;
use podvisor_core::spec::plan::RunPlan;
use podvisor_core::spec::volumes::VolumePlan;

use super::{persist, volumes, RunError, Supervisor};
use crate::cgroup::Unenforceable;
use crate::mountinfo;
use crate::process::sys::{self, Rootless, TopEntry};
use crate::security;
use crate::state::StateDir;

/// A pod waiting for its volumes.
#[derive(Debug)]
pub(super) struct MountGate {
    pub(super) retry_at: Instant,
    pub(super) delay: std::time::Duration,
}

/// The volume manager's retry of a failed mount: 500 ms doubling to about 2 minutes
/// (`exponentialbackoff` in pkg/util/goroutinemap).
pub(super) const MOUNT_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(500);
pub(super) const MOUNT_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(122);

/// How often emptyDir volumes with a `sizeLimit` are measured (the kubelet's eviction manager
/// looks every 10 s; a walk of a volume is cheap, and a user waits less).
pub(super) const SIZE_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

/// What a container's private root is made from.
#[derive(Debug)]
pub(super) struct RootLayer {
    /// An empty directory of the state dir, on which each container mounts its layer's
    /// tmpfs inside its own mount namespace.
    pub(super) dir: PathBuf,
    /// The host's mounts under `/` carried into every private root.
    pub(super) carry: Vec<(PathBuf, bool)>,
    /// Without root, in user namespaces: how the root is made.
    pub(super) rootless: Option<Rootless>,
    /// ... which ids the containers' user namespace has, and the run's mapped one that holds
    /// them (`Rootless::user_namespace` names it), when `/etc/subuid` gives this user some.
    pub(super) user_map: security::subids::UserMap,
    pub(super) _user_ns: Option<std::os::fd::OwnedFd>,
    /// The pod's `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf`, bound into each
    /// container with a root of its own (`pod_files`).
    pub(super) pod_files: Vec<sys::BindMount>,
    /// What the kubelet would warn about the pod's resolv.conf, for the pod's events.
    pub(super) dns_warnings: Vec<DnsWarning>,
    /// As root, for a pod with a privileged container: the host's devices, made in its /dev.
    pub(super) host_devices: Vec<sys::Device>,
}

/// `--rootless-overlay`: what mounts an image's layers without root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RootlessOverlay {
    /// The kernel's overlay, and fuse-overlayfs where the kernel refuses one in a user
    /// namespace (Linux before 5.11) and fuse-overlayfs can run.
    #[default]
    Auto,
    /// The kernel's overlay only.
    Kernel,
    /// fuse-overlayfs only (refused where it cannot run).
    FuseOverlayfs,
}

/// Private roots as root, and without root where user namespaces work (rootless, as rootless
/// runtimes); otherwise none, and a container that asks for a read-only root or for volume
/// mounts is refused rather than run without them.
pub(super) fn root_layer(
    plan: &RunPlan,
    state_dir: &StateDir,
    overlay: RootlessOverlay,
) -> Result<Option<RootLayer>, RunError> {
    if sys::getuid() != 0 && plan.root_from_image && !sys::user_namespaces_work() {
        return Err(Unenforceable {
            container: plan.pod.containers[0].name.clone(),
            field: "image",
            needs: "root, or user namespaces",
            why: "a root made of an image's layers is an overlay, which this user may mount only in a user namespace of its own, and the kernel does not let it make one (user.max_user_namespaces, or a distribution's unprivileged_userns_clone); run as root, or give the pod the host's root (podvisor.io/root-from: host)".into(),
        }
        .into());
    }
    let image_volume = (plan.volumes.iter())
        .find(|v| matches!(v, VolumePlan::Image { .. }))
        .map(|v| v.name());
    let no_user_namespaces = sys::getuid() != 0 && !sys::user_namespaces_work();
    if let (true, Some(volume)) = (no_user_namespaces, image_volume) {
        let user = (plan.exec.iter().zip(&plan.pod.containers))
            .find(|(x, _)| x.mounts.iter().any(|m| m.volume == volume));
        return Err(Unenforceable {
            container: user.map_or_else(String::new, |(_, c)| c.name.clone()),
            field: "volumes[].image",
            needs: "root, or user namespaces",
            why: format!("image volume {volume:?} is an overlay of the image store's layers, which this user may mount only in a user namespace of its own, and the kernel does not let it make one; run as root"),
        }
        .into());
    }
    host_files_fit(plan)?;
    if sys::getuid() != 0 && sys::user_namespaces_work() {
        let dir = state_dir.rootfs_dir();
        let upper_dir = state_dir.rootfs_upper_dir();
        std::fs::create_dir_all(&dir)?;
        std::fs::create_dir_all(&upper_dir)?;
        let (user_map, user_ns) = security::subids::map_this_user(std::path::Path::new("/etc"));
        let user_namespace = user_ns.as_ref().map(|fd| {
            use std::os::fd::AsRawFd;
            PathBuf::from(format!("/proc/{}/fd/{}", sys::getpid(), fd.as_raw_fd()))
        });
        // From images, the root is the image's overlay, with the host's /proc, /sys and /dev
        // bound in as rootless runtimes do (a user namespace cannot make device nodes).
        let mut entries = volumes::rootless_entries(&mountinfo::read());
        if plan.root_from_image {
            entries.retain(|e| {
                let live = ["/proc", "/sys", "/dev"].map(std::path::Path::new);
                matches!(e, TopEntry::Bind { path, .. } if live.contains(&path.as_path()))
            });
        }
        let (pod_files, dns_warnings) = pod_files(plan, state_dir)?;
        let (fuse_overlayfs, fuse_only) = match plan.root_from_image {
            true => fuse_overlayfs(plan, overlay)?,
            false => (None, false),
        };
        return Ok(Some(RootLayer {
            dir,
            carry: Vec::new(),
            rootless: Some(Rootless {
                uid: sys::getuid(),
                gid: sys::getgid(),
                entries,
                upper_dir,
                user_namespace,
                fuse_overlayfs,
                fuse_only,
            }),
            user_map,
            _user_ns: user_ns,
            pod_files,
            dns_warnings,
            // Rootless, /dev is the host's.
            host_devices: Vec::new(),
        }));
    }
    if sys::getuid() != 0 {
        let mounts = plan
            .exec
            .iter()
            .zip(&plan.pod.containers)
            .find(|(x, _)| !x.mounts.is_empty());
        if let Some((_, c)) = mounts {
            return Err(Unenforceable {
                container: c.name.clone(),
                field: "volumeMounts",
                needs: "a mount namespace of its own",
                why: "that needs root".into(),
            }
            .into());
        }
        let asks = plan
            .exec
            .iter()
            .zip(&plan.pod.containers)
            .find(|(x, _)| x.security.read_only_root);
        if let Some((_, c)) = asks {
            return Err(Unenforceable {
                container: c.name.clone(),
                field: "securityContext.readOnlyRootFilesystem",
                needs: "a root filesystem of its own",
                why: "that needs root".into(),
            }
            .into());
        }
        return Ok(None);
    }
    let dir = state_dir.rootfs_dir();
    std::fs::create_dir_all(&dir)?;
    let (pod_files, dns_warnings) = pod_files(plan, state_dir)?;
    let host_devices = match plan.exec.iter().any(|x| x.security.privileged) {
        true => sys::host_devices()?,
        false => Vec::new(),
    };
    Ok(Some(RootLayer {
        dir,
        carry: volumes::host_submounts(&mountinfo::read()),
        rootless: None,
        user_map: security::subids::UserMap::One {
            why: "as root".into(),
        },
        _user_ns: None,
        pod_files,
        dns_warnings,
        host_devices,
    }))
}

/// fuse-overlayfs for the image's layers as `--rootless-overlay` asks: its path where it can
/// run (installed, `/dev/fuse` open to this user, and each container in a PID namespace of
/// its own, which ends its daemon), and whether it is the only way; refused when asked for
/// alone and it cannot run.
fn fuse_overlayfs(
    plan: &RunPlan,
    overlay: RootlessOverlay,
) -> Result<(Option<PathBuf>, bool), RunError> {
    if overlay == RootlessOverlay::Kernel {
        return Ok((None, false));
    }
    let program = find_program("fuse-overlayfs");
    let why_not = match &program {
        _ if plan.namespaces.pid == PidNamespace::Host => Some(
            "the pod uses the host's PID namespace (hostPID), where its daemon would outlive the container".to_string(),
        ),
        None => Some("fuse-overlayfs is not installed (not found in PATH)".to_string()),
        Some(_) => (std::fs::OpenOptions::new().read(true).write(true))
            .open("/dev/fuse")
            .err()
            .map(|e| format!("/dev/fuse cannot be opened by this user: {e}")),
    };
    match (overlay, why_not) {
        (RootlessOverlay::FuseOverlayfs, Some(why)) => Err(Unenforceable {
            container: (plan.pod.containers.iter())
                .find(|c| c.image.is_some())
                .map_or_else(String::new, |c| c.name.clone()),
            field: "image",
            needs: "fuse-overlayfs (--rootless-overlay fuse-overlayfs)",
            why,
        }
        .into()),
        (_, Some(_)) => Ok((None, false)),
        (_, None) => Ok((program, overlay == RootlessOverlay::FuseOverlayfs)),
    }
}

/// The first executable file called `name` in `PATH`.
fn find_program(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The pod's own `/etc/hosts` (the host's under the kubelet's header for a pod on the host's
/// network, then its `hostAliases`), `/etc/hostname` and `/etc/resolv.conf` (the host's
/// servers as `dnsPolicy` and `dnsConfig` make them), made in its state dir to be bound into
/// its containers, as the kubelet and the runtime give them. Every container of an image gets
/// them; on the host's root, where the host's files are the container's own, only a pod whose
/// files differ from the host's gets them (its hosts and resolv.conf, not its hostname).
fn pod_files(
    plan: &RunPlan,
    state_dir: &StateDir,
) -> Result<(Vec<sys::BindMount>, Vec<DnsWarning>), RunError> {
    if !plan.root_from_image && !plan.dns.differs_from_host() {
        return Ok((Vec::new(), Vec::new()));
    }
    let dir = state_dir.path().join("etc");
    std::fs::create_dir_all(&dir)?;
    let host = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let hostname = plan
        .namespaces
        .hostname
        .clone()
        .unwrap_or_else(sys::hostname);
    let resolv = plan.dns.resolv_conf(&host("/etc/resolv.conf"));
    let contents = [
        Some(plan.dns.hosts(&host("/etc/hosts"))),
        plan.root_from_image.then(|| format!("{hostname}\n")),
        Some(resolv.text),
    ];
    let mut mounts = Vec::new();
    for (name, text) in crate::image::RUNTIME_FILES.iter().zip(contents) {
        let Some(text) = text else { continue };
        let path = dir.join(name);
        // Written only when it changed: containers a resumed run takes over have it bound,
        // and would read it empty while it is written again.
        if std::fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
            std::fs::write(&path, text)?;
        }
        mounts.push(sys::BindMount {
            source: path,
            target: std::path::Path::new("/etc").join(name),
            read_only: false,
            lower: Vec::new(),
            lower_base: None,
            host_to_container: false,
            recursive_read_only: false,
        });
    }
    Ok((mounts, resolv.warnings))
}

/// A pod on the host's root whose hosts or resolv.conf differ from the host's needs a root of
/// its own for each container to bind them in: refused where a container would have the
/// host's root itself (`podvisor.io/host-root: writable`, or no root and no user namespaces).
fn host_files_fit(plan: &RunPlan) -> Result<(), RunError> {
    if plan.root_from_image || !plan.dns.differs_from_host() {
        return Ok(());
    }
    // Named as the pod's other fields are here (`volumes[].image`): a Deployment's is under
    // `spec.template.spec`.
    let field = match &plan.dns {
        d if !d.host_aliases.is_empty() => "hostAliases",
        d if d.config.is_some() => "dnsConfig",
        _ => "dnsPolicy",
    };
    let no_root = sys::getuid() != 0 && !sys::user_namespaces_work();
    let shared = (plan.exec.iter().zip(&plan.pod.containers))
        .find(|(x, _)| no_root || (plan.host_root_writable && !x.security.read_only_root));
    match shared {
        None => Ok(()),
        Some((_, c)) => Err(Unenforceable {
            container: c.name.clone(),
            field,
            needs: "a root of its own (the pod's /etc/hosts and /etc/resolv.conf are bound over the host's)",
            why: match no_root {
                true => "without root, that needs user namespaces, which the kernel does not give this user".into(),
                false => "podvisor.io/host-root: writable gives the container the host's root itself, whose files are the host's".into(),
            },
        }
        .into()),
    }
}

/// Above this many bytes of layer paths, an overlay is mounted from short links to them:
/// mount(2) takes its options in one page (4 KiB), upper and work directories included,
/// which is about 35 layers of the store's paths.
const LONG_LOWERDIR: usize = 2048;

/// Short names for a long list of overlay layers (top first): a directory in `dir` (the
/// pod's `lowers/`) of links `0`, `1`, … to each, named by the digest of the list and made
/// once, as Docker's overlay2 keeps short links for the same limit. Returns (that
/// directory, the names), or `None` when the list fits as it is.
pub(super) fn short_lowers(
    dir: &std::path::Path,
    lowers: &[PathBuf],
) -> io::Result<Option<(PathBuf, Vec<PathBuf>)>> {
    use std::os::unix::ffi::OsStrExt;
    let length: usize = lowers.iter().map(|l| l.as_os_str().len() + 1).sum();
    if length <= LONG_LOWERDIR {
        return Ok(None);
    }
    let mut list = Vec::with_capacity(length);
    for l in lowers {
        list.extend_from_slice(l.as_os_str().as_bytes());
        list.push(0);
    }
    let digest = crate::image::store::digest_of(&list);
    let chain = dir.join(digest.trim_start_matches("sha256:"));
    let names: Vec<PathBuf> = (0..lowers.len())
        .map(|i| PathBuf::from(i.to_string()))
        .collect();
    // Made whole (every link) before its name appears; the last link says it is there.
    let last = chain.join(lowers.len().saturating_sub(1).to_string());
    if std::fs::read_link(&last).ok().as_ref() != lowers.last() {
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".new-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir(&tmp)?;
        for (name, target) in names.iter().zip(lowers) {
            std::os::unix::fs::symlink(target, tmp.join(name))?;
        }
        if chain.exists() {
            std::fs::remove_dir_all(&chain)?;
        }
        std::fs::rename(&tmp, &chain)?;
    }
    Ok(Some((chain, names)))
}

impl Supervisor {
    /// Admits the pod once its volumes can be set up, as the kubelet waits for its mounts
    /// (`WaitForAttachAndMount`): until then no container starts, the pod is Pending with
    /// a `FailedMount` Warning at each try, retried with the volume manager's backoff.
    pub(super) fn try_admit(&mut self) -> io::Result<()> {
        match self.volumes.set_up_host_paths() {
            Ok(()) => {
                self.mount_gate = None;
                if self.volumes.has_size_limits() {
                    self.size_check_at = Some(self.clock.now() + SIZE_CHECK_PERIOD);
                }
                self.feed(Input::Admit)
            }
            Err(message) => {
                let delay = self
                    .mount_gate
                    .as_ref()
                    .map_or(MOUNT_RETRY_FIRST, |g| (g.delay * 2).min(MOUNT_RETRY_MAX));
                self.mount_gate = Some(MountGate {
                    retry_at: self.clock.now() + delay,
                    delay,
                });
                let event = persist::pod_note(EventType::Warning, "FailedMount", message);
                let line = self.events.emit(SystemTime::now(), &event);
                self.api.event(line);
                Ok(())
            }
        }
    }

    /// The eviction manager's emptyDir check: a volume past its `sizeLimit` evicts the pod.
    pub(super) fn check_sizes(&mut self) -> io::Result<()> {
        match self.volumes.over_size_limit() {
            Some(message) => {
                self.size_check_at = None;
                self.feed(Input::Evict(message))
            }
            None => {
                self.size_check_at = Some(self.clock.now() + SIZE_CHECK_PERIOD);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[test]
    fn long_layer_lists_get_short_links_made_once_and_mended() {
        let tmp = TempDir::new("lowers");
        let dir = tmp.join("lowers");
        let few = vec![PathBuf::from("/a"), PathBuf::from("/b")];
        assert!(short_lowers(&dir, &few).unwrap().is_none());
        assert!(!dir.exists());
        let many: Vec<PathBuf> = (0..40)
            .map(|i| PathBuf::from(format!("/store/layers/sha256/{i:064}")))
            .collect();
        let (chain, names) = short_lowers(&dir, &many).unwrap().unwrap();
        assert_eq!(names[0], PathBuf::from("0"));
        assert_eq!(names[39], PathBuf::from("39"));
        for (name, target) in names.iter().zip(&many) {
            assert_eq!(&std::fs::read_link(chain.join(name)).unwrap(), target);
        }
        // Asked again: the same directory. One whose last link is wrong is made again.
        assert_eq!(short_lowers(&dir, &many).unwrap().unwrap().0, chain);
        std::fs::remove_file(chain.join("39")).unwrap();
        std::os::unix::fs::symlink("/elsewhere", chain.join("39")).unwrap();
        assert_eq!(short_lowers(&dir, &many).unwrap().unwrap().0, chain);
        assert_eq!(std::fs::read_link(chain.join("39")).unwrap(), many[39]);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    }
}
