//! The webhook as a real HTTPS server (certificate files as a Secret mounts them), fed
//! AdmissionReview requests as the API server sends them; its JSONPatch is applied to the pod
//! sent, the result read as a k8s-openapi Pod and checked by `podvisor validate`, and the
//! Supervision document it carries read by the real `podvisor init`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::AdmissionReview;
use kube::core::DynamicObject;
use kube::runtime::reflector;
use kube::runtime::watcher;
use kube::ResourceExt;
use podvisor_controller::crd::Supervision;
use podvisor_controller::metrics::Metrics;
use podvisor_controller::serve;
use podvisor_controller::webhook::inject::{self, Settings};
use podvisor_controller::webhook::Webhook;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("podvisor-webhook-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The full podvisor build, which `cargo test --workspace` builds beside this test.
fn podvisor() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("podvisor");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p podvisor), or run cargo test --workspace",
        bin.display()
    );
    bin
}

pub struct Server {
    pub addr: std::net::SocketAddr,
    pub ca: CertificateDer<'static>,
    /// The name the client checks the certificate for.
    pub name: String,
    pub metrics: Arc<Metrics>,
    pub _dir: TempDir,
}

/// A CA and a server certificate signed by it for localhost and the webhook service's name:
/// `ca.crt`, `tls.crt` and `tls.key` written in `dir` (as `scripts/webhook-certs` names them),
/// the CA returned.
pub fn rcgen_certs(dir: &Path) -> CertificateDer<'static> {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec![
        "localhost".to_string(),
        "podvisor-webhook.podvisor-system.svc".to_string(),
    ])
    .unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    ca.der().clone()
}

/// The webhook serving with certificates from `rcgen_certs`, with `sups` in its store.
async fn start(tag: &str, sups: Vec<Supervision>) -> Server {
    let dir = TempDir::new(tag);
    let ca = rcgen_certs(&dir.0);
    let (cert_path, key_path) = (dir.0.join("tls.crt"), dir.0.join("tls.key"));
    serve_with(dir, &cert_path, &key_path, ca, "localhost", sups).await
}

/// The webhook serving with the certificate files given, in `dir`.
async fn serve_with(
    dir: TempDir,
    cert_path: &Path,
    key_path: &Path,
    ca: CertificateDer<'static>,
    name: &str,
    sups: Vec<Supervision>,
) -> Server {
    let tls = serve::tls_config(cert_path, key_path).unwrap();
    let (store, mut writer) = reflector::store::<Supervision>();
    for s in sups {
        writer.apply_watcher_event(&watcher::Event::Apply(s));
    }
    let metrics = Arc::new(Metrics::default());
    let webhook = Arc::new(Webhook {
        supervisions: store,
        settings: Settings {
            image: "podvisor:latest".into(),
            image_pull_policy: Some("IfNotPresent".into()),
        },
        metrics: metrics.clone(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve::serve_webhook(listener, tls, webhook));
    Server {
        addr,
        ca,
        name: name.to_string(),
        metrics,
        _dir: dir,
    }
}

/// The webhook's certificates as `scripts/webhook-certs` makes them (with openssl), in `dir`.
fn webhook_certs(dir: &Path) {
    let out = Command::new(crate::repo().join("scripts/webhook-certs"))
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TLS connection to the server, its certificate verified against the CA for its name.
async fn connect(server: &Server) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server.ca.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    connector
        .connect(ServerName::try_from(server.name.clone()).unwrap(), tcp)
        .await
        .unwrap()
}

/// POSTs `body` to /mutate over TLS.
pub async fn post(server: &Server, body: Vec<u8>) -> (u16, Vec<u8>) {
    let tls = connect(server).await;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post("/mutate?timeout=10s")
        .header("host", "podvisor-webhook.podvisor-system.svc:443")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, bytes.to_vec())
}

fn supervision(name: &str, spec: Value) -> Supervision {
    serde_json::from_value(json!({
        "apiVersion": "podvisor.io/v1alpha1", "kind": "Supervision",
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
        "spec": spec,
    }))
    .unwrap()
}

fn staged() -> Supervision {
    supervision(
        "web",
        json!({
            "selector": {"matchLabels": {"app": "web"}},
            "stagedInstrumentation": {
                "containers": ["app", "web"],
                "env": {"LD_PRELOAD": "/opt/agent/libagent.so"},
                "debugEnv": {"AGENT_LOG_LEVEL": "debug"},
                "debugAfterRestarts": 2, "disableAfterRestarts": 4,
            },
            "podRestart": {"afterContainerRestarts": 5, "within": "10m", "maxPodRestarts": 3},
        }),
    )
}

/// A pod as the ReplicaSet controller creates it (generateName, no name yet).
pub fn pod(labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "web-7d9f8c6b5d-", "namespace": "shop", "labels": labels,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8c6b5d",
                                          "uid": "5b0e9c1a-3f7d-4c2e-9a51-0d7c2b8e4f10", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {
            "containers": [
                {"name": "app", "image": "shop/web:1.4", "command": ["/bin/sh", "-c"], "args": ["exec /app/server"],
                 "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/web"}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"},
                {"name": "web", "image": "shop/proxy:2",
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
            ],
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "schedulerName": "default-scheduler",
            "futureField": {"kept": true}
        }
    })
}

/// An AdmissionReview as the API server sends it for a pod CREATE.
pub fn review(kind: (&str, &str, &str), operation: &str, object: Value) -> Vec<u8> {
    let (group, version, k) = kind;
    let resource = format!("{}s", k.to_lowercase());
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": version, "kind": k},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": k},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "namespace": "shop", "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                         "uid": "0f1c2d3e-aaaa-4bbb-8ccc-0123456789ab",
                         "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    }))
    .unwrap()
}

/// The response of a review: allowed, its patch applied to `object` (when there is one), and
/// its warnings.
pub fn answer(bytes: &[u8], object: &Value) -> (bool, Option<Value>, Vec<String>) {
    let raw: Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(raw["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(raw["kind"], "AdmissionReview");
    assert_eq!(
        raw["response"]["uid"],
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(bytes).unwrap();
    let resp = review.response.unwrap();
    let patched = resp.patch.as_ref().map(|p| {
        assert_eq!(raw["response"]["patchType"], "JSONPatch");
        let patch: json_patch::Patch = serde_json::from_slice(p).unwrap();
        let mut doc = object.clone();
        json_patch::patch(&mut doc, &patch).unwrap();
        doc
    });
    (resp.allowed, patched, resp.warnings.unwrap_or_default())
}

/// Reads JSON as a k8s-openapi Pod, failing on a field the type does not know.
fn strict_pod(v: &Value) -> Pod {
    let mut unknown = Vec::new();
    let text = v.to_string();
    let mut de = serde_json::Deserializer::from_str(&text);
    let pod: Pod = serde_ignored::deserialize(&mut de, |path| unknown.push(path.to_string()))
        .unwrap_or_else(|e| panic!("not a Pod: {e}"));
    // (k8s-openapi deserializes Option fields through a visitor: serde_ignored writes `?`.)
    assert_eq!(
        unknown,
        ["spec.?.futureField"],
        "fields a Pod does not have"
    );
    pod
}

fn validate(dir: &Path, pod: &Value) {
    let file = dir.join("pod.json");
    std::fs::write(&file, serde_json::to_vec_pretty(pod).unwrap()).unwrap();
    let out = Command::new(podvisor())
        .arg("validate")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "podvisor validate refused the injected pod:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opted_in_pod_gets_podvisor_init_and_still_validates() {
    let server = start("inject", vec![staged()]).await;
    let mut object = pod(json!({"app": "web", "podvisor.io/inject": "enabled"}));
    let (code, body) = post(&server, review(("", "v1", "Pod"), "CREATE", object.clone())).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let (allowed, patched, _) = answer(&body, &object);
    assert!(allowed);
    let patched = patched.expect("a patch");
    // A field this version of the API types does not know is left as it was.
    assert_eq!(patched["spec"]["futureField"], json!({"kept": true}));
    let pod = strict_pod(&patched);
    let spec = pod.spec.as_ref().unwrap();

    let install = spec.init_containers.as_ref().unwrap().last().unwrap();
    assert_eq!(install.name, inject::INIT_CONTAINER);
    assert_eq!(install.image.as_deref(), Some("podvisor:latest"));
    assert_eq!(
        install.command.as_ref().unwrap(),
        &["/podvisor", "copy-self", "/podvisor/bin/podvisor"]
    );
    let app = &spec.containers[0];
    assert_eq!(
        app.command.as_ref().unwrap(),
        &[
            "/podvisor/bin/podvisor",
            "init",
            "--supervision",
            "/podvisor/supervision/supervision.yaml",
            "--state-dir",
            "/podvisor/state/app",
            "--container",
            "app",
            "--",
            "/bin/sh",
            "-c"
        ]
    );
    assert_eq!(app.args.as_ref().unwrap(), &["exec /app/server"]);
    let mounts: Vec<(&str, &str, Option<&str>)> = app
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                m.mount_path.as_str(),
                m.sub_path.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        mounts,
        [
            ("cache", "/var/cache/web", None),
            ("podvisor-bin", "/podvisor/bin", None),
            ("podvisor-state", "/podvisor/state", None),
            ("podvisor-supervision", "/podvisor/supervision", None),
        ]
    );
    // The container without a command is left alone, and the annotation says why.
    assert_eq!(
        spec.containers[1],
        strict_pod_of(&object).spec.unwrap().containers[1]
    );
    let ann = pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann[inject::INJECTED_ANNOTATION], "web");
    assert!(
        ann[inject::SKIPPED_ANNOTATION]
            .starts_with("web: no command (the image's entrypoint is unknown to a webhook"),
        "{}",
        ann[inject::SKIPPED_ANNOTATION]
    );
    let volumes: Vec<&str> = spec
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(
        volumes,
        [
            "cache",
            "podvisor-bin",
            "podvisor-state",
            "podvisor-supervision"
        ]
    );

    // podvisor itself accepts the result, as k8s-openapi reads it, once every container has
    // a command (podvisor runs commands on the host: it has no image to take one from).
    let dir = TempDir::new("inject-files");
    let mut both = self::pod(json!({"app": "web"}));
    both["spec"]["containers"][1]["command"] = json!(["/bin/sleep", "3600"]);
    let (_, body) = post(&server, review(("", "v1", "Pod"), "CREATE", both.clone())).await;
    let (_, injected, _) = answer(&body, &both);
    let mut typed = strict_pod(&injected.unwrap());
    assert_eq!(typed.annotations().get(inject::SKIPPED_ANNOTATION), None);
    typed.metadata.name = Some("web-7d9f8c6b5d-k8w2p".into());
    validate(&dir.0, &serde_json::to_value(&typed).unwrap());

    // The document the downwardAPI volume will hold is one `podvisor init` reads: its stage
    // env reaches the command.
    let doc = dir.0.join("supervision.yaml");
    std::fs::write(&doc, &ann[inject::SUPERVISION_ANNOTATION]).unwrap();
    // The state dir is made by init (the emptyDir holds one per container).
    let state = dir.0.join("state/app");
    let lock = dir.0.join("lock");
    std::fs::create_dir_all(&lock).unwrap();
    let out = Command::new(podvisor())
        .args(["init", "--supervision"])
        .arg(&doc)
        .arg("--state-dir")
        .arg(&state)
        .arg("--lock-dir")
        .arg(&lock)
        .args([
            "--container",
            "app",
            "--",
            "/bin/sh",
            "-c",
            "echo $PODVISOR_INSTR_STAGE $LD_PRELOAD ${AGENT_LOG_LEVEL:-none}",
        ])
        .env_remove("PODVISOR_INSTR_STATE_LOCK")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Nominal /opt/agent/libagent.so none\n"
    );

    // The same pod again (reinvocation, or a second matching webhook): unchanged.
    object = patched;
    let (code, body) = post(&server, review(("", "v1", "Pod"), "CREATE", object.clone())).await;
    assert_eq!(code, 200);
    let (allowed, patched, _) = answer(&body, &object);
    assert!(allowed);
    assert!(patched.is_none(), "a second injection: {patched:?}");
    let text = server.metrics.encode();
    assert!(
        text.contains("podvisor_controller_webhook_requests_total{result=\"injected\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("podvisor_controller_webhook_requests_total{result=\"unchanged\"} 1"),
        "{text}"
    );
}

fn strict_pod_of(v: &Value) -> Pod {
    serde_json::from_value(v.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_rules_pass_through_the_injection_unchanged() {
    // KEP-5307 and KEP-5532 fields on an init container and a main container: the patch
    // touches neither, and podvisor accepts the injected pod.
    let server = start("rules", vec![staged()]).await;
    let mut object = pod(json!({"app": "web", "podvisor.io/inject": "enabled"}));
    let rules = json!([
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [88]}},
        {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0, 1]}},
    ]);
    let init_rules =
        json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]);
    object["spec"]["containers"][0]["restartPolicy"] = json!("Never");
    object["spec"]["containers"][0]["restartPolicyRules"] = rules.clone();
    object["spec"]["containers"][1]["command"] = json!(["/bin/sleep", "3600"]);
    object["spec"]["initContainers"] = json!([{
        "name": "fetch", "image": "shop/fetch:1", "command": ["/fetch"],
        "restartPolicy": "Never", "restartPolicyRules": init_rules.clone(),
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }]);
    let (code, body) = post(&server, review(("", "v1", "Pod"), "CREATE", object.clone())).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let (allowed, patched, _) = answer(&body, &object);
    assert!(allowed);
    let patched = patched.expect("a patch");
    let app = &patched["spec"]["containers"][0];
    assert_eq!(app["restartPolicy"], "Never");
    assert_eq!(app["restartPolicyRules"], rules);
    let fetch = &patched["spec"]["initContainers"][0];
    assert_eq!(fetch["name"], "fetch");
    assert_eq!(fetch["restartPolicy"], "Never");
    assert_eq!(fetch["restartPolicyRules"], init_rules);
    let dir = TempDir::new("rules-files");
    let mut typed = strict_pod(&patched);
    typed.metadata.name = Some("web-7d9f8c6b5d-k8w2p".into());
    validate(&dir.0, &serde_json::to_value(&typed).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guaranteed_pod_with_resize_policies_stays_guaranteed_and_resizable() {
    // KEP-1287: resizePolicy passes through unchanged, and the injected init container asks
    // for requests equal to limits, so the pod's QoS class (which a resize may not change)
    // stays Guaranteed.
    let server = start("resize", vec![staged()]).await;
    let mut object = pod(json!({"app": "web", "podvisor.io/inject": "enabled"}));
    let guaranteed = json!({"limits": {"cpu": "500m", "memory": "256Mi"}});
    let policy = json!([
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
    ]);
    for c in object["spec"]["containers"].as_array_mut().unwrap() {
        c["resources"] = guaranteed.clone();
        c["resizePolicy"] = policy.clone();
        c["command"] = json!(["/bin/sleep", "3600"]);
    }
    let typed = |v: &Value| -> k8s_openapi::api::core::v1::PodSpec {
        serde_json::from_value(v["spec"].clone()).unwrap()
    };
    use podvisor_core::spec::resize::{qos_class, QosClass};
    assert_eq!(qos_class(&typed(&object)), QosClass::Guaranteed);
    let (code, body) = post(&server, review(("", "v1", "Pod"), "CREATE", object.clone())).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let (allowed, patched, _) = answer(&body, &object);
    assert!(allowed);
    let patched = patched.expect("a patch");
    assert_eq!(patched["spec"]["containers"][0]["resizePolicy"], policy);
    assert_eq!(qos_class(&typed(&patched)), QosClass::Guaranteed);
    let dir = TempDir::new("resize-files");
    let mut strict = strict_pod(&patched);
    strict.metadata.name = Some("web-7d9f8c6b5d-r2x9q".into());
    validate(&dir.0, &serde_json::to_value(&strict).unwrap());
    // A Burstable pod's init container asks for nothing, as before.
    let object = pod(json!({"app": "web", "podvisor.io/inject": "enabled"}));
    let (_, body) = post(&server, review(("", "v1", "Pod"), "CREATE", object.clone())).await;
    let patched = answer(&body, &object).1.expect("a patch");
    let init = &patched["spec"]["initContainers"][0];
    assert!(init["resources"].is_null(), "{init}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_no_supervision_selects_is_admitted_with_the_reason() {
    let server = start("none", vec![staged()]).await;
    let object = pod(json!({"app": "shop-db", "podvisor.io/inject": "enabled"}));
    let (code, body) = post(&server, review(("", "v1", "Pod"), "CREATE", object.clone())).await;
    assert_eq!(code, 200);
    let (allowed, patched, _) = answer(&body, &object);
    assert!(allowed);
    let patched = patched.expect("the annotation patch");
    assert_eq!(
        patched["metadata"]["annotations"][inject::SKIPPED_ANNOTATION],
        "no usable Supervision with stagedInstrumentation in namespace shop selects this pod"
    );
    assert_eq!(patched["spec"], object["spec"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_kinds_operations_and_malformed_bodies_never_block() {
    let server = start("bad", vec![staged()]).await;
    // Another kind: allowed, unchanged, with a warning.
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}, "spec": {}});
    let (code, body) = post(
        &server,
        review(("apps", "v1", "Deployment"), "CREATE", deploy.clone()),
    )
    .await;
    assert_eq!(code, 200);
    let (allowed, patched, warnings) = answer(&body, &deploy);
    assert!(allowed && patched.is_none());
    assert_eq!(
        warnings,
        ["podvisor webhook: apps/v1 Deployment is not handled (only Pods are)"]
    );
    // An UPDATE of a pod: allowed, unchanged.
    let object = pod(json!({"app": "web"}));
    let (_, body) = post(&server, review(("", "v1", "Pod"), "UPDATE", object.clone())).await;
    let (allowed, patched, warnings) = answer(&body, &object);
    assert!(allowed && patched.is_none());
    assert!(
        warnings[0].contains("Update is not handled"),
        "{warnings:?}"
    );
    // A Pod object that is not a pod: allowed, unchanged.
    let broken = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": "app"}});
    let (_, body) = post(&server, review(("", "v1", "Pod"), "CREATE", broken.clone())).await;
    let (allowed, patched, warnings) = answer(&body, &broken);
    assert!(allowed && patched.is_none());
    assert!(
        warnings[0].starts_with("podvisor webhook: the object is not a Pod that can be read"),
        "{warnings:?}"
    );
    // Not JSON, or no request: 400, which the API server's failurePolicy Ignore admits.
    let (code, body) = post(&server, b"{not json".to_vec()).await;
    assert_eq!(code, 400);
    assert!(String::from_utf8_lossy(&body).starts_with("not an AdmissionReview"));
    let (code, _) = post(
        &server,
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
    )
    .await;
    assert_eq!(code, 400);
    let text = server.metrics.encode();
    assert!(
        text.contains("podvisor_controller_webhook_requests_total{result=\"invalid\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("podvisor_controller_webhook_requests_total{result=\"ignored\"} 3"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificates_of_scripts_webhook_certs_serve_the_services_name() {
    if Command::new("openssl").arg("version").output().is_err() {
        crate::skip(
            "openssl not installed (scripts/webhook-certs uses it; apt-get install openssl)",
        );
        return;
    }
    let dir = TempDir::new("script");
    webhook_certs(&dir.0);
    let ca = CertificateDer::from_pem_file(dir.0.join("ca.crt")).unwrap();
    let (cert, key) = (dir.0.join("tls.crt"), dir.0.join("tls.key"));
    let server = serve_with(
        dir,
        &cert,
        &key,
        ca,
        "podvisor-webhook.podvisor-system.svc",
        vec![staged()],
    )
    .await;
    let object = pod(json!({"app": "web"}));
    let (code, body) = post(&server, review(("", "v1", "Pod"), "CREATE", object.clone())).await;
    assert_eq!(code, 200);
    assert!(answer(&body, &object).1.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_that_cannot_be_used_are_named() {
    let dir = TempDir::new("tls");
    let cert = dir.0.join("tls.crt");
    let key = dir.0.join("tls.key");
    let e = serve::tls_config(&cert, &key).unwrap_err();
    assert!(
        e.to_string().starts_with(&cert.display().to_string()),
        "{e}"
    );
    std::fs::write(&cert, "not a certificate\n").unwrap();
    let e = serve::tls_config(&cert, &key).unwrap_err();
    assert!(e.to_string().contains("no CERTIFICATE"), "{e}");
}

/// The certificate the server presents on a new connection.
async fn presented(server: &Server) -> Vec<u8> {
    let tls = connect(server).await;
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let dir = TempDir::new("rotate");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let (cert_path, key_path) = (dir.0.join("tls.crt"), dir.0.join("tls.key"));
    // As the kubelet updates a mounted Secret: new files renamed into place.
    let install = |cert: &rcgen::Certificate, key: &rcgen::KeyPair| {
        std::fs::write(dir.0.join("tls.crt.new"), cert.pem()).unwrap();
        std::fs::write(dir.0.join("tls.key.new"), key.serialize_pem()).unwrap();
        std::fs::rename(dir.0.join("tls.key.new"), &key_path).unwrap();
        std::fs::rename(dir.0.join("tls.crt.new"), &cert_path).unwrap();
    };
    let issue = || {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert, key)
    };
    let (first, first_key) = issue();
    install(&first, &first_key);
    let (cp, kp) = (cert_path.clone(), key_path.clone());
    let server = serve_with(
        TempDir::new("rotate-unused"),
        &cp,
        &kp,
        ca.der().clone(),
        "localhost",
        vec![],
    )
    .await;
    assert_eq!(presented(&server).await, first.der().to_vec());

    let (second, second_key) = issue();
    install(&second, &second_key);
    assert_eq!(
        presented(&server).await,
        second.der().to_vec(),
        "the rotated certificate"
    );

    // A rotation that cannot be used keeps the last good one.
    std::fs::write(&cert_path, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    assert_eq!(presented(&server).await, second.der().to_vec());
    drop(dir);
}
