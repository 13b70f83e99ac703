//! Answers made apart from the run loop: metrics scrapes, and the status with each running
//! container's usage (`status`, `describe`). The loop takes what only it knows (each
//! container's restarts and stage, the status, and where each running instance's usage is
//! read) and hands it to a thread of its own, which reads the usage, makes the text and wakes
//! the loop to send it. On a pod of a thousand containers those reads take tens of
//! milliseconds: the probes, restarts and other clients due meanwhile do not wait for them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{channel, Receiver, Sender};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::metrics::{render, Counters, PodSample};
use crate::api::Made;
use crate::cgroup::UsageFiles;
use crate::process::failpoint;
use crate::process::sys::{self, Epoll, EV_READ};
use crate::status;

/// Which server a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// The pod's API socket (`GET /metrics` there).
    Api,
    /// `--metrics-addr`.
    Metrics,
}

/// An answer to make: the client and what it is made of.
#[derive(Debug)]
pub(super) struct Job {
    pub via: Via,
    pub slot: usize,
    /// The server's serial number for it: a slot taken by another client since gets nothing.
    pub serial: u64,
    pub work: Work,
}

/// What an answer is made of.
#[derive(Debug)]
pub(super) enum Work {
    /// A metrics scrape.
    Metrics {
        counters: Counters,
        sample: PodSample,
    },
    /// The status with each running container's usage.
    Status(Box<StatusSample>),
}

/// The status line as the loop made it, without the usage: its metadata still typed (the
/// usage goes in its annotations) and the rest as text.
#[derive(Debug)]
pub(super) struct StatusSample {
    pub metadata: ObjectMeta,
    /// What follows the metadata in the line (`status::LineParts::after_metadata`).
    pub after: String,
    /// Each running container's name, and where its usage is read.
    pub usage: Vec<(String, UsageFiles)>,
}

impl Work {
    /// Reads what it needs and makes the answer.
    pub fn make(self) -> Made {
        match self {
            Work::Metrics { counters, sample } => {
                failpoint::stall("metrics.scrape");
                Made::Metrics(render(&counters, &sample))
            }
            Work::Status(sample) => {
                failpoint::stall("status.usage");
                Made::Json(sample.line())
            }
        }
    }
}

impl StatusSample {
    /// The status line, with a `podvisor.io/usage.NAME` annotation ("cpu=1.234s
    /// memory=BYTES") for each container whose cgroup is still there when read.
    fn line(mut self) -> String {
        let annotations = self.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for (name, files) in &self.usage {
            if let Some(u) = files.read() {
                annotations.insert(
                    format!("podvisor.io/usage.{name}"),
                    format!("cpu={:.3}s memory={}", u.cpu_seconds, u.working_set),
                );
            }
        }
        let metadata = serde_json::to_string(&self.metadata).unwrap_or_default();
        format!("{}\n", status::line_of(&metadata, &self.after))
    }
}

/// An answer, made.
#[derive(Debug)]
pub(super) struct Answer {
    pub via: Via,
    pub slot: usize,
    pub serial: u64,
    pub made: Made,
}

/// The thread that makes answers, one after the other.
#[derive(Debug)]
pub(super) struct Scraper {
    jobs: Sender<Job>,
    answers: Receiver<Answer>,
    /// Readable (in the loop's epoll, as `token`) when answers wait.
    wake_read: File,
}

impl Scraper {
    /// Starts the thread; its answers wake `epoll` with `token`.
    pub fn start(epoll: &Epoll, token: u64) -> io::Result<Scraper> {
        let (wake_read, wake_write) = sys::pipe()?;
        let wake = File::from(wake_write);
        let (jobs, jobs_rx) = channel::<Job>();
        let (answers_tx, answers) = channel();
        std::thread::Builder::new()
            .name("scrape".into())
            .spawn(move || {
                // It ends when the loop drops its `Scraper`.
                for job in jobs_rx {
                    let answer = Answer {
                        via: job.via,
                        slot: job.slot,
                        serial: job.serial,
                        made: job.work.make(),
                    };
                    if answers_tx.send(answer).is_err() {
                        return;
                    }
                    let _ = (&wake).write_all(b"x");
                }
            })?;
        epoll.add(wake_read.as_raw_fd(), token, EV_READ)?;
        Ok(Scraper {
            jobs,
            answers,
            wake_read,
        })
    }

    /// Hands `job` to the thread; gives it back if the thread is gone.
    pub fn ask(&self, job: Job) -> Option<Job> {
        self.jobs.send(job).err().map(|e| e.0)
    }

    /// The answers made since the last call (the wake pipe was readable).
    pub fn answers(&mut self) -> Vec<Answer> {
        let mut buf = [0u8; 64];
        while matches!(self.wake_read.read(&mut buf), Ok(n) if n > 0) {}
        self.answers.try_iter().collect()
    }
}
