//! The pods' owners and their records of whole-pod restarts (`decide::History`, in an
//! annotation): read once per reconcile, written conditional on the resourceVersion read.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::Error;
use crate::decide::{History, HISTORY_ANNOTATION};

/// One owner, read once per reconcile.
pub(crate) struct Owner {
    pub(crate) api: Api<DynamicObject>,
    pub(crate) object: DynamicObject,
    pub(crate) history: Result<History, String>,
}

/// The owner's API (from its reference: group, version, kind; the plural as the built-in
/// controllers' kinds form it), the object, and its record. `None`: it no longer exists.
pub(crate) async fn read_owner(
    client: &Client,
    ns: &str,
    o: &OwnerReference,
) -> Result<Option<Owner>, Error> {
    let (group, version) = match o.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", o.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &o.kind);
    let plural = format!("{}s", o.kind.to_ascii_lowercase());
    let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let Some(object) = api.get_opt(&o.name).await? else {
        return Ok(None);
    };
    let history =
        History::from_annotations(object.metadata.annotations.as_ref()).map_err(|e| e.to_string());
    Ok(Some(Owner {
        api,
        object,
        history,
    }))
}

/// Writes the owner's record, conditional on the resourceVersion read (409 if it moved).
pub(crate) async fn write_history(owner: &mut Owner, history: History) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {
        "resourceVersion": owner.object.metadata.resource_version,
        "annotations": {HISTORY_ANNOTATION: history.to_annotation()},
    }});
    let name = owner.object.name_any();
    let updated = owner
        .api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    owner.object = updated;
    owner.history = Ok(history);
    Ok(())
}
