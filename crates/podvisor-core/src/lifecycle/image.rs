//! A container's image before each of its starts, as the kubelet's `EnsureImageExists`
//! (pkg/kubelet/images/image_manager.go): the shell is asked (`Effect::EnsureImage`) and says
//! how it went (`Input::Image`); a failed pull leaves the container waiting in `ErrImagePull`,
//! then `ImagePullBackOff` until the image back-off (10 s doubling to 300 s, per container)
//! lets it try again; `Never` with no image leaves it in `ErrImageNeverPull`, looked at again
//! at each sync. Nothing is counted as a restart.

use std::sync::Arc;
use std::time::Duration;

use super::container::ImagePull;
use super::io::{Effect, EventType, ImageFailure, ImageReport};
use super::reconcile::CONFIG_RETRY;
use super::state::{ContainerState, WaitingReason};
use super::Pod;
use crate::clock::Instant;

/// The kubelet's image pull back-off (`flowcontrol.NewBackOff(backOffPeriod,
/// MaxContainerBackOff)` of its image manager).
pub(super) const IMAGE_BACKOFF_FIRST: Duration = Duration::from_secs(10);
pub(super) const IMAGE_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// How long a failed pull shows `ErrImagePull` before `ImagePullBackOff` (the kubelet's pod
/// worker says it at its next sync, a moment later).
pub(super) const BACKOFF_SAID_AFTER: Duration = Duration::from_secs(1);

impl ImagePull {
    /// When something is due: a try, or saying `ImagePullBackOff`.
    pub(super) fn deadline(&self) -> Option<Instant> {
        if self.asked {
            return None;
        }
        let say = (self.failed_at)
            .filter(|_| !self.told)
            .map(|t| t + BACKOFF_SAID_AFTER);
        [self.retry_at, say].into_iter().flatten().min()
    }
}

impl Pod {
    /// `true` while container `i`'s image holds its start back: asked for, or in its back-off.
    pub(super) fn image_blocks(&mut self, i: usize, now: Instant, fx: &mut Vec<Effect>) -> bool {
        let Some(image) = self.plan.containers[i].image.clone() else {
            return false;
        };
        let pull = &self.containers[i].image;
        if pull.ready {
            return false;
        }
        if pull.asked {
            return true;
        }
        if pull.retry_at.is_some_and(|at| now < at) {
            let settled = pull
                .failed_at
                .is_some_and(|t| now >= t + BACKOFF_SAID_AFTER);
            if let (Some(error), false, true) = (pull.failed.clone(), pull.told, settled) {
                self.changed = true;
                let c = &mut self.containers[i];
                c.image.told = true;
                c.state = ContainerState::Waiting {
                    reason: WaitingReason::ImagePullBackOff,
                    message: Some(format!(
                        "Back-off pulling image {image:?}: ErrImagePull: {error}"
                    )),
                };
                let message = format!("Back-off pulling image {image:?}");
                fx.push(self.container_event(i, EventType::Normal, "BackOff", message));
                let error = "Error: ImagePullBackOff".to_string();
                fx.push(self.container_event(i, EventType::Warning, "Failed", error));
            }
            return true;
        }
        self.containers[i].image.asked = true;
        fx.push(Effect::EnsureImage(i));
        true
    }

    /// What the shell said of container `i`'s image.
    pub(super) fn image_report(
        &mut self,
        now: Instant,
        i: usize,
        report: ImageReport,
        fx: &mut Vec<Effect>,
    ) {
        let Some(image) = self.plan.containers[i].image.clone() else {
            return;
        };
        if !self.containers[i].image.asked {
            return;
        }
        match report {
            ImageReport::Pulling => {
                let message = format!("Pulling image {image:?}");
                fx.push(self.container_event(i, EventType::Normal, "Pulling", message));
            }
            ImageReport::Ready {
                pulled, non_root, ..
            } => {
                // The core's own copy from now on (the shell's plan is as it was made).
                Arc::make_mut(&mut self.plan).containers[i].non_root = non_root;
                self.containers[i].image = ImagePull {
                    ready: true,
                    ..ImagePull::default()
                };
                let message = pulled.unwrap_or_else(|| {
                    format!("Container image {image:?} already present on machine")
                });
                fx.push(self.container_event(i, EventType::Normal, "Pulled", message));
            }
            ImageReport::Failed { reason, message } => {
                self.failed_image(now, i, &image, reason, message, fx);
            }
        }
    }

    fn failed_image(
        &mut self,
        now: Instant,
        i: usize,
        image: &str,
        reason: ImageFailure,
        message: String,
        fx: &mut Vec<Effect>,
    ) {
        self.changed = true;
        let failure = note_failure(&mut self.containers[i].image, now, image, reason, &message);
        self.containers[i].state = ContainerState::Waiting {
            reason: failure.waiting,
            message: Some(message),
        };
        if let Some((reason, text)) = failure.manager {
            fx.push(self.container_event(i, EventType::Warning, reason, text));
        }
        fx.push(self.container_event(i, EventType::Warning, "Failed", failure.start));
    }
}

/// What a failed try leaves: the container's waiting reason, the image manager's event (reason,
/// message) and the start's error event.
pub(super) struct Failure {
    pub(super) waiting: WaitingReason,
    pub(super) manager: Option<(&'static str, String)>,
    pub(super) start: String,
}

/// The back-off bookkeeping of a failed try of `image` (the kubelet's image manager: a failed
/// pull backs off 10 s doubling to 300 s; `Never`, a bad name or an unusable image are looked at
/// again at each sync), and what it leaves.
pub(super) fn note_failure(
    pull: &mut ImagePull,
    now: Instant,
    image: &str,
    reason: ImageFailure,
    message: &str,
) -> Failure {
    pull.asked = false;
    pull.told = false;
    let (waiting, manager, start) = match reason {
        ImageFailure::Pull => {
            let backoff = pull
                .backoff
                .map_or(IMAGE_BACKOFF_FIRST, |b| (b * 2).min(IMAGE_BACKOFF_MAX));
            pull.backoff = Some(backoff);
            pull.retry_at = Some(now + backoff);
            pull.failed = Some(message.to_string());
            pull.failed_at = Some(now);
            (
                WaitingReason::ErrImagePull,
                Some((
                    "Failed",
                    format!("Failed to pull image {image:?}: {message}"),
                )),
                "Error: ErrImagePull".to_string(),
            )
        }
        ImageFailure::NeverPull => {
            pull.retry_at = Some(now + CONFIG_RETRY);
            (
                WaitingReason::ErrImageNeverPull,
                Some(("ErrImageNeverPull", message.to_string())),
                "Error: ErrImageNeverPull".to_string(),
            )
        }
        ImageFailure::InvalidName => {
            // Tried again at each sync, with the same answer (the kubelet's
            // `EnsureImageExists`): `InspectFailed`, then the start's `Failed`.
            pull.retry_at = Some(now + CONFIG_RETRY);
            (
                WaitingReason::InvalidImageName,
                Some(("InspectFailed", message.to_string())),
                "Error: InvalidImageName".to_string(),
            )
        }
        ImageFailure::Create => {
            pull.retry_at = Some(now + CONFIG_RETRY);
            (
                WaitingReason::CreateContainerError,
                None,
                format!("Error: {message}"),
            )
        }
    };
    Failure {
        waiting,
        manager,
        start,
    }
}
