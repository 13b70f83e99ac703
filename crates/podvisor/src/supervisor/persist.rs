//! The run's saved record: taken up when `run` starts on a state dir that has one (after a
//! kill -9, a crash or a reboot), and written whenever something it holds changes.
//!
//! A record is written at most once per turn of the loop (after every input of that turn has
//! been fed), before the loop sleeps again, so a crash-looping pod of many containers pays
//! one write for the exits that arrive together. The events of a turn go out after its record
//! is written, so that whatever a reader saw announced (a `Started`) the next run knows. Once a stop has been asked for, the record is
//! left as the stop found it: a run that was stopped is taken up again like one that died,
//! with the containers that were running started again. A pod that ended by itself
//! (Succeeded, Failed, GaveUp) is marked so, and the next run on the state dir is a new pod.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podvisor_core::lifecycle::{Event, EventType, InstanceId, Pod, Survivor};
use podvisor_core::record::{PodRecord, StateRecord};
use podvisor_core::spec::plan::RunPlan;

use super::Supervisor;
use crate::state::processes::{boot_id, kill_leftovers};
use crate::state::record::{self, millis};
use crate::state::{StateDir, StateError, StateFile, RESET_REMEDY};
use crate::status::PodInfo;

/// How long to wait for the processes a dead run left to go after SIGKILL.
const LEFTOVER_PATIENCE: Duration = Duration::from_secs(5);

/// The pod this run starts with, and what happened on the way.
#[derive(Debug)]
pub struct TakenUp {
    pub pod: Pod,
    /// A record was taken up (emptyDir volumes are kept, as for a pod that never stopped).
    pub resumed: bool,
    /// Events to announce before the pod starts (leftovers killed, a refused file set aside).
    pub notes: Vec<Event>,
    /// Containers that outlived the last run under keepers (`--live-restore`).
    pub found: super::keep::Found,
}

/// Reads the state file and makes the pod: afresh, or taken up from the record. Processes of
/// the previous run still alive are killed first. A record that cannot be used is refused,
/// unless `reset` says to set it aside and start from zero.
pub fn take_up(
    dir: &StateDir,
    state: &StateFile,
    plan: &mut RunPlan,
    info: &mut PodInfo,
    reset: bool,
) -> Result<TakenUp, StateError> {
    let mut notes = Vec::new();
    let path = state.path().display().to_string();
    let set_aside = |state: &StateFile, notes: &mut Vec<Event>, why: String| {
        let aside = state.set_aside()?;
        notes.push(pod_note(
            EventType::Warning,
            "StateReset",
            format!(
                "--reset-state: the saved state was not used ({why}); it was moved to {} and the pod starts from zero",
                aside.display()
            ),
        ));
        Ok::<(), StateError>(())
    };
    let record = match state.read()? {
        None => None,
        Some(text) => match record::decode_pod(&text) {
            Ok(r) => Some(r),
            Err(e) if reset => {
                set_aside(state, &mut notes, e.to_string())?;
                None
            }
            Err(e) => return Err(state.refused(e)),
        },
    };
    let name = format!("{}/{}", plan.namespace, plan.pod.name);
    let record = match record {
        Some(r) if r.pod != name => {
            let why = format!("it holds the state of pod {}, not of {name}", r.pod);
            if !reset {
                return Err(StateError::Mismatch {
                    path,
                    message: why,
                    remedy: RESET_REMEDY,
                });
            }
            set_aside(state, &mut notes, why)?;
            None
        }
        // A pod that ended by itself is over: this run is a new pod.
        Some(r) if r.ended.is_some() => None,
        other => other,
    };
    let Some(mut record) = record else {
        return Ok(TakenUp {
            pod: Pod::new(plan.pod.clone()),
            resumed: false,
            notes,
            found: Default::default(),
        });
    };
    let mut found = super::keep::Found::default();
    if record.boot == boot_id() {
        let names: Vec<String> = plan.pod.containers.iter().map(|c| c.name.clone()).collect();
        // Before anything is killed: a keeper this podvisor cannot adopt refuses the run.
        found = super::keep::find(dir, &record, &names)?;
        // An exit while no podvisor ran: the instance's termination message is in its file.
        for (c, exec) in plan.pod.containers.iter().zip(&plan.exec) {
            let instance = record.containers.iter().find(|r| r.name == c.name);
            let survivor = found.survivors.get_mut(&c.name);
            if let (Some(Survivor::Exited { exit, .. }), Some(r)) = (survivor, instance) {
                let code = exit.status.code();
                let how = &exec.termination;
                exit.message = super::termination::read(dir, &c.name, r.instance, code, how);
            }
        }
        found.number_after_strays(&mut record);
        // What the dead run's containers left (those under keepers live on), all at once.
        let left: Vec<_> = (record.containers.iter())
            .filter(|c| !found.survivors.contains_key(&c.name))
            .filter_map(|c| c.process.map(|p| (c, p)))
            .collect();
        let groups: Vec<(i32, u64)> = left.iter().map(|(_, p)| (p.pid, p.start_ticks)).collect();
        let killed = kill_leftovers(&groups, LEFTOVER_PATIENCE);
        for ((c, p), n) in left.into_iter().zip(killed) {
            if n > 0 {
                notes.push(Event {
                    kind: EventType::Warning,
                    reason: "Killing".into(),
                    object: c.name.clone(),
                    message: format!(
                        "Killed {n} process(es) of container {} left running by the previous run (process group {})",
                        c.name, p.pid
                    ),
                    exit_code: None,
                    restart_count: Some(c.restart_count),
                    stage: c.stage,
                });
            }
        }
    }
    // The same pod goes on, under the UID the record gave it.
    std::sync::Arc::make_mut(&mut plan.pod).uid = record.uid.clone();
    let pod = Pod::resume_adopting(plan.pod.clone(), &record, &found.survivors).map_err(|e| {
        StateError::Mismatch {
            path,
            message: e.to_string(),
            remedy: RESET_REMEDY,
        }
    })?;
    // The same pod goes on: its UID and creation time are the record's.
    info.uid = record.uid.clone();
    info.created = UNIX_EPOCH + Duration::from_millis(record.created);
    Ok(TakenUp {
        pod,
        resumed: true,
        notes,
        found,
    })
}

pub(super) fn pod_note(kind: EventType, reason: &str, message: String) -> Event {
    Event {
        kind,
        reason: reason.into(),
        object: "pod".into(),
        message,
        exit_code: None,
        restart_count: None,
        stage: None,
    }
}

/// Removes what an earlier run left to show (`pod.json`, `events.jsonl` and the one before):
/// while this run lasts its API answers, and if it is killed nothing stale is shown as its end.
pub fn forget_last_word(dir: &StateDir) -> Result<(), StateError> {
    dir.last_pod()?.remove()?;
    dir.last_events()?.remove()?;
    let aside = StateDir::rotated_events(&dir.events_path());
    match std::fs::remove_file(&aside) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StateError::Io {
            path: aside.display().to_string(),
            what: "remove it",
            error: e,
        }),
        _ => Ok(()),
    }
}

impl Supervisor {
    /// The run ends: the pod as it was last shown is written to the state dir (`pod.json`),
    /// so that `status`, `describe` and `get pods` still show the pod (its events are in
    /// `events.jsonl` already). A pod deleted by `podvisor stop` has its record removed: the
    /// next run is a new pod.
    pub(super) fn write_last_word(&mut self) {
        let pod = format!("{}\n", self.status_json());
        if let Err(e) = self.dir.last_pod().and_then(|f| f.write(&pod)) {
            eprintln!("podvisor: {e}");
        }
        if self.deleted {
            match self.state.remove() {
                Ok(()) => {
                    self.forget_notes_read();
                    // The exits told that no save counted (a stop saves nothing): their
                    // keeper noted them when the run's end closed.
                    for name in std::mem::take(&mut self.keepers.told) {
                        self.dir.remove_exit_note(&name.container, name.instance);
                    }
                }
                Err(e) => eprintln!("podvisor: {e}"),
            }
        }
    }

    /// The exit notes read so far are counted in the record on disk: they go.
    fn forget_notes_read(&mut self) {
        for id in std::mem::take(&mut self.notes_read) {
            let name = &self.plan.pod.containers[id.container].name;
            self.dir.remove_exit_note(name, id.instance);
        }
    }

    /// Writes the record if something in it changed (and no stop was asked for). A failed
    /// write is reported once per failure streak and tried again at the next change.
    pub(super) fn save_if_changed(&mut self) {
        if !self.pod.take_changed() || self.pod.stop_requested() {
            return;
        }
        let began = std::time::Instant::now();
        let result = self.save();
        self.counters.state_write(began.elapsed());
        if result.is_ok() {
            self.forget_notes_read();
            self.keepers.say_counted();
        }
        match result {
            Ok(()) if self.save_failing => {
                self.save_failing = false;
                let note = pod_note(
                    EventType::Normal,
                    "StateSaved",
                    "The state is saved again".into(),
                );
                let line = self.events.emit(SystemTime::now(), &note);
                self.api.event(line);
            }
            Ok(()) => {}
            Err(e) => {
                // Keep it marked so that the next turn tries again.
                self.pod.mark_changed();
                if !self.save_failing {
                    self.save_failing = true;
                    let note = pod_note(
                        EventType::Warning,
                        "StateNotSaved",
                        format!("{e}: restart counts and stages will be lost if podvisor dies now"),
                    );
                    let line = self.events.emit(SystemTime::now(), &note);
                    self.api.event(line);
                }
            }
        }
    }

    /// Writes the record now.
    pub(super) fn save(&mut self) -> Result<(), StateError> {
        let mut r = PodRecord {
            pod: format!("{}/{}", self.plan.namespace, self.plan.pod.name),
            uid: self.info.uid.clone(),
            created: millis(self.info.created),
            saved: millis(SystemTime::now()),
            saved_by: std::process::id(),
            boot: self.boot.clone(),
            pod_restarts: 0,
            restarts_all: 0,
            restarting_all: false,
            ended: None,
            containers: Vec::new(),
        };
        self.pod.record_into(&mut r);
        for (i, c) in r.containers.iter_mut().enumerate() {
            if let StateRecord::Running(_) = c.state {
                let id = InstanceId {
                    container: i,
                    instance: c.instance,
                };
                c.process = self.instances.get(id).and_then(|i| i.process);
            }
        }
        self.state.write(&record::encode_pod(&r))
    }
}
