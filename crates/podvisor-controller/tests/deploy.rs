//! Every manifest in deploy/ read as its k8s-openapi type (or the Supervision CRD's), with no
//! field the type does not know; the CRD as the Rust type generates it; and the pieces agree
//! with each other and with the binary (names, ports, paths, permissions).

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use podvisor_controller::crd::{crd_yaml, Supervision};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::repo;

/// A manifest's documents, each as JSON, with the file and index for messages.
fn documents(file: &str) -> Vec<(String, Value)> {
    let path = repo().join("deploy").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    docs.into_iter()
        .enumerate()
        .map(|(i, d)| (format!("{file} document {}", i + 1), d))
        .collect()
}

/// `v` as a `T`, refusing fields `T` does not have (k8s-openapi would drop them silently).
fn strict<T: DeserializeOwned>(at: &str, v: &Value) -> T {
    strict_but::<T>(at, v, &[])
}

fn strict_but<T: DeserializeOwned>(at: &str, v: &Value, known: &[&str]) -> T {
    let mut unknown = Vec::new();
    let t = serde_ignored::deserialize(v.clone(), |p| unknown.push(p.to_string()))
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    unknown.retain(|u| !known.contains(&u.as_str()));
    assert!(unknown.is_empty(), "{at}: unknown fields {unknown:?}");
    t
}

#[derive(Default)]
struct Deploy {
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    cluster_roles: Vec<ClusterRole>,
    roles: Vec<Role>,
    webhooks: Vec<MutatingWebhookConfiguration>,
    supervisions: Vec<Supervision>,
    kinds: BTreeMap<String, usize>,
}

fn read_all() -> Deploy {
    let mut d = Deploy::default();
    let mut files: Vec<String> = std::fs::read_dir(repo().join("deploy"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    for file in files {
        for (at, v) in documents(&file) {
            let kind = v["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{at}: no kind"))
                .to_string();
            *d.kinds.entry(kind.clone()).or_default() += 1;
            match kind.as_str() {
                "Namespace" => drop(strict::<Namespace>(&at, &v)),
                "ServiceAccount" => drop(strict::<ServiceAccount>(&at, &v)),
                "ClusterRoleBinding" => drop(strict::<ClusterRoleBinding>(&at, &v)),
                "RoleBinding" => drop(strict::<RoleBinding>(&at, &v)),
                "PodDisruptionBudget" => drop(strict::<PodDisruptionBudget>(&at, &v)),
                "CustomResourceDefinition" => drop(strict::<CustomResourceDefinition>(&at, &v)),
                "ClusterRole" => d.cluster_roles.push(strict(&at, &v)),
                "Role" => d.roles.push(strict(&at, &v)),
                "Deployment" => d.deployments.push(strict(&at, &v)),
                "Service" => d.services.push(strict(&at, &v)),
                "MutatingWebhookConfiguration" => d.webhooks.push(strict(&at, &v)),
                "Supervision" => {
                    // kube-derive's type takes apiVersion and kind apart from serde.
                    assert_eq!(v["apiVersion"], "podvisor.io/v1alpha1", "{at}");
                    let s: Supervision = strict_but(&at, &v, &["apiVersion", "kind"]);
                    assert_eq!(s.spec.problems(), [], "{at}");
                    d.supervisions.push(s);
                }
                other => panic!("{at}: kind {other} is not checked by this test"),
            }
        }
    }
    d
}

#[test]
fn every_manifest_reads_as_its_type() {
    let d = read_all();
    for kind in [
        "CustomResourceDefinition",
        "Deployment",
        "Service",
        "MutatingWebhookConfiguration",
        "ClusterRole",
        "Supervision",
    ] {
        assert!(
            d.kinds.contains_key(kind),
            "no {kind} in deploy/: {:?}",
            d.kinds
        );
    }
}

#[test]
fn the_checked_in_crd_is_the_one_the_rust_type_generates() {
    let path = repo().join("deploy/crd.yaml");
    let checked_in = std::fs::read_to_string(&path).unwrap();
    assert!(
        checked_in == crd_yaml(),
        "deploy/crd.yaml differs from the CRD crates/podvisor-controller/src/crd.rs generates: \
         run `cargo run -p podvisor-controller -- crd > deploy/crd.yaml`"
    );
}

#[test]
fn the_webhook_reaches_the_service_and_never_blocks() {
    let d = read_all();
    let svc = d
        .services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("podvisor-webhook"))
        .unwrap();
    let dep = &d
        .deployments
        .iter()
        .find(|x| x.metadata.name.as_deref() == Some("podvisor-controller"))
        .unwrap();
    let pod_labels = dep
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    for (k, v) in svc.spec.as_ref().unwrap().selector.as_ref().unwrap() {
        assert_eq!(
            pod_labels.get(k),
            Some(v),
            "the Service selects the controller's pods"
        );
    }
    let container = &dep.spec.template.spec.as_ref().unwrap().containers[0];
    let args = container.args.clone().unwrap();
    assert!(
        args.contains(&"--webhook-addr=0.0.0.0:8443".to_string()),
        "{args:?}"
    );
    let port = svc
        .spec
        .as_ref()
        .unwrap()
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .find(|p| p.port == 443)
        .unwrap();
    let target = match port.target_port.as_ref().unwrap() {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
        other => panic!("{other:?}"),
    };
    let named = container
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .find(|p| p.name.as_deref() == Some(target.as_str()))
        .unwrap();
    assert_eq!(named.container_port, 8443);
    // The default TLS paths of the binary are where the Secret is mounted.
    let mount = container
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.name == "tls")
        .unwrap();
    assert_eq!(mount.mount_path, "/etc/podvisor/tls");
    for cfg in &d.webhooks {
        for w in cfg.webhooks.iter().flatten() {
            assert_eq!(w.failure_policy.as_deref(), Some("Ignore"), "{}", w.name);
            assert_eq!(w.side_effects, "None");
            let s = w.client_config.service.as_ref().unwrap();
            assert_eq!(
                (
                    s.name.as_str(),
                    s.namespace.as_str(),
                    s.path.as_deref(),
                    s.port
                ),
                (
                    "podvisor-webhook",
                    "podvisor-system",
                    Some("/mutate"),
                    Some(443)
                )
            );
            assert!(w.timeout_seconds.unwrap() <= 10);
        }
    }
}

#[test]
fn rbac_grants_what_the_controller_calls_and_no_more() {
    let d = read_all();
    let role = d
        .cluster_roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("podvisor-controller"))
        .unwrap();
    let mut grants: Vec<String> = Vec::new();
    for rule in role.rules.as_ref().unwrap() {
        for g in rule.api_groups.as_ref().unwrap() {
            for r in rule.resources.as_ref().unwrap() {
                for v in &rule.verbs {
                    grants.push(format!("{g}/{r}:{v}"));
                }
            }
        }
    }
    grants.sort();
    let mut expected = vec![
        "podvisor.io/supervisions:get",
        "podvisor.io/supervisions:list",
        "podvisor.io/supervisions:watch",
        "podvisor.io/supervisions/status:patch",
        "/pods:list",
        "/pods:watch",
        "/pods/eviction:create",
        "apps/replicasets:get",
        "apps/replicasets:patch",
        "apps/statefulsets:get",
        "apps/statefulsets:patch",
        "apps/daemonsets:get",
        "apps/daemonsets:patch",
        "batch/jobs:get",
        "batch/jobs:patch",
        "/replicationcontrollers:get",
        "/replicationcontrollers:patch",
        "events.k8s.io/events:create",
        "events.k8s.io/events:patch",
    ];
    expected.sort();
    assert_eq!(grants, expected);
    assert!(!grants
        .iter()
        .any(|g| g.ends_with(":delete") || g.contains('*')));
    let lease = d
        .roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("podvisor-controller-lease"))
        .unwrap();
    let names: Vec<_> = lease
        .rules
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|r| r.resource_names.clone())
        .collect();
    assert_eq!(names, [vec!["podvisor-controller".to_string()]]);
}
