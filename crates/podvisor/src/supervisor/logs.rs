//! The containers' log streams this process reads: adding them to the loop, draining them,
//! and the events of what happened to their writes.

use std::io;

use podvisor_core::lifecycle::{Event, EventType, InstanceId, LOG_TAIL_LINES};

use super::{Supervisor, TOKEN_LOG};
use crate::process::failpoint;
use crate::process::sys::EV_READ;
use crate::state::logs::{tail_text, LogNews, LogStream};

impl Supervisor {
    /// Reads `log` in the loop from now on (its slot is its epoll token).
    pub(super) fn add_log(&mut self, log: LogStream) -> io::Result<()> {
        failpoint::error("run.log.add")?;
        let entry = self.logs.vacant_entry();
        self.epoll
            .add(log.fd(), TOKEN_LOG | entry.key() as u64, EV_READ)?;
        entry.insert(log);
        Ok(())
    }

    /// Takes what log stream `slot` has; a stream that has ended goes.
    pub(super) fn drain_log(&mut self, slot: usize) -> io::Result<()> {
        failpoint::error("run.log.drain")?;
        let Some(log) = self.logs.get_mut(slot) else {
            return Ok(());
        };
        let open = log.drain(&mut self.log_scratch)?;
        let (news, owner) = (log.take_news(), log.owner);
        if !open {
            self.logs.remove(slot);
        }
        self.tell_log_news(owner.container, news);
        Ok(())
    }

    /// Takes what the log streams of instance `id` have now.
    pub(super) fn drain_logs_of(&mut self, id: InstanceId) -> io::Result<()> {
        let slots: Vec<usize> = (self.logs.iter())
            .filter(|(_, l)| l.owner == id)
            .map(|(slot, _)| slot)
            .collect();
        for slot in slots {
            self.drain_log(slot)?;
        }
        Ok(())
    }

    /// Events for what happened to container `container`'s log writes (here, or in the keeper
    /// that writes them).
    pub(super) fn tell_log_news(&mut self, container: usize, news: Vec<LogNews>) {
        let name = self.plan.pod.containers[container].name.clone();
        for n in news {
            // Told once per container until its output is written again (each new instance
            // of a crash-looping container would say it again).
            let failing = &mut self.log_failing[container];
            match n {
                LogNews::Failing(_) if *failing => continue,
                LogNews::Failing(_) => *failing = true,
                LogNews::Recovered { .. } | LogNews::Written if !*failing => continue,
                LogNews::Recovered { .. } | LogNews::Written => *failing = false,
                LogNews::Replaced => {}
            }
            let (kind, reason, message) = match n {
                LogNews::Failing(why) => (
                    EventType::Warning,
                    "LogWriteFailed",
                    format!("Cannot write the log of container {name}: {why}; its output is dropped until it can be written again"),
                ),
                LogNews::Recovered { dropped } => (
                    EventType::Normal,
                    "LogWriteRecovered",
                    format!("The log of container {name} is written again; {dropped} bytes of its output were dropped"),
                ),
                LogNews::Written => (
                    EventType::Normal,
                    "LogWriteRecovered",
                    format!("The log of container {name} is written again (its new instance's)"),
                ),
                LogNews::Replaced => (
                    EventType::Warning,
                    "LogFileReplaced",
                    format!("The log file of container {name} was removed while it ran; a new one is written"),
                ),
            };
            let mut event = super::persist::pod_note(kind, reason, message);
            event.object = name.clone();
            self.pending.push((std::time::SystemTime::now(), event));
        }
    }

    /// The end of a Debug instance's log as an event: its streams are read to what they hold
    /// first, so that its last lines are there. A log that cannot be read is said instead (a
    /// Warning), and the pod goes on.
    pub(super) fn log_tail(&mut self, id: InstanceId) -> io::Result<Event> {
        self.drain_logs_of(id)?;
        let c = &self.pod.containers()[id.container];
        let dir = self.dir.container_logs(&c.name);
        let (kind, message) = match tail_text(&dir, id.instance, LOG_TAIL_LINES) {
            Ok(text) if text.is_empty() => (
                EventType::Normal,
                format!("Container {} wrote nothing", c.name),
            ),
            Ok(text) => (EventType::Normal, text),
            Err(why) => (
                EventType::Warning,
                format!("Cannot read the log of container {}: {why}", c.name),
            ),
        };
        Ok(Event {
            kind,
            reason: "DebugLogTail".into(),
            object: c.name.clone(),
            message,
            exit_code: None,
            restart_count: Some(c.restart_count),
            stage: c.stage,
        })
    }
}
