//! Images through the binary: OCI image layouts the tests make themselves (layers tarred from
//! busybox-static, in each compression, with whiteouts, opaque directories and hard links, an
//! index of two platforms), `docker save` archives of the Docker engine here, layers that try
//! to escape, blobs whose digest lies, and pods that run from what was loaded: Entrypoint and
//! Cmd, Env, WorkingDir and User under Kubernetes' rules, exec probes and `podvisor exec`
//! inside the image, the kubelet's image events and refusals.
//!
//! `layout` writes the layouts, `registry` runs a registry and pushes to it; `local` runs what
//! was loaded, `pulls` what was pulled, `volumes` image volumes.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::harness::*;

/// A state base of the test's own: its image store and its pods.
pub(super) struct Images {
    pub(super) dir: TempDir,
}

impl Images {
    pub(super) fn new() -> Images {
        Images {
            dir: TempDir::new(),
        }
    }

    pub(super) fn podvisor(&self, args: &[&str]) -> Run {
        Run::new(podvisor())
            .env("PODVISOR_STATE_BASE", self.dir.file("base"))
            .args(args)
    }

    pub(super) fn load(&self, path: &Path) -> Output {
        self.podvisor(&["image", "load"]).arg(path).output()
    }

    /// `podvisor run` of a pod whose containers run from their images (as every pod does
    /// without the annotation `podvisor.io/root-from: host`).
    pub(super) fn pod(&self, name: &str, spec: &str) -> Run {
        let manifest = self.dir.file(&format!("{name}.yaml"));
        std::fs::write(
            &manifest,
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n{spec}"),
        )
        .unwrap();
        self.podvisor(&["run", "-q"]).arg(manifest)
    }

    /// Runs such a pod to its end.
    pub(super) fn run(&self, name: &str, spec: &str) -> Output {
        self.pod(name, spec).output()
    }

    /// The first container's waiting state (reason, message), or empty strings.
    pub(super) fn waiting(&self, pod: &str) -> (String, String) {
        let out = self.out(&["status", pod, "-o", "json"]);
        let Ok(v) = serde_json::from_str::<Value>(&out.stdout) else {
            return Default::default();
        };
        let w = &v["status"]["containerStatuses"][0]["state"]["waiting"];
        let text = |f: &str| w[f].as_str().unwrap_or_default().to_string();
        (text("reason"), text("message"))
    }

    pub(super) fn out(&self, args: &[&str]) -> Output {
        self.podvisor(args).output()
    }

    pub(super) fn store(&self) -> PathBuf {
        self.dir.file("base").join(".images")
    }
}

/// busybox-static and a few of its applets.
pub(super) fn busybox_entries() -> Option<Vec<u8>> {
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
        let Some(bb) = super::busybox_entries() else {
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

mod fuse;
mod layout;
mod links;
mod local;
mod names;
mod pulls;
mod registry;
mod volumes;
