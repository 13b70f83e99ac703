//! Images pulled from a registry: once, by policy, over TLS with a secret and a mirror, and a
//! pull killed in the middle.

use super::registry::{certificates, push, push_context, Registry};
use super::Images;
use crate::harness::*;

#[test]
fn images_are_pulled_from_a_registry_once_and_as_the_pull_policy_says() {
    let registry = require_registry!();
    let t = Images::new();
    let repo = format!("{}/{}", registry.addr, crate::docker::unique("pulled"));
    let latest = format!("{repo}:latest");
    push(&t, &latest, "first");
    // Two pulls at once: one downloads the layers, the other finds them there.
    let (a, b) = (
        t.podvisor(&["image", "pull", &latest]),
        t.podvisor(&["image", "pull", &latest]),
    );
    let a = std::thread::spawn(move || a.output());
    let b = std::thread::spawn(move || b.output());
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    assert_eq!((a.code(), b.code()), (0, 0), "{a:?} {b:?}");
    let fetched = |o: &Output| -> f64 {
        let size = o
            .stdout
            .split(", ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        let unit = size.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        let n: f64 = size[..size.len() - unit.len()].parse().unwrap();
        n * match unit {
            "B" => 1.0,
            "kB" => 1e3,
            "MB" => 1e6,
            _ => panic!("{size}"),
        }
    };
    let (fa, fb) = (fetched(&a), fetched(&b));
    assert!(
        fa.max(fb) > 500_000.0 && fa.min(fb) < 10_000.0,
        "{a:?} {b:?}"
    );
    // The tag moves: IfNotPresent keeps what is here, Always (the default for :latest) pulls.
    push(&t, &latest, "second");
    let spec = |policy: &str| {
        format!(
            "  restartPolicy: Never\n  containers:\n  - name: app\n    image: {latest}\n{policy}"
        )
    };
    let kept = t.run("kept", &spec("    imagePullPolicy: IfNotPresent\n"));
    assert_eq!(kept.code(), 0, "{kept:?}");
    assert_eq!(t.out(&["logs", "kept", "app"]).stdout, "first");
    let events = t.out(&["events", "kept"]).stdout;
    assert!(events.contains("already present on machine"), "{events}");
    let pulled = t.run("pulled", &spec(""));
    assert_eq!(pulled.code(), 0, "{pulled:?}");
    assert_eq!(t.out(&["logs", "pulled", "app"]).stdout, "second");
    let events = t.out(&["events", "pulled"]).stdout;
    assert!(
        events.contains(&format!(
            "Pulling     app           Pulling image \"{latest}\""
        )),
        "{events}"
    );
    assert!(
        events.contains(&format!(
            "Pulled      app           Successfully pulled image \"{latest}\" in "
        )),
        "{events}"
    );
    assert!(
        events.contains("including waiting). Image size: "),
        "{events}"
    );
    // On a terminal, `image pull` shows a bar per blob it fetches.
    assert_eq!(t.out(&["image", "rm", &latest]).code(), 0);
    let shown = Run::new("script")
        .env("PODVISOR_STATE_BASE", t.dir.file("base"))
        .args([
            "-qec",
            &format!("{} image pull {latest}", podvisor().display()),
            "/dev/null",
        ])
        .output();
    assert_eq!(shown.code(), 0, "{shown:?}");
    assert!(
        shown.stdout.contains("] ") && shown.stdout.contains("/s"),
        "{shown:?}"
    );
    assert!(
        shown.stdout.contains(&format!("Pulled {latest} (")),
        "{shown:?}"
    );
    // The registry gone: the next start of an Always pod cannot pull.
    drop(registry);
    let mut failed = t
        .pod("failed", &spec("    imagePullPolicy: Always\n"))
        .start();
    wait_until("ErrImagePull", || t.waiting("failed").0 == "ErrImagePull");
    assert!(
        t.waiting("failed")
            .1
            .starts_with(&format!("failed to pull image \"{latest}\": ")),
        "{:?}",
        t.waiting("failed")
    );
    assert_eq!(t.out(&["stop", "failed"]).code(), 0);
    assert!(failed.wait().success());
}

#[test]
fn a_private_registry_over_tls_a_pull_secret_and_a_mirror_for_docker_hub() {
    let plain = require_registry!();
    let t = Images::new();
    let name = crate::docker::unique("private");
    // Pushed to the plain registry, also under `library/` as Docker Hub keeps official images.
    push(&t, &format!("{}/{name}:v1", plain.addr), "private");
    push(&t, &format!("{}/library/{name}:v1", plain.addr), "mirrored");
    // The same storage behind TLS (a CA of the test's own) and htpasswd.
    let certs = t.dir.file("certs");
    std::fs::create_dir_all(&certs).unwrap();
    certificates(&certs);
    let hash = bcrypt::hash_with_result("s3cret", 4)
        .unwrap()
        .format_for_version(bcrypt::Version::TwoY);
    std::fs::write(certs.join("htpasswd"), format!("puller:{hash}\n")).unwrap();
    let tls = Registry::serve(
        Some(&plain.data()),
        &format!(
            "  tls: {{certificate: {c}/tls.crt, key: {c}/tls.key}}\nauth:\n  htpasswd: {{realm: podvisor-test, path: {c}/htpasswd}}\n",
            c = certs.display()
        ),
    )
    .unwrap();
    let private = format!("localhost:{}/{name}:v1", tls.port());
    // Settings as containerd reads them: HTTPS with the CA for the private registry (on the
    // loopback, it would be plain HTTP otherwise); Docker Hub from the plain one.
    let hosts = t.dir.file("certs.d");
    let host_dir = hosts.join(format!("localhost:{}", tls.port()));
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::copy(certs.join("ca.crt"), host_dir.join("ca.crt")).unwrap();
    std::fs::write(
        host_dir.join("hosts.toml"),
        format!(
            "server = \"https://localhost:{}\"\nca = \"ca.crt\"\n",
            tls.port()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(hosts.join("docker.io")).unwrap();
    std::fs::write(
        hosts.join("docker.io/hosts.toml"),
        format!(
            "server = \"https://registry-1.docker.io\"\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            plain.addr
        ),
    )
    .unwrap();
    let run_with = |pod: &str, spec: &str| {
        t.pod(pod, spec)
            .arg("--registry-config")
            .arg(&hosts)
            .start()
    };
    // No credentials: the registry says no.
    let mut denied = run_with(
        "denied",
        &format!("  containers:\n  - name: app\n    image: {private}\n"),
    );
    wait_until("ErrImagePull", || t.waiting("denied").0 == "ErrImagePull");
    assert!(
        t.waiting("denied").1.contains("failed to pull image"),
        "{:?}",
        t.waiting("denied")
    );
    assert_eq!(t.out(&["stop", "denied"]).code(), 0);
    assert!(denied.wait().success());
    // The pod's pull secret, a Secret of the same file.
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let config = format!(
        "{{\"auths\": {{\"localhost:{}\": {{\"auth\": \"{}\"}}}}}}",
        tls.port(),
        b64("puller:s3cret")
    );
    let spec = format!(
        "  restartPolicy: Never\n  imagePullSecrets: [{{name: regcred}}]\n  containers:\n  - name: app\n    image: {private}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: regcred}}\ntype: kubernetes.io/dockerconfigjson\ndata: {{.dockerconfigjson: {}}}\n",
        b64(&config)
    );
    let mut allowed = run_with("allowed", &spec);
    assert!(allowed.wait().success());
    assert_eq!(t.out(&["logs", "allowed", "app"]).stdout, "private");
    // Docker Hub's name, served by its mirror.
    let mut mirrored = run_with(
        "mirrored",
        &format!("  restartPolicy: Never\n  containers:\n  - name: app\n    image: {name}:v1\n"),
    );
    assert!(mirrored.wait().success());
    assert_eq!(t.out(&["logs", "mirrored", "app"]).stdout, "mirrored");
    let ls = t.out(&["image", "ls"]).stdout;
    assert!(ls.contains(&format!("docker.io/library/{name}")), "{ls}");
}

#[test]
fn a_pull_killed_in_the_middle_leaves_nothing_half_done_and_the_next_pull_completes() {
    let registry = require_registry!();
    let t = Images::new();
    // A layer of 64 MiB of random bytes: long enough on the loopback to be caught mid-way.
    let ctx = t.dir.file("ctx-big");
    std::fs::create_dir_all(ctx.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", ctx.join("bin/busybox")).unwrap();
    let mut random = std::fs::File::open("/dev/urandom").unwrap();
    let mut big = std::fs::File::create(ctx.join("big")).unwrap();
    std::io::copy(&mut std::io::Read::take(&mut random, 64 << 20), &mut big).unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM scratch\nCOPY bin /bin\nCOPY big /big\nCMD [\"/bin/busybox\", \"echo\", \"whole\"]\n",
    )
    .unwrap();
    let reference = format!("{}/{}:v1", registry.addr, crate::docker::unique("big"));
    push_context(&ctx, &reference);
    let tmp = t.store().join("tmp");
    let mut pull = t.podvisor(&["image", "pull", &reference]).start();
    // Killed once a blob is on its way into tmp/.
    wait_until("a blob being fetched", || {
        std::fs::read_dir(&tmp).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.metadata().is_ok_and(|m| m.len() > (1 << 20)))
        })
    });
    pull.signal("KILL");
    assert!(!pull.wait().success());
    // Nothing named, no layer of that image unpacked.
    assert_eq!(t.out(&["image", "ls", "-q"]).stdout, "");
    let layers = || {
        std::fs::read_dir(t.store().join("layers/sha256"))
            .unwrap()
            .count()
    };
    assert!(layers() < 2, "{} layers", layers());
    // The next pull takes the lock, clears tmp/, and completes; the image runs.
    let again = t.out(&["image", "pull", &reference]);
    assert_eq!(again.code(), 0, "{again:?}");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    assert_eq!(layers(), 2);
    let run = t.run(
        "whole",
        &format!("  restartPolicy: Never\n  containers:\n  - name: app\n    image: {reference}\n"),
    );
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(t.out(&["logs", "whole", "app"]).stdout, "whole");
}
