//! The exits of the run's children: containers it started (not under a keeper), exec probes
//! and hooks, `podvisor exec` commands, its keeper, the pod's PID 1, and orphans that came
//! back to it (it is a child subreaper). Each exit goes by pid to whoever the child is.

use std::io;

use podvisor_core::clock::Clock;
use podvisor_core::lifecycle::{Input, InstanceId};

use super::{PidOwner, Supervisor};
use crate::probe::Owner;
use crate::process::failpoint;
use crate::process::stat::ProcStat;
use crate::process::sys::{self, Exit, Reaped};

impl Supervisor {
    /// Kills the exec tasks still running and reaps them, and `ending` (a keeper that ends,
    /// the pod's PID 1), so that nothing outlives the run. Between looks it waits for the next
    /// SIGCHLD (the run ends: the signals read meanwhile are dropped), so that the run ends as
    /// soon as the last of them has.
    pub(super) fn reap_children(&mut self, ending: Vec<i32>) {
        let mut left: Vec<i32> = self.tasks.cancel_all();
        left.extend(ending);
        left.retain(|pid| self.pids.contains_key(pid));
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !left.is_empty() {
            let now = std::time::Instant::now();
            if now >= give_up {
                break;
            }
            match sys::reap_one() {
                Ok(Reaped::Exited { pid, .. }) => left.retain(|&p| p != pid),
                Ok(Reaped::NoneReady) => {
                    let signals = [self.signals.as_raw_fd()];
                    if sys::poll_readable(&signals, Some(give_up - now)).is_err() {
                        break;
                    }
                    let _ = self.signals.read_all();
                }
                Ok(Reaped::NoChildren) | Err(_) => break,
            }
        }
    }

    /// A SIGCHLD from `sender`. A container or probe process of ours is waited for by its pid.
    /// But a SIGCHLD that comes while one is pending is merged into it, so other children may
    /// have exited too. A container this run started says so itself, through its pidfd
    /// (`exit_ready`); for the rest (probes, hooks, `exec` commands), all children are looked
    /// through (`waitpid(-1)`, which walks the list of children, a thousand with a thousand
    /// containers) within `REAP_SCAN_DELAY`, once for all the signals until then, rather than
    /// at every exit. An orphan that came back to us (or a sender we do not know) is looked
    /// for at once, as is every exit once the pod is stopping.
    pub(super) fn reap(&mut self, sender: i32) -> io::Result<()> {
        // Once the pod is stopping, every container is ending: their exits are collected as
        // they come, not held back for the scan.
        if self.stopped || !self.pids.contains_key(&sender) {
            return self.scan_children();
        }
        if let Some(exit) = sys::reap_pid(sender)? {
            self.exited(sender, exit)?;
        }
        if self.scan_due.is_none() {
            self.scan_due = Some(self.clock.now() + self.scan_delay);
        }
        Ok(())
    }

    /// The pidfd of container `pid`, a child of this run, says it has exited: its exit is
    /// collected now, even when its SIGCHLD was merged into another's. (Its pid may already
    /// have been reaped by that SIGCHLD, or be another child's since: then nothing is due.)
    pub(super) fn exit_ready(&mut self, pid: i32) -> io::Result<()> {
        if !matches!(self.pids.get(&pid), Some(PidOwner::Container(_))) {
            return Ok(());
        }
        match sys::reap_pid(pid)? {
            Some(exit) => self.exited(pid, exit),
            None => Ok(()),
        }
    }

    /// Collects every exited child.
    pub(super) fn scan_children(&mut self) -> io::Result<()> {
        self.scan_due = None;
        loop {
            match sys::reap_one()? {
                Reaped::Exited { pid, exit } => self.exited(pid, exit)?,
                Reaped::NoneReady | Reaped::NoChildren => return Ok(()),
            }
        }
    }

    fn exited(&mut self, pid: i32, exit: Exit) -> io::Result<()> {
        let id = match self.pids.remove(&pid) {
            None => return Ok(()), // an adopted orphan, or a timed-out exec task
            Some(PidOwner::Task(slot)) => {
                let now = self.clock.now();
                let Some(done) = self.tasks.on_exit(slot, pid, exit, now) else {
                    return Ok(());
                };
                if exit == Exit::Signal(libc::SIGKILL) && self.ending_with_its_container(done.0) {
                    // Killed as its container ends by itself (the kernel kills what runs in
                    // the PID namespace of an init that exits, and that init's exit waits for
                    // this reap): the probe says nothing of the container's health, and the
                    // container's exit, which comes next, ends its probes.
                    return Ok(());
                }
                return self.task_done(done);
            }
            Some(PidOwner::Keeper) => return self.keeper_gone(pid),
            Some(PidOwner::Exec(slot)) => {
                self.exec_exited(slot, pid, exit);
                return Ok(());
            }
            Some(PidOwner::Pause) => {
                // Its PID namespace and what ran there are gone; the next start makes another.
                self.sandbox.pause_exited(pid);
                return Ok(());
            }
            Some(PidOwner::Container(id)) => id,
        };
        failpoint::stall("run.exit");
        let message = self.termination_message(id, exit.code())?;
        let oom_killed = self.instance_ended(id);
        self.feed(Input::Exited(
            id,
            podvisor_core::lifecycle::Exit {
                status: exit,
                oom_killed,
                message,
            },
        ))
    }

    /// Whether `owner` is a probe whose container's main process has begun to exit.
    fn ending_with_its_container(&self, owner: Owner) -> bool {
        let Owner::Probe(id, _) = owner else {
            return false;
        };
        let instance = self.instances.get(id);
        instance.is_some_and(|i| ProcStat::read(i.pid).is_some_and(|s| s.exiting()))
    }

    /// What goes when an instance's process has ended: its probes and hooks, namespaces,
    /// what it left in its process group, and its cgroup. Returns whether the OOM killer
    /// killed in it (read before the cgroup goes).
    pub(super) fn instance_ended(&mut self, id: InstanceId) -> bool {
        // Its probes and hooks end with it, as they would in its container.
        self.tasks.cancel_instance(id);
        self.probe_tries.retain(|(i, _), _| *i != id);
        let Some(instance) = self.instances.end(id) else {
            return false;
        };
        if let Some(fd) = instance.exit_watch() {
            let _ = self.epoll.delete(fd);
        }
        // What the container left in its group goes with it.
        let _ = sys::send_signal(-instance.pid, libc::SIGKILL);
        let mut oom_killed = false;
        if let Some(cg) = instance.cgroup {
            oom_killed = cg.oom_killed();
            if let Some(pod) = self.cgroups.pod.as_mut() {
                pod.release(cg);
            }
        }
        oom_killed
    }
}

/// How soon after a SIGCHLD all children are looked through for exits it may stand for.
pub(super) const REAP_SCAN_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// The environment variable that sets `REAP_SCAN_DELAY` in milliseconds, for tests that check
/// that a container's exit is noted without the scan.
pub(super) const TEST_SCAN_DELAY_ENV: &str = "PODVISOR_TEST_REAP_SCAN_MS";
