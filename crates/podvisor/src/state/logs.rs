//! Container output into one log file per instance, in the kubelet's CRI format: one line per
//! output line, `TIME STREAM F|P TEXT` (F a full line, P a partial one: cut at end of output, or
//! at 16 KiB as the kubelet cuts long lines), a line's end "\n" or "\r\n" (a terminal's) as
//! containerd reads it. A file past the size limit is rotated: `N.log`
//! becomes `N.log.1` (older ones shift up, the oldest beyond the count is removed), as the
//! kubelet's containerLogMaxSize / containerLogMaxFiles do.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::SystemTime;

use podvisor_core::lifecycle::InstanceId;

use crate::time::write_millis_time;

/// A line longer than this is written in parts (`P`), as the kubelet does.
const MAX_LINE: usize = 16 * 1024;

/// Size and count limits of an instance's log files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    pub max_size: u64,
    /// Files kept per instance, the current one included (at least 1).
    pub max_files: u32,
}

impl Default for LogLimits {
    /// The kubelet's defaults: containerLogMaxSize 10Mi, containerLogMaxFiles 5.
    fn default() -> Self {
        LogLimits {
            max_size: 10 << 20,
            max_files: 5,
        }
    }
}

/// The log file of one container instance, shared by its stdout and stderr.
///
/// Writing it never stops the pod, as a runtime's logger: output that cannot be written (a
/// full disk, a removed or read-only directory) is dropped and counted, each write tries again,
/// and a file removed under it is made again; what happened is told by `take_news`.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    /// `None` while it cannot be opened.
    file: Option<File>,
    size: u64,
    limits: LogLimits,
    /// Bytes dropped since writing began to fail.
    dropped: u64,
    failing: bool,
    /// A write has succeeded (`Written` was told).
    written: bool,
    news: Vec<LogNews>,
}

/// What happened to a log file's writes (a keeper tells it to the runs connected to it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogNews {
    /// Writing failed (why): output is dropped until it succeeds again.
    Failing(String),
    /// Writing succeeds again after `dropped` bytes were lost.
    Recovered { dropped: u64 },
    /// The file was removed under the run: a new one is written.
    Replaced,
    /// Its first write succeeded.
    Written,
}

impl LogFile {
    /// The log file at `path`, opened for appending (when it cannot be, the first write says
    /// so and tries again).
    pub fn create(path: PathBuf, limits: LogLimits) -> Rc<RefCell<LogFile>> {
        let mut f = LogFile {
            path,
            file: None,
            size: 0,
            limits,
            dropped: 0,
            failing: false,
            written: false,
            news: Vec::new(),
        };
        if let Err(e) = f.open() {
            f.fail(&e, 0);
        }
        Rc::new(RefCell::new(f))
    }

    /// What happened since the last call.
    pub fn take_news(&mut self) -> Vec<LogNews> {
        std::mem::take(&mut self.news)
    }

    fn open(&mut self) -> io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    fn fail(&mut self, e: &io::Error, lost: usize) {
        if !self.failing {
            self.failing = true;
            self.news
                .push(LogNews::Failing(format!("{}: {e}", self.path.display())));
        }
        self.dropped += lost as u64;
    }

    fn write(&mut self, lines: &[u8]) {
        match self.try_write(lines) {
            Ok(()) if self.failing => {
                self.failing = false;
                self.written = true;
                let dropped = std::mem::take(&mut self.dropped);
                self.news.push(LogNews::Recovered { dropped });
            }
            Ok(()) if !self.written => {
                self.written = true;
                self.news.push(LogNews::Written);
            }
            Ok(()) => {}
            Err(e) => self.fail(&e, lines.len()),
        }
    }

    fn try_write(&mut self, lines: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        // A file unlinked under us (its directory removed) is written no more: a new one is.
        let gone = match &self.file {
            Some(f) => f.metadata()?.nlink() == 0,
            None => true,
        };
        if gone {
            let replaced = self.file.take().is_some();
            self.open()?;
            if replaced {
                self.news.push(LogNews::Replaced);
            }
        }
        if let Some(file) = self.file.as_mut() {
            file.write_all(lines)?;
        }
        self.size += lines.len() as u64;
        if self.size >= self.limits.max_size {
            self.rotate()?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        let keep = self.limits.max_files.max(1);
        let name = |k: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{k}"));
            PathBuf::from(p)
        };
        if keep == 1 {
            if let Some(f) = &self.file {
                f.set_len(0)?;
            }
            self.size = 0;
            return Ok(());
        }
        let _ = std::fs::remove_file(name(keep - 1));
        for k in (1..keep - 1).rev() {
            let _ = std::fs::rename(name(k), name(k + 1));
        }
        std::fs::rename(&self.path, name(1))?;
        crate::process::failpoint::hit("log.rotated");
        self.file = None;
        self.open()
    }
}

/// One stream (stdout or stderr) of one container instance.
#[derive(Debug)]
pub struct LogStream {
    /// The container instance it belongs to.
    pub owner: InstanceId,
    pipe: File,
    stream: &'static str,
    file: Rc<RefCell<LogFile>>,
    partial: Vec<u8>,
}

impl LogStream {
    pub fn new(
        owner: InstanceId,
        pipe: File,
        stream: &'static str,
        file: Rc<RefCell<LogFile>>,
    ) -> LogStream {
        LogStream {
            owner,
            pipe,
            stream,
            file,
            partial: Vec::new(),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.pipe.as_raw_fd()
    }

    /// What happened to its file's writes since the last call (see `LogFile`).
    pub fn take_news(&self) -> Vec<LogNews> {
        self.file.borrow_mut().take_news()
    }

    /// Reads what the pipe has. `Ok(false)` at end of output (the stream is done).
    ///
    /// `scratch` is where the lines are put together before they are written: one buffer
    /// for all of a process's streams, kept between calls, so that once it has grown a drain
    /// allocates nothing (the keeper's and run's loops, however much their containers print).
    pub fn drain(&mut self, scratch: &mut Vec<u8>) -> io::Result<bool> {
        let open = self.read_ready(scratch)?;
        if !open {
            self.write_partial(scratch)?;
        }
        Ok(open)
    }

    /// Reads to the end and writes a last partial line, if any.
    pub fn finish(&mut self, scratch: &mut Vec<u8>) -> io::Result<()> {
        // The writers are gone by now; a descendant that still holds the pipe open is not
        // waited for (the pipe does not block).
        self.read_ready(scratch)?;
        self.write_partial(scratch)
    }

    /// Writes what the pipe holds now; `Ok(false)` once its writers are all gone.
    fn read_ready(&mut self, scratch: &mut Vec<u8>) -> io::Result<bool> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.pipe.read(&mut buf) {
                Ok(0) => return Ok(false),
                Ok(n) => self.write_lines(&buf[..n], scratch)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A terminal's master once its last slave is closed.
                Err(e) if e.raw_os_error() == Some(libc::EIO) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    fn write_lines(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let mut head = [0u8; 64];
        let head = line_head(&mut head, self.stream)?;
        out.clear();
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            out.extend_from_slice(head);
            out.extend_from_slice(b"F ");
            out.extend_from_slice(&self.partial);
            self.partial.clear();
            out.extend_from_slice(&data[..nl]);
            // A line's end is "\n" or "\r\n" (a terminal's), as containerd reads it: the
            // "\r" is not the line's.
            if out.last() == Some(&b'\r') {
                out.pop();
            }
            out.push(b'\n');
            data = &data[nl + 1..];
            if out.len() >= FLUSH_AT {
                self.file.borrow_mut().write(out);
                out.clear();
            }
        }
        self.partial.extend_from_slice(data);
        // A "\r" at the cut waits for the next byte: it may begin the line's end.
        while self.partial.len() > MAX_LINE
            || (self.partial.len() == MAX_LINE && self.partial[MAX_LINE - 1] != b'\r')
        {
            out.extend_from_slice(head);
            out.extend_from_slice(b"P ");
            out.extend_from_slice(&self.partial[..MAX_LINE]);
            out.push(b'\n');
            self.partial.drain(..MAX_LINE);
        }
        if !out.is_empty() {
            self.file.borrow_mut().write(out);
        }
        Ok(())
    }

    /// The rest of an output that did not end with a newline, as a partial line.
    fn write_partial(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        if self.partial.is_empty() {
            return Ok(());
        }
        let mut head = [0u8; 64];
        out.clear();
        out.extend_from_slice(line_head(&mut head, self.stream)?);
        out.extend_from_slice(b"P ");
        out.extend_from_slice(&self.partial);
        out.push(b'\n');
        self.partial.clear();
        self.file.borrow_mut().write(out);
        Ok(())
    }
}

/// Lines are written to the file whenever this much is put together, which bounds the
/// scratch buffer.
const FLUSH_AT: usize = 64 * 1024;

/// `TIME STREAM ` (the start of a CRI log line, now) in `buf`.
fn line_head<'a>(buf: &'a mut [u8; 64], stream: &str) -> io::Result<&'a [u8]> {
    let mut w = io::Cursor::new(&mut buf[..]);
    write_millis_time(SystemTime::now(), jiff::fmt::StdIoWrite(&mut w))
        .map_err(io::Error::other)?;
    write!(w, " {stream} ")?;
    let n = w.position() as usize;
    Ok(&buf[..n])
}

/// The current log file's name of instance `instance` (`N.log`; rotated ones are `N.log.K`).
pub fn file_name(instance: u32) -> String {
    format!("{instance}.log")
}

/// The instance numbers of a container's log dir that have log files, ascending.
pub fn instances(dir: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// An instance's files, oldest first: N.log.K … N.log.1, N.log.
pub fn instance_files(dir: &Path, instance: u32) -> Vec<PathBuf> {
    let base = dir.join(file_name(instance));
    let mut rotated: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let k: u32 = name
                .strip_prefix(&format!("{instance}.log."))?
                .parse()
                .ok()?;
            Some((k, e.path()))
        })
        .collect();
    rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    files.push(base);
    files
}

/// The last `n` complete lines of an instance's files (oldest first), and the bytes of complete
/// lines in the last file (where following it goes on).
pub fn last_lines(files: &[PathBuf], n: usize) -> io::Result<(VecDeque<Vec<u8>>, u64)> {
    let mut last: VecDeque<Vec<u8>> = VecDeque::with_capacity(n.min(100_000));
    let mut used = 0;
    for f in files {
        used = 0;
        let Ok(file) = File::open(f) else { continue };
        let mut r = BufReader::with_capacity(1 << 20, file);
        loop {
            let mut line = Vec::new();
            let read = r.read_until(b'\n', &mut line)?;
            if read == 0 || line.last() != Some(&b'\n') {
                break;
            }
            used += read as u64;
            if n == 0 {
                continue;
            }
            if last.len() == n {
                last.pop_front();
            }
            last.push_back(line);
        }
    }
    Ok((last, used))
}

/// The text of an instance's last `n` output lines (stdout and stderr as they came), without
/// the CRI prefix: what a Debug exit leaves in its `DebugLogTail` event.
pub fn tail_text(dir: &Path, instance: u32, n: usize) -> io::Result<String> {
    let text = tail_lines(dir, instance, n)?;
    Ok(text.trim_end_matches('\n').to_string())
}

/// The text of an instance's last `n` output lines as they were written, each whole line
/// with its newline (as `logs --tail N` prints them).
pub fn tail_lines(dir: &Path, instance: u32, n: usize) -> io::Result<String> {
    let (lines, _) = last_lines(&instance_files(dir, instance), n)?;
    let mut text = String::new();
    for line in &lines {
        let mut parts = line.splitn(4, |&b| b == b' ');
        let (Some(_time), Some(_stream), Some(tag), Some(body)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let body = body.strip_suffix(b"\n").unwrap_or(body);
        text.push_str(&String::from_utf8_lossy(body));
        if tag != b"P" {
            text.push('\n');
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::sys;
    use crate::testing::TempDir;

    /// A stream of a fresh log file in a dir of its own, and the pipe's write end.
    fn stream(name: &str) -> (TempDir, LogStream, File) {
        let dir = TempDir::new(&format!("logs-{name}"));
        let file = LogFile::create(dir.join("0.log"), LogLimits::default());
        let (read, write) = sys::pipe().unwrap();
        let id = InstanceId {
            container: 0,
            instance: 0,
        };
        (
            dir,
            LogStream::new(id, read, "stdout", file),
            File::from(write),
        )
    }

    /// Each line of the file as (stream, tag, text), after a check of its time.
    fn lines(dir: &Path) -> Vec<(String, String, String)> {
        let text = std::fs::read_to_string(dir.join("0.log")).unwrap();
        // Lines end at "\n" alone: a "\r" before it would be the line's.
        text.split_terminator('\n')
            .map(|l| {
                let mut parts = l.splitn(4, ' ');
                let time = parts.next().unwrap();
                assert!(time.len() == 24 && time.ends_with('Z'), "{l:?}");
                let mut next = || parts.next().unwrap().to_string();
                (next(), next(), next())
            })
            .collect()
    }

    #[test]
    fn a_drain_allocates_nothing_once_its_buffers_have_grown() {
        let (dir, mut log, mut pipe) = stream("alloc");
        let chunk = "a line of output\n".repeat(100) + "and half a line";
        let mut scratch = Vec::new();
        pipe.write_all(chunk.as_bytes()).unwrap();
        assert!(log.drain(&mut scratch).unwrap());
        let before = sys::allocations();
        for _ in 0..10 {
            pipe.write_all(chunk.as_bytes()).unwrap();
            assert!(log.drain(&mut scratch).unwrap());
        }
        assert_eq!(sys::allocations() - before, 0);
        drop(pipe);
        assert!(!log.drain(&mut scratch).unwrap());
        let lines = lines(&dir);
        assert_eq!(lines.len(), 11 * 100 + 1);
        assert_eq!(
            lines[0],
            ("stdout".into(), "F".into(), "a line of output".into())
        );
        let joined = "and half a linea line of output";
        assert_eq!(lines[100].2, joined);
        assert_eq!(lines.iter().filter(|l| l.2 == joined).count(), 10);
        assert!(lines[..1100].iter().all(|l| l.1 == "F"));
        assert_eq!(
            lines[1100],
            ("stdout".into(), "P".into(), "and half a line".into())
        );
    }

    #[test]
    fn a_long_line_is_written_in_parts_of_16_kib() {
        let (dir, mut log, mut pipe) = stream("long");
        let mut scratch = Vec::new();
        // 40 KiB and a newline, in three writes of which none ends the line.
        let line = "x".repeat(40 * 1024);
        for part in [&line[..10_000], &line[10_000..30_000], &line[30_000..]] {
            pipe.write_all(part.as_bytes()).unwrap();
            assert!(log.drain(&mut scratch).unwrap());
        }
        pipe.write_all(b"\nend").unwrap();
        log.finish(&mut scratch).unwrap();
        let lines = lines(&dir);
        let shape: Vec<(&str, usize)> = lines.iter().map(|l| (&l.1[..], l.2.len())).collect();
        assert_eq!(
            shape,
            [
                ("P", MAX_LINE),
                ("P", MAX_LINE),
                ("F", 40 * 1024 - 2 * MAX_LINE),
                ("P", 3)
            ]
        );
    }

    #[test]
    fn a_lines_carriage_return_before_its_newline_is_not_the_lines() {
        let (dir, mut log, mut pipe) = stream("crlf");
        let mut scratch = Vec::new();
        // A terminal's lines; a "\r" inside a line, alone at its end, and a "\r\n" split
        // between two reads at the 16 KiB cut.
        pipe.write_all(b"one\r\ntwo\rthree\r\n\r\n").unwrap();
        assert!(log.drain(&mut scratch).unwrap());
        let long = "y".repeat(MAX_LINE - 1) + "\r";
        pipe.write_all(long.as_bytes()).unwrap();
        assert!(log.drain(&mut scratch).unwrap());
        pipe.write_all(b"\nlast\r").unwrap();
        log.finish(&mut scratch).unwrap();
        let lines = lines(&dir);
        let texts: Vec<(&str, &str)> = lines.iter().map(|l| (&l.1[..], &l.2[..])).collect();
        assert_eq!(
            texts,
            [
                ("F", "one"),
                ("F", "two\rthree"),
                ("F", ""),
                ("F", &long[..MAX_LINE - 1]),
                ("P", "last\r"),
            ]
        );
    }
}
