//! Leader election through a `coordination.k8s.io` Lease, as client-go's leaderelection does
//! it: the holder renews `renewTime` every `renew_every`; another replica takes the lease only
//! once `leaseDurationSeconds` have passed since the last renewal; every write carries the
//! resourceVersion read, so of two replicas racing, the API server lets one win (409 for the
//! other). A replica that cannot renew within the lease duration stops leading (the process
//! exits and is restarted, as client-go's controllers do), so two replicas never act at once.
//!
//! `step` is the pure rule; `Elector` does the API calls.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// What a replica does with the lease it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// It holds the lease: renew it.
    Renew,
    /// Free or expired: take it.
    Take,
    /// Another replica holds it; it expires in this long.
    Wait(Duration),
}

/// The rule, on `now` in unix milliseconds.
pub fn step(spec: Option<&LeaseSpec>, me: &str, now_ms: i64) -> Step {
    let Some(spec) = spec else { return Step::Take };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == me {
        return Step::Renew;
    }
    if holder.is_empty() {
        return Step::Take;
    }
    let duration_ms = i64::from(spec.lease_duration_seconds.unwrap_or(15)).max(1) * 1000;
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map_or(0, |t| t.0.as_millisecond());
    let expires = renewed + duration_ms;
    if now_ms >= expires {
        Step::Take
    } else {
        Step::Wait(Duration::from_millis((expires - now_ms) as u64))
    }
}

/// One replica's side of the election.
#[derive(Clone)]
pub struct Elector {
    pub api: Api<Lease>,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .finish()
    }
}

impl Elector {
    /// One attempt to acquire or renew at `now`: whether this replica leads after it.
    pub async fn try_lead(&self, now: Timestamp) -> Result<bool, kube::Error> {
        let current = self.api.get_opt(&self.name).await?;
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let stamp = MicroTime(now);
        let next = match step(spec, &self.identity, now.as_millisecond()) {
            Step::Wait(_) => return Ok(false),
            Step::Renew => LeaseSpec {
                renew_time: Some(stamp),
                ..spec.cloned().unwrap_or_default()
            },
            Step::Take => LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
                acquire_time: Some(stamp.clone()),
                renew_time: Some(stamp),
                lease_transitions: Some(
                    spec.and_then(|s| s.lease_transitions).unwrap_or(0)
                        + i32::from(spec.is_some_and(|s| s.holder_identity.is_some())),
                ),
                ..spec.cloned().unwrap_or_default()
            },
        };
        let result = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(next),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // The resourceVersion read stays in the metadata: a concurrent write wins,
                // this one gets 409.
                lease.spec = Some(next);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_conflict() || s.is_already_exists() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_ms: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::from_millisecond(renewed_ms).unwrap())),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn the_rule_of_the_lease() {
        assert_eq!(step(None, "a", 0), Step::Take);
        assert_eq!(step(Some(&lease(Some("a"), 0)), "a", 99_000), Step::Renew);
        assert_eq!(step(Some(&lease(None, 0)), "a", 0), Step::Take);
        assert_eq!(
            step(Some(&lease(Some("b"), 10_000)), "a", 20_000),
            Step::Wait(Duration::from_millis(5_000))
        );
        assert_eq!(
            step(Some(&lease(Some("b"), 10_000)), "a", 25_000),
            Step::Take
        );
    }
}
