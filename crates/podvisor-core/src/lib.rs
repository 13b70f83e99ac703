//! podvisor's pure core: the rules of supervision as data and functions.
//!
//! Nothing here performs I/O, reads a clock or sleeps: callers pass `now` and inputs in and get
//! decisions back, so every timing rule is testable on a fake clock in milliseconds. The PID 1
//! build links this crate too, so it must stay free of heavy dependencies unless they sit behind
//! a feature.

// The 120-line limit (clippy.toml) is for product code; unit tests read top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod backoff;
pub mod clock;
pub mod devices;
#[cfg(feature = "supervision")]
pub mod document;
pub mod duration;
pub mod escalation;
pub mod lifecycle;
pub mod namespaces;
pub mod probe;
pub mod record;
pub mod restart;
#[cfg(feature = "spec")]
pub mod seccomp;
pub mod security;
pub mod signals;
#[cfg(feature = "spec")]
pub mod spec;
pub mod stage;
