//! Tests against a real cluster (kind or k3s), which these machines cannot run: ignored by
//! default. To run them, on a machine with a cluster and `kubectl` pointing at it (docs/cluster.md): build and load the images, apply deploy/, then
//!
//!     PODVISOR_CLUSTER_TESTS=1 cargo test -p podvisor-controller --test tests cluster -- --ignored
//!
//! They apply `deploy/example.yaml` and watch what the controller and the webhook do to it.

use std::process::Command;
use std::time::{Duration, Instant};

fn kubectl(args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .args(args)
        .output()
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn wanted() -> bool {
    std::env::var_os("PODVISOR_CLUSTER_TESTS").is_some_and(|v| v == "1")
}

/// Polls `kubectl ARGS` until its output satisfies `ok`, for up to `within`.
fn eventually(args: &[&str], within: Duration, ok: impl Fn(&str) -> bool) -> String {
    let end = Instant::now() + within;
    loop {
        let (_, out) = kubectl(args);
        if ok(&out) || Instant::now() > end {
            return out;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

#[test]
#[ignore = "needs a Kubernetes cluster (kind or k3s): PODVISOR_CLUSTER_TESTS=1, see docs/cluster.md"]
fn the_example_app_is_injected_and_its_agent_disabled_by_its_stages() {
    assert!(
        wanted(),
        "set PODVISOR_CLUSTER_TESTS=1 with kubectl pointing at a test cluster"
    );
    let example = crate::repo().join("deploy/example.yaml");
    let (ok, out) = kubectl(&["apply", "-f", example.to_str().unwrap()]);
    assert!(ok, "{out}");
    let injected = eventually(
        &[
            "-n",
            "shop",
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].metadata.annotations.podvisor\\.io/injected}",
        ],
        Duration::from_secs(120),
        |o| o.split_whitespace().count() == 3,
    );
    assert_eq!(
        injected.split_whitespace().collect::<Vec<_>>(),
        ["web", "web", "web"]
    );
    // Nominal, Debug, then Disabled: the agent crashes the app until its fourth restart.
    let logs = eventually(
        &["-n", "shop", "logs", "deploy/web", "-c", "app"],
        Duration::from_secs(600),
        |o| o.contains("stage=Disabled"),
    );
    assert!(logs.contains("stage=Disabled"), "{logs}");
    let ready = eventually(
        &[
            "-n",
            "shop",
            "get",
            "supervision",
            "web",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
        Duration::from_secs(60),
        |o| o == "True",
    );
    assert_eq!(ready, "True");
    let _ = kubectl(&["delete", "-f", example.to_str().unwrap(), "--wait=false"]);
}
