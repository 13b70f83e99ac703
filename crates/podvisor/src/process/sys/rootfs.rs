//! A container's root and mounts as the parent prepares them: the public description
//! (`PrivateRoot`, `Rootless`, `TopEntry`, `BindMount`) and the C strings the child reads
//! (`MountStrings`), made before the clone and kept alive until the child has exec'd.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;

use super::c_string;

/// A container's own root: an overlay of the host's `/` (read-only beneath) and an upper
/// layer on a tmpfs that lives as long as the container's mount namespace, so what the
/// container writes outside its volumes is gone when it ends, as with a runtime's
/// container layer. `/tmp` is a fresh tmpfs (empty at each start).
#[cfg_attr(feature = "full", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "full", serde(deny_unknown_fields))]
#[derive(Debug, Clone)]
pub struct PrivateRoot {
    /// An empty directory of the host: the layer's tmpfs is mounted on it inside the
    /// container's namespace only.
    pub layer_dir: std::path::PathBuf,
    /// The host's mounts beneath `/` to carry into the new root (with what is mounted below
    /// them), and whether each is read-only there.
    pub carry: Vec<(std::path::PathBuf, bool)>,
    /// `readOnlyRootFilesystem`: the layer is read-only too, and /tmp is not made.
    pub read_only: bool,
    /// An image's unpacked layers, top first, beneath the writable layer; none: the host's `/`.
    #[cfg_attr(feature = "full", serde(default))]
    pub lower_dirs: Vec<std::path::PathBuf>,
    /// Set: `lower_dirs` are relative to it, as `BindMount::lower_base` says.
    #[cfg_attr(feature = "full", serde(default))]
    pub lower_base: Option<std::path::PathBuf>,
    /// A /dev of its own, as a runtime gives every container: a tmpfs with null, zero, full,
    /// random, urandom and tty, the /proc/self/fd links, a devpts of its own, /dev/shm and
    /// /dev/mqueue; and containerd's masked and read-only paths of /proc and /sys. Otherwise
    /// the host's /dev is carried (rootless, where device nodes cannot be made).
    #[cfg_attr(feature = "full", serde(default))]
    pub own_dev: bool,
    /// `privileged`: that /dev has the host's devices too (`host_devices`), and nothing of
    /// /proc or /sys is masked or read-only.
    #[cfg_attr(feature = "full", serde(default))]
    pub privileged: bool,
    /// The host's devices, for a privileged container's /dev.
    #[cfg_attr(feature = "full", serde(default))]
    pub host_devices: Vec<Device>,
    /// Without root: the container gets a user namespace of its own in which it is root
    /// (its uid and gid mapped to ours), and its root is built from the host's top level one
    /// entry at a time (an overlay cannot have `/` beneath it there: its submounts are
    /// locked), as rootless runtimes do.
    pub rootless: Option<Rootless>,
}

/// A device node as the host has it, made again in a privileged container's /dev.
#[cfg_attr(feature = "full", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "full", serde(deny_unknown_fields))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Where it is under /dev (`net/tun`).
    pub path: std::path::PathBuf,
    /// Its type and permission bits, as stat(2) gives them.
    pub mode: u32,
    pub major: u32,
    pub minor: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Directories of the host's /dev that hold no device a privileged container gets: what the
/// runtime mounts itself, and LXC's and udev's private ones (containerd's `HostDevices`).
const NOT_DEVICES: [&str; 7] = ["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];

/// The host's device nodes, as containerd gives a privileged container every one of them
/// (`HostDevices`): each character and block device under /dev, in its directories but
/// `NOT_DEVICES`, without `console` (made only for a terminal) and `ptmx` (a link to the
/// container's own devpts, as runc makes it). Links are not followed.
pub fn host_devices() -> io::Result<Vec<Device>> {
    let mut out = Vec::new();
    walk_devices(
        std::path::Path::new("/dev"),
        std::path::Path::new(""),
        &mut out,
    )?;
    Ok(out)
}

fn walk_devices(
    dir: &std::path::Path,
    under: &std::path::Path,
    out: &mut Vec<Device>,
) -> io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut entries = std::fs::read_dir(dir)?.collect::<io::Result<Vec<_>>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let path = under.join(&name);
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if !NOT_DEVICES.iter().any(|n| name == *n) {
                walk_devices(&entry.path(), &path, out)?;
            }
            continue;
        }
        let device = kind.is_char_device() || kind.is_block_device();
        if !device || name == "console" || path == std::path::Path::new("ptmx") {
            continue;
        }
        let meta = match std::fs::symlink_metadata(entry.path()) {
            Ok(m) => m,
            // Gone since the directory was read (a hot-unplugged disk).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        out.push(Device {
            path,
            mode: meta.mode(),
            major: libc::major(meta.rdev()),
            minor: libc::minor(meta.rdev()),
            uid: meta.uid(),
            gid: meta.gid(),
        });
    }
    Ok(())
}

/// What a rootless root is built from.
#[cfg_attr(feature = "full", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "full", serde(deny_unknown_fields))]
#[derive(Debug, Clone)]
pub struct Rootless {
    pub uid: u32,
    pub gid: u32,
    /// The host's top-level entries (`/etc`, `/usr`, …) and how each appears.
    pub entries: Vec<TopEntry>,
    /// An empty directory of the host for the overlays' upper layers (a second tmpfs).
    pub upper_dir: std::path::PathBuf,
    /// The run's user namespace, its maps written by `newuidmap` / `newgidmap` from
    /// `/etc/subuid` and `/etc/subgid` (`/proc/PID/fd/N` of a descriptor that holds it): the
    /// container enters it instead of getting one of its own that maps only `uid` and `gid`.
    #[cfg_attr(feature = "full", serde(default))]
    pub user_namespace: Option<std::path::PathBuf>,
    /// fuse-overlayfs (this path) mounts an image's layers (the root, image volumes of several
    /// layers) where the kernel will not mount an overlay in a user namespace (Linux before
    /// 5.11), as rootless podman's `mount_program` does; none: the kernel's overlay only. Given only to a container with a PID namespace
    /// of its own: its daemon lives in it and ends with it.
    #[cfg_attr(feature = "full", serde(default))]
    pub fuse_overlayfs: Option<std::path::PathBuf>,
    /// ... and the kernel's overlay is not tried first.
    #[cfg_attr(feature = "full", serde(default))]
    pub fuse_only: bool,
}

/// One entry of the host's `/` in a rootless root.
#[cfg_attr(feature = "full", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "full", serde(deny_unknown_fields))]
#[derive(Debug, Clone)]
pub enum TopEntry {
    /// A directory with nothing mounted in it: an overlay, writes go to the layer.
    Overlay(std::path::PathBuf),
    /// A mount point or a directory with mounts below: bound with them, read-only unless live
    /// (/proc, /sys, /dev).
    Bind {
        path: std::path::PathBuf,
        read_only: bool,
    },
    Symlink {
        path: std::path::PathBuf,
        target: std::path::PathBuf,
    },
    /// A directory this user cannot read (`/lost+found`, `/root`): an empty one.
    Empty(std::path::PathBuf),
}

/// `source` bound at `target`, read-only or not.
#[cfg_attr(feature = "full", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "full", serde(deny_unknown_fields))]
#[derive(Debug, Clone)]
pub struct BindMount {
    pub source: std::path::PathBuf,
    pub target: std::path::PathBuf,
    pub read_only: bool,
    /// An image volume of several layers: a read-only overlay of these directories (top
    /// first) is mounted at `target` instead of binding `source` (its top layer).
    #[cfg_attr(
        feature = "full",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub lower: Vec<std::path::PathBuf>,
    /// Set: `lower` are names relative to this directory (short links to the layers), and
    /// the overlay is mounted from it, so that a long list fits mount(2)'s one page of
    /// options.
    #[cfg_attr(
        feature = "full",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub lower_base: Option<std::path::PathBuf>,
    /// `mountPropagation: HostToContainer`: a slave of the host's mount, so that what the host
    /// mounts below `source` later reaches the container too.
    #[cfg_attr(
        feature = "full",
        serde(default, skip_serializing_if = "std::ops::Not::not")
    )]
    pub host_to_container: bool,
    /// `recursiveReadOnly`: read-only, the mounts below it too.
    #[cfg_attr(
        feature = "full",
        serde(default, skip_serializing_if = "std::ops::Not::not")
    )]
    pub recursive_read_only: bool,
}

/// One mount of `MountStrings`, as C strings.
pub(super) struct MountString {
    pub(super) source: CString,
    pub(super) target: CString,
    pub(super) read_only: bool,
    /// Directories to make first, in order.
    pub(super) dirs: Vec<CString>,
    /// Make the target as an empty file.
    pub(super) file: bool,
    /// Read-only applies below it too (a carried host mount).
    pub(super) recursive_read_only: bool,
    /// A host mount carried into the root: left out where it is gone (unmounted and its
    /// mount point removed since the run read the host's mounts).
    pub(super) carried: bool,
    /// An overlay's options (`lowerdir=…`): mounted instead of a bind of `source`.
    pub(super) overlay: Option<CString>,
    /// The directory the overlay's `lowerdir` names are relative to (none: absolute).
    pub(super) overlay_base: Option<CString>,
    /// Rootless: fuse-overlayfs's argv for the overlay, where the kernel's is refused or
    /// not wanted (`MountStrings::fuse_only`); empty: the kernel's alone.
    pub(super) fuse_argv: Vec<CString>,
    /// mount(2)'s propagation flags applied once it is mounted (0: none, it stays as made):
    /// see `MountStrings::settle_propagation`.
    pub(super) propagation: libc::c_ulong,
    /// A mount point inside a private root: (the root's directory, the target relative to
    /// it), which the child resolves inside the root, its symbolic links followed as the
    /// container will see them, never out of it (`place_mount`).
    pub(super) in_root: Option<(CString, CString)>,
}

/// What the parent prepares for a container's mounts, kept alive until the child has exec'd.
#[derive(Default)]
pub(super) struct MountStrings {
    pub(super) mounts: Vec<MountString>,
    /// The container's mounts start as slaves of the host's rather than private
    /// (`settle_propagation`).
    pub(super) slave_root: bool,
    pub(super) root: Option<[CString; 6]>,
    pub(super) root_read_only: bool,
    /// The directory the root's `lowerdir` names are relative to (none: absolute).
    pub(super) root_lower_base: Option<CString>,
    /// An image's root: its upper layer is fresh at each start already, so no /tmp is made.
    pub(super) root_from_image: bool,
    /// Rootless: uid map, gid map, upper dir; and its steps.
    pub(super) rootless: Option<[CString; 3]>,
    /// Rootless, in the run's mapped user namespace (`Rootless::user_namespace`): no maps
    /// are written.
    pub(super) mapped: bool,
    pub(super) steps: Vec<StepStrings>,
    /// Rootless, from an image, with fuse-overlayfs (`Rootless::fuse_overlayfs`): its argv
    /// for the image's overlay (step 5), and whether the kernel's is not tried first (for
    /// image volumes too).
    pub(super) fuse_argv: Vec<CString>,
    pub(super) fuse_only: bool,
    /// Where a /proc of its own PID namespace goes, inside the private root.
    pub(super) proc: Option<CString>,
    /// A /dev of its own, inside the private root.
    pub(super) dev: Option<DevStrings>,
}

/// A device node of a container's own /dev, made before the clone.
pub(super) struct NodeString {
    pub(super) path: CString,
    pub(super) mode: u32,
    pub(super) major: u32,
    pub(super) minor: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
}

/// The paths of a container's own /dev, made before the clone.
pub(super) struct DevStrings {
    pub(super) dir: CString,
    /// Directories to make in it (parents first), for devices below its top.
    pub(super) dirs: Vec<CString>,
    pub(super) nodes: Vec<NodeString>,
    /// (target, path) of each symlink.
    pub(super) links: Vec<(CString, CString)>,
    pub(super) pts: CString,
    pub(super) shm: CString,
    pub(super) mqueue: CString,
    /// Its /dev/null, which masks files.
    pub(super) null: CString,
    /// Paths hidden (a file under /dev/null, a directory under an empty read-only tmpfs) and
    /// paths made read-only, inside the root: containerd's default `maskedPaths` and
    /// `readonlyPaths`.
    pub(super) masked: Vec<CString>,
    pub(super) read_only: Vec<CString>,
}

/// containerd's default masked paths (pkg/oci, `populateDefaultUnixSpec`).
const MASKED: [&str; 12] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// containerd's default read-only paths.
const READ_ONLY: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The devices a runtime gives every container (runc's default devices).
const DEVICES: [(&str, u32, u32); 6] = [
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// The links a runtime puts in /dev.
const LINKS: [(&str, &str); 6] = [
    ("/proc/self/fd", "fd"),
    ("/proc/self/fd/0", "stdin"),
    ("/proc/self/fd/1", "stdout"),
    ("/proc/self/fd/2", "stderr"),
    ("pts/ptmx", "ptmx"),
    ("/proc/kcore", "core"),
];

impl DevStrings {
    /// `host_devices`: a privileged container's, made beside runc's (which win where both
    /// name a path, as in runc); none masked or read-only then.
    fn new(
        dir: &std::path::Path,
        inside: &dyn Fn(&std::path::Path) -> std::path::PathBuf,
        host_devices: Option<&[Device]>,
    ) -> io::Result<DevStrings> {
        let c = |p: &std::path::Path| c_string(p.as_os_str().as_bytes());
        let mut nodes = Vec::new();
        for (name, major, minor) in DEVICES {
            nodes.push(NodeString {
                path: c(&dir.join(name))?,
                mode: libc::S_IFCHR | 0o666,
                major,
                minor,
                uid: 0,
                gid: 0,
            });
        }
        let mut dirs: Vec<std::path::PathBuf> = Vec::new();
        for d in host_devices.unwrap_or_default() {
            if DEVICES
                .iter()
                .any(|(name, _, _)| d.path == std::path::Path::new(name))
            {
                continue;
            }
            let parents: Vec<&std::path::Path> = d.path.ancestors().skip(1).collect();
            for p in parents
                .into_iter()
                .rev()
                .filter(|p| !p.as_os_str().is_empty())
            {
                if !dirs.iter().any(|known| known == p) {
                    dirs.push(p.to_path_buf());
                }
            }
            nodes.push(NodeString {
                path: c(&dir.join(&d.path))?,
                mode: d.mode,
                major: d.major,
                minor: d.minor,
                uid: d.uid,
                gid: d.gid,
            });
        }
        let paths = |list: &[&str]| -> io::Result<Vec<CString>> {
            match host_devices {
                Some(_) => Ok(Vec::new()),
                None => (list.iter())
                    .map(|p| c(&inside(std::path::Path::new(p))))
                    .collect(),
            }
        };
        let mut links = Vec::new();
        // /dev/core only where the kernel has a /proc/kcore, as runc makes it.
        let kcore = std::path::Path::new("/proc/kcore").exists();
        for (target, name) in LINKS
            .into_iter()
            .filter(|(t, _)| kcore || *t != "/proc/kcore")
        {
            links.push((c_string(target.as_bytes())?, c(&dir.join(name))?));
        }
        Ok(DevStrings {
            dir: c(dir)?,
            dirs: (dirs.iter().map(|d| c(&dir.join(d)))).collect::<io::Result<_>>()?,
            nodes,
            links,
            pts: c(&dir.join("pts"))?,
            shm: c(&dir.join("shm"))?,
            mqueue: c(&dir.join("mqueue"))?,
            null: c(&dir.join("null"))?,
            masked: paths(&MASKED)?,
            read_only: paths(&READ_ONLY)?,
        })
    }
}

impl MountStrings {
    /// `own_proc`: the process is in a PID namespace other than podvisor's, and a private
    /// root gets a /proc of it.
    pub(super) fn new(
        mounts: &[BindMount],
        root: Option<&PrivateRoot>,
        own_proc: bool,
    ) -> io::Result<MountStrings> {
        let c = |p: &std::path::Path| c_string(p.as_os_str().as_bytes());
        let mut out = MountStrings::default();
        let Some(root) = root else {
            for m in mounts {
                out.mounts.push(MountString {
                    source: c(&m.source)?,
                    target: c(&m.target)?,
                    read_only: m.read_only,
                    dirs: Vec::new(),
                    file: false,
                    recursive_read_only: m.recursive_read_only,
                    carried: false,
                    overlay: overlay_option(m, false)?,
                    overlay_base: lower_base(m.lower_base.as_deref())?,
                    fuse_argv: Vec::new(),
                    propagation: from_host(m),
                    in_root: None,
                });
            }
            out.settle_propagation();
            return Ok(out);
        };
        // As root the overlay is mounted at `merged` inside the layer's tmpfs; rootless the
        // tmpfs itself is the new root, or, from an image, the image's overlay at `merged`.
        let merged = if root.rootless.is_some() && root.lower_dirs.is_empty() {
            root.layer_dir.clone()
        } else {
            root.layer_dir.join("merged")
        };
        let inside = |p: &std::path::Path| merged.join(p.strip_prefix("/").unwrap_or(p));
        out.root = Some([
            c(&root.layer_dir)?,
            c(&root.layer_dir.join("upper"))?,
            c(&root.layer_dir.join("work"))?,
            c(&merged)?,
            c_string(
                format!(
                    "lowerdir={},upperdir={},workdir={}",
                    lower_option(&root.lower_dirs),
                    root.layer_dir.join("upper").display(),
                    root.layer_dir.join("work").display()
                )
                .as_bytes(),
            )?,
            c(&merged.join("tmp"))?,
        ]);
        out.root_read_only = root.read_only;
        out.root_lower_base = lower_base(root.lower_base.as_deref())?;
        out.root_from_image = !root.lower_dirs.is_empty();
        if let Some(r) = &root.rootless {
            out.rootless = Some([
                c_string(format!("0 {} 1", r.uid).as_bytes())?,
                c_string(format!("0 {} 1", r.gid).as_bytes())?,
                c(&r.upper_dir)?,
            ]);
            out.mapped = r.user_namespace.is_some();
            out.steps = rootless_steps(r, &root.lower_dirs, &merged, &inside, root.read_only)?;
            if let (Some(program), false) = (&r.fuse_overlayfs, root.lower_dirs.is_empty()) {
                let base = root.lower_base.as_deref();
                out.fuse_argv = fuse_argv(program, &root.lower_dirs, base, Some(r), &merged)?;
                out.fuse_only = r.fuse_only;
            }
        }
        // Rootless, the host's mounts come in with the top-level entries.
        let carry = root.carry.iter().filter(|_| root.rootless.is_none());
        for (path, read_only) in carry {
            out.mounts.push(MountString {
                source: c(path)?,
                target: c(&inside(path))?,
                read_only: false,
                dirs: Vec::new(),
                file: false,
                recursive_read_only: *read_only,
                carried: true,
                overlay: None,
                overlay_base: None,
                fuse_argv: Vec::new(),
                propagation: 0,
                in_root: None,
            });
        }
        for m in mounts {
            let mut mount = volume_in_root(m, &inside, root.rootless.is_some())?;
            let relative = m.target.strip_prefix("/").unwrap_or(&m.target);
            mount.in_root = Some((c(&merged)?, c(relative)?));
            // Rootless, an image volume of several layers may be fuse-overlayfs's too.
            let fuse = root
                .rootless
                .as_ref()
                .and_then(|r| r.fuse_overlayfs.as_ref());
            if let (Some(program), false) = (fuse, m.lower.is_empty()) {
                let base = m.lower_base.as_deref();
                mount.fuse_argv = fuse_argv(program, &m.lower, base, None, &inside(&m.target))?;
            }
            out.mounts.push(mount);
        }
        if own_proc {
            out.proc = Some(c(&inside(std::path::Path::new("/proc")))?);
        }
        if root.own_dev && root.rootless.is_none() {
            out.dev = Some(DevStrings::new(
                &inside(std::path::Path::new("/dev")),
                &inside,
                root.privileged.then_some(root.host_devices.as_slice()),
            )?);
        }
        out.settle_propagation();
        Ok(out)
    }

    /// With a mount that receives the host's (`HostToContainer`), the container's mounts
    /// start as slaves of the host's (`slave_root`), as under runc's `rslave` root, and every
    /// other one is made private once mounted (the volumes' `rprivate`); without one, they
    /// are all private from the start and nothing more is done.
    fn settle_propagation(&mut self) {
        self.slave_root = self.mounts.iter().any(|m| m.propagation != 0);
        if self.slave_root {
            for m in self.mounts.iter_mut().filter(|m| m.propagation == 0) {
                m.propagation = libc::MS_REC | libc::MS_PRIVATE;
            }
        }
    }
}

/// The propagation a volume asks for once mounted: a slave of the host's, or as it is made.
fn from_host(m: &BindMount) -> libc::c_ulong {
    match m.host_to_container {
        true => libc::MS_REC | libc::MS_SLAVE,
        false => 0,
    }
}

/// An overlay's `lowerdir`: the image's layers, top first, or the host's `/`.
fn lower_option(lower_dirs: &[std::path::PathBuf]) -> String {
    if lower_dirs.is_empty() {
        return "/".into();
    }
    // A `\`, `:` or `,` in a path (a subPath's) is escaped as overlayfs reads them.
    let escape = |d: &std::path::PathBuf| {
        let mut out = String::new();
        for ch in d.display().to_string().chars() {
            if matches!(ch, '\\' | ':' | ',') {
                out.push('\\');
            }
            out.push(ch);
        }
        out
    };
    let dirs: Vec<String> = lower_dirs.iter().map(escape).collect();
    dirs.join(":")
}

/// A volume mount inside a private root (`inside` maps a path into it): its source and
/// target, and each missing directory down to the mount point, made in the layer.
fn volume_in_root(
    m: &BindMount,
    inside: &dyn Fn(&std::path::Path) -> std::path::PathBuf,
    rootless: bool,
) -> io::Result<MountString> {
    let c = |p: &std::path::Path| c_string(p.as_os_str().as_bytes());
    let target = inside(&m.target);
    let mut dirs = Vec::new();
    let mut p = m.target.parent();
    while let Some(d) = p.filter(|d| *d != std::path::Path::new("/")) {
        dirs.push(c(&inside(d))?);
        p = d.parent();
    }
    dirs.reverse();
    let is_file = !m.source.is_dir();
    if !is_file {
        dirs.push(c(&target)?);
    }
    Ok(MountString {
        source: c(&m.source)?,
        target: c(&target)?,
        read_only: m.read_only,
        dirs,
        file: is_file,
        recursive_read_only: m.recursive_read_only,
        carried: false,
        overlay: overlay_option(m, rootless)?,
        overlay_base: lower_base(m.lower_base.as_deref())?,
        fuse_argv: Vec::new(),
        propagation: from_host(m),
        in_root: None,
    })
}

/// The directory relative `lowerdir` names are read from, as a C string.
fn lower_base(base: Option<&std::path::Path>) -> io::Result<Option<CString>> {
    base.map(|b| c_string(b.as_os_str().as_bytes())).transpose()
}

/// The overlay options of an image volume of several layers (`None`: a bind mount);
/// `rootless`: mounted in the container's user namespace, which reads `user.` xattrs.
fn overlay_option(m: &BindMount, rootless: bool) -> io::Result<Option<CString>> {
    if m.lower.is_empty() {
        return Ok(None);
    }
    let user = if rootless { "userxattr," } else { "" };
    c_string(format!("{user}lowerdir={}", lower_option(&m.lower)).as_bytes()).map(Some)
}

/// fuse-overlayfs's argv for an overlay of `lower_dirs` at `target` (the layers by absolute
/// paths: it takes no escaped `:`, and its options are not bound by mount(2)'s page): an
/// image's root, on `upper`'s layer, or, without, an image volume (read-only).
fn fuse_argv(
    program: &std::path::Path,
    lower_dirs: &[std::path::PathBuf],
    base: Option<&std::path::Path>,
    upper: Option<&Rootless>,
    target: &std::path::Path,
) -> io::Result<Vec<CString>> {
    let lower: Vec<std::path::PathBuf> = match base {
        Some(base) => lower_dirs.iter().map(|d| base.join(d)).collect(),
        None => lower_dirs.to_vec(),
    };
    let dirs: Vec<std::path::PathBuf> = upper
        .map(|r| vec![r.upper_dir.join("image.u"), r.upper_dir.join("image.w")])
        .unwrap_or_default();
    let unsafe_path = (lower.iter().chain(&dirs)).find(|d| {
        let text = d.as_os_str().as_bytes();
        text.contains(&b':') || text.contains(&b',')
    });
    if let Some(d) = unsafe_path {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "fuse-overlayfs cannot take {} (a ':' or ',' in it)",
                d.display()
            ),
        ));
    }
    let lower: Vec<String> = lower.iter().map(|d| d.display().to_string()).collect();
    let options = match &dirs[..] {
        [up, work] => format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.join(":"),
            up.display(),
            work.display()
        ),
        _ => format!("ro,lowerdir={}", lower.join(":")),
    };
    let c = |p: &std::path::Path| c_string(p.as_os_str().as_bytes());
    Ok(vec![
        c(program)?,
        c_string(b"-o")?,
        c_string(options.as_bytes())?,
        c(target)?,
    ])
}

/// One step of building a rootless root, as `RootlessStep` reads it (an empty string where
/// the step's kind takes none).
pub(super) struct StepStrings {
    pub(super) kind: u8,
    pub(super) source: CString,
    pub(super) target: CString,
    pub(super) upper: CString,
    pub(super) work: CString,
    pub(super) lower: CString,
    pub(super) flag: bool,
}

/// The steps that build a rootless root (`inside` maps a path into it): from an image
/// (`lower_dirs`), its layers' overlay at `merged` first (step 5: the kernel's, or
/// fuse-overlayfs's; read-only, if asked, once the root is built); then the host's top-level
/// entries.
fn rootless_steps(
    r: &Rootless,
    lower_dirs: &[std::path::PathBuf],
    merged: &std::path::Path,
    inside: &dyn Fn(&std::path::Path) -> std::path::PathBuf,
    read_only: bool,
) -> io::Result<Vec<StepStrings>> {
    let c = |p: &std::path::Path| c_string(p.as_os_str().as_bytes());
    let step = |kind, source, target, flag| -> io::Result<StepStrings> {
        Ok(StepStrings {
            kind,
            source,
            target,
            upper: c_string(b"")?,
            work: c_string(b"")?,
            lower: c_string(b"")?,
            flag,
        })
    };
    let mut steps = Vec::new();
    if !lower_dirs.is_empty() {
        let upper = r.upper_dir.join("image.u");
        let work = r.upper_dir.join("image.w");
        let options = format!(
            "userxattr,lowerdir={},upperdir={},workdir={}",
            lower_option(lower_dirs),
            upper.display(),
            work.display()
        );
        steps.push(StepStrings {
            upper: c(&upper)?,
            work: c(&work)?,
            ..step(5, c_string(options.as_bytes())?, c(merged)?, false)?
        });
    }
    for (i, e) in r.entries.iter().enumerate() {
        steps.push(match e {
            TopEntry::Overlay(path) => {
                let upper = r.upper_dir.join(format!("{i}.u"));
                let work = r.upper_dir.join(format!("{i}.w"));
                let options = format!(
                    "userxattr,lowerdir={},upperdir={},workdir={}",
                    path.display(),
                    upper.display(),
                    work.display()
                );
                StepStrings {
                    upper: c(&upper)?,
                    work: c(&work)?,
                    lower: c(path)?,
                    ..step(
                        0,
                        c_string(options.as_bytes())?,
                        c(&inside(path))?,
                        read_only,
                    )?
                }
            }
            TopEntry::Bind { path, read_only } => {
                let kind = if path.is_dir() { 1 } else { 3 };
                step(kind, c(path)?, c(&inside(path))?, *read_only)?
            }
            TopEntry::Symlink { path, target } => step(2, c(target)?, c(&inside(path))?, false)?,
            TopEntry::Empty(path) => step(4, c_string(b"")?, c(&inside(path))?, false)?,
        });
    }
    Ok(steps)
}
