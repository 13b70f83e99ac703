//! What `podvisor top` shows, as data: the pods it watches (their last status and events, as
//! the watches pushed them), the rows of the list, the selection, sort and filter, the panes and
//! the action waiting for confirmation. Keys go in, commands for the shell come out; nothing
//! here reads a file, a socket or the clock (`now` is given), so it is tested as plain data.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ContainerStatus;

use super::logs::LogView;
use crate::status::print::{
    age, annotation, container_statuses, full_name, pod_reason, ready_column, secs, stage_of,
};
use crate::status::{ApiPod, EventLine};

/// Events kept per pod (newest last).
pub const EVENTS_KEPT: usize = 500;

/// One pod `top` watches.
#[derive(Debug, Clone, Default)]
pub struct PodEntry {
    /// The last status the watch pushed (`None` until the first).
    pub status: Option<ApiPod>,
    pub events: VecDeque<EventLine>,
    /// The watch ended (the run is gone): when, in seconds since the epoch.
    pub gone_at: Option<f64>,
    /// Per container: CPU (cores, over the last interval) and working set (bytes), from its
    /// cgroup.
    pub usage: BTreeMap<String, (f64, u64)>,
}

/// How the list is sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    Name,
    Restarts,
    Cpu,
    Memory,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Name => Sort::Restarts,
            Sort::Restarts => Sort::Cpu,
            Sort::Cpu => Sort::Memory,
            Sort::Memory => Sort::Name,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Restarts => "restarts",
            Sort::Cpu => "cpu",
            Sort::Memory => "memory",
        }
    }
}

/// Which pane has the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    List,
    Logs,
    Events,
}

/// A line being typed: the list's filter or the log's search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Typing {
    Filter,
    Search,
}

/// What an action does, once confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    RestartContainer { dir: PathBuf, container: String },
    RestartPod { dir: PathBuf },
    StopPod { dir: PathBuf },
}

impl Action {
    pub fn question(&self, name: &str) -> String {
        match self {
            Action::RestartContainer { container, .. } => {
                format!("Restart container {container} of pod {name}? (y/n)")
            }
            Action::RestartPod { .. } => format!(
                "Restart pod {name} (every container stops, emptyDir volumes are wiped)? (y/n)"
            ),
            Action::StopPod { .. } => format!("Stop pod {name}? (y/n)"),
        }
    }

    pub fn dir(&self) -> &PathBuf {
        match self {
            Action::RestartContainer { dir, .. }
            | Action::RestartPod { dir }
            | Action::StopPod { dir } => dir,
        }
    }
}

/// What the shell must do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Quit,
    Act(Action),
    /// Show the log of this container (its previous instance if asked).
    OpenLog {
        dir: PathBuf,
        container: String,
        previous: bool,
    },
    Describe(PathBuf),
}

/// A key, as the shell reads it from the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Tab,
    Backspace,
    CtrlC,
}

/// One row of the list: a pod, or one of its containers.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub dir: PathBuf,
    pub container: Option<String>,
    pub cells: Vec<String>,
    /// Shown as a warning (not ready, waiting with a reason, failed, gone).
    pub warn: bool,
}

/// The list's columns, in order; narrow terminals drop them from the right (`Model::columns`).
pub const COLUMNS: [&str; 8] = [
    "NAME", "READY", "STATUS", "RESTARTS", "AGE", "STAGE", "CPU", "MEMORY",
];

/// Everything `top` shows.
#[derive(Debug, Clone)]
pub struct Model {
    pub pods: BTreeMap<PathBuf, PodEntry>,
    pub sort: Sort,
    pub filter: String,
    pub typing: Option<Typing>,
    /// What is being typed.
    pub input: String,
    /// The selected row, by identity (pod dir, container).
    pub selected: Option<(PathBuf, Option<String>)>,
    pub focus: Focus,
    pub confirm: Option<Action>,
    pub help: bool,
    /// `describe` text shown over the panes, until a key.
    pub describe: Option<String>,
    /// The last result or error, for the status line.
    pub message: Option<String>,
    pub log: Option<LogView>,
    /// First event shown (0: the newest).
    pub events_scroll: usize,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            pods: BTreeMap::new(),
            sort: Sort::Name,
            filter: String::new(),
            typing: None,
            input: String::new(),
            selected: None,
            focus: Focus::List,
            confirm: None,
            help: false,
            describe: None,
            message: None,
            log: None,
            events_scroll: 0,
        }
    }
}

/// A container's state as one word: its waiting or terminated reason, or Running.
fn state_word(c: &ContainerStatus) -> String {
    let st = c.state.clone().unwrap_or_default();
    if let Some(r) = st.waiting.and_then(|w| w.reason) {
        return r;
    }
    if let Some(t) = st.terminated {
        return match t.reason {
            Some(r) => format!("{r} ({})", t.exit_code),
            None => format!("ExitCode:{}", t.exit_code),
        };
    }
    if st.running.is_some() {
        return "Running".into();
    }
    "Unknown".into()
}

fn cpu_text(cores: f64) -> String {
    format!("{}m", (cores * 1000.0).round() as u64)
}

fn mem_text(bytes: u64) -> String {
    match bytes {
        0..=1_048_575 => format!("{}Ki", bytes / 1024),
        _ => format!("{}Mi", bytes / 1_048_576),
    }
}

impl Model {
    /// The pod's `namespace/name`, or its state dir while no status has come.
    pub fn pod_name(&self, dir: &PathBuf) -> String {
        self.pods
            .get(dir)
            .and_then(|p| p.status.as_ref())
            .map(full_name)
            .unwrap_or_else(|| dir.display().to_string())
    }

    /// A status pushed by a pod's watch.
    pub fn on_status(&mut self, dir: PathBuf, status: ApiPod) {
        let e = self.pods.entry(dir).or_default();
        e.status = Some(status);
        e.gone_at = None;
    }

    /// An event pushed by a pod's watch.
    pub fn on_event(&mut self, dir: PathBuf, event: EventLine) {
        let e = self.pods.entry(dir).or_default();
        e.events.push_back(event);
        while e.events.len() > EVENTS_KEPT {
            e.events.pop_front();
        }
    }

    /// A pod's watch ended: the run is gone. It stays listed, marked, for `keep` seconds.
    pub fn on_gone(&mut self, dir: &PathBuf, now: f64) {
        if let Some(e) = self.pods.get_mut(dir) {
            e.gone_at.get_or_insert(now);
        }
    }

    /// Drops pods gone for longer than `keep` seconds.
    pub fn forget_gone(&mut self, now: f64, keep: f64) {
        self.pods
            .retain(|_, e| e.gone_at.is_none_or(|at| now - at < keep));
        if let Some((dir, _)) = &self.selected {
            if !self.pods.contains_key(dir) {
                self.selected = None;
            }
        }
    }

    /// Whether `text` passes the filter (case-insensitive substring).
    fn passes(&self, text: &str) -> bool {
        self.filter.is_empty() || text.to_lowercase().contains(&self.filter.to_lowercase())
    }

    /// The sort key of a container (bigger first, except by name).
    fn container_key(&self, entry: &PodEntry, c: &ContainerStatus) -> (i64, String) {
        let name = c.name.clone();
        let (cpu, mem) = entry.usage.get(&name).copied().unwrap_or_default();
        let n = match self.sort {
            Sort::Name => 0,
            Sort::Restarts => i64::from(c.restart_count),
            Sort::Cpu => (cpu * 1e6) as i64,
            Sort::Memory => mem as i64,
        };
        (-n, name)
    }

    /// The rows of the list, pods sorted and filtered, each followed by its containers.
    pub fn rows(&self, now: f64) -> Vec<Row> {
        let mut pods: Vec<(&PathBuf, &PodEntry)> = self.pods.iter().collect();
        let pod_key = |(dir, e): &(&PathBuf, &PodEntry)| {
            let name = e.status.as_ref().map(full_name).unwrap_or_default();
            let total: i64 = e.status.as_ref().map_or(0, |s| {
                container_statuses(s)
                    .map(|c| self.container_key(e, c).0)
                    .sum()
            });
            (total, name, (*dir).clone())
        };
        pods.sort_by_key(pod_key);
        let mut rows = Vec::new();
        for (dir, e) in pods {
            let Some(status) = &e.status else {
                rows.push(Row {
                    dir: dir.clone(),
                    container: None,
                    cells: vec![dir.display().to_string(), "".into(), "Connecting".into()],
                    warn: false,
                });
                continue;
            };
            let mut containers: Vec<&ContainerStatus> = container_statuses(status).collect();
            let pod_passes = self.passes(&full_name(status));
            containers.retain(|c| pod_passes || self.passes(&c.name));
            if containers.is_empty() && !pod_passes {
                continue;
            }
            rows.push(self.pod_row(dir, e, status, now));
            containers.sort_by_key(|c| self.container_key(e, c));
            for c in containers {
                rows.push(container_row(dir, e, status, c, now));
            }
        }
        rows
    }

    /// A pod's row: as `kubectl get pod` shows it, and its whole-pod restarts and usage.
    fn pod_row(&self, dir: &Path, e: &PodEntry, status: &ApiPod, now: f64) -> Row {
        let reason = if e.gone_at.is_some() {
            "Gone".to_string()
        } else {
            pod_reason(status)
        };
        let restarts: i64 = container_statuses(status)
            .map(|c| i64::from(c.restart_count))
            .sum();
        let created = status.metadata.creation_timestamp.as_ref().map(secs);
        let (cpu, mem) = e
            .usage
            .values()
            .fold((0.0, 0), |(c, m), (c2, m2)| (c + c2, m + m2));
        let pod_restarts = annotation(status, "podvisor.io/pod-restarts")
            .filter(|n| *n != "0")
            .map(|n| format!("pod restarts {n}"))
            .unwrap_or_default();
        let ready = ready_column(status);
        let all_ready = ready.split_once('/').is_some_and(|(r, n)| r == n);
        let warn = e.gone_at.is_some()
            || !matches!(reason.as_str(), "Running" | "Completed" | "Succeeded")
            || !all_ready;
        let usage = |f: &dyn Fn() -> String| match e.usage.is_empty() {
            true => String::new(),
            false => f(),
        };
        Row {
            dir: dir.to_path_buf(),
            container: None,
            cells: vec![
                full_name(status),
                ready,
                reason,
                restarts.to_string(),
                created.map(|t| age(now - t)).unwrap_or_default(),
                pod_restarts,
                usage(&|| cpu_text(cpu)),
                usage(&|| mem_text(mem)),
            ],
            warn,
        }
    }

    /// How many of `COLUMNS` fit in `width` cells: narrow terminals keep the first ones.
    pub fn columns(width: u16) -> usize {
        match width {
            0..=49 => 3,
            50..=69 => 5,
            70..=89 => 6,
            _ => COLUMNS.len(),
        }
    }

    /// The index of the selected row (the first row if none is selected or it went away).
    pub fn selected_index(&self, rows: &[Row]) -> Option<usize> {
        if rows.is_empty() {
            return None;
        }
        let at = self.selected.as_ref().and_then(|(dir, c)| {
            rows.iter()
                .position(|r| &r.dir == dir && &r.container == c)
                .or_else(|| rows.iter().position(|r| &r.dir == dir))
        });
        Some(at.unwrap_or(0))
    }

    fn select(&mut self, rows: &[Row], i: usize) {
        if let Some(r) = rows.get(i) {
            self.selected = Some((r.dir.clone(), r.container.clone()));
        }
    }

    /// One key; what the shell must do about it.
    pub fn key(&mut self, key: Key, now: f64) -> Vec<Command> {
        if key == Key::CtrlC {
            return vec![Command::Quit];
        }
        if self.describe.is_some() {
            self.describe = None;
            return vec![];
        }
        if self.help {
            self.help = false;
            return vec![];
        }
        if let Some(action) = self.confirm.take() {
            return match key {
                Key::Char('y') | Key::Char('Y') => vec![Command::Act(action)],
                _ => {
                    self.message = Some("cancelled".into());
                    vec![]
                }
            };
        }
        if let Some(t) = self.typing {
            match key {
                Key::Enter | Key::Esc => {
                    let text = std::mem::take(&mut self.input);
                    self.typing = None;
                    let keep = key == Key::Enter;
                    match t {
                        Typing::Filter => self.filter = if keep { text } else { String::new() },
                        Typing::Search => {
                            if let Some(log) = &mut self.log {
                                log.search(if keep { &text } else { "" });
                            }
                        }
                    }
                }
                Key::Backspace => {
                    self.input.pop();
                }
                Key::Char(c) => self.input.push(c),
                _ => {}
            }
            return vec![];
        }
        match key {
            Key::Char('q') => return vec![Command::Quit],
            Key::Char('?') => {
                self.help = true;
                return vec![];
            }
            Key::Tab => {
                self.focus = match self.focus {
                    Focus::List if self.log.is_some() => Focus::Logs,
                    Focus::List | Focus::Logs => Focus::Events,
                    Focus::Events => Focus::List,
                };
                return vec![];
            }
            Key::Esc => {
                self.focus = Focus::List;
                return vec![];
            }
            _ => {}
        }
        match self.focus {
            Focus::List => self.list_key(key, now),
            Focus::Logs => self.log_key(key),
            Focus::Events => {
                match key {
                    Key::Up | Key::Char('k') => {
                        self.events_scroll = self.events_scroll.saturating_sub(1)
                    }
                    Key::Down | Key::Char('j') => self.events_scroll += 1,
                    _ => {}
                }
                vec![]
            }
        }
    }

    fn list_key(&mut self, key: Key, now: f64) -> Vec<Command> {
        let rows = self.rows(now);
        let i = self.selected_index(&rows);
        let picked = i.map(|i| (rows[i].dir.clone(), rows[i].container.clone()));
        match key {
            Key::Up | Key::Char('k') => self.select(&rows, i.unwrap_or(0).saturating_sub(1)),
            Key::Down | Key::Char('j') => self.select(
                &rows,
                (i.unwrap_or(0) + 1).min(rows.len().saturating_sub(1)),
            ),
            Key::Home | Key::Char('g') => self.select(&rows, 0),
            Key::End | Key::Char('G') => self.select(&rows, rows.len().saturating_sub(1)),
            Key::Char('s') => self.sort = self.sort.next(),
            Key::Char('/') => {
                self.typing = Some(Typing::Filter);
                self.input = self.filter.clone();
            }
            Key::Enter | Key::Char('l') | Key::Char('p') => {
                let previous = key == Key::Char('p');
                if let Some((dir, Some(container))) = picked.clone() {
                    self.focus = Focus::Logs;
                    return vec![Command::OpenLog {
                        dir,
                        container,
                        previous,
                    }];
                }
                self.message = Some("select a container to see its log".into());
            }
            Key::Char('e') => self.focus = Focus::Events,
            Key::Char('d') => {
                if let Some((dir, _)) = picked.clone() {
                    return vec![Command::Describe(dir)];
                }
            }
            Key::Char('r') => match picked.clone() {
                Some((dir, Some(container))) => {
                    self.confirm = Some(Action::RestartContainer { dir, container })
                }
                _ => self.message = Some("select a container to restart it (R: the pod)".into()),
            },
            Key::Char('R') => {
                if let Some((dir, _)) = picked.clone() {
                    self.confirm = Some(Action::RestartPod { dir });
                }
            }
            Key::Char('x') => {
                if let Some((dir, _)) = picked.clone() {
                    self.confirm = Some(Action::StopPod { dir });
                }
            }
            _ => {}
        }
        vec![]
    }

    fn log_key(&mut self, key: Key) -> Vec<Command> {
        let Some(log) = &mut self.log else {
            self.focus = Focus::List;
            return vec![];
        };
        match key {
            Key::Up | Key::Char('k') => log.scroll_up(1),
            Key::Down | Key::Char('j') => log.scroll_down(1),
            Key::PageUp => log.scroll_up(20),
            Key::PageDown => log.scroll_down(20),
            Key::Home | Key::Char('g') => log.top(),
            Key::End | Key::Char('G') => log.bottom(),
            Key::Char('f') => log.follow = !log.follow,
            Key::Char('w') => log.wrap = !log.wrap,
            Key::Char('n') => log.next_match(true),
            Key::Char('N') => log.next_match(false),
            Key::Char('/') => {
                self.typing = Some(Typing::Search);
                self.input = log.query.clone();
            }
            Key::Char('p') => {
                return vec![Command::OpenLog {
                    dir: log.dir.clone(),
                    container: log.container.clone(),
                    previous: !log.previous,
                }]
            }
            _ => {}
        }
        vec![]
    }

    /// The events of the pod in `dir` (every pod's if `None`), newest first.
    pub fn events(&self, dir: Option<&PathBuf>) -> Vec<&EventLine> {
        let mut all: Vec<(usize, &EventLine)> = self
            .pods
            .iter()
            .filter(|(d, _)| dir.is_none_or(|x| x == *d))
            .flat_map(|(_, e)| e.events.iter().enumerate())
            .collect();
        // Newest first; events of the same millisecond in the order they came, reversed.
        all.sort_by(|(i, a), (j, b)| (&b.time, j).cmp(&(&a.time, i)));
        all.into_iter().map(|(_, e)| e).collect()
    }
}

/// A container's row: its probes (started, ready), state, restarts, age, stage and usage.
fn container_row(dir: &Path, e: &PodEntry, pod: &ApiPod, c: &ContainerStatus, now: f64) -> Row {
    let state = state_word(c);
    let st = c.state.clone().unwrap_or_default();
    let since = (st.running.and_then(|r| r.started_at))
        .or(st.terminated.and_then(|t| t.finished_at))
        .map(|t| secs(&t));
    let probes = match (c.started, c.ready) {
        (Some(true), true) => "✓",
        (Some(true), _) => "started",
        _ => "✗",
    };
    let usage = e.usage.get(&c.name);
    let warn = !c.ready && !state.starts_with("Completed");
    Row {
        dir: dir.to_path_buf(),
        container: Some(c.name.clone()),
        cells: vec![
            format!("  {}", c.name),
            probes.to_string(),
            state,
            c.restart_count.to_string(),
            since.map(|t| age(now - t)).unwrap_or_default(),
            stage_of(pod, &c.name).unwrap_or_default(),
            usage.map(|u| cpu_text(u.0)).unwrap_or_default(),
            usage.map(|u| mem_text(u.1)).unwrap_or_default(),
        ],
        warn,
    }
}

#[cfg(test)]
mod tests;
