//! Probe attempts and hooks: starting their tasks and hearing how they ended.

use podvisor_core::clock::Clock;
use podvisor_core::lifecycle::{Hook, Input, InstanceId};
use podvisor_core::probe::{Outcome as ProbeOutcome, ProbeKind};
use podvisor_core::spec::plan::Handler;

use super::instance::Instance;
use super::{PidOwner, Supervisor, TOKEN_TASK};
use crate::probe::{Done, ExecContext, Owner};

impl Supervisor {
    /// Starts a probe attempt or hook; the input to feed when it ended at once. Its handler is
    /// the plan's, borrowed (a probe runs every period: nothing of it is copied), and the exec
    /// context is made only for a command.
    pub(super) fn start_task(
        &mut self,
        owner: Owner,
        timeout: Option<std::time::Duration>,
    ) -> Option<Input> {
        let now = self.clock.now();
        // Out of `self` while the handler and the context borrow the rest of it.
        let mut tasks = std::mem::take(&mut self.tasks);
        let started = match self.task_handler(owner) {
            Some(handler) => {
                let ctx = || self.exec_context(owner.instance());
                tasks.start(owner, handler, timeout, now, ctx, &self.epoll, TOKEN_TASK)
            }
            // The callers start only what the plan has.
            None => Ok(None),
        };
        self.tasks = tasks;
        match started {
            Ok(Some((pid, slot))) => {
                self.pids.insert(pid, PidOwner::Task(slot));
                None
            }
            Ok(None) => None,
            Err(done) => self.task_finished(done),
        }
    }

    /// What a task of `owner` runs, as the plan has it: its probe's or its hook's handler.
    pub(super) fn task_handler(&self, owner: Owner) -> Option<&Handler> {
        let exec = &self.plan.exec[owner.instance().container];
        match owner {
            Owner::Probe(_, kind) => exec.probe(kind),
            Owner::Hook(_, Hook::PostStart) => exec.post_start.as_deref(),
            Owner::Hook(_, Hook::PreStop) => exec.pre_stop.as_deref(),
        }
    }

    /// What a command run in an instance's container gets, as CRI exec gives it: the
    /// container's environment, working directory, namespaces, cgroups and identity.
    pub(super) fn exec_context(&self, id: InstanceId) -> ExecContext<'_> {
        let i = id.container;
        let instance = self.instances.get(id);
        ExecContext {
            env: &self.envs[i],
            working_dir: self.working_dir(i),
            working_dir_optional: self.plan.exec[i].working_dir.is_none(),
            inherited: &self.inherited,
            mounts: instance.and_then(Instance::mount_join),
            user_ns: instance.and_then(Instance::user_ns),
            namespaces: instance.map(Instance::exec_namespaces).unwrap_or_default(),
            cgroups: instance.map(Instance::cgroup_fds).unwrap_or_default(),
            credentials: self.credentials.get(i),
        }
    }

    /// Starts an attempt of a probe of a running instance.
    pub(super) fn start_probe(&mut self, id: InstanceId, kind: ProbeKind) -> Option<Input> {
        let timeout = self.plan.pod.containers[id.container]
            .probes
            .get(kind)
            .map(|p| p.timing.timeout);
        self.start_task(Owner::Probe(id, kind), timeout)
    }

    /// A probe or hook task ended: the input that reports it, or none yet when an attempt that
    /// *errored* (could not run at all) is tried again. As the kubelet's `runProbeWithRetries`
    /// (pkg/kubelet/prober/prober.go): up to `PROBE_TRIES` tries in one attempt, at once.
    pub(super) fn task_finished(&mut self, (owner, outcome, took): Done) -> Option<Input> {
        let (id, kind) = match owner {
            Owner::Hook(id, hook) => return Some(Input::HookDone(id, hook, hook_result(outcome))),
            Owner::Probe(id, kind) => (id, kind),
        };
        let name = &self.plan.pod.containers[id.container].name;
        if let ProbeOutcome::Error(_) = outcome {
            self.counters.probe_error(name, kind);
            let tries = self.probe_tries.entry((id, kind)).or_insert(0);
            *tries += 1;
            if *tries < PROBE_TRIES {
                return self.start_probe(id, kind);
            }
        }
        self.probe_tries.remove(&(id, kind));
        if self.metrics.is_some() {
            self.counters
                .probe(id.container, name, kind, &outcome, took);
        }
        Some(Input::Probed(id, kind, outcome))
    }
}

/// Tries of one probe attempt that errors (the kubelet's `maxProbeRetries`).
const PROBE_TRIES: u32 = 3;

/// A hook's result from its handler's outcome: the output of a failure says why.
pub(super) fn hook_result(outcome: ProbeOutcome) -> Result<(), String> {
    match outcome {
        ProbeOutcome::Success | ProbeOutcome::Warning(_) => Ok(()),
        ProbeOutcome::Failure(why) | ProbeOutcome::Error(why) => Err(why),
    }
}
