//! The `podvisor-controller` binary itself against a stand-in API server over real HTTP (a
//! kubeconfig points it there): it takes the Lease, lists and watches Supervisions and pods,
//! reconciles, evicts the crash-looping pod, serves its metrics, and ends on SIGTERM.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use crate::api::{route, web_supervision, World};
use crate::fakeapi::{json_reply, status_error, Reply, Seen};
use crate::fixture;
use crate::webhook::{self, Server, TempDir};
use podvisor_controller::metrics::Metrics;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

/// The controller, killed if the test ends first.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The crash-looping pod of the fixtures, its restarts moved to just now.
fn crash_looping_now() -> Pod {
    let mut pod = fixture("replicaset-crashloop.json");
    let now = jiff::Timestamp::now();
    let ago = |s: i64| Time(now - jiff::SignedDuration::from_secs(s));
    let status = pod.status.as_mut().unwrap();
    status.start_time = Some(ago(300));
    let cs = &mut status.container_statuses.as_mut().unwrap()[0];
    cs.last_state
        .as_mut()
        .unwrap()
        .terminated
        .as_mut()
        .unwrap()
        .finished_at = Some(ago(20));
    pod
}

/// Staged instrumentation only, for the webhook (no podRestart: the controller only reports).
fn agent_supervision() -> Value {
    json!({"apiVersion": "podvisor.io/v1alpha1", "kind": "Supervision",
           "metadata": {"name": "agent", "namespace": "shop", "uid": "uid-agent", "generation": 1, "resourceVersion": "901"},
           "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "stagedInstrumentation": {"env": {"AGENT": "1"}}}})
}

/// Serves the stand-in API on `listener`: the Lease, the cluster-wide lists and watches,
/// and for everything else the routes of `api.rs`.
async fn serve(
    listener: tokio::net::TcpListener,
    world: Arc<Mutex<World>>,
    log: Arc<Mutex<Vec<Seen>>>,
) {
    let inner = Arc::new(Mutex::new(route(world.clone())));
    let lease: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    loop {
        let (tcp, _) = listener.accept().await.unwrap();
        let (inner, lease, log, world) = (inner.clone(), lease.clone(), log.clone(), world.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req: hyper::Request<Incoming>| {
                let (inner, lease, log, world) =
                    (inner.clone(), lease.clone(), log.clone(), world.clone());
                async move {
                    let (head, body) = req.into_parts();
                    let bytes = body.collect().await.unwrap().to_bytes();
                    let seen = Seen::new(&hyper::Request::from_parts(head, ()), &bytes);
                    log.lock().unwrap().push(seen.clone());
                    let reply = if seen.uri.contains("watch=true") {
                        // A watch that sends nothing for a while, then ends (it is started again).
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        Reply::Bytes(200, Vec::new())
                    } else {
                        answer(&seen, &lease, &world, &inner)
                    };
                    let (code, bytes) = match reply {
                        Reply::Bytes(c, b) => (c, b),
                        Reply::ConnectionError(e) => (500, e.into_bytes()),
                    };
                    Ok::<_, std::convert::Infallible>(
                        hyper::Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(bytes)))
                            .unwrap(),
                    )
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                .await;
        });
    }
}

type Inner = Mutex<Box<dyn FnMut(&Seen) -> Reply + Send>>;

fn answer(s: &Seen, lease: &Mutex<Option<Value>>, world: &Mutex<World>, inner: &Inner) -> Reply {
    let named = format!("{LEASES}/podvisor-controller");
    if s.is("GET", &named) {
        return match lease.lock().unwrap().clone() {
            Some(v) => json_reply(200, v),
            None => status_error(
                404,
                "NotFound",
                "leases.coordination.k8s.io \"podvisor-controller\" not found",
            ),
        };
    }
    if s.is("POST", LEASES) || s.is("PUT", &named) {
        let mut v = s.body.clone();
        v["metadata"]["resourceVersion"] = json!("7");
        *lease.lock().unwrap() = Some(v.clone());
        return json_reply(if s.method == "POST" { 201 } else { 200 }, v);
    }
    if s.is("GET", "/apis/podvisor.io/v1alpha1/supervisions") {
        return json_reply(
            200,
            json!({"apiVersion": "podvisor.io/v1alpha1", "kind": "SupervisionList",
            "metadata": {"resourceVersion": "900"}, "items": [web_supervision(), agent_supervision()]}),
        );
    }
    if s.is("GET", "/api/v1/pods") {
        let pods = world.lock().unwrap().pods.clone();
        return json_reply(
            200,
            json!({"apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "48300"}, "items": pods}),
        );
    }
    (inner.lock().unwrap())(s)
}

#[test]
fn the_binary_leads_watches_and_restarts_a_crash_looping_pod() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let world = World::new(vec![crash_looping_now()]);
    let log = Arc::new(Mutex::new(Vec::new()));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let api = listener.local_addr().unwrap();
    rt.spawn(serve(listener, world, log.clone()));

    // Removed on drop, also when the test fails.
    let dir = TempDir::new("binary");
    let kubeconfig = dir.0.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://{api}\"}}\n\
             users:\n- name: fake\n  user: {{token: test}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake, namespace: default}}\n\
             current-context: fake\n"
        ),
    )
    .unwrap();
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let webhook_port = free();
    let certs = TempDir::new("binary-certs");
    webhook::rcgen_certs(&certs.0);
    let mut controller = Controller(
        Command::new(env!("CARGO_BIN_EXE_podvisor-controller"))
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
                "--identity",
                "test-0",
            ])
            .arg(format!("--webhook-addr=127.0.0.1:{webhook_port}"))
            .arg("--tls-cert-file")
            .arg(certs.0.join("tls.crt"))
            .arg("--tls-key-file")
            .arg(certs.0.join("tls.key"))
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info")
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.0.join("controller.out")).unwrap())
            .stderr(std::fs::File::create(dir.0.join("controller.log")).unwrap())
            .spawn()
            .unwrap(),
    );

    let eviction = "/api/v1/namespaces/shop/pods/web-7d9f8c6b5d-k8w2p/eviction";
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log.lock().unwrap().iter().any(|s| s.is("POST", eviction)) {
        assert!(
            Instant::now() < deadline,
            "no eviction: {:?}",
            log.lock()
                .unwrap()
                .iter()
                .map(|s| format!("{} {}", s.method, s.uri))
                .collect::<Vec<_>>()
        );
        assert!(
            controller.0.try_wait().unwrap().is_none(),
            "the controller exited: {}{}",
            std::fs::read_to_string(dir.0.join("controller.out")).unwrap_or_default(),
            std::fs::read_to_string(dir.0.join("controller.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let lines: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s.method, s.path()))
        .collect();
    // The Lease first: nothing is reconciled before this replica leads.
    let leased = lines
        .iter()
        .position(|l| l == &format!("POST {LEASES}"))
        .expect("the Lease created");
    let listed = lines
        .iter()
        .position(|l| l.starts_with("GET /api/v1/namespaces/shop/pods"))
        .unwrap();
    assert!(leased < listed, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("PATCH /apis/apps/v1/namespaces/shop/replicasets/")),
        "{lines:?}"
    );

    let metrics = rt.block_on(async {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let text = scrape(metrics_port).await;
            if text.contains("podvisor_controller_pod_restarts_total{") || Instant::now() > end {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert!(
        metrics.contains(
            "podvisor_controller_pod_restarts_total{namespace=\"shop\",supervision=\"web\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("podvisor_controller_leader 1"),
        "{metrics}"
    );

    // The webhook serves with the Supervisions it read from the API: the pod is injected.
    let server = Server {
        addr: ([127, 0, 0, 1], webhook_port).into(),
        ca: CertificateDer::from_pem_file(certs.0.join("ca.crt")).unwrap(),
        name: "podvisor-webhook.podvisor-system.svc".into(),
        metrics: Arc::new(Metrics::default()),
        _dir: TempDir::new("binary-unused"),
    };
    let object = webhook::pod(json!({"app": "web"}));
    let (code, body) = rt.block_on(webhook::post(
        &server,
        webhook::review(("", "v1", "Pod"), "CREATE", object.clone()),
    ));
    assert_eq!(code, 200);
    let patched = webhook::answer(&body, &object).1.expect("a patch");
    assert_eq!(
        patched["metadata"]["annotations"]["podvisor.io/injected"], "agent",
        "{}",
        patched["metadata"]
    );

    // SIGTERM ends it cleanly.
    let pid = controller.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let end = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = controller.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "still running 20 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

async fn scrape(port: u16) -> String {
    let Ok(tcp) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return String::new();
    };
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("/metrics")
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned()
}
