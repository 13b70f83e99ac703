//! The log pane: one container instance's output, read from its log files in the state dir
//! (rotations included) as `podvisor logs` reads them, so that watching never slows the
//! container: podvisor writes the files whatever `top` does. Following reads what was appended
//! since the last look, and moves on to a newer instance when one starts; search marks the
//! matching lines and jumps between them.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::state::logs::{file_name, instance_files, instances};
use crate::state::StateDir;

/// Lines kept in the pane (the oldest go first).
pub const LINES_KEPT: usize = 20_000;
/// At most this much of a log is read at a time: under heavy output the rest is skipped.
const BACKLOG_READ: u64 = 4 << 20;

/// One container instance's log as the pane shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogView {
    pub dir: PathBuf,
    pub container: String,
    /// Showing the instance before the newest.
    pub previous: bool,
    pub instance: u32,
    /// Each line's stream (`stdout`, `stderr`) and text.
    pub lines: Vec<(String, String)>,
    /// Keep showing the end as lines come.
    pub follow: bool,
    pub wrap: bool,
    /// The first line shown, when not following.
    pub scroll: usize,
    pub query: String,
    /// Lines that match `query`, and the one jumped to.
    pub matches: Vec<usize>,
    pub current: Option<usize>,
    /// How far the newest file has been read, and which file that is.
    read_to: u64,
    file: Option<PathBuf>,
    /// A line cut off at the end of the file (a write in progress).
    partial: String,
    /// Reading resumed mid-line after a skip: the rest of that line is dropped.
    skip_partial: bool,
}

/// A CRI log line (`TIME STREAM TAG TEXT`) as (stream, text); anything else as it is.
fn parse(line: &str) -> (String, String) {
    let mut it = line.splitn(4, ' ');
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(_), Some(stream), Some(_), text) => (stream.to_string(), text.unwrap_or("").into()),
        _ => (String::new(), line.to_string()),
    }
}

impl LogView {
    /// The log of `container` in the pod whose state dir is `dir`: its newest instance, or the
    /// one before with `previous`. `None` when it has none.
    pub fn open(dir: &Path, container: &str, previous: bool) -> Option<LogView> {
        let logs = StateDir::new(dir).container_logs(container);
        let all = instances(&logs);
        let instance = if previous {
            *all.iter().rev().nth(1)?
        } else {
            *all.last()?
        };
        let mut v = LogView {
            dir: dir.to_path_buf(),
            container: container.to_string(),
            previous,
            instance,
            lines: Vec::new(),
            follow: !previous,
            wrap: false,
            scroll: 0,
            query: String::new(),
            matches: Vec::new(),
            current: None,
            read_to: 0,
            file: None,
            partial: String::new(),
            skip_partial: false,
        };
        let files = instance_files(&logs, instance);
        for (i, f) in files.iter().enumerate() {
            v.file = Some(f.clone());
            v.read_to = 0;
            v.read_more();
            if i + 1 < files.len() && !v.partial.is_empty() {
                let last = std::mem::take(&mut v.partial);
                v.push(&last);
            }
        }
        Some(v)
    }

    fn push(&mut self, line: &str) {
        let (stream, text) = parse(line);
        if !self.query.is_empty() && text.contains(&self.query) {
            self.matches.push(self.lines.len());
        }
        self.lines.push((stream, text));
        if self.lines.len() > LINES_KEPT {
            let drop = self.lines.len() - LINES_KEPT;
            self.lines.drain(..drop);
            self.scroll = self.scroll.saturating_sub(drop);
            self.matches.retain(|m| *m >= drop);
            for m in &mut self.matches {
                *m -= drop;
            }
        }
    }

    /// Reads what the current file has beyond what was read.
    fn read_more(&mut self) {
        let Some(path) = &self.file else { return };
        let Ok(mut f) = File::open(path) else { return };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.read_to {
            // Rotated: the current file is a new one.
            self.read_to = 0;
        }
        if len - self.read_to > BACKLOG_READ {
            // Heavy output: only its end is worth reading (the pane keeps fewer lines anyway).
            let skipped = len - BACKLOG_READ - self.read_to;
            self.read_to = len - BACKLOG_READ;
            self.partial.clear();
            self.lines
                .push((String::new(), format!("--- {skipped} bytes skipped ---")));
            // The first line read may be cut: drop it.
            self.skip_partial = true;
        }
        if f.seek(SeekFrom::Start(self.read_to)).is_err() {
            return;
        }
        let mut r = BufReader::new(f);
        let mut buf = String::new();
        loop {
            buf.clear();
            match r.read_line(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.read_to += n as u64;
                    if buf.ends_with('\n') {
                        if std::mem::take(&mut self.skip_partial) {
                            continue;
                        }
                        let line = format!(
                            "{}{}",
                            std::mem::take(&mut self.partial),
                            buf.trim_end_matches('\n')
                        );
                        self.push(&line);
                    } else {
                        self.partial.push_str(&buf);
                    }
                }
            }
        }
    }

    /// Following: new lines of this instance, a rotation, or a newer instance.
    pub fn refresh(&mut self) {
        if self.previous {
            return;
        }
        let logs = StateDir::new(&self.dir).container_logs(&self.container);
        if let Some(&newest) = instances(&logs).last() {
            if newest != self.instance {
                // Finish the old instance, then go on with the new one.
                self.read_more();
                self.instance = newest;
                self.lines
                    .push((String::new(), format!("--- instance {newest} ---")));
                self.file = None;
                self.read_to = 0;
                self.partial.clear();
            }
        }
        let newest = logs.join(file_name(self.instance));
        if self.file.as_deref() != Some(newest.as_path()) {
            self.file = Some(newest);
            self.read_to = 0;
        }
        self.read_more();
    }

    pub fn scroll_up(&mut self, n: usize) {
        self.follow = false;
        self.scroll = self.scroll.saturating_sub(n);
    }

    pub fn scroll_down(&mut self, n: usize) {
        self.scroll = (self.scroll + n).min(self.lines.len().saturating_sub(1));
    }

    pub fn top(&mut self) {
        self.follow = false;
        self.scroll = 0;
    }

    pub fn bottom(&mut self) {
        self.follow = true;
    }

    /// Marks the lines containing `query` and jumps to the last one (the most recent).
    pub fn search(&mut self, query: &str) {
        self.query = query.to_string();
        self.matches = if query.is_empty() {
            Vec::new()
        } else {
            (0..self.lines.len())
                .filter(|&i| self.lines[i].1.contains(query))
                .collect()
        };
        self.current = self.matches.len().checked_sub(1);
        if let Some(c) = self.current {
            self.follow = false;
            self.scroll = self.matches[c];
        }
    }

    /// The next (`forward`) or previous match, wrapping around.
    pub fn next_match(&mut self, forward: bool) {
        if self.matches.is_empty() {
            return;
        }
        let n = self.matches.len();
        let c = match (self.current, forward) {
            (None, _) => 0,
            (Some(c), true) => (c + 1) % n,
            (Some(c), false) => (c + n - 1) % n,
        };
        self.current = Some(c);
        self.follow = false;
        self.scroll = self.matches[c];
    }

    /// The first line to show in a pane `height` lines high.
    pub fn first_shown(&self, height: usize) -> usize {
        if self.follow {
            self.lines.len().saturating_sub(height)
        } else {
            self.scroll.min(self.lines.len().saturating_sub(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn reads_follows_and_searches() {
        let d = TempDir::new("top-logs");
        let logs = d.join("logs").join("app");
        write(&logs, "1.log", "T stdout F one\nT stderr F two error\n");
        write(&logs, "2.log", "T stdout F three\nT stdout P fo");
        let mut v = LogView::open(&d, "app", false).unwrap();
        assert_eq!(v.instance, 2);
        assert_eq!(v.lines, [("stdout".to_string(), "three".to_string())]);
        // The rest of the cut line, and a new one.
        std::fs::OpenOptions::new()
            .append(true)
            .open(logs.join("2.log"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"ur\nT stdout F an error\n"))
            .unwrap();
        v.refresh();
        let texts: Vec<&str> = v.lines.iter().map(|l| l.1.as_str()).collect();
        assert_eq!(texts, ["three", "four", "an error"]);
        v.search("error");
        assert_eq!(v.matches, [2]);
        assert!(!v.follow);
        // A new instance: following moves on to it.
        write(&logs, "3.log", "T stdout F five\n");
        v.follow = true;
        v.refresh();
        assert_eq!(v.instance, 3);
        assert_eq!(v.lines.last().unwrap().1, "five");
        // The previous instance.
        let p = LogView::open(&d, "app", true).unwrap();
        assert_eq!(p.instance, 2);
        assert!(!p.follow);
    }

    #[test]
    fn heavy_output_is_read_from_its_end() {
        let d = TempDir::new("top-heavy");
        let logs = d.join("logs").join("app");
        let line = format!("T stdout F {}\n", "x".repeat(89));
        let mut text = line.repeat(60_000);
        text.push_str("T stdout F the end\n");
        write(&logs, "1.log", &text);
        let v = LogView::open(&d, "app", false).unwrap();
        // Only the end was read (the pane keeps LINES_KEPT), and no line was cut.
        assert_eq!(v.lines.len(), LINES_KEPT);
        assert_eq!(v.lines.last().unwrap().1, "the end");
        assert!(v.lines[..LINES_KEPT - 1].iter().all(|l| l.1.len() == 89));
    }
}
