//! A volume mount's `recursiveReadOnly` and `mountPropagation` through the binary: a read-only
//! mount leaves what is mounted below it writable (`Disabled`, the default) or makes it
//! read-only too (`IfPossible`, `Enabled`), as the Docker engine's `bind-recursive` does;
//! `HostToContainer` of a host mount that passes no mounts on is refused as containerd
//! refuses it (that it receives the host's mounts is tested in the cgroup v2 VM, whose kernel
//! propagates them: `guest_v2::placement`); bad values are refused at their line.

use std::path::{Path, PathBuf};

use crate::harness::*;

/// A tmpfs mounted by the test at `point` (made shared or private), unmounted when dropped,
/// whatever the test did.
pub(crate) struct TestMount(PathBuf);

impl TestMount {
    pub(crate) fn new(point: &Path, propagation: &str) -> TestMount {
        std::fs::create_dir_all(point).unwrap();
        let p = point.to_str().unwrap();
        let mount = Run::new("mount")
            .args(["-t", "tmpfs", "pvtest", p])
            .output();
        assert_eq!(mount.code(), 0, "{mount:?}");
        let made = TestMount(point.to_path_buf());
        let set = Run::new("mount").args([propagation, p]).output();
        assert_eq!(set.code(), 0, "{set:?}");
        made
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-R", "-l"])
            .arg(&self.0)
            .output();
    }
}

pub(crate) fn pod(volume: &Path, containers: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: mounts, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - {{name: d, hostPath: {{path: {}, type: Directory}}}}\n  containers:\n{containers}",
        volume.display()
    )
}

/// For each mount point: whether a file can be made at its top and in the mount below it.
const WRITES: &str = "for d in /ro /rro /rrp; do for at in $d $d/sub; do (echo x > $at/f) 2>/dev/null && echo \"$at written\" || echo \"$at refused\"; done; done";

#[test]
fn recursive_read_only_makes_the_mounts_below_read_only_too() {
    if !is_root() {
        skip("the test mounts a tmpfs below the volume (root only)");
        return;
    }
    let dir = TempDir::new();
    let volume = dir.file("vol");
    let _below = TestMount::new(&volume.join("sub"), "--make-private");
    let manifest = pod(
        &volume,
        &format!(
            "  - name: app
    command: [sh, -c, '{WRITES}']
    volumeMounts:
    - {{name: d, mountPath: /ro, readOnly: true}}
    - {{name: d, mountPath: /rro, readOnly: true, recursiveReadOnly: Enabled}}
    - {{name: d, mountPath: /rrp, readOnly: true, recursiveReadOnly: IfPossible}}
"
        ),
    );
    let want = [
        "/ro refused",
        "/ro/sub written",
        "/rro refused",
        "/rro/sub refused",
        "/rrp refused",
        "/rrp/sub refused",
    ];
    for extra in [&[][..], &["--live-restore"][..]] {
        let r = PodRun::new(&manifest);
        let out = r.cmd(extra).output();
        assert_eq!(out.code(), 0, "{extra:?}: {out:?}");
        assert_eq!(r.log_lines("app", 1), want, "{extra:?}");
        // The status names each mount as the kubelet's does, `IfPossible` resolved.
        let status = client(&r, &["status", "-o", "json"]);
        let pod: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
        let mounts = &pod["status"]["containerStatuses"][0]["volumeMounts"];
        let read_only = |path: &str, mode: &str| serde_json::json!({"name": "d", "mountPath": path, "readOnly": true, "recursiveReadOnly": mode});
        let modes = [
            ("/ro", "Disabled"),
            ("/rro", "Enabled"),
            ("/rrp", "Enabled"),
        ];
        let modes: Vec<serde_json::Value> = modes.iter().map(|(p, m)| read_only(p, m)).collect();
        assert_eq!(*mounts, serde_json::Value::from(modes), "{extra:?}");
    }
    if let Err(why) = crate::docker::engine() {
        skip(&why);
        return;
    }
    // The Docker engine's bind mounts: `bind-recursive=writable` is `Disabled`, `readonly`
    // is `Enabled`, and its default `IfPossible` (API 1.44 on); an older engine's read-only
    // bind is `Disabled`'s, and it has no other.
    let image = crate::security::BusyboxImage::build();
    let api = Run::new("docker")
        .args(["version", "--format", "{{.Server.APIVersion}}"])
        .output();
    let (major, minor) = api.stdout.trim().split_once('.').unwrap_or(("1", "0"));
    let recursive = (major.parse().unwrap_or(1), minor.parse().unwrap_or(0)) >= (1u32, 44u32);
    let v = volume.display();
    let mut docker = Run::new("docker").args(["run", "--rm"]);
    let (script, want): (String, &[&str]) = match recursive {
        true => {
            for (dst, option) in [
                ("/ro", ",bind-recursive=writable"),
                ("/rro", ",bind-recursive=readonly,bind-propagation=rprivate"),
                ("/rrp", ""),
            ] {
                let mount = format!("type=bind,src={v},dst={dst},readonly{option}");
                docker = docker.arg("--mount").arg(mount);
            }
            (WRITES.to_string(), &want)
        }
        false => {
            docker = (docker.arg("--mount")).arg(format!("type=bind,src={v},dst=/ro,readonly"));
            (WRITES.replace(" /rro /rrp", ""), &want[..2])
        }
    };
    let docker = docker
        .args([image.tag.as_str(), "sh", "-c", &script])
        .output();
    assert_eq!(docker.code(), 0, "{docker:?}");
    assert_eq!(docker.stdout.lines().collect::<Vec<_>>(), want);
}

#[test]
fn host_to_container_needs_a_host_mount_that_passes_mounts_on() {
    if !is_root() {
        skip("the test mounts a private tmpfs for the volume (root only)");
        return;
    }
    let dir = TempDir::new();
    let volume = dir.file("vol");
    let _private = TestMount::new(&volume, "--make-private");
    let r = PodRun::new(&pod(
        &volume,
        "  - name: app
    command: ['true']
    volumeMounts: [{name: d, mountPath: /data, mountPropagation: HostToContainer}]
",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 1, "{out:?}");
    let real = volume.canonicalize().unwrap();
    let said = format!(
        "volume \"d\": path \"{}\" is mounted on \"{}\" but it is not a shared or slave mount",
        real.display(),
        real.display()
    );
    let events = r.events();
    let failed = events
        .iter()
        .find(|e| e["object"] == "app" && e["reason"] == "Failed");
    let message = failed.map(|e| e["message"].as_str().unwrap_or_default());
    assert!(
        message.is_some_and(|m| m.contains(&said)),
        "{said}\n{events:#?}"
    );
}

#[test]
fn bad_propagation_and_recursive_read_only_are_refused_at_their_line() {
    let dir = TempDir::new();
    let r = PodRun::new(&pod(
        dir.path(),
        "  - name: app
    command: ['true']
    volumeMounts:
    - {name: d, mountPath: /a, mountPropagation: Sideways}
    - {name: d, mountPath: /b, mountPropagation: Bidirectional}
    - {name: d, mountPath: /c, recursiveReadOnly: Enabled}
    - {name: d, mountPath: /d, readOnly: true, recursiveReadOnly: IfPossible, mountPropagation: HostToContainer}
    - {name: d, mountPath: /e, readOnly: true, recursiveReadOnly: Always}
  - name: privileged
    command: ['true']
    securityContext: {privileged: true}
    volumeMounts: [{name: d, mountPath: /f, mountPropagation: Bidirectional}]
",
    ));
    let out = r.cmd(&[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    for said in [
        "pod.yaml:13:32: spec.containers[0].volumeMounts[0].mountPropagation: Unsupported value: \"Sideways\": supported values: \"Bidirectional\", \"HostToContainer\", \"None\"",
        "spec.containers[0].volumeMounts[1].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers",
        "spec.containers[0].volumeMounts[2].recursiveReadOnly: Forbidden: may only be specified when readOnly is true",
        "spec.containers[0].volumeMounts[3].recursiveReadOnly: Forbidden: may only be specified when mountPropagation is None or not specified",
        "spec.containers[0].volumeMounts[4].recursiveReadOnly: Unsupported value: \"Always\": supported values: \"Disabled\", \"Enabled\", \"IfPossible\"",
        "spec.containers[1].volumeMounts[0].mountPropagation: Unsupported value: \"Bidirectional\": podvisor does not propagate",
    ] {
        assert!(out.stderr.contains(said), "{said}\n{}", out.stderr);
    }
}
