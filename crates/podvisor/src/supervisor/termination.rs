//! Termination messages, as the kubelet makes them: each instance gets an empty file of the
//! state dir (`termination/NAME`, mode 0666 so that any user of the container may write it)
//! bound at its `terminationMessagePath`; when it ends, the file's end (or, under
//! `FallbackToLogsOnError`, its log's end) is its `state.terminated.message`.

use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use podvisor_core::lifecycle::InstanceId;
use podvisor_core::spec::termination::{
    self, TerminationMessage, MAX_FILE_BYTES, MAX_LOG_BYTES, MAX_LOG_LINES,
};

use super::Supervisor;
use crate::process::sys::{BindMount, PrivateRoot, TopEntry};
use crate::state::logs::tail_lines;
use crate::state::StateDir;

/// The bind of container `name`'s termination file for its next instance, made empty (the
/// last instance's is removed); `None` where it would have to be made on one of the host's
/// mounts carried into the root (the host's /dev of a rootless container), or
/// where the container has no root of its own to bind it in.
pub(super) fn fresh_file(
    dir: &StateDir,
    name: &str,
    how: &TerminationMessage,
    root: Option<&PrivateRoot>,
) -> io::Result<Option<BindMount>> {
    let file = dir.termination_file(name);
    match std::fs::remove_file(&file) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let target = Path::new(&how.path);
    if root.is_none_or(|r| !target.exists() && on_a_host_mount(r, target)) {
        return Ok(None);
    }
    let open = |file: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(file)
    };
    let made = match open(&file) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir.path().join("termination"))?;
            open(&file)?
        }
        made => made?,
    };
    // Whatever the umask took away.
    made.set_permissions(std::fs::Permissions::from_mode(0o666))?;
    Ok(Some(BindMount {
        source: file,
        target: target.to_path_buf(),
        read_only: false,
        lower: Vec::new(),
        lower_base: None,
        host_to_container: false,
        recursive_read_only: false,
    }))
}

/// Whether `target` lies on one of the host's mounts that a root carries (where its mount
/// point would be made on the host), rather than in the container's own layer or /dev.
fn on_a_host_mount(root: &PrivateRoot, target: &Path) -> bool {
    let carried = root.carry.iter().any(|(p, _)| target.starts_with(p));
    let bound = (root.rootless.iter().flat_map(|r| &r.entries))
        .any(|e| matches!(e, TopEntry::Bind { path, .. } if target.starts_with(path)));
    carried || bound
}

/// The message of instance `instance` of container `name`, which ended with `exit_code`:
/// the end of its file, or of its log where its policy says so; an error reading either is
/// the message, as the kubelet makes it.
pub(super) fn read(
    dir: &StateDir,
    name: &str,
    instance: u32,
    exit_code: i32,
    how: &TerminationMessage,
) -> Option<String> {
    let file = dir.termination_file(name);
    let from_file = match last_bytes(&file, MAX_FILE_BYTES) {
        Ok(bytes) => Some(termination::tail(&bytes, MAX_FILE_BYTES)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            let path = file.display();
            return Some(format!("Error on reading termination log {path}: {e}"));
        }
    };
    if !how.needs_logs(exit_code, from_file.as_deref()) {
        return from_file;
    }
    Some(
        match tail_lines(&dir.container_logs(name), instance, MAX_LOG_LINES) {
            Ok(text) => termination::tail(text.as_bytes(), MAX_LOG_BYTES),
            Err(e) => format!("Error on reading termination message from logs: {e}"),
        },
    )
}

/// The last `max` bytes of `path`.
fn last_bytes(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    f.seek(SeekFrom::Start(size.saturating_sub(max as u64)))?;
    let mut bytes = Vec::new();
    f.take(max as u64).read_to_end(&mut bytes)?;
    Ok(bytes)
}

impl Supervisor {
    /// Instance `id`'s termination message, now that it has ended with `exit_code`: its log
    /// streams are read to what they hold first, so that a message taken from its log has
    /// its last lines.
    pub(super) fn termination_message(
        &mut self,
        id: InstanceId,
        exit_code: i32,
    ) -> io::Result<Option<String>> {
        if self.plan.exec[id.container].termination.fallback_to_logs && exit_code != 0 {
            self.drain_logs_of(id)?;
        }
        let how = &self.plan.exec[id.container].termination;
        let name = &self.plan.pod.containers[id.container].name;
        Ok(read(&self.dir, name, id.instance, exit_code, how))
    }
}
