//! Each container start gets a root of its own, as a runtime's container layer: the host's
//! files beneath, a private writable layer on top that goes with the instance, an empty /tmp,
//! mount points made inside it only, and `readOnlyRootFilesystem`; exec probes and hooks see
//! what the container sees; a host mount that goes away while the pod runs is left out of
//! later starts. Without root: the host's root with a warning, and a read-only root refused.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;

use crate::harness::*;
use crate::probes::stop;

/// A pod of ours, without the `host-root: writable` of the lifecycle tests' helper.
fn private_pod(policy: &str, rest: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: rootfs, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n{rest}")
}

fn root_listing() -> BTreeSet<String> {
    std::fs::read_dir("/")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn writes_outside_volumes_go_with_the_instance_and_tmp_starts_empty() {
    if !is_root() {
        skip("a private root needs root");
        return;
    }
    let tag = format!("podvisor-rootfs-{}", std::process::id());
    let before = root_listing();
    // Instance 1 writes /etc/TAG, /tmp/t and a mount point's sibling, then fails; instance 2
    // must see none of it, and the emptyDir counter shows both ran.
    let r = PodRun::new(&private_pod(
        "OnFailure",
        &format!(
            "  volumes: [{{name: data, emptyDir: {{}}}}]
  containers:
  - name: app
    command: [sh, -c, 'n=$(cat /{tag}/deep/n 2>/dev/null || echo 0); echo $((n+1)) > /{tag}/deep/n; echo tmp=$(ls -A /tmp | wc -l); if [ -e /etc/{tag} ]; then echo etc=seen; else echo etc=fresh; fi; echo x > /etc/{tag}; touch /tmp/t /{tag}/sibling; [ $n -ge 1 ] && exit 0; exit 1']
    volumeMounts: [{{name: data, mountPath: /{tag}/deep}}]
"
        ),
    ));
    let out = r.cmd(&["--backoff-initial", "10ms"]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    for n in [1, 2] {
        let log = r.log("app", n);
        assert!(log.contains("stdout F tmp=0"), "instance {n}: {log}");
        assert!(log.contains("stdout F etc=fresh"), "instance {n}: {log}");
    }
    // Exit 0 came from the second instance, which read the first one's count: the emptyDir
    // outlived the restart that the rest did not.
    // Nothing reached the host: no /etc/TAG, no mount point, the same listing of /.
    assert!(!std::path::Path::new(&format!("/etc/{tag}")).exists());
    assert!(!std::path::Path::new(&format!("/{tag}")).exists());
    assert_eq!(root_listing(), before);
}

#[test]
fn probes_and_hooks_see_the_containers_root() {
    if !is_root() {
        skip("a private root needs root");
        return;
    }
    // The hook writes into the container's own /tmp; the container waits for it and then
    // writes what the readiness probe reads: both in its namespace, none on the host.
    let r = PodRun::new(&private_pod(
        "Always",
        "  containers:
  - name: app
    command: [sh, -c, 'while [ ! -e /tmp/hooked ]; do sleep 0.05; done; echo ok > /tmp/ready; exec sleep 600']
    lifecycle: {postStart: {exec: {command: [touch, /tmp/hooked]}}}
    readinessProbe: {exec: {command: [cat, /tmp/ready]}, periodSeconds: 1}
",
    ));
    let mut p = r.cmd(&[]).start();
    wait_until("the container is ready", || {
        r.reasons("app").iter().any(|x| x == "Ready")
    });
    assert!(!std::path::Path::new("/tmp/hooked").exists());
    assert!(!std::path::Path::new("/tmp/ready").exists());
    stop(&mut p);
}

#[test]
fn a_read_only_root_takes_no_writes_but_its_volumes_do() {
    if !is_root() {
        skip("a private root needs root");
        return;
    }
    let r = PodRun::new(&private_pod(
        "Never",
        "  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - name: ro
    command: [sh, -c, 'touch /etc/x 2>/dev/null && echo etc=written; touch /tmp/x 2>/dev/null && echo tmp=written; touch /scratch/x && echo volume=written']
    securityContext: {readOnlyRootFilesystem: true}
    volumeMounts: [{name: scratch, mountPath: /scratch}]
",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    let log = r.log("ro", 1);
    assert!(
        !log.contains("etc=written") && !log.contains("tmp=written"),
        "{log}"
    );
    assert!(log.contains("volume=written"), "{log}");
}

/// The host's mounts are read once per run and carried into each private root: one that is
/// unmounted and whose mount point is removed later (a container engine's network
/// namespaces under /run/docker/netns come and go so) is left out of the next start, rather
/// than failing every start until the run ends.
#[test]
fn a_host_mount_gone_since_the_run_started_is_left_out() {
    if !is_root() {
        skip("a private root needs root");
        return;
    }
    // A mount point of ours whose mount is the root mount's child, as /run/docker/netns/ID.
    if mount_points().iter().any(|p| p == "/run") {
        skip("/run is a mount here: a mount in it is not carried on its own");
        return;
    }
    let dir = TempDir::under(std::path::Path::new("/run"));
    let path = dir.path().display().to_string();
    let r = PodRun::new(&private_pod(
        "Always",
        &format!(
            "  volumes: [{{name: data, emptyDir: {{}}}}]
  containers:
  - name: app
    command: [sh, -c, 'ls {path}; until [ -e /data/go ]; do sleep 0.1; done; exit 1']
    volumeMounts: [{{name: data, mountPath: /data}}]
"
        ),
    ));
    // In a mount namespace of its own, so that the mount touches no other test.
    let mount = format!(
        "mount -t tmpfs podvisor-test {path} && touch {path}/podvisor-marker && exec \"$0\" \"$@\""
    );
    let wrapper = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &mount,
    ];
    let mut p = r.cmd_under(&wrapper, &[]).start();
    let log = |n: u32| r.dir.file(&format!("state/logs/app/{n}.log"));
    wait_for_file_line(&log(1), "the mount", |l| l.contains("podvisor-marker"));
    let gone = sh_in_mounts_of(p.init_pid(), &format!("umount {path} && rmdir {path}"));
    assert_eq!(gone.code(), 0, "{gone:?}");
    std::fs::write(r.dir.file("state/volumes/data/go"), "").unwrap();
    wait_for_file_line(&log(2), "a line", |_| true);
    let second = r.log("app", 2);
    assert!(second.contains("No such file or directory"), "{second}");
    assert!(
        !r.reasons("app").iter().any(|x| x == "Failed"),
        "{:?}",
        r.events()
    );
    stop(&mut p);
}

/// Whether `nobody` may make user namespaces here (rootless containers).
pub fn user_namespaces_for_nobody() -> bool {
    Run::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["unshare", "-U", "-r", "true"])
        .output()
        .code()
        == 0
}

#[test]
fn without_root_a_user_namespace_gives_the_same_root_of_its_own() {
    if !is_root() {
        skip("needs root to become nobody");
        return;
    }
    if !user_namespaces_for_nobody() {
        skip("this kernel gives nobody no user namespace");
        return;
    }
    let tag = format!("podvisor-rootless-{}", std::process::id());
    let r = PodRun::new(&private_pod(
        "Always",
        &format!(
            "  volumes: [{{name: data, emptyDir: {{}}}}]
  containers:
  - name: app
    command: [sh, -c, 'echo uid=$(id -u) tmp=$(ls -A /tmp | wc -l); echo x > /etc/{tag} && echo etc=written; echo v > /{tag}/f && echo volume=written; touch /tmp/ready; exec sleep 600']
    volumeMounts: [{{name: data, mountPath: /{tag}}}]
    readinessProbe: {{exec: {{command: [cat, /tmp/ready, /etc/{tag}]}}, periodSeconds: 1}}
  - name: ro
    command: [sh, -c, 'touch /etc/x 2>/dev/null && echo etc=written; touch /tmp/x 2>/dev/null && echo tmp=written; echo done; exec sleep 600']
    securityContext: {{readOnlyRootFilesystem: true}}
"
        ),
    ));
    std::fs::set_permissions(r.dir.file(""), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut p = r
        .cmd_under(
            &[
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
            ],
            &[],
        )
        .start();
    // The exec probe reads the container's own /tmp and /etc: it joined its namespaces.
    wait_until("the app is ready", || {
        r.reasons("app").iter().any(|x| x == "Ready")
    });
    let ro_log = r.dir.file("state").join("logs/ro/1.log");
    wait_until("ro has run", || {
        std::fs::read_to_string(&ro_log).is_ok_and(|t| t.contains("done"))
    });
    let log = r.log("app", 1);
    assert!(log.contains("stdout F uid=0 tmp=0"), "{log}");
    assert!(
        log.contains("etc=written") && log.contains("volume=written"),
        "{log}"
    );
    let ro = r.log("ro", 1);
    assert!(
        !ro.contains("etc=written") && !ro.contains("tmp=written"),
        "{ro}"
    );
    assert!(!r.reasons("pod").iter().any(|x| x == "HostRoot"));
    let describe = Run::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(podvisor())
        .args(["describe", "--state-dir"])
        .arg(r.dir.file("state"))
        .output();
    assert!(
        describe
            .stdout
            .contains("Root:         private layer per start, rootless (user namespace)"),
        "{describe:?}"
    );
    // Nothing reached the host.
    assert!(!std::path::Path::new(&format!("/etc/{tag}")).exists());
    assert!(!std::path::Path::new(&format!("/{tag}")).exists());
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
}
