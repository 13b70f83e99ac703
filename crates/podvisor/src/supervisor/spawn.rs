//! Starting container instances: their roots, mounts, environment and processes.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;

use podvisor_core::clock::Clock;
use podvisor_core::lifecycle::{Input, InstanceId};
use podvisor_core::spec::plan::{ContainerExec, RunPlan};
use podvisor_core::stage::Stage;

use super::instance::Instance;
use super::{PidOwner, Supervisor, TOKEN_EXIT};
use crate::cgroup::InstanceCgroup;
use crate::process::starters::Job;
use crate::process::streams::Streams;
use crate::process::sys::{
    self, BindMount, ChildSetup, ContainerIo, Environment, PrivateRoot, EV_ONESHOT, EV_READ,
};
use crate::state::logs::{LogFile, LogStream};

/// How many starts are asked for (of the keeper, or of this run's starters) before the first
/// of them is answered: a keeper's answers wait in the control channel, whose buffer this keeps
/// well below full.
const ASKED_AHEAD: usize = 16;

/// A start's streams when this process reads its output (`process::streams`), once the log
/// streams of its pipes are in the loop (`read_output`; found again there by their owner).
type Output = Streams;

/// A start made, or asked of the keeper or of a starter: what its answer is matched with.
struct Asked {
    id: InstanceId,
    cgroup: Option<InstanceCgroup>,
    /// Its program, for the message of an exec that failed.
    program: String,
    /// When its making began.
    began: std::time::Instant,
    output: Option<Output>,
}

/// Who makes a start that is not made at once: the keeper (its pid) or one of this run's
/// starters (`process::starters`; the start's number).
#[derive(Clone, Copy)]
enum Maker {
    Keeper(i32),
    Starter(u64),
}

/// How a start went on: reported at once, asked of its maker, or not asked because the
/// keeper (if the error names one) could not be asked.
enum Launch {
    Done(Input),
    Asked(Asked, Maker),
    Unasked(Asked, Option<i32>, io::Error),
}

impl Supervisor {
    /// Starts instances, each with its environment made for its stage; returns the inputs
    /// that report how they went, in their order. The starts overlap: the keeper, or this
    /// run's starters, are asked for the next ones (up to `ASKED_AHEAD`) while they make the
    /// ones before, two at once, so that this process's share of a start (its layer, cgroup,
    /// log) runs beside theirs and the children's.
    ///
    /// Each start's time (`podvisor_container_start_seconds`) runs from its turn, when its
    /// making began or the start before it was answered (whichever is later), to its answer:
    /// the starts of a batch add up to the batch's time, as they did one after the other.
    ///
    /// A step of a start that fails fails that start alone (`Input::StartFailed`): the pod
    /// goes on, and the container is started again after its back-off.
    pub(super) fn spawn_all(&mut self, starts: Vec<(InstanceId, Option<Stage>)>) -> Vec<Input> {
        let mut inputs: Vec<Option<Input>> = Vec::with_capacity(starts.len());
        let mut asked: VecDeque<(usize, Asked, Maker)> = VecDeque::new();
        let mut turn = None;
        // A start alone (a restart after its back-off) is made on this thread: handing it to
        // a starter and waiting for its answer adds two wake-ups across cores and overlaps
        // nothing.
        let alone = starts.len() == 1;
        for (id, stage) in starts {
            self.answer_asked(&mut asked, ASKED_AHEAD - 1, &mut inputs, &mut turn);
            let began = std::time::Instant::now();
            let input = match self.launch(id, stage, began, alone) {
                Launch::Done(input) => {
                    self.took_turn(began, &mut turn);
                    Some(input)
                }
                Launch::Asked(a, maker) => {
                    asked.push_back((inputs.len(), a, maker));
                    None
                }
                Launch::Unasked(a, keeper, e) => {
                    // What it answered before it failed comes first.
                    self.answer_asked(&mut asked, 0, &mut inputs, &mut turn);
                    let e = match keeper {
                        Some(keeper) => self.keeper_failed(keeper, e),
                        None => e,
                    };
                    let input = self.started(a, Err(e));
                    self.took_turn(began, &mut turn);
                    Some(input)
                }
            };
            inputs.push(input);
        }
        self.answer_asked(&mut asked, 0, &mut inputs, &mut turn);
        inputs.into_iter().flatten().collect()
    }

    /// Answers the starts asked, the oldest first, until `keep` are left; each is held or
    /// reported failed.
    fn answer_asked(
        &mut self,
        asked: &mut VecDeque<(usize, Asked, Maker)>,
        keep: usize,
        inputs: &mut [Option<Input>],
        turn: &mut Option<std::time::Instant>,
    ) {
        while asked.len() > keep {
            let Some((slot, a, maker)) = asked.pop_front() else {
                break;
            };
            inputs[slot] = Some(self.answered(a, maker, turn));
        }
    }

    /// The answer of `maker` to start `a`, and the input that reports it.
    fn answered(&mut self, a: Asked, maker: Maker, turn: &mut Option<std::time::Instant>) -> Input {
        let began = a.began;
        let answer = match maker {
            Maker::Keeper(keeper) => self.keeper_answer(keeper).map(|pid| (pid, Some(keeper))),
            Maker::Starter(seq) => match self.starters.as_mut() {
                Some(starters) => starters.wait(seq).map(|pid| (pid, None)),
                None => Err(io::Error::other("no starters")),
            },
        };
        let input = self.started(a, answer);
        self.took_turn(began, turn);
        input
    }

    /// Counts a start that began at `began` and ends now, from its turn (`spawn_all`).
    fn took_turn(&mut self, began: std::time::Instant, turn: &mut Option<std::time::Instant>) {
        let now = std::time::Instant::now();
        let from = turn.map_or(began, |t| t.max(began));
        self.counters.container_start(now - from);
        *turn = Some(now);
    }

    /// Starts an instance, its environment made for its stage: done, or asked of the keeper
    /// or of a starter (not when it is `alone` in its batch).
    fn launch(
        &mut self,
        id: InstanceId,
        stage: Option<Stage>,
        began: std::time::Instant,
        alone: bool,
    ) -> Launch {
        // Probes and hooks of this instance see what it sees.
        match self.instance_env(id.container, stage) {
            Ok(env) => self.envs[id.container] = env,
            Err(e) => return Launch::Done(Input::StartFailed(id, format!("cannot {e}"))),
        }
        let (root, mounts) = match self.root_and_mounts(id.container) {
            Ok(both) => both,
            Err(why) => return Launch::Done(Input::StartFailed(id, why)),
        };
        let exec = &self.plan.exec[id.container];
        let name = &self.plan.pod.containers[id.container].name;
        self.make_log_file(id);
        // Pipes the run cannot make (out of descriptors: a pod larger than the limit on open
        // files) fail this start, as any other step of it: the pod goes on, and the container
        // is started again after its back-off.
        let stdio = exec.stdio;
        let pipes = match (!self.live_restore)
            .then(|| Streams::new(stdio))
            .transpose()
        {
            Ok(pipes) => pipes,
            Err(e) => {
                let why = format!("cannot make its output pipes: {e}");
                return Launch::Done(Input::StartFailed(id, why));
            }
        };
        let privileged = exec.security.privileged;
        let cgroup = (self.cgroups.pod.as_mut())
            .map(|pod| pod.instance(name, id.instance, &exec.resources, privileged))
            .transpose();
        let cgroup = match cgroup {
            Ok(cg) => cg,
            Err(e) => return Launch::Done(Input::StartFailed(id, e.to_string())),
        };
        let resources = exec.resources;
        self.resizing.started(id.container, resources);
        let user_ns = root.as_ref().is_some_and(|r| r.rootless.is_some());
        let (namespaces, pause) = match self.sandbox.for_container(&self.inherited, user_ns) {
            Ok(ns) => ns,
            Err(e) => {
                self.release_cgroup(cgroup);
                let why = format!("cannot start the pod's PID 1: {e}");
                return Launch::Done(Input::StartFailed(id, why));
            }
        };
        if let Some(pid) = pause {
            self.pids.insert(pid, PidOwner::Pause);
        }
        // Its output is in the loop before its process is made: a loop that cannot take it
        // fails this start, not the run (nor leaves a process whose output nobody reads).
        let output = match pipes
            .map(|(s, read)| self.read_output(id, s, read))
            .transpose()
        {
            Ok(output) => output,
            Err(e) => {
                self.release_cgroup(cgroup);
                let why = format!("cannot read its output: {e}");
                return Launch::Done(Input::StartFailed(id, why));
            }
        };
        let exec = &self.plan.exec[id.container];
        let mut io = ContainerIo {
            terminal: None,
            stdin: None,
            stdout: -1,
            stderr: -1,
            working_dir: self.working_dir(id.container),
            working_dir_optional: exec.working_dir.is_none(),
            env: self.envs[id.container].clone(),
            join_mounts: None,
            join_user: None,
            mounts,
            cgroups: cgroup.as_ref().map(|cg| cg.join_fds()).unwrap_or_default(),
            root,
            credentials: self.credentials.get(id.container).cloned(),
            namespaces,
        };
        if let Some(streams) = &output {
            streams.give(&mut io);
        }
        let argv: Vec<OsString> = exec.argv.iter().map(OsString::from).collect();
        let program = exec.argv.first().cloned().unwrap_or_default();
        let own = output.is_some();
        let start = Asked {
            id,
            cgroup,
            program,
            began,
            output,
        };
        if !own {
            let oom = start.cgroup.as_ref().and_then(|cg| cg.oom_file());
            let paths = (start.cgroup.as_ref())
                .map(|cg| cg.join_paths())
                .unwrap_or_default();
            return match self.ask_keeper(id, &argv, io, stdio, paths, oom) {
                Ok(keeper) => Launch::Asked(start, Maker::Keeper(keeper)),
                Err((keeper, e)) => Launch::Unasked(start, keeper, e),
            };
        }
        // What the child is given (descriptors included) lives in `start` until it is made.
        let setup = ChildSetup::Container(Box::new(io));
        match self.starters.as_mut().filter(|_| !alone) {
            Some(starters) => {
                let seq = self.starts_asked;
                self.starts_asked += 1;
                starters.start(Job {
                    seq,
                    argv,
                    setup,
                    inherited: self.inherited.clone(),
                    asker: None,
                });
                Launch::Asked(start, Maker::Starter(seq))
            }
            None => {
                let spawned = sys::spawn(&argv, setup, &self.inherited);
                let result = spawned.map(|pid| (pid, None));
                Launch::Done(self.started(start, result))
            }
        }
    }

    /// Start `a` has been made (its pid, its keeper) or has failed: the instance is held, or
    /// what was made for it goes. Our write ends of its pipes close here.
    fn started(&mut self, a: Asked, result: io::Result<(i32, Option<i32>)>) -> Input {
        let Asked {
            id,
            cgroup,
            program,
            output,
            ..
        } = a;
        let own = output.is_some();
        let result = result.and_then(|(pid, keeper)| match output {
            Some(streams) => {
                (self.keep_streams(id, pid, streams)).map(|stdin| (pid, keeper, stdin))
            }
            None => Ok((pid, keeper, None)),
        });
        match result {
            Ok((pid, keeper, stdin)) => {
                // A child this process reads is its to reap; a keeper's, the keeper reaps.
                if own {
                    self.pids.insert(pid, PidOwner::Container(id));
                }
                let mut instance = Instance::new(pid, cgroup, keeper);
                instance.stdin = stdin;
                // Its probes and hooks run in its mount namespace, as `exec` in a container
                // (rootless: in its user namespace first). A child of ours is watched for its
                // exit (`reap`).
                instance.open_namespaces(keeper.is_none());
                if let Some(fd) = instance.exit_watch() {
                    // Should the epoll refuse it, its exit still comes with its SIGCHLD.
                    let interest = EV_READ | EV_ONESHOT;
                    let _ = self.epoll.add(fd, TOKEN_EXIT | pid as u64, interest);
                }
                self.instances.hold(id, instance);
                // Its own time: a batch of starts is reported to the core once it is made.
                Input::Started(id, self.clock.now())
            }
            Err(e) => {
                if own {
                    self.logs.retain(|_, log| log.owner != id);
                }
                self.release_cgroup(cgroup);
                // A start that failed has no log (`launch` made the file).
                let name = &self.plan.pod.containers[id.container].name;
                let _ = std::fs::remove_file(self.dir.instance_log(name, id.instance));
                // The exec failed (an errno alone), or a step before it (it says which).
                let msg = match e.raw_os_error() {
                    Some(errno) => {
                        let what = match errno {
                            libc::ENOENT => "executable file not found",
                            libc::EACCES => "permission denied",
                            _ => "cannot start it",
                        };
                        format!("exec: {program:?}: {what}: {e}")
                    }
                    None => format!("cannot {e}"),
                };
                Input::StartFailed(id, msg)
            }
        }
    }

    /// Makes the directory of start `id`'s log, and under live restore its file. (Its log
    /// file makes the directory too, and says so when it cannot: a full or read-only disk
    /// never stops a start.)
    ///
    /// Under live restore the keeper makes the pipes and holds their read ends, and writes
    /// the log; the file is made here. The keeper makes a pod's containers one after the
    /// other while this process prepares the next ones, so what can be done here instead of
    /// there shortens every start of a batch; a new file's inode is the largest share of the
    /// keeper's own work in a start (docs/benchmarks.md). Should this fail, the keeper makes
    /// the file itself, or says why it cannot.
    fn make_log_file(&self, id: InstanceId) {
        let name = &self.plan.pod.containers[id.container].name;
        let _ = std::fs::create_dir_all(self.dir.container_logs(name));
        if self.live_restore {
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.instance_log(name, id.instance));
        }
    }

    /// Puts the log streams of start `id`'s pipes in the loop (its log file made), before its
    /// process is made; if either cannot be, neither stays there, nor the file.
    fn read_output(
        &mut self,
        id: InstanceId,
        streams: Streams,
        read: Vec<(std::fs::File, &'static str)>,
    ) -> io::Result<Output> {
        if read.is_empty() {
            return Ok(streams);
        }
        let name = &self.plan.pod.containers[id.container].name;
        let path = self.dir.instance_log(name, id.instance);
        let file = LogFile::create(path.clone(), self.log_limits);
        for (pipe, stream) in read {
            if let Err(e) = self.add_log(LogStream::new(id, pipe, stream, file.clone())) {
                self.logs.retain(|_, log| log.owner != id);
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        }
        Ok(streams)
    }

    /// Start `id`'s child `pid` is made: the child's ends of its streams close, and its
    /// terminal's master, if it has one, is read as its stdout from now on. Returns the write
    /// end of its stdin to hold while it runs. A terminal that cannot be read kills it: not
    /// held, not started (its exit is reaped as an unknown child's).
    fn keep_streams(
        &mut self,
        id: InstanceId,
        pid: i32,
        streams: Streams,
    ) -> io::Result<Option<std::os::fd::OwnedFd>> {
        let kept = streams.made().and_then(|kept| {
            if let Some(master) = kept.terminal {
                let name = &self.plan.pod.containers[id.container].name;
                let file =
                    LogFile::create(self.dir.instance_log(name, id.instance), self.log_limits);
                self.add_log(LogStream::new(id, master, "stdout", file))?;
            }
            Ok(kept.stdin)
        });
        kept.map_err(|e| {
            let _ = sys::send_signal(-pid, libc::SIGKILL);
            let _ = sys::send_signal(pid, libc::SIGKILL);
            io::Error::other(format!("read its terminal: {e}"))
        })
    }

    /// Removes the cgroup of a start that failed, if it has one.
    fn release_cgroup(&mut self, cgroup: Option<InstanceCgroup>) {
        if let (Some(cg), Some(pod)) = (cgroup, self.cgroups.pod.as_mut()) {
            pod.release(cg);
        }
    }

    /// Container `i`'s private root (if it has one) and what is bound into it.
    fn root_and_mounts(
        &mut self,
        i: usize,
    ) -> Result<(Option<PrivateRoot>, Vec<BindMount>), String> {
        let exec = &self.plan.exec[i];
        let root = self.root_layer.as_ref().and_then(|layer| {
            let image = exec.image.as_ref();
            // readOnlyRootFilesystem always gets a root of its own (read-only); the annotation
            // `podvisor.io/host-root: writable` gives the others the host's. An image is always
            // a root of its own, which gets only /proc, /sys (and /dev) of the host's mounts.
            let own =
                image.is_some() || !self.plan.host_root_writable || exec.security.read_only_root;
            own.then(|| PrivateRoot {
                layer_dir: layer.dir.clone(),
                carry: match image {
                    Some(_) => carried(&runtime_mounts(&layer.carry), exec.security.privileged),
                    None => carried(&layer.carry, exec.security.privileged),
                },
                read_only: exec.security.read_only_root,
                lower_dirs: image.map_or_else(Vec::new, |i| {
                    i.lower_dirs.iter().map(PathBuf::from).collect()
                }),
                lower_base: None,
                own_dev: true,
                privileged: exec.security.privileged,
                host_devices: match exec.security.privileged {
                    true => layer.host_devices.clone(),
                    false => Vec::new(),
                },
                rootless: layer.rootless.clone(),
            })
        });
        let mut mounts = self.volumes.mounts_for(exec, root.is_some())?;
        if let (true, Some(layer)) = (root.is_some(), &self.root_layer) {
            // The pod's /etc files first: a volume mounted over them wins, as in the kubelet.
            let files = layer
                .pod_files
                .iter()
                .filter(|f| !mounts.iter().any(|m| f.target.starts_with(&m.target)));
            mounts.splice(0..0, files.cloned().collect::<Vec<_>>());
        }
        // Its termination message file, last, as the kubelet binds it.
        let name = &self.plan.pod.containers[i].name;
        let file =
            super::termination::fresh_file(&self.dir, name, &exec.termination, root.as_ref())
                .map_err(|e| format!("make its termination message file: {e}"))?;
        mounts.extend(file);
        let mut root = root;
        self.shorten_lowers(root.as_mut(), &mut mounts)
            .map_err(|e| format!("link the layers of an overlay: {e}"))?;
        Ok((root, mounts))
    }

    /// The overlays of a root and of image volumes whose layers are too many to name in
    /// mount(2)'s options are mounted from short links to them (`rootfs::short_lowers`).
    fn shorten_lowers(
        &self,
        root: Option<&mut PrivateRoot>,
        mounts: &mut [BindMount],
    ) -> io::Result<()> {
        let dir = self.dir.lowers_dir();
        let lists = root.map(|r| (&mut r.lower_dirs, &mut r.lower_base));
        let lists = lists
            .into_iter()
            .chain(mounts.iter_mut().map(|m| (&mut m.lower, &mut m.lower_base)));
        for (lowers, base) in lists {
            if let Some((chain, names)) = super::rootfs::short_lowers(&dir, lowers)? {
                *lowers = names;
                *base = Some(chain);
            }
        }
        Ok(())
    }

    /// Container `i`'s environment for an instance in `stage`, `NAME=value`.
    pub(super) fn instance_env(&self, i: usize, stage: Option<Stage>) -> io::Result<Environment> {
        let mut vars = self.base_envs[i].clone();
        if let (Some(stage), Some(staging)) = (stage, self.plan.pod.staging) {
            self.plan
                .staged_env
                .apply(stage, staging.policy.logging, &mut vars);
        }
        Environment::new(vars.iter().map(|(k, v)| format!("{k}={v}")))
    }

    /// Container `i`'s working directory: its `workingDir`, else the one podvisor was started
    /// in (containers are processes of this host), also inside a private root and for a
    /// probe that joins one (entering a mount namespace moves to its `/`).
    pub(super) fn working_dir(&self, i: usize) -> Option<PathBuf> {
        self.plan.exec[i]
            .working_dir
            .as_ref()
            .map(PathBuf::from)
            .or_else(|| self.cwd.clone())
    }
}

/// Of the host's mounts, those a container of an image gets: /proc, /sys and /dev (the last
/// only when privileged, see `carried`), each with what is mounted below it.
fn runtime_mounts(carry: &[(PathBuf, bool)]) -> Vec<(PathBuf, bool)> {
    let wanted = ["/proc", "/sys", "/dev"].map(std::path::Path::new);
    carry
        .iter()
        .filter(|(p, _)| wanted.contains(&p.as_path()))
        .cloned()
        .collect()
}

/// The host's mounts a container's root carries: all of them but /dev (every container gets
/// one of its own, a privileged one with the host's devices in it), /sys read-only unless the
/// container is privileged, as a runtime gives them.
fn carried(carry: &[(PathBuf, bool)], privileged: bool) -> Vec<(PathBuf, bool)> {
    let dev = std::path::Path::new("/dev");
    let sys = std::path::Path::new("/sys");
    carry
        .iter()
        .filter(|(p, _)| !p.starts_with(dev))
        .map(|(p, ro)| (p.clone(), *ro || (!privileged && p.starts_with(sys))))
        .collect()
}

/// A container's environment variables, by name and value.
pub(super) type Env = Vec<(String, String)>;

/// Each container's environment (`container_env`).
pub(super) fn container_envs(plan: &RunPlan) -> Vec<Env> {
    // HOSTNAME is the container's hostname (the host's on the host's network).
    let hostname = (plan.namespaces.hostname.clone()).unwrap_or_else(sys::hostname);
    (plan.exec.iter())
        .map(|e| container_env(&hostname, e))
        .collect()
}

/// A container's environment: what a container runtime provides (PATH, TERM=xterm with a
/// terminal, HOME, HOSTNAME = its hostname), then the container's own variables, which win.
pub(super) fn container_env(hostname: &str, exec: &ContainerExec) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let path = std::env::var("PATH")
        .unwrap_or_else(|_| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    out.push(("PATH".into(), path));
    if exec.stdio.tty {
        // As containerd's `WithTTY`, before the image's and the container's variables.
        out.push(("TERM".into(), "xterm".into()));
    }
    if let Ok(home) = std::env::var("HOME") {
        out.push(("HOME".into(), home));
    }
    out.push(("HOSTNAME".into(), hostname.to_string()));
    for (k, v) in &exec.env {
        match out.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
}
