//! `podvisor top`: a live terminal view of every pod on the machine, with ratatui and
//! crossterm. A client of the status sockets only: it watches, and acts only when asked (and
//! confirmed); quitting never touches the pods.
//!
//! One loop: the watch threads (`source`) and the key thread send messages, the model
//! (`model`) takes them and the keys, and the screen (`view`) is drawn after each batch. Every
//! second the loop looks for new pods, follows the open log and forgets pods gone for a while;
//! every 2 s it reads each running container's CPU and memory from its cgroup.

mod logs;
pub mod model;
mod source;
mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::client;
use crate::status::print::{describe, now_secs};
use crate::stdio::write_err;
use model::{Action, Command, Key, Model};
use source::Msg;

/// How often the loop looks for pods, samples usage and follows the log.
const TICK: Duration = Duration::from_secs(1);
/// How often each running container's CPU and memory are read from its cgroup.
const USAGE_EVERY: Duration = Duration::from_secs(2);
/// At most this many screens a second: messages that come meanwhile are taken together.
const FRAME: Duration = Duration::from_millis(100);
/// How long a pod whose run ended stays listed (as Gone).
const KEEP_GONE: f64 = 5.0;

/// `podvisor top`'s arguments.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// A pod's state dir to watch (repeat for more)
    #[arg(long = "state-dir", value_name = "DIR")]
    state_dirs: Vec<PathBuf>,
    /// A state root to find running pods under (repeat for more; default: this user's,
    /// /var/lib/podvisor for root)
    #[arg(long = "root", value_name = "DIR")]
    roots: Vec<PathBuf>,
}

pub fn main(a: TopArgs) -> i32 {
    let roots = if a.roots.is_empty() {
        default_roots()
    } else {
        a.roots
    };
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        write_err(
            "error: podvisor top needs a terminal (use `podvisor status -w` or `events -w` in scripts)\n",
        );
        return 2;
    }
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            write_err(&format!("error: cannot use the terminal: {e}\n"));
            return 1;
        }
    };
    let (tx, rx) = mpsc::channel();
    let keys = tx.clone();
    std::thread::spawn(move || read_keys(keys));
    let result = run(&mut terminal, &roots, &a.state_dirs, tx, rx, color);
    ratatui::restore();
    match result {
        Ok(()) => 0,
        Err(e) => {
            write_err(&format!("error: {e}\n"));
            1
        }
    }
}

/// The state base of whoever runs `top`; for root also each user's default one
/// (`/home/USER/.local/state/podvisor`), whose sockets root may use.
fn default_roots() -> Vec<PathBuf> {
    let mut roots = vec![crate::state::base()];
    if roots[0] == std::path::Path::new("/var/lib/podvisor") {
        for home in std::fs::read_dir("/home").into_iter().flatten().flatten() {
            roots.push(home.path().join(".local/state/podvisor"));
        }
    }
    roots
}

/// Keys and resizes, as messages.
fn read_keys(tx: Sender<Msg>) {
    loop {
        let msg = match event::read() {
            Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
                let key = match k.code {
                    KeyCode::Char('c') if ctrl => Key::CtrlC,
                    KeyCode::Char(c) => Key::Char(c),
                    KeyCode::Up => Key::Up,
                    KeyCode::Down => Key::Down,
                    KeyCode::PageUp => Key::PageUp,
                    KeyCode::PageDown => Key::PageDown,
                    KeyCode::Home => Key::Home,
                    KeyCode::End => Key::End,
                    KeyCode::Enter => Key::Enter,
                    KeyCode::Esc => Key::Esc,
                    KeyCode::Tab => Key::Tab,
                    KeyCode::Backspace => Key::Backspace,
                    _ => continue,
                };
                Msg::Key(key)
            }
            Ok(Event::Resize(..)) => Msg::Resize,
            Ok(_) => continue,
            Err(_) => return,
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
}

/// The loop's own state beside the model: what is watched and the last CPU samples.
struct Shell {
    roots: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    tx: Sender<Msg>,
    watched: BTreeSet<PathBuf>,
    /// (pod dir, container) → (pid, CPU seconds, when), for the CPU rate.
    cpu: BTreeMap<(PathBuf, String), (i32, f64, Instant)>,
    /// Each running container's cgroup, by its main pid (found once per instance).
    cgroups: BTreeMap<i32, crate::cgroup::InstanceCgroup>,
    /// When usage was last read.
    sampled: Option<Instant>,
}

impl Shell {
    fn tick(&mut self, m: &mut Model) {
        for dir in source::discover(&self.roots, &self.dirs, &self.watched) {
            if self.watched.insert(dir.clone()) {
                m.pods.entry(dir.clone()).or_default();
                source::watch(dir, self.tx.clone());
            }
        }
        let now = Instant::now();
        if let Some(log) = &mut m.log {
            log.refresh();
        }
        m.forget_gone(now_secs(), KEEP_GONE);
        if self
            .sampled
            .is_some_and(|at| now.duration_since(at) < USAGE_EVERY)
        {
            return;
        }
        self.sampled = Some(now);
        let mut mounts = None;
        let mut seen = BTreeSet::new();
        let mut pids = BTreeSet::new();
        for (dir, e) in &mut m.pods {
            let Some(status) = &e.status else { continue };
            e.usage.clear();
            if e.gone_at.is_some() {
                continue;
            }
            for (name, pid) in source::running_pids(status) {
                let cg = match self.cgroups.entry(pid) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        let mounts = mounts.get_or_insert_with(crate::mountinfo::read);
                        match source::cgroup_of(pid, mounts) {
                            Some(cg) => e.insert(cg),
                            None => continue,
                        }
                    }
                };
                pids.insert(pid);
                let u = cg.usage();
                let key = (dir.clone(), name.clone());
                let cores = match self.cpu.get(&key) {
                    Some(&(p, before, at)) if p == pid => {
                        let dt = now.duration_since(at).as_secs_f64();
                        if dt > 0.0 {
                            ((u.cpu_seconds - before) / dt).max(0.0)
                        } else {
                            0.0
                        }
                    }
                    _ => 0.0,
                };
                self.cpu.insert(key.clone(), (pid, u.cpu_seconds, now));
                seen.insert(key);
                e.usage.insert(name, (cores, u.working_set));
            }
        }
        self.cpu.retain(|k, _| seen.contains(k));
        self.cgroups.retain(|p, _| pids.contains(p));
    }

    /// Carries out what a key asked for; `false` to quit.
    fn command(&mut self, m: &mut Model, c: Command) -> bool {
        match c {
            Command::Quit => return false,
            Command::OpenLog {
                dir,
                container,
                previous,
            } => match logs::LogView::open(&dir, &container, previous) {
                Some(v) => m.log = Some(v),
                None => {
                    m.message = Some(format!(
                        "{container} has no {}log yet",
                        if previous { "previous " } else { "" }
                    ))
                }
            },
            Command::Describe(dir) => {
                let text = (|| {
                    let status = client::call(&dir, "GET", "/status")?;
                    let events = client::call(&dir, "GET", "/events")?;
                    let pod = serde_json::from_str(&status)
                        .map_err(|e| client::ClientError(format!("not a v1 Pod: {e}")))?;
                    Ok::<_, client::ClientError>(describe(&pod, &events))
                })();
                match text {
                    Ok(t) => m.describe = Some(t),
                    Err(e) => m.message = Some(format!("describe: {}", e.0)),
                }
            }
            Command::Act(action) => {
                let name = m.pod_name(action.dir());
                let (path, done) = match &action {
                    Action::RestartContainer { container, .. } => (
                        client::restart_path(Some(container)),
                        format!("restarting container {container} of {name}"),
                    ),
                    Action::RestartPod { .. } => {
                        (client::restart_path(None), format!("restarting pod {name}"))
                    }
                    Action::StopPod { .. } => ("/stop".into(), format!("stopping pod {name}")),
                };
                m.message = Some(match client::call(action.dir(), "POST", &path) {
                    Ok(_) => done,
                    Err(e) => format!("{name}: {}", e.0),
                });
            }
        }
        true
    }
}

fn run(
    terminal: &mut ratatui::DefaultTerminal,
    roots: &[PathBuf],
    dirs: &[PathBuf],
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    color: bool,
) -> std::io::Result<()> {
    let mut m = Model::default();
    let mut shell = Shell {
        roots: roots.to_vec(),
        dirs: dirs.to_vec(),
        tx,
        watched: BTreeSet::new(),
        cpu: BTreeMap::new(),
        cgroups: BTreeMap::new(),
        sampled: None,
    };
    let mut next_tick = Instant::now();
    loop {
        if Instant::now() >= next_tick {
            shell.tick(&mut m);
            next_tick = Instant::now() + TICK;
        }
        let now = now_secs();
        terminal.draw(|f| view::draw(f, &m, now, color))?;
        let wait = next_tick.saturating_duration_since(Instant::now());
        let first = match rx.recv_timeout(wait) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        };
        // Everything that comes within a frame, then one draw (keys at once).
        let mut batch = vec![first];
        let frame_end = Instant::now() + FRAME;
        while !matches!(batch.last(), Some(Msg::Key(_))) {
            match rx.recv_timeout(frame_end.saturating_duration_since(Instant::now())) {
                Ok(msg) => batch.push(msg),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
        for msg in batch {
            match msg {
                Msg::Status(dir, v) => m.on_status(dir, *v),
                Msg::Event(dir, v) => m.on_event(dir, v),
                Msg::Gone(dir) => {
                    shell.watched.remove(&dir);
                    m.on_gone(&dir, now_secs());
                }
                Msg::Problem(dir, e) => m.message = Some(format!("{}: {e}", dir.display())),
                Msg::Resize => {}
                Msg::Key(k) => {
                    m.message = None;
                    for c in m.key(k, now_secs()) {
                        if !shell.command(&mut m, c) {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }
}
