//! Processes and signals: spawning, the one reaper, signal delivery and naming, and finding a
//! process's descendants. `sys.rs` is the only file in podvisor allowed to use `unsafe`.

pub mod descendants;
pub mod signal;
pub mod sys;
