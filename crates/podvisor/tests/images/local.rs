//! Images loaded from layouts and archives: how they run, what is refused.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::layout::{deep, layered, Compression, Entry, Layout};
use super::Images;
use crate::harness::*;

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
fn an_images_users_and_groups_are_read_as_its_merged_layers_show_them() {
    let bb = require!();
    let t = Images::new();
    // Each of /etc/passwd and /etc/group is the file of the layer that shows it: the user
    // is named in the middle layer, over a lower one; the groups come from the top layer,
    // over a whiteout in the middle one of the lowest layer's file.
    let layout = Layout::new(t.dir.file("layout"))
        .layer(
            Compression::Gzip,
            &[
                Entry::Dir("bin"),
                Entry::File("bin/busybox", &bb, 0o755),
                Entry::Symlink("bin/sh", "busybox"),
                Entry::Dir("etc"),
                Entry::File("etc/passwd", b"svc:x:4242:100::/:/bin/sh\n", 0o644),
                Entry::File("etc/group", b"svc:x:4343:\nold:x:5555:svc\n", 0o644),
            ],
        )
        .layer(
            Compression::None,
            &[
                Entry::Dir("etc"),
                Entry::File("etc/passwd", b"svc:x:4242:4343::/:/bin/sh\n", 0o644),
                Entry::File("etc/.wh.group", b"", 0o644),
            ],
        )
        .layer(
            Compression::None,
            &[
                Entry::Dir("etc"),
                Entry::File("etc/group", b"svc:x:4343:\nextra:x:4444:svc\n", 0o644),
            ],
        )
        .finish(
            "registry.test/users:v1",
            json!({"config": {
                "Entrypoint": ["/bin/sh", "-c"],
                "Cmd": ["/bin/busybox id -u; /bin/busybox id -g; /bin/busybox id -G"],
                "Env": ["PATH=/bin"],
                "User": "svc",
            }}),
        );
    let out = t.load(&layout);
    assert_eq!(out.code(), 0, "{out:?}");
    let run = t.run(
        "users",
        "  restartPolicy: Never\n  containers:\n  - name: app\n    image: registry.test/users:v1\n",
    );
    let logs = t.out(&["logs", "users", "app"]);
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    assert_eq!(logs.stdout, "4242\n4343\n4343 4444", "{logs:?}");
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
        .args(["build", "-q", "--no-cache", "-t", &tag])
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

#[test]
fn without_root_an_image_runs_in_a_user_namespace_with_its_layers_merged() {
    let bb = require!();
    let has_range = std::fs::read_to_string("/etc/subuid")
        .is_ok_and(|t| t.lines().any(|l| l.starts_with("podvisor-sub:")));
    if !has_range || !have("setpriv", "rootless images") || !have("newuidmap", "rootless images") {
        skip("no podvisor-sub in /etc/subuid (.ci/run makes it), or no setpriv / newuidmap");
        return;
    }
    let t = Images::new();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(t.dir.file(""), std::fs::Permissions::from_mode(0o777)).unwrap();
    let layout = layered(t.dir.file("layout"), &bb);
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
    // Loaded without root: the opaque directory is marked as an overlay in a user namespace
    // reads it (`user.overlay.opaque`).
    let load = as_sub_user(&["image", "load"]).arg(&layout).output();
    assert_eq!(load.code(), 0, "{load:?}");
    // Runs pod `name` of `spec` as podvisor-sub to its end: the run, and app's logs.
    let run_pod = |name: &str, spec: &str| {
        let manifest = t.dir.file(&format!("{name}.yaml"));
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  restartPolicy: Never\n{spec}"
        );
        std::fs::write(&manifest, text).unwrap();
        let run = as_sub_user(&["run", "-q"]).arg(&manifest).output();
        (run, as_sub_user(&["logs", name, "app"]).output())
    };
    let (run, logs) = run_pod(
        "rootless",
        "  volumes: [{name: tools, image: {reference: registry.test/layered:v1}}]\n  containers:\n  - name: app\n    image: registry.test/layered:v1\n    env: [{name: MINE, value: container}]\n  - name: volume\n    image: registry.test/layered:v1\n    command: [/bin/sh, -c, '/bin/busybox ls /tools/data /tools/opaque /opaque-only']\n    volumeMounts:\n    - {name: tools, mountPath: /tools}\n    - {name: tools, mountPath: /opaque-only, subPath: opaque}\n",
    );
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    // What the root test sees: the whiteout and the opaque directory hide what is below
    // them, the hard link, the image's env, WorkingDir and User (4242:4343, subordinate
    // ids of podvisor-sub outside).
    assert_eq!(
        logs.stdout,
        "cmd\n/data:\nkept\n\n/opaque:\nnew\nlinked\nimage container\n/srv\n4242\n4343",
        "{logs:?}"
    );
    // The image as a volume too: an overlay of its layers in the container's user namespace,
    // and a subPath of it.
    let volume = as_sub_user(&["logs", "rootless", "volume"]).output();
    assert_eq!(
        volume.stdout, "/opaque-only:\nnew\n\n/tools/data:\nkept\n\n/tools/opaque:\nnew",
        "{volume:?}"
    );
    // An image of 100 layers: its overlays, in the user namespace too, are mounted from
    // short links to the layers (their paths overflow mount(2)'s page of options).
    let load = as_sub_user(&["image", "load"])
        .arg(deep(t.dir.file("deep"), &bb))
        .output();
    assert_eq!(load.code(), 0, "{load:?}");
    let (run, logs) = run_pod(
        "deep",
        "  volumes: [{name: deep, image: {reference: registry.test/deep:v1}}]\n  containers:\n  - name: app\n    image: registry.test/deep:v1\n    command: [/bin/sh, -c, 'busybox ls /l | busybox wc -l; busybox cat /sub/42']\n    volumeMounts: [{name: deep, mountPath: /sub, subPath: l}]\n",
    );
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    assert_eq!(logs.stdout, "99\n42", "{logs:?}");
    let describe = as_sub_user(&["describe", "rootless"]).output();
    assert!(
        describe.stdout.contains(
            "Root:         images (registry.test/layered:v1), private layer per start, rootless (user namespace: uids 0-"
        ),
        "{describe:?}"
    );
    // Owners: the layer's are set through the user namespace, so that the container sees
    // them (its user may write in its home) and they are subordinate ids on the host.
    let owned = Layout::new(t.dir.file("owned-layout"))
        .layer(
            Compression::Gzip,
            &[
                Entry::Dir("bin"),
                Entry::File("bin/busybox", &bb, 0o755),
                Entry::Symlink("bin/sh", "busybox"),
                Entry::Dir("home"),
                Entry::Owned("home/svc", None, 4242, 4343, 0o700),
                Entry::Owned("home/svc/tool", Some(b"#!/bin/sh\n"), 4242, 4343, 0o4750),
            ],
        )
        // A second layer with owners of its own: the owners of both are set in one go.
        .layer(
            Compression::None,
            &[
                Entry::Dir("home"),
                Entry::Owned("home/ops", None, 4250, 4351, 0o750),
            ],
        )
        .finish(
            "registry.test/owned:v1",
            json!({"config": {
                "Entrypoint": ["/bin/sh", "-c"],
                "Cmd": ["/bin/busybox stat -c '%u:%g %a' /home/svc /home/svc/tool /home/ops; echo mine > /home/svc/f && /bin/busybox cat /home/svc/f"],
                "User": "4242:4343",
            }}),
        );
    let load = as_sub_user(&["image", "load"]).arg(&owned).output();
    assert_eq!(load.code(), 0, "{load:?}");
    let (run, logs) = run_pod(
        "owned",
        "  containers:\n  - name: app\n    image: registry.test/owned:v1\n",
    );
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    assert_eq!(
        logs.stdout, "4242:4343 700\n4242:4343 4750\n4250:4351 750\nmine",
        "{logs:?}"
    );
    // An owner beyond this user's subordinate ids is refused, naming the layer and the file;
    // the layer before it is kept (whole and checked), the refused one is not.
    let layers = || {
        std::fs::read_dir(t.store().join("layers/sha256"))
            .unwrap()
            .count()
    };
    let before = layers();
    let beyond = Layout::new(t.dir.file("beyond-layout"))
        .layer(
            Compression::None,
            &[Entry::Dir("bin"), Entry::File("bin/busybox", &bb, 0o700)],
        )
        .layer(
            Compression::None,
            &[
                Entry::Dir("srv"),
                Entry::Owned("srv/far", None, 70000, 70001, 0o755),
            ],
        )
        .finish("registry.test/beyond:v1", json!({"config": {}}));
    let load = as_sub_user(&["image", "load"]).arg(&beyond).output();
    assert_ne!(load.code(), 0, "{load:?}");
    assert!(
        load.stderr.contains("srv/far is owned by 70000:70001, outside the ids this user's subordinate ids map (0-65536"),
        "{load:?}"
    );
    assert_eq!(std::fs::read_dir(t.store().join("tmp")).unwrap().count(), 0);
    assert_eq!(layers(), before + 1);
    let first = |file: &str| -> u32 {
        let text = std::fs::read_to_string(file).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("podvisor-sub:"))
            .unwrap();
        line.split(':').nth(1).unwrap().parse().unwrap()
    };
    let home = std::fs::read_dir(t.store().join("layers/sha256"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("home/svc"))
        .find(|p| p.exists())
        .unwrap();
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&home).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (first("/etc/subuid") + 4241, first("/etc/subgid") + 4342)
    );
    // This user cannot remove what subordinate ids own; `image rm` does, through the
    // user namespace.
    for name in [
        "registry.test/owned:v1",
        "registry.test/layered:v1",
        "registry.test/deep:v1",
    ] {
        let rm = as_sub_user(&["image", "rm", name]).output();
        assert_eq!(rm.code(), 0, "{rm:?}");
    }
    let left = std::fs::read_dir(t.store().join("layers/sha256"))
        .unwrap()
        .count();
    assert_eq!(left, 0);
    // Without $PODVISOR_STATE_BASE a user's store is data of theirs: under
    // $XDG_DATA_HOME (~/.local/share), apart from the runs' state. (Empty is unset.)
    let home = t.dir.file("home");
    let load = as_sub_user(&["image", "load"])
        .arg(&owned)
        .env("PODVISOR_STATE_BASE", "")
        .env("XDG_DATA_HOME", "")
        .env("HOME", &home)
        .output();
    assert_eq!(load.code(), 0, "{load:?}");
    assert!(home
        .join(".local/share/podvisor/images/images.json")
        .is_file());
}
