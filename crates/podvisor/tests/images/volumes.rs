//! Image volumes (`volumes[].image`): an image's files mounted read-only in the containers
//! that mount the volume, of a host-root pod and of a pod of images alike; the pull's events are
//! the pod's; a subPath is what the merged image shows there; a volume whose image is absent
//! holds back only its containers, and one no container mounts is pulled all the same, as the
//! kubelet pulls it, holding back nothing; prune keeps what a running pod's volumes use.

use serde_json::json;

use super::layout::{deep, layered, Compression, Entry, Layout};
use super::Images;
use crate::harness::*;

/// A host-root pod (no annotation) of `spec`.
fn host_pod(t: &Images, name: &str, spec: &str) -> std::path::PathBuf {
    let manifest = t.dir.file(&format!("{name}.yaml"));
    std::fs::write(
        &manifest,
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  terminationGracePeriodSeconds: 1\n{spec}"),
    )
    .unwrap();
    manifest
}

#[test]
fn an_image_volume_shows_the_images_layers_read_only_in_host_and_image_roots() {
    let bb = require!();
    let t = Images::new();
    // Three layers with a whiteout and an opaque directory; and one of a single layer.
    assert_eq!(t.load(&layered(t.dir.file("layout"), &bb)).code(), 0);
    let one = Layout::new(t.dir.file("one"))
        .layer(
            Compression::Gzip,
            &[
                Entry::Dir("conf"),
                Entry::File("conf/app.ini", b"one layer\n", 0o644),
            ],
        )
        .finish("registry.test/one:v1", json!({"config": {}}));
    assert_eq!(t.load(&one).code(), 0);
    let mnt = t.dir.file("mnt");
    let script = format!(
        "ls {m}/tools/data; ls {m}/tools/opaque; cat {m}/tools/srv/ready {m}/conf/conf/app.ini; \
         touch {m}/tools/x 2>/dev/null || echo read-only; touch {m}/conf/x 2>/dev/null || echo read-only; \
         exec sleep 600",
        m = mnt.display()
    );
    let manifest = host_pod(
        &t,
        "vols",
        &format!(
            "  volumes:\n  - name: tools\n    image: {{reference: registry.test/layered:v1}}\n  - name: conf\n    image: {{reference: registry.test/one:v1, pullPolicy: Never}}\n  - name: spare\n    image: {{reference: registry.test/absent:v1, pullPolicy: Never}}\n  containers:\n  - name: app\n    command: [/bin/sh, -c, {script:?}]\n    volumeMounts:\n    - {{name: tools, mountPath: {m}/tools}}\n    - {{name: conf, mountPath: {m}/conf, readOnly: false}}\n",
            m = mnt.display()
        ),
    );
    let mut run = t.podvisor(&["run", "-q"]).arg(&manifest).start();
    wait_until("app has looked", || {
        t.out(&["logs", "vols", "app"])
            .stdout
            .contains("read-only\nread-only")
    });
    assert_eq!(
        t.out(&["logs", "vols", "app"]).stdout,
        "kept\nnew\nready\none layer\nread-only\nread-only"
    );
    // The pull is the pod's; the image is not the container's (it runs on the host's root).
    let events = t.out(&["events", "vols"]).stdout;
    assert!(
        events.contains("Pulled      pod           Container image \"registry.test/layered:v1\" already present on machine"),
        "{events}"
    );
    // A volume no container mounts is made sure of too; that it cannot be had changes
    // nothing for the containers.
    assert!(
        events.contains("\"registry.test/absent:v1\" is not present with pull policy of Never"),
        "{events}"
    );
    // `podvisor exec` joins the container's mounts: it sees the volume too.
    let exec = t.out(&[
        "exec",
        "vols",
        "--",
        "cat",
        &format!("{}/tools/srv/ready", mnt.display()),
    ]);
    assert_eq!(exec.stdout, "ready", "{exec:?}");
    // Prune keeps the images a running pod's volumes use.
    let other = Layout::new(t.dir.file("other"))
        .layer(Compression::None, &[Entry::File("x", b"x", 0o644)])
        .finish("registry.test/other:v1", json!({"config": {}}));
    assert_eq!(t.load(&other).code(), 0);
    let pruned = t.out(&["image", "prune"]);
    assert_eq!(
        pruned.stdout, "Deleted: registry.test/other:v1",
        "{pruned:?}"
    );
    assert_eq!(t.out(&["stop", "vols"]).code(), 0);
    assert!(run.wait().success());
    run.assert_no_leftovers();
    // The mount points podvisor made on the host for the run are gone with it.
    assert!(!mnt.exists(), "{} is left", mnt.display());

    // A pod of images: the volume inside its root, beside the image's own files.
    let run = t.run(
        "inside",
        "  restartPolicy: Never\n  volumes:\n  - name: tools\n    image: {reference: registry.test/one:v1}\n  containers:\n  - name: app\n    image: registry.test/layered:v1\n    command: [/bin/sh, -c, 'cat /tools/conf/app.ini /srv/ready']\n    volumeMounts: [{name: tools, mountPath: /tools}]\n",
    );
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(t.out(&["logs", "inside", "app"]).stdout, "one layer\nready");
}

#[test]
fn a_sub_path_of_an_image_volume_is_what_the_merged_image_shows_there() {
    let bb = require!();
    let t = Images::new();
    assert_eq!(t.load(&layered(t.dir.file("layout"), &bb)).code(), 0);
    let m = t.dir.file("mnt");
    let m = m.display();
    // `data` is in two layers (one whites `gone` out), `opaque` is opaque in the second,
    // `etc/passwd` is a file, `bin/sh` a symbolic link to busybox.
    let script = format!(
        "ls {m}/data; ls {m}/opaque; head -n 1 {m}/passwd; test {m}/sh -ef {m}/bb && echo linked; \
         touch {m}/data/x 2>/dev/null || echo read-only; exec sleep 600"
    );
    let mount = |sub: &str, at: &str| {
        format!("    - {{name: tools, mountPath: {m}/{at}, subPath: {sub}}}\n")
    };
    let manifest = host_pod(
        &t,
        "subs",
        &format!(
            "  volumes:\n  - name: tools\n    image: {{reference: registry.test/layered:v1}}\n  containers:\n  - name: missing\n    command: [sleep, '600']\n    volumeMounts:\n{}  - name: app\n    command: [/bin/sh, -c, {script:?}]\n    volumeMounts:\n{}{}{}{}{}",
            mount("data/gone", "gone"),
            mount("data", "data"),
            mount("./opaque/", "opaque"),
            mount("etc/passwd", "passwd"),
            mount("bin/sh", "sh"),
            mount("bin/busybox", "bb"),
        ),
    );
    let mut run = t.podvisor(&["run", "-q"]).arg(&manifest).start();
    wait_until("app has looked", || {
        t.out(&["logs", "subs", "app"])
            .stdout
            .ends_with("read-only")
    });
    assert_eq!(
        t.out(&["logs", "subs", "app"]).stdout,
        "kept\nnew\nroot:x:0:0::/root:/bin/sh\nlinked\nread-only"
    );
    // A subPath the image does not have: that container is not created (the kubelet's
    // CreateContainerError, with a `Failed` event), and tried again; the others run.
    let why = "subPath \"data/gone\" of image volume \"tools\": \"data/gone\" does not exist in the image";
    assert_eq!(
        t.waiting("subs"),
        ("CreateContainerError".to_string(), why.to_string())
    );
    let events = t.out(&["events", "subs"]).stdout;
    assert!(events.contains(&format!("Error: {why}")), "{events}");
    let pod: serde_json::Value =
        serde_json::from_str(&t.out(&["status", "subs", "-o", "json"]).stdout).unwrap();
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    assert!(
        pod["status"]["containerStatuses"][1]["state"]["running"].is_object(),
        "{pod}"
    );
    assert_eq!(t.out(&["stop", "subs"]).code(), 0);
    assert!(run.wait().success());
    run.assert_no_leftovers();
    assert!(!t.dir.file("mnt").exists());
}

#[test]
fn an_absent_volume_image_holds_back_only_the_containers_that_mount_it() {
    let bb = require!();
    let t = Images::new();
    let mnt = t.dir.file("mnt");
    let manifest = host_pod(
        &t,
        "later",
        &format!(
            "  volumes:\n  - name: tools\n    image: {{reference: registry.test/layered:v1, pullPolicy: Never}}\n  containers:\n  - name: app\n    command: [/bin/sh, -c, 'cat {m}/srv/ready; exec sleep 600']\n    volumeMounts: [{{name: tools, mountPath: {m}}}]\n  - name: other\n    command: [sleep, '600']\n",
            m = mnt.display()
        ),
    );
    let mut run = t.podvisor(&["run", "-q"]).arg(&manifest).start();
    wait_until("app waits in ErrImageNeverPull", || {
        t.waiting("later").0 == "ErrImageNeverPull"
    });
    let status = t.out(&["status", "later", "-o", "json"]).stdout;
    let pod: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(
        pod["status"]["containerStatuses"][1]["state"]["running"].is_object(),
        "{status}"
    );
    let events = t.out(&["events", "later"]).stdout;
    assert!(
        events.contains("ErrImageNeverPull   pod") || events.contains("ErrImageNeverPull  pod"),
        "{events}"
    );
    assert!(events.contains("Error: ErrImageNeverPull"), "{events}");
    // Loaded meanwhile: the next look (every 10 s) finds it, and app starts.
    assert_eq!(t.load(&layered(t.dir.file("layout"), &bb)).code(), 0);
    wait_until("app has read the volume", || {
        t.out(&["logs", "later", "app"]).stdout == "ready"
    });
    let pod: serde_json::Value =
        serde_json::from_str(&t.out(&["status", "later", "-o", "json"]).stdout).unwrap();
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(t.out(&["stop", "later"]).code(), 0);
    assert!(run.wait().success());
    run.assert_no_leftovers();
}

#[test]
fn image_volumes_are_checked_before_the_run() {
    let t = Images::new();
    let bad = host_pod(
        &t,
        "bad",
        "  volumes:\n  - name: a\n    image: {pullPolicy: Sometimes}\n  containers:\n  - name: app\n    command: [sleep, '1']\n    volumeMounts: [{name: a, mountPath: /a, subPath: /x}]\n",
    );
    let out = t.podvisor(&["validate"]).arg(&bad).output();
    assert_eq!(out.code(), 2, "{out:?}");
    for expected in [
        "spec.volumes[0].image.reference: Required value",
        "spec.volumes[0].image.pullPolicy: Unsupported value: \"Sometimes\"",
        "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"/x\": must be a relative path",
    ] {
        assert!(out.stderr.contains(expected), "{expected}\n{out:?}");
    }
}

/// An image of 100 layers: their paths overflow the one page of options mount(2) takes, so
/// its overlays (a root, a volume, a volume's subPath, on an image's root and on the host's)
/// are mounted from short links to the layers.
#[test]
fn an_image_of_a_hundred_layers_mounts_as_a_root_and_as_volumes() {
    let bb = require!();
    let t = Images::new();
    let deep = deep(t.dir.file("deep"), &bb);
    assert_eq!(t.load(&deep).code(), 0);
    let count = "busybox ls /l | busybox wc -l; busybox ls /vol/l | busybox wc -l; \
                 busybox ls /sub | busybox wc -l; busybox cat /sub/57";
    // Under --live-restore: the keeper starts the container from what the run sends it.
    let run = t
        .pod(
            "deep",
            &format!(
            "  restartPolicy: Never\n  volumes:\n  - name: deep\n    image: {{reference: registry.test/deep:v1}}\n  containers:\n  - name: app\n    image: registry.test/deep:v1\n    command: [/bin/sh, -c, {count:?}]\n    volumeMounts:\n    - {{name: deep, mountPath: /vol}}\n    - {{name: deep, mountPath: /sub, subPath: l}}\n"
            ),
        )
        .arg("--live-restore")
        .output();
    let logs = t.out(&["logs", "deep", "app"]);
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    assert_eq!(logs.stdout, "99\n99\n99\n57", "{logs:?}");
    // On the host's root, the volume's overlay is mounted from the links as well.
    let mnt = t.dir.file("mnt");
    let manifest = host_pod(
        &t,
        "deephost",
        &format!(
            "  restartPolicy: Never\n  volumes:\n  - name: deep\n    image: {{reference: registry.test/deep:v1}}\n  containers:\n  - name: app\n    command: [/bin/sh, -c, \"ls {m}/l | wc -l; cat {m}/l/99\"]\n    volumeMounts:\n    - {{name: deep, mountPath: {m}}}\n",
            m = mnt.display()
        ),
    );
    let run = t.podvisor(&["run", "-q"]).arg(&manifest).output();
    let logs = t.out(&["logs", "deephost", "app"]);
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    assert_eq!(logs.stdout, "99\n99", "{logs:?}");
}
