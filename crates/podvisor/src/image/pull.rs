//! Pulls from a registry with oci-client (the OCI distribution protocol, token and basic
//! auth): the manifest (an index resolved to this host's platform), the config and each layer
//! not yet in the store, every blob verified, then unpacked and named. The store's writers'
//! lock is held throughout, so that two pulls of one image download it once: the second finds
//! the blobs there. Plain HTTP only for a registry on the loopback, as Docker and containerd
//! allow; credentials from docker's `config.json` (`$REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG`,
//! `~/.docker/config.json`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{ImageIndexEntry, OciDescriptor};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::store::{digest_of, ImageRecord, Store};
use super::ImageError;

/// The manifests a pull accepts: OCI's and Docker's, images and indexes.
const MEDIA_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// What a pull did: the image, how long it took and the bytes fetched.
#[derive(Debug)]
pub struct Pulled {
    pub image: ImageRecord,
    /// From the start of the pull, and from when the store's lock was had.
    pub waited: Duration,
    pub took: Duration,
    pub fetched: u64,
}

fn failed(name: &str, e: impl std::fmt::Display) -> ImageError {
    ImageError::Invalid(format!("failed to pull image {name:?}: {e}"))
}

/// Pulls `name` (as the manifest writes it) into the store.
pub fn pull(store: &Store, name: &str) -> Result<Pulled, ImageError> {
    let began = Instant::now();
    let normalized = super::normalize(name)?;
    let reference: Reference = normalized.parse().map_err(|e| failed(name, e))?;
    let _lock = store.lock()?;
    let locked = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(name, e))?;
    let auth = credentials(reference.resolve_registry());
    let client = Client::new(ClientConfig {
        protocol: protocol_for(reference.registry()),
        platform_resolver: Some(Box::new(this_platform)),
        ..ClientConfig::default()
    });
    let (manifest_digest, fetched) = runtime
        .block_on(fetch(store, &client, &reference, &auth))
        .map_err(|e| failed(name, e))?;
    let image = super::load::record(store, &manifest_digest, Some(normalized))?;
    store.unpack(&image)?;
    store.put(image.clone())?;
    Ok(Pulled {
        image,
        waited: began.elapsed(),
        took: locked.elapsed(),
        fetched,
    })
}

/// HTTPS, except for a registry on the loopback (`localhost`, `127.0.0.0/8`, `::1`).
fn protocol_for(registry: &str) -> ClientProtocol {
    let host = match registry.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match loopback {
        true => ClientProtocol::HttpsExcept(vec![registry.to_string()]),
        false => ClientProtocol::Https,
    }
}

/// The manifest of an index that fits this host (linux, this architecture).
fn this_platform(entries: &[ImageIndexEntry]) -> Option<String> {
    let arch = super::load::host_arch();
    entries
        .iter()
        .find(|e| {
            e.platform
                .as_ref()
                .is_some_and(|p| p.os.to_string() == "linux" && p.architecture.to_string() == arch)
        })
        .map(|e| e.digest.clone())
}

/// Fetches the manifest (resolving an index), the config and the missing layers into the
/// store; the manifest's digest and the bytes fetched.
async fn fetch(
    store: &Store,
    client: &Client,
    reference: &Reference,
    auth: &RegistryAuth,
) -> Result<(String, u64), String> {
    let (mut bytes, mut digest) = client
        .pull_manifest_raw(reference, auth, &MEDIA_TYPES)
        .await
        .map_err(|e| e.to_string())?;
    let media = |b: &[u8]| -> String {
        serde_json::from_slice::<serde_json::Value>(b)
            .ok()
            .and_then(|v| v["mediaType"].as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let mut fetched = bytes.len() as u64;
    if media(&bytes).contains("index") || media(&bytes).contains("manifest.list") {
        let index: oci_client::manifest::OciImageIndex =
            serde_json::from_slice(&bytes).map_err(|e| format!("index {digest}: {e}"))?;
        let chosen = this_platform(&index.manifests).ok_or_else(|| {
            format!(
                "no image for linux/{} in its index",
                super::load::host_arch()
            )
        })?;
        store
            .ingest(&digest, &bytes[..])
            .map_err(|e| e.to_string())?;
        let by_digest = reference.clone_with_digest(chosen);
        (bytes, digest) = client
            .pull_manifest_raw(&by_digest, auth, &MEDIA_TYPES)
            .await
            .map_err(|e| e.to_string())?;
        fetched += bytes.len() as u64;
    }
    // The digest is the registry's word: what we store is checked against what we hashed.
    if digest_of(&bytes) != digest {
        return Err(format!(
            "manifest {digest}: its content has digest {}",
            digest_of(&bytes)
        ));
    }
    store
        .ingest(&digest, &bytes[..])
        .map_err(|e| e.to_string())?;
    let manifest: oci_client::manifest::OciImageManifest =
        serde_json::from_slice(&bytes).map_err(|e| format!("manifest {digest}: {e}"))?;
    let mut blobs: Vec<&OciDescriptor> = vec![&manifest.config];
    blobs.extend(&manifest.layers);
    for d in blobs {
        if store.has_blob(&d.digest) {
            continue;
        }
        let tmp = store.temp("pull");
        let file = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        client
            .pull_blob(reference, d, file)
            .await
            .map_err(|e| format!("blob {}: {e}", d.digest))?;
        fetched += commit_file(store, &tmp, &d.digest).map_err(|e| e.to_string())?;
    }
    Ok((digest, fetched))
}

/// A fetched blob into the store: verified by `ingest`, the temporary file removed.
fn commit_file(store: &Store, tmp: &PathBuf, digest: &str) -> Result<u64, ImageError> {
    let file = std::fs::File::open(tmp).map_err(|e| ImageError::io(tmp, e))?;
    let n = store.ingest(digest, file);
    let _ = std::fs::remove_file(tmp);
    n
}

/// Docker's credentials for `registry` (`auths.REGISTRY.auth`, base64 of `user:password`),
/// from the first of `$REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG/config.json`,
/// `~/.docker/config.json` that has them; anonymous otherwise.
pub fn credentials(registry: &str) -> RegistryAuth {
    let mut files: Vec<PathBuf> = Vec::new();
    if let Some(f) = std::env::var_os("REGISTRY_AUTH_FILE") {
        files.push(f.into());
    }
    if let Some(d) = std::env::var_os("DOCKER_CONFIG") {
        files.push(PathBuf::from(d).join("config.json"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        files.push(PathBuf::from(h).join(".docker/config.json"));
    }
    let keys: Vec<String> = match registry {
        "index.docker.io" | "docker.io" | "registry-1.docker.io" => vec![
            "https://index.docker.io/v1/".into(),
            "index.docker.io".into(),
            "docker.io".into(),
        ],
        r => vec![r.to_string(), format!("https://{r}"), format!("http://{r}")],
    };
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let Ok(config) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        for k in &keys {
            if let Some(auth) = config["auths"][k]["auth"].as_str() {
                if let Some(basic) = decode_basic(auth) {
                    return basic;
                }
            }
        }
    }
    RegistryAuth::Anonymous
}

fn decode_basic(auth: &str) -> Option<RegistryAuth> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some(RegistryAuth::Basic(user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_on_the_loopback() {
        let http = |r: &str| matches!(protocol_for(r), ClientProtocol::HttpsExcept(_));
        assert!(http("127.0.0.1:5000"));
        assert!(http("localhost:5000"));
        assert!(http("[::1]:5000"));
        assert!(!http("registry.example:5000"));
        assert!(!http("docker.io"));
    }
}
