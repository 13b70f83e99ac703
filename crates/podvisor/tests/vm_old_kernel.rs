//! A VM with an older kernel than this host's: Debian 11's (Linux 5.10), whose overlay will
//! not mount in a user namespace, so that an image without root runs on fuse-overlayfs
//! (`images::fuse::on_linux_5_10`, run in it as an ordinary user). The kernel, its overlay
//! and fuse modules come from `scripts/vm-assets` (target/vm/linux-5.10/); the guest is an
//! initramfs as `vm`'s, with the host's fuse-overlayfs and the libraries it loads.

use std::path::Path;

use crate::harness::*;
use crate::vm::{run_vm, Assets, Initramfs, INIT};

/// The guest's script: the modules loaded, the test run as uid 1000.
const STAGE2: &str = r#"#!/bin/busybox sh
@START@
chmod 1777 /tmp
insmod /lib/modules/overlay.ko
insmod /lib/modules/fuse.ko
# What udev does on a distribution: /dev/fuse open to every user.
chmod 0666 /dev/fuse
ip link set lo up
echo "VM-KERNEL $(uname -r) /dev/fuse $(stat -c %a /dev/fuse)"
@WATCH@
echo "VM-SCENARIO fuse at $(cut -d' ' -f1 /proc/uptime) s"
watched fuse sh -c "exec /usr/bin/setpriv --reuid=1000 --regid=1000 --clear-groups env @BIN@ PODVISOR_VM_SCENARIO=fuse @TESTS@ --color never --ignored --test-threads=1 images::fuse::on_linux_5_10_the_layers" </dev/null 2>&1
echo "VM-RESULT fuse $?"
echo "VM-LEFT $(grep -l '^/usr/bin/fuse-overlayfs' /proc/[0-9]*/cmdline 2>/dev/null | tr '\n' ' ')"
echo VM-DONE
poweroff -f
"#;

/// Without root on Linux 5.10, an image's layers are mounted by fuse-overlayfs, as a user of
/// an older distribution gets them.
#[test]
fn an_image_without_root_on_linux_5_10_runs_on_fuse_overlayfs_in_a_vm() {
    let Some(mut assets) = Assets::find("an_image_without_root_on_linux_5_10") else {
        return;
    };
    let old = assets.kernel.with_file_name("linux-5.10");
    let fuse = old.join("fuse.ko");
    let Some(fuse_overlayfs) = which("fuse-overlayfs") else {
        skip("fuse-overlayfs is not installed (apt-get install fuse-overlayfs)");
        return;
    };
    if !fuse.is_file() {
        skip(&format!(
            "no Linux 5.10 in {} (run scripts/vm-assets)",
            old.display()
        ));
        return;
    }
    assets.kernel = old.join("vmlinuz");
    assets.overlay = old.join("overlay.ko");
    let fs = Initramfs::new(&assets);
    fs.write("/init", &INIT.replace("@NEXT@", "/stage2"), 0o755);
    fs.write(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/tmp:/bin/sh\n",
        0o644,
    );
    fs.write("/etc/group", "root:x:0:\nuser:x:1000:\n", 0o644);
    fs.copy(&fuse, Path::new("/lib/modules/fuse.ko"), false);
    fs.binary(Path::new("/usr/bin/setpriv"));
    fs.binary(&fuse_overlayfs);
    fs.tests("/stage2", STAGE2);
    let archive = fs.archive(None);
    // No fuse-overlayfs daemon may be left (VM-LEFT lists them).
    run_vm(&assets, "linux-5.10", &archive, 1024, &["fuse"], |_| false);
}
