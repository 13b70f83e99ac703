//! The messages of an httpGet probe or hook: the request the prober sends, the response head
//! and body as they arrive (parsed by httparse, errors worded as Go's net/http words them), and
//! where a redirect points.

use std::fmt;

use super::{KUBE_PROBE_AGENT, MAX_BODY};

/// A request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) scheme: String,
    pub(super) host: String,
    pub(super) port: u16,
    /// Path and query, as sent on the request line.
    pub(super) path: String,
}

impl Target {
    /// The URL as Go prints it in errors (`Get "http://127.0.0.1:8080/healthz": ...`).
    pub(super) fn url(&self) -> String {
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

/// The request as Go's client writes it with the prober's settings.
pub(super) fn build_request(target: &Target, headers: &[(String, String)]) -> Vec<u8> {
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
pub(super) fn resolve_location(from: &Target, location: &str) -> Option<Target> {
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
pub(super) struct Head {
    pub(super) status: u16,
    pub(super) location: Option<String>,
    pub(super) content_length: Option<usize>,
    pub(super) chunked: bool,
}

/// The most header lines a response may have (Go has a byte limit, `MAX_HEAD`, too).
const MAX_HEADERS: usize = 128;

/// The response head and its length, once it has arrived whole (httparse); `Ok(None)` while
/// it is still arriving. Errors are worded as Go's net/http words them.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, String> {
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
pub(super) enum Body {
    Incomplete,
    Complete(Vec<u8>),
}

/// Decodes a chunked body as far as it has arrived (or up to the cap); chunk sizes are read by
/// httparse.
pub(super) fn dechunk(mut buf: &[u8]) -> Result<Body, String> {
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
