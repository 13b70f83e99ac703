//! The controller's Prometheus metrics (prometheus-client), served as text at `/metrics` by
//! `serve.rs`. Names follow `podvisor run`'s (`podvisor_…`), with `controller` in them.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `namespace` and `supervision` (or `result` for the webhook).
pub type Labels = Vec<(String, String)>;

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<Labels, Counter>,
    pub reconcile_errors: Family<Labels, Counter>,
    pub pod_restarts: Family<Labels, Counter>,
    pub evictions_refused: Family<Labels, Counter>,
    pub rate_limited: Family<Labels, Counter>,
    pub gave_up: Family<Labels, Counter>,
    pub webhook_requests: Family<Labels, Counter>,
    pub leader: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("podvisor_controller");
        let m = Metrics {
            registry: Registry::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            pod_restarts: Family::default(),
            evictions_refused: Family::default(),
            rate_limited: Family::default(),
            gave_up: Family::default(),
            webhook_requests: Family::default(),
            leader: Gauge::default(),
        };
        registry.register(
            "reconciles",
            "Reconciles of Supervisions",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed on the API and were retried",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "pod_restarts",
            "Whole-pod restarts made through the Eviction API",
            m.pod_restarts.clone(),
        );
        registry.register(
            "evictions_refused",
            "Evictions refused (a PodDisruptionBudget: 429), retried with backoff",
            m.evictions_refused.clone(),
        );
        registry.register(
            "rate_limited",
            "Whole-pod restarts delayed by the per-owner or per-namespace rate limit",
            m.rate_limited.clone(),
        );
        registry.register(
            "gave_up",
            "Owners given up on after maxPodRestarts",
            m.gave_up.clone(),
        );
        registry.register(
            "webhook_requests",
            "Admission requests by result (injected, skipped, ignored, invalid)",
            m.webhook_requests.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the lease",
            m.leader.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
