//! Container output into one log file per instance, in the kubelet's CRI format: one line per
//! output line, `TIME STREAM F|P TEXT` (F a full line, P a partial one cut at end of output).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::time::SystemTime;

use super::events::rfc3339_millis;

/// One stream (stdout or stderr) of one container instance.
#[derive(Debug)]
pub struct LogStream {
    pipe: File,
    stream: &'static str,
    file: File,
    partial: Vec<u8>,
}

impl LogStream {
    pub fn new(pipe: File, stream: &'static str, file: File) -> LogStream {
        LogStream {
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
        self.file.write_all(&out)
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
            self.file.write_all(&line)?;
        }
        Ok(())
    }
}
