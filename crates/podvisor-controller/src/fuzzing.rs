//! What the admission fuzz target (`fuzz/`) runs, and what `cargo test` replays over its
//! corpus: the webhook's handler given any request body. It may answer 400; it must never
//! panic, and what it answers is JSON.

use std::sync::Arc;

use kube::runtime::reflector;

use crate::crd::Supervision;
use crate::metrics::Metrics;
use crate::webhook::inject::Settings;
use crate::webhook::Webhook;

/// One AdmissionReview body, answered by a webhook that knows no Supervision.
pub fn admission(data: &[u8]) {
    let (store, _writer) = reflector::store::<Supervision>();
    let webhook = Webhook {
        supervisions: store,
        settings: Settings {
            image: "podvisor:latest".into(),
            image_pull_policy: None,
        },
        metrics: Arc::new(Metrics::default()),
    };
    let (status, body) = webhook.review(data);
    if status.is_success() {
        serde_json::from_slice::<serde_json::Value>(&body).expect("an answer is JSON");
    }
}
