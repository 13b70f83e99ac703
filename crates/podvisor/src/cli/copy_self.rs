//! `podvisor copy-self DEST`: copies this very binary to DEST (mode 0755), atomically.
//!
//! What the cluster webhook's init container runs: the `podvisor` image is `FROM scratch`, with
//! no `cp` to copy podvisor into the emptyDir the pod's containers then run it from (Tekton's
//! entrypoint image does the same). In both builds, as `init` is. Never touches anything but
//! DEST and DEST's temporary sibling.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Runs `copy-self` with its arguments (after the subcommand); the exit code. Never inlined:
/// its copy buffer would otherwise sit in the frame of the binary's `main`, whose pages PID 1
/// then touches for nothing (stack probes write each page of a frame larger than one).
#[inline(never)]
pub fn main(args: &[OsString]) -> i32 {
    let dest = match args {
        [d] if d != "-h" && d != "--help" => PathBuf::from(d),
        [h] if h == "-h" || h == "--help" => {
            super::write_out(USAGE);
            return 0;
        }
        _ => {
            super::write_err(&format!("error: copy-self takes one argument\n{USAGE}"));
            return 2;
        }
    };
    match copy(Path::new("/proc/self/exe"), &dest) {
        Ok(()) => 0,
        Err(e) => {
            super::write_err(&format!("error: copy-self {}: {e}\n", dest.display()));
            1
        }
    }
}

const USAGE: &str =
    "Usage: podvisor copy-self DEST\n\nCopies this podvisor binary to DEST (mode 0755).\n";

/// Write beside DEST, fsync, set the mode, rename over DEST: a reader never sees half a binary.
fn copy(from: &Path, dest: &Path) -> io::Result<()> {
    let mut tmp = dest.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        fs::copy(from, &tmp)?;
        let f = fs::File::open(&tmp)?;
        f.set_permissions(fs::Permissions::from_mode(0o755))?;
        f.sync_all()?;
        fs::rename(&tmp, dest)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
