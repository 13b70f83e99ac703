//! Without root on a kernel that will not mount an overlay in a user namespace (before 5.11),
//! fuse-overlayfs mounts an image's layers; `--rootless-overlay fuse-overlayfs` asks for it
//! on any kernel, which is how it is tested here.

use serde_json::json;

use super::layout::{deeper, layered, Compression, Entry, Layout};
use super::Images;
use crate::harness::*;

/// The fuse-overlayfs processes of user `podvisor-sub`.
fn fuse_daemons() -> String {
    let out = Run::new("pgrep")
        .args(["-a", "-u", "podvisor-sub", "fuse-overlayfs"])
        .output();
    out.stdout
}

#[test]
fn without_root_fuse_overlayfs_mounts_an_images_layers_where_asked() {
    let bb = require!();
    let has_range = std::fs::read_to_string("/etc/subuid")
        .is_ok_and(|t| t.lines().any(|l| l.starts_with("podvisor-sub:")));
    if !has_range || !have("setpriv", "rootless images") || !have("newuidmap", "rootless images") {
        skip("no podvisor-sub in /etc/subuid (.ci/run makes it), or no setpriv / newuidmap");
        return;
    }
    if !have("fuse-overlayfs", "an image's layers by fuse") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let open_to_all =
        std::fs::metadata("/dev/fuse").is_ok_and(|m| m.permissions().mode() & 0o006 == 0o006);
    if !open_to_all {
        skip(
            "/dev/fuse is not open to every user (scripts/test-user opens it, as distributions do)",
        );
        return;
    }
    let t = Images::new();
    std::fs::set_permissions(t.dir.file(""), std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_sub_user = |args: &[&str]| {
        Run::new("setpriv")
            .args([
                "--reuid=podvisor-sub",
                "--regid=podvisor-sub",
                "--clear-groups",
            ])
            .arg(podvisor())
            .args(args)
            .env("PODVISOR_STATE_BASE", t.dir.file("base"))
    };
    let load = as_sub_user(&["image", "load"])
        .arg(layered(t.dir.file("layout"), &bb))
        .output();
    assert_eq!(load.code(), 0, "{load:?}");
    let write_pod = |name: &str, spec: &str| {
        let manifest = t.dir.file(&format!("{name}.yaml"));
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  restartPolicy: Never\n{spec}"
        );
        std::fs::write(&manifest, text).unwrap();
        manifest
    };
    let manifest = write_pod(
        "fused",
        "  volumes: [{name: tools, image: {reference: registry.test/layered:v1}}]\n  containers:\n  - name: app\n    image: registry.test/layered:v1\n    env: [{name: MINE, value: container}]\n  - name: volume\n    image: registry.test/layered:v1\n    command: [/bin/sh, -c, 'busybox ls /tools/data /tools/opaque /opaque-only; busybox grep \" /tools \" /proc/self/mountinfo | busybox sed \"s/.* - //; s/ .*//\"; busybox ps -o comm | busybox grep -c fuse-overlayfs']\n    volumeMounts:\n    - {name: tools, mountPath: /tools}\n    - {name: tools, mountPath: /opaque-only, subPath: opaque}\n  - name: root\n    image: registry.test/layered:v1\n    securityContext: {runAsUser: 0}\n    command: [/bin/sh, -c, 'busybox grep \" / / \" /proc/self/mountinfo | busybox sed \"s/.* - //; s/ .*//\"; echo written > /data/new && busybox cat /data/new; busybox ps -o comm | busybox grep -c fuse-overlayfs']\n",
    );
    let run = as_sub_user(&["run", "-q", "--rootless-overlay", "fuse-overlayfs"])
        .arg(&manifest)
        .output();
    let logs = |c: &str| as_sub_user(&["logs", "fused", c]).output();
    assert_eq!(run.code(), 0, "{run:?}\n{:?}", logs("app"));
    // The same merge the kernel's overlay gives: the whiteout and the opaque directory hide
    // what is below them, the hard link holds, the image's user is a subordinate id.
    assert_eq!(
        logs("app").stdout,
        "cmd\n/data:\nkept\n\n/opaque:\nnew\nlinked\nimage container\n/srv\n4242\n4343"
    );
    // Its root is fuse-overlayfs's, writable (the start's own layer), and its daemon is a
    // process of the container's PID namespace...
    assert_eq!(
        logs("root").stdout,
        "fuse.fuse-overlayfs\nwritten\n1",
        "{:?}",
        logs("root")
    );
    // An image volume of several layers is fuse-overlayfs's too (read-only): a daemon of its
    // own (the subPath, an opaque directory, is of one layer: a bind).
    assert_eq!(
        logs("volume").stdout,
        "/opaque-only:\nnew\n\n/tools/data:\nkept\n\n/tools/opaque:\nnew\nfuse.fuse-overlayfs\n2",
        "{:?}",
        logs("volume")
    );
    // ... which ends with it: none is left once the pod has run.
    assert_eq!(fuse_daemons(), "");
    let describe = as_sub_user(&["describe", "fused"]).output();
    assert!(
        describe.stdout.contains(", layers by fuse-overlayfs\n"),
        "{describe:?}"
    );
    // A fuse-overlayfs that fails (here `false` under its name, first in PATH): the start
    // fails, saying which program and where to look.
    let failing = t.dir.file("failing");
    std::fs::create_dir_all(&failing).unwrap();
    std::os::unix::fs::symlink(which("false").unwrap(), failing.join("fuse-overlayfs")).unwrap();
    let path = format!("{}:{}", failing.display(), std::env::var("PATH").unwrap());
    let run = as_sub_user(&["run", "--rootless-overlay", "fuse-overlayfs"])
        .env("PATH", &path)
        .arg(&manifest)
        .output();
    assert_eq!(run.code(), 1, "{run:?}");
    let said = format!(
        "Error: failed to start container app: cannot mount its image's layers (fuse-overlayfs failed; run it by hand to see why): {}/fuse-overlayfs: Input/output error",
        failing.display()
    );
    assert!(run.stderr.contains(&said), "{said}\n{run:?}");
    // Under a keeper (live restore) alike: the keeper's child starts it.
    let manifest = write_pod(
        "kept",
        "  containers:\n  - name: app\n    image: registry.test/layered:v1\n    command: [/bin/sh, -c, 'busybox ls /data; busybox grep -c fuse-overlayfs /proc/self/mountinfo']\n",
    );
    let run = as_sub_user(&[
        "run",
        "-q",
        "--live-restore",
        "--rootless-overlay",
        "fuse-overlayfs",
    ])
    .arg(&manifest)
    .output();
    let logs = as_sub_user(&["logs", "kept", "app"]).output();
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    assert_eq!(logs.stdout, "kept\n1", "{logs:?}");
    assert_eq!(fuse_daemons(), "");
    // Left to choose (auto), the kernel's overlay first, and fuse-overlayfs where the kernel
    // refuses one: here an image of more layers than it stacks (500).
    let load = as_sub_user(&["image", "load"])
        .arg(deeper(
            t.dir.file("deepest"),
            &bb,
            501,
            "registry.test/deepest:v1",
        ))
        .output();
    assert_eq!(load.code(), 0, "{load:?}");
    let manifest = write_pod(
        "deepest",
        "  containers:\n  - name: app\n    image: registry.test/deepest:v1\n    command: [/bin/sh, -c, 'busybox ls /l | busybox wc -l; busybox cat /l/500; busybox grep -c fuse-overlayfs /proc/self/mountinfo']\n",
    );
    let run = as_sub_user(&["run", "-q"]).arg(&manifest).output();
    let logs = as_sub_user(&["logs", "deepest", "app"]).output();
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    assert_eq!(logs.stdout, "500\n500\n1", "{logs:?}");
    assert_eq!(fuse_daemons(), "");
    // With the kernel's alone, that image cannot start, and the run says why.
    let run = as_sub_user(&["run", "--rootless-overlay", "kernel"])
        .arg(&manifest)
        .output();
    assert_eq!(run.code(), 1, "{run:?}");
    assert!(
        run.stderr.contains("Error: failed to start container app: cannot mount an overlay in its user namespace (Linux 5.11 and later allow one, of up to 500 layers; an image's layers can be mounted by fuse-overlayfs instead"),
        "{run:?}"
    );
    // In the host's PID namespace the daemon could outlive its container: refused, by field.
    let manifest = write_pod(
        "host-pid",
        "  hostPID: true\n  containers:\n  - name: app\n    image: registry.test/layered:v1\n",
    );
    let run = as_sub_user(&["run", "-q", "--rootless-overlay", "fuse-overlayfs"])
        .arg(&manifest)
        .output();
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(
        run.stderr.contains(
            "container \"app\": image needs fuse-overlayfs (--rootless-overlay fuse-overlayfs)"
        ) && run.stderr.contains("(hostPID)"),
        "{run:?}"
    );
}

/// In the Linux 5.10 VM (`vm_old_kernel`), as uid 1000 without subordinate ids: the kernel's
/// overlay refuses the user namespace, fuse-overlayfs mounts the layers instead (auto), of
/// the root and of an image volume, and the kernel's alone cannot start the container.
#[test]
#[ignore = "runs in the Linux 5.10 VM (vm_old_kernel)"]
fn on_linux_5_10_the_layers_are_mounted_by_fuse_overlayfs() {
    assert!(
        std::env::var_os("PODVISOR_VM_SCENARIO").is_some(),
        "runs in the VM"
    );
    let bb = std::fs::read("/bin/busybox").unwrap();
    let t = Images::new();
    // No opaque directory: the guest's store is on a tmpfs, which has no user xattrs before
    // Linux 6.6 (the host's test has one).
    let layout = Layout::new(t.dir.file("layout"))
        .layer(
            Compression::Gzip,
            &[
                Entry::Dir("bin"),
                Entry::File("bin/busybox", &bb, 0o755),
                Entry::Symlink("bin/sh", "busybox"),
                Entry::Hardlink("bin/bb", "bin/busybox"),
                Entry::Dir("data"),
                Entry::File("data/gone", b"hidden by a whiteout\n", 0o644),
                Entry::File("data/kept", b"kept\n", 0o644),
            ],
        )
        .layer(
            Compression::Zstd,
            &[Entry::File("data/.wh.gone", b"", 0o644)],
        )
        .finish(
            "registry.test/old:v1",
            json!({"config": {"Env": ["PATH=/bin"]}}),
        );
    let load = t.load(&layout);
    assert_eq!(load.code(), 0, "{load:?}");
    let manifest = t.dir.file("pod.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: old}\nspec:\n  restartPolicy: Never\n  volumes: [{name: tools, image: {reference: registry.test/old:v1}}]\n  containers:\n  - name: app\n    image: registry.test/old:v1\n    command: [/bin/sh, -c, 'busybox ls /data; test /bin/bb -ef /bin/busybox && echo linked; busybox grep -E \" / /(tools)? \" /proc/self/mountinfo | busybox sed \"s/.* - //; s/ .*//\"; echo written > /data/new && busybox cat /data/new; busybox ls /tools/data']\n    volumeMounts: [{name: tools, mountPath: /tools}]\n",
    )
    .unwrap();
    let run = t.podvisor(&["run", "-q"]).arg(&manifest).output();
    let logs = t.podvisor(&["logs", "old", "app"]).output();
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    assert_eq!(
        logs.stdout, "kept\nlinked\nfuse.fuse-overlayfs\nfuse.fuse-overlayfs\nwritten\nkept",
        "{logs:?}"
    );
    let describe = t.podvisor(&["describe", "old"]).output();
    assert!(
        describe
            .stdout
            .contains(", layers by fuse-overlayfs where the kernel refuses an overlay\n"),
        "{describe:?}"
    );
    let run = t
        .podvisor(&["run", "--rootless-overlay", "kernel"])
        .arg(&manifest)
        .output();
    assert_eq!(run.code(), 1, "{run:?}");
    assert!(
        run.stderr.contains(
            "cannot mount an overlay in its user namespace (Linux 5.11 and later allow one"
        ) && run.stderr.contains("Operation not permitted"),
        "{run:?}"
    );
}
