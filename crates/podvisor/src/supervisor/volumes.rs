//! Pod volumes for host processes: emptyDir as a directory of the state dir (empty at pod start
//! and after a whole-pod restart), hostPath as the host's path, configMap and secret as files
//! made from their keys. A container sees each at its `mountPath` through a bind mount in a
//! mount namespace of its own, which needs root; a mount point that does not exist on the host
//! is created for the run and removed afterwards (if still empty).

use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use podvisor_core::security::VolumeOwnership;
use podvisor_core::spec::plan::ContainerExec;
use podvisor_core::spec::volumes::{HostPathType, MountPlan, Propagation, VolumePlan};

use crate::image::merged;
use crate::mountinfo::Mount;
use crate::process::sys::{self, BindMount, TopEntry};

#[derive(Debug)]
pub struct Volumes {
    dir: PathBuf,
    plans: Vec<VolumePlan>,
    ownership: VolumeOwnership,
    /// Mount points podvisor created, to remove at the end (deepest last created first).
    created: Vec<PathBuf>,
    /// The unpacked layers (top first) of each image volume whose image is there, by name.
    images: std::collections::BTreeMap<String, Vec<PathBuf>>,
    /// What each `subPath` of an image volume is in its image, by volume and subPath.
    image_sub_paths: std::collections::BTreeMap<(String, String), merged::Found>,
}

impl Volumes {
    /// Makes the volumes' directory (`StateDir::volumes_dir`) afresh with every volume in
    /// it (no directory for a pod without one); with `keep_empty_dirs` (a resumed pod) the
    /// emptyDir volumes keep what they hold.
    pub fn prepare(
        dir: &Path,
        plans: &[VolumePlan],
        ownership: &VolumeOwnership,
        keep_empty_dirs: bool,
    ) -> io::Result<Volumes> {
        let dir = dir.to_path_buf();
        let kept = |name: &std::ffi::OsStr| {
            keep_empty_dirs
                && plans
                    .iter()
                    .any(|p| matches!(p, VolumePlan::EmptyDir { name: n, memory: false, .. } if std::ffi::OsStr::new(n) == name))
        };
        match std::fs::read_dir(&dir) {
            Ok(entries) => {
                for e in entries.flatten() {
                    if !kept(&e.file_name()) {
                        std::fs::remove_dir_all(e.path())?;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // The directory itself is made with the first volume in it (`make`): a pod without
        // one does not pay for it at every start.
        let v = Volumes {
            dir,
            plans: plans.to_vec(),
            ownership: ownership.clone(),
            created: Vec::new(),
            images: std::collections::BTreeMap::new(),
            image_sub_paths: std::collections::BTreeMap::new(),
        };
        for p in plans {
            v.make(p)?;
        }
        Ok(v)
    }

    fn make(&self, p: &VolumePlan) -> io::Result<()> {
        match p {
            VolumePlan::EmptyDir { name, memory, .. } => {
                let dir = self.dir.join(name);
                std::fs::create_dir_all(&dir)?;
                // A tmpfs in podvisor's own mount namespace (see `run`), so never the host's.
                if *memory && sys::getuid() == 0 {
                    sys::mount_tmpfs(&dir)?;
                }
                // Anyone may write in it, as the kubelet's emptyDir (0777, whatever the umask).
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
                self.own(&dir, false)
            }
            // Checked (and made) by `set_up_host_paths`, before the pod is admitted.
            VolumePlan::HostPath { .. } => Ok(()),
            // The image store's layers, once the image is there (`image_ready`); fsGroup does
            // not apply to what is read-only and shared (the kubelet's image volumes).
            VolumePlan::Image { .. } => Ok(()),
            VolumePlan::Files { name, files } => {
                let root = self.dir.join(name);
                std::fs::create_dir_all(&root)?;
                for (rel, data, mode) in files {
                    let path = root.join(rel);
                    if let Some(parent) = path.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&path, data)?;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))?;
                }
                // configMap, secret, downwardAPI and projected volumes are read-only.
                self.own(&root, true)
            }
        }
    }

    /// The kubelet's `SetVolumeOwnership` with `fsGroup`: everything in the volume group-owned
    /// by it, readable (and writable unless the volume is read-only) by the group, directories
    /// setgid so that what is made in them keeps the group. `OnRootMismatch`: not when the
    /// volume's root already is so (pkg/volume/volume_linux.go).
    fn own(&self, root: &Path, read_only: bool) -> io::Result<()> {
        let Some(gid) = self.ownership.fs_group else {
            return Ok(());
        };
        let mask = if read_only { 0o440 } else { 0o660 };
        if self.ownership.only_on_root_mismatch {
            let m = std::fs::metadata(root)?;
            let dir_mask = mask | 0o2000 | 0o110;
            if std::os::unix::fs::MetadataExt::gid(&m) == gid && m.mode() & dir_mask == dir_mask {
                return Ok(());
            }
        }
        own_tree(root, gid, mask)
    }

    /// The kubelet's `MountVolume.SetUp` for hostPath volumes: each path made or checked by its
    /// type. `Err` is the kubelet's FailedMount message.
    pub fn set_up_host_paths(&self) -> Result<(), String> {
        use std::os::unix::fs::FileTypeExt;
        for p in &self.plans {
            let VolumePlan::HostPath { name, path, kind } = p else {
                continue;
            };
            let meta = std::fs::metadata(path);
            let is = |f: &dyn Fn(&std::fs::FileType) -> bool| {
                meta.as_ref().is_ok_and(|m| f(&m.file_type()))
            };
            let problem = match kind {
                HostPathType::Unset => None,
                HostPathType::DirectoryOrCreate => {
                    // Made with its parents if missing; then it must be a directory.
                    let _ = std::fs::create_dir_all(path);
                    let dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
                    (!dir).then_some("is not a directory")
                }
                HostPathType::Directory => (!is(&|t| t.is_dir())).then_some("is not a directory"),
                HostPathType::FileOrCreate => {
                    if meta.is_err() {
                        let made = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .mode(0o644)
                            .open(path);
                        made.is_err().then_some("is not a file")
                    } else {
                        (!is(&|t| t.is_file())).then_some("is not a file")
                    }
                }
                HostPathType::File => (!is(&|t| t.is_file())).then_some("is not a file"),
                HostPathType::Socket => (!is(&|t| t.is_socket())).then_some("is not a socket file"),
                HostPathType::CharDevice => {
                    (!is(&|t| t.is_char_device())).then_some("is not a character device")
                }
                HostPathType::BlockDevice => {
                    (!is(&|t| t.is_block_device())).then_some("is not a block device")
                }
            };
            if let Some(what) = problem {
                return Err(format!(
                    "MountVolume.SetUp failed for volume {name:?} : hostPath type check failed: {path} {what}"
                ));
            }
        }
        Ok(())
    }

    /// The first emptyDir past its `sizeLimit`: the eviction manager's message for it
    /// (`emptyDirLimitEviction`, pkg/kubelet/eviction). Usage is what its files occupy.
    pub fn over_size_limit(&self) -> Option<String> {
        self.plans.iter().find_map(|p| {
            let VolumePlan::EmptyDir {
                name,
                size_limit: Some((limit, text)),
                ..
            } = p
            else {
                return None;
            };
            (disk_usage(&self.dir.join(name)) > *limit)
                .then(|| format!("Usage of EmptyDir volume {name:?} exceeds the limit {text:?}. "))
        })
    }

    /// Whether any emptyDir has a `sizeLimit` to watch.
    pub fn has_size_limits(&self) -> bool {
        self.plans.iter().any(|p| {
            matches!(
                p,
                VolumePlan::EmptyDir {
                    size_limit: Some(_),
                    ..
                }
            )
        })
    }

    /// Empties every emptyDir (a whole-pod restart) as far as it can: an entry that cannot be
    /// removed (an immutable file, a busy mount point) stays and the others still go. Each
    /// volume left not empty comes back with the first error met in it.
    pub fn wipe(&self) -> Vec<(String, io::Error)> {
        let mut failed = Vec::new();
        for p in &self.plans {
            if let VolumePlan::EmptyDir { name, .. } = p {
                // Its contents, not the directory, which may be a tmpfs's mount point.
                if let Err(e) = empty(&self.dir.join(name)) {
                    failed.push((name.clone(), e));
                }
            }
        }
        failed
    }

    /// The bind mounts of a container; `Err` is why it cannot start. In a private root
    /// (`private`, also rootless) their mount points are made inside it by the child, never
    /// on the host.
    pub fn mounts_for(
        &mut self,
        exec: &ContainerExec,
        private: bool,
    ) -> Result<Vec<BindMount>, String> {
        if exec.mounts.is_empty() {
            return Ok(Vec::new());
        }
        if sys::getuid() != 0 && !private {
            return Err("volumeMounts need root: podvisor binds each volume at its mountPath in a mount namespace of the container's own".into());
        }
        let mut out = Vec::new();
        for m in &exec.mounts {
            let Some(plan) = self.plans.iter().find(|p| p.name() == m.volume) else {
                return Err(format!("volume {:?} is not provided", m.volume));
            };
            let mut lower = Vec::new();
            let mut source = match plan {
                VolumePlan::HostPath { path, .. } => PathBuf::from(path),
                VolumePlan::Image { reference, .. } => {
                    let Some(layers) = self.images.get(&m.volume) else {
                        return Err(format!(
                            "image volume {:?}: image {reference:?} is not there yet",
                            m.volume
                        ));
                    };
                    // A subPath is what it is in the merged image (looked up when the image
                    // came: `image_ready`).
                    let layers = match &m.sub_path {
                        None => layers.clone(),
                        Some(sub) => {
                            let key = (m.volume.clone(), sub.clone());
                            match self.image_sub_paths.get(&key) {
                                Some(merged::Found::Dir(dirs)) => dirs.clone(),
                                Some(merged::Found::File(file)) => vec![file.clone()],
                                None => {
                                    return Err(format!(
                                        "subPath {sub:?} of image volume {:?} does not exist in image {reference:?}",
                                        m.volume
                                    ))
                                }
                            }
                        }
                    };
                    // One layer is bound; several are stacked by an overlay (which needs two).
                    if layers.len() > 1 {
                        lower = layers.clone();
                    }
                    layers[0].clone()
                }
                _ => self.dir.join(&m.volume),
            };
            let image = matches!(plan, VolumePlan::Image { .. });
            if let Some(sub) = m.sub_path.as_ref().filter(|_| !image) {
                let root = source.clone();
                source = source.join(sub);
                if matches!(plan, VolumePlan::EmptyDir { .. }) {
                    std::fs::create_dir_all(&source).map_err(|e| format!("subPath {sub}: {e}"))?;
                }
                // A symlink inside the volume must not lead out of it (the kubelet's
                // subpath check, pkg/volume/util/subpath).
                let inside = match (root.canonicalize(), source.canonicalize()) {
                    (Ok(r), Ok(s)) => s.starts_with(&r),
                    _ => true,
                };
                if !inside {
                    return Err(format!(
                        "subPath {sub:?} of volume {:?} leads outside the volume",
                        m.volume
                    ));
                }
            }
            // configMap, secret, downwardAPI and projected volumes are always read-only,
            // whatever the mount says (the kubelet since 1.10).
            // An image volume is read-only too (the kubelet's image volumes).
            let read_only =
                m.read_only || matches!(plan, VolumePlan::Files { .. } | VolumePlan::Image { .. });
            let target = PathBuf::from(&m.path);
            if !private && !target.exists() {
                self.create_mount_point(&target, source.is_dir())
                    .map_err(|e| format!("mountPath {}: {e}", target.display()))?;
            }
            let (host_to_container, recursive_read_only) = mount_options(m, &source, read_only)?;
            out.push(BindMount {
                source,
                target,
                read_only,
                lower,
                lower_base: None,
                host_to_container,
                recursive_read_only,
            });
        }
        Ok(out)
    }

    /// Image volume `name`'s image is there: its unpacked layers, top first (at least one).
    /// Each of `sub_paths` (the subPaths that mounts of it name) is looked up in the merged
    /// image; those that cannot be mounted come back, each with why.
    pub fn image_ready<'a>(
        &mut self,
        name: &str,
        layers: Vec<PathBuf>,
        sub_paths: impl IntoIterator<Item = &'a str>,
    ) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        self.image_sub_paths.retain(|(volume, _), _| volume != name);
        for sub in sub_paths {
            match merged::find(&layers, sub) {
                Ok(found) => {
                    let key = (name.to_string(), sub.to_string());
                    self.image_sub_paths.insert(key, found);
                }
                Err(e) => problems.push((sub.to_string(), e.to_string())),
            }
        }
        self.images.insert(name.to_string(), layers);
        problems
    }

    fn create_mount_point(&mut self, target: &Path, dir: bool) -> io::Result<()> {
        // Remember each directory made, so that the end of the run removes exactly those.
        let mut missing = Vec::new();
        let mut p = target.parent();
        while let Some(d) = p {
            if d.exists() {
                break;
            }
            missing.push(d.to_path_buf());
            p = d.parent();
        }
        for d in missing.iter().rev() {
            std::fs::create_dir(d)?;
            self.created.push(d.clone());
        }
        if dir {
            std::fs::create_dir(target)?;
        } else {
            std::fs::write(target, b"")?;
        }
        self.created.push(target.to_path_buf());
        Ok(())
    }

    /// Removes the mount points podvisor made (those still empty), and frees what `Memory`
    /// emptyDirs hold: their pages are charged to the containers' cgroups, which go next.
    pub fn clean_up(&mut self) {
        for p in &self.plans {
            if let VolumePlan::EmptyDir {
                name, memory: true, ..
            } = p
            {
                let _ = empty(&self.dir.join(name));
            }
        }
        for p in self.created.drain(..).rev() {
            if p.is_dir() {
                let _ = std::fs::remove_dir(&p);
            } else if std::fs::metadata(&p).is_ok_and(|m| m.len() == 0) {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
}

/// Removes every entry of `dir`, each even when an earlier one cannot be; the first error
/// names the entry it came from.
fn empty(dir: &Path) -> io::Result<()> {
    let mut first = Ok(());
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let removed = if e.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(e.path())
        } else {
            std::fs::remove_file(e.path())
        };
        match removed {
            Err(why) if first.is_ok() => {
                let name = e.file_name();
                let message = format!("cannot remove {}: {why}", name.to_string_lossy());
                first = Err(io::Error::new(why.kind(), message));
            }
            _ => {}
        }
    }
    first
}

/// The host's mounts directly beneath `/` that a private root carries (with what is mounted
/// below them): /proc, /sys and /dev as they are, the others read-only. Anything at or under
/// /tmp stays out: a container's /tmp is its own.
pub fn host_submounts(mounts: &[Mount]) -> Vec<(PathBuf, bool)> {
    // The root mount is the last one mounted at "/" (mounts stack).
    let Some(root) = mounts.iter().rev().find(|m| m.point == Path::new("/")) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, bool)> = Vec::new();
    for m in mounts.iter().filter(|m| m.parent == root.id) {
        let p = &m.point;
        if p == Path::new("/") || p.starts_with("/tmp") || out.iter().any(|(q, _)| q == p) {
            continue;
        }
        let live = ["/proc", "/sys", "/dev"].iter().any(|l| p == Path::new(l));
        out.push((p.clone(), !live));
    }
    out
}

/// Bytes the files under `dir` occupy (`du`: allocated blocks; a hard link counts at each of
/// its names), not following symlinks.
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// The host's top-level entries as a rootless root shows them: a directory with nothing
/// mounted at or below it is an overlay; one with mounts is bound with them (read-only but
/// /proc, /sys and /dev); symlinks are copied; what this user cannot read is an empty
/// directory; /tmp is left out (a fresh tmpfs).
pub fn rootless_entries(mounts: &[Mount]) -> Vec<TopEntry> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/") else {
        return out;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if path == Path::new("/tmp") {
            continue;
        }
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_symlink() {
            if let Ok(target) = std::fs::read_link(&path) {
                out.push(TopEntry::Symlink { path, target });
            }
            continue;
        }
        let mounted = mounts.iter().any(|m| m.point.starts_with(&path));
        let live = matches!(path.to_str(), Some("/proc" | "/sys" | "/dev"));
        if mounted || !kind.is_dir() {
            out.push(TopEntry::Bind {
                read_only: !live,
                path,
            });
        } else if std::fs::read_dir(&path).is_err() {
            out.push(TopEntry::Empty(path));
        } else {
            out.push(TopEntry::Overlay(path));
        }
    }
    out
}

/// Group `gid` and `mask` (setgid and search on directories too) on `path` and everything
/// below it; symlinks are re-grouped, never chmodded (that would change their targets).
fn own_tree(path: &Path, gid: u32, mask: u32) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    std::os::unix::fs::lchown(path, None, Some(gid))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    if meta.is_dir() {
        let mode = meta.mode() & 0o7777 | mask | 0o2000 | 0o110;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        for e in std::fs::read_dir(path)? {
            own_tree(&e?.path(), gid, mask)?;
        }
        return Ok(());
    }
    let mode = meta.mode() & 0o7777 | mask;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// A volume mount's `mountPropagation` and `recursiveReadOnly` as the runtime applies them:
/// (a slave of the host's mount, read-only below it too). `HostToContainer` needs the host's
/// mount holding `source` to pass mounts on, as containerd checks; `Enabled` needs a kernel
/// that makes recursive read-only mounts, which `IfPossible` uses where there is one, as the
/// kubelet resolves them. `Err` says why the container cannot start.
fn mount_options(m: &MountPlan, source: &Path, read_only: bool) -> Result<(bool, bool), String> {
    let kernel_can = sys::recursive_read_only_mounts();
    let Some(recursive) = m.recursive_read_only.resolve(read_only, kernel_can) else {
        return Err(format!(
            "volume {:?}: recursiveReadOnly Enabled needs recursive read-only mounts (mount_setattr(2), Linux 5.12), which this kernel does not have",
            m.volume
        ));
    };
    if m.propagation != Propagation::HostToContainer {
        return Ok((false, recursive));
    }
    let real = source
        .canonicalize()
        .unwrap_or_else(|_| source.to_path_buf());
    let mounts = crate::mountinfo::read();
    match crate::mountinfo::holding(&mounts, &real) {
        Some(host) if !host.passes_mounts_on() => Err(format!(
            "volume {:?}: path {:?} is mounted on {:?} but it is not a shared or slave mount",
            m.volume,
            real.display().to_string(),
            host.point.display().to_string()
        )),
        _ => Ok((true, recursive)),
    }
}
