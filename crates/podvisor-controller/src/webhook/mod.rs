//! The mutating admission webhook: an AdmissionReview in, an AdmissionReview out, with the
//! injection (`inject.rs`) as a JSONPatch. It never blocks a pod's creation: whatever it does
//! not handle (another kind, another operation, a body it cannot read, a pod no Supervision
//! selects) is allowed unchanged, with a warning or an annotation saying why; the webhook's
//! configuration also sets `failurePolicy: Ignore`, so the API server admits pods when the
//! webhook is down.
//!
//! Which pods come here is the MutatingWebhookConfiguration's choice (`deploy/webhook.yaml`:
//! namespaces or pods labelled `podvisor.io/inject: enabled`); which Supervision applies is
//! read from the reflector's store of Supervisions.

pub mod inject;

use std::sync::Arc;

use http::StatusCode;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use kube::runtime::reflector::Store;

use crate::crd::Supervision;
use crate::metrics::Metrics;
use inject::{Outcome, Settings};

/// Admission requests larger than this are refused unread (the API server's own limit on a
/// request body is 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

pub struct Webhook {
    pub supervisions: Store<Supervision>,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Webhook {
    /// The answer to one request body: HTTP status and JSON.
    pub fn review(&self, body: &[u8]) -> (StatusCode, Vec<u8>) {
        let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => return self.bad_request(format!("not an AdmissionReview: {e}")),
        };
        let req: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(r) => r,
            Err(_) => return self.bad_request("an AdmissionReview without a request".into()),
        };
        let response = self.respond(&req);
        let body = serde_json::to_vec(&response.into_review()).expect("a review serializes");
        (StatusCode::OK, body)
    }

    fn bad_request(&self, message: String) -> (StatusCode, Vec<u8>) {
        self.count("invalid");
        tracing::warn!("admission request refused: {message}");
        (StatusCode::BAD_REQUEST, message.into_bytes())
    }

    fn count(&self, result: &str) {
        self.metrics
            .webhook_requests
            .get_or_create(&vec![("result".to_string(), result.to_string())])
            .inc();
    }

    fn respond(&self, req: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let allow = AdmissionResponse::from(req);
        let ignore = |why: String| {
            self.count("ignored");
            tracing::info!(uid = %req.uid, "admission request allowed unchanged: {why}");
            let mut r = AdmissionResponse::from(req);
            r.warnings = Some(vec![format!("podvisor webhook: {why}")]);
            r
        };
        if !req.kind.group.is_empty() || req.kind.kind != "Pod" {
            return ignore(format!(
                "{}/{} {} is not handled (only Pods are)",
                req.kind.group, req.kind.version, req.kind.kind
            ));
        }
        if req.operation != Operation::Create {
            return ignore(format!(
                "{:?} is not handled (only CREATE is)",
                req.operation
            ));
        }
        let Some(object) = req.object.as_ref() else {
            return ignore("the request holds no object".into());
        };
        let original = serde_json::to_value(object).expect("an object serializes");
        let pod: Pod = match serde_json::from_value(original.clone()) {
            Ok(p) => p,
            Err(e) => return ignore(format!("the object is not a Pod that can be read: {e}")),
        };
        let namespace = req
            .namespace
            .clone()
            .or_else(|| pod.metadata.namespace.clone())
            .unwrap_or_else(|| "default".into());
        let sups = self.supervisions.state();
        let (mutated, outcome) = inject::inject(&pod, &namespace, &sups, &self.settings);
        let result = match &outcome {
            Outcome::Injected { .. } => "injected",
            Outcome::Skipped(_) => "skipped",
            Outcome::AlreadyInjected => "unchanged",
        };
        self.count(result);
        tracing::info!(uid = %req.uid, ?outcome, "admission");
        if outcome == Outcome::AlreadyInjected {
            return allow;
        }
        // The patch is the typed pod's change: paths exist in the object sent, and fields this
        // version of the API types does not know are left as they were.
        let before = serde_json::to_value(&pod).expect("a pod serializes");
        let after = serde_json::to_value(&mutated).expect("a pod serializes");
        let patch = json_patch::diff(&before, &after);
        match AdmissionResponse::from(req).with_patch(patch) {
            Ok(r) => r,
            Err(e) => ignore(format!("the patch could not be written: {e}")),
        }
    }
}
