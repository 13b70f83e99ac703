//! What a client of the status API asks: the request line and headers read into a `Request`
//! (and for a resize its `PatchKind`), and when a request with a body is whole.

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Status,
    /// `patches`: `&patch=1`, after the first line the JSON Patch from the status before.
    WatchStatus {
        patches: bool,
    },
    Events,
    WatchEvents,
    Stop,
    RestartPod,
    RestartContainer(String),
    /// A command to run in a container; its stdio came with the request (`Server::take_fds`),
    /// or with `terminal` (rows, columns) a socket to send the master of its terminal to.
    Exec {
        container: String,
        command: Vec<String>,
        terminal: Option<(u16, u16)>,
    },
    Metrics,
    /// A patch of the pod on one of its subresources (the body, as sent).
    Patch {
        subresource: Subresource,
        kind: PatchKind,
        body: String,
    },
}

/// What a patch may change: as `kubectl patch pod --subresource`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// `resize`: the containers' resources, in place (KEP-1287).
    Resize,
    /// `status`: the pod's conditions of types the node does not own (readiness gates').
    Status,
}

/// How a patch is written (its `Content-Type`), as the API server reads one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/strategic-merge-patch+json` (kubectl's default): lists of containers
    /// merged by name.
    Strategic,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
}

/// Parses a request head; `Err` is the status and message to answer with.
pub fn parse_request(head: &str) -> Result<Request, (u16, String)> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err((400, format!("malformed request line {line:?}\n")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err((400, format!("not HTTP/1.x: {line:?}\n")));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| percent_decode(v))
    };
    let all = |name: &str| -> Vec<String> {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| percent_decode(v))
            .collect()
    };
    let watch = param("watch").is_some_and(|v| v == "1" || v == "true");
    match (method, path) {
        ("GET", "/status") if watch => Ok(Request::WatchStatus {
            patches: param("patch").is_some_and(|v| v == "1" || v == "true"),
        }),
        ("GET", "/status") => Ok(Request::Status),
        ("GET", "/events") if watch => Ok(Request::WatchEvents),
        ("GET", "/events") => Ok(Request::Events),
        ("POST", "/stop") => Ok(Request::Stop),
        ("POST", "/restart") => Ok(match param("container") {
            Some(name) if !name.is_empty() => Request::RestartContainer(name),
            _ => Request::RestartPod,
        }),
        ("POST", "/exec") => match (param("container"), all("command")) {
            (Some(container), command) if !container.is_empty() && !command.is_empty() => {
                let size = |name: &str| param(name).and_then(|v| v.parse::<u16>().ok());
                let terminal = match param("tty").as_deref() {
                    Some("true" | "1") => {
                        Some((size("rows").unwrap_or(0), size("cols").unwrap_or(0)))
                    }
                    _ => None,
                };
                Ok(Request::Exec {
                    container,
                    command,
                    terminal,
                })
            }
            _ => Err((400, "exec needs container=NAME and command=ARG...\n".into())),
        },
        ("GET", "/metrics") => Ok(Request::Metrics),
        ("PATCH", "/resize" | "/status") => {
            let subresource = match path {
                "/resize" => Subresource::Resize,
                _ => Subresource::Status,
            };
            let kind = match header(head, "content-type").as_deref() {
                None | Some("application/strategic-merge-patch+json") => PatchKind::Strategic,
                Some("application/merge-patch+json") => PatchKind::Merge,
                Some("application/json-patch+json") => PatchKind::Json,
                Some(other) => {
                    return Err((415, format!("the body of a patch is a strategic-merge, merge or JSON patch, not {other:?}\n")))
                }
            };
            Ok(Request::Patch {
                subresource,
                kind,
                body: String::new(),
            })
        }
        (_, "/status" | "/events" | "/stop" | "/restart" | "/exec" | "/resize") => {
            Err((405, format!("{method} is not allowed on {path}\n")))
        }
        _ => Err((404, format!("no such endpoint {path:?}\n"))),
    }
}

/// A header's value (its name in any case), the first if repeated.
fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// Whether `input` holds a whole request: its head, and the body its `Content-Length` says.
pub(super) fn complete(input: &[u8]) -> bool {
    let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&input[..end]);
    input.len() >= end + 4 + content_length(&head)
}

/// The `Content-Length` of a request (0 when it has none or it is not a number).
pub(super) fn content_length(head: &str) -> usize {
    header(head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The metrics server answers `GET /metrics` only.
pub(super) fn parse_metrics_request(head: &str) -> Result<Request, (u16, String)> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    match (
        parts.next(),
        parts.next().map(|t| t.split('?').next().unwrap_or(t)),
    ) {
        (Some("GET"), Some("/metrics")) => Ok(Request::Metrics),
        (Some(_), Some("/metrics")) => Err((405, "only GET\n".into())),
        (Some(_), Some(path)) => Err((404, format!("no such endpoint {path:?}: try /metrics\n"))),
        _ => Err((400, format!("malformed request line {line:?}\n"))),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Two hex digits after '%', read as bytes: what follows may be any UTF-8 (a byte
        // index inside a character must not be sliced: found by the api_request fuzz target).
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percent_before_a_multibyte_character_is_taken_as_it_is() {
        assert_eq!(
            parse_request("POST /exec?container=app&command=%2\u{497}i HTTP/1.1"),
            Ok(Request::Exec {
                container: "app".into(),
                command: vec!["%2\u{497}i".into()],
                terminal: None,
            })
        );
    }

    #[test]
    fn requests() {
        assert_eq!(
            parse_request("GET /status HTTP/1.1\r\nHost: x"),
            Ok(Request::Status)
        );
        assert_eq!(
            parse_request("GET /status?watch=1 HTTP/1.1"),
            Ok(Request::WatchStatus { patches: false })
        );
        assert_eq!(
            parse_request("GET /status?watch=1&patch=1 HTTP/1.1"),
            Ok(Request::WatchStatus { patches: true })
        );
        assert_eq!(
            parse_request("POST /restart?container=my%2Dapp HTTP/1.1"),
            Ok(Request::RestartContainer("my-app".into()))
        );
        assert_eq!(
            parse_request("POST /restart HTTP/1.1"),
            Ok(Request::RestartPod)
        );
        assert_eq!(
            parse_request(
                "POST /exec?container=app&command=sh&command=-c&command=echo%20hi HTTP/1.1"
            ),
            Ok(Request::Exec {
                container: "app".into(),
                command: vec!["sh".into(), "-c".into(), "echo hi".into()],
                terminal: None,
            })
        );
        assert_eq!(
            parse_request("POST /exec?container=app&command=sh&tty=true&rows=30&cols=100 HTTP/1.1"),
            Ok(Request::Exec {
                container: "app".into(),
                command: vec!["sh".into()],
                terminal: Some((30, 100)),
            })
        );
        assert_eq!(
            parse_request("POST /exec?container=app HTTP/1.1")
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(parse_request("GET /exec HTTP/1.1").unwrap_err().0, 405);
        assert_eq!(parse_request("DELETE /stop HTTP/1.1").unwrap_err().0, 405);
        assert_eq!(parse_request("GET /nope HTTP/1.1").unwrap_err().0, 404);
        assert_eq!(parse_request("garbage").unwrap_err().0, 400);
        assert_eq!(parse_request("GET /status SPDY/3").unwrap_err().0, 400);
        let resize = |head: &str| match parse_request(head) {
            Ok(Request::Patch {
                subresource: Subresource::Resize,
                kind,
                ..
            }) => Ok(kind),
            other => Err(other.map_err(|e| e.0)),
        };
        assert_eq!(resize("PATCH /resize HTTP/1.1"), Ok(PatchKind::Strategic));
        assert_eq!(
            resize("PATCH /resize HTTP/1.1\r\ncontent-type: application/json-patch+json"),
            Ok(PatchKind::Json)
        );
        assert_eq!(
            resize("PATCH /resize HTTP/1.1\r\nContent-Type: application/merge-patch+json"),
            Ok(PatchKind::Merge)
        );
        assert_eq!(
            resize("PATCH /resize HTTP/1.1\r\nContent-Type: text/plain"),
            Err(Err(415))
        );
        assert_eq!(resize("GET /resize HTTP/1.1"), Err(Err(405)));
        assert!(matches!(
            parse_request("PATCH /status HTTP/1.1\r\nContent-Type: application/merge-patch+json"),
            Ok(Request::Patch {
                subresource: Subresource::Status,
                kind: PatchKind::Merge,
                ..
            })
        ));
    }

    #[test]
    fn a_request_is_whole_with_its_body() {
        assert!(!complete(b"GET /status HTTP/1.1\r\n"));
        assert!(complete(b"GET /status HTTP/1.1\r\n\r\n"));
        assert!(!complete(
            b"PATCH /resize HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}"
        ));
        assert!(complete(
            b"PATCH /resize HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
        ));
    }
}
