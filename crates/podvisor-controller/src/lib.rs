//! podvisor in a cluster: a kube-rs controller that applies a `Supervision`'s `podRestart`
//! across a namespace (whole-pod restarts through the Eviction API, PodDisruptionBudgets
//! respected, remembered on the pods' owners), and a mutating webhook that wraps opted-in pods'
//! containers with `podvisor init` for staged instrumentation.
//!
//! Depends on podvisor-core's leaves (`escalation`, `stage`, `duration`, and the Supervision
//! blocks of `spec::supervision`) and never on process code: the decisions are the same code
//! `podvisor run` makes them with.

// The 120-line limit (clippy.toml) is for product code; unit tests read top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod crd;
pub mod decide;
pub mod fuzzing;
pub mod lease;
pub mod metrics;
pub mod ratelimit;
pub mod reconcile;
pub mod serve;
pub mod webhook;
