//! podvisor-controller's tests, one binary (ripgrep's layout): the pure decision on real pod
//! statuses, the controller's API traffic against kube-rs' mock service (tower-test) answering
//! as the API server does, the webhook as a real HTTPS server, and the deploy/ manifests.
//!
//! No Kubernetes API server runs on these machines; the tests that need a real cluster are in
//! `cluster.rs`, ignored unless PODVISOR_CLUSTER_TESTS=1 (docs/cluster.md).

// Test code reads top to bottom: the 120-line limit (clippy.toml) is for product code.
#![allow(clippy::too_many_lines)]

mod api;
mod binary;
mod cluster;
mod decision;
mod deploy;
mod fakeapi;
mod fuzzing;
mod image;
mod webhook;

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A pod fixture from tests/fixtures.
pub fn fixture(name: &str) -> Pod {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Unix milliseconds of an RFC 3339 time.
pub fn ms(t: &str) -> u64 {
    t.parse::<jiff::Timestamp>().unwrap().as_millisecond() as u64
}

/// Says that a test did not run, past libtest's capture, or fails when `PODVISOR_NO_SKIP` is
/// set (CI), as podvisor's own tests do.
pub fn skip(why: &str) {
    use std::io::Write;
    assert!(
        std::env::var_os("PODVISOR_NO_SKIP").is_none(),
        "skipped: {why} (PODVISOR_NO_SKIP is set: on CI every test must run)"
    );
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}
