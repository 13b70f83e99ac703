//! Answers to the status API and metrics scrapes, and what follows a change the API shows
//! (condition transition times, status watchers).

use std::collections::BTreeMap;
use std::io;
use std::time::SystemTime;

use podvisor_core::clock::{Clock, Instant};
use podvisor_core::lifecycle::{ContainerStatus, EventType, Input, InstanceId, Kind};

use super::instance::Instance;
use super::scrape::{Job, Scraper, StatusSample, Via, Work};
use super::Supervisor;
use crate::api::metrics::{ContainerSample, PodSample, Usage};
use crate::api::{Request, Subresource, Watch};
use crate::status;

impl Supervisor {
    /// Answers an API request.
    pub(super) fn serve(&mut self, slot: usize, request: Request) -> io::Result<()> {
        match request {
            Request::Status => {
                let work = Work::Status(Box::new(self.status_sample()));
                self.answer_apart(Via::Api, slot, work);
            }
            Request::WatchStatus { patches } => {
                // The watchers there already are brought up to now first: every patch is
                // from the status all of them were sent last.
                let parts = self.status_parts();
                self.send_status(parts.clone());
                let first = format!("{}\n", parts.line());
                let kind = Watch::Status { patches };
                self.api.watch(slot, kind, &first, &self.epoll);
            }
            Request::Events => {
                let body = self.api.recent_events();
                self.api.reply(slot, 200, &body, &self.epoll);
            }
            Request::WatchEvents => {
                let first = self.api.recent_events();
                self.api.watch(slot, Watch::Events, &first, &self.epoll);
            }
            Request::Stop => {
                self.api
                    .reply(slot, 202, "{\"stopping\":true}\n", &self.epoll);
                // As `kubectl delete pod`: the next run of the manifest is a new pod.
                self.deleted = true;
                if !self.stopped {
                    self.stopped = true;
                    self.save_if_changed();
                    self.feed(Input::Stop)?;
                }
            }
            Request::Exec {
                container,
                command,
                terminal,
            } => self.exec(slot, &container, &command, terminal),
            Request::Metrics => self.scrape(Via::Api, slot),
            Request::RestartPod => {
                if self.stopped || self.pod.phase().is_terminal() {
                    self.api
                        .reply(slot, 409, "the pod is stopping\n", &self.epoll);
                } else {
                    self.api
                        .reply(slot, 202, "{\"restarting\":\"pod\"}\n", &self.epoll);
                    self.feed(Input::RestartPod)?;
                }
            }
            Request::Patch {
                subresource: Subresource::Resize,
                kind,
                body,
            } => self.resize(slot, kind, &body)?,
            Request::Patch {
                subresource: Subresource::Status,
                kind,
                body,
            } => self.patch_status(slot, kind, &body)?,
            Request::RestartContainer(name) => {
                let found = self.pod.containers().iter().position(|c| c.name == name);
                match found {
                    None => {
                        let msg = self.no_such_container(&name);
                        self.api.reply(slot, 404, &msg, &self.epoll);
                    }
                    Some(_) if self.stopped || self.pod.phase().is_terminal() => {
                        self.api
                            .reply(slot, 409, "the pod is stopping\n", &self.epoll);
                    }
                    Some(i) if self.plan.pod.containers[i].kind == Kind::Init => {
                        let msg = format!(
                            "{name} is an init container: it runs once per pod start; restart the whole pod (podvisor restart) to run it again\n"
                        );
                        self.api.reply(slot, 409, &msg, &self.epoll);
                    }
                    Some(i) => {
                        let body = format!("{}\n", serde_json::json!({"restarting": name}));
                        self.api.reply(slot, 202, &body, &self.epoll);
                        self.feed(Input::RestartContainer(i))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The answer to a request that names a container the pod does not have (restart, exec).
    pub(super) fn no_such_container(&self, name: &str) -> String {
        let names: Vec<&str> = (self.pod.containers().iter())
            .map(|c| c.name.as_str())
            .collect();
        format!(
            "no container {name:?} in pod {}; its containers: {}\n",
            self.info.name,
            names.join(", ")
        )
    }

    /// A metrics scrape of `via`'s client at `slot`.
    pub(super) fn scrape(&mut self, via: Via, slot: usize) {
        let work = Work::Metrics {
            counters: self.counters.clone(),
            sample: self.metrics_sample(),
        };
        self.answer_apart(via, slot, work);
    }

    /// The answer to `via`'s client at `slot`, made of `work` by the scrape thread (started
    /// at the first such answer), or here if that thread cannot run.
    fn answer_apart(&mut self, via: Via, slot: usize, work: Work) {
        if self.scraper.is_none() {
            match Scraper::start(&self.epoll, super::TOKEN_SCRAPE) {
                Ok(s) => self.scraper = Some(s),
                Err(e) => self.note(
                    EventType::Warning,
                    "ScrapeThread",
                    format!("cannot start the thread that answers metrics scrapes and status requests ({e}); the run loop answers them"),
                ),
            }
        }
        let server = match via {
            Via::Api => &mut self.api,
            Via::Metrics => match self.metrics.as_mut() {
                Some(m) => m,
                None => return,
            },
        };
        let job = Job {
            via,
            slot,
            serial: server.answer_started(slot, &self.epoll),
            work,
        };
        let job = match &self.scraper {
            Some(scraper) => match scraper.ask(job) {
                None => return,
                Some(job) => job,
            },
            None => job,
        };
        let made = job.work.make();
        server.answer_ended(slot, job.serial, &made, &self.epoll);
    }

    /// The answers made since the last call: each to its client.
    pub(super) fn scrapes_done(&mut self) {
        let Some(scraper) = self.scraper.as_mut() else {
            return;
        };
        for a in scraper.answers() {
            let server = match a.via {
                Via::Api => Some(&mut self.api),
                Via::Metrics => self.metrics.as_mut(),
            };
            if let Some(server) = server {
                server.answer_ended(a.slot, a.serial, &a.made, &self.epoll);
            }
        }
    }

    /// Each container, with its running instance (none while it waits or after it ended).
    fn with_running_instances(
        &self,
    ) -> impl Iterator<Item = (&ContainerStatus, Option<&Instance>)> {
        let containers = self.pod.containers().iter().enumerate();
        containers.map(|(i, c)| {
            let live = InstanceId {
                container: i,
                instance: c.instance,
            };
            (c, self.instances.get(live))
        })
    }

    /// What a scrape's text is made of, beside the counters: each container's state now, and
    /// where its running instance's usage is read.
    fn metrics_sample(&self) -> PodSample {
        let containers = self
            .with_running_instances()
            .map(|(c, live)| {
                let usage = match live.and_then(|l| l.cgroup.as_ref()) {
                    Some(cg) => Usage::Cgroup(cg.usage_files()),
                    None => Usage::Process,
                };
                ContainerSample {
                    name: c.name.clone(),
                    restarts: c.restart_count,
                    pgid: live.map(|l| l.pid),
                    usage,
                    stage: c.stage,
                    verdict: c.judgement.verdict,
                }
            })
            .collect();
        PodSample {
            pod_restarts: self.pod.pod_restarts(),
            restarts_all: self.pod.restarts_all(),
            containers,
        }
    }

    /// The pod as a v1 Pod object, on one line, as its watchers get it and the record keeps
    /// it: without usage, which is no change of state and would make every line differ.
    pub(super) fn status_json(&self) -> String {
        self.status_parts().line()
    }

    /// `status_json` in its parts (`status::LineParts`).
    fn status_parts(&self) -> status::LineParts {
        let (pod, containers) = self.status_pod();
        status::pod_parts(pod, containers, &self.info.spec)
    }

    /// `status` and `describe`: the status line, and where each running instance's usage is
    /// read, for the scrape thread to add (`podvisor.io/usage.NAME` annotations).
    fn status_sample(&self) -> StatusSample {
        let (mut pod, containers) = self.status_pod();
        let metadata = std::mem::take(&mut pod.metadata);
        let after = status::pod_parts(pod, containers, &self.info.spec).after_metadata();
        let usage = self
            .with_running_instances()
            .filter_map(|(c, live)| {
                let cg = live?.cgroup.as_ref()?;
                Some((c.name.clone(), cg.usage_files()))
            })
            .collect();
        StatusSample {
            metadata,
            after,
            usage,
        }
    }

    /// The pod, its status without the containers' statuses, and each container's status.
    fn status_pod(&self) -> (status::ApiPod, status::ContainerParts) {
        // The clock is anchored to the epoch.
        let wall = move |t: Instant| SystemTime::UNIX_EPOCH + t.since_origin();
        let times: BTreeMap<&'static str, SystemTime> = self
            .condition_times
            .iter()
            .map(|(k, (_, t))| (*k, *t))
            .collect();
        let outside = self.outside.statuses();
        let mut pod = status::pod(&self.pod, &self.info, &times, &outside);
        if let Some(conditions) = pod.status.as_mut().and_then(|st| st.conditions.as_mut()) {
            self.resize_conditions(conditions);
            self.outside.show(conditions);
        }
        pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
        // Each container's status, made again only when what it is made from changed.
        let instances = &self.instances;
        let pid_of = |i: usize, n: u32| instances.pid_of(i, n);
        let mut cache = self.status_lines.borrow_mut();
        let mut containers = status::ContainerParts::default();
        for (i, p) in self.pod.plan().containers.iter().enumerate() {
            let resources = self.resize_resources(i);
            let creds = &self.credentials[i];
            // Without root and user namespaces, the process keeps podvisor's own identity,
            // which `creds` holds as it was when the run began.
            let identity = status::Identity {
                uid: creds.uid,
                gid: creds.gid,
                groups: std::borrow::Cow::Borrowed(&creds.groups),
            };
            let info = &self.info;
            let inputs =
                status::ContainerInputs::of(&self.pod, info, i, &pid_of, resources, identity);
            let json = cache.container(i, &inputs, &wall);
            match p.kind {
                Kind::Main => containers.main.push(json),
                Kind::Init | Kind::Sidecar => {
                    containers.init.get_or_insert_with(Vec::new).push(json)
                }
            }
        }
        (pod, containers)
    }

    /// An event of the pod's, from the shell (announced with the turn's others).
    pub(super) fn note(&mut self, kind: EventType, reason: &str, message: String) {
        let event = super::persist::pod_note(kind, reason, message);
        self.pending.push((SystemTime::now(), event));
    }

    /// When the next API client's time runs out (a request not whole, an answer not taken).
    pub(super) fn clients_expire_at(&self) -> Option<Instant> {
        let servers = std::iter::once(&self.api).chain(self.metrics.as_ref());
        let soonest = servers.filter_map(|s| s.expires_in()).min()?;
        Some(self.clock.now() + soonest)
    }

    /// Clients whose time ran out.
    pub(super) fn expire_clients(&mut self) {
        self.api.expire(&self.epoll);
        if let Some(m) = self.metrics.as_mut() {
            m.expire(&self.epoll);
        }
    }

    /// After a step with events: condition transition times, and the status watchers.
    pub(super) fn after_changes(&mut self) {
        self.resize_conditions_changed();
        let now = SystemTime::now();
        for c in self.pod.conditions_given(&self.outside.statuses()) {
            let entry = self
                .condition_times
                .entry(c.kind)
                .or_insert((c.status, now));
            if entry.0 != c.status {
                *entry = (c.status, now);
            }
        }
        if self.api.status_watched() {
            let parts = self.status_parts();
            self.send_status(parts);
        }
    }

    /// Sends the status to its watchers if it changed since they were sent it last.
    fn send_status(&mut self, parts: status::LineParts) {
        let Some(before) = &self.status_sent else {
            // Nobody was sent one yet: nobody watches.
            self.status_sent = Some(parts);
            return;
        };
        if let Some(patch) = parts.patch_from(before) {
            self.api.status(&patch, || parts.line());
            self.status_sent = Some(parts);
        }
    }
}
