//! The controller's image, built `FROM scratch` by scripts/build-images and run by a real
//! Docker engine: it holds the static build, runs as an unprivileged user, prints the CRD, and
//! without a cluster says so and exits 1 instead of crashing. Says `skipped:` without a Docker engine.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use podvisor_controller::crd::crd_yaml;

use crate::repo;

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("docker runs")
}

/// The image of this test, removed with it (also when the test fails).
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn the_controller_image_runs_its_static_build_from_scratch() {
    if !Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        crate::skip("no Docker engine");
        return;
    }
    let tag = format!("pvtest-controller-{}", std::process::id());
    let image = Image(format!("podvisor-controller:{tag}"));
    // A fresh clone compiles the static build first: minutes. Unoptimized (the `image-test`
    // profile): what is checked here is the static link and the image, the same as release's.
    let mut child = Command::new(repo().join("scripts/build-images"))
        .args([
            "--tag",
            &tag,
            "--controller-only",
            "--profile",
            "image-test",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(1200);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("scripts/build-images took over 20 minutes");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "scripts/build-images: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), image.0);

    let inspect = docker(&[
        "image",
        "inspect",
        "-f",
        "{{.Config.User}} {{json .Config.Entrypoint}} {{len .RootFS.Layers}}",
        &image.0,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&inspect.stdout).trim(),
        "65532:65532 [\"/podvisor-controller\"] 1"
    );

    let crd = docker(&["run", "--rm", "--network", "none", &image.0, "crd"]);
    assert!(
        crd.status.success(),
        "{}",
        String::from_utf8_lossy(&crd.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&crd.stdout), crd_yaml());

    // No cluster: a clear error and exit 1, not a panic or a crash loop of retries.
    let run = docker(&["run", "--rm", "--network", "none", &image.0]);
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.starts_with("error: cannot reach the Kubernetes API:"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
