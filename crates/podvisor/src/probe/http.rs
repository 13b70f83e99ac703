//! The httpGet probe and hook: one HTTP/1.1 GET per hop on a fresh connection, as the kubelet's
//! prober sends it (pkg/probe/http): `User-Agent: kube-probe/<version>`, `Accept: */*`, no
//! keep-alive, no proxy, no compression; same-host redirects followed up to 10; the body read up
//! to 10 KiB; the whole exchange bounded by the probe's timeout (the caller's deadline).
//! `https` is TLS without certificate verification (Go's `InsecureSkipVerify`), by rustls.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

use podvisor_core::probe::Outcome;

use super::go_error_text;
use crate::process::sys::{self, ConnectState};

/// The Kubernetes minor version podvisor's probes claim to be (the API types it implements).
pub const KUBE_PROBE_AGENT: &str = "kube-probe/1.37";

/// At most this much of a body is read (`maxRespBodyLength`); more is not an error.
const MAX_BODY: usize = 10 * 1024;
/// A response head larger than this is refused.
const MAX_HEAD: usize = 64 * 1024;
/// Same-host redirects followed before giving up.
const MAX_REDIRECTS: u32 = 10;

/// A request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// Path and query, as sent on the request line.
    pub path: String,
}

impl Target {
    /// The URL as Go prints it in errors (`Get "http://127.0.0.1:8080/healthz": ...`).
    pub fn url(&self) -> String {
        format!("{}://{}{}", self.scheme, self.authority(), self.path)
    }

    /// `host:port`, an IPv6 literal in brackets: the URL's authority and the default Host
    /// header.
    fn authority(&self) -> Authority<'_> {
        Authority(self)
    }
}

/// A target's `host:port`, written where it is needed without a string of its own.
struct Authority<'a>(&'a Target);

impl fmt::Display for Authority<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Target { host, port, .. } = self.0;
        if host.contains(':') {
            write!(f, "[{host}]:{port}")
        } else {
            write!(f, "{host}:{port}")
        }
    }
}

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

/// The request as Go's client writes it with the prober's settings.
pub fn build_request(target: &Target, headers: &[(String, String)]) -> Vec<u8> {
    use std::fmt::Write as _;
    // Made at every attempt: written into one buffer, the headers borrowed.
    let mut host = None;
    let mut agent = KUBE_PROBE_AGENT;
    let mut accept = Some("*/*");
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("host") {
            host = Some(value.as_str());
        } else if name.eq_ignore_ascii_case("user-agent") {
            agent = value;
        } else if name.eq_ignore_ascii_case("accept") {
            // An empty Accept removes the header.
            accept = (!value.is_empty()).then_some(value.as_str());
        }
    }
    let mut req = String::with_capacity(128);
    let _ = write!(req, "GET {} HTTP/1.1\r\nHost: ", target.path);
    match host {
        Some(h) => req.push_str(h),
        None => {
            let _ = write!(req, "{}", target.authority());
        }
    }
    let _ = write!(req, "\r\nUser-Agent: {agent}\r\n");
    if let Some(a) = accept {
        let _ = write!(req, "Accept: {a}\r\n");
    }
    let special = ["host", "user-agent", "accept"];
    for (name, value) in headers {
        if !special.iter().any(|s| name.eq_ignore_ascii_case(s)) {
            let _ = write!(req, "{name}: {value}\r\n");
        }
    }
    req.push_str("Connection: close\r\n\r\n");
    req.into_bytes()
}

/// Where a `Location` points, relative to the request it answered.
fn resolve_location(from: &Target, location: &str) -> Option<Target> {
    let location = location.trim();
    if let Some((scheme, rest)) = location.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let default_port = if scheme == "https" { 443 } else { 80 };
        let (host, port) = split_authority(authority, default_port)?;
        return Some(Target {
            scheme,
            host,
            port,
            path: path.to_string(),
        });
    }
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        let dir = from.path.rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{location}")
    };
    Some(Target {
        path,
        ..from.clone()
    })
}

fn split_authority(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => default_port,
        };
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None => Some((authority.to_string(), default_port)),
    }
}

/// A response head, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub location: Option<String>,
    pub content_length: Option<usize>,
    pub chunked: bool,
}

/// The most header lines a response may have (Go has a byte limit, `MAX_HEAD`, too).
const MAX_HEADERS: usize = 128;

/// The response head and its length, once it has arrived whole (httparse); `Ok(None)` while
/// it is still arriving. Errors are worded as Go's net/http words them.
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let first_line = || {
        let end = buf
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end.min(40)]).into_owned()
    };
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::Version) => {
            return Err(format!("malformed HTTP response {:?}", first_line()))
        }
        Err(httparse::Error::Status) => {
            return Err(format!("malformed HTTP status code in {:?}", first_line()))
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err("net/http: server response headers exceeded the limit".into())
        }
        Err(e) => return Err(format!("malformed MIME header line: {e}")),
    };
    let mut head = Head {
        status: response.code.unwrap_or_default(),
        location: None,
        content_length: None,
        chunked: false,
    };
    for h in response.headers.iter() {
        let value = String::from_utf8_lossy(h.value).trim().to_string();
        if h.name.eq_ignore_ascii_case("location") {
            head.location = Some(value);
        } else if h.name.eq_ignore_ascii_case("content-length") {
            head.content_length = Some(
                value
                    .parse()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    Ok(Some((head, len)))
}

#[derive(Debug, PartialEq, Eq)]
enum Body {
    Incomplete,
    Complete(Vec<u8>),
}

/// Decodes a chunked body as far as it has arrived (or up to the cap); chunk sizes are read by
/// httparse.
fn dechunk(mut buf: &[u8]) -> Result<Body, String> {
    let mut out = Vec::new();
    loop {
        if out.len() >= MAX_BODY {
            return Ok(Body::Complete(out));
        }
        let (skip, size) = match httparse::parse_chunk_size(buf) {
            Ok(httparse::Status::Complete((skip, size))) => (skip, size as usize),
            Ok(httparse::Status::Partial) => return Ok(Body::Incomplete),
            Err(_) => return Err("malformed chunked encoding".to_string()),
        };
        buf = &buf[skip..];
        if size == 0 {
            return Ok(Body::Complete(out));
        }
        if buf.len() < size + 2 {
            out.extend_from_slice(&buf[..buf.len().min(size)]);
            if out.len() >= MAX_BODY {
                return Ok(Body::Complete(out));
            }
            return Ok(Body::Incomplete);
        }
        out.extend_from_slice(&buf[..size]);
        buf = &buf[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str) -> Target {
        Target {
            scheme: "http".into(),
            host: "127.0.0.1".into(),
            port: 8080,
            path: path.into(),
        }
    }

    #[test]
    fn request_as_the_prober_sends_it() {
        let req = build_request(&target("/healthz"), &[]);
        assert_eq!(
            String::from_utf8(req).unwrap(),
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: kube-probe/1.37\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n"
        );
        let headers = [
            ("Host".to_string(), "example.com".to_string()),
            ("Accept".to_string(), String::new()),
            ("X-Custom".to_string(), "a".to_string()),
            ("X-Custom".to_string(), "b".to_string()),
            ("User-Agent".to_string(), "mine".to_string()),
        ];
        let req = String::from_utf8(build_request(&target("/"), &headers)).unwrap();
        assert_eq!(
            req,
            "GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: mine\r\nX-Custom: a\r\n\
             X-Custom: b\r\nConnection: close\r\n\r\n"
        );
        let mut v6 = target("/");
        v6.host = "::1".into();
        let req = String::from_utf8(build_request(&v6, &[])).unwrap();
        assert!(req.contains("\r\nHost: [::1]:8080\r\n"), "{req}");
        assert_eq!(v6.url(), "http://[::1]:8080/");
        assert_eq!(target("/x?y=1").url(), "http://127.0.0.1:8080/x?y=1");
    }

    #[test]
    fn heads_and_bodies() {
        let text = b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 3\r\n\r\nabc";
        let (h, len) = parse_head(text).unwrap().unwrap();
        assert_eq!(len, text.len() - 3);
        assert_eq!(h.status, 302);
        assert_eq!(h.location.as_deref(), Some("/x"));
        assert_eq!(h.content_length, Some(3));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nA: b\r\n"), Ok(None));
        assert_eq!(
            parse_head(b"garbage\r\n\r\n"),
            Err("malformed HTTP response \"garbage\"".to_string())
        );
        assert!(parse_head(b"HTTP/1.1 abc\r\n\r\n")
            .unwrap_err()
            .starts_with("malformed HTTP status code"));
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            Body::Complete(b"abcde".to_vec())
        );
        assert_eq!(dechunk(b"3\r\nab").unwrap(), Body::Incomplete);
        assert!(dechunk(b"zz\r\n").is_err());
    }

    #[test]
    fn redirect_targets() {
        let from = target("/a/b");
        assert_eq!(resolve_location(&from, "/c").unwrap().path, "/c");
        assert_eq!(resolve_location(&from, "c").unwrap().path, "/a/c");
        let other = resolve_location(&from, "http://example.com:81/x").unwrap();
        assert_eq!(
            (other.host.as_str(), other.port, other.path.as_str()),
            ("example.com", 81, "/x")
        );
        let v6 = resolve_location(&from, "http://[::1]/").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 80));
    }
}
