//! A container started from an image, with Kubernetes' rules over the image's config
//! (`kuberuntime_container.go`, containerd's `WithImageConfig`): `command` replaces the
//! Entrypoint and drops Cmd, `args` replaces Cmd; the image's Env comes first and the
//! container's wins; the container's `workingDir`, else the image's WorkingDir, else `/`; the
//! image's User unless `runAsUser` is set (its group unless `runAsGroup` is). And the pull
//! policy: what a start needs done for its image.

use oci_spec::image::ImageConfiguration;
use podvisor_core::security::ImageUser;
use podvisor_core::spec::plan::{ContainerExec, ImageRoot};

use super::{ImageError, ImageRecord, Store};

/// containerd's PATH for an image that sets none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `imagePullPolicy`, defaulted as the API server does: `Always` for `:latest` or no tag
/// (`name` is normalized: no tag became `:latest`), `IfNotPresent` otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Always,
    IfNotPresent,
    Never,
}

pub fn pull_policy(written: Option<&str>, name: &str) -> Policy {
    match written {
        Some("Always") => Policy::Always,
        Some("Never") => Policy::Never,
        Some("IfNotPresent") => Policy::IfNotPresent,
        _ if !super::reference::has_digest(name) && name.ends_with(":latest") => Policy::Always,
        _ => Policy::IfNotPresent,
    }
}

/// What a start needs done for its image (the kubelet's `shouldPullImage`).
#[derive(Debug)]
pub enum Decision {
    Present(ImageRecord),
    Pull,
    /// Not present, and the policy says never to pull.
    NeverPull,
}

pub fn decide(store: &Store, image: &str, written: Option<&str>) -> Result<Decision, ImageError> {
    let name = super::normalize(image)?;
    let present = store.find(&name)?;
    Ok(match (pull_policy(written, &name), present) {
        (Policy::Never, None) => Decision::NeverPull,
        (Policy::IfNotPresent | Policy::Never, Some(found)) => Decision::Present(found),
        (Policy::Always, _) | (Policy::IfNotPresent, None) => Decision::Pull,
    })
}

/// The kubelet's message for an image not there under `Never`.
pub fn never_pull_message(image: &str) -> String {
    format!("Container image {image:?} is not present with pull policy of Never")
}

/// The kubelet's `Pulled` message after a pull.
pub fn pulled_message(image: &str, pulled: &super::pull::Pulled) -> String {
    format!(
        "Successfully pulled image {image:?} in {:.3?} ({:.3?} including waiting). Image size: {} bytes.",
        pulled.took, pulled.waited, pulled.image.size
    )
}

/// Makes container exec `x` (as the manifest gave it) one of image `found`: its config under
/// Kubernetes' rules, its root. Returns the image's user, for `runAsNonRoot`.
pub fn apply(
    x: &mut ContainerExec,
    image: &str,
    found: &ImageRecord,
    store: &Store,
) -> Result<ImageUser, ImageError> {
    let config = ImageConfiguration::from_reader(&store.read_blob(&found.id)?[..])
        .map_err(|e| ImageError::Invalid(format!("config {}: {e}", found.id)))?;
    let root = image_root(image, found, &config, store)?;
    apply_config(x, &config, root).ok_or_else(|| {
        ImageError::Invalid(format!(
            "no command specified: neither the container nor its image {image:?} (Entrypoint, Cmd) names one"
        ))
    })
}

fn image_root(
    spec_image: &str,
    found: &ImageRecord,
    config: &ImageConfiguration,
    store: &Store,
) -> Result<ImageRoot, ImageError> {
    let lower_dirs = store.lower_dirs(found)?;
    // Each file as the container sees it: the layer that shows it may differ for each, and
    // a whiteout, an opaque or linked `/etc` above decide which (or none).
    let etc_file = |path: &str| match super::merged::find(&lower_dirs, path) {
        Ok(super::merged::Found::File(f)) => Some(f.display().to_string()),
        _ => None,
    };
    let c = config.config().as_ref();
    Ok(ImageRoot {
        image: spec_image.to_string(),
        name: found.name.clone(),
        image_id: found.image_id(),
        lower_dirs: lower_dirs.iter().map(|d| d.display().to_string()).collect(),
        passwd: etc_file("etc/passwd"),
        group: etc_file("etc/group"),
        user: c.and_then(|c| c.user().clone()).unwrap_or_default(),
        stop_signal: c.and_then(|c| c.stop_signal().clone()),
    })
}

/// Applies the image's config to `x`; `None` when no command results.
fn apply_config(
    x: &mut ContainerExec,
    config: &ImageConfiguration,
    root: ImageRoot,
) -> Option<ImageUser> {
    let c = config.config().clone().unwrap_or_default();
    if !x.command_given {
        let mut argv = c.entrypoint().clone().unwrap_or_default();
        if x.args_given {
            argv.append(&mut x.argv);
        } else {
            argv.extend(c.cmd().clone().unwrap_or_default());
        }
        x.argv = argv;
    }
    if x.argv.is_empty() {
        return None;
    }
    let mut env: Vec<(String, String)> = c
        .env()
        .iter()
        .flatten()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv.clone(), String::new()),
        })
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.insert(0, ("PATH".into(), DEFAULT_PATH.into()));
    }
    for (k, v) in std::mem::take(&mut x.env) {
        match env.iter_mut().find(|(ek, _)| *ek == k) {
            Some(slot) => slot.1 = v,
            None => env.push((k, v)),
        }
    }
    x.env = env;
    if x.working_dir.is_none() {
        let wd = c.working_dir().clone().filter(|w| !w.is_empty());
        x.working_dir = Some(wd.unwrap_or_else(|| "/".into()));
    }
    // The image's user (and group) where the securityContext sets none.
    let (user, group) = match root.user.split_once(':') {
        Some((u, g)) => (u.to_string(), Some(g.to_string())),
        None => (root.user.clone(), None),
    };
    let group_file = root.group.as_deref().map(std::path::Path::new);
    if x.security.run_as_group.is_none() && x.security.run_as_user.is_none() {
        if let Some(g) = group.filter(|g| !g.is_empty()) {
            x.security.run_as_group = g.parse().ok().or_else(|| {
                let groups = group_file
                    .map(crate::security::users::groups)
                    .unwrap_or_default();
                groups.iter().find(|e| e.name == g).map(|e| e.gid)
            });
        }
    }
    x.image = Some(Box::new(root));
    Some(match user.is_empty() {
        true => ImageUser::root(),
        false => ImageUser {
            uid: user.parse().ok(),
            name: user,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> ImageConfiguration {
        ImageConfiguration::from_reader(json.as_bytes()).unwrap()
    }

    fn root() -> ImageRoot {
        ImageRoot {
            image: "app".into(),
            name: "docker.io/library/app:latest".into(),
            image_id: String::new(),
            lower_dirs: Vec::new(),
            passwd: None,
            group: None,
            user: "1000:2000".into(),
            stop_signal: None,
        }
    }

    fn plan_of(containers: &str) -> podvisor_core::spec::plan::RunPlan {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: {{podvisor.io/root-from: image}}}}\nspec:\n  containers:\n{containers}"
        );
        let manifest = podvisor_core::spec::load("pod.yaml", &text).unwrap();
        let host = podvisor_core::spec::plan::HostFacts {
            all_capabilities: podvisor_core::security::CapSet::all(40),
            seccomp_default: false,
            hostname: "node1".into(),
            uid: "uid-1".into(),
            cpus: 2,
            memory: 1 << 30,
        };
        podvisor_core::spec::plan::plan(
            &manifest,
            &host,
            podvisor_core::backoff::BackoffPolicy::default(),
        )
    }

    const IMAGE: &str = r#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},
        "config":{"Entrypoint":["/bin/app"],"Cmd":["--serve"],"Env":["PATH=/bin","A=image","B=image"],"WorkingDir":"/srv","User":"1000:2000"}}"#;

    #[test]
    fn the_default_pull_policy_is_always_for_latest_only() {
        assert_eq!(
            pull_policy(None, "docker.io/library/a:latest"),
            Policy::Always
        );
        assert_eq!(
            pull_policy(None, "docker.io/library/a:1"),
            Policy::IfNotPresent
        );
        assert_eq!(
            pull_policy(None, "docker.io/library/a@sha256:00"),
            Policy::IfNotPresent
        );
        assert_eq!(pull_policy(Some("Never"), "x:latest"), Policy::Never);
    }

    #[test]
    fn kubernetes_rules_over_the_image_config() {
        let mut p = plan_of("  - {name: a, image: app, env: [{name: B, value: mine}, {name: C, value: c}]}\n  - {name: b, image: app, args: [--check]}\n  - {name: c, image: app, command: [sh], workingDir: /w}\n");
        for i in 0..3 {
            apply_config(&mut p.exec[i], &config(IMAGE), root()).unwrap();
        }
        assert_eq!(p.exec[0].argv, ["/bin/app", "--serve"]);
        assert_eq!(p.exec[1].argv, ["/bin/app", "--check"]);
        assert_eq!(p.exec[2].argv, ["sh"]);
        let env: Vec<String> = p.exec[0]
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(env, ["PATH=/bin", "A=image", "B=mine", "C=c"]);
        assert_eq!(p.exec[0].working_dir.as_deref(), Some("/srv"));
        assert_eq!(p.exec[2].working_dir.as_deref(), Some("/w"));
        assert_eq!(p.exec[0].security.run_as_group, Some(2000));
        assert_eq!(p.pod.containers[0].image.as_deref(), Some("app"));
        assert!(p.exec[0].image.is_some());
    }

    #[test]
    fn an_image_without_a_command_and_a_container_without_one_cannot_start() {
        let mut p = plan_of("  - {name: a, image: app}\n");
        let bare =
            r#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
        assert!(apply_config(&mut p.exec[0], &config(bare), root()).is_none());
    }
}
