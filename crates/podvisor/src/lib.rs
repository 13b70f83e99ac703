//! podvisor: runs containers' processes the way the kubelet does, and survives the way good init
//! systems do. This library holds the binary's modules so that they can be tested in place; the
//! binary (`main.rs`) only dispatches.

// The 120-line limit (clippy.toml) is for product code; unit tests read top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

#[cfg(feature = "full")]
pub mod api;
#[cfg(feature = "full")]
pub mod cgroup;
pub mod cli;
#[cfg(feature = "full")]
pub mod client;
#[cfg(feature = "full")]
pub mod fuzzing;
#[cfg(feature = "full")]
pub mod image;
pub mod init;
#[cfg(feature = "full")]
pub mod keeper;
#[cfg(feature = "full")]
pub mod mountinfo;
#[cfg(feature = "full")]
pub mod probe;
pub mod process;
#[cfg(feature = "full")]
pub mod security;
pub mod state;
#[cfg(feature = "full")]
pub mod status;
pub mod stdio;
#[cfg(feature = "full")]
pub mod supervisor;
#[cfg(test)]
mod testing;
#[cfg(feature = "full")]
pub mod time;
#[cfg(feature = "full")]
pub mod top;
