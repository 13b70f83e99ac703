//! Containers of images before each start (`Effect::EnsureImage`), and image volumes before
//! the first start of a container that mounts them (`Effect::EnsureVolumeImage`): what their
//! pull policy asks, decided at once from the store; a pull on a thread of its own, so that the
//! pod's loop never waits for a registry, its end told through a pipe in the epoll. Once a
//! container's image is there its exec is made again from the manifest's and the image's
//! config, with its credentials, environment and `imageID`; once a volume's is, its layers are
//! what the containers that mount it get.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{channel, Receiver, Sender};

use podvisor_core::lifecycle::{ImageFailure, ImageReport, Input};
use podvisor_core::spec::plan::ContainerExec;
use podvisor_core::spec::volumes::VolumePlan;

use super::{setup, spawn::container_env, Supervisor, TOKEN_IMAGE};
use crate::image::config::{self, Decision};
use crate::image::pull::{self, PullOptions, Pulled};
use crate::image::{ImageError, Store};
use crate::process::sys::{self, EV_READ};

/// What a pull is for.
#[derive(Debug, Clone, Copy)]
enum Target {
    Container(usize),
    Volume(usize),
}

type Done = (Target, Result<Pulled, ImageError>);

/// The pulls of a pod of images, or of image volumes.
#[derive(Debug)]
pub(super) struct Images {
    store: Store,
    /// Each container's exec as the manifest gave it, before any image.
    manifest: Vec<ContainerExec>,
    /// Each image volume: (name, reference, pullPolicy as written).
    volumes: Vec<(String, String, Option<String>)>,
    done_tx: Sender<Done>,
    done_rx: Receiver<Done>,
    /// Written by a pull's thread when it ends; in the epoll.
    wake_read: std::fs::File,
    wake_write: OwnedFd,
    seccomp_profiles: std::path::PathBuf,
    pull: PullOptions,
    /// Seccomp filters compiled for these containers' starts, kept: a restart of a container
    /// of an image compiles nothing again.
    compiled: crate::security::Compiled,
}

impl Images {
    /// For a pod whose containers run from their images, or that has image volumes; `None`
    /// otherwise.
    pub(super) fn new(
        plan: &podvisor_core::spec::plan::RunPlan,
        epoll: &sys::Epoll,
        seccomp_profiles: std::path::PathBuf,
        hosts_dir: std::path::PathBuf,
    ) -> io::Result<Option<Images>> {
        let volumes: Vec<_> = (plan.volumes.iter())
            .filter_map(|v| match v {
                VolumePlan::Image {
                    name,
                    reference,
                    pull_policy,
                } => Some((name.clone(), reference.clone(), pull_policy.clone())),
                _ => None,
            })
            .collect();
        if !plan.root_from_image && volumes.is_empty() {
            return Ok(None);
        }
        let store = Store::open().map_err(|e| io::Error::other(e.to_string()))?;
        let (wake_read, wake_write) = sys::pipe()?;
        epoll.add(wake_read.as_raw_fd(), TOKEN_IMAGE, EV_READ)?;
        let (done_tx, done_rx) = channel();
        Ok(Some(Images {
            store,
            manifest: plan.exec.clone(),
            volumes,
            done_tx,
            done_rx,
            wake_read,
            wake_write,
            seccomp_profiles,
            pull: PullOptions {
                hosts_dir,
                secrets: plan.pull_secrets.clone(),
                progress: false,
            },
            compiled: crate::security::Compiled::default(),
        }))
    }
}

impl Supervisor {
    /// `Effect::EnsureImage(i)`: the inputs it leads to now.
    pub(super) fn ensure_image(&mut self, i: usize) -> Vec<Input> {
        let image = self.info.images[i].clone();
        let policy = self.plan.exec[i].pull_policy.clone();
        self.ensure(Target::Container(i), image, policy)
    }

    /// `Effect::EnsureVolumeImage(v)`: the inputs it leads to now.
    pub(super) fn ensure_volume_image(&mut self, v: usize) -> Vec<Input> {
        let Some((_, image, policy)) = self.images.as_ref().and_then(|i| i.volumes.get(v)) else {
            return Vec::new();
        };
        let (image, policy) = (image.clone(), policy.clone());
        self.ensure(Target::Volume(v), image, policy)
    }

    fn ensure(&mut self, target: Target, image: String, policy: Option<String>) -> Vec<Input> {
        let Some(images) = self.images.as_ref() else {
            return Vec::new();
        };
        let failed =
            |reason, message| vec![report(target, ImageReport::Failed { reason, message })];
        match config::decide(&images.store, &image, policy.as_deref()) {
            Err(ImageError::Name { why, .. }) => failed(
                ImageFailure::InvalidName,
                format!("Failed to apply default image tag {image:?}: couldn't parse image name {image:?}: {why}"),
            ),
            Err(e) => failed(ImageFailure::Pull, e.to_string()),
            Ok(Decision::NeverPull) => {
                failed(ImageFailure::NeverPull, config::never_pull_message(&image))
            }
            Ok(Decision::Present(found)) => vec![self.image_there(target, &found, None)],
            Ok(Decision::Pull) => {
                let store = Store::at(images.store.root().to_path_buf());
                let done = images.done_tx.clone();
                let options = images.pull.clone();
                let wake = images.wake_write.try_clone().map(std::fs::File::from);
                let spawned = wake.and_then(|wake| {
                    std::thread::Builder::new()
                        .name("pull".into())
                        .spawn(move || {
                            let result = store.and_then(|s| pull::pull(&s, &image, &options));
                            let _ = done.send((target, result));
                            let _ = (&wake).write_all(b"x");
                        })
                });
                match spawned {
                    Ok(_) => vec![report(target, ImageReport::Pulling)],
                    Err(e) => failed(ImageFailure::Pull, format!("cannot start the pull: {e}")),
                }
            }
        }
    }

    /// The pulls that ended (the wake pipe was readable): their inputs.
    pub(super) fn pulls_done(&mut self) -> Vec<Input> {
        let Some(images) = self.images.as_mut() else {
            return Vec::new();
        };
        let mut buf = [0u8; 64];
        let _ = images.wake_read.read(&mut buf);
        let done: Vec<_> = images.done_rx.try_iter().collect();
        let volumes: Vec<String> = images.volumes.iter().map(|v| v.1.clone()).collect();
        let mut inputs = Vec::new();
        for (target, result) in done {
            let image = match target {
                Target::Container(i) => self.info.images[i].clone(),
                Target::Volume(v) => volumes[v].clone(),
            };
            inputs.push(match result {
                Ok(pulled) => {
                    let message = config::pulled_message(&image, &pulled);
                    self.image_there(target, &pulled.image, Some(message))
                }
                Err(e) => report(
                    target,
                    ImageReport::Failed {
                        reason: ImageFailure::Pull,
                        message: e.to_string(),
                    },
                ),
            });
        }
        inputs
    }

    fn image_there(
        &mut self,
        target: Target,
        found: &crate::image::ImageRecord,
        pulled: Option<String>,
    ) -> Input {
        match target {
            Target::Container(i) => self.image_ready(i, found, pulled),
            Target::Volume(v) => self.volume_image_ready(v, found, pulled),
        }
    }

    /// Image volume `v`'s image `found` is there: its layers are what its mounts get.
    fn volume_image_ready(
        &mut self,
        v: usize,
        found: &crate::image::ImageRecord,
        pulled: Option<String>,
    ) -> Input {
        let Some(images) = self.images.as_ref() else {
            return Input::Tick;
        };
        let name = images.volumes[v].0.clone();
        let layers = images
            .store
            .layer_dirs(found)
            .and_then(|layers| match layers.is_empty() {
                true => Err(ImageError::Invalid(format!(
                    "image {} has no layers to mount",
                    found.name
                ))),
                false => Ok(layers),
            });
        let answer = match layers {
            Ok(layers) => {
                // The subPaths of it that containers mount, each looked up in the image.
                let mounts = self.plan.exec.iter().enumerate().flat_map(|(i, x)| {
                    let of_it = x.mounts.iter().filter(|m| m.volume == name);
                    of_it.filter_map(move |m| Some((i, m.sub_path.as_deref()?)))
                });
                let mounts: Vec<(usize, &str)> = mounts.collect();
                let subs = mounts.iter().map(|(_, sub)| *sub);
                let problems = self.volumes.image_ready(&name, layers, subs);
                let unmountable = (mounts.iter())
                    .filter_map(|(i, sub)| {
                        let (_, why) = problems.iter().find(|(s, _)| s == sub)?;
                        Some((
                            *i,
                            format!("subPath {sub:?} of image volume {name:?}: {why}"),
                        ))
                    })
                    .collect();
                ImageReport::Ready {
                    pulled,
                    non_root: None,
                    unmountable,
                }
            }
            Err(e) => ImageReport::Failed {
                reason: ImageFailure::Create,
                message: e.to_string(),
            },
        };
        report(Target::Volume(v), answer)
    }

    /// Container `i` of image `found`: its exec, credentials and environment made from it.
    fn image_ready(
        &mut self,
        i: usize,
        found: &crate::image::ImageRecord,
        pulled: Option<String>,
    ) -> Input {
        let Some(images) = self.images.as_ref() else {
            return Input::Tick;
        };
        let create_error = |message: String| {
            Input::Image(
                i,
                ImageReport::Failed {
                    reason: ImageFailure::Create,
                    message,
                },
            )
        };
        let mut x = images.manifest[i].clone();
        let image = self.info.images[i].clone();
        let user = match config::apply(&mut x, &image, found, &images.store) {
            Ok(user) => user,
            Err(e) => return create_error(e.to_string()),
        };
        let non_root = x.security.non_root(user);
        let previous = std::mem::replace(&mut self.plan.exec[i], x);
        let profiles = images.seccomp_profiles.clone();
        let mut compiled = self
            .images
            .as_mut()
            .map(|i| std::mem::take(&mut i.compiled))
            .unwrap_or_default();
        let creds = setup::credentials_of(
            &self.plan,
            i,
            self.root_layer.as_ref(),
            profiles,
            &mut compiled,
        );
        if let Some(images) = self.images.as_mut() {
            images.compiled = compiled;
        }
        match creds {
            Ok(c) => self.credentials[i] = c,
            Err(e) => {
                self.plan.exec[i] = previous;
                return create_error(e.to_string());
            }
        }
        if let Some(id) = self.info.image_ids.get_mut(i) {
            *id = found.image_id();
        }
        // The image's StopSignal, unless the container names one.
        self.info.stop_signals = self.plan.stop_signal_names();
        let hostname = (self.plan.namespaces.hostname.clone()).unwrap_or_else(sys::hostname);
        self.base_envs[i] = container_env(&hostname, &self.plan.exec[i]);
        Input::Image(
            i,
            ImageReport::Ready {
                pulled,
                non_root,
                unmountable: Vec::new(),
            },
        )
    }
}

/// The input that tells how a pull for `target` went.
fn report(target: Target, report: ImageReport) -> Input {
    match target {
        Target::Container(i) => Input::Image(i, report),
        Target::Volume(v) => Input::VolumeImage(v, report),
    }
}
