//! `podvisor-controller`: the controller (leader-elected), the webhook (every replica) and the
//! metrics endpoint; `podvisor-controller crd` prints the CRD.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use podvisor_controller::crd::{crd_yaml, Supervision};
use podvisor_controller::lease::Elector;
use podvisor_controller::metrics::Metrics;
use podvisor_controller::ratelimit::Limits;
use podvisor_controller::reconcile::{self, Config, Context};
use podvisor_controller::serve;
use podvisor_controller::webhook::inject::Settings;
use podvisor_controller::webhook::Webhook;
use podvisor_core::duration::parse_duration;

#[derive(Debug, Parser)]
#[command(
    name = "podvisor-controller",
    version,
    about = "podvisor in a cluster: whole-pod restarts for Supervisions, and a webhook that puts podvisor init into opted-in pods"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Decide and report (events, status, metrics), never evict or write owners' records.
    #[arg(long)]
    dry_run: bool,
    /// Where /metrics and /healthz are served (plain HTTP).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Serve the mutating webhook (HTTPS, POST /mutate) here; off when absent.
    #[arg(long)]
    webhook_addr: Option<SocketAddr>,
    /// The webhook's certificate chain (PEM), as a TLS Secret mounts it.
    #[arg(long, default_value = "/etc/podvisor/tls/tls.crt")]
    tls_cert_file: PathBuf,
    /// The webhook's private key (PEM).
    #[arg(long, default_value = "/etc/podvisor/tls/tls.key")]
    tls_key_file: PathBuf,
    /// The image whose /podvisor the webhook's init container copies into pods.
    #[arg(long, default_value = "podvisor:latest")]
    podvisor_image: String,
    /// imagePullPolicy of that init container (IfNotPresent for a kind- or k3s-loaded image).
    #[arg(long)]
    image_pull_policy: Option<String>,
    /// The Lease that elects the one acting replica.
    #[arg(long, default_value = "podvisor-controller")]
    lease_name: String,
    /// The Lease's namespace (default: $POD_NAMESPACE, else default).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// This replica's name in the Lease (default: $POD_NAME, else the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// How long a Lease holds without renewal.
    #[arg(long, default_value = "15s", value_parser = duration)]
    lease_duration: Duration,
    /// At most one whole-pod restart per owner within this long.
    #[arg(long, default_value = "1m", value_parser = duration)]
    owner_interval: Duration,
    /// At most this many whole-pod restarts per namespace ...
    #[arg(long, default_value_t = 10)]
    namespace_max: u32,
    /// ... within this long.
    #[arg(long, default_value = "1m", value_parser = duration)]
    namespace_window: Duration,
    /// How often a Supervision is looked at again without a change.
    #[arg(long, default_value = "1m", value_parser = duration)]
    resync: Duration,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the Supervision CustomResourceDefinition (deploy/crd.yaml).
    Crd,
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Crd) = cli.command {
        print!("{}", crd_yaml());
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    // The kube client's TLS uses ring, named here rather than left to rustls to pick from its
    // crate features: in a build of the whole workspace another crate's client (oci-client's
    // reqwest) turns on aws-lc-rs too, and rustls then cannot pick on its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the Kubernetes API: {0}")]
    Client(#[from] kube::Error),
    #[error("{0}")]
    Io(String),
    #[error("lost the lease {0}: another replica may act now; exiting so that this one restarts")]
    LostLease(String),
}

impl Error {
    fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
}

async fn run(cli: Cli) -> Result<(), Error> {
    let metrics = Arc::new(Metrics::default());
    let tls = match cli.webhook_addr {
        Some(_) => Some(
            serve::tls_config(&cli.tls_cert_file, &cli.tls_key_file)
                .map_err(|e| Error::Usage(format!("--tls-cert-file / --tls-key-file: {e}")))?,
        ),
        None => None,
    };
    let client = Client::try_default().await?;
    let listener = tokio::net::TcpListener::bind(cli.metrics_addr)
        .await
        .map_err(|e| Error::Io(format!("--metrics-addr {}: {e}", cli.metrics_addr)))?;
    tokio::spawn(serve::serve_metrics(listener, metrics.clone()));
    if let (Some(addr), Some(tls)) = (cli.webhook_addr, tls) {
        start_webhook(&cli, addr, tls, &client, &metrics).await?;
    }
    let (identity, renew) = lead(&cli, &client, &metrics).await;
    let config = Config {
        dry_run: cli.dry_run,
        limits: Limits {
            owner_interval: cli.owner_interval,
            namespace_max: cli.namespace_max,
            namespace_window: cli.namespace_window,
        },
        resync: cli.resync,
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics.clone(),
        config,
        Arc::new(jiff::Timestamp::now),
        Some(identity),
    ));
    tokio::select! {
        () = control(client, ctx) => Ok(()),
        () = renew => Err(Error::LostLease(cli.lease_name)),
    }
}

/// The webhook, on every replica, leader or not: served once the Supervisions are read (a
/// pod admitted before would be skipped for want of them). Until then the port refuses,
/// and failurePolicy Ignore admits.
async fn start_webhook(
    cli: &Cli,
    addr: std::net::SocketAddr,
    tls: rustls::ServerConfig,
    client: &Client,
    metrics: &Arc<Metrics>,
) -> Result<(), Error> {
    let (store, writer) = reflector::store::<Supervision>();
    let api: Api<Supervision> = Api::all(client.clone());
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    tokio::spawn(stream.for_each(|_| async {}));
    let ready = store.clone();
    let webhook = Arc::new(Webhook {
        supervisions: store,
        settings: Settings {
            image: cli.podvisor_image.clone(),
            image_pull_policy: cli.image_pull_policy.clone(),
        },
        metrics: metrics.clone(),
    });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Io(format!("--webhook-addr {addr}: {e}")))?;
    tokio::spawn(async move {
        if ready.wait_until_ready().await.is_ok() {
            tracing::info!(%addr, "webhook serving");
            serve::serve_webhook(listener, tls, webhook).await;
        }
    });
    Ok(())
}

/// Waits until this replica holds the lease; its identity, and what keeps renewing the
/// lease (it ends when the lease is lost).
async fn lead(
    cli: &Cli,
    client: &Client,
    metrics: &Metrics,
) -> (String, impl std::future::Future<Output = ()>) {
    let identity = cli.identity.clone().unwrap_or_else(hostname);
    let elector = Elector {
        api: Api::<Lease>::namespaced(client.clone(), &cli.lease_namespace),
        name: cli.lease_name.clone(),
        identity: identity.clone(),
        duration: cli.lease_duration,
    };
    let retry = (cli.lease_duration / 3).max(Duration::from_secs(1));
    loop {
        match elector.try_lead(jiff::Timestamp::now()).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!("lease {}: {e}", cli.lease_name),
        }
        tokio::time::sleep(retry).await;
    }
    tracing::info!(%identity, lease = %cli.lease_name, "leading");
    metrics.leader.set(1);
    let limit = cli.lease_duration;
    let renew = async move {
        let mut last = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(retry).await;
            match elector.try_lead(jiff::Timestamp::now()).await {
                Ok(true) => last = tokio::time::Instant::now(),
                Ok(false) => return,
                Err(e) => tracing::warn!("renewing lease: {e}"),
            }
            if last.elapsed() >= limit {
                return;
            }
        }
    };
    (identity, renew)
}

/// The controller: each Supervision reconciled, and again when a pod it selects changes.
async fn control(client: Client, ctx: Arc<Context>) {
    let controller = Controller::new(
        Api::<Supervision>::all(client.clone()),
        watcher::Config::default(),
    );
    let sups = controller.store();
    controller
        .watches(
            Api::<Pod>::all(client),
            watcher::Config::default(),
            move |pod: Pod| {
                // A pod change looks again at each Supervision of its namespace that selects it.
                let ns = pod.namespace();
                sups.state()
                    .into_iter()
                    .filter(|s| s.namespace() == ns)
                    .filter(|s| s.spec.selects(pod.labels()))
                    .map(|s| ObjectRef::from_obj(&*s))
                    .collect::<Vec<_>>()
            },
        )
        .shutdown_on_signal()
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!("controller: {e}");
            }
        })
        .await
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "podvisor-controller".into())
}
