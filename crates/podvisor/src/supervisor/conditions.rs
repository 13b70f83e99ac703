//! Conditions set from outside the node: `PATCH /status` (`podvisor patch --subresource
//! status`, as `kubectl patch pod --subresource status` or a controller sets one), what a
//! pod's `readinessGates` wait for. The API server keeps a pod's conditions of any type; the
//! kubelet writes the types it owns at each status update and leaves the others as they were
//! set. So a status patch keeps, of its result, the conditions of types the node does not own
//! (their type checked as the API server checks it), each with a transition time (the one
//! given, else when its status last changed); the rest of the status is the node's, and what
//! a patch did to it is not kept (the kubelet's next update would undo it). They are saved in
//! the state dir (`conditions`): a resumed pod keeps them, a new one starts without.

use std::io;

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use podvisor_core::lifecycle::EventType;

use super::persist::{pod_note, TakenUp};
use super::Supervisor;
use crate::api::PatchKind;
use crate::state::record::{decode_conditions, encode_conditions, ConditionsRecord};
use crate::state::{StateDir, StateError, StateFile};

/// The file in the state dir.
const RECORD: &str = "conditions";

/// The condition types the node owns: podvisor computes them, or sets them (a resize's).
const OWNED: [&str; 8] = [
    "PodScheduled",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodReadyToStartContainers",
    "AllContainersRestarting",
    "PodResizePending",
    "PodResizeInProgress",
];

/// The pod's conditions set from outside, in the order they were first set.
#[derive(Debug, Default)]
pub struct Outside {
    conditions: Vec<PodCondition>,
}

impl Outside {
    /// Each condition's type and status, as the core reads the readiness gates (nothing is
    /// made for a pod that has none).
    pub fn statuses(&self) -> Vec<(String, String)> {
        (self.conditions.iter())
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect()
    }

    /// Adds them to the conditions the pod's status shows.
    pub fn show(&self, conditions: &mut Vec<PodCondition>) {
        conditions.extend(self.conditions.iter().cloned());
    }
}

/// Takes up the conditions an earlier run of this pod was given (`taken` resumed); a new
/// pod forgets them. A file that cannot be read is refused, unless `reset` (`--reset-state`)
/// says to set it aside (a `StateReset` warning among `taken`'s notes) and go on without them.
pub fn take_up(dir: &StateDir, taken: &mut TakenUp, reset: bool) -> Result<Outside, StateError> {
    let file = StateFile::new(dir.path(), RECORD)?;
    if !taken.resumed {
        file.remove()?;
        return Ok(Outside::default());
    }
    let Some(text) = file.read()? else {
        return Ok(Outside::default());
    };
    let conditions = match decode_conditions(&text) {
        Ok(record) => record.conditions,
        Err(e) if reset => {
            let aside = file.set_aside()?;
            taken.notes.push(pod_note(
                EventType::Warning,
                "StateReset",
                format!(
                    "--reset-state: the saved conditions were not used ({e}); they were moved to {} and the pod goes on without them",
                    aside.display()
                ),
            ));
            Vec::new()
        }
        Err(e) => return Err(file.refused(e)),
    };
    Ok(Outside { conditions })
}

/// The conditions of the patched status that are not the node's, checked as the API server
/// checks a status update; their transition times kept while their status stays, else now.
fn kept(patched: &Value, before: &[PodCondition], now: &Time) -> Result<Vec<PodCondition>, String> {
    let list = patched.get("conditions").cloned().unwrap_or(Value::Null);
    let all: Vec<PodCondition> = match list {
        Value::Null => Vec::new(),
        list => serde_json::from_value(list).map_err(|e| format!("status.conditions: {e}"))?,
    };
    let mut kept: Vec<PodCondition> = Vec::new();
    for (i, mut c) in all.into_iter().enumerate() {
        let at = format!("status.conditions[{i}].type");
        if OWNED.contains(&c.type_.as_str()) {
            continue;
        }
        if let Some(why) = podvisor_core::spec::validate::qualified_name(&c.type_) {
            return Err(format!("{at}: Invalid value: {:?}: {why}", c.type_));
        }
        if c.status.is_empty() {
            return Err(format!("status.conditions[{i}].status: Required value"));
        }
        if kept.iter().any(|k| k.type_ == c.type_) {
            return Err(format!("{at}: Duplicate value: {:?}", c.type_));
        }
        if c.last_transition_time.is_none() {
            let same = before.iter().find(|b| b.type_ == c.type_);
            c.last_transition_time = match same {
                Some(b) if b.status == c.status => b.last_transition_time.clone(),
                _ => Some(now.clone()),
            };
        }
        kept.push(c);
    }
    Ok(kept)
}

impl Supervisor {
    /// `PATCH /status`: the patch applied to the pod as the API server applies it; the
    /// conditions of types the node does not own are kept (saved first) and the Pod is the
    /// answer (200), or why not (400, 422).
    pub(super) fn patch_status(
        &mut self,
        slot: usize,
        kind: PatchKind,
        body: &str,
    ) -> io::Result<()> {
        let name = self.info.name.clone();
        let invalid = |why: String| format!("The Pod {name:?} is invalid: {why}\n");
        let mut doc: Value = serde_json::from_str(&self.status_json()).unwrap_or_default();
        if !self.patched(slot, kind, body, &mut doc) {
            return Ok(());
        }
        let now = crate::status::time(std::time::SystemTime::now());
        let conditions = match kept(&doc["status"], &self.outside.conditions, &now) {
            Ok(c) => c,
            Err(why) => {
                self.api.reply(slot, 422, &invalid(why), &self.epoll);
                return Ok(());
            }
        };
        if conditions != self.outside.conditions {
            let record = ConditionsRecord {
                conditions: conditions.clone(),
            };
            let saved = StateFile::new(self.dir.path(), RECORD)
                .and_then(|f| f.write(&encode_conditions(&record)));
            if let Err(e) = saved {
                let msg = format!("the conditions could not be saved: {e}\n");
                self.api.reply(slot, 500, &msg, &self.epoll);
                return Ok(());
            }
            self.outside.conditions = conditions;
        }
        let body = format!("{}\n", self.status_json());
        self.api.reply(slot, 200, &body, &self.epoll);
        self.after_changes();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_patched_status_keeps_the_conditions_the_node_does_not_own() {
        let before: Vec<PodCondition> = serde_json::from_value(json!([
            {"type": "example.com/lb", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "example.com/dns", "status": "True", "lastTransitionTime": "2026-01-02T00:00:00Z"},
        ]))
        .unwrap();
        let now = "2026-12-07T10:00:00Z";
        let at: Time = serde_json::from_value(json!(now)).unwrap();
        let patched = json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "example.com/lb", "status": "True"},
            {"type": "example.com/dns", "status": "True"},
            {"type": "gate", "status": "False", "reason": "Waiting", "lastTransitionTime": "2026-02-01T00:00:00Z"},
        ]});
        let got = serde_json::to_value(kept(&patched, &before, &at).unwrap()).unwrap();
        assert_eq!(
            got,
            json!([
                // Its status changed: now.
                {"type": "example.com/lb", "status": "True", "lastTransitionTime": now},
                // The same status: the time it had.
                {"type": "example.com/dns", "status": "True", "lastTransitionTime": "2026-01-02T00:00:00Z"},
                {"type": "gate", "status": "False", "reason": "Waiting", "lastTransitionTime": "2026-02-01T00:00:00Z"},
            ])
        );
        let bad = json!({"conditions": [{"type": "a b", "status": "True"}]});
        assert!(kept(&bad, &[], &at)
            .unwrap_err()
            .starts_with("status.conditions[0].type: Invalid value: \"a b\""));
        let twice = json!({"conditions": [{"type": "g", "status": "True"}, {"type": "g", "status": "False"}]});
        assert_eq!(
            kept(&twice, &[], &at).unwrap_err(),
            "status.conditions[1].type: Duplicate value: \"g\""
        );
        let no_status = json!({"conditions": [{"type": "g"}]});
        assert_eq!(
            kept(&no_status, &[], &at).unwrap_err(),
            "status.conditions[0].status: Required value"
        );
        assert_eq!(kept(&json!({}), &before, &at).unwrap(), []);
    }
}
