//! Pulls from a registry with oci-client (the OCI distribution protocol, token and basic
//! auth): the manifest (an index resolved to this host's platform), the config and each layer
//! not yet in the store, every blob verified, then unpacked and named. The store's writers'
//! lock is held throughout, so that two pulls of one image download it once: the second finds
//! the blobs there. Where from: the registry's mirrors and then itself (`hosts`); plain HTTP
//! only for a registry on the loopback or an `http://` host of the settings, as Docker and
//! containerd allow. Credentials: the pod's `imagePullSecrets` first, as the kubelet tries
//! them, then docker's `config.json` (`$REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG`,
//! `~/.docker/config.json`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::{ImageIndexEntry, OciDescriptor};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::hosts::{self, Endpoint};
use super::store::{digest_of, ImageRecord, Store};
use super::ImageError;

/// Where and as whom to pull.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// The registry settings directory (`hosts.toml` files).
    pub hosts_dir: PathBuf,
    /// `.dockerconfigjson` texts of the pod's `imagePullSecrets`, tried first.
    pub secrets: Vec<String>,
    /// A bar per blob on stderr when it is a terminal (`podvisor image pull`).
    pub progress: bool,
}

/// A file being fetched that moves its progress bar as bytes arrive.
struct Counted {
    file: tokio::fs::File,
    bar: indicatif::ProgressBar,
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.file).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &polled {
            self.bar.inc(*n as u64);
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.file).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.file).poll_shutdown(cx)
    }
}

/// The bars of one pull: hidden unless asked for and stderr is a terminal.
fn bars(progress: bool) -> indicatif::MultiProgress {
    let target = match progress {
        true => indicatif::ProgressDrawTarget::stderr(),
        false => indicatif::ProgressDrawTarget::hidden(),
    };
    indicatif::MultiProgress::with_draw_target(target)
}

fn blob_bar(bars: &indicatif::MultiProgress, digest: &str, size: i64) -> indicatif::ProgressBar {
    let bar = bars.add(indicatif::ProgressBar::new(size.max(0) as u64));
    let style = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    let short: String = digest
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect();
    bar.set_prefix(short);
    bar
}

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

/// Pulls `name` (as the manifest writes it) into the store: from each of its registry's
/// endpoints in turn until one has it.
pub fn pull(store: &Store, name: &str, options: &PullOptions) -> Result<Pulled, ImageError> {
    let began = Instant::now();
    let normalized = super::normalize(name)?;
    let reference: Reference = normalized.parse().map_err(|e| failed(name, e))?;
    let endpoints = hosts::endpoints(&options.hosts_dir, reference.registry())?;
    let _lock = store.lock()?;
    let locked = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(name, e))?;
    let mut errors = Vec::new();
    for endpoint in &endpoints {
        let at = at_endpoint(&reference, endpoint);
        let auth = credentials(&options.secrets, &[&endpoint.host, reference.registry()]);
        let client = match client_for(endpoint) {
            Ok(c) => c,
            Err(e) => {
                errors.push(format!("{}: {e}", endpoint.host));
                continue;
            }
        };
        let bars = bars(options.progress);
        match runtime.block_on(fetch(store, &client, &at, &auth, &bars)) {
            Ok((manifest_digest, fetched)) => {
                let image = super::load::record(store, &manifest_digest, Some(normalized))?;
                store.unpack(&image)?;
                store.put(image.clone())?;
                return Ok(Pulled {
                    image,
                    waited: began.elapsed(),
                    took: locked.elapsed(),
                    fetched,
                });
            }
            Err(e) if endpoints.len() > 1 => errors.push(format!("{}: {e}", endpoint.host)),
            Err(e) => errors.push(e),
        }
    }
    Err(failed(name, errors.join("; ")))
}

/// The reference as `endpoint` serves it (a mirror keeps the repository and the tag).
fn at_endpoint(reference: &Reference, endpoint: &Endpoint) -> Reference {
    if endpoint.host == reference.registry() {
        return reference.clone();
    }
    let (host, repo) = (endpoint.host.clone(), reference.repository().to_string());
    match (reference.digest(), reference.tag()) {
        (Some(d), _) => Reference::with_digest(host, repo, d.to_string()),
        (None, tag) => Reference::with_tag(host, repo, tag.unwrap_or("latest").to_string()),
    }
}

fn client_for(endpoint: &Endpoint) -> Result<Client, String> {
    let mut certificates = Vec::new();
    for path in &endpoint.ca {
        let data = std::fs::read(path).map_err(|e| format!("ca {}: {e}", path.display()))?;
        certificates.push(Certificate {
            encoding: CertificateEncoding::Pem,
            data,
        });
    }
    Ok(Client::new(ClientConfig {
        protocol: match endpoint.http {
            true => ClientProtocol::HttpsExcept(vec![endpoint.host.clone()]),
            false => ClientProtocol::Https,
        },
        extra_root_certificates: certificates,
        accept_invalid_certificates: endpoint.skip_verify,
        platform_resolver: Some(Box::new(this_platform)),
        ..ClientConfig::default()
    }))
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
    bars: &indicatif::MultiProgress,
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
        let bar = blob_bar(bars, &d.digest, d.size);
        let counted = Counted {
            file,
            bar: bar.clone(),
        };
        client
            .pull_blob(reference, d, counted)
            .await
            .map_err(|e| format!("blob {}: {e}", d.digest))?;
        bar.finish();
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

/// Credentials for the first of `hosts` that has some: in the pull secrets' `auths`, then in
/// docker's files (`$REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG/config.json`,
/// `~/.docker/config.json`); anonymous otherwise.
pub fn credentials(secrets: &[String], hosts: &[&str]) -> RegistryAuth {
    let mut configs: Vec<String> = secrets.to_vec();
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
    configs.extend(files.iter().filter_map(|f| std::fs::read_to_string(f).ok()));
    for host in hosts {
        let keys: Vec<String> = match *host {
            "index.docker.io" | "docker.io" | "registry-1.docker.io" => vec![
                "https://index.docker.io/v1/".into(),
                "index.docker.io".into(),
                "docker.io".into(),
            ],
            r => vec![r.to_string(), format!("https://{r}"), format!("http://{r}")],
        };
        for text in &configs {
            let Ok(config) = serde_json::from_str::<serde_json::Value>(text) else {
                continue;
            };
            for k in &keys {
                let entry = &config["auths"][k];
                if let Some(auth) = entry["auth"].as_str().and_then(decode_basic) {
                    return auth;
                }
                if let (Some(u), Some(p)) = (entry["username"].as_str(), entry["password"].as_str())
                {
                    return RegistryAuth::Basic(u.to_string(), p.to_string());
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
    fn pull_secrets_come_before_docker_config() {
        // "user:secret", then "other" with "pw".
        let secret = r#"{"auths": {"registry.test:5000": {"auth": "dXNlcjpzZWNyZXQ="}}}"#;
        let plain =
            r#"{"auths": {"https://mirror.test": {"username": "other", "password": "pw"}}}"#;
        let secrets = [secret.to_string(), plain.to_string()];
        let basic = |u: &str, p: &str| RegistryAuth::Basic(u.into(), p.into());
        assert!(credentials(&secrets, &["registry.test:5000"]) == basic("user", "secret"));
        assert!(
            credentials(&secrets, &["mirror.test", "registry.test:5000"]) == basic("other", "pw")
        );
        assert!(credentials(&secrets, &["nowhere.test"]) == RegistryAuth::Anonymous);
    }
}
