//! A stand-in for the API server on kube-rs' mock service (tower-test): every request the
//! client sends is logged and answered by a routing function with a body shaped as the real
//! API server's (objects, Status errors, watch event lines).

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};

/// One request as the API server would see it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub body: Value,
}

impl Seen {
    /// The request's method, path and query, and body (JSON when it parses).
    pub fn new<B>(head: &http::Request<B>, bytes: &[u8]) -> Seen {
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into()))
        };
        Seen {
            method: head.method().to_string(),
            uri: head
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            body,
        }
    }

    pub fn is(&self, method: &str, path: &str) -> bool {
        self.method == method && self.path() == path
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or_default()
    }
}

/// An answer: status code and body bytes, or a failed connection.
pub enum Reply {
    Bytes(u16, Vec<u8>),
    ConnectionError(String),
}

pub fn json_reply(code: u16, v: Value) -> Reply {
    Reply::Bytes(code, serde_json::to_vec(&v).unwrap())
}

/// A Status error as the API server writes it.
pub fn status_error(code: u16, reason: &str, message: &str) -> Reply {
    json_reply(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

pub type Route = Box<dyn FnMut(&Seen) -> Reply + Send>;

#[derive(Clone)]
pub struct FakeApi {
    pub log: Arc<Mutex<Vec<Seen>>>,
}

impl FakeApi {
    /// A client whose requests `route` answers. Must run inside a tokio runtime.
    pub fn start(mut route: Route) -> (Client, FakeApi) {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let log = Arc::new(Mutex::new(Vec::new()));
        let fake = FakeApi { log: log.clone() };
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let (head, body) = req.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let seen = Seen::new(&http::Request::from_parts(head, ()), &bytes);
                let reply = route(&seen);
                log.lock().unwrap().push(seen);
                match reply {
                    Reply::Bytes(code, bytes) => send.send_response(
                        Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(Body::from(bytes))
                            .unwrap(),
                    ),
                    Reply::ConnectionError(e) => {
                        send.send_error(std::io::Error::new(std::io::ErrorKind::TimedOut, e))
                    }
                }
            }
        });
        (Client::new(svc, "default"), fake)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    /// "METHOD path" of each request, in order (event posts included).
    pub fn lines(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|s| format!("{} {}", s.method, s.uri.split('?').next().unwrap()))
            .collect()
    }

    /// The events posted, as (regarding kind, reason, note).
    pub fn events(&self) -> Vec<(String, String, String)> {
        self.requests()
            .iter()
            .filter(|s| s.method == "POST" && s.uri.contains("/events.k8s.io/v1/"))
            .map(|s| {
                let b = &s.body;
                (
                    b["regarding"]["kind"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    b["reason"].as_str().unwrap_or_default().to_string(),
                    b["note"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    pub fn clear(&self) {
        self.log.lock().unwrap().clear();
    }
}
