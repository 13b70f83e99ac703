//! Image volumes (`volumes[].image`, GA in Kubernetes 1.36): an image's files mounted
//! read-only in the containers that mount the volume. As the kubelet pulls them in `SyncPod`
//! (pkg/kubelet/kuberuntime, `getImageVolumes`), an image volume is a pod's, not a container's:
//! made sure of once for the pod (and again after a whole-pod restart, which refreshes what the
//! pod shares), before the first start of a container that mounts it (one that no container
//! mounts, once the pod is admitted); its `Pulling`, `Pulled`,
//! `Failed` and `BackOff` events are the pod's. A container that mounts a volume whose image
//! cannot be had waits (`ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull`,
//! `InvalidImageName`) with a `Failed` "Error: …" event of its own, as `toKubeContainerImageVolumes`
//! fails its start; the pod's other containers go on.

use super::container::ImagePull;
use super::image::{note_failure, BACKOFF_SAID_AFTER};
use super::io::{Effect, EventType, ImageReport};
use super::reconcile::CONFIG_RETRY;
use super::state::{ContainerState, WaitingReason};
use super::Pod;
use crate::clock::Instant;

/// Where an image volume's image stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct VolumePull {
    pub(super) pull: ImagePull,
    /// Containers held back by it since it was last asked for: told how it went.
    pub(super) waiting: Vec<usize>,
    /// Containers that cannot mount it as its image is (a `subPath` it does not have).
    pub(super) unmountable: Vec<Unmountable>,
}

/// A container whose mount of an image volume cannot be made from the image there: why, and
/// when its start is tried again (the kubelet's `CreateContainerError`, tried again at each
/// sync with the same answer until the image changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unmountable {
    pub(super) container: usize,
    pub(super) why: String,
    pub(super) retry_at: Option<Instant>,
}

impl Pod {
    /// `true` while an image volume container `i` mounts holds its start back.
    pub(super) fn volume_images_block(
        &mut self,
        i: usize,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) -> bool {
        let mut blocks = false;
        for v in self.plan.containers[i].image_volumes.clone() {
            let Some(volume) = self.volume_images.get_mut(v) else {
                continue;
            };
            if volume.pull.ready {
                let Some(u) = volume.unmountable.iter_mut().find(|u| u.container == i) else {
                    continue;
                };
                blocks = true;
                if u.retry_at.is_some_and(|at| now < at) {
                    continue;
                }
                u.retry_at = Some(now + CONFIG_RETRY);
                let why = u.why.clone();
                self.changed = true;
                self.containers[i].state = ContainerState::Waiting {
                    reason: WaitingReason::CreateContainerError,
                    message: Some(why.clone()),
                };
                let error = format!("Error: {why}");
                fx.push(self.container_event(i, EventType::Warning, "Failed", error));
                continue;
            }
            blocks = true;
            if !volume.waiting.contains(&i) {
                volume.waiting.push(i);
            }
            if volume.pull.asked {
                continue;
            }
            if volume.pull.retry_at.is_some_and(|at| now < at) {
                self.volume_backing_off(v, i, now, fx);
                continue;
            }
            volume.pull.asked = true;
            fx.push(Effect::EnsureVolumeImage(v));
        }
        blocks
    }

    /// Image volumes that no container mounts are made sure of all the same, as the kubelet's
    /// `getImageVolumes` pulls every image volume of the pod at each sync: with their events
    /// and back-off, and nothing else (no container waits for them).
    pub(super) fn ensure_unmounted_volume_images(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        for v in 0..self.volume_images.len() {
            let mounted = (self.plan.containers.iter()).any(|c| c.image_volumes.contains(&v));
            let pull = &mut self.volume_images[v].pull;
            if mounted || pull.ready || pull.asked {
                continue;
            }
            if pull.retry_at.is_some_and(|at| now < at) {
                // In its back-off: said once the failure has settled, as for a container.
                self.volume_backoff_settled(v, now, fx);
                continue;
            }
            pull.asked = true;
            fx.push(Effect::EnsureVolumeImage(v));
        }
    }

    /// Volume `v`'s failed pull, once the failure has settled (`None` before), with the pod's
    /// `BackOff` said once per failure.
    fn volume_backoff_settled(
        &mut self,
        v: usize,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) -> Option<String> {
        let pull = &self.volume_images[v].pull;
        let settled = (pull.failed_at).is_some_and(|t| now >= t + BACKOFF_SAID_AFTER);
        let error = pull.failed.clone().filter(|_| settled)?;
        if !pull.told {
            self.volume_images[v].pull.told = true;
            let message = format!("Back-off pulling image {:?}", self.plan.image_volumes[v]);
            fx.push(self.pod_event(EventType::Normal, "BackOff", message));
        }
        Some(error)
    }

    /// Volume `v`'s pull failed and its back-off lasts: once the failure has settled, the
    /// pod's `BackOff` (once per failure) and container `i` in `ImagePullBackOff`.
    fn volume_backing_off(&mut self, v: usize, i: usize, now: Instant, fx: &mut Vec<Effect>) {
        let image = self.plan.image_volumes[v].clone();
        let Some(error) = self.volume_backoff_settled(v, now, fx) else {
            return;
        };
        let told = matches!(
            self.containers[i].state,
            ContainerState::Waiting {
                reason: WaitingReason::ImagePullBackOff,
                ..
            }
        );
        if !told {
            self.changed = true;
            self.containers[i].state = ContainerState::Waiting {
                reason: WaitingReason::ImagePullBackOff,
                message: Some(format!(
                    "Back-off pulling image {image:?}: ErrImagePull: {error}"
                )),
            };
            let error = "Error: ImagePullBackOff".to_string();
            fx.push(self.container_event(i, EventType::Warning, "Failed", error));
        }
    }

    /// What the shell said of image volume `v`'s image.
    pub(super) fn volume_image_report(
        &mut self,
        now: Instant,
        v: usize,
        report: ImageReport,
        fx: &mut Vec<Effect>,
    ) {
        let Some(image) = self.plan.image_volumes.get(v).cloned() else {
            return;
        };
        if !self.volume_images[v].pull.asked {
            return;
        }
        match report {
            ImageReport::Pulling => {
                let message = format!("Pulling image {image:?}");
                fx.push(self.pod_event(EventType::Normal, "Pulling", message));
            }
            ImageReport::Ready {
                pulled,
                unmountable,
                ..
            } => {
                let volume = &mut self.volume_images[v];
                volume.pull = ImagePull {
                    ready: true,
                    ..ImagePull::default()
                };
                volume.waiting.clear();
                volume.unmountable = (unmountable.into_iter())
                    .map(|(container, why)| Unmountable {
                        container,
                        why,
                        retry_at: None,
                    })
                    .collect();
                let message = pulled.unwrap_or_else(|| {
                    format!("Container image {image:?} already present on machine")
                });
                fx.push(self.pod_event(EventType::Normal, "Pulled", message));
            }
            ImageReport::Failed { reason, message } => {
                self.changed = true;
                let volume = &mut self.volume_images[v];
                let failure = note_failure(&mut volume.pull, now, &image, reason, &message);
                let waiting = std::mem::take(&mut volume.waiting);
                if let Some((reason, text)) = failure.manager {
                    fx.push(self.pod_event(EventType::Warning, reason, text));
                }
                for i in waiting {
                    if self.containers[i].live() {
                        continue;
                    }
                    self.containers[i].state = ContainerState::Waiting {
                        reason: failure.waiting,
                        message: Some(message.clone()),
                    };
                    let start = failure.start.clone();
                    fx.push(self.container_event(i, EventType::Warning, "Failed", start));
                }
            }
        }
    }

    /// A whole-pod restart: every image volume is made sure of again (an `Always` volume sees
    /// its tag's newest image), its back-off kept.
    pub(super) fn refresh_volume_images(&mut self) {
        for volume in &mut self.volume_images {
            volume.pull.ready = false;
        }
    }
}
