//! What a pod leaves on disk, and how it is written and read: the bottom of `podvisor run`.
//!
//! `StateDir` owns every path of a pod's state dir (docs/state.md) and the formats of what is
//! in it: the saved record (`record`), the containers' log files (`logs`), the keepers'
//! sockets, messages and exit notes (`keeper`), the lock that says a run is there, the API's
//! socket and the volumes' and private roots' directories. Everything that reads or writes
//! a state dir (the run, the keeper, the CLI commands, `top`) goes through it, so that a
//! path is joined in one place and a format is written and read by one piece of code.
//!
//! What must survive a kill -9 is written atomically (`file::StateFile`) and read strictly: a
//! file that cannot be read is refused with what to do, never reset behind the user's back.
//! `processes` finds what a run that died left running, by pid and start time. The PID 1
//! build uses `file` and `record` only (`podvisor init --supervision`'s start count).

#[cfg(feature = "full")]
mod dir;

pub mod file;
#[cfg(feature = "full")]
pub mod keeper;
#[cfg(feature = "full")]
pub mod logs;
pub mod processes;
pub mod record;

pub use file::{StateError, StateFile, RESET_REMEDY};

#[cfg(feature = "full")]
pub use dir::{base, config_dir, images_dir, under, Lock, LockError, StateDir, StateDirInUse};

/// A state dir's lock file: a run holds it while it runs (`StateDir::lock`).
pub(crate) const LOCK: &str = "podvisor.lock";
