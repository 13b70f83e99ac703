//! Container output into one log file per instance, in the kubelet's CRI format: one line per
//! output line, `TIME STREAM F|P TEXT` (F a full line, P a partial one: cut at end of output, or
//! at 16 KiB as the kubelet cuts long lines). A file past the size limit is rotated: `N.log`
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

use crate::rfc3339::rfc3339_millis;

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
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    file: File,
    size: u64,
    limits: LogLimits,
}

impl LogFile {
    pub fn create(path: PathBuf, limits: LogLimits) -> io::Result<Rc<RefCell<LogFile>>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let size = file.metadata()?.len();
        Ok(Rc::new(RefCell::new(LogFile {
            path,
            file,
            size,
            limits,
        })))
    }

    fn write(&mut self, lines: &[u8]) -> io::Result<()> {
        self.file.write_all(lines)?;
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
            self.file.set_len(0)?;
            self.size = 0;
            return Ok(());
        }
        let _ = std::fs::remove_file(name(keep - 1));
        for k in (1..keep - 1).rev() {
            let _ = std::fs::rename(name(k), name(k + 1));
        }
        std::fs::rename(&self.path, name(1))?;
        self.file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
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

    /// Reads what the pipe has. `Ok(false)` at end of output (the stream is done).
    pub fn drain(&mut self) -> io::Result<bool> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.pipe.read(&mut buf) {
                Ok(0) => {
                    self.finish()?;
                    return Ok(false);
                }
                Ok(n) => self.write_lines(&buf[..n])?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn write_lines(&mut self, mut data: &[u8]) -> io::Result<()> {
        let time = rfc3339_millis(SystemTime::now());
        let mut out = Vec::with_capacity(data.len() + 64);
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            out.extend_from_slice(format!("{time} {} F ", self.stream).as_bytes());
            out.append(&mut self.partial);
            out.extend_from_slice(&data[..nl + 1]);
            data = &data[nl + 1..];
        }
        self.partial.extend_from_slice(data);
        while self.partial.len() >= MAX_LINE {
            out.extend_from_slice(format!("{time} {} P ", self.stream).as_bytes());
            out.extend_from_slice(&self.partial[..MAX_LINE]);
            out.push(b'\n');
            self.partial.drain(..MAX_LINE);
        }
        if out.is_empty() {
            return Ok(());
        }
        self.file.borrow_mut().write(&out)
    }

    /// Reads to the end and writes a last partial line, if any.
    pub fn finish(&mut self) -> io::Result<()> {
        let mut rest = Vec::new();
        // The writers are gone by now; a descendant that still holds the pipe open is not
        // waited for (non-blocking read).
        match self.pipe.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        self.write_lines(&rest)?;
        if !self.partial.is_empty() {
            let time = rfc3339_millis(SystemTime::now());
            let mut line = format!("{time} {} P ", self.stream).into_bytes();
            line.append(&mut self.partial);
            line.push(b'\n');
            self.file.borrow_mut().write(&line)?;
        }
        Ok(())
    }
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
    let base = dir.join(format!("{instance}.log"));
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
    Ok(text.trim_end_matches('\n').to_string())
}
