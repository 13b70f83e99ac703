//! Staged instrumentation (docs/escalation.md): which stage a container start runs in, the environment
//! each stage gives it, and the verdict on the add-on once it has been switched off.
//!
//! A leaf shared by `podvisor run`, `podvisor init --supervision` and the cluster controller:
//! plain values and pure functions, nothing of the YAML or Kubernetes types.
//!
//! Stage of a start = Nominal while the container's restart count is below `debug_after`,
//! Debug while below `disable_after`, then Disabled for good. With `logging` the add-on already
//! logs in Nominal, so Debug is skipped: Nominal (with the debug environment) until
//! `debug_after`, then Disabled.

use std::fmt;
use std::time::Duration;

use crate::clock::Instant;

/// The variable every staged start gets, holding its stage's name.
pub const STAGE_VAR: &str = "PODVISOR_INSTR_STAGE";

/// `debugAfterRestarts` and `disableAfterRestarts` when not given.
pub const DEFAULT_DEBUG_AFTER: u32 = 3;
pub const DEFAULT_DISABLE_AFTER: u32 = 6;

/// `verdictAfter` when not given.
pub const DEFAULT_VERDICT_AFTER: Duration = Duration::from_secs(600);

/// Restarts while Disabled after which the add-on is cleared: the app crashes without it too.
pub const CLEAR_AFTER_RESTARTS: u32 = 3;

/// The stage of one container start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
pub enum Stage {
    /// The add-on runs (`env`).
    Nominal,
    /// The add-on runs and logs (`env` + `debugEnv`).
    Debug,
    /// The add-on is off (neither).
    Disabled,
}

impl Stage {
    pub const ALL: [Stage; 3] = [Stage::Nominal, Stage::Debug, Stage::Disabled];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Nominal => "Nominal",
            Stage::Debug => "Debug",
            Stage::Disabled => "Disabled",
        }
    }

    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A threshold that cannot be used, with the field it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StagePolicyError {
    #[error("debugAfterRestarts: Invalid value: {0}: must be at least 1")]
    DebugZero(u32),
    #[error("disableAfterRestarts: Invalid value: {0}: must be at least 1")]
    DisableZero(u32),
    #[error(
        "disableAfterRestarts: Invalid value: {disable}: must be >= debugAfterRestarts ({debug})"
    )]
    OutOfOrder { debug: u32, disable: u32 },
}

impl StagePolicyError {
    /// The field (under `spec.stagedInstrumentation`) the problem is about.
    pub fn field(&self) -> &'static str {
        match self {
            StagePolicyError::DebugZero(_) => "debugAfterRestarts",
            StagePolicyError::DisableZero(_) | StagePolicyError::OutOfOrder { .. } => {
                "disableAfterRestarts"
            }
        }
    }
}

/// When a container's starts change stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct StagePolicy {
    pub debug_after: u32,
    pub disable_after: u32,
    /// `logging: true`: Nominal already logs; no Debug stage.
    pub logging: bool,
}

impl Default for StagePolicy {
    fn default() -> Self {
        StagePolicy {
            debug_after: DEFAULT_DEBUG_AFTER,
            disable_after: DEFAULT_DISABLE_AFTER,
            logging: false,
        }
    }
}

impl StagePolicy {
    /// The thresholds as written (absent ones defaulted), or the first reason they cannot be
    /// used (`problems` has them all).
    pub fn new(
        debug_after: Option<u32>,
        disable_after: Option<u32>,
        logging: bool,
    ) -> Result<StagePolicy, StagePolicyError> {
        if let Some(e) = Self::problems(debug_after, disable_after)
            .into_iter()
            .next()
        {
            return Err(e);
        }
        let debug = debug_after.unwrap_or(DEFAULT_DEBUG_AFTER);
        let disable = disable_after.unwrap_or(DEFAULT_DISABLE_AFTER);
        Ok(StagePolicy {
            debug_after: debug,
            disable_after: disable,
            logging,
        })
    }

    /// Every reason the thresholds cannot be used.
    pub fn problems(debug_after: Option<u32>, disable_after: Option<u32>) -> Vec<StagePolicyError> {
        let debug = debug_after.unwrap_or(DEFAULT_DEBUG_AFTER);
        let disable = disable_after.unwrap_or(DEFAULT_DISABLE_AFTER);
        let mut out = Vec::new();
        if debug == 0 {
            out.push(StagePolicyError::DebugZero(debug));
        }
        if disable == 0 {
            out.push(StagePolicyError::DisableZero(disable));
        } else if disable < debug {
            out.push(StagePolicyError::OutOfOrder { debug, disable });
        }
        out
    }

    /// The stage of a start made after `restarts` restarts.
    pub fn stage(&self, restarts: u32) -> Stage {
        let disable = if self.logging {
            self.debug_after
        } else {
            self.disable_after
        };
        if restarts >= disable {
            Stage::Disabled
        } else if restarts >= self.debug_after {
            Stage::Debug
        } else {
            Stage::Nominal
        }
    }

    /// The restart count at which each stage begins, in order (stages that never occur left
    /// out): what `explain` prints.
    pub fn schedule(&self) -> Vec<(u32, Stage)> {
        let mut out: Vec<(u32, Stage)> = Vec::new();
        for restarts in [0, self.debug_after, self.disable_after] {
            let stage = self.stage(restarts);
            if out.last().is_none_or(|(_, s)| *s != stage) {
                out.push((restarts, stage));
            }
        }
        out
    }

    /// The restart count of the first Disabled start.
    pub fn disabled_from(&self) -> u32 {
        self.schedule()
            .into_iter()
            .find(|(_, s)| *s == Stage::Disabled)
            .map_or(self.disable_after, |(n, _)| n)
    }
}

/// The variables of staged instrumentation, in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "spec", derive(serde::Serialize, serde::Deserialize))]
pub struct StagedEnv {
    /// Applied in Nominal and Debug.
    pub env: Vec<(String, String)>,
    /// Added in Debug (and in Nominal with `logging`).
    pub debug_env: Vec<(String, String)>,
}

impl StagedEnv {
    /// Makes `vars` (a start's environment, later entries win) what `stage` says: the add-on's
    /// variables set or removed, and `PODVISOR_INSTR_STAGE`. A variable the stage does not
    /// apply is removed even if the container's own environment set it, so that Disabled
    /// really runs without the add-on.
    pub fn apply(&self, stage: Stage, logging: bool, vars: &mut Vec<(String, String)>) {
        let with_env = stage != Stage::Disabled;
        let with_debug = stage == Stage::Debug || (stage == Stage::Nominal && logging);
        let named = |k: &str| {
            self.env
                .iter()
                .chain(&self.debug_env)
                .any(|(name, _)| name == k)
        };
        vars.retain(|(k, _)| k != STAGE_VAR && !named(k));
        if with_env {
            vars.extend(self.env.iter().cloned());
        }
        if with_debug {
            for (k, v) in &self.debug_env {
                match vars.iter_mut().find(|(name, _)| name == k) {
                    Some(slot) => slot.1 = v.clone(),
                    None => vars.push((k.clone(), v.clone())),
                }
            }
        }
        vars.push((STAGE_VAR.to_string(), stage.as_str().to_string()));
    }
}

/// What podvisor concluded about the add-on once it was switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "supervision", derive(serde::Serialize, serde::Deserialize))]
pub enum Verdict {
    /// The app ran cleanly without it: the add-on is the likely cause of the crashes.
    Blamed,
    /// The app kept crashing without it: look at the app.
    Cleared,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Blamed => "Blamed",
            Verdict::Cleared => "Cleared",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        [Verdict::Blamed, Verdict::Cleared]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// One container's judgement of the add-on: once Disabled, `verdict_after` of clean running
/// blames it; `CLEAR_AFTER_RESTARTS` more restarts clear it. The first verdict stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Judgement {
    /// The restart count of the first Disabled start.
    pub disabled_at: Option<u32>,
    pub verdict: Option<Verdict>,
}

impl Judgement {
    /// A start after `restarts` restarts, in `stage`: `Some(Cleared)` when this start is the
    /// one that clears the add-on.
    pub fn on_start(&mut self, stage: Stage, restarts: u32) -> Option<Verdict> {
        if stage != Stage::Disabled || self.verdict.is_some() {
            return None;
        }
        let from = *self.disabled_at.get_or_insert(restarts);
        if restarts >= from + CLEAR_AFTER_RESTARTS {
            self.verdict = Some(Verdict::Cleared);
            return self.verdict;
        }
        None
    }

    /// When an instance running Disabled since `since` earns the add-on its blame, if it has
    /// not been judged yet.
    pub fn blame_at(&self, since: Instant, verdict_after: Duration) -> Option<Instant> {
        match (self.disabled_at, self.verdict) {
            (Some(_), None) => Some(since + verdict_after),
            _ => None,
        }
    }

    /// Records the blame (after `blame_at` has passed).
    pub fn blame(&mut self) {
        if self.verdict.is_none() {
            self.verdict = Some(Verdict::Blamed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages(p: StagePolicy, starts: u32) -> Vec<&'static str> {
        (0..starts).map(|r| p.stage(r).as_str()).collect()
    }

    #[test]
    fn defaults_give_three_nominal_three_debug_then_disabled() {
        let p = StagePolicy::new(None, None, false).unwrap();
        assert_eq!(
            stages(p, 8),
            ["Nominal", "Nominal", "Nominal", "Debug", "Debug", "Debug", "Disabled", "Disabled"]
        );
        assert_eq!(p.stage(10_000), Stage::Disabled);
        assert_eq!(
            p.schedule(),
            [(0, Stage::Nominal), (3, Stage::Debug), (6, Stage::Disabled)]
        );
        assert_eq!(p.disabled_from(), 6);
    }

    #[test]
    fn logging_skips_debug() {
        let p = StagePolicy::new(Some(2), Some(5), true).unwrap();
        assert_eq!(stages(p, 4), ["Nominal", "Nominal", "Disabled", "Disabled"]);
        assert_eq!(p.schedule(), [(0, Stage::Nominal), (2, Stage::Disabled)]);
        assert_eq!(p.disabled_from(), 2);
    }

    #[test]
    fn equal_thresholds_skip_debug_too() {
        let p = StagePolicy::new(Some(2), Some(2), false).unwrap();
        assert_eq!(stages(p, 3), ["Nominal", "Nominal", "Disabled"]);
        assert_eq!(p.schedule(), [(0, Stage::Nominal), (2, Stage::Disabled)]);
    }

    #[test]
    fn bad_thresholds_name_their_field() {
        let e = StagePolicy::new(Some(4), Some(2), false).unwrap_err();
        assert_eq!(e.field(), "disableAfterRestarts");
        assert_eq!(
            e.to_string(),
            "disableAfterRestarts: Invalid value: 2: must be >= debugAfterRestarts (4)"
        );
        assert_eq!(
            StagePolicy::new(Some(0), None, false).unwrap_err().field(),
            "debugAfterRestarts"
        );
        assert_eq!(
            StagePolicy::new(Some(1), Some(0), false)
                .unwrap_err()
                .field(),
            "disableAfterRestarts"
        );
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_stage_sets_its_environment() {
        let staged = StagedEnv {
            env: vars(&[("LD_PRELOAD", "/agent.so")]),
            debug_env: vars(&[("AGENT_LOG", "debug")]),
        };
        let base = vars(&[("PATH", "/bin"), ("AGENT_LOG", "info")]);
        let run = |stage, logging| {
            let mut v = base.clone();
            staged.apply(stage, logging, &mut v);
            v
        };
        assert_eq!(
            run(Stage::Nominal, false),
            vars(&[
                ("PATH", "/bin"),
                ("LD_PRELOAD", "/agent.so"),
                ("PODVISOR_INSTR_STAGE", "Nominal")
            ])
        );
        assert_eq!(
            run(Stage::Debug, false),
            vars(&[
                ("PATH", "/bin"),
                ("LD_PRELOAD", "/agent.so"),
                ("AGENT_LOG", "debug"),
                ("PODVISOR_INSTR_STAGE", "Debug")
            ])
        );
        // Disabled removes the add-on's variables even where the container set them itself.
        assert_eq!(
            run(Stage::Disabled, false),
            vars(&[("PATH", "/bin"), ("PODVISOR_INSTR_STAGE", "Disabled")])
        );
        assert_eq!(
            run(Stage::Nominal, true),
            vars(&[
                ("PATH", "/bin"),
                ("LD_PRELOAD", "/agent.so"),
                ("AGENT_LOG", "debug"),
                ("PODVISOR_INSTR_STAGE", "Nominal")
            ])
        );
    }

    #[test]
    fn judgement_clears_after_three_more_restarts_and_blames_after_clean_running() {
        let mut j = Judgement::default();
        assert_eq!(j.on_start(Stage::Debug, 5), None);
        assert_eq!(j.blame_at(Instant::ZERO, Duration::from_secs(600)), None);
        assert_eq!(j.on_start(Stage::Disabled, 6), None);
        assert_eq!(j.disabled_at, Some(6));
        let since = Instant::from_millis(1_000);
        assert_eq!(
            j.blame_at(since, Duration::from_secs(600)),
            Some(Instant::from_millis(601_000))
        );
        assert_eq!(j.on_start(Stage::Disabled, 7), None);
        assert_eq!(j.on_start(Stage::Disabled, 8), None);
        assert_eq!(j.on_start(Stage::Disabled, 9), Some(Verdict::Cleared));
        // The first verdict stands.
        j.blame();
        assert_eq!(j.verdict, Some(Verdict::Cleared));
        assert_eq!(j.on_start(Stage::Disabled, 12), None);
        assert_eq!(j.blame_at(since, Duration::from_secs(1)), None);

        let mut j = Judgement::default();
        j.on_start(Stage::Disabled, 6);
        j.blame();
        assert_eq!(j.verdict, Some(Verdict::Blamed));
        assert_eq!(j.on_start(Stage::Disabled, 20), None);
    }
}
