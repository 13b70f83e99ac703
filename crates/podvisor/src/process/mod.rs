//! Processes and signals: spawning, the one reaper, signal delivery and naming, and finding a
//! process's descendants. `sys/` is the only place in podvisor allowed to use `unsafe`.

pub mod descendants;
pub mod errno;
pub mod failpoint;
pub mod signal;
pub mod sys;
