//! A container's standard streams as CRI gives them (`StdioPlan`), made by whoever reads its
//! output: the run, or under live restore its keeper.
//!
//! Without `tty`: pipes for its stdout and stderr. With `tty`: a terminal of its own, which
//! the child opens in its own `/dev` (its devpts, as runc's console) and makes its stdin,
//! stdout, stderr and controlling terminal; it sends the terminal's master back on a socket
//! before it execs, and the master is read as its stdout. Its stdin is /dev/null, or with
//! `stdin` (and no terminal) a pipe whose write end is held while it runs, so that reading
//! it waits rather than ends (nothing writes to it: podvisor has no `attach`).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use podvisor_core::spec::plan::StdioPlan;

use super::sys::{self, ContainerIo};

/// A start's streams before its child is made: what the child gets, and what is kept here.
#[derive(Debug)]
pub struct Streams {
    /// What the child gets, by stdin, stdout, stderr (a terminal's: the console socket's end
    /// for all three). Ours close once it is made, or the pipes never end.
    given: [Option<OwnedFd>; 3],
    /// The write end of its stdin pipe.
    stdin: Option<OwnedFd>,
    /// With a terminal: our end of the socket its master comes back on.
    console: Option<UnixStream>,
}

/// What is kept of a container's streams once it is made.
#[derive(Debug)]
pub struct Kept {
    /// The write end of its stdin pipe, held while it runs.
    pub stdin: Option<OwnedFd>,
    /// Its terminal's master (non-blocking), to read as its stdout.
    pub terminal: Option<File>,
}

impl Streams {
    /// Makes what `plan` asks for; with it, the read ends of its stdout and stderr pipes to
    /// log under those names (none with a terminal).
    pub fn new(plan: StdioPlan) -> io::Result<(Streams, Vec<(File, &'static str)>)> {
        let (stdin, given_in) = match plan.stdin && !plan.tty {
            true => {
                // Blocking at both ends: the child's reads wait.
                let (read, write) = sys::blocking_pipe()?;
                (Some(write), Some(read))
            }
            false => (None, None),
        };
        if plan.tty {
            let (ours, theirs) = UnixStream::pair()?;
            ours.set_nonblocking(true)?;
            let streams = Streams {
                given: [Some(OwnedFd::from(theirs)), None, None],
                stdin,
                console: Some(ours),
            };
            return Ok((streams, Vec::new()));
        }
        let (out_read, out_write) = sys::pipe()?;
        let (err_read, err_write) = sys::pipe()?;
        let streams = Streams {
            given: [given_in, Some(out_write), Some(err_write)],
            stdin,
            console: None,
        };
        Ok((streams, vec![(out_read, "stdout"), (err_read, "stderr")]))
    }

    /// Gives them to the child's `io` (as long as `self` lives).
    pub fn give(&self, io: &mut ContainerIo) {
        let raw = |fd: &Option<OwnedFd>| fd.as_ref().map(AsRawFd::as_raw_fd);
        let [stdin, stdout, stderr] = &self.given;
        if self.console.is_some() {
            // The console socket in stdin's place; the terminal's size left as the kernel
            // makes it (no client has one to give).
            io.terminal = Some((0, 0));
            io.stdin = raw(stdin);
            io.stdout = raw(stdin).unwrap_or(-1);
            io.stderr = raw(stdin).unwrap_or(-1);
            return;
        }
        io.stdin = raw(stdin);
        io.stdout = raw(stdout).unwrap_or(-1);
        io.stderr = raw(stderr).unwrap_or(-1);
    }

    /// Its child is made: the child's ends close here, and its terminal's master is taken
    /// from the console socket (sent before it exec'd: it is there).
    pub fn made(self) -> io::Result<Kept> {
        let Streams {
            given,
            stdin,
            console,
        } = self;
        drop(given);
        let terminal = match console {
            Some(socket) => Some(receive_master(&socket)?),
            None => None,
        };
        Ok(Kept { stdin, terminal })
    }
}

/// The master a child sent on `socket`, made non-blocking.
fn receive_master(socket: &UnixStream) -> io::Result<File> {
    let master = sys::recv_fd(socket)?.ok_or_else(|| io::Error::other("no terminal came back"))?;
    sys::set_nonblocking(&master)?;
    Ok(File::from(master))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(stdin: bool, tty: bool) -> StdioPlan {
        StdioPlan { stdin, tty }
    }

    #[test]
    fn pipes_without_a_terminal_and_a_console_socket_with_one() {
        let mut io = ContainerIo {
            terminal: None,
            stdin: None,
            stdout: -1,
            stderr: -1,
            working_dir: None,
            working_dir_optional: false,
            env: sys::Environment::default(),
            mounts: Vec::new(),
            join_mounts: None,
            join_user: None,
            cgroups: Vec::new(),
            root: None,
            credentials: None,
            namespaces: sys::Namespaces::default(),
        };
        let (plain, read) = Streams::new(plan(false, false)).unwrap();
        plain.give(&mut io);
        let names: Vec<&str> = read.iter().map(|r| r.1).collect();
        assert_eq!(names, ["stdout", "stderr"]);
        assert_eq!((io.terminal, io.stdin), (None, None));
        assert!(io.stdout >= 0 && io.stderr >= 0 && io.stdout != io.stderr);
        let (with_stdin, _) = Streams::new(plan(true, false)).unwrap();
        with_stdin.give(&mut io);
        assert!(io.stdin.is_some());
        assert!(with_stdin.made().unwrap().stdin.is_some());
        // A terminal is its stdin too, whether or not `stdin` is asked for.
        for stdin in [false, true] {
            let (tty, read) = Streams::new(plan(stdin, true)).unwrap();
            tty.give(&mut io);
            assert!(read.is_empty());
            assert_eq!(io.terminal, Some((0, 0)));
            assert_eq!(Some(io.stdout), io.stdin);
            // Nothing sent: no terminal came back, and reading does not wait.
            assert!(tty.made().is_err());
        }
    }
}
