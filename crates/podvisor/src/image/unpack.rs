//! One layer (a tar, plain or gzip or zstd) unpacked into an empty directory that an overlay
//! stacks as a lower layer: OCI whiteouts become the overlay's (a 0/0 character device, and
//! `trusted.overlay.opaque` on a directory, `user.overlay.opaque` without root), owners, modes, times, hard links and xattrs are
//! kept. No entry lands outside the directory: absolute names, `..` and paths through a
//! symlink are refused, with the layer and entry named. The digest of what was unpacked must
//! be the layer's diff_id.

use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::owners::Owner;
use super::ImageError;
use crate::process::sys;

const GZIP: [u8; 2] = [0x1f, 0x8b];
const ZSTD: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Unpacks the layer blob at `blob` into `dest` (made here), checking that the tar's digest is
/// `diff_id`. Without root, the owners the layer gives that are not this user are returned,
/// for `owners::apply` once all is written (a directory given to another id is no longer
/// this user's to write in), with those of the image's other layers.
pub fn unpack(blob: &Path, diff_id: &str, dest: &Path) -> Result<Vec<Owner>, ImageError> {
    let layer = diff_id.to_string();
    let mut file = std::fs::File::open(blob).map_err(|e| ImageError::io(blob, e))?;
    let mut magic = [0u8; 4];
    let n = read_up_to(&mut file, &mut magic).map_err(|e| ImageError::io(blob, e))?;
    let head = io::Cursor::new(magic[..n].to_vec());
    let raw = head.chain(file);
    let tar: Box<dyn Read> = if magic[..n].starts_with(&GZIP) {
        Box::new(flate2::read::GzDecoder::new(raw))
    } else if magic[..n] == ZSTD {
        Box::new(
            ruzstd::decoding::StreamingDecoder::new(raw)
                .map_err(|e| ImageError::Invalid(format!("layer {layer}: zstd: {e}")))?,
        )
    } else {
        Box::new(raw)
    };
    let mut hashing = Hashing {
        inner: tar,
        hasher: Sha256::new(),
    };
    std::fs::create_dir(dest).map_err(|e| ImageError::io(dest, e))?;
    let mut unpacker = Unpacker {
        layer: layer.clone(),
        dest: dest.to_path_buf(),
        dirs: Vec::new(),
        root: sys::getuid() == 0,
        owners: Vec::new(),
    };
    {
        let mut archive = tar::Archive::new(&mut hashing);
        let entries = archive
            .entries()
            .map_err(|e| ImageError::Invalid(format!("layer {layer}: not a tar: {e}")))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| ImageError::Invalid(format!("layer {layer}: not a tar: {e}")))?;
            unpacker.entry(entry)?;
        }
    }
    // The digest covers the whole tar, its end blocks and padding included.
    io::copy(&mut hashing, &mut io::sink())
        .map_err(|e| ImageError::Invalid(format!("layer {layer}: {e}")))?;
    let actual = format!("sha256:{:x}", hashing.hasher.finalize());
    if actual != diff_id {
        return Err(ImageError::Invalid(format!(
            "layer {layer}: what it unpacks to has digest {actual}, not its diff_id: refused"
        )));
    }
    // Directories' times last: making their entries changed them.
    for (dir, mtime) in unpacker.dirs.iter().rev() {
        let _ = sys::set_mtime(dir, *mtime);
    }
    Ok(unpacker.owners)
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

struct Unpacker {
    layer: String,
    dest: PathBuf,
    /// Directories made, with their times, to set at the end.
    dirs: Vec<(PathBuf, i64)>,
    root: bool,
    /// Without root: the entries owned by another id than 0, to set at the end.
    owners: Vec<Owner>,
}

impl Unpacker {
    fn refuse(&self, entry: &str, why: impl Into<String>) -> ImageError {
        ImageError::Unsafe {
            layer: self.layer.clone(),
            entry: entry.to_string(),
            why: why.into(),
        }
    }

    /// The entry's path inside the layer, checked: relative, without `..`.
    fn inside(&self, name: &str, raw: &Path) -> Result<PathBuf, ImageError> {
        let mut rel = PathBuf::new();
        for c in raw.components() {
            match c {
                Component::Normal(part) => rel.push(part),
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => {
                    return Err(self.refuse(name, "an absolute path"));
                }
                Component::ParentDir => return Err(self.refuse(name, "a path with `..`")),
            }
        }
        Ok(rel)
    }

    /// Makes the parents of `rel` (as plain directories), refusing to go through a symlink.
    fn parents(&self, name: &str, rel: &Path) -> Result<(), ImageError> {
        let mut at = self.dest.clone();
        let Some(parent) = rel.parent() else {
            return Ok(());
        };
        for part in parent.components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(self.refuse(
                        name,
                        format!(
                            "its path goes through the symlink {}",
                            part.as_os_str().to_string_lossy()
                        ),
                    ));
                }
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(self.refuse(name, "its parent is not a directory"));
                }
                Err(_) => std::fs::create_dir(&at).map_err(|e| ImageError::io(&at, e))?,
            }
        }
        Ok(())
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), ImageError> {
        let raw = entry
            .path()
            .map_err(|e| ImageError::Invalid(format!("layer {}: {e}", self.layer)))?
            .into_owned();
        let name = raw.to_string_lossy().into_owned();
        let rel = self.inside(&name, &raw)?;
        if rel.as_os_str().is_empty() {
            return Ok(());
        }
        self.parents(&name, &rel)?;
        let path = self.dest.join(&rel);
        let file_name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = path.parent().unwrap_or(&self.dest).to_path_buf();
        if file_name == OPAQUE {
            return sys::set_xattr(&parent, super::opaque_xattr(), b"y")
                .map_err(|e| ImageError::io(&parent, e));
        }
        if let Some(hidden) = file_name.strip_prefix(WHITEOUT) {
            let target = parent.join(hidden);
            remove_any(&target);
            return sys::make_node(&target, 'c', 0, 0, 0).map_err(|e| ImageError::io(&target, e));
        }
        let header = entry.header().clone();
        let kind = header.entry_type();
        let mode = header.mode().unwrap_or(0o644) & 0o7777;
        let uid = header.uid().unwrap_or(0) as u32;
        let gid = header.gid().unwrap_or(0) as u32;
        let mtime = header.mtime().unwrap_or(0) as i64;
        let io_err = |e| ImageError::io(&path, e);
        if kind.is_dir() {
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {}
                _ => {
                    remove_any(&path);
                    std::fs::create_dir(&path).map_err(io_err)?;
                }
            }
            self.dirs.push((path.clone(), mtime));
        } else {
            remove_any(&path);
            if kind.is_file() || kind == tar::EntryType::Continuous {
                let mut out = std::fs::File::create(&path).map_err(io_err)?;
                io::copy(&mut entry, &mut out).map_err(io_err)?;
            } else if kind.is_symlink() {
                let target = entry
                    .link_name()
                    .ok()
                    .flatten()
                    .ok_or_else(|| self.refuse(&name, "a symlink without a target"))?;
                std::os::unix::fs::symlink(&*target, &path).map_err(io_err)?;
            } else if kind.is_hard_link() {
                let raw_target = entry
                    .link_name()
                    .ok()
                    .flatten()
                    .ok_or_else(|| self.refuse(&name, "a hard link without a target"))?
                    .into_owned();
                let target = self.inside(&name, &raw_target)?;
                self.parents(&name, &target)?;
                let source = self.dest.join(&target);
                match std::fs::symlink_metadata(&source) {
                    Ok(m) if !m.is_dir() => {}
                    _ => {
                        return Err(self.refuse(
                            &name,
                            format!(
                                "a hard link to {}, which this layer does not hold",
                                raw_target.display()
                            ),
                        ));
                    }
                }
                return std::fs::hard_link(&source, &path).map_err(io_err);
            } else if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
                let c = if kind.is_fifo() {
                    'p'
                } else if kind.is_character_special() {
                    'c'
                } else {
                    'b'
                };
                if c != 'p' && !self.root {
                    return Ok(());
                }
                let major = header.device_major().ok().flatten().unwrap_or(0);
                let minor = header.device_minor().ok().flatten().unwrap_or(0);
                sys::make_node(&path, c, mode, major, minor).map_err(io_err)?;
            } else {
                // PAX and GNU long-name headers are read by the tar crate; anything else
                // (sparse files, volume labels) is not a file a container sees.
                return Ok(());
            }
        }
        self.own(&path, uid, gid, (!kind.is_symlink()).then_some(mode))?;
        if !kind.is_symlink() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(io_err)?;
        }
        if let Ok(Some(pax)) = entry.pax_extensions() {
            for ext in pax.flatten() {
                if let (Ok(key), value) = (ext.key(), ext.value_bytes()) {
                    if let Some(attr) = key.strip_prefix("SCHILY.xattr.") {
                        // Best effort, as containerd: a filesystem may not take every xattr.
                        let _ = sys::set_xattr(&path, attr, value);
                    }
                }
            }
        }
        if !kind.is_dir() {
            sys::set_mtime(&path, mtime).map_err(io_err)?;
        }
        Ok(())
    }

    /// Gives `path` its owner: at once as root; without root, noted for the end (`mode`:
    /// the entry's, to set again after the chown; `None` for a symbolic link).
    fn own(
        &mut self,
        path: &Path,
        uid: u32,
        gid: u32,
        mode: Option<u32>,
    ) -> Result<(), ImageError> {
        if self.root {
            sys::lchown(path, uid, gid).map_err(|e| ImageError::io(path, e))?;
        } else if (uid, gid) != (0, 0) && path != self.dest {
            self.owners.push(Owner {
                path: path.to_path_buf(),
                uid,
                gid,
                mode,
            });
        }
        Ok(())
    }
}

/// Removes whatever is at `path` (a file, a link, a directory and its contents), if anything.
fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}
