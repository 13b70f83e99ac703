//! Symbolic links on the way to a mount point in a container's own root: an image's absolute
//! link (`/var/run -> /run`, as in Debian's images) and one a container left in a volume are
//! followed as the container sees them, inside its root: the volume is where the container
//! looks for it, and nothing is made on the host. A link that names what the image does not
//! have (`/etc/resolv.conf -> /run/...`) has it made, as runc does.

use std::path::Path;

use serde_json::json;

use super::layout::{Compression, Entry, Layout};
use super::Images;
use crate::harness::*;

#[test]
fn mount_points_follow_links_inside_the_containers_root_never_the_hosts() {
    let bb = require!();
    let t = Images::new();
    let layout = Layout::new(t.dir.file("layout"))
        .layer(
            Compression::Gzip,
            &[
                Entry::Dir("bin"),
                Entry::File("bin/busybox", &bb, 0o755),
                Entry::Symlink("bin/sh", "busybox"),
                Entry::Dir("run"),
                Entry::Dir("tmp"),
                Entry::Dir("var"),
                Entry::Symlink("var/run", "/run"),
                Entry::Dir("etc"),
                Entry::Symlink("etc/resolv.conf", "/run/pvtest-resolve/stub.conf"),
                Entry::Symlink("etc/hostname", "../run/pvtest-hostname"),
            ],
        )
        .finish(
            "registry.test/links:v1",
            json!({"config": {"Env": ["PATH=/bin"]}}),
        );
    assert_eq!(t.load(&layout).code(), 0);
    // The init container leaves a link to /tmp in the shared volume; the app then mounts a
    // volume through it, and one through the image's /var/run.
    let host = [
        "/run/pvtest-secrets",
        "/tmp/pvtest-mount-escape",
        "/run/pvtest-resolve",
        "/run/pvtest-hostname",
    ];
    let run = t.run(
        "links",
        "  restartPolicy: Never
  initContainers:
  - name: plant
    image: registry.test/links:v1
    command: [sh, -c, 'ln -s /tmp /shared/out']
    volumeMounts: [{name: shared, mountPath: /shared}]
  containers:
  - name: app
    image: registry.test/links:v1
    command: [sh, -c, 'echo in > /var/run/pvtest-secrets/v/f && cat /run/pvtest-secrets/v/f && echo there > /shared/out/pvtest-mount-escape/g && cat /tmp/pvtest-mount-escape/g && test -f /run/pvtest-resolve/stub.conf && test \"$(cat /etc/hostname)\" = \"$(busybox hostname)\" && echo named']
    volumeMounts:
    - {name: v, mountPath: /var/run/pvtest-secrets/v}
    - {name: shared, mountPath: /shared}
    - {name: other, mountPath: /shared/out/pvtest-mount-escape}
  volumes: [{name: v, emptyDir: {}}, {name: shared, emptyDir: {}}, {name: other, emptyDir: {}}]
",
    );
    let made: Vec<&str> = host.into_iter().filter(|p| Path::new(p).exists()).collect();
    for path in &made {
        let _ = std::fs::remove_dir_all(path);
    }
    let logs = t.out(&["logs", "links", "app"]);
    assert_eq!(run.code(), 0, "{run:?}\n{logs:?}");
    // The pod's /etc/hostname and /etc/resolv.conf are bound where the image's links lead.
    assert_eq!(logs.stdout, "in\nthere\nnamed", "{logs:?}");
    assert!(made.is_empty(), "made on the host: {made:?}");
}
