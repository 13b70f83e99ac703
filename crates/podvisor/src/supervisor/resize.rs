//! In-place resize (KEP-1287): `PATCH /resize` as the API server takes it (the patch applied to
//! the pod, `ValidatePodResize`'s checks), then what the kubelet does: admission against the
//! node's capacity (`PodResizePending`, `Infeasible`), the new allocation saved in the state dir
//! (its allocation checkpoint; beside it, what an `Infeasible` resize still asks for, asked
//! again by a run that takes the pod up), and actuation: cgroups changed in place, pod and
//! containers in the kubelet's order, or a restart where a container's `resizePolicy` asks for
//! one (`PodResizeInProgress` until done; reason `Error` when a memory limit would fall below
//! what is in use, tried again every 10 s).

use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ContainerResizePolicy, PodCondition, PodSpec};
use serde_json::Value;

use podvisor_core::clock::{Clock, Instant};
use podvisor_core::lifecycle::{EventType, Input, InstanceId};
use podvisor_core::spec::plan::RunPlan;
use podvisor_core::spec::resize::{admit_resize, check_resize, resize_action, ResizeAction};
use podvisor_core::spec::resources::{allocate, Resources};

use super::Supervisor;
use crate::api::PatchKind;
use crate::cgroup::Resource;
use crate::state::record::{decode_resize, encode_resize, RecordError, ResizeRecord};
use crate::state::{StateDir, StateError, StateFile};
use crate::status::{PodInfo, SpecJson};

/// The state dir's file of the allocation a resize made.
const RECORD: &str = "resize";
/// How soon a resize that failed is tried again (the kubelet's pod resync).
const RETRY: Duration = Duration::from_secs(10);

/// What the kubelet keeps of resizes.
#[derive(Debug, Default)]
pub(super) struct Resizing {
    /// Each container's `resizePolicy`, in the core's order.
    policies: Vec<Vec<ContainerResizePolicy>>,
    /// What each container's current instance has in its cgroup.
    applied: Vec<Resources>,
    /// What the pod's cgroup has.
    pod_applied: Resources,
    /// `PodResizePending`: its reason and message.
    pending: Option<(&'static str, String)>,
    /// The last actuation failed: why (`PodResizeInProgress`, reason `Error`).
    error: Option<String>,
    /// When a failed actuation is tried again.
    pub(super) retry_at: Option<Instant>,
    /// When each resize condition began.
    since: BTreeMap<&'static str, SystemTime>,
    /// Each container's `resources` as allocated (the record's), by name.
    allocated: BTreeMap<String, Value>,
    /// A resize that waited fits now (found at the take-up): admitted once the pod is taken up.
    admit_at_take_up: bool,
}

/// What a pod taken up keeps of its resizes, for `Resizing`.
#[derive(Debug, Default)]
pub struct TakenResize {
    /// Each container's `resources` as allocated, by name.
    allocated: BTreeMap<String, Value>,
    /// A resize that still does not fit: why (`Infeasible`).
    infeasible: Option<String>,
    /// A resize that waited and fits now.
    fits_now: bool,
}

impl Resizing {
    /// For a pod of `spec` whose containers run with `applied` (in the core's order), and
    /// whose cgroup has `pod`.
    /// Only the containers' `resizePolicy` is read, not the whole `PodSpec`: its deserializer
    /// is large code that a run holding its pods for hours would keep resident for one use.
    pub(super) fn new(
        spec: &SpecJson,
        (applied, pod): (Vec<Resources>, Resources),
        taken: TakenResize,
    ) -> Resizing {
        // A spec that does not read has no policies (it came from this run's own manifest).
        let spec = spec.value().unwrap_or_default();
        let policy = |c: &Value| -> Vec<ContainerResizePolicy> {
            c.get("resizePolicy")
                .and_then(|p| serde_json::from_value(p.clone()).ok())
                .unwrap_or_default()
        };
        let policies = containers_json(&spec).map(policy).collect();
        Resizing {
            policies,
            applied,
            pod_applied: pod,
            pending: taken.infeasible.map(|why| ("Infeasible", why)),
            allocated: taken.allocated,
            admit_at_take_up: taken.fits_now,
            ..Default::default()
        }
    }

    /// A new instance of container `i` started with `r`.
    pub(super) fn started(&mut self, i: usize, r: Resources) {
        if let Some(a) = self.applied.get_mut(i) {
            *a = r;
        }
    }
}

/// Takes up the allocation an earlier run of this pod saved (`resumed`), into its spec (the
/// manifest's, as JSON) and so into the plan made from it, with the generation it made; a
/// resize that was waiting is asked for again: the spec shows it, `Infeasible` again if it does
/// not fit, admitted once the pod is taken up if it does (`Supervisor::admit_waiting_resize`).
/// A new pod forgets it.
pub fn take_up(
    dir: &StateDir,
    info: &mut PodInfo,
    plan: &mut RunPlan,
    resumed: bool,
) -> Result<TakenResize, StateError> {
    let file = StateFile::new(dir.path(), RECORD)?;
    let unusable = |e: serde_json::Error| {
        file.refused(RecordError::Field {
            line: 2,
            field: "containers".into(),
            message: e.to_string(),
        })
    };
    let text = match resumed {
        true => file.read()?,
        false => {
            file.remove()?;
            None
        }
    };
    let Some(text) = text else {
        // The manifest's resources are what is allocated (a spec that does not read has none:
        // it came from this run's own manifest).
        return Ok(TakenResize {
            allocated: resources_of(&info.spec.value().unwrap_or_default()),
            ..TakenResize::default()
        });
    };
    let record = decode_resize(&text).map_err(|e| file.refused(e))?;
    let mut value = info.spec.value().map_err(unusable)?;
    set_resources(&mut value, &record.containers);
    let allocated: PodSpec = serde_json::from_value(value.clone()).map_err(unusable)?;
    let allocation = allocate(&allocated);
    let mut taken = TakenResize {
        allocated: record.containers.clone(),
        ..TakenResize::default()
    };
    if let Some(desired) = &record.desired {
        set_resources(&mut value, desired);
        let spec: PodSpec = serde_json::from_value(value.clone()).map_err(unusable)?;
        let (cpu, memory) = capacity();
        match admit_resize(&allocate(&spec), cpu, memory) {
            Err(why) => taken.infeasible = Some(why),
            Ok(()) => taken.fits_now = true,
        }
    }
    info.spec = SpecJson::new(&value);
    info.generation = record.generation.unwrap_or(2);
    for (x, (_, r)) in plan.exec.iter_mut().zip(&allocation.containers) {
        x.resources = *r;
    }
    plan.pod_resources = allocation.pod;
    Ok(taken)
}

/// The spec `value`'s init containers, then its containers (the core's order).
fn containers_json(value: &Value) -> impl Iterator<Item = &Value> {
    let lists = ["initContainers", "containers"].map(|l| value[l].as_array());
    lists.into_iter().flatten().flatten()
}

/// Each container's `resources` in the spec `value`, by name (`{}` where it has none).
fn resources_of(value: &Value) -> BTreeMap<String, Value> {
    containers_json(value)
        .map(|c| {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            let r = c.get("resources").cloned();
            (name, r.unwrap_or_else(|| Value::Object(Default::default())))
        })
        .collect()
}

/// Sets each container's `resources` in the spec `value` to those `by_name` has for it.
fn set_resources(value: &mut Value, by_name: &BTreeMap<String, Value>) {
    for list in ["initContainers", "containers"] {
        for c in value[list].as_array_mut().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            if let Some(r) = by_name.get(&name) {
                c["resources"] = r.clone();
            }
        }
    }
}

/// A patch applied to the pod `doc` as the API server applies one of its kind.
fn apply_patch(doc: &mut Value, kind: PatchKind, patch: &Value) -> Result<(), String> {
    match kind {
        PatchKind::Json => {
            let p: json_patch::Patch =
                serde_json::from_value(patch.clone()).map_err(|e| e.to_string())?;
            json_patch::patch(doc, &p).map_err(|e| e.to_string())
        }
        PatchKind::Merge => {
            json_patch::merge(doc, patch);
            Ok(())
        }
        PatchKind::Strategic => {
            strategic_merge(doc, patch);
            Ok(())
        }
    }
}

/// A strategic merge patch, for what a resize or a status patch touches: objects merged key by
/// key (`null` removes), lists of containers merged by `name` and of conditions by `type` (an
/// item not there is added), other lists replaced.
fn strategic_merge(doc: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Default::default());
    }
    for (k, v) in fields {
        if v.is_null() {
            doc.as_object_mut().map(|m| m.remove(k));
            continue;
        }
        // The lists' merge keys, as the API's types declare them.
        let key = match k.as_str() {
            "containers" | "initContainers" => Some("name"),
            "conditions" => Some("type"),
            _ => None,
        };
        match (doc.get_mut(k), v, key) {
            (Some(Value::Array(items)), Value::Array(patches), Some(key)) => {
                for p in patches {
                    let name = &p[key];
                    match items.iter_mut().find(|i| &i[key] == name) {
                        Some(item) => strategic_merge(item, p),
                        None => items.push(p.clone()),
                    }
                }
            }
            (Some(existing), _, _) if v.is_object() => strategic_merge(existing, v),
            _ => {
                doc[k] = v.clone();
            }
        }
    }
}

/// The node's capacity: its CPUs in millicores, its memory in bytes.
fn capacity() -> (u64, u64) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(u64::MAX, |kib| kib * 1024);
    (cpus * 1000, memory)
}

impl Supervisor {
    /// `PATCH /resize`: the patch applied, checked and accepted (the Pod, 200) or refused
    /// (422, as the API server words it); then the kubelet's part.
    pub(super) fn resize(&mut self, slot: usize, kind: PatchKind, body: &str) -> io::Result<()> {
        let name = self.info.name.clone();
        let invalid = |why: String| format!("The Pod {name:?} is invalid: {why}\n");
        let current = match self.info.spec.value() {
            Ok(v) => v,
            Err(e) => {
                let msg = format!("the pod's spec cannot be read: {e}\n");
                self.api.reply(slot, 500, &msg, &self.epoll);
                return Ok(());
            }
        };
        let mut doc = serde_json::json!({"spec": current.clone()});
        if !self.patched(slot, kind, body, &mut doc) {
            return Ok(());
        }
        let new_json = doc["spec"].take();
        let old: Result<PodSpec, _> = self.info.spec.parse();
        let new: Result<PodSpec, _> = serde_json::from_value(new_json.clone());
        let (old, new) = match (old, new) {
            (Ok(o), Ok(n)) => (o, n),
            (_, Err(e)) | (Err(e), _) => {
                self.api
                    .reply(slot, 422, &invalid(format!("spec: {e}")), &self.epoll);
                return Ok(());
            }
        };
        let errors: Vec<String> = check_resize(&old, &new)
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect();
        if !errors.is_empty() {
            let why = match errors.as_slice() {
                [one] => one.clone(),
                many => format!("[{}]", many.join(", ")),
            };
            self.api.reply(slot, 422, &invalid(why), &self.epoll);
            return Ok(());
        }
        if new_json != current {
            // A change of the spec is a new generation, as the API server counts them.
            self.info.generation += 1;
            self.info.spec = SpecJson::new(&new_json);
            self.sync_resize(&new)?;
        }
        let body = format!("{}\n", self.status_json());
        self.api.reply(slot, 200, &body, &self.epoll);
        self.after_changes();
        Ok(())
    }

    /// A patch's `body` applied to `doc` as the API server applies one of its `kind`; false
    /// once the answer says why not (400: not JSON; 422: it cannot be applied).
    pub(super) fn patched(
        &mut self,
        slot: usize,
        kind: PatchKind,
        body: &str,
        doc: &mut Value,
    ) -> bool {
        let applied = serde_json::from_str(body)
            .map_err(|e| (400, format!("the patch is not JSON: {e}\n")))
            .and_then(|patch: Value| {
                apply_patch(doc, kind, &patch).map_err(|e| {
                    let why = format!("the patch cannot be applied: {e}");
                    (
                        422,
                        format!("The Pod {:?} is invalid: {why}\n", self.info.name),
                    )
                })
            });
        if let Err((code, msg)) = &applied {
            self.api.reply(slot, *code, msg, &self.epoll);
        }
        applied.is_ok()
    }

    /// The kubelet's pod sync for a resize: admit the desired resources or say why not, then
    /// actuate what was allocated.
    fn sync_resize(&mut self, spec: &PodSpec) -> io::Result<()> {
        let allocation = allocate(spec);
        let (cpu, memory) = capacity();
        let desired = resources_of(&self.info.spec.value().unwrap_or_default());
        if let Err(message) = admit_resize(&allocation, cpu, memory) {
            if self.resizing.pending.as_ref().map(|p| &p.1) != Some(&message) {
                self.note(EventType::Warning, "ResizeInfeasible", message.clone());
            }
            self.resizing.pending = Some(("Infeasible", message));
            // The spec keeps asking (the API server's copy): a run after this one asks again.
            if let Err(e) = self.save_resize(Some(desired)) {
                self.note(EventType::Warning, "ResizeError", e.to_string());
            }
            return Ok(());
        }
        self.resizing.pending = None;
        self.resizing.allocated = desired;
        let before: Vec<Resources> = self.plan.exec.iter().map(|x| x.resources).collect();
        for (x, (_, r)) in self.plan.exec.iter_mut().zip(&allocation.containers) {
            x.resources = *r;
        }
        self.plan.pod_resources = allocation.pod;
        if let Err(e) = self.save_resize(None) {
            // The allocation stands for this run; a run after a crash would not know it.
            self.note(EventType::Warning, "ResizeError", e.to_string());
        }
        let changed: Vec<String> = (self.plan.exec.iter().zip(&before).enumerate())
            .filter(|(_, (x, b))| x.resources != **b)
            .map(|(i, _)| self.pod.containers()[i].name.clone())
            .collect();
        if !changed.is_empty() {
            let message = format!("Pod resize accepted: containers {}", changed.join(", "));
            self.note(EventType::Normal, "ResizeStarted", message);
        }
        self.actuate()
    }

    /// A resize that waited and fits now (`take_up`): admitted and actuated once the pod is
    /// taken up, the containers it adopted included, as the kubelet's first pod sync after a
    /// restart does.
    pub(super) fn admit_waiting_resize(&mut self) -> io::Result<()> {
        if !std::mem::take(&mut self.resizing.admit_at_take_up) {
            return Ok(());
        }
        match self.info.spec.parse::<PodSpec>() {
            Ok(spec) => self.sync_resize(&spec),
            Err(_) => Ok(()),
        }
    }

    /// Saves the allocation, the generation and what a waiting resize asks for (`desired`).
    fn save_resize(&self, desired: Option<BTreeMap<String, Value>>) -> Result<(), StateError> {
        let record = ResizeRecord {
            containers: self.resizing.allocated.clone(),
            generation: Some(self.info.generation),
            desired,
        };
        StateFile::new(self.dir.path(), RECORD)?.write(&encode_resize(&record))
    }

    /// Brings each running container's cgroup to what it is allocated, or restarts it where
    /// its policy says so; a failure is `PodResizeInProgress` with reason `Error`, tried again
    /// in 10 s.
    pub(super) fn actuate(&mut self) -> io::Result<()> {
        self.resizing.retry_at = None;
        let (mut in_place, mut restarts) = (Vec::new(), Vec::new());
        for (i, c) in self.pod.containers().iter().enumerate() {
            let allocated = self.plan.exec[i].resources;
            let id = InstanceId {
                container: i,
                instance: c.instance,
            };
            let running = self.instances.get(id).is_some();
            let applied = self.resizing.applied[i];
            let policies = &self.resizing.policies[i];
            match resize_action(policies, &applied, &allocated) {
                _ if !running => self.resizing.applied[i] = allocated,
                ResizeAction::None => self.resizing.applied[i] = allocated,
                ResizeAction::InPlace => in_place.push(i),
                ResizeAction::Restart => restarts.push(i),
            }
        }
        // The pod's cgroup follows its allocation whether its containers run, change in place
        // or restart: a container's limit above the pod's is refused (cgroup v1's cpu) or
        // capped by it.
        let pod_changed = self.resizing.pod_applied != self.plan.pod_resources;
        if in_place.is_empty() && !pod_changed {
            self.resizing.error = None;
            for i in restarts {
                self.feed(Input::ResizeRestart(i))?;
            }
            return Ok(());
        }
        let done = self.resize_in_place(&in_place);
        for i in restarts {
            self.feed(Input::ResizeRestart(i))?;
        }
        match done {
            Ok(()) => {
                self.resizing.pod_applied = self.plan.pod_resources;
                for &i in &in_place {
                    self.resizing.applied[i] = self.plan.exec[i].resources;
                }
                self.resizing.error = None;
                if !in_place.is_empty() {
                    let names: Vec<&str> = (in_place.iter())
                        .map(|&i| self.pod.containers()[i].name.as_str())
                        .collect();
                    let message = format!("Pod resize completed: containers {}", names.join(", "));
                    self.note(EventType::Normal, "ResizeCompleted", message);
                }
            }
            Err(message) => {
                if self.resizing.error.as_ref() != Some(&message) {
                    self.note(EventType::Warning, "ResizeError", message.clone());
                }
                self.resizing.error = Some(message);
                self.resizing.retry_at = Some(self.clock.now() + RETRY);
            }
        }
        Ok(())
    }

    /// The cgroups of containers `which` (and the pod's) changed in place: memory, then cpu;
    /// for each, a pod limit that grows first, decreases of containers before increases, a pod
    /// limit that shrinks last (the kubelet's order, so that the pod's limit always holds its
    /// containers'). A memory limit is never set below what is in use.
    fn resize_in_place(&self, which: &[usize]) -> Result<(), String> {
        let live = |i: usize| {
            let c = &self.pod.containers()[i];
            (self.instances.get(InstanceId {
                container: i,
                instance: c.instance,
            }))
            .and_then(|l| l.cgroup.as_ref())
        };
        let pod_cg = self.cgroups.pod.as_ref();
        let pod_new = self.plan.pod_resources;
        if let (Some(pod), Some(limit)) = (pod_cg, pod_new.memory_limit) {
            if pod.memory_usage().is_some_and(|u| u >= limit) {
                return Err(format!(
                    "aborting attempt to set pod memory limit less than current memory usage for pod {}",
                    self.info.name
                ));
            }
        }
        for &i in which {
            let (Some(cg), Some(limit)) = (live(i), self.plan.exec[i].resources.memory_limit)
            else {
                continue;
            };
            let shrinking = self.resizing.applied[i]
                .memory_limit
                .is_none_or(|l| limit < l);
            if let Some(usage) = cg.memory_usage().filter(|u| shrinking && *u >= limit) {
                return Err(format!(
                    "aborting attempt to set memory limit of container {} to {limit} bytes, less than its current memory usage ({usage} bytes)",
                    self.pod.containers()[i].name
                ));
            }
        }
        let err = |e: crate::cgroup::CgroupError| e.to_string();
        for what in [Resource::Memory, Resource::Cpu] {
            let amount = |r: &Resources| match what {
                Resource::Memory => r.memory_limit,
                Resource::Cpu => r.cpu_limit.or(r.cpu_request),
            };
            let grows = amount(&pod_new) >= amount(&self.resizing.pod_applied);
            if grows {
                pod_cg
                    .map(|p| p.update(&pod_new, what))
                    .transpose()
                    .map_err(err)?;
            }
            let mut order: Vec<usize> = which.to_vec();
            // Decreases first.
            order.sort_by_key(|&i| {
                amount(&self.plan.exec[i].resources) > amount(&self.resizing.applied[i])
            });
            for i in order {
                if let Some(cg) = live(i) {
                    cg.update(&self.plan.exec[i].resources, what).map_err(err)?;
                }
            }
            if !grows {
                pod_cg
                    .map(|p| p.update(&pod_new, what))
                    .transpose()
                    .map_err(err)?;
            }
        }
        Ok(())
    }

    /// A resize that failed, tried again when its time comes.
    pub(super) fn retry_resize(&mut self) -> io::Result<()> {
        if self
            .resizing
            .retry_at
            .is_some_and(|t| self.clock.now() >= t)
        {
            self.actuate()?;
            self.after_changes();
        }
        Ok(())
    }

    /// Whether a running container's cgroup is not yet what it is allocated.
    fn resize_in_progress(&self) -> bool {
        // The resources first: a few comparisons, where a lookup is more.
        (self.pod.containers().iter().enumerate()).any(|(i, _)| {
            resize_action(
                &self.resizing.policies[i],
                &self.resizing.applied[i],
                &self.plan.exec[i].resources,
            ) != ResizeAction::None
                && self.running(i)
        })
    }

    fn running(&self, i: usize) -> bool {
        let c = &self.pod.containers()[i];
        let id = InstanceId {
            container: i,
            instance: c.instance,
        };
        self.instances.get(id).is_some()
    }

    /// When each resize condition began (after a change).
    pub(super) fn resize_conditions_changed(&mut self) {
        let now = SystemTime::now();
        let on = [
            ("PodResizePending", self.resizing.pending.is_some()),
            ("PodResizeInProgress", self.resize_in_progress()),
        ];
        for (kind, on) in on {
            if on {
                self.resizing.since.entry(kind).or_insert(now);
            } else {
                self.resizing.since.remove(kind);
            }
        }
    }

    /// The resize conditions (`PodResizePending`, `PodResizeInProgress`), added to the Pod
    /// the API shows.
    pub(super) fn resize_conditions(&self, conditions: &mut Vec<PodCondition>) {
        let in_progress = self.resize_in_progress();
        let now = SystemTime::now();
        let mut add = |kind: &'static str, on: bool, reason: Option<String>, message| {
            if !on {
                return;
            }
            let at = self.resizing.since.get(kind).copied().unwrap_or(now);
            conditions.push(PodCondition {
                type_: kind.into(),
                status: "True".into(),
                reason,
                message,
                last_transition_time: Some(crate::status::time(at)),
                observed_generation: Some(self.info.generation),
                ..Default::default()
            });
        };
        let pending = self.resizing.pending.clone();
        add(
            "PodResizePending",
            pending.is_some(),
            pending.as_ref().map(|p| p.0.to_string()),
            pending.map(|p| p.1),
        );
        let error = self.resizing.error.clone();
        add(
            "PodResizeInProgress",
            in_progress,
            error.as_ref().map(|_| "Error".to_string()),
            error,
        );
    }

    /// Container `i`'s resources as its status shows them: allocated (`allocatedResources`)
    /// and applied to its running instance (`resources`; its allocation when none runs).
    pub(super) fn resize_resources(&self, i: usize) -> [Resources; 2] {
        let allocated = self.plan.exec[i].resources;
        let actual = if self.running(i) {
            self.resizing.applied[i]
        } else {
            allocated
        };
        [allocated, actual]
    }
}
