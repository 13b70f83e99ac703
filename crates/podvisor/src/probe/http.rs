//! The httpGet probe and hook: one HTTP/1.1 GET per hop on a fresh connection, as the kubelet's
//! prober sends it (pkg/probe/http): `User-Agent: kube-probe/<version>`, `Accept: */*`, no
//! keep-alive, no proxy, no compression; same-host redirects followed up to 10; the body read up
//! to 10 KiB; the whole exchange bounded by the probe's timeout (the caller's deadline).
//! `https` is TLS without certificate verification (Go's `InsecureSkipVerify`), by rustls.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

use podvisor_core::probe::Outcome;

use super::go_error_text;
use crate::process::sys::{self, ConnectState};

mod message;

use message::{build_request, dechunk, parse_head, resolve_location, Body, Target};

/// The Kubernetes minor version podvisor's probes claim to be (the API types it implements).
pub const KUBE_PROBE_AGENT: &str = "kube-probe/1.37";

/// At most this much of a body is read (`maxRespBodyLength`); more is not an error.
const MAX_BODY: usize = 10 * 1024;
/// A response head larger than this is refused.
const MAX_HEAD: usize = 64 * 1024;
/// Same-host redirects followed before giving up.
const MAX_REDIRECTS: u32 = 10;

/// Where the exchange is.
#[derive(Debug)]
enum Phase {
    Connecting,
    Writing {
        off: usize,
    },
    Reading,
    /// https: the TLS session carries the request and the answer.
    Tls,
}

/// One probe's HTTP exchange, driven by readiness of its socket.
#[derive(Debug)]
pub struct HttpTask {
    target: Target,
    headers: Vec<(String, String)>,
    /// The first target: redirects are judged against its host.
    origin_host: String,
    stream: TcpStream,
    /// Where the stream connects: Go names the resolved address in a dial error.
    addr: SocketAddr,
    phase: Phase,
    request: Vec<u8>,
    response: Vec<u8>,
    redirects: u32,
    tls: Option<Box<rustls::ClientConnection>>,
}

/// What a step of the exchange asks for next.
#[derive(Debug)]
pub enum Next {
    /// Wait until the socket is writable (true) or readable (false).
    Wait {
        writable: bool,
    },
    /// A new connection was made (a redirect): register it anew.
    Reconnected {
        writable: bool,
    },
    Done(Outcome),
}

impl HttpTask {
    /// Starts the request; `Err` is the outcome when it cannot even begin.
    pub fn start(
        scheme: &str,
        host: &str,
        port: u16,
        path: &str,
        headers: &[(String, String)],
    ) -> Result<HttpTask, Outcome> {
        let path = if path.is_empty() {
            "/".to_string()
        } else if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        let target = Target {
            scheme: scheme.to_string(),
            host: host.to_string(),
            port,
            path,
        };
        if target.scheme != "http" && target.scheme != "https" {
            return Err(Outcome::Failure(format!(
                "Get {:?}: unsupported protocol scheme {:?}",
                target.url(),
                target.scheme
            )));
        }
        let (stream, addr) = connect(&target)?;
        let request = build_request(&target, headers);
        Ok(HttpTask {
            origin_host: target.host.clone(),
            target,
            headers: headers.to_vec(),
            stream,
            addr,
            phase: Phase::Connecting,
            request,
            response: Vec::new(),
            redirects: 0,
            tls: None,
        })
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// The outcome when the deadline passes first.
    pub fn timed_out(&self) -> Outcome {
        let during = match self.phase {
            Phase::Reading | Phase::Tls if self.head_arrived() => {
                // Reading the body fails as an error in the kubelet (`ReadAtMost`).
                return Outcome::Error(format!(
                    "Get {:?}: context deadline exceeded (Client.Timeout or context cancellation while reading body)",
                    self.target.url()
                ));
            }
            _ => "while awaiting headers",
        };
        Outcome::Failure(format!(
            "Get {:?}: context deadline exceeded (Client.Timeout exceeded {during})",
            self.target.url()
        ))
    }

    fn fail(&self, what: impl std::fmt::Display) -> Next {
        Next::Done(Outcome::Failure(format!(
            "Get {:?}: {what}",
            self.target.url()
        )))
    }

    /// Makes as much progress as the socket allows.
    pub fn advance(&mut self) -> Next {
        loop {
            match self.phase {
                Phase::Tls => return self.advance_tls(),
                Phase::Connecting => match sys::connect_state(&self.stream) {
                    ConnectState::Connected if self.target.scheme == "https" => {
                        match tls_session(&self.target.host) {
                            Ok(mut conn) => {
                                // Plaintext is buffered until the handshake is done.
                                if let Err(e) = conn.writer().write_all(&self.request) {
                                    return self.fail(format!("tls: {e}"));
                                }
                                self.tls = Some(Box::new(conn));
                                self.phase = Phase::Tls;
                            }
                            Err(e) => return self.fail(e),
                        }
                    }
                    ConnectState::Connected => self.phase = Phase::Writing { off: 0 },
                    ConnectState::Connecting => return Next::Wait { writable: true },
                    ConnectState::Failed(e) => {
                        let dial =
                            format!("dial tcp {}: connect: {}", self.addr, go_error_text(&e));
                        return self.fail(dial);
                    }
                },
                Phase::Writing { off } => match self.stream.write(&self.request[off..]) {
                    // The answer cannot be there yet: wait for it rather than try a read.
                    Ok(n) if off + n == self.request.len() => {
                        self.phase = Phase::Reading;
                        return Next::Wait { writable: false };
                    }
                    Ok(n) => self.phase = Phase::Writing { off: off + n },
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        return Next::Wait { writable: true }
                    }
                    // ENOTCONN while connecting: wait for writability.
                    Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                        return Next::Wait { writable: true }
                    }
                    Err(e) => return self.fail(go_error_text(&e)),
                },
                Phase::Reading => {
                    let mut buf = [0u8; 4096];
                    match self.stream.read(&mut buf) {
                        Ok(0) => return self.judge(true),
                        Ok(n) => {
                            self.response.extend_from_slice(&buf[..n]);
                            if let Some(next) = self.judge_partial() {
                                return next;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            return Next::Wait { writable: false }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            if self.head_arrived() {
                                return Next::Done(Outcome::Error(go_error_text(&e)));
                            }
                            return self.fail(format!("read: {}", go_error_text(&e)));
                        }
                    }
                }
            }
        }
    }

    /// The exchange over TLS: handshake, request and answer, as far as the socket allows.
    fn advance_tls(&mut self) -> Next {
        loop {
            let Some(tls) = self.tls.as_mut() else {
                return self.fail("tls: no session");
            };
            while tls.wants_write() {
                match tls.write_tls(&mut self.stream) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        return Next::Wait { writable: true }
                    }
                    Err(e) => return self.fail(go_error_text(&e)),
                }
            }
            let mut buf = [0u8; 4096];
            match tls.reader().read(&mut buf) {
                Ok(0) => return self.judge(true),
                Ok(n) => {
                    self.response.extend_from_slice(&buf[..n]);
                    if let Some(next) = self.judge_partial() {
                        return next;
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: judge what came.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return self.judge(true),
                Err(e) => return self.fail(format!("tls: {e}")),
            }
            match tls.read_tls(&mut self.stream) {
                Ok(0) => return self.judge(true),
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        // Send the alert, if the socket takes it, and give up.
                        let _ = tls.write_tls(&mut self.stream);
                        return self.fail(format!("tls: {e}"));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Next::Wait {
                        writable: tls.wants_write(),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(go_error_text(&e)),
            }
        }
    }

    /// Decides as soon as the response is complete (or its body reached the cap).
    fn judge_partial(&mut self) -> Option<Next> {
        match parse_head(&self.response) {
            Ok(None) if self.response.len() > MAX_HEAD => {
                return Some(self.fail("net/http: server response headers exceeded the limit"))
            }
            Ok(None) => return None,
            Err(_) => return Some(self.judge(false)),
            Ok(Some(_)) => {}
        }
        match self.body_state() {
            Ok(Body::Incomplete) => None,
            _ => Some(self.judge(false)),
        }
    }

    /// Judges the response as it stands; `eof`: the server closed the connection.
    fn judge(&mut self, eof: bool) -> Next {
        let (head, end) = match parse_head(&self.response) {
            Ok(Some(parsed)) => parsed,
            Ok(None) if self.response.is_empty() => return self.fail("EOF"),
            Ok(None) => {
                return self.fail(format!(
                    "net/http: HTTP/1.x transport connection broken: malformed HTTP response {:?}",
                    String::from_utf8_lossy(&self.response[..self.response.len().min(40)])
                ))
            }
            Err(e) => {
                return self.fail(format!(
                    "net/http: HTTP/1.x transport connection broken: {e}"
                ))
            }
        };
        let body = match self.body_state() {
            Ok(Body::Complete(b)) => b,
            Ok(Body::Incomplete) if eof && head.content_length.is_none() && !head.chunked => {
                self.response[end..].to_vec()
            }
            Ok(Body::Incomplete) => return Next::Done(Outcome::Error("unexpected EOF".into())),
            Err(e) => return Next::Done(Outcome::Error(e)),
        };
        let body = String::from_utf8_lossy(&body[..body.len().min(MAX_BODY)]).into_owned();
        if (300..400).contains(&head.status) {
            if let Some(location) = &head.location {
                match self.redirect(location) {
                    Some(next) => return next,
                    None => {
                        return Next::Done(Outcome::Warning(format!(
                            "Probe terminated redirects, Response body: {body}"
                        )))
                    }
                }
            }
            return Next::Done(Outcome::Warning(format!(
                "Probe terminated redirects, Response body: {body}"
            )));
        }
        if (200..400).contains(&head.status) {
            Next::Done(Outcome::Success)
        } else {
            Next::Done(Outcome::Failure(format!(
                "HTTP probe failed with statuscode: {}",
                head.status
            )))
        }
    }

    /// Follows a redirect to the same host (a new connection); `None`: not followed.
    fn redirect(&mut self, location: &str) -> Option<Next> {
        let next = resolve_location(&self.target, location)?;
        if next.host != self.origin_host {
            return None;
        }
        if self.redirects >= MAX_REDIRECTS {
            return Some(Next::Done(Outcome::Failure(format!(
                "Get {:?}: stopped after {MAX_REDIRECTS} redirects",
                next.url()
            ))));
        }
        self.redirects += 1;
        if next.scheme != "http" && next.scheme != "https" {
            return Some(Next::Done(Outcome::Failure(format!(
                "Get {:?}: unsupported protocol scheme {:?}",
                next.url(),
                next.scheme
            ))));
        }
        match connect(&next) {
            Ok((stream, addr)) => {
                self.request = build_request(&next, &self.headers);
                self.target = next;
                self.stream = stream;
                self.addr = addr;
                self.phase = Phase::Connecting;
                self.tls = None;
                self.response.clear();
                Some(Next::Reconnected { writable: true })
            }
            Err(outcome) => Some(Next::Done(outcome)),
        }
    }

    /// Whether the whole response head has arrived (a later problem is with the body).
    fn head_arrived(&self) -> bool {
        matches!(parse_head(&self.response), Ok(Some(_)))
    }

    fn body_state(&self) -> Result<Body, String> {
        let Some((head, end)) = parse_head(&self.response)? else {
            return Ok(Body::Incomplete);
        };
        let body = &self.response[end..];
        if head.status / 100 == 1 || head.status == 204 || head.status == 304 {
            return Ok(Body::Complete(Vec::new()));
        }
        if head.chunked {
            return dechunk(body);
        }
        match head.content_length {
            Some(n) if body.len() >= n.min(MAX_BODY) => {
                Ok(Body::Complete(body[..n.min(body.len())].to_vec()))
            }
            Some(_) => Ok(Body::Incomplete),
            None if body.len() >= MAX_BODY => Ok(Body::Complete(body.to_vec())),
            None => Ok(Body::Incomplete),
        }
    }
}

/// A TLS client session that accepts any certificate, as the prober's `InsecureSkipVerify`.
fn tls_session(host: &str) -> Result<rustls::ClientConnection, String> {
    use std::sync::{Arc, OnceLock};
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    let config = CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("tls: {e}"))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("tls: server name {host:?}: {e}"))?;
    rustls::ClientConnection::new(config, name).map_err(|e| format!("tls: {e}"))
}

/// Accepts every server certificate but still checks the handshake's signatures (which prove
/// the server holds the key of the certificate it sent).
#[derive(Debug)]
struct AnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn connect(target: &Target) -> Result<(TcpStream, SocketAddr), Outcome> {
    let addr = resolve(&target.host, target.port)
        .map_err(|e| Outcome::Failure(format!("Get {:?}: dial tcp: {e}", target.url())))?;
    let stream = sys::tcp_connect_start(&addr).map_err(|e| {
        Outcome::Failure(format!(
            "Get {:?}: dial tcp {addr}: connect: {}",
            target.url(),
            go_error_text(&e)
        ))
    })?;
    Ok((stream, addr))
}

/// An IP literal at once; a name through the system resolver (blocking, as names in probes
/// are rare and usually in /etc/hosts).
pub fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("lookup {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("lookup {host}: no such host"))
}
