//! The systemd cgroup driver, as runc, crun, podman and the kubelet (`cgroupDriver: systemd`)
//! have it: where systemd is PID 1 it owns the cgroup tree, so podvisor asks it for a place
//! instead of writing into its tree. Each pod gets a transient scope unit,
//! `podvisor-NS_POD-HASH.scope` in `podvisor.slice`, asked for over D-Bus
//! (`org.freedesktop.systemd1.Manager.StartTransientUnit`) with `Delegate=yes`: the subtree
//! below the scope is podvisor's. podvisor moves itself into the scope (the unit's `PIDs`),
//! then into a leaf of it, `supervisor`, so that the scope may enable controllers for its
//! children; the pod's cgroup is `pod` beside it, its container instances below that.
//!
//! As root it asks the system manager; as another user, that user's own manager
//! (`systemd --user`, over the user bus at `$XDG_RUNTIME_DIR/bus`), which is how rootless
//! limits exist on a systemd host: a login shell's `session-N.scope` belongs to root and is
//! never delegated. When podvisor exits, the scope is empty and systemd removes it
//! (`CollectMode=inactive-or-failed`); a scope left by a run killed with -9 is stopped by the
//! next run on the same state dir (the unit's name comes from it).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zbus::blocking::Connection;
use zbus::zvariant::Value;

use super::fs::write_file;
use super::unified;
use super::{io_err, CgroupError, Layout};
use crate::process::sys;

/// The slice every pod's scope goes in.
pub const SLICE: &str = "podvisor.slice";

/// The leaf of the scope podvisor moves itself into.
pub const SUPERVISOR: &str = "supervisor";

/// How long systemd may take to start or stop a scope.
const PATIENCE: Duration = Duration::from_secs(10);

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// Why the systemd driver cannot be used by `uid` here: systemd is not this host's init
/// (`sd_booted()`), or, for a user other than root, that user's manager does not answer on
/// its bus. `None`: it can.
pub fn unavailable(uid: u32) -> Option<&'static str> {
    if !Path::new("/run/systemd/system").is_dir() {
        return Some("systemd is not this host's init (no /run/systemd/system)");
    }
    if uid != 0 && !user_bus().is_some_and(|p| p.exists()) {
        return Some("this user's systemd manager is not reachable ($XDG_RUNTIME_DIR/bus)");
    }
    None
}

/// The user bus's socket, where `systemd --user` and its D-Bus listen.
fn user_bus() -> Option<PathBuf> {
    let dir = std::env::var_os("XDG_RUNTIME_DIR")?;
    Some(Path::new(&dir).join("bus"))
}

fn dbus_err(what: &'static str) -> impl Fn(zbus::Error) -> CgroupError {
    move |e| CgroupError::Systemd {
        what,
        error: match &e {
            zbus::Error::MethodError(name, Some(detail), _) => format!("{name}: {detail}"),
            _ => e.to_string(),
        },
    }
}

/// The scope unit's name for a pod cgroup name (`podvisor-NS_POD-HASH`).
pub fn unit_name(pod_cgroup: &str) -> String {
    format!("{pod_cgroup}.scope")
}

/// A pod's scope, started with podvisor in its `supervisor` leaf and `enabled` controllers
/// for its children.
#[derive(Debug)]
pub struct Scope {
    pub unit: String,
    pub dir: PathBuf,
    pub enabled: Vec<&'static str>,
}

/// Starts the pod's scope (stopping one a dead run left) and moves podvisor into it.
pub fn start_scope(
    uid: u32,
    unit: &str,
    description: &str,
    need: &[&'static str],
) -> Result<Scope, CgroupError> {
    let bus = if uid == 0 {
        Connection::system().map_err(dbus_err("connect to the system bus"))?
    } else {
        Connection::session().map_err(dbus_err(
            "connect to the user's bus (is systemd --user running? loginctl enable-linger)",
        ))?
    };
    stop_leftover(&bus, unit)?;
    let pid = sys::getpid() as u32;
    let properties: Vec<(&str, Value)> = vec![
        ("Description", Value::from(description)),
        ("Slice", Value::from(SLICE)),
        ("PIDs", Value::from(vec![pid])),
        ("Delegate", Value::from(true)),
        ("CollectMode", Value::from("inactive-or-failed")),
        // Accounting makes systemd enable the controllers on the way down to the scope.
        ("MemoryAccounting", Value::from(true)),
        ("CPUAccounting", Value::from(true)),
        ("TasksAccounting", Value::from(true)),
    ];
    let aux: Vec<(&str, Vec<(&str, Value)>)> = Vec::new();
    bus.call_method(
        Some(DEST),
        PATH,
        Some(MANAGER),
        "StartTransientUnit",
        &(unit, "fail", properties, aux),
    )
    .map_err(dbus_err("start a transient scope"))?;
    // The job moves podvisor into the scope's cgroup: that is when it is ready.
    let deadline = Instant::now() + PATIENCE;
    let dir = loop {
        // Read as at start (/proc/self/cgroup under the unified mount).
        let own = Layout::detect().ok().map(|l| l.roots[0].1.clone());
        if let Some(dir) = own.filter(|d| d.ends_with(unit)) {
            break dir;
        }
        if Instant::now() > deadline {
            return Err(CgroupError::Systemd {
                what: "start a transient scope",
                error: format!("podvisor was not moved into {unit} within {PATIENCE:?}"),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let enabled = unified::usable(
        &dir,
        need,
        if uid == 0 {
            "systemd did not delegate it to the scope: enable it for podvisor.slice"
        } else {
            "the user's manager does not delegate it: add Delegate=cpu cpuset io memory pids to user@.service (a drop-in in /etc/systemd/system/user@.service.d/)"
        },
    )?;
    let leaf = dir.join(SUPERVISOR);
    std::fs::create_dir(&leaf).map_err(io_err(&leaf, "create"))?;
    let procs = leaf.join("cgroup.procs");
    write_file(&procs, &pid.to_string()).map_err(io_err(&procs, "move podvisor into"))?;
    unified::enable(&dir, &enabled)?;
    Ok(Scope {
        unit: unit.to_string(),
        dir,
        enabled,
    })
}

/// A scope of this name that a dead run left is stopped (its processes killed) and waited
/// for; none is the usual case.
fn stop_leftover(bus: &Connection, unit: &str) -> Result<(), CgroupError> {
    let exists = |bus: &Connection| {
        bus.call_method(Some(DEST), PATH, Some(MANAGER), "GetUnit", &(unit,))
            .is_ok()
    };
    if !exists(bus) {
        return Ok(());
    }
    bus.call_method(
        Some(DEST),
        PATH,
        Some(MANAGER),
        "StopUnit",
        &(unit, "replace"),
    )
    .map_err(dbus_err("stop the scope a killed run left"))?;
    let deadline = Instant::now() + PATIENCE;
    while exists(bus) {
        // A failed unit stays loaded until its failure is reset.
        let _ = bus.call_method(Some(DEST), PATH, Some(MANAGER), "ResetFailedUnit", &(unit,));
        if Instant::now() > deadline {
            return Err(CgroupError::Systemd {
                what: "stop the scope a killed run left",
                error: format!("{unit} is still there after {PATIENCE:?}"),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
