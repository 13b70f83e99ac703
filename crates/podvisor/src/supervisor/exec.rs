//! `podvisor exec`: a command run in a running container with the client's stdin, stdout and
//! stderr, as CRI exec runs it (the container's namespaces, cgroups, user, groups,
//! capabilities, no_new_privs and seccomp filter, environment and working directory). The
//! answer is its exit; a client that goes away takes its command with it.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use podvisor_core::lifecycle::InstanceId;

use super::{PidOwner, Supervisor};
use crate::probe::go_error_text;
use crate::process::sys::{self, ChildSetup, Exit};

impl Supervisor {
    /// Starts `command` in `container` for the client in `slot`, with a terminal of
    /// `terminal`'s size (rows, columns) when it asks for one.
    pub(super) fn exec(
        &mut self,
        slot: usize,
        container: &str,
        command: &[String],
        terminal: Option<(u16, u16)>,
    ) {
        let fds = self.api.take_fds(slot);
        let found = (self.pod.containers().iter()).position(|c| c.name == container);
        let Some(i) = found else {
            let msg = self.no_such_container(container);
            return self.api.reply(slot, 404, &msg, &self.epoll);
        };
        let id = InstanceId {
            container: i,
            instance: self.pod.containers()[i].instance,
        };
        if self.instances.get(id).is_none() || self.stopped {
            let msg = format!(
                "container {container:?} in pod {} is not running\n",
                self.info.name
            );
            return self.api.reply(slot, 409, &msg, &self.epoll);
        }
        let (stdin, stdout, stderr): (Option<&OwnedFd>, &OwnedFd, &OwnedFd) = match (
            &fds[..],
            terminal,
        ) {
            // With a terminal: the socket its master goes to, in stdin's place.
            ([console], Some(_)) => (Some(console), console, console),
            ([out, err], None) => (None, out, err),
            ([inp, out, err], None) => (Some(inp), out, err),
            _ => {
                let msg = "exec takes the command's stdout and stderr (and stdin), or with tty=true a socket for its terminal's master, as descriptors passed with the request (SCM_RIGHTS)\n";
                return self.api.reply(slot, 400, msg, &self.epoll);
            }
        };
        let ctx = self.exec_context(id);
        let mut io = ctx.container_io(
            stdin.map(AsRawFd::as_raw_fd),
            stdout.as_raw_fd(),
            stderr.as_raw_fd(),
        );
        if terminal.is_some() {
            // As CRI exec with a terminal: TERM=xterm.
            io.env = match io.env.with("TERM", "xterm") {
                Ok(env) => env,
                Err(e) => {
                    return self
                        .api
                        .reply(slot, 500, &format!("cannot {e}\n"), &self.epoll)
                }
            };
            io.terminal = terminal;
        }
        let argv: Vec<OsString> = command.iter().map(OsString::from).collect();
        match sys::spawn(&argv, ChildSetup::Container(Box::new(io)), &self.inherited) {
            Ok(pid) => {
                self.pids.insert(pid, PidOwner::Exec(slot));
                self.api.exec_started(slot, pid);
            }
            Err(e) => {
                // As `docker exec` reports it: 127 for a command not found, 126 otherwise.
                let code = match e.kind() {
                    io::ErrorKind::NotFound => 127,
                    _ => 126,
                };
                let body = serde_json::json!({
                    "exitCode": code,
                    "error": format!("exec: {:?}: {}", command[0], go_error_text(&e)),
                });
                self.api.reply(slot, 200, &format!("{body}\n"), &self.epoll);
            }
        }
    }

    /// A command of `podvisor exec` ended: its client gets the exit.
    pub(super) fn exec_exited(&mut self, slot: usize, pid: i32, exit: Exit) {
        let body = match exit {
            Exit::Code(c) => serde_json::json!({ "exitCode": c }),
            Exit::Signal(s) => serde_json::json!({ "exitCode": 128 + s, "signal": s }),
        };
        self.api
            .exec_ended(slot, pid, &format!("{body}\n"), &self.epoll);
    }

    /// Kills the commands whose client went away (their process group: what they started
    /// goes too); they are reaped as any child.
    pub(super) fn kill_abandoned_execs(&mut self) {
        for pid in self.api.take_abandoned() {
            if matches!(self.pids.get(&pid), Some(PidOwner::Exec(_))) {
                let _ = sys::send_signal(-pid, libc::SIGKILL);
            }
        }
    }

    /// The commands still running, with their client's slot (the run ends: they are killed
    /// and reaped with the rest, and their clients told).
    pub(super) fn running_execs(&self) -> Vec<(i32, usize)> {
        (self.pids.iter())
            .filter_map(|(&pid, owner)| match owner {
                PidOwner::Exec(slot) => Some((pid, *slot)),
                _ => None,
            })
            .collect()
    }
}
