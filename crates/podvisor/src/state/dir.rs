//! The paths of a pod's state dir, and its lock.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use super::{StateError, StateFile};
use crate::process::sys;

/// The saved record's file name.
/// How long a run tries the state dir's lock before it says another run holds it.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);
const RECORD: &str = "podvisor.state";
/// The lock a run holds for as long as it lasts, with its pid in it.
use super::LOCK;
/// The status API's socket.
const SOCKET: &str = "podvisor.sock";
/// The pod as its run last showed it (a v1 Pod, JSON), written when the run ends.
const LAST_POD: &str = "pod.json";
/// The run's events (JSON lines), appended as they happen (`events.jsonl.1`: the ones before).
const LAST_EVENTS: &str = "events.jsonl";

/// A pod's state dir.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StateDir {
    root: PathBuf,
}

/// Why `run` refused a state dir: another run holds it.
#[derive(Debug, thiserror::Error)]
#[error("{dir}: in use by another podvisor run (pid {pid}): one pod per state dir; pass another --state-dir")]
pub struct StateDirInUse {
    pub dir: String,
    pub pid: String,
}

/// The state dir's lock, held until dropped (the kernel drops it when the run dies,
/// however it dies).
#[derive(Debug)]
pub struct Lock(#[allow(dead_code)] File);

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    /// A pod's state dir under the default base (`base`): `BASE/NAMESPACE/POD`.
    pub fn default_for(namespace: &str, pod: &str) -> StateDir {
        StateDir::new(base().join(namespace).join(pod))
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The state dir's own name (the pod's, for one under the default base).
    pub fn name(&self) -> String {
        self.root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Makes the state dir and its log dir.
    pub fn create(&self) -> Result<(), StateError> {
        std::fs::create_dir_all(self.logs_dir()).map_err(|error| StateError::Io {
            path: self.root.display().to_string(),
            what: "make the state dir",
            error,
        })
    }

    /// The saved record (`podvisor.state`).
    pub fn record(&self) -> Result<StateFile, StateError> {
        StateFile::new(&self.root, RECORD)
    }

    /// The pod as its run showed it when it ended (`pod.json`): what `status`, `describe`
    /// and `get pods` show of an ended pod.
    pub fn last_pod(&self) -> Result<StateFile, StateError> {
        StateFile::new(&self.root, LAST_POD)
    }

    /// The run's events (`events.jsonl`), appended as they happen.
    pub fn last_events(&self) -> Result<StateFile, StateError> {
        StateFile::new(&self.root, LAST_EVENTS)
    }

    pub fn events_path(&self) -> PathBuf {
        self.root.join(LAST_EVENTS)
    }

    /// Where a full events file is moved aside: `events.jsonl.1`.
    pub fn rotated_events(events: &Path) -> PathBuf {
        let mut name = events.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }

    /// The last `n` events kept in the state dir, oldest first (JSON lines); `None` when the
    /// run kept none.
    pub fn kept_events(&self, n: usize) -> io::Result<Option<String>> {
        let path = self.events_path();
        let read = |p: &Path| match std::fs::read_to_string(p) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        };
        let (before, now) = (read(&Self::rotated_events(&path))?, read(&path)?);
        if before.is_none() && now.is_none() {
            return Ok(None);
        }
        let all = format!("{}{}", before.unwrap_or_default(), now.unwrap_or_default());
        let lines: Vec<&str> = all.lines().filter(|l| !l.is_empty()).collect();
        let from = lines.len().saturating_sub(n);
        Ok(Some(
            lines[from..].iter().map(|l| format!("{l}\n")).collect(),
        ))
    }

    pub fn lock_path(&self) -> PathBuf {
        self.root.join(LOCK)
    }

    /// One pod per state dir: an exclusive lock on `podvisor.lock`, holding our pid. A client
    /// that asks whether a run holds it takes it for a moment (`is_running`): the lock is
    /// tried for `LOCK_PATIENCE` before the state dir is said to be in use, so that a run
    /// started while a client looks is not turned away.
    pub fn lock(&self) -> Result<Lock, LockError> {
        let path = self.lock_path();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let deadline = std::time::Instant::now() + LOCK_PATIENCE;
        let mut locked = sys::try_lock(&file)?;
        while !locked && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            locked = sys::try_lock(&file)?;
        }
        if !locked {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Err(LockError::InUse(StateDirInUse {
                dir: self.root.display().to_string(),
                pid: pid.trim().to_string(),
            }));
        }
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        Ok(Lock(file))
    }

    /// Whether a run holds the state dir now.
    pub fn is_running(&self) -> bool {
        sys::lock_is_held(&self.lock_path()).unwrap_or(false)
    }

    /// The status API's socket.
    pub fn socket(&self) -> PathBuf {
        self.root.join(SOCKET)
    }

    /// `logs/`: a directory per container.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// Removes every container's log files: a new pod on this state dir numbers its
    /// instances from the start again, and the last pod's lines are not its own (as a new pod
    /// of the kubelet's has logs of its own).
    pub fn clear_logs(&self) -> Result<(), StateError> {
        let dir = self.logs_dir();
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |error| StateError::Io {
                path,
                what: "remove the last pod's logs",
                error,
            }
        };
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let path = entry.map_err(io(&dir))?.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(io(&path))?;
        }
        Ok(())
    }

    /// `logs/NAME/`: a container's log files, `N.log` per instance (`logs`).
    pub fn container_logs(&self, container: &str) -> PathBuf {
        self.logs_dir().join(container)
    }

    /// `logs/NAME/N.log`: the current log file of a container instance.
    pub fn instance_log(&self, container: &str, instance: u32) -> PathBuf {
        self.container_logs(container)
            .join(super::logs::file_name(instance))
    }

    /// `termination/NAME`: the file container NAME's current instance may write its
    /// termination message in (bound at its `terminationMessagePath`).
    pub fn termination_file(&self, container: &str) -> PathBuf {
        self.root.join("termination").join(container)
    }

    /// `keepers/`: the keepers' sockets and exit notes (`keeper`).
    pub fn keepers_dir(&self) -> PathBuf {
        self.root.join("keepers")
    }

    /// The socket of keeper `pid`.
    pub fn keeper_socket(&self, pid: i32) -> PathBuf {
        self.keepers_dir().join(format!("keeper.{pid}.sock"))
    }

    /// The keepers' sockets found in the state dir, sorted.
    pub fn keeper_sockets(&self) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = self
            .entries(&self.keepers_dir())
            .filter(|(name, _)| name.starts_with("keeper.") && name.ends_with(".sock"))
            .map(|(_, path)| path)
            .collect();
        found.sort();
        found
    }

    /// The exit note a keeper writes for a container instance.
    pub fn exit_note(&self, container: &str, instance: u32) -> Result<StateFile, StateError> {
        StateFile::new(
            &self.keepers_dir(),
            &super::keeper::exit_note_name(container, instance),
        )
    }

    /// Removes the exit note of a container instance, if there is one; what cannot be removed
    /// is left for the next run's take-up, which removes the notes it does not read.
    pub fn remove_exit_note(&self, container: &str, instance: u32) {
        if let Ok(note) = self.exit_note(container, instance) {
            let _ = note.remove();
        }
    }

    /// The exit notes in the state dir: (file name, path).
    pub fn exit_notes(&self) -> Vec<(String, PathBuf)> {
        self.entries(&self.keepers_dir())
            .filter(|(name, _)| name.ends_with(".exit"))
            .collect()
    }

    /// `volumes/`: a directory per volume.
    pub fn volumes_dir(&self) -> PathBuf {
        self.root.join("volumes")
    }

    /// `rootfs/`: where each container's private root is mounted (in its own mount
    /// namespace).
    pub fn rootfs_dir(&self) -> PathBuf {
        self.root.join("rootfs")
    }

    /// `rootfs-upper/`: the writable layers of rootless private roots.
    pub fn rootfs_upper_dir(&self) -> PathBuf {
        self.root.join("rootfs-upper")
    }

    /// `lowers/`: short links to the layers of overlays whose layers are many.
    pub fn lowers_dir(&self) -> PathBuf {
        self.root.join("lowers")
    }

    fn entries(&self, dir: &Path) -> impl Iterator<Item = (String, PathBuf)> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
    }
}

/// Why the state dir could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(transparent)]
    InUse(#[from] StateDirInUse),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Where state dirs live by default: `$PODVISOR_STATE_BASE` when set; else
/// `/var/lib/podvisor` for root, `$XDG_STATE_HOME/podvisor` (or `~/.local/state/podvisor`)
/// for others.
pub fn base() -> PathBuf {
    if let Some(b) = std::env::var_os("PODVISOR_STATE_BASE").filter(|b| !b.is_empty()) {
        return PathBuf::from(b);
    }
    // Root (the owner of /proc/self) gets the system directory (docs/state.md).
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if root {
        PathBuf::from("/var/lib/podvisor")
    } else {
        xdg_home("XDG_STATE_HOME", ".local/state").join("podvisor")
    }
}

/// A user's XDG base directory: `$VAR`, else `~/FALLBACK`.
fn xdg_home(var: &str, fallback: &str) -> PathBuf {
    xdg_home_of(std::env::var_os(var), std::env::var_os("HOME"), fallback)
}

/// `value` when it is an absolute path (the XDG Base Directory rules: an empty or relative
/// value is ignored), else `fallback` under `home` (`.` without one).
fn xdg_home_of(
    value: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
    fallback: &str,
) -> PathBuf {
    match value.map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        _ => PathBuf::from(home.unwrap_or_else(|| ".".into())).join(fallback),
    }
}

/// Where a user's image store lives: `.images` under the state base for root or when
/// `$PODVISOR_STATE_BASE` is set; else `$XDG_DATA_HOME/podvisor/images`
/// (`~/.local/share/podvisor/images`): images are data a user keeps, not a run's state.
pub fn images_dir() -> PathBuf {
    let set = std::env::var_os("PODVISOR_STATE_BASE").is_some_and(|b| !b.is_empty());
    if set || crate::process::sys::getuid() == 0 {
        return base().join(".images");
    }
    xdg_home("XDG_DATA_HOME", ".local/share").join("podvisor/images")
}

/// A settings directory of podvisor's: `/etc/podvisor/LEAF` for root,
/// `$XDG_CONFIG_HOME/podvisor/LEAF` (`~/.config/podvisor/LEAF`) for others.
pub fn config_dir(leaf: &str) -> PathBuf {
    if crate::process::sys::getuid() == 0 {
        return PathBuf::from("/etc/podvisor").join(leaf);
    }
    xdg_home("XDG_CONFIG_HOME", ".config")
        .join("podvisor")
        .join(leaf)
}

/// The state dirs under a base (`BASE/NAMESPACE/POD`), whether a run is there or not.
pub fn under(base: &Path) -> Vec<StateDir> {
    let mut found = Vec::new();
    for ns in std::fs::read_dir(base).into_iter().flatten().flatten() {
        for pod in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            found.push(StateDir::new(pod.path()));
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_xdg_variable_counts_only_as_an_absolute_path() {
        let home = Some("/home/u".into());
        let of = |v: Option<&str>| xdg_home_of(v.map(Into::into), home.clone(), ".local/share");
        assert_eq!(of(Some("/data")), PathBuf::from("/data"));
        assert_eq!(of(None), PathBuf::from("/home/u/.local/share"));
        assert_eq!(of(Some("")), PathBuf::from("/home/u/.local/share"));
        assert_eq!(of(Some("rel/dir")), PathBuf::from("/home/u/.local/share"));
        assert_eq!(
            xdg_home_of(None, None, ".config"),
            PathBuf::from("./.config")
        );
    }
}
