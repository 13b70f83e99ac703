//! The controller's two listeners, on hyper: the webhook over TLS (certificate and key read
//! from mounted PEM files, as a Secret mounts them) with `POST /mutate`, and plain HTTP for
//! `/metrics` and `/healthz`. Each connection has a deadline, so a slow or silent client holds
//! nothing for long.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
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

/// The webhook's TLS settings from a PEM certificate chain and a PEM private key.
pub fn tls_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
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
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
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
