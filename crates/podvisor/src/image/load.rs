//! Images into the store from files: a `docker save` tarball (Docker's `manifest.json`, with
//! or without the OCI layout newer engines add), an OCI image layout (a directory with
//! `oci-layout` and `index.json`) or an archive of one; gzip-compressed archives too. Every
//! blob is verified against its digest, every layer unpacked once.

use std::io::Read;
use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest};

use super::store::{digest_of, now_secs, ImageRecord, LayerRecord, Store};
use super::ImageError;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
const NAME_ANNOTATION: &str = "io.containerd.image.name";
const REF_ANNOTATION: &str = "org.opencontainers.image.ref.name";

/// Loads every image of `source` (a file or a layout directory); returns what was stored.
pub fn load(store: &Store, source: &Path) -> Result<Vec<ImageRecord>, ImageError> {
    let _lock = store.lock()?;
    let dir = if source.is_dir() {
        source.to_path_buf()
    } else {
        let dir = store.temp("load");
        extract(source, &dir)?;
        dir
    };
    let found = if dir.join("index.json").is_file() {
        from_layout(store, &dir)?
    } else if dir.join("manifest.json").is_file() {
        from_docker(store, &dir)?
    } else {
        return Err(ImageError::Invalid(format!(
            "{}: neither an OCI image layout (no index.json) nor a `docker save` archive (no manifest.json)",
            source.display()
        )));
    };
    for image in &found {
        store.unpack(image)?;
    }
    for image in &found {
        store.put(image.clone())?;
    }
    if !source.is_dir() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(found)
}

/// Extracts an archive (maybe gzip-compressed) into `dir`; the tar crate keeps every entry
/// inside it.
fn extract(source: &Path, dir: &Path) -> Result<(), ImageError> {
    let mut file = std::fs::File::open(source).map_err(|e| ImageError::io(source, e))?;
    let mut magic = [0u8; 2];
    let gz = file.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
    let file = std::fs::File::open(source).map_err(|e| ImageError::io(source, e))?;
    let reader: Box<dyn Read> = if gz {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    std::fs::create_dir_all(dir).map_err(|e| ImageError::io(dir, e))?;
    tar::Archive::new(reader)
        .unpack(dir)
        .map_err(|e| ImageError::Invalid(format!("{}: not a tar archive: {e}", source.display())))
}

/// The architecture of this host as OCI names it.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn bad(what: &Path, e: impl std::fmt::Display) -> ImageError {
    ImageError::Invalid(format!("{}: {e}", what.display()))
}

/// A blob of the layout, stored (verified).
fn take_blob(store: &Store, dir: &Path, digest: &str) -> Result<u64, ImageError> {
    let path = dir.join("blobs/sha256").join(super::store::hex_of(digest)?);
    let file = std::fs::File::open(&path).map_err(|e| ImageError::io(&path, e))?;
    store.ingest(digest, file)
}

fn from_layout(store: &Store, dir: &Path) -> Result<Vec<ImageRecord>, ImageError> {
    let index_path = dir.join("index.json");
    let index = ImageIndex::from_file(&index_path).map_err(|e| bad(&index_path, e))?;
    let mut found = Vec::new();
    for d in index.manifests() {
        let annotations = d.annotations().clone().unwrap_or_default();
        let name = annotations
            .get(NAME_ANNOTATION)
            .or_else(|| {
                annotations
                    .get(REF_ANNOTATION)
                    .filter(|r| r.contains(['/', ':']))
            })
            .cloned();
        let manifest = resolve_platform(store, dir, d)?;
        found.push(from_manifest(store, dir, &manifest, name)?);
    }
    Ok(found)
}

/// The manifest descriptor for this host: `d` itself, or from the index it points to.
fn resolve_platform(store: &Store, dir: &Path, d: &Descriptor) -> Result<String, ImageError> {
    let digest = d.digest().to_string();
    let media = d.media_type().to_string();
    if !media.contains("index") && !media.contains("manifest.list") {
        return Ok(digest);
    }
    take_blob(store, dir, &digest)?;
    let index = ImageIndex::from_reader(&store.read_blob(&digest)?[..])
        .map_err(|e| ImageError::Invalid(format!("index {digest}: {e}")))?;
    let chosen = index.manifests().iter().find(|m| {
        m.platform().as_ref().is_none_or(|p| {
            p.os().to_string() == "linux" && p.architecture().to_string() == host_arch()
        })
    });
    match chosen {
        Some(m) => resolve_platform(store, dir, m),
        None => Err(ImageError::Invalid(format!(
            "index {digest}: no image for linux/{} (it has: {})",
            host_arch(),
            index
                .manifests()
                .iter()
                .filter_map(|m| m.platform().as_ref())
                .map(|p| format!("{}/{}", p.os(), p.architecture()))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn from_manifest(
    store: &Store,
    dir: &Path,
    manifest_digest: &str,
    name: Option<String>,
) -> Result<ImageRecord, ImageError> {
    take_blob(store, dir, manifest_digest)?;
    let manifest = ImageManifest::from_reader(&store.read_blob(manifest_digest)?[..])
        .map_err(|e| ImageError::Invalid(format!("manifest {manifest_digest}: {e}")))?;
    take_blob(store, dir, manifest.config().digest().as_ref())?;
    for l in manifest.layers() {
        take_blob(store, dir, l.digest().as_ref())?;
    }
    record(store, manifest_digest, name)
}

/// The record of an image whose manifest, config and layers are all in the store: named
/// `name` (normalized), or by its ID.
pub fn record(
    store: &Store,
    manifest_digest: &str,
    name: Option<String>,
) -> Result<ImageRecord, ImageError> {
    let manifest = ImageManifest::from_reader(&store.read_blob(manifest_digest)?[..])
        .map_err(|e| ImageError::Invalid(format!("manifest {manifest_digest}: {e}")))?;
    let config_digest = manifest.config().digest().to_string();
    let config = ImageConfiguration::from_reader(&store.read_blob(&config_digest)?[..])
        .map_err(|e| ImageError::Invalid(format!("config {config_digest}: {e}")))?;
    let diff_ids = config.rootfs().diff_ids();
    if diff_ids.len() != manifest.layers().len() {
        return Err(ImageError::Invalid(format!(
            "manifest {manifest_digest}: {} layers but its config lists {} diff_ids",
            manifest.layers().len(),
            diff_ids.len()
        )));
    }
    let size_of = |digest: &str| -> Result<u64, ImageError> {
        let path = store.blob_path(digest)?;
        std::fs::metadata(&path)
            .map(|m| m.len())
            .map_err(|e| ImageError::io(&path, e))
    };
    let mut size = size_of(manifest_digest)? + size_of(&config_digest)?;
    let mut layers = Vec::new();
    for (l, diff_id) in manifest.layers().iter().zip(diff_ids) {
        let digest = l.digest().to_string();
        let n = size_of(&digest)?;
        size += n;
        layers.push(LayerRecord {
            digest,
            media_type: l.media_type().to_string(),
            diff_id: diff_id.clone(),
            size: n,
        });
    }
    let name = match name {
        Some(n) => super::normalize(&n)?,
        None => config_digest.clone(),
    };
    Ok(ImageRecord {
        name,
        id: config_digest,
        manifest: manifest_digest.to_string(),
        layers,
        size,
        created: now_secs(),
    })
}

/// One image of Docker's `manifest.json`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

/// A `docker save` archive without an OCI layout: its layers are plain tars named by path; an
/// OCI manifest is made for each image so that it has a digest as any other.
fn from_docker(store: &Store, dir: &Path) -> Result<Vec<ImageRecord>, ImageError> {
    let path = dir.join("manifest.json");
    let text = std::fs::read(&path).map_err(|e| ImageError::io(&path, e))?;
    let entries: Vec<DockerEntry> = serde_json::from_slice(&text).map_err(|e| bad(&path, e))?;
    let mut found = Vec::new();
    for entry in entries {
        let file = |rel: &str| -> Result<PathBuf, ImageError> {
            let p = Path::new(rel);
            if p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
                return Err(bad(&path, format!("{rel:?} is outside the archive")));
            }
            Ok(dir.join(p))
        };
        let config_path = file(&entry.config)?;
        let config_bytes =
            std::fs::read(&config_path).map_err(|e| ImageError::io(&config_path, e))?;
        let config_digest = digest_of(&config_bytes);
        store.ingest(&config_digest, &config_bytes[..])?;
        let config =
            ImageConfiguration::from_reader(&config_bytes[..]).map_err(|e| bad(&config_path, e))?;
        let diff_ids = config.rootfs().diff_ids();
        if diff_ids.len() != entry.layers.len() {
            return Err(bad(
                &path,
                format!(
                    "{} layers but config {} lists {} diff_ids",
                    entry.layers.len(),
                    entry.config,
                    diff_ids.len()
                ),
            ));
        }
        let mut layers = Vec::new();
        let mut descriptors = Vec::new();
        for (rel, diff_id) in entry.layers.iter().zip(diff_ids) {
            let p = file(rel)?;
            // Hashed, then copied in (and verified): a layer is never held in memory whole.
            let digest = super::store::digest_of_file(&p)?;
            let file = std::fs::File::open(&p).map_err(|e| ImageError::io(&p, e))?;
            let n = store.ingest(&digest, file)?;
            descriptors
                .push(serde_json::json!({"mediaType": OCI_LAYER, "digest": digest, "size": n}));
            layers.push(LayerRecord {
                diff_id: diff_id.clone(),
                digest,
                media_type: OCI_LAYER.into(),
                size: n,
            });
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_bytes.len()},
            "layers": descriptors,
        });
        let manifest_bytes = serde_json::to_vec(&manifest).map_err(|e| bad(&path, e))?;
        let manifest_digest = digest_of(&manifest_bytes);
        store.ingest(&manifest_digest, &manifest_bytes[..])?;
        let size = config_bytes.len() as u64
            + manifest_bytes.len() as u64
            + layers.iter().map(|l| l.size).sum::<u64>();
        let tags = entry.repo_tags.unwrap_or_default();
        let names: Vec<String> = if tags.is_empty() {
            vec![config_digest.clone()]
        } else {
            tags.iter()
                .map(|t| super::normalize(t))
                .collect::<Result<_, _>>()?
        };
        for name in names {
            found.push(ImageRecord {
                name,
                id: config_digest.clone(),
                manifest: manifest_digest.clone(),
                layers: layers.clone(),
                size,
                created: now_secs(),
            });
        }
    }
    Ok(found)
}
