//! The controller's two listeners, on hyper: the webhook over TLS (certificate and key read
//! from mounted PEM files, as a Secret mounts them, and read again when they change) with
//! `POST /mutate`, and plain HTTP for
//! `/metrics` and `/healthz`. Each connection has a deadline, so a slow or silent client holds
//! nothing for long.

use std::convert::Infallible;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::metrics::Metrics;
use crate::webhook::{Webhook, MAX_BODY};

/// A connection's whole life, TLS handshake included.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The webhook's TLS settings from a PEM certificate chain and a PEM private key. The files
/// are read again when they change (a mounted Secret is updated in place when cert-manager or
/// an operator rotates it), so rotation needs no restart; a change that cannot be used keeps
/// the previous certificate, with a warning.
pub fn tls_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = FileCerts::load(cert, key, provider.clone())?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(certs));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// What identifies a version of the two files: modification time, size and inode of each.
type Stamp = [(Option<SystemTime>, u64, u64); 2];

fn stamp(cert: &Path, key: &Path) -> Stamp {
    [cert, key].map(|p| match std::fs::metadata(p) {
        Ok(m) => (m.modified().ok(), m.len(), m.ino()),
        Err(_) => (None, 0, 0),
    })
}

/// The certificate and key from their files, read again when the files change.
#[derive(Debug)]
struct FileCerts {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<rustls::crypto::CryptoProvider>,
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

impl FileCerts {
    fn load(
        cert: &Path,
        key: &Path,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<FileCerts, TlsError> {
        let at = stamp(cert, key);
        let loaded = read_certified_key(cert, key, &provider)?;
        Ok(FileCerts {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: Mutex::new((at, Arc::new(loaded))),
        })
    }
}

impl ResolvesServerCert for FileCerts {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp(&self.cert, &self.key);
        if now != current.0 {
            match read_certified_key(&self.cert, &self.key, &self.provider) {
                Ok(k) => {
                    tracing::info!(cert = %self.cert.display(), "webhook certificate reloaded");
                    *current = (now, Arc::new(k));
                }
                Err(e) => {
                    // Half-written files, or a bad rotation: keep serving the previous one
                    // and look again at the next handshake.
                    tracing::warn!("webhook certificate not reloaded: {e}");
                }
            }
        }
        Some(current.1.clone())
    }
}

fn read_certified_key(
    cert: &Path,
    key: &Path,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let file_err = |path: &Path, message: String| TlsError::File {
        path: path.display().to_string(),
        message,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_err(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_err(cert, "no CERTIFICATE in the file".into()));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, e.to_string()))?;
    Ok(CertifiedKey::from_der(certs, der, provider)?)
}

fn text(code: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = code;
    r
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, Response<Full<Bytes>>> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) => Err(text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body refused: {e}"),
        )),
    }
}

/// Serves the webhook over TLS until the listener fails.
pub async fn serve_webhook(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    webhook: Arc<Webhook>,
) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    loop {
        let Ok((tcp, peer)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let webhook = webhook.clone();
        tokio::spawn(async move {
            let work = async {
                let tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!(%peer, "TLS handshake failed: {e}");
                        return;
                    }
                };
                let service = service_fn(move |req: Request<Incoming>| {
                    let webhook = webhook.clone();
                    async move { Ok::<_, Infallible>(handle_webhook(req, &webhook).await) }
                });
                let _ = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            };
            let _ = tokio::time::timeout(CONNECTION_DEADLINE, work).await;
        });
    }
}

async fn handle_webhook(req: Request<Incoming>, webhook: &Webhook) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/mutate") => {
            let body = match read_body(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let (code, json) = webhook.review(&body);
            let mut r = text(code, json);
            if code == StatusCode::OK {
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    "application/json".parse().expect("valid"),
                );
            }
            r
        }
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: POST /mutate, GET /healthz\n",
        ),
    }
}

/// Serves `/metrics` and `/healthz` over plain HTTP until the listener fails.
pub async fn serve_metrics(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let metrics = metrics.clone();
                async move {
                    let r = match (req.method(), req.uri().path()) {
                        (&Method::GET, "/metrics") => {
                            let mut r = text(StatusCode::OK, metrics.encode());
                            r.headers_mut().insert(
                                http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                    .parse()
                                    .expect("valid"),
                            );
                            r
                        }
                        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
                        _ => text(StatusCode::NOT_FOUND, "not found: GET /metrics, /healthz\n"),
                    };
                    Ok::<_, Infallible>(r)
                }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(tcp), service);
            let _ = tokio::time::timeout(CONNECTION_DEADLINE, conn).await;
        });
    }
}
