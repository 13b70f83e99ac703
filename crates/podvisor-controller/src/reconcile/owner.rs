//! The pods' owners and their records of whole-pod restarts (`decide::History`, in an
//! annotation): read once per reconcile, written conditional on the resourceVersion read.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::Error;
use crate::decide::{History, HISTORY_ANNOTATION};

/// The kinds whose pods the controller refreshes: the built-in controllers, which recreate an
/// evicted pod, and which deploy/'s ClusterRole lets it read and annotate.
pub(crate) const OWNER_KINDS: [(&str, &str); 5] = [
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("batch/v1", "Job"),
    ("v1", "ReplicationController"),
];

/// What reading a pod's owner gave.
pub(crate) enum OwnerRead {
    Found(Box<Owner>),
    /// It no longer exists: its pods are being deleted with it.
    Gone,
    /// It cannot be read or written (a kind the controller does not handle, or the API refused):
    /// its pods are not refreshed, and the reason is reported.
    Refused(String),
}

impl OwnerRead {
    pub(crate) fn found(&self) -> Option<&Owner> {
        match self {
            OwnerRead::Found(o) => Some(o),
            _ => None,
        }
    }
}

/// One owner, read once per reconcile.
pub(crate) struct Owner {
    pub(crate) api: Api<DynamicObject>,
    pub(crate) object: DynamicObject,
    pub(crate) history: Result<History, String>,
}

/// The owner's API (from its reference: group, version, kind; the plural as the built-in
/// controllers' kinds form it), the object, and its record. Only the API failing is an error.
pub(crate) async fn read_owner(
    client: &Client,
    ns: &str,
    o: &OwnerReference,
) -> Result<OwnerRead, Error> {
    if !OWNER_KINDS.contains(&(o.api_version.as_str(), o.kind.as_str())) {
        return Ok(OwnerRead::Refused(format!(
            "its owner {} {} ({}) is not a kind podvisor-controller refreshes pods of (ReplicaSet, StatefulSet, DaemonSet, Job, ReplicationController)",
            o.kind, o.name, o.api_version
        )));
    }
    let (group, version) = match o.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", o.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &o.kind);
    let plural = format!("{}s", o.kind.to_ascii_lowercase());
    let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let object = match api.get(&o.name).await {
        Ok(object) => object,
        Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(OwnerRead::Gone),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            return Ok(OwnerRead::Refused(format!(
                "its owner {} {} cannot be read ({} {}: {})",
                o.kind, o.name, s.code, s.reason, s.message
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let history =
        History::from_annotations(object.metadata.annotations.as_ref()).map_err(|e| e.to_string());
    Ok(OwnerRead::Found(Box::new(Owner {
        api,
        object,
        history,
    })))
}

/// Changes the owner's record and writes it, conditional on the resourceVersion read.
/// `Ok(false)`: another writer moved the owner meanwhile (409); nothing was written, and the
/// next reconcile reads it again.
pub(crate) async fn update_history(
    owner: &mut Owner,
    change: impl FnOnce(&mut History),
) -> Result<bool, kube::Error> {
    let mut history = owner.history.clone().unwrap_or_default();
    change(&mut history);
    let patch = json!({"metadata": {
        "resourceVersion": owner.object.metadata.resource_version,
        "annotations": {HISTORY_ANNOTATION: history.to_annotation()},
    }});
    let name = owner.object.name_any();
    match owner
        .api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(updated) => {
            owner.object = updated;
            owner.history = Ok(history);
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}
