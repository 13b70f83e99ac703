//! Without root, the owners a layer gives its files. A user cannot chown to other users, so a
//! layer is unpacked as this user, and the owners are then set by a helper (this binary, run
//! as `podvisor internal-image-owners`) in a user namespace that maps this user to 0 and its
//! subordinate ids (`/etc/subuid`, `/etc/subgid`) to 1 and up: the user namespace a
//! rootless container runs in, so that it sees the owners the layer gave (as rootless podman's
//! storage does). Trees so owned are removed by the same helper.

use std::ffi::OsString;
use std::io::{self, BufRead, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::ImageError;
use crate::process::sys;
use crate::security::subids::{self, UserMap};

/// The hidden subcommand of the helper.
pub const HELPER: &str = "internal-image-owners";

/// One file whose owner is not the unpacking user (0 inside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub path: PathBuf,
    pub uid: u32,
    pub gid: u32,
    /// The mode to set again after the chown (which clears set-user-ID and set-group-ID);
    /// `None` for a symbolic link.
    pub mode: Option<u32>,
}

/// Sets the owners of the layers just unpacked (`(layer, its entries)`, base first), through
/// one run of the helper in this user's mapped user namespace for them all. Without
/// subordinate ids the files stay this user's (uid 0 inside), as without any map there is no
/// other id to give them. Returns how many of the layers (from the first) are done: all, or
/// those before the first that names an id beyond this user's subordinate ids, with the
/// error that refuses it; none when the helper fails.
pub fn apply(layers: &[(&str, Vec<Owner>)]) -> (usize, Result<(), ImageError>) {
    if layers.iter().all(|(_, owners)| owners.is_empty()) {
        return (layers.len(), Ok(()));
    }
    let (map, ns) = subids::map_this_user(Path::new("/etc"));
    let (UserMap::Range { uids, gids }, Some(ns)) = (map, ns) else {
        return (layers.len(), Ok(()));
    };
    let mut done = (layers.len(), Ok(()));
    let mut input = Vec::new();
    for (at, (layer, owners)) in layers.iter().enumerate() {
        if let Some(o) = owners.iter().find(|o| o.uid > uids || o.gid > gids) {
            done = (at, Err(ImageError::Invalid(format!(
                "layer {layer}: {} is owned by {}:{}, outside the ids this user's subordinate ids map (0-{uids}, 0-{gids} from /etc/subuid, /etc/subgid)",
                o.path.display(),
                o.uid,
                o.gid
            ))));
            break;
        }
        for o in owners {
            let mode = o.mode.map_or_else(|| "-".to_string(), |m| format!("{m:o}"));
            input.extend_from_slice(format!("{} {} {mode} ", o.uid, o.gid).as_bytes());
            input.extend_from_slice(o.path.as_os_str().as_bytes());
            input.push(0);
        }
    }
    if input.is_empty() {
        return done;
    }
    match run_helper(&ns, &[], &input) {
        Ok(()) => done,
        Err(e) => {
            let names: Vec<&str> = layers[..done.0].iter().map(|(l, _)| *l).collect();
            let e = format!("layers {}: {e}", names.join(", "));
            (0, Err(ImageError::Invalid(e)))
        }
    }
}

/// Removes the directory tree `path`; without root, one whose files belong to subordinate
/// ids (so that this user may not remove them) is removed by the helper.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied && sys::getuid() != 0 => {
            let (_, ns) = subids::map_this_user(Path::new("/etc"));
            let Some(ns) = ns else { return Err(e) };
            run_helper(&ns, &[OsString::from("--remove"), path.into()], &[])
                .map_err(io::Error::other)
        }
        other => other,
    }
}

fn run_helper(ns: &std::os::fd::OwnedFd, args: &[OsString], input: &[u8]) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(HELPER)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    sys::command_in_user_namespace(&mut cmd, ns);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("the owners' helper: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input)
            .map_err(|e| format!("the owners' helper: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("the owners' helper: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "the owners' helper {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// The helper, in the user namespace: `--remove DIR`, or the records on stdin (`UID GID
/// MODE PATH\0`, MODE in octal or `-` for a link) each chowned and its mode set again.
pub fn helper_main(args: &[OsString]) -> i32 {
    let result = match args {
        [flag, dir] if flag == "--remove" => {
            std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", Path::new(dir).display()))
        }
        [] => set_owners(io::stdin().lock()),
        _ => Err(format!("usage: podvisor {HELPER} [--remove DIR] < RECORDS")),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn set_owners(mut input: impl BufRead) -> Result<(), String> {
    let mut record = Vec::new();
    loop {
        record.clear();
        let n = input
            .read_until(0, &mut record)
            .map_err(|e| format!("stdin: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        if record.last() == Some(&0) {
            record.pop();
        }
        let owner = parse(&record).ok_or_else(|| {
            format!(
                "not a record (UID GID MODE PATH): {:?}",
                String::from_utf8_lossy(&record)
            )
        })?;
        let at = |e: io::Error| format!("{}: {e}", owner.path.display());
        match sys::lchown(&owner.path, owner.uid, owner.gid) {
            // Replaced or removed by a later entry of its layer.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            other => other.map_err(at)?,
        }
        if let Some(mode) = owner.mode {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&owner.path, std::fs::Permissions::from_mode(mode))
                .map_err(at)?;
        }
    }
}

fn parse(record: &[u8]) -> Option<Owner> {
    let mut fields = record.splitn(4, |b| *b == b' ');
    let mut text = || std::str::from_utf8(fields.next()?).ok().map(str::to_string);
    let (uid, gid, mode) = (text()?, text()?, text()?);
    let path = fields.next()?.to_vec();
    Some(Owner {
        uid: uid.parse().ok()?,
        gid: gid.parse().ok()?,
        mode: match mode.as_str() {
            "-" => None,
            m => Some(u32::from_str_radix(m, 8).ok()?),
        },
        path: PathBuf::from(OsString::from_vec(path)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_back_as_written() {
        let owner = parse(b"4242 4343 4755 /a dir/with space").unwrap();
        assert_eq!(
            owner,
            Owner {
                path: "/a dir/with space".into(),
                uid: 4242,
                gid: 4343,
                mode: Some(0o4755),
            }
        );
        assert_eq!(parse(b"1 2 - /l").unwrap().mode, None);
        assert!(parse(b"x 2 - /l").is_none());
        assert!(parse(b"1 2 9 /l").is_none());
    }
}
