//! Metrics scrapes answered apart from the run loop. The loop takes what only it knows (each
//! container's restarts and stage, and where its running instance's usage is read) and hands
//! it to a thread of its own, which reads the usage, makes the text and wakes the loop to send
//! it. On a pod of a thousand containers those reads take tens of milliseconds: the probes,
//! restarts and other clients due meanwhile do not wait for them.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{channel, Receiver, Sender};

use crate::api::metrics::{render, Counters, PodSample};
use crate::process::failpoint;
use crate::process::sys::{self, Epoll, EV_READ};

/// Which server a scrape came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// The pod's API socket (`GET /metrics` there).
    Api,
    /// `--metrics-addr`.
    Metrics,
}

/// A scrape to answer: the client and what its text is made of.
#[derive(Debug)]
pub(super) struct Job {
    pub via: Via,
    pub slot: usize,
    /// The server's serial number for it: a slot taken by another client since gets nothing.
    pub serial: u64,
    pub counters: Counters,
    pub sample: PodSample,
}

/// A scrape's text, made.
#[derive(Debug)]
pub(super) struct Answer {
    pub via: Via,
    pub slot: usize,
    pub serial: u64,
    pub text: String,
}

/// The thread that makes scrapes' texts, one after the other.
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
                    failpoint::stall("metrics.scrape");
                    let text = render(&job.counters, &job.sample);
                    let answer = Answer {
                        via: job.via,
                        slot: job.slot,
                        serial: job.serial,
                        text,
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
