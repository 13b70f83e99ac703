//! The content store: blobs by digest (`blobs/sha256/HEX`), layers unpacked once by diff_id
//! (`layers/sha256/HEX/`), and the images' names (`images.json`). Every blob and layer is made
//! in `tmp/` and renamed into place only once whole and verified, so a load or unpack killed at
//! any moment leaves nothing that a later run uses half-done; `tmp/` is emptied by the next
//! writer. Writers hold `lock` (an exclusive flock) for what they change.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::ImageError;
use crate::state::StateFile;

/// A layer of an image: its blob (as stored, maybe compressed) and what it unpacks to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LayerRecord {
    pub digest: String,
    pub media_type: String,
    pub diff_id: String,
    pub size: u64,
}

/// An image by name: its manifest, config and layers (bottom first).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageRecord {
    pub name: String,
    /// The config's digest: the image's ID, as Docker shows it.
    pub id: String,
    /// The manifest's digest: `imageID` is `REPOSITORY@MANIFEST`.
    pub manifest: String,
    pub layers: Vec<LayerRecord>,
    /// Bytes of the manifest, config and layer blobs.
    pub size: u64,
    /// When it was stored (seconds since the epoch).
    pub created: u64,
}

impl ImageRecord {
    /// `imageID` as the API shows it: `docker.io/library/busybox@sha256:…`.
    pub fn image_id(&self) -> String {
        format!(
            "{}@{}",
            super::reference::repository(&self.name),
            self.manifest
        )
    }
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Names {
    images: BTreeMap<String, ImageRecord>,
}

/// The store of one user (`BASE/.images`: a name no namespace can have).
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
}

/// The exclusive right to change the store, held until dropped.
#[derive(Debug)]
pub struct StoreLock(#[allow(dead_code)] std::fs::File);

impl Store {
    /// This user's store (docs/images.md), made if missing.
    pub fn open() -> Result<Store, ImageError> {
        Store::at(crate::state::images_dir())
    }

    pub fn at(root: PathBuf) -> Result<Store, ImageError> {
        for d in ["blobs/sha256", "layers/sha256", "tmp"] {
            let p = root.join(d);
            std::fs::create_dir_all(&p).map_err(|e| ImageError::io(&p, e))?;
        }
        let store = Store { root };
        store.make_base()?;
        Ok(store)
    }

    /// The layer beneath every image: the mount points a runtime needs in a root (`/proc`,
    /// `/sys`, `/dev`, and the files it binds in `/etc`), so that an image without them (one
    /// built FROM scratch) runs as any other. An image that has them hides these.
    pub fn base_layer(&self) -> PathBuf {
        self.root.join("base")
    }

    fn make_base(&self) -> Result<(), ImageError> {
        let base = self.base_layer();
        if base.join("etc/resolv.conf").is_file() {
            return Ok(());
        }
        for d in ["proc", "sys", "dev", "etc"] {
            let p = base.join(d);
            std::fs::create_dir_all(&p).map_err(|e| ImageError::io(&p, e))?;
        }
        // resolv.conf last: its presence says the layer is whole.
        for f in super::RUNTIME_FILES {
            let p = base.join("etc").join(f);
            std::fs::write(&p, "").map_err(|e| ImageError::io(&p, e))?;
        }
        Ok(())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Waits for and takes the writers' lock; what an earlier writer left in `tmp/` (killed
    /// in the middle) is removed then.
    pub fn lock(&self) -> Result<StoreLock, ImageError> {
        let path = self.root.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| ImageError::io(&path, e))?;
        while !crate::process::sys::try_lock(&file).map_err(|e| ImageError::io(&path, e))? {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let tmp = self.root.join("tmp");
        for entry in std::fs::read_dir(&tmp)
            .map_err(|e| ImageError::io(&tmp, e))?
            .flatten()
        {
            let p = entry.path();
            let _ = if p.is_dir() && !p.is_symlink() {
                super::owners::remove_tree(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
        Ok(StoreLock(file))
    }

    /// A fresh path in `tmp/` (only under the lock).
    pub fn temp(&self, what: &str) -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.root
            .join("tmp")
            .join(format!("{what}-{}-{n}", std::process::id()))
    }

    pub fn blob_path(&self, digest: &str) -> Result<PathBuf, ImageError> {
        Ok(self.root.join("blobs/sha256").join(hex_of(digest)?))
    }

    pub fn layer_path(&self, diff_id: &str) -> Result<PathBuf, ImageError> {
        Ok(self.root.join("layers/sha256").join(hex_of(diff_id)?))
    }

    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| p.is_file())
    }

    /// Copies `from` into the store as blob `digest`, verifying it (only under the lock).
    /// Returns its size.
    pub fn ingest(&self, digest: &str, mut from: impl Read) -> Result<u64, ImageError> {
        let path = self.blob_path(digest)?;
        if let Ok(m) = std::fs::metadata(&path) {
            return Ok(m.len());
        }
        let tmp = self.temp("blob");
        let mut out = std::fs::File::create(&tmp).map_err(|e| ImageError::io(&tmp, e))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut size = 0u64;
        loop {
            let n = from.read(&mut buf).map_err(|e| ImageError::io(&tmp, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| ImageError::io(&tmp, e))?;
            size += n as u64;
        }
        let actual = format!("sha256:{:x}", hasher.finalize());
        if actual != digest {
            let _ = std::fs::remove_file(&tmp);
            return Err(ImageError::Digest {
                digest: digest.to_string(),
                actual,
            });
        }
        out.sync_all().map_err(|e| ImageError::io(&tmp, e))?;
        commit(&tmp, &path)?;
        Ok(size)
    }

    /// The blob's bytes.
    pub fn read_blob(&self, digest: &str) -> Result<Vec<u8>, ImageError> {
        let path = self.blob_path(digest)?;
        std::fs::read(&path).map_err(|e| ImageError::io(&path, e))
    }

    /// Unpacks each layer of `image` not yet unpacked (only under the lock). Without root,
    /// the owners of all of them are set in one go before any is put in place. The layers
    /// before one refused are kept (whole and checked, the next image that has them uses
    /// them); the refused one and those after it are not.
    pub fn unpack(&self, image: &ImageRecord) -> Result<(), ImageError> {
        let mut unpacked: Vec<(PathBuf, PathBuf)> = Vec::new();
        let mut owners = Vec::new();
        let mut refused = Ok(());
        for layer in &image.layers {
            let paths = (self.layer_path(&layer.diff_id))
                .and_then(|dir| Ok((dir, self.blob_path(&layer.digest)?)));
            let (dir, blob) = match paths {
                Ok(p) => p,
                Err(e) => {
                    refused = Err(e);
                    break;
                }
            };
            if dir.is_dir() || unpacked.iter().any(|(_, d)| *d == dir) {
                continue;
            }
            let tmp = self.temp("layer");
            match super::unpack::unpack(&blob, &layer.diff_id, &tmp) {
                Ok(o) => {
                    unpacked.push((tmp, dir));
                    owners.push((layer.diff_id.as_str(), o));
                }
                Err(e) => {
                    let _ = super::owners::remove_tree(&tmp);
                    refused = Err(e);
                    break;
                }
            }
        }
        let (done, owned) = super::owners::apply(&owners);
        // Each unpacking is put in place or removed: none stays in `tmp/`.
        let mut committed = Ok(());
        for (at, (tmp, dir)) in unpacked.iter().enumerate() {
            if at < done && committed.is_ok() {
                committed = commit(tmp, dir);
            }
            if at >= done || committed.is_err() {
                let _ = super::owners::remove_tree(tmp);
            }
        }
        committed.and(owned).and(refused)
    }

    /// The unpacked layers of an image, top first (as an overlay's `lowerdir` lists them).
    /// With the base layer (`base_layer`) last.
    pub fn lower_dirs(&self, image: &ImageRecord) -> Result<Vec<PathBuf>, ImageError> {
        let mut dirs = self.layer_dirs(image)?;
        dirs.push(self.base_layer());
        Ok(dirs)
    }

    /// The unpacked layers of an image, top first, and nothing else (an image volume's).
    pub fn layer_dirs(&self, image: &ImageRecord) -> Result<Vec<PathBuf>, ImageError> {
        let mut dirs = Vec::new();
        for layer in image.layers.iter().rev() {
            let dir = self.layer_path(&layer.diff_id)?;
            if !dir.is_dir() {
                return Err(ImageError::Invalid(format!(
                    "image {}: layer {} is not unpacked ({} is missing): load the image again",
                    image.name,
                    layer.diff_id,
                    dir.display()
                )));
            }
            dirs.push(dir);
        }
        Ok(dirs)
    }

    fn names_file(&self) -> Result<StateFile, ImageError> {
        StateFile::new(&self.root, "images.json").map_err(|e| ImageError::Invalid(e.to_string()))
    }

    fn names(&self) -> Result<Names, ImageError> {
        let file = self.names_file()?;
        let text = file
            .read()
            .map_err(|e| ImageError::Invalid(e.to_string()))?;
        match text {
            None => Ok(Names::default()),
            Some(t) => serde_json::from_str(&t).map_err(|e| {
                ImageError::Invalid(format!(
                    "{}: cannot be read: {e}; it is left as it is (move it aside to start an empty store)",
                    file.path().display()
                ))
            }),
        }
    }

    fn save_names(&self, names: &Names) -> Result<(), ImageError> {
        let text =
            serde_json::to_string_pretty(names).map_err(|e| ImageError::Invalid(e.to_string()))?;
        self.names_file()?
            .write(&text)
            .map_err(|e| ImageError::Invalid(e.to_string()))
    }

    /// Every image, by name.
    pub fn list(&self) -> Result<Vec<ImageRecord>, ImageError> {
        Ok(self.names()?.images.into_values().collect())
    }

    /// The image a name (normalized) or an ID (`sha256:…`, or a unique prefix of its hex)
    /// refers to.
    pub fn find(&self, name: &str) -> Result<Option<ImageRecord>, ImageError> {
        let names = self.names()?;
        if let Ok(n) = super::normalize(name) {
            if let Some(found) = names.images.get(&n) {
                return Ok(Some(found.clone()));
            }
        }
        let hex = name.strip_prefix("sha256:").unwrap_or(name);
        if hex.len() < 4 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let mut by_id = names
            .images
            .values()
            .filter(|i| i.id["sha256:".len()..].starts_with(hex));
        Ok(by_id.next().cloned())
    }

    /// Records `image` under its name (only under the lock).
    pub fn put(&self, image: ImageRecord) -> Result<(), ImageError> {
        let mut names = self.names()?;
        names.images.insert(image.name.clone(), image);
        self.save_names(&names)
    }

    /// Removes a name (only under the lock), then the blobs and layers no image uses any more.
    /// Returns the removed record.
    pub fn remove(&self, name: &str) -> Result<Option<ImageRecord>, ImageError> {
        let Some(found) = self.find(name)? else {
            return Ok(None);
        };
        let mut names = self.names()?;
        names.images.remove(&found.name);
        self.save_names(&names)?;
        self.collect(&names)?;
        Ok(Some(found))
    }

    /// Removes the blobs and layers no named image refers to.
    fn collect(&self, names: &Names) -> Result<(), ImageError> {
        let mut blobs = std::collections::BTreeSet::new();
        let mut layers = std::collections::BTreeSet::new();
        for i in names.images.values() {
            blobs.insert(hex_of(&i.manifest)?.to_string());
            blobs.insert(hex_of(&i.id)?.to_string());
            for l in &i.layers {
                blobs.insert(hex_of(&l.digest)?.to_string());
                layers.insert(hex_of(&l.diff_id)?.to_string());
            }
        }
        for (dir, keep) in [("blobs/sha256", &blobs), ("layers/sha256", &layers)] {
            let dir = self.root.join(dir);
            for e in std::fs::read_dir(&dir)
                .map_err(|e| ImageError::io(&dir, e))?
                .flatten()
            {
                if keep.contains(e.file_name().to_string_lossy().as_ref()) {
                    continue;
                }
                // Renamed into tmp/ first, so that a layer is never seen half removed.
                let gone = self.temp("removed");
                std::fs::rename(e.path(), &gone).map_err(|err| ImageError::io(&e.path(), err))?;
                let removed = if gone.is_dir() {
                    super::owners::remove_tree(&gone)
                } else {
                    std::fs::remove_file(&gone)
                };
                removed.map_err(|err| ImageError::io(&gone, err))?;
            }
        }
        Ok(())
    }
}

/// The hex of a `sha256:HEX` digest, checked.
pub fn hex_of(digest: &str) -> Result<&str, ImageError> {
    match digest.strip_prefix("sha256:") {
        Some(h) if h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
            Ok(h)
        }
        _ => Err(ImageError::Invalid(format!(
            "{digest:?} is not a sha256 digest (sha256:64 hex digits)"
        ))),
    }
}

/// Renames a finished file or directory into place and makes the rename durable.
fn commit(tmp: &Path, path: &Path) -> Result<(), ImageError> {
    match std::fs::rename(tmp, path) {
        Ok(()) => {}
        // Made meanwhile by another writer of the same content: theirs is as good.
        Err(e)
            if path.exists()
                && matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) =>
        {
            let _ = super::owners::remove_tree(tmp);
        }
        Err(e) => return Err(ImageError::io(path, e)),
    }
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| ImageError::io(parent, e))?;
    }
    Ok(())
}

/// `sha256:HEX` of bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// `sha256:HEX` of a file, read as a stream.
pub fn digest_of_file(path: &Path) -> Result<String, ImageError> {
    let mut file = std::fs::File::open(path).map_err(|e| ImageError::io(path, e))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| ImageError::io(path, e))?;
    Ok(format!("sha256:{:x}", hasher.finalize()))
}

/// Seconds since the epoch, now.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
