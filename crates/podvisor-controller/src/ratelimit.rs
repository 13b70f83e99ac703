//! Rate limits on whole-pod restarts: at most one per owner per `owner_interval`, at most
//! `namespace_max` per namespace within `namespace_window`. A pure value on a given clock (unix
//! milliseconds), so that its rules are tested in milliseconds.
//!
//! PodDisruptionBudgets already bound how many pods are down at once; these limits bound how
//! often the controller asks, so that a bad rollout that crash-loops every pod of a namespace
//! does not become an eviction storm.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub owner_interval: Duration,
    pub namespace_max: u32,
    pub namespace_window: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            owner_interval: Duration::from_secs(60),
            namespace_max: 10,
            namespace_window: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Default)]
pub struct RateLimiter {
    limits: Limits,
    owners: BTreeMap<String, u64>,
    namespaces: BTreeMap<String, VecDeque<u64>>,
}

impl RateLimiter {
    pub fn new(limits: Limits) -> RateLimiter {
        RateLimiter {
            limits,
            ..RateLimiter::default()
        }
    }

    /// `Ok` when a restart may be made now, or how long to wait before asking again.
    pub fn check(&mut self, namespace: &str, owner_uid: &str, now_ms: u64) -> Result<(), Duration> {
        let owner_ms = self.limits.owner_interval.as_millis() as u64;
        let window_ms = self.limits.namespace_window.as_millis() as u64;
        let mut wait = 0;
        if let Some(last) = self.owners.get(owner_uid) {
            wait = wait.max((last + owner_ms).saturating_sub(now_ms));
        }
        let times = self.namespaces.entry(namespace.to_string()).or_default();
        while times.front().is_some_and(|t| t + window_ms <= now_ms) {
            times.pop_front();
        }
        if times.len() as u32 >= self.limits.namespace_max {
            let oldest = times.front().copied().unwrap_or(now_ms);
            wait = wait.max((oldest + window_ms).saturating_sub(now_ms));
        }
        if wait > 0 {
            Err(Duration::from_millis(wait))
        } else {
            Ok(())
        }
    }

    /// Counts a restart made (after `check` allowed it and it was recorded).
    pub fn record(&mut self, namespace: &str, owner_uid: &str, now_ms: u64) {
        self.namespaces
            .entry(namespace.to_string())
            .or_default()
            .push_back(now_ms);
        self.owners.insert(owner_uid.to_string(), now_ms);
    }

    /// `check`, then `record` when allowed.
    pub fn take(&mut self, namespace: &str, owner_uid: &str, now_ms: u64) -> Result<(), Duration> {
        self.check(namespace, owner_uid, now_ms)?;
        self.record(namespace, owner_uid, now_ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_per_owner_per_interval_and_a_cap_per_namespace() {
        let mut r = RateLimiter::new(Limits {
            owner_interval: Duration::from_millis(1000),
            namespace_max: 2,
            namespace_window: Duration::from_millis(5000),
        });
        assert_eq!(r.take("ns", "a", 0), Ok(()));
        assert_eq!(r.take("ns", "a", 400), Err(Duration::from_millis(600)));
        assert_eq!(r.take("ns", "b", 400), Ok(()));
        // The namespace is full until the first restart leaves the window at 5000 ms.
        assert_eq!(r.take("ns", "c", 1000), Err(Duration::from_millis(4000)));
        assert_eq!(r.take("other", "c", 1000), Ok(()));
        assert_eq!(r.take("ns", "c", 4999), Err(Duration::from_millis(1)));
        assert_eq!(r.take("ns", "c", 5000), Ok(()));
        // Refused attempts are not counted.
        assert_eq!(r.take("ns", "a", 5300), Err(Duration::from_millis(100)));
        assert_eq!(r.take("ns", "a", 5400), Ok(()));
    }
}
