//! Processes and signals: spawning, the one reaper, signal delivery and naming, finding a
//! process's descendants, and reading its /proc stat. `sys/` is the only place in podvisor allowed to use `unsafe`.

pub mod descendants;
pub mod errno;
pub mod failpoint;
pub mod settle;
pub mod signal;
#[cfg(feature = "full")]
pub(crate) mod starters;
pub mod stat;
#[cfg(feature = "full")]
pub mod streams;
pub mod sys;
