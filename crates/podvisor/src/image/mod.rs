//! Images (docs/images.md): a content store shared by every pod of a user, images loaded into
//! it from a `docker save` tarball or an OCI image layout, their layers unpacked once each and
//! safely, and what a container started from an image gets from its config.
//!
//! The rooms mirror containerd's: `store` (blobs by digest, committed atomically; unpacked
//! layers by diff_id; the names), `load` (archives and layouts in), `unpack` (one layer into a
//! directory an overlay can stack), `config` (Kubernetes' rules for command, args, env,
//! working dir and user over the image's).

pub mod config;
pub mod hosts;
pub mod load;
pub mod merged;
pub mod owners;
pub mod pull;
pub mod reference;
pub mod store;
pub mod unpack;

pub use reference::normalize;
pub use store::{ImageRecord, Store};

/// The files of `/etc` a runtime gives a container of an image (bound from the pod's own
/// copies): `hosts`, `hostname`, then `resolv.conf`.
pub const RUNTIME_FILES: [&str; 3] = ["hosts", "hostname", "resolv.conf"];

/// The extended attribute that marks a directory of an unpacked layer opaque. As root it is
/// `trusted.overlay.opaque`; without root, `user.overlay.opaque`, the one an overlay mounted
/// with `userxattr` in a user namespace reads (a user's store is that user's alone).
pub fn opaque_xattr() -> &'static str {
    match crate::process::sys::getuid() {
        0 => "trusted.overlay.opaque",
        _ => "user.overlay.opaque",
    }
}

/// Why an image operation failed; the message names the file, blob or entry.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{0}")]
    Invalid(String),
    #[error("invalid image name {name:?}: {why}")]
    Name { name: String, why: String },
    #[error("blob {digest}: its content has digest {actual}: refused")]
    Digest { digest: String, actual: String },
    #[error("layer {layer}: entry {entry:?}: {why}: refused")]
    Unsafe {
        layer: String,
        entry: String,
        why: String,
    },
    #[error("image {0:?} is not in podvisor's image store (`podvisor image ls` lists them; `podvisor image load` adds one)")]
    NotFound(String),
}

impl ImageError {
    pub fn io(path: &std::path::Path, error: std::io::Error) -> ImageError {
        ImageError::Io {
            path: path.display().to_string(),
            error,
        }
    }
}
