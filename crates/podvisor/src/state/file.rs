//! A state file: written atomically (write, fsync, rename, fsync the directory), so that after
//! any crash it holds either the old contents or the new, never half; read strictly: a file
//! that cannot be read is refused with what to do, never reset behind the user's back. A
//! record of what dies with the machine is written atomically but not synced, with the boot
//! it was written in, and read back only in that boot.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[cfg(feature = "full")]
use super::processes::boot_id;
use super::record::RecordError;

use crate::process::errno::describe;

/// Why a state file was refused or could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: the saved state cannot be used: {error}; {remedy}")]
    Refused {
        path: String,
        error: RecordError,
        remedy: &'static str,
    },
    #[error("{path}: the saved state cannot be used: {message}; {remedy}")]
    Mismatch {
        path: String,
        message: String,
        remedy: &'static str,
    },
    #[error("{path}: cannot {what}: {}", describe(.error))]
    Io {
        path: String,
        what: &'static str,
        error: io::Error,
    },
}

/// A state file and its directory.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    tmp: PathBuf,
    /// The directory, kept open to fsync it after each rename.
    dir: File,
}

impl StateFile {
    /// The file `name` in `dir` (which must exist). Fails when the directory cannot be opened.
    pub fn new(dir: &Path, name: &str) -> Result<StateFile, StateError> {
        let path = dir.join(name);
        let handle = File::open(dir).map_err(|error| StateError::Io {
            path: dir.display().to_string(),
            what: "open the state dir",
            error,
        })?;
        Ok(StateFile {
            tmp: dir.join(format!(".{name}.tmp")),
            path,
            dir: handle,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's text, or `None` when there is none yet.
    pub fn read(&self) -> Result<Option<String>, StateError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Ok(Some(text)),
                // Not text: no podvisor wrote that.
                Err(_) => Err(self.refused(RecordError::NotState)),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(self.io("read it", error)),
        }
    }

    /// The refusal for a record that cannot be decoded.
    pub fn refused(&self, error: RecordError) -> StateError {
        StateError::Refused {
            path: self.path.display().to_string(),
            error,
            remedy: RESET_REMEDY,
        }
    }

    /// Replaces the file with `text` so that a crash at any point leaves the old or the new
    /// file, whole: a temporary file is written and fsynced, renamed over the file, and the
    /// directory is fsynced so that the rename itself is durable.
    pub fn write(&self, text: &str) -> Result<(), StateError> {
        self.write_temporary(text, true)?;
        self.failpoint("synced");
        self.rename_into_place()?;
        self.failpoint("renamed");
        self.dir
            .sync_all()
            .map_err(|error| self.io("fsync its directory", error))
    }

    /// Replaces the file with a line `boot ID` (the kernel's boot id) and `text`, so that a
    /// crash of podvisor at any point leaves the old or the new file, whole (a temporary file
    /// renamed over it), but syncs nothing: for a record of what dies with the machine
    /// (cgroups), which a power loss makes moot anyway. After one, the file may hold anything
    /// the disk had; `read_of_this_boot` tells by the boot line that it is not of this boot.
    #[cfg(feature = "full")]
    pub fn write_for_this_boot(&self, text: &str) -> Result<(), StateError> {
        let text = format!("{BOOT}{}\n{text}", boot_id());
        self.write_temporary(&text, false)?;
        self.rename_into_place()
    }

    /// The `text` that `write_for_this_boot` wrote in this boot; `None` when there is no file,
    /// or it was written in another boot, or it is not text (whatever a power loss left in
    /// it). A file without a boot line was written by a podvisor of before 2026-12, which
    /// synced it: it is returned whole.
    #[cfg(feature = "full")]
    pub fn read_of_this_boot(&self) -> Result<Option<String>, StateError> {
        let text = match self.read() {
            Ok(Some(text)) => text,
            Ok(None) | Err(StateError::Refused { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(rest) = text.strip_prefix(BOOT) else {
            return Ok(Some(text));
        };
        let (boot, text) = rest.split_once('\n').unwrap_or((rest, ""));
        Ok((boot == boot_id()).then(|| text.to_string()))
    }

    /// Writes `text` to the temporary file, and fsyncs its data if `sync`.
    fn write_temporary(&self, text: &str, sync: bool) -> Result<(), StateError> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&self.tmp)
            .map_err(|e| self.io("write it", e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| self.io("write it", e))?;
        if sync {
            f.sync_data().map_err(|e| self.io("fsync it", e))?;
        }
        Ok(())
    }

    fn rename_into_place(&self) -> Result<(), StateError> {
        std::fs::rename(&self.tmp, &self.path).map_err(|e| self.io("rename it into place", e))
    }

    /// The error of an operation `what` on the file that failed with `error`.
    fn io(&self, what: &'static str, error: io::Error) -> StateError {
        StateError::Io {
            path: self.path.display().to_string(),
            what,
            error,
        }
    }

    /// Failpoint `state.NAME.STEP` (NAME the file's name).
    fn failpoint(&self, step: &str) {
        if cfg!(debug_assertions) {
            let name = self.path.file_name().unwrap_or_default().to_string_lossy();
            crate::process::failpoint::hit(&format!("state.{name}.{step}"));
        }
    }

    /// Removes the file (durably: the directory is fsynced); none is fine.
    pub fn remove(&self) -> Result<(), StateError> {
        if self.remove_for_this_boot()? {
            (self.dir.sync_all()).map_err(|error| self.io("fsync its directory", error))?;
        }
        Ok(())
    }

    /// Removes the file without syncing its directory (see `write_for_this_boot`); none is
    /// fine. Whether there was one.
    pub fn remove_for_this_boot(&self) -> Result<bool, StateError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(self.io("remove it", error)),
        }
    }

    /// Moves a refused file aside (`NAME.refused-UNIXTIME`), so that `--reset-state` loses
    /// nothing a person may want to look at. Returns where it went.
    pub fn set_aside(&self) -> Result<PathBuf, StateError> {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut aside = self.path.clone().into_os_string();
        aside.push(format!(".refused-{secs}"));
        let aside = PathBuf::from(aside);
        std::fs::rename(&self.path, &aside).map_err(|error| self.io("move it aside", error))?;
        Ok(aside)
    }
}

/// How the first line of a file written by `write_for_this_boot` begins.
#[cfg(feature = "full")]
const BOOT: &str = "boot ";

/// What to do about a refused record of `podvisor run`.
pub const RESET_REMEDY: &str = "to start the pod from zero, run again with --reset-state (the file is moved aside, not deleted), or pass another --state-dir";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[test]
    fn writes_replace_whole_files_and_leave_no_temporary() {
        let d = TempDir::new("state");
        let f = StateFile::new(&d, "x.state").unwrap();
        assert!(f.read().unwrap().is_none());
        f.write("one\n").unwrap();
        f.write("two\n").unwrap();
        assert_eq!(f.read().unwrap().as_deref(), Some("two\n"));
        let names: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["x.state"]);
        let aside = f.set_aside().unwrap();
        assert!(aside.to_string_lossy().contains("x.state.refused-"));
        assert!(f.read().unwrap().is_none());
    }

    #[cfg(feature = "full")]
    #[test]
    fn a_record_for_this_boot_is_read_back_only_in_this_boot() {
        let d = TempDir::new("state");
        let f = StateFile::new(&d, "cgroups").unwrap();
        assert_eq!(f.read_of_this_boot().unwrap(), None);
        f.write_for_this_boot("/sys/fs/cgroup/a\n").unwrap();
        let written = f.read().unwrap().unwrap();
        assert_eq!(written, format!("boot {}\n/sys/fs/cgroup/a\n", boot_id()));
        assert_eq!(
            f.read_of_this_boot().unwrap().as_deref(),
            Some("/sys/fs/cgroup/a\n")
        );
        // Another boot's, or not text (what a power loss may leave): nothing of it is read.
        std::fs::write(f.path(), "boot 0123-other\n/sys/fs/cgroup/a\n").unwrap();
        assert_eq!(f.read_of_this_boot().unwrap(), None);
        std::fs::write(f.path(), b"\xff\x00/sys/fs/cgroup/a\n").unwrap();
        assert_eq!(f.read_of_this_boot().unwrap(), None);
        // An older podvisor's record (no boot line): whole.
        std::fs::write(f.path(), "/sys/fs/cgroup/a\n").unwrap();
        assert_eq!(
            f.read_of_this_boot().unwrap().as_deref(),
            Some("/sys/fs/cgroup/a\n")
        );
    }
}
