//! Staged instrumentation in a container: `podvisor init --supervision FILE --state-dir DIR
//! [--lock-dir DIR] [--container NAME] -- CMD` (docs/escalation.md).
//!
//! The container's runtime (the kubelet, Docker) restarts the container; podvisor, its PID 1,
//! counts the starts in DIR (an emptyDir: it survives container restarts, not the pod) and gives
//! CMD the environment of the stage that count gives. A new container instance is told apart
//! from another podvisor process of the same instance by a lock file in the lock dir (default
//! /tmp, which a new container gets empty) and the variable `PODVISOR_INSTR_STATE_LOCK`, which
//! CMD and its descendants inherit:
//!
//! | the lock file | the variable | what it means | counted |
//! |---|---|---|---|
//! | absent, made now | absent | (a) a new container start | yes |
//! | present | either | another process of this instance, or (c) a lock dir that outlives restarts | no |
//! | absent, made now | present | (b) a process of this instance removed the lock; it is made again | no |
//! | cannot be made | either | (d) no lock dir, or a read-only one: Disabled, with one warning | no |
//!
//! So with /tmp on a volume (c) the count never grows past the first start and the stage stays
//! Nominal, and (b) counts a start only for a process that lost the variable too.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use podvisor_core::document::supervision;
use podvisor_core::record::InitRecord;
use podvisor_core::stage::{Stage, StagePolicy, StagedEnv, STAGE_VAR};

use crate::state::{record, StateFile};

/// The lock file's name, in the lock dir.
pub const LOCK_FILE: &str = "podvisor-instr-state.lock";
/// The variable that marks the processes of one container instance.
pub const LOCK_VAR: &str = "PODVISOR_INSTR_STATE_LOCK";
/// The start count's file, in the state dir.
pub const STATE_FILE: &str = "podvisor-init.state";

/// The command-line part of staged instrumentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedArgs {
    pub supervision: PathBuf,
    pub state_dir: PathBuf,
    pub lock_dir: PathBuf,
    /// Which container this is, for a Supervision that selects containers.
    pub container: Option<String>,
}

/// What the Supervision document says, as init mode uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staging {
    pub enabled: bool,
    pub containers: Option<Vec<String>>,
    pub policy: StagePolicy,
    pub env: StagedEnv,
}

/// Reads the Supervision document with the core's reader, the one `podvisor run` uses. `Err`
/// holds every problem, one `FILE:LINE:COL: FIELD: MESSAGE` line each.
pub fn read_supervision(file: &str, text: &str) -> Result<Staging, String> {
    let sup = supervision::read_for_container(file, text).map_err(|e| e.to_string())?;
    let staged = sup.spec.staged_instrumentation.unwrap_or_default();
    Ok(Staging {
        enabled: staged.is_enabled(),
        policy: staged.policy().map_err(|e| format!("{file}: {e}"))?,
        env: staged.staged_env(),
        containers: staged.containers,
    })
}

/// What a container start found in the lock dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lock {
    /// The lock did not exist and was made now.
    Made,
    /// The lock already existed.
    Present,
    /// It could not be made: no lock dir, or a read-only one (case d above).
    Unusable(String),
}

/// Whether this start counts as a new container start (the table in the module's doc).
pub fn counts(lock: &Lock, var_set: bool) -> bool {
    matches!(lock, Lock::Made) && !var_set
}

/// Makes the lock file if it does not exist (`O_EXCL`: of two processes starting together,
/// one makes it).
pub fn take_lock(lock_dir: &Path) -> Lock {
    if !lock_dir.is_dir() {
        return Lock::Unusable(format!("{} does not exist", lock_dir.display()));
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(lock_dir.join(LOCK_FILE))
    {
        Ok(_) => Lock::Made,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Lock::Present,
        Err(e) => Lock::Unusable(format!("{}: {}", lock_dir.display(), bare(&e))),
    }
}

/// What this start runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub stage: Stage,
    /// Container starts counted so far, this one included if it counted.
    pub starts: u32,
    pub counted: bool,
    /// Why the stage is Disabled without counting (case d).
    pub unusable: Option<String>,
}

/// Counts the start (if it is a new one) in the state dir and gives its stage. Errors name the
/// file and what to do.
pub fn begin(args: &StagedArgs, policy: &StagePolicy, var_set: bool) -> Result<Start, String> {
    std::fs::create_dir_all(&args.state_dir).map_err(|e| {
        format!(
            "--state-dir {}: cannot make it: {}",
            args.state_dir.display(),
            bare(&e)
        )
    })?;
    let state = StateFile::new(&args.state_dir, STATE_FILE).map_err(|e| e.to_string())?;
    let mut starts = match state.read().map_err(|e| e.to_string())? {
        None => 0,
        Some(text) => record::decode_init(&text)
            .map_err(|e| {
                format!(
                    "{}: the saved start count cannot be used: {e}; remove the file to count from zero",
                    state.path().display()
                )
            })?
            .starts,
    };
    let lock = take_lock(&args.lock_dir);
    let counted = counts(&lock, var_set);
    if counted {
        starts += 1;
        state
            .write(&record::encode_init(&InitRecord { starts }))
            .map_err(|e| e.to_string())?;
    }
    Ok(match lock {
        Lock::Unusable(why) => Start {
            stage: Stage::Disabled,
            starts,
            counted: false,
            unusable: Some(why),
        },
        _ => Start {
            // A start that did not count belongs to the instance whose start did; if that count
            // was never written (the state dir is newer than the lock), it is the first.
            stage: policy.stage(starts.max(1) - 1),
            starts,
            counted,
            unusable: None,
        },
    })
}

/// Sets this process's environment (which CMD inherits) for `start`: the stage's variables
/// and the lock variable. Called before CMD is spawned, while PID 1 mode has no other thread.
pub fn apply_env(staging: &Staging, start: &Start, lock_dir: &Path) {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let before = vars.clone();
    staging
        .env
        .apply(start.stage, staging.policy.logging, &mut vars);
    for (k, _) in &before {
        if !vars.iter().any(|(name, _)| name == k) {
            std::env::remove_var(k);
        }
    }
    for (k, v) in &vars {
        if before.iter().all(|(name, old)| name != k || old != v) {
            std::env::set_var(k, v);
        }
    }
    if start.unusable.is_none() {
        std::env::set_var(LOCK_VAR, lock_dir.join(LOCK_FILE));
    }
    debug_assert!(std::env::var_os(STAGE_VAR).is_some());
}

/// Whether this process already carries the lock variable.
pub fn var_set() -> bool {
    std::env::var_os(LOCK_VAR).is_some_and(|v| v != OsString::new())
}

/// An I/O error's words (see `process::errno`).
fn bare(e: &io::Error) -> String {
    crate::process::errno::describe(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_cases_of_the_lock() {
        assert!(counts(&Lock::Made, false), "(a) a new start");
        assert!(!counts(&Lock::Present, false), "another process, or (c)");
        assert!(!counts(&Lock::Present, true));
        assert!(!counts(&Lock::Made, true), "(b) the lock was removed");
        assert!(!counts(&Lock::Unusable("x".into()), false), "(d)");
    }

    #[test]
    fn reads_a_supervision_and_refuses_what_init_cannot_do() {
        let ok = "apiVersion: podvisor.io/v1alpha1\nkind: Supervision\nmetadata: {name: default}\nspec:\n  stagedInstrumentation:\n    containers: [app]\n    env: {LD_PRELOAD: /a.so}\n    debugEnv: {LOG: debug}\n    debugAfterRestarts: 2\n    logging: false\n    verdictAfter: 5m\n";
        let s = read_supervision("s.yaml", ok).unwrap();
        assert!(s.enabled);
        assert_eq!(s.containers, Some(vec!["app".to_string()]));
        assert_eq!(s.policy.debug_after, 2);
        assert_eq!(s.policy.disable_after, 6);
        assert_eq!(s.env.env, [("LD_PRELOAD".to_string(), "/a.so".to_string())]);

        let bad = "apiVersion: podvisor.io/v1alpha1\nkind: Supervision\nspec:\n  stagedInstrumentation: {debugAfterRestarts: 5, disableAfterRestarts: 2, colour: blue, verdictAfter: 10x}\n  podRestart: {afterContainerRestarts: 1, within: 1m, maxPodRestarts: 1}\n";
        let e = read_supervision("s.yaml", bad).unwrap_err();
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(
            lines,
            [
                "s.yaml:4:75: spec.stagedInstrumentation: unknown field \"colour\"",
                "s.yaml:4:50: spec.stagedInstrumentation.disableAfterRestarts: Invalid value: 2: must be >= debugAfterRestarts (5)",
                "s.yaml:4:89: spec.stagedInstrumentation.verdictAfter: Invalid value: invalid duration \"10x\": unknown unit \"x\" (ns, us, ms, s, m, h)",
                "s.yaml:5:3: spec.podRestart: Forbidden: a container cannot restart its own pod: podRestart is for podvisor run and the cluster controller",
            ]
        );
        let e = read_supervision("s.yaml", "apiVersion: v1\nkind: Pod\n").unwrap_err();
        assert!(
            e.contains("s.yaml:1:1: apiVersion: Unsupported value: \"v1\""),
            "{e}"
        );
        let e = read_supervision(
            "s.yaml",
            "apiVersion: podvisor.io/v1alpha1\nkind: Supervision\nspec: {stagedInstrumentation: {debugAfterRestarts: -1}}\n",
        )
        .unwrap_err();
        assert_eq!(
            e,
            "s.yaml:3:32: spec.stagedInstrumentation.debugAfterRestarts: invalid value: integer `-1`, expected u32"
        );
    }
}
