//! A virtual machine for what this host cannot show: Debian's kernel under qemu (TCG, no KVM
//! needed) booting an initramfs made here from busybox-static, this test binary, the podvisor
//! binaries under test and the libraries `ldd` lists for them, all at the paths they have on
//! the host. Its init copies itself onto a tmpfs and switch_roots into it (containers'
//! roots are pivot_root'ed, which the initramfs itself does not allow), mounts cgroup v2 the
//! way systemd does, lays the tree out as a systemd host has it, and runs the `guest_v2`
//! tests of this binary from each place a user starts podvisor from. The results come back
//! on the serial console as `VM-RESULT <scenario> <exit code>` lines.
//!
//! Needs `scripts/vm-assets` (the kernel in target/vm/, qemu-system-x86 and busybox-static);
//! without them the test says `skipped: ...`, or fails when `PODVISOR_NO_SKIP` is set (CI sets it).

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::*;

/// Where `scripts/vm-assets` puts the kernel and the overlay module.
fn assets_dir() -> PathBuf {
    match std::env::var_os("PODVISOR_VM_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/vm"),
    }
}

/// What the VM needs from this host, or why it cannot be had.
pub struct Assets {
    pub kernel: PathBuf,
    pub overlay: PathBuf,
    pub qemu: PathBuf,
    pub busybox: PathBuf,
}

impl Assets {
    /// The assets, or `None` after saying skipped (a failure when `PODVISOR_NO_SKIP` is set).
    pub fn find(test: &str) -> Option<Assets> {
        let dir = assets_dir();
        let found = (|| {
            let kernel = dir.join("vmlinuz");
            let overlay = dir.join("overlay.ko");
            if !kernel.is_file() || !overlay.is_file() {
                return Err(format!("no kernel in {}", dir.display()));
            }
            let qemu = which("qemu-system-x86_64").ok_or("qemu-system-x86_64 is not installed")?;
            let busybox = PathBuf::from("/bin/busybox");
            let ldd = Command::new("ldd").arg(&busybox).output();
            let is_static = ldd.is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout).contains("not a dynamic executable")
                    || String::from_utf8_lossy(&o.stderr).contains("not a dynamic executable")
            });
            if !is_static {
                return Err("/bin/busybox is not busybox-static".to_string());
            }
            Ok(Assets {
                kernel,
                overlay,
                qemu,
                busybox,
            })
        })();
        match found {
            Ok(a) => Some(a),
            Err(why) => {
                let msg = format!("{test}: the VM cannot start: {why} (run scripts/vm-assets)");
                skip(&msg);
                None
            }
        }
    }
}

/// An initramfs being put together in a directory, written out as a newc cpio archive.
pub struct Initramfs {
    /// `root/`, the tree; the archive and the console's text beside it.
    dir: TempDir,
}

impl Initramfs {
    pub fn new(assets: &Assets) -> Initramfs {
        let fs = Initramfs {
            dir: TempDir::new(),
        };
        for d in ["etc", "proc", "sys", "dev", "tmp", "newroot", "lib/modules"] {
            std::fs::create_dir_all(fs.file(d)).unwrap();
        }
        fs.copy(&assets.busybox, Path::new("/bin/busybox"), false);
        fs.copy(&assets.overlay, Path::new("/lib/modules/overlay.ko"), false);
        fs
    }

    /// A path inside the tree being put together.
    pub fn file(&self, rel: &str) -> PathBuf {
        self.dir.file("root").join(rel)
    }

    /// A file at `dest` inside; `strip`ped of debug information when asked (a debug build's
    /// binaries are mostly that).
    pub fn copy(&self, src: &Path, dest: &Path, strip: bool) {
        let to = self.file(dest.strip_prefix("/").unwrap().to_str().unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let stripped = strip
            && Command::new("strip")
                .arg("--strip-debug")
                .arg("-o")
                .arg(&to)
                .arg(src)
                .status()
                .is_ok_and(|s| s.success());
        if !stripped {
            std::fs::copy(src, &to).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        }
    }

    /// A binary at its host path, with the shared libraries it loads.
    pub fn binary(&self, path: &Path) {
        self.copy(path, path, true);
        let out = Command::new("ldd").arg(path).output().unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux… (0x…)"
            let lib = line
                .split("=>")
                .last()
                .and_then(|r| r.split_whitespace().next())
                .filter(|l| l.starts_with('/'));
            if let Some(lib) = lib {
                let lib = Path::new(lib);
                let inside = self.file(lib.strip_prefix("/").unwrap().to_str().unwrap());
                if !inside.exists() {
                    self.copy(&std::fs::canonicalize(lib).unwrap(), lib, false);
                }
            }
        }
    }

    /// This test binary, the binaries under test (also a `PODVISOR_BIN`), and the script at
    /// `dest` that runs the guest tests: `script` with `@START@`, `@WATCH@`, `@TESTS@` (this
    /// binary's path) and `@BIN@` (the `PODVISOR_BIN=…` to pass on, if any) filled in.
    pub fn tests(&self, dest: &str, script: &str) {
        let me = std::env::current_exe().unwrap();
        self.binary(&me);
        self.binary(&podvisor());
        self.binary(&testbin());
        let bin = match std::env::var_os("PODVISOR_BIN") {
            Some(b) => format!("PODVISOR_BIN={}", Path::new(&b).display()),
            None => String::new(),
        };
        let watch = WATCH.replace("@STUCK@", &STUCK_SECS.to_string());
        let script = script
            .replace("@START@", START)
            .replace("@WATCH@", &watch)
            .replace("@TESTS@", me.to_str().unwrap())
            .replace("@BIN@", &bin);
        self.write(dest, &script, 0o755);
    }

    pub fn write(&self, dest: &str, text: &str, mode: u32) {
        let to = self.file(dest.strip_prefix('/').unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(&to, text).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// The archive (newc, uncompressed: qemu hands it to the kernel as it is): the files of
    /// `base` first when given (a root filesystem; what is put together here wins), then the
    /// files put together here.
    pub fn archive(&self, base: Option<&Path>) -> PathBuf {
        let out = self.dir.file("initramfs.cpio");
        let mut w = std::io::BufWriter::new(std::fs::File::create(&out).unwrap());
        let mut ino = 1;
        let own = self.file("");
        for dir in base.into_iter().chain([own.as_path()]) {
            let mut entries = Vec::new();
            collect(dir, Path::new(""), &mut entries);
            entries.sort();
            for rel in entries {
                let path = dir.join(&rel);
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let data = if meta.file_type().is_symlink() {
                    std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes()
                } else if meta.is_file() {
                    std::fs::read(&path).unwrap()
                } else if meta.is_dir() {
                    Vec::new()
                } else {
                    // Device nodes, sockets, fifos: the guest's devtmpfs has what it needs.
                    continue;
                };
                // The base's merged-/usr links (bin -> usr/bin) stay links: what goes below
                // them goes where they point (the kernel would replace a link by a directory).
                let name = match base {
                    Some(b) if dir != b => through_links(b, &rel),
                    _ => rel.clone(),
                };
                let header = cpio_header(ino, name.to_str().unwrap(), &meta, data.len());
                w.write_all(&header).unwrap();
                w.write_all(&data).unwrap();
                w.write_all(&vec![0; (4 - data.len() % 4) % 4]).unwrap();
                ino += 1;
            }
        }
        let trailer = cpio_fields(0, "TRAILER!!!", [0; 3], 0);
        w.write_all(&trailer).unwrap();
        w.flush().unwrap();
        out
    }
}

/// `rel` with its first component replaced by where it links to in `base`, if it is a
/// relative link there.
fn through_links(base: &Path, rel: &Path) -> PathBuf {
    let mut parts = rel.components();
    let Some(first) = parts.next() else {
        return rel.to_path_buf();
    };
    match std::fs::read_link(base.join(first)) {
        Ok(target) if target.is_relative() => target.join(parts.as_path()),
        _ => rel.to_path_buf(),
    }
}

fn collect(base: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(base.join(rel)).unwrap().flatten() {
        let r = rel.join(e.file_name());
        out.push(r.clone());
        if e.file_type().unwrap().is_dir() && r != Path::new("dev") {
            collect(base, &r, out);
        }
    }
}

/// The header of one entry of a newc ("070701") archive, with its name, padded to 4 bytes.
fn cpio_header(ino: u32, name: &str, meta: &std::fs::Metadata, size: usize) -> Vec<u8> {
    cpio_fields(ino, name, [meta.mode(), meta.uid(), meta.gid()], size)
}

fn cpio_fields(ino: u32, name: &str, [mode, uid, gid]: [u32; 3], size: usize) -> Vec<u8> {
    let fields = [
        ino,
        mode,
        uid,
        gid,
        1,
        0,
        size as u32,
        0,
        0,
        0,
        0,
        name.len() as u32 + 1,
        0,
    ];
    let mut header = String::from("070701");
    for f in fields {
        header.push_str(&format!("{f:08X}"));
    }
    let mut bytes = header.into_bytes();
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(0);
    bytes.resize(bytes.len() + (4 - bytes.len() % 4) % 4, 0);
    bytes
}

/// The first stage: onto a tmpfs, then `@NEXT@` there as PID 1.
pub(crate) const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mount -t tmpfs -o mode=755 root /newroot
for d in /*; do
    case "$d" in /newroot|/proc|/sys|/dev|/init) ;; *) /bin/busybox cp -a "$d" /newroot/ ;; esac
done
/bin/busybox mkdir -p /newroot/proc /newroot/sys /newroot/dev
exec /bin/busybox switch_root /newroot @NEXT@
"#;

/// How the busybox guests' scripts begin (`@START@`): busybox's commands, /proc, /sys, /dev.
const START: &str = "export PATH=/usr/bin:/bin:/sbin HOME=/tmp
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev";

/// What the guests' scripts share (`@WATCH@`): a heartbeat on the console (`VM-ALIVE` and the
/// guest's uptime every 20 s, which tells a guest that is slow from one that is frozen), and
/// `watched NAME CMD...`, which runs one scenario's tests: past `STUCK_SECS`, every process's
/// state, command and kernel stacks go to the console under `VM-STUCK NAME`, then the blocked
/// tasks the kernel knows of, and the tests are killed, so that a hang in a scenario is a
/// failure that says where each process was, not a VM that never powers off.
const WATCH: &str = r#"
( while :; do sleep 20; echo "VM-ALIVE $(cut -d' ' -f1 /proc/uptime)"; done ) &
stuck() {
    echo "VM-STUCK $1: what each process was doing after @STUCK@ s"
    for d in /proc/[0-9]*; do
        cmd=$(tr '\0' ' ' < $d/cmdline 2>/dev/null | cut -c1-160)
        [ -n "$cmd" ] || continue
        echo "== ${d#/proc/} $(cut -d' ' -f3-5 $d/stat 2>/dev/null) $cmd"
        for t in $d/task/*; do
            echo "-- ${t##*/} $(cat $t/wchan 2>/dev/null)"
            cat $t/stack 2>/dev/null
        done
    done
    echo w > /proc/sysrq-trigger
    dmesg | tail -n 150
    echo "VM-STUCK-END $1"
}
watched() {
    name=$1
    shift
    "$@" &
    pid=$!
    (
        i=0
        while kill -0 $pid 2>/dev/null; do
            if [ $i -ge @STUCK@ ]; then
                stuck $name
                for c in $(grep -l "^PPid:[[:space:]]*$pid\$" /proc/[0-9]*/status); do
                    c=${c#/proc/}
                    kill -KILL ${c%/status}
                done
                kill -KILL $pid
                exit
            fi
            sleep 1
            i=$((i + 1))
        done
    ) &
    wait $pid
}
"#;

/// How long one scenario's tests may run in a guest before `watched` calls them stuck.
const STUCK_SECS: u32 = 240;

/// Boots `initramfs` and returns the serial console's text once the VM has powered off. The
/// console is written as it comes to `target/vm/NAME-console.txt`, to be read during a run
/// and after it.
///
/// Two ends are the emulated machine's (TCG on a loaded host), not a result, and boot the VM
/// once more, keeping the first console as `NAME-retried-console.txt`: a soft lockup (the
/// guest's kernel panics on one, `softlockup_panic=1`, printing the stuck task's stack, which
/// a panic's messages pass `loglevel=1`, and the VM ends at once), and a guest that stopped
/// beating (no `VM-ALIVE` for `FROZEN`: its CPUs no longer run at all). A second such end
/// fails the test, as does a scenario the guest itself calls stuck (`VM-STUCK`, with every
/// process's kernel stack) or a VM still running at `limit`.
pub fn boot(
    assets: &Assets,
    name: &str,
    initramfs: &Path,
    memory_mib: u32,
    limit: Duration,
) -> String {
    let first = match boot_once(assets, name, initramfs, memory_mib, limit) {
        Boot::PoweredOff(text) if !text.contains("soft lockup") => return text,
        Boot::PoweredOff(text) | Boot::Frozen(text) => text,
    };
    let kept = assets_dir().join(format!("{name}-retried-console.txt"));
    let _ = std::fs::write(&kept, &first);
    eprintln!(
        "{name}: the guest locked up or froze ({}); booting the VM once more",
        kept.display()
    );
    match boot_once(assets, name, initramfs, memory_mib, limit) {
        Boot::PoweredOff(text) if !text.contains("soft lockup") => text,
        Boot::PoweredOff(text) => panic!("the guest's kernel locked up twice:\n{text}"),
        Boot::Frozen(text) => panic!("the guest froze twice:\n{text}"),
    }
}

/// How long a guest that has beaten once may go without a `VM-ALIVE` line before it counts as
/// frozen (it beats every 20 s; a loaded host slows it, not that much).
const FROZEN: Duration = Duration::from_secs(150);

enum Boot {
    PoweredOff(String),
    Frozen(String),
}

fn boot_once(
    assets: &Assets,
    name: &str,
    initramfs: &Path,
    memory_mib: u32,
    limit: Duration,
) -> Boot {
    let console = assets_dir().join(format!("{name}-console.txt"));
    eprintln!("{name}: the VM's console is {}", console.display());
    let mut qemu = Command::new(&assets.qemu)
        .args(["-machine", "q35", "-accel", "tcg", "-smp", "2"])
        .args(["-m", &memory_mib.to_string()])
        .args(["-display", "none", "-no-reboot", "-monitor", "none"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-kernel")
        .arg(&assets.kernel)
        .arg("-initrd")
        .arg(initramfs)
        // `trace_event`: the tracepoint `as_root_a_container_is_born_in_its_cgroup` reads is on
        // from boot, so that no test patches the running kernel's code to turn it on.
        .args([
            "-append",
            "console=ttyS0 panic=-1 loglevel=1 rdinit=/init swapaccount=1 softlockup_panic=1 \
             trace_event=cgroup:cgroup_attach_task",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("qemu-system-x86_64");
    let deadline = Instant::now() + limit;
    let mut beats = 0;
    let mut last_beat = Instant::now();
    let mut frozen = false;
    let finished = loop {
        if let Some(status) = qemu.try_wait().unwrap() {
            break Some(status);
        }
        let now = Instant::now();
        let seen = (std::fs::read_to_string(&console).unwrap_or_default())
            .matches("VM-ALIVE")
            .count();
        if seen > beats {
            beats = seen;
            last_beat = now;
        }
        frozen = beats > 0 && now.duration_since(last_beat) > FROZEN;
        if now > deadline || frozen {
            let _ = qemu.kill();
            let _ = qemu.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let text = std::fs::read_to_string(&console).unwrap_or_default();
    if frozen {
        return Boot::Frozen(text);
    }
    match finished {
        Some(status) => assert!(status.success(), "qemu: {status}\n{text}"),
        None => panic!("the VM did not power off within {limit:?}:\n{text}"),
    }
    Boot::PoweredOff(text)
}

/// The exit code each scenario reported (`VM-RESULT name code`), in order.
pub fn results(console: &str) -> Vec<(String, i32)> {
    console
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("VM-RESULT ")?;
            let (name, code) = rest.split_once(' ')?;
            Some((name.to_string(), code.trim().parse().ok()?))
        })
        .collect()
}

/// The initramfs for the cgroup v2 tests: the tree as a systemd host lays it out, then this
/// binary's `guest_v2` tests run from each place.
fn cgroup_v2_initramfs(assets: &Assets) -> Initramfs {
    let fs = Initramfs::new(assets);
    fs.write("/init", &INIT.replace("@NEXT@", "/stage2"), 0o755);
    fs.write(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/tmp:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
        0o644,
    );
    fs.write(
        "/etc/group",
        "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
        0o644,
    );
    // util-linux's, which can set the real uid (busybox's cannot).
    fs.binary(Path::new("/usr/bin/setpriv"));
    fs.tests("/stage2", STAGE2);
    fs
}

/// The second stage of the cgroup v2 VM. The layout is systemd's: controllers enabled down to
/// the slices, a login shell in `user.slice/session-1.scope`, a service in
/// `system.slice/X.service`, the user's manager delegated as `user@1000.service`.
const STAGE2: &str = r#"#!/bin/busybox sh
@START@
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
# The root is a tmpfs already; /tmp keeps what the host had there (a PODVISOR_BIN).
chmod 1777 /tmp
insmod /lib/modules/overlay.ko
ip link set lo up
echo "VM-KERNEL $(uname -r) $(cat /sys/fs/cgroup/cgroup.controllers)"
@WATCH@
cg=/sys/fs/cgroup
echo "+cpu +memory +pids" > $cg/cgroup.subtree_control
mkdir $cg/user.slice $cg/system.slice
echo "+cpu +memory +pids" > $cg/user.slice/cgroup.subtree_control
echo "+cpu +memory +pids" > $cg/system.slice/cgroup.subtree_control
for u in 1000 1001 1002 1003 1004; do
    mkdir $cg/user.slice/user-$u.slice
    [ $u = 1001 ] || echo "+cpu +memory +pids" > $cg/user.slice/user-$u.slice/cgroup.subtree_control
done
# user 1001's slice offers no memory controller to the tree delegated to it.
echo "+cpu +pids" > $cg/user.slice/user-1001.slice/cgroup.subtree_control
mkdir $cg/user.slice/session-1.scope $cg/system.slice/podvisor-test.service
# A delegation as systemd makes it (Delegate=yes): the directory and the files that move
# processes and enable controllers belong to the user; podvisor is started in a leaf of it.
delegate() {
    mkdir -p $1 $1/session.scope
    chown $2:$2 $1 $1/cgroup.procs $1/cgroup.subtree_control $1/cgroup.threads
    chown -R $2:$2 $1/session.scope
}
delegate $cg/user.slice/user-1000.slice/user@1000.service 1000
delegate $cg/user.slice/user-1001.slice/user@1001.service 1001
delegate $cg/user.slice/user-1003.slice/user@1003.service 1003
delegate $cg/user.slice/user-1004.slice/user@1004.service 1004
mkdir $cg/user.slice/user-1002.slice/session-2.scope

tests="@TESTS@"
# run NAME CGROUP UID FILTER [ENV...]: the tests matching FILTER, started from CGROUP as UID.
run() {
    name=$1 dir=$2 uid=$3 filter=$4
    shift 4
    echo "VM-SCENARIO $name at $(cut -d' ' -f1 /proc/uptime) s"
    watched $name sh -c "echo \$\$ > $dir/cgroup.procs && exec /usr/bin/setpriv --reuid=$uid --regid=$uid --clear-groups env @BIN@ PODVISOR_VM_SCENARIO=$name PODVISOR_VM_START=$dir $* $tests --color never --ignored --test-threads=1 $filter" </dev/null 2>&1
    echo "VM-RESULT $name $?"
}
run session $cg/user.slice/session-1.scope 0 guest_v2::placement:: PODVISOR_VM_TOP=$cg
run service $cg/system.slice/podvisor-test.service 0 guest_v2::placement:: PODVISOR_VM_TOP=$cg
run root $cg 0 guest_v2::placement:: PODVISOR_VM_TOP=$cg
run rootless $cg/user.slice/user-1000.slice/user@1000.service/session.scope 1000 guest_v2::placement:: PODVISOR_VM_TOP=$cg/user.slice/user-1000.slice/user@1000.service
run rootless-top $cg/user.slice/user-1004.slice/user@1004.service/session.scope 1004 guest_v2::rootless_top:: PODVISOR_VM_TOP=$cg/user.slice/user-1004.slice/user@1004.service
run no-memory-controller $cg/user.slice/user-1001.slice/user@1001.service/session.scope 1001 guest_v2::errors::controller_missing
run not-delegated $cg/user.slice/user-1002.slice/session-2.scope 1002 guest_v2::errors::not_delegated
run busy $cg/user.slice/user-1003.slice/user@1003.service 1003 guest_v2::errors::busy
run read-only $cg/user.slice/session-1.scope 0 guest_v2::errors::read_only
echo "VM-LEFT $(find $cg -name 'podvisor*' | tr '\n' ' ')"
echo VM-DONE
poweroff -f
"#;

/// Every scenario's `guest_v2` tests pass in the VM, on cgroup v2 laid out as systemd does.
#[test]
fn cgroup_v2_in_a_vm() {
    let Some(assets) = Assets::find("cgroup_v2_in_a_vm") else {
        return;
    };
    let fs = cgroup_v2_initramfs(&assets);
    let archive = fs.archive(None);
    // What podvisor moves itself into may stay (empty); no pod cgroup or parent does.
    run_vm(
        &assets,
        "cgroup-v2",
        &archive,
        1536,
        &[
            "session",
            "service",
            "root",
            "rootless",
            "rootless-top",
            "no-memory-controller",
            "not-delegated",
            "busy",
            "read-only",
        ],
        |p| p.ends_with("/podvisor-supervisor") || p.contains("podvisor-test.service"),
    );
}

/// Boots the VM and checks what it reported: each scenario in `scenarios`, in order, exited
/// 0 having run at least one test (a filter that matched nothing would pass silently), and
/// no cgroup the run made is left (`VM-LEFT`) but those `may_stay`.
pub(crate) fn run_vm(
    assets: &Assets,
    name: &str,
    archive: &Path,
    memory_mib: u32,
    scenarios: &[&str],
    may_stay: impl Fn(&str) -> bool,
) {
    let started = Instant::now();
    let console = boot(assets, name, archive, memory_mib, Duration::from_secs(600));
    eprintln!(
        "the {name} VM ran for {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let results = results(&console);
    let names: Vec<&str> = results.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, scenarios, "{console}");
    assert!(
        results.iter().all(|(_, code)| *code == 0),
        "{results:?}\n{console}"
    );
    let ran = console
        .lines()
        .filter(|l| l.starts_with("test result: ok.") && !l.contains(" 0 passed"))
        .count();
    assert_eq!(ran, results.len(), "{console}");
    let left = console
        .lines()
        .find_map(|l| l.strip_prefix("VM-LEFT"))
        .unwrap_or_else(|| panic!("{console}"));
    let left: Vec<&str> = left.split_whitespace().filter(|p| !may_stay(p)).collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{console}");
}

/// The Debian root filesystem that boots systemd, made by `scripts/vm-assets`.
fn systemd_root(test: &str) -> Option<PathBuf> {
    let root = assets_dir().join("systemd-root");
    if root.join("etc/os-release").is_file() {
        return Some(root);
    }
    let msg = format!(
        "{test}: no systemd root filesystem in {} (run scripts/vm-assets as root)",
        root.display()
    );
    skip(&msg);
    None
}

/// What the systemd VM runs once it has booted: from this unit's own cgroup (a service), as
/// root through the system manager, then as user 1000 through that user's manager, which
/// logind starts for a lingering user; then it powers off.
const SYSTEMD_UNIT: &str = "[Unit]
Description=podvisor's VM tests
After=systemd-logind.service dbus.service systemd-user-sessions.service
[Service]
Type=oneshot
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
ExecStart=/podvisor-vmtest
[Install]
WantedBy=multi-user.target
";

const SYSTEMD_SCRIPT: &str = r#"#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
echo "VM-KERNEL $(uname -r) $(systemctl --version | head -n 1)"
@WATCH@
chmod 1777 /tmp
/bin/busybox insmod /lib/modules/overlay.ko
useradd -m -u 1000 user
loginctl enable-linger user
i=0
while ! [ -S /run/user/1000/bus ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
tests="@TESTS@"
here=/sys/fs/cgroup/system.slice/podvisor-vmtest.service
run() {
    name=$1 uid=$2
    shift 2
    echo "VM-SCENARIO $name at $(cut -d' ' -f1 /proc/uptime) s"
    watched $name setpriv --reuid=$uid --regid=$uid --clear-groups env @BIN@ PODVISOR_VM_SCENARIO=$name PODVISOR_VM_START=$here "$@" </dev/null 2>&1
    echo "VM-RESULT $name $?"
}
run systemd-root 0 PODVISOR_VM_SLICE=/sys/fs/cgroup/podvisor.slice $tests --color never --ignored --test-threads=1 guest_v2::systemd:: guest_v2::placement::a_memory_hog
run systemd-rootless 1000 XDG_RUNTIME_DIR=/run/user/1000 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1000/bus PODVISOR_VM_SLICE=/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/podvisor.slice $tests --color never --ignored --test-threads=1 guest_v2::systemd::a_ guest_v2::placement::a_memory_hog
# podvisor.slice is systemd's (a slice unit, as kubepods.slice): what podvisor makes is in it.
echo "VM-LEFT $(find /sys/fs/cgroup \( -name 'podvisor-*' -o -name podvisor \) | grep -v -e podvisor-vmtest.service | tr '\n' ' ')"
echo VM-DONE
systemctl poweroff -ff
"#;

/// The systemd driver in a VM that boots systemd (Debian 12's), as root and rootless.
#[test]
fn systemd_driver_in_a_vm() {
    let Some(assets) = Assets::find("systemd_driver_in_a_vm") else {
        return;
    };
    let Some(root) = systemd_root("systemd_driver_in_a_vm") else {
        return;
    };
    let fs = Initramfs::new(&assets);
    fs.write("/init", &INIT.replace("@NEXT@", "/sbin/init"), 0o755);
    fs.tests("/podvisor-vmtest", SYSTEMD_SCRIPT);
    fs.write(
        "/etc/systemd/system/podvisor-vmtest.service",
        SYSTEMD_UNIT,
        0o644,
    );
    let wants = fs.file("etc/systemd/system/multi-user.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink(
        "/etc/systemd/system/podvisor-vmtest.service",
        wants.join("podvisor-vmtest.service"),
    )
    .unwrap();
    // The controllers a user's manager delegates, as podman's rootless docs set them.
    fs.write(
        "/etc/systemd/system/user@.service.d/delegate.conf",
        "[Service]\nDelegate=cpu cpuset io memory pids\n",
        0o644,
    );
    fs.write("/etc/hostname", "podvisor-vm\n", 0o644);
    // No udev in this root: no device unit would ever come up for a getty to wait on; and no
    // progress lines on the console the results are read from.
    for unit in ["serial-getty@ttyS0.service", "getty.target"] {
        std::os::unix::fs::symlink("/dev/null", fs.file("etc/systemd/system").join(unit)).unwrap();
    }
    // The binaries under test may live under /tmp (a clone's target/): systemd-tmpfiles
    // empties /tmp at boot unless told otherwise.
    fs.write(
        "/etc/tmpfiles.d/tmp.conf",
        "d /tmp 1777 root root -\n",
        0o644,
    );
    fs.write(
        "/etc/systemd/system.conf.d/quiet.conf",
        "[Manager]\nShowStatus=no\n",
        0o644,
    );
    let archive = fs.archive(Some(&root));
    run_vm(
        &assets,
        "systemd",
        &archive,
        2048,
        &["systemd-root", "systemd-rootless"],
        |_| false,
    );
}
