//! Where pods go on cgroup v2 (the unified hierarchy) with the cgroupfs driver, as the
//! kubelet's cgroupfs driver and runc place them: under one podvisor parent near the top of
//! the part of the tree podvisor may write, with the controllers the limits need enabled at
//! every level down to the container instance.
//!
//! cgroup v2's "no internal processes" rule shapes it: a cgroup that enables controllers for
//! its children may hold no process itself (the root excepted). podvisor's own cgroup holds
//! podvisor (and usually the shell that started it), so the pods never go below it:
//!
//! - as root: `<cgroup2 mount>/podvisor/POD/CONTAINER-N`, wherever podvisor was started from
//!   (a login session's scope, a service, the root cgroup, a container's cgroup namespace);
//! - as another user: the top of the subtree delegated to that user (the highest ancestor of
//!   its own cgroup that it owns, as systemd's `Delegate=yes` or `user@UID.service` make it),
//!   then `podvisor/POD/CONTAINER-N` under it.
//!
//! Where the top itself holds podvisor and nothing else (podvisor started in the delegated
//! cgroup, or as PID 1 of a cgroup namespace), podvisor moves itself into a leaf,
//! `podvisor-supervisor`, beside the pods, as container inits do. It never moves another
//! process. (The names are not systemd unit names: the systemd driver's slice is
//! `podvisor.slice`, and the two never share a directory.)

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::fs::{procs_of, write_file};
use super::{io_err, CgroupError};
use crate::process::sys;

/// The parent of every pod cgroup, below the top of the writable tree.
pub const PARENT: &str = "podvisor";

/// The leaf podvisor moves itself into when it sits at the top of its delegation.
pub const SELF_LEAF: &str = "podvisor-supervisor";

/// The controllers podvisor enables where they are offered: those its limits and usage use.
pub const WANTED: [&str; 3] = ["cpu", "memory", "pids"];

/// The pods' parent for a process of `uid` whose cgroup is `own` on the cgroup2 hierarchy
/// mounted at `mount`, made and with `enable` enabled for its children. `need` are the
/// controllers the pod's limits cannot do without; a missing one is an error naming it.
pub fn place(
    mount: &Path,
    own: &Path,
    uid: u32,
    need: &[&'static str],
) -> Result<(PathBuf, Vec<&'static str>), CgroupError> {
    let top = if uid == 0 {
        mount.to_path_buf()
    } else {
        delegation_top(mount, own, uid)?
    };
    let fix = if uid == 0 {
        "enable it in the parent's cgroup.subtree_control"
    } else {
        "have it delegated (systemd: Delegate=yes, e.g. systemd-run --user --scope -p Delegate=yes), or use --cgroup-driver systemd"
    };
    let enable = usable(&top, need, fix)?;
    enable_at_top(&top, own, &enable)?;
    Ok((top.join(PARENT), enable))
}

/// Of the controllers podvisor enables (`WANTED`), those `dir` offers its children
/// (`cgroup.controllers`); a controller of `need` it does not offer is an error with `fix`.
pub fn usable(
    dir: &Path,
    need: &[&'static str],
    fix: &'static str,
) -> Result<Vec<&'static str>, CgroupError> {
    let path = dir.join("cgroup.controllers");
    let text = std::fs::read_to_string(&path).map_err(io_err(&path, "read"))?;
    let offered: Vec<&str> = text.split_whitespace().collect();
    if let Some(missing) = need.iter().find(|c| !offered.contains(c)) {
        return Err(CgroupError::ControllerMissing {
            path: dir.display().to_string(),
            controller: missing,
            offered: offered.join(" "),
            fix,
        });
    }
    Ok(WANTED.into_iter().filter(|c| offered.contains(c)).collect())
}

/// The highest ancestor of `own` (itself included) that `uid` owns, with the files that make
/// a delegation (`cgroup.procs`, `cgroup.subtree_control`) owned too.
fn delegation_top(mount: &Path, own: &Path, uid: u32) -> Result<PathBuf, CgroupError> {
    let owner = |p: &Path| std::fs::metadata(p).map(|m| m.uid()).ok();
    let delegated = |p: &Path| {
        owner(p) == Some(uid)
            && owner(&p.join("cgroup.procs")) == Some(uid)
            && owner(&p.join("cgroup.subtree_control")) == Some(uid)
    };
    if own == mount || !delegated(own) {
        return Err(CgroupError::NotDelegated {
            path: own.display().to_string(),
            uid,
            owner: owner(&own.join("cgroup.subtree_control")).unwrap_or(0),
        });
    }
    let mut top = own.to_path_buf();
    while let Some(parent) = top.parent() {
        if parent == mount || !parent.starts_with(mount) || !delegated(parent) {
            break;
        }
        top = parent.to_path_buf();
    }
    Ok(top)
}

/// Enables `enable` for the top's children. The top may hold processes only if it is the
/// root; if it holds podvisor alone, podvisor moves itself into a leaf first.
fn enable_at_top(top: &Path, own: &Path, enable: &[&'static str]) -> Result<(), CgroupError> {
    match try_enable(top, enable) {
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let me = sys::getpid();
            let procs = procs_of(top);
            if own == top && procs.iter().all(|p| *p == me) {
                let leaf = top.join(SELF_LEAF);
                mkdir(&leaf)?;
                let path = leaf.join("cgroup.procs");
                write_file(&path, &me.to_string()).map_err(io_err(&path, "move podvisor into"))?;
                let path = top.join("cgroup.subtree_control");
                try_enable(top, enable).map_err(io_err(&path, "enable controllers in"))
            } else {
                let pids: Vec<String> = procs.iter().take(5).map(i32::to_string).collect();
                Err(CgroupError::Busy {
                    path: top.display().to_string(),
                    pids: pids.join(" "),
                })
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => Err(CgroupError::ReadOnly {
            path: top.display().to_string(),
        }),
        Err(e) => Err(io_err(
            &top.join("cgroup.subtree_control"),
            "enable controllers in",
        )(e)),
        Ok(()) => Ok(()),
    }
}

/// Writes `+c` for each of `enable` not yet in `dir`'s `cgroup.subtree_control`.
fn try_enable(dir: &Path, enable: &[&'static str]) -> io::Result<()> {
    let path = dir.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&path)?;
    let missing: Vec<String> = enable
        .iter()
        .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    write_file(&path, &missing.join(" "))
}

/// Enables `enable` for `dir`'s children (a cgroup podvisor made, which holds no process).
pub fn enable(dir: &Path, enable: &[&'static str]) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.subtree_control");
    try_enable(dir, enable).map_err(io_err(&path, "enable controllers in"))
}

fn mkdir(dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => Err(CgroupError::ReadOnly {
            path: dir.display().to_string(),
        }),
        Err(e) => Err(io_err(dir, "create")(e)),
    }
}

/// Makes the pod cgroup `dir`, and its parent (`podvisor`) with `enable` enabled for
/// its children when it is not there: another podvisor may remove an empty parent at any
/// time, so a parent that went away meanwhile is made again.
pub fn create_below_parent(dir: &Path, wanted: &[&'static str]) -> Result<(), CgroupError> {
    let parent = dir.parent().unwrap_or(dir);
    for _ in 0..3 {
        mkdir(parent)?;
        match enable(parent, wanted) {
            Err(CgroupError::Io { error, .. }) if error.kind() == io::ErrorKind::NotFound => {
                continue
            }
            r => r?,
        }
        match std::fs::create_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(dir, "create")(e)),
        }
    }
    Err(io_err(dir, "create")(io::Error::from_raw_os_error(
        libc::ENOENT,
    )))
}

/// After a pod cgroup is gone: its parent too, when no other pod is in it.
pub fn remove_parent_if_empty(pod_dir: &Path) {
    if let Some(parent) = pod_dir.parent() {
        if parent.file_name().is_some_and(|n| n == PARENT) {
            // Fails (EBUSY) while another pod's cgroup is there: then it stays.
            let _ = std::fs::remove_dir(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[test]
    fn not_delegated_at_the_mount_or_to_another_user() {
        let dir = TempDir::new("unified");
        let e = delegation_top(&dir, &dir, 4242).unwrap_err();
        assert!(e.to_string().contains("not delegated to uid 4242"), "{e}");
        let e = delegation_top(Path::new("/"), &dir, 4242).unwrap_err();
        assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
    }
}
