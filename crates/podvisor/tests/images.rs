//! Images through the binary: OCI image layouts the tests make themselves (layers tarred from
//! busybox-static, in each compression, with whiteouts, opaque directories and hard links, an
//! index of two platforms), `docker save` archives of the Docker engine here, layers that try
//! to escape, blobs whose digest lies, and pods that run from what was loaded: Entrypoint and
//! Cmd, Env, WorkingDir and User under Kubernetes' rules, exec probes and `podvisor exec`
//! inside the image, the kubelet's image events and refusals.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::harness::*;

/// How a layer's tar is stored.
#[derive(Clone, Copy)]
enum Compression {
    None,
    Gzip,
    Zstd,
}

/// One entry of a layer.
enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8], u32),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
    /// A file whose name is written into the header as is (no checks): for escapes.
    RawName(&'a str),
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn tar_of(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        match e {
            Entry::Dir(path) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
            Entry::File(path, data, mode) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, path, *data).unwrap();
            }
            Entry::Symlink(path, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, path, target).unwrap();
            }
            Entry::Hardlink(path, target) => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_mode(0o755);
                h.set_size(0);
                let name = &mut h.as_old_mut().linkname;
                name[..target.len()].copy_from_slice(target.as_bytes());
                let name = &mut h.as_old_mut().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
                h.set_cksum();
                b.append(&h, &[][..]).unwrap();
            }
            Entry::RawName(path) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(4);
                let name = &mut h.as_old_mut().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
                h.set_cksum();
                b.append(&h, &b"evil"[..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// An OCI image layout written by the test.
struct Layout {
    dir: PathBuf,
    layers: Vec<(Vec<u8>, String, &'static str)>,
}

impl Layout {
    fn new(dir: PathBuf) -> Layout {
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        Layout {
            dir,
            layers: Vec::new(),
        }
    }

    fn blob(&self, bytes: &[u8]) -> String {
        let digest = sha256(bytes);
        let hex = digest.trim_start_matches("sha256:");
        std::fs::write(self.dir.join("blobs/sha256").join(hex), bytes).unwrap();
        digest
    }

    fn layer(mut self, c: Compression, entries: &[Entry<'_>]) -> Layout {
        let tar = tar_of(entries);
        let diff_id = sha256(&tar);
        let (bytes, media) = match c {
            Compression::None => (tar, "application/vnd.oci.image.layer.v1.tar"),
            Compression::Gzip => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&tar).unwrap();
                (
                    gz.finish().unwrap(),
                    "application/vnd.oci.image.layer.v1.tar+gzip",
                )
            }
            Compression::Zstd => (
                ruzstd::encoding::compress_to_vec(
                    &tar[..],
                    ruzstd::encoding::CompressionLevel::Fastest,
                ),
                "application/vnd.oci.image.layer.v1.tar+zstd",
            ),
        };
        self.layers.push((bytes, diff_id, media));
        self
    }

    /// Writes the config, manifest and index (`name`, with a second platform beside ours
    /// whose manifest is absent: it must not be needed).
    fn finish(self, name: &str, config: Value) -> PathBuf {
        let mut config = config;
        config["architecture"] = json!(host_arch());
        config["os"] = json!("linux");
        config["rootfs"] = json!({"type": "layers", "diff_ids": self.layers.iter().map(|l| l.1.clone()).collect::<Vec<_>>()});
        let config = serde_json::to_vec(&config).unwrap();
        let config_digest = self.blob(&config);
        let layers: Vec<Value> = self
            .layers
            .iter()
            .map(|(bytes, _, media)| {
                json!({"mediaType": media, "digest": self.blob(bytes), "size": bytes.len()})
            })
            .collect();
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
            "layers": layers,
        }))
        .unwrap();
        let manifest_digest = self.blob(&manifest);
        let other = if host_arch() == "arm64" {
            "amd64"
        } else {
            "arm64"
        };
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha256(b"absent"), "size": 6,
                 "platform": {"architecture": other, "os": "linux"}},
                {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest.len(),
                 "platform": {"architecture": host_arch(), "os": "linux"}},
            ],
        }))
        .unwrap();
        let index_digest = self.blob(&index);
        let top = json!({
            "schemaVersion": 2,
            "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": index_digest, "size": index.len(),
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(':').next().unwrap()}}],
        });
        std::fs::write(
            self.dir.join("index.json"),
            serde_json::to_vec(&top).unwrap(),
        )
        .unwrap();
        self.dir
    }
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// A state base of the test's own: its image store and its pods.
struct Images {
    dir: TempDir,
}

impl Images {
    fn new() -> Images {
        Images {
            dir: TempDir::new(),
        }
    }

    fn podvisor(&self, args: &[&str]) -> Run {
        Run::new(podvisor())
            .env("PODVISOR_STATE_BASE", self.dir.file("base"))
            .args(args)
    }

    fn load(&self, path: &Path) -> Output {
        self.podvisor(&["image", "load"]).arg(path).output()
    }

    /// `podvisor run` of a pod whose containers run from their images.
    fn pod(&self, name: &str, spec: &str) -> Run {
        let manifest = self.dir.file(&format!("{name}.yaml"));
        std::fs::write(
            &manifest,
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, annotations: {{podvisor.io/root-from: image}}}}\nspec:\n  terminationGracePeriodSeconds: 1\n{spec}"),
        )
        .unwrap();
        self.podvisor(&["run", "-q"]).arg(manifest)
    }

    /// Runs such a pod to its end.
    fn run(&self, name: &str, spec: &str) -> Output {
        self.pod(name, spec).output()
    }

    /// The first container's waiting state (reason, message), or empty strings.
    fn waiting(&self, pod: &str) -> (String, String) {
        let out = self.out(&["status", pod, "-o", "json"]);
        let Ok(v) = serde_json::from_str::<Value>(&out.stdout) else {
            return Default::default();
        };
        let w = &v["status"]["containerStatuses"][0]["state"]["waiting"];
        let text = |f: &str| w[f].as_str().unwrap_or_default().to_string();
        (text("reason"), text("message"))
    }

    fn out(&self, args: &[&str]) -> Output {
        self.podvisor(args).output()
    }

    fn store(&self) -> PathBuf {
        self.dir.file("base").join(".images")
    }
}

/// busybox-static and a few of its applets.
fn busybox_entries() -> Option<Vec<u8>> {
    let bb = std::fs::read("/bin/busybox").ok()?;
    let static_ = std::process::Command::new("ldd")
        .arg("/bin/busybox")
        .output()
        .is_ok_and(|o| {
            !o.status.success() || String::from_utf8_lossy(&o.stdout).contains("not a dynamic")
        });
    static_.then_some(bb)
}

macro_rules! require {
    () => {{
        if !is_root() {
            skip("an image's root is mounted as root");
            return;
        }
        let Some(bb) = busybox_entries() else {
            skip("busybox-static not installed (the test images are made from /bin/busybox)");
            return;
        };
        bb
    }};
}

/// What the pull tests need: root and busybox-static, a Docker engine (to push) and a registry
/// on the loopback (returned); or the test says skipped.
macro_rules! require_registry {
    () => {{
        let _busybox = require!();
        if let Err(why) = crate::docker::engine() {
            skip(&why);
            return;
        }
        match Registry::start() {
            Ok(r) => r,
            Err(why) => {
                skip(&why);
                return;
            }
        }
    }};
}

/// A layout of three layers, one per compression: busybox and /etc (gzip); a whiteout, an
/// opaque directory and a hard link (zstd); a file of the top layer (plain).
fn layered(dir: PathBuf, bb: &[u8]) -> PathBuf {
    Layout::new(dir)
        .layer(
            Compression::Gzip,
            &[
                Entry::Dir("bin"),
                Entry::File("bin/busybox", bb, 0o755),
                Entry::Symlink("bin/sh", "busybox"),
                Entry::Hardlink("bin/bb", "bin/busybox"),
                Entry::Dir("etc"),
                Entry::File("etc/passwd", b"root:x:0:0::/root:/bin/sh\nsvc:x:4242:4343::/srv:/bin/sh\n", 0o644),
                Entry::File("etc/group", b"root:x:0:\nsvc:x:4343:\n", 0o644),
                Entry::Dir("data"),
                Entry::File("data/gone", b"hidden by a whiteout\n", 0o644),
                Entry::File("data/kept", b"kept\n", 0o644),
                Entry::Dir("opaque"),
                Entry::File("opaque/old", b"hidden by an opaque dir\n", 0o644),
            ],
        )
        .layer(
            Compression::Zstd,
            &[
                Entry::File("data/.wh.gone", b"", 0o644),
                Entry::Dir("opaque"),
                Entry::File("opaque/.wh..wh..opq", b"", 0o644),
                Entry::File("opaque/new", b"new\n", 0o644),
            ],
        )
        .layer(
            Compression::None,
            &[Entry::Dir("srv"), Entry::File("srv/ready", b"ready\n", 0o644)],
        )
        .finish(
            "registry.test/layered:v1",
            json!({"config": {
                "Entrypoint": ["/bin/sh", "-c"],
                "Cmd": ["echo cmd; /bin/busybox ls /data /opaque; test /bin/bb -ef /bin/busybox && echo linked; echo $FROM_IMAGE $MINE; pwd; /bin/busybox id -u; /bin/busybox id -g"],
                "Env": ["PATH=/bin", "FROM_IMAGE=image", "MINE=image"],
                "WorkingDir": "/srv",
                "User": "svc",
            }}),
        )
}

#[test]
fn an_oci_layout_of_three_compressions_runs_as_its_layers_stack() {
    let bb = require!();
    let t = Images::new();
    let layout = layered(t.dir.file("layout"), &bb);
    let out = t.load(&layout);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "Loaded image: registry.test/layered:v1");
    let ls = t.out(&["image", "ls"]);
    let lines: Vec<&str> = ls.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{ls:?}");
    assert!(lines[0].starts_with("IMAGE"), "{ls:?}");
    assert!(
        lines[1].starts_with("registry.test/layered   v1   "),
        "{ls:?}"
    );
    // No command: the image's Entrypoint and Cmd; its env under the container's; its
    // WorkingDir and User.
    let run = t.run(
        "stack",
        "  restartPolicy: Never\n  containers:\n  - name: app\n    image: registry.test/layered:v1\n    env: [{name: MINE, value: container}]\n",
    );
    let describe = t.out(&["logs", "stack", "app"]);
    assert_eq!(run.code(), 0, "{run:?}\n{describe:?}");
    let logs = t.out(&["logs", "stack", "app"]);
    assert_eq!(
        logs.stdout,
        "cmd\n/data:\nkept\n\n/opaque:\nnew\nlinked\nimage container\n/srv\n4242\n4343",
        "{logs:?}"
    );
    let pod: Value =
        serde_json::from_str(&t.out(&["status", "stack", "-o", "json"]).stdout).unwrap();
    let status = &pod["status"]["containerStatuses"][0];
    assert_eq!(status["image"], "registry.test/layered:v1");
    let image_id = status["imageID"].as_str().unwrap();
    assert!(
        image_id.starts_with("registry.test/layered@sha256:"),
        "{image_id}"
    );
    let events = t.out(&["events", "stack"]).stdout;
    assert!(
        events.contains("Pulled      app           Container image \"registry.test/layered:v1\" already present on machine"),
        "{events}"
    );
    // Loaded again: nothing new is stored; removed: its layers go.
    assert_eq!(t.load(&layout).code(), 0);
    let layers = || {
        std::fs::read_dir(t.store().join("layers/sha256"))
            .unwrap()
            .count()
    };
    assert_eq!(layers(), 3);
    let rm = t.out(&["image", "rm", "registry.test/layered:v1"]);
    assert_eq!(rm.stdout, "Deleted: registry.test/layered:v1", "{rm:?}");
    assert_eq!(layers(), 0);
    assert_eq!(
        std::fs::read_dir(t.store().join("blobs/sha256"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn command_and_args_replace_entrypoint_and_cmd_and_probes_and_exec_run_inside_the_image() {
    let bb = require!();
    let t = Images::new();
    assert_eq!(t.load(&layered(t.dir.file("layout"), &bb)).code(), 0);
    let manifest = t.dir.file("inside.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: inside, annotations: {podvisor.io/root-from: image}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: args\n    image: registry.test/layered:v1\n    args: ['echo only-args; exec /bin/busybox sleep 600']\n    readinessProbe:\n      exec: {command: [/bin/sh, -c, 'test -f /srv/ready && test ! -e /data/gone']}\n      periodSeconds: 1\n  - name: command\n    image: registry.test/layered:v1\n    command: [/bin/sh, -c, 'echo only-command $0; exec /bin/busybox sleep 600']\n    securityContext: {runAsUser: 0}\n",
    )
    .unwrap();
    let mut run = t.podvisor(&["run", "-q"]).arg(&manifest).start();
    wait_until("both ready", || {
        let s = t.out(&["status", "inside"]).stdout;
        s.lines().nth(1).is_some_and(|l| l.contains(" 2/2 "))
    });
    assert_eq!(t.out(&["logs", "inside", "args"]).stdout, "only-args");
    assert_eq!(
        t.out(&["logs", "inside", "command"]).stdout,
        "only-command /bin/sh"
    );
    // `podvisor exec` sees the image's files, as its user; the host's are not there.
    let exec = t.out(&[
        "exec",
        "inside",
        "-c",
        "command",
        "--",
        "/bin/sh",
        "-c",
        "/bin/busybox cat /srv/ready; /bin/busybox id -u; /bin/busybox ls /usr 2>&1 || true",
    ]);
    assert_eq!(exec.code(), 0, "{exec:?}");
    assert!(exec.stdout.starts_with("ready\n0\n"), "{exec:?}");
    assert!(exec.stdout.contains("No such file"), "{exec:?}");
    // Prune keeps what a running pod uses.
    let other = Layout::new(t.dir.file("other"))
        .layer(Compression::None, &[Entry::File("x", b"x", 0o644)])
        .finish("registry.test/other:v1", json!({"config": {"Cmd": ["/x"]}}));
    assert_eq!(t.load(&other).code(), 0);
    let pruned = t.out(&["image", "prune"]);
    assert_eq!(
        pruned.stdout, "Deleted: registry.test/other:v1",
        "{pruned:?}"
    );
    assert_eq!(t.out(&["image", "ls", "-q"]).stdout.lines().count(), 1);
    assert_eq!(t.out(&["stop", "inside"]).code(), 0);
    assert!(run.wait().success());
    run.assert_no_leftovers();
}

#[test]
fn an_image_that_cannot_be_had_leaves_the_container_waiting_as_the_kubelet_says() {
    if !is_root() {
        skip("an image's root is mounted as root");
        return;
    }
    let t = Images::new();
    let mut never = t
        .pod(
            "never",
            "  containers:\n  - name: app\n    image: nowhere/app:v1\n    imagePullPolicy: Never\n",
        )
        .start();
    wait_until("ErrImageNeverPull", || {
        t.waiting("never").0 == "ErrImageNeverPull"
    });
    assert_eq!(
        t.waiting("never").1,
        "Container image \"nowhere/app:v1\" is not present with pull policy of Never"
    );
    // A registry that refuses the connection: ErrImagePull, then ImagePullBackOff.
    let mut refused = t
        .pod(
            "refused",
            "  containers:\n  - name: app\n    image: 127.0.0.1:9/app:v1\n",
        )
        .start();
    wait_until("ErrImagePull", || t.waiting("refused").0 == "ErrImagePull");
    wait_until("ImagePullBackOff", || {
        t.waiting("refused").0 == "ImagePullBackOff"
    });
    let (_, message) = t.waiting("refused");
    assert!(
        message.starts_with("Back-off pulling image \"127.0.0.1:9/app:v1\": ErrImagePull: failed to pull image \"127.0.0.1:9/app:v1\": "),
        "{message}"
    );
    let events = t.out(&["events", "refused"]).stdout;
    for said in [
        "Pulling     app           Pulling image \"127.0.0.1:9/app:v1\"",
        "Failed      app           Failed to pull image \"127.0.0.1:9/app:v1\": ",
        "Failed      app           Error: ErrImagePull",
        "BackOff     app           Back-off pulling image \"127.0.0.1:9/app:v1\"",
        "Failed      app           Error: ImagePullBackOff",
    ] {
        assert!(events.contains(said), "{said} not in {events}");
    }
    let pod: Value =
        serde_json::from_str(&t.out(&["status", "refused", "-o", "json"]).stdout).unwrap();
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    for (name, run) in [("never", &mut never), ("refused", &mut refused)] {
        assert_eq!(t.out(&["stop", name]).code(), 0);
        assert!(run.wait().success());
        run.assert_no_leftovers();
    }
    // A name that does not parse: admitted, the container waits (InvalidImageName), as the
    // kubelet leaves it.
    let mut bad = t
        .pod(
            "bad",
            "  containers:\n  - name: app\n    image: 'Not An Image'\n",
        )
        .start();
    wait_until("InvalidImageName", || {
        t.waiting("bad").0 == "InvalidImageName"
    });
    let message = t.waiting("bad").1;
    assert!(
        message.starts_with("Failed to apply default image tag \"Not An Image\": couldn't parse image name \"Not An Image\": "),
        "{message}"
    );
    let events = t.out(&["events", "bad", "-o", "json"]).stdout;
    assert!(events.contains("\"reason\":\"InspectFailed\""), "{events}");
    assert!(events.contains("Error: InvalidImageName"), "{events}");
    assert_eq!(t.out(&["stop", "bad"]).code(), 0);
    assert!(bad.wait().success());
    bad.assert_no_leftovers();
}

#[test]
fn layers_that_reach_outside_are_refused_naming_layer_and_entry() {
    let bb = require!();
    let t = Images::new();
    let cases: [(&str, Vec<Entry<'_>>, &str); 5] = [
        (
            "absolute",
            vec![Entry::RawName("/tmp/pvtest-escape-abs")],
            "an absolute path",
        ),
        (
            "dotdot",
            vec![Entry::RawName("a/../../pvtest-escape-dotdot")],
            "a path with `..`",
        ),
        (
            "symlink",
            vec![
                Entry::Symlink("out", "/tmp"),
                Entry::File("out/pvtest-escape-link", b"x", 0o644),
            ],
            "its path goes through the symlink out",
        ),
        (
            "hardlink",
            vec![Entry::Hardlink("passwd", "../../../../etc/passwd")],
            "a path with `..`",
        ),
        (
            "hardlink-missing",
            vec![Entry::Hardlink("shadow", "etc/shadow")],
            "a hard link to etc/shadow, which this layer does not hold",
        ),
    ];
    for (name, entries, why) in cases {
        let layout = Layout::new(t.dir.file(name))
            .layer(Compression::Gzip, &[Entry::File("bin/busybox", &bb, 0o755)])
            .layer(Compression::None, &entries)
            .finish(
                &format!("registry.test/{name}:v1"),
                json!({"config": {"Cmd": ["/bin/busybox"]}}),
            );
        let out = t.load(&layout);
        assert_eq!(out.code(), 1, "{name}: {out:?}");
        assert!(
            out.stderr.starts_with("error: layer sha256:"),
            "{name}: {out:?}"
        );
        assert!(out.stderr.contains(why), "{name}: {out:?}");
        assert!(out.stderr.ends_with(": refused"), "{name}: {out:?}");
        // Nothing usable half-done: the bad layer is not among the layers, no name was taken.
        let ls = t.out(&["image", "ls", "-q"]);
        assert_eq!(ls.stdout, "", "{name}: {ls:?}");
    }
    for leaked in [
        "/tmp/pvtest-escape-abs",
        "/tmp/pvtest-escape-link",
        "/pvtest-escape-dotdot",
    ] {
        assert!(!Path::new(leaked).exists(), "{leaked} was written");
    }
    // The good layer stays (shared by the next image that has it); the bad ones are gone with
    // the next writer.
    assert_eq!(t.out(&["image", "ls"]).code(), 0);
    let layers = std::fs::read_dir(t.store().join("layers/sha256"))
        .unwrap()
        .count();
    assert_eq!(layers, 1);
}

#[test]
fn a_blob_whose_digest_lies_is_refused() {
    let bb = require!();
    let t = Images::new();
    let layout = Layout::new(t.dir.file("lies"))
        .layer(Compression::Gzip, &[Entry::File("bin/busybox", &bb, 0o755)])
        .finish(
            "registry.test/lies:v1",
            json!({"config": {"Cmd": ["/bin/busybox"]}}),
        );
    // The layer blob is the largest file: a byte of it changed.
    let blobs: Vec<PathBuf> = std::fs::read_dir(layout.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let biggest = blobs
        .iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(biggest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(biggest, bytes).unwrap();
    let out = t.load(&layout);
    assert_eq!(out.code(), 1, "{out:?}");
    let hex = biggest.file_name().unwrap().to_string_lossy();
    assert!(
        out.stderr.contains(&format!(
            "blob sha256:{hex}: its content has digest sha256:"
        )),
        "{out:?}"
    );
    assert_eq!(t.out(&["image", "ls", "-q"]).stdout, "");
}

#[test]
fn a_docker_save_archive_of_the_engine_here_runs() {
    let bb = require!();
    drop(bb);
    if let Err(why) = crate::docker::engine() {
        skip(&why);
        return;
    }
    let t = Images::new();
    let ctx = t.dir.file("ctx");
    std::fs::create_dir_all(ctx.join("bin")).unwrap();
    std::fs::create_dir_all(ctx.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", ctx.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", ctx.join("bin/sh")).unwrap();
    std::fs::write(
        ctx.join("etc/passwd"),
        "root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM scratch\nCOPY bin /bin\nCOPY etc /etc\nENV GREETING=hello-from-docker\nWORKDIR /app\nUSER app\nENTRYPOINT [\"/bin/sh\", \"-c\"]\nCMD [\"echo $GREETING; /bin/busybox id -u; /bin/busybox pwd\"]\n",
    )
    .unwrap();
    let tag = format!("{}:v1", crate::docker::unique("saved"));
    let built = Run::new("docker")
        .args(["build", "-q", "-t", &tag])
        .arg(&ctx)
        .output();
    let archive = t.dir.file("saved.tar");
    let saved = Run::new("docker")
        .args(["save", "-o"])
        .arg(&archive)
        .arg(&tag)
        .output();
    let removed = Run::new("docker").args(["rmi", "-f", &tag]).output();
    assert_eq!(built.code(), 0, "{built:?}");
    assert_eq!(saved.code(), 0, "{saved:?}");
    assert_eq!(removed.code(), 0, "{removed:?}");
    // As `docker save IMAGE | podvisor image load`: the archive on stdin.
    let out = Run::new("sh")
        .env("PODVISOR_STATE_BASE", t.dir.file("base"))
        .env("PV", podvisor())
        .env("ARCHIVE", &archive)
        .args(["-c", "\"$PV\" image load < \"$ARCHIVE\""])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, format!("Loaded image: docker.io/library/{tag}"));
    assert_eq!(
        std::fs::read_dir(t.store())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("stdin-"))
            .count(),
        0
    );
    let run = t.run(
        "saved",
        &format!("  restartPolicy: Never\n  containers:\n  - name: app\n    image: {tag}\n    imagePullPolicy: Never\n"),
    );
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(
        t.out(&["logs", "saved", "app"]).stdout,
        "hello-from-docker\n1000\n/app"
    );
}

/// Debian's docker-registry (the CNCF distribution registry) on a loopback port of its own,
/// stopped when dropped.
struct Registry {
    child: std::process::Child,
    addr: String,
    _dir: TempDir,
}

impl Registry {
    fn start() -> Result<Registry, String> {
        Registry::serve(None, "")
    }

    /// A registry on its own loopback port: storing in `data` (shared with another) when
    /// given, with `extra` settings (TLS, auth) at the end of its config.
    fn serve(data: Option<&Path>, extra: &str) -> Result<Registry, String> {
        if !have("docker-registry", "the image pull tests") {
            return Err("docker-registry not installed (apt-get install docker-registry)".into());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let dir = TempDir::new();
        let data = data.map_or_else(|| dir.file("data"), Path::to_path_buf);
        let config = dir.file("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp:\n  addr: {addr}\n{extra}",
                data.display()
            ),
        )
        .unwrap();
        let child = std::process::Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("docker-registry: {e}"))?;
        let registry = Registry {
            child,
            addr,
            _dir: dir,
        };
        wait_until("the registry listens", || {
            std::net::TcpStream::connect(&registry.addr).is_ok()
        });
        Ok(registry)
    }

    fn data(&self) -> PathBuf {
        self._dir.file("data")
    }

    fn port(&self) -> &str {
        self.addr.rsplit(':').next().unwrap()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds a FROM-scratch busybox image that prints `word`, pushes it as `reference` and
/// removes it from the engine.
fn push(t: &Images, reference: &str, word: &str) {
    let ctx = t.dir.file(&format!("ctx-{word}"));
    std::fs::create_dir_all(ctx.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", ctx.join("bin/busybox")).unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        format!("FROM scratch\nCOPY bin /bin\nCMD [\"/bin/busybox\", \"echo\", \"{word}\"]\n"),
    )
    .unwrap();
    push_context(&ctx, reference);
}

/// Builds the image of the Docker context `ctx`, pushes it as `reference` and removes it from
/// the engine.
fn push_context(ctx: &Path, reference: &str) {
    let built = Run::new("docker")
        .args(["build", "-q", "-t", reference])
        .arg(ctx)
        .output();
    let pushed = Run::new("docker").args(["push", "-q", reference]).output();
    let removed = Run::new("docker").args(["rmi", "-f", reference]).output();
    assert_eq!(built.code(), 0, "{built:?}");
    assert_eq!(pushed.code(), 0, "{pushed:?}");
    assert_eq!(removed.code(), 0, "{removed:?}");
}

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

/// A CA and a certificate for `localhost` signed by it: `ca.crt`, `tls.crt`, `tls.key` in `dir`.
fn certificates(dir: &Path) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
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
