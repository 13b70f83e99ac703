//! OCI image layouts written by the tests: layers tarred from entries, in each compression,
//! with a config, a manifest and an index of two platforms.

use std::io::Write;
use std::path::PathBuf;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// How a layer's tar is stored.
#[derive(Clone, Copy)]
pub(super) enum Compression {
    None,
    Gzip,
    Zstd,
}

/// One entry of a layer.
pub(super) enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8], u32),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
    /// A file whose name is written into the header as is (no checks): for escapes.
    RawName(&'a str),
    /// A directory or file (with content) of this owner and mode.
    Owned(&'a str, Option<&'a [u8]>, u32, u32, u32),
}

pub(super) fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn tar_of(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        match e {
            Entry::Dir(path) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
            Entry::File(path, data, mode) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, path, *data).unwrap();
            }
            Entry::Symlink(path, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, path, target).unwrap();
            }
            Entry::Hardlink(path, target) => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_mode(0o755);
                h.set_size(0);
                let name = &mut h.as_old_mut().linkname;
                name[..target.len()].copy_from_slice(target.as_bytes());
                let name = &mut h.as_old_mut().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
                h.set_cksum();
                b.append(&h, &[][..]).unwrap();
            }
            Entry::Owned(path, data, uid, gid, mode) => {
                h.set_uid(u64::from(*uid));
                h.set_gid(u64::from(*gid));
                h.set_mode(*mode);
                match data {
                    Some(data) => {
                        h.set_entry_type(tar::EntryType::Regular);
                        h.set_size(data.len() as u64);
                        b.append_data(&mut h, path, *data).unwrap();
                    }
                    None => {
                        h.set_entry_type(tar::EntryType::Directory);
                        h.set_size(0);
                        b.append_data(&mut h, path, &[][..]).unwrap();
                    }
                }
            }
            Entry::RawName(path) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(4);
                let name = &mut h.as_old_mut().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
                h.set_cksum();
                b.append(&h, &b"evil"[..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// An OCI image layout written by the test.
pub(super) struct Layout {
    dir: PathBuf,
    layers: Vec<(Vec<u8>, String, &'static str)>,
}

impl Layout {
    pub(super) fn new(dir: PathBuf) -> Layout {
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        Layout {
            dir,
            layers: Vec::new(),
        }
    }

    fn blob(&self, bytes: &[u8]) -> String {
        let digest = sha256(bytes);
        let hex = digest.trim_start_matches("sha256:");
        std::fs::write(self.dir.join("blobs/sha256").join(hex), bytes).unwrap();
        digest
    }

    pub(super) fn layer(mut self, c: Compression, entries: &[Entry<'_>]) -> Layout {
        let tar = tar_of(entries);
        let diff_id = sha256(&tar);
        let (bytes, media) = match c {
            Compression::None => (tar, "application/vnd.oci.image.layer.v1.tar"),
            Compression::Gzip => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&tar).unwrap();
                (
                    gz.finish().unwrap(),
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                )
            }
            Compression::Zstd => (
                ruzstd::encoding::compress_to_vec(
                    &tar[..],
                    ruzstd::encoding::CompressionLevel::Fastest,
                ),
                "application/vnd.oci.image.layer.v1.tar+zstd",
            ),
        };
        self.layers.push((bytes, diff_id, media));
        self
    }

    /// Writes the config, manifest and index (`name`, with a second platform beside ours
    /// whose manifest is absent: it must not be needed).
    pub(super) fn finish(self, name: &str, config: Value) -> PathBuf {
        let mut config = config;
        config["architecture"] = json!(host_arch());
        config["os"] = json!("linux");
        config["rootfs"] = json!({"type": "layers", "diff_ids": self.layers.iter().map(|l| l.1.clone()).collect::<Vec<_>>()});
        let config = serde_json::to_vec(&config).unwrap();
        let config_digest = self.blob(&config);
        let layers: Vec<Value> = self
            .layers
            .iter()
            .map(|(bytes, _, media)| {
                json!({"mediaType": media, "digest": self.blob(bytes), "size": bytes.len()})
            })
            .collect();
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
            "layers": layers,
        }))
        .unwrap();
        let manifest_digest = self.blob(&manifest);
        let other = if host_arch() == "arm64" {
            "amd64"
        } else {
            "arm64"
        };
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha256(b"absent"), "size": 6,
                 "platform": {"architecture": other, "os": "linux"}},
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest.len(),
                 "platform": {"architecture": host_arch(), "os": "linux"}},
            ],
        }))
        .unwrap();
        let index_digest = self.blob(&index);
        let top = json!({
            "schemaVersion": 2,
            "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": index_digest, "size": index.len(),
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(':').next().unwrap()}}],
        });
        std::fs::write(
            self.dir.join("index.json"),
            serde_json::to_vec(&top).unwrap(),
        )
        .unwrap();
        self.dir
    }
}

pub(super) fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// A layout of three layers, one per compression: busybox and /etc (gzip); a whiteout, an
/// opaque directory and a hard link (zstd); a file of the top layer (plain).
pub(super) fn layered(dir: PathBuf, bb: &[u8]) -> PathBuf {
    Layout::new(dir)
        .layer(
            Compression::Gzip,
            &[
                Entry::Dir("bin"),
                Entry::File("bin/busybox", bb, 0o755),
                Entry::Symlink("bin/sh", "busybox"),
                Entry::Hardlink("bin/bb", "bin/busybox"),
                Entry::Dir("etc"),
                Entry::File("etc/passwd", b"root:x:0:0::/root:/bin/sh\nsvc:x:4242:4343::/srv:/bin/sh\n", 0o644),
                Entry::File("etc/group", b"root:x:0:\nsvc:x:4343:\n", 0o644),
                Entry::Dir("data"),
                Entry::File("data/gone", b"hidden by a whiteout\n", 0o644),
                Entry::File("data/kept", b"kept\n", 0o644),
                Entry::Dir("opaque"),
                Entry::File("opaque/old", b"hidden by an opaque dir\n", 0o644),
            ],
        )
        .layer(
            Compression::Zstd,
            &[
                Entry::File("data/.wh.gone", b"", 0o644),
                Entry::Dir("opaque"),
                Entry::File("opaque/.wh..wh..opq", b"", 0o644),
                Entry::File("opaque/new", b"new\n", 0o644),
            ],
        )
        .layer(
            Compression::None,
            &[Entry::Dir("srv"), Entry::File("srv/ready", b"ready\n", 0o644)],
        )
        .finish(
            "registry.test/layered:v1",
            json!({"config": {
                "Entrypoint": ["/bin/sh", "-c"],
                "Cmd": ["echo cmd; /bin/busybox ls /data /opaque; test /bin/bb -ef /bin/busybox && echo linked; echo $FROM_IMAGE $MINE; pwd; /bin/busybox id -u; /bin/busybox id -g"],
                "Env": ["PATH=/bin", "FROM_IMAGE=image", "MINE=image"],
                "WorkingDir": "/srv",
                "User": "svc",
            }}),
        )
}

/// A layout of 100 layers: busybox (gzip), then 99 of one file each, `/l/1` to `/l/99`
/// (uncompressed): their paths overflow the one page of options mount(2) takes.
pub(super) fn deep(dir: PathBuf, bb: &[u8]) -> PathBuf {
    deeper(dir, bb, 100, "registry.test/deep:v1")
}

/// As `deep`, of `layers` layers, as `reference`.
pub(super) fn deeper(dir: PathBuf, bb: &[u8], layers: usize, reference: &str) -> PathBuf {
    let names: Vec<(String, String)> = (1..layers)
        .map(|i| (format!("l/{i}"), format!("{i}\n")))
        .collect();
    let mut layout = Layout::new(dir).layer(
        Compression::Gzip,
        &[
            Entry::Dir("bin"),
            Entry::File("bin/busybox", bb, 0o755),
            Entry::Symlink("bin/sh", "busybox"),
        ],
    );
    for (path, text) in &names {
        layout = layout.layer(
            Compression::None,
            &[Entry::Dir("l"), Entry::File(path, text.as_bytes(), 0o644)],
        );
    }
    layout.finish(reference, json!({"config": {"Env": ["PATH=/bin"]}}))
}
