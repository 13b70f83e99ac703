//! A privileged container's /dev through the binary: a /dev of its own holding every device of
//! the host's (as containerd lists them, made as runc makes them: the host's type, numbers,
//! mode and owner), with its own /dev/shm, /dev/pts and /dev/mqueue (what it writes in
//! /dev/shm is not on the host) and the kubelet's termination file bound in it; and the device
//! cgroup: what a container that is not privileged may open of the nodes it makes, beside the
//! Docker engine here (which cannot run a privileged container on this machine's kernel).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use serde_json::Value;

use crate::harness::*;

/// runc's own devices, in every container's /dev.
const RUNC_DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Each of the host's devices a privileged container gets, as `stat -c "%n %f %u %g %t:%T"`
/// prints it: its path, raw mode, owner, group and numbers (hex).
fn host_devices(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().unwrap();
        let skip_dir = ["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];
        if kind.is_dir() && !skip_dir.contains(&name.as_str()) {
            host_devices(&entry.path(), out);
        }
        let top_level_ptmx = dir == Path::new("/dev") && name == "ptmx";
        if !(kind.is_char_device() || kind.is_block_device()) || name == "console" || top_level_ptmx
        {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        out.push(format!(
            "{} {:x} {} {} {:x}:{:x}",
            entry.path().display(),
            m.mode(),
            m.uid(),
            m.gid(),
            libc::major(m.rdev()),
            libc::minor(m.rdev())
        ));
    }
}

#[test]
fn a_privileged_container_gets_the_hosts_devices_in_a_dev_of_its_own() {
    if !is_root() {
        skip("a private root's /dev is made as root");
        return;
    }
    let shm = Path::new("/dev/shm/pvtest-privileged-shm");
    let script = "find /dev -mindepth 1 \\( -path /dev/pts -o -path /dev/shm -o -path /dev/mqueue \\) -prune -o \\( -type c -o -type b \\) -exec stat -c \"%n %f %u %g %t:%T\" {} +; echo ---; ls /dev | tr \"\\n\" \" \"; echo; echo mine > /dev/shm/pvtest-privileged-shm; grep -c \" /dev/pts .* devpts .*ptmxmode=0*666\" /proc/self/mountinfo; echo \"privileged and told\" > /dev/termination-log";
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: app\n    command: [sh, -c, '{}']\n    securityContext: {{privileged: true}}\n",
        script.replace('\'', "''")
    );
    let r = PodRun::new(&manifest);
    let out = r.cmd(&[]).output();
    let on_host = shm.exists();
    let _ = std::fs::remove_file(shm);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        !on_host,
        "what the container wrote in its /dev/shm is on the host's"
    );
    let lines = r.log_lines("app", 1);
    let split = lines.iter().position(|l| l == "---").unwrap();
    let theirs = &lines[..split];
    let mut host = Vec::new();
    host_devices(Path::new("/dev"), &mut host);
    assert!(host.len() > RUNC_DEVICES.len(), "{host:?}");
    for device in &host {
        assert!(theirs.contains(device), "missing {device}: {theirs:#?}");
    }
    for device in theirs {
        let name = device
            .split(' ')
            .next()
            .unwrap()
            .trim_start_matches("/dev/");
        assert!(
            host.contains(device) || RUNC_DEVICES.contains(&name),
            "not the host's: {device}"
        );
    }
    let names: Vec<&str> = lines[split + 1].split_whitespace().collect();
    for name in ["mqueue", "pts", "ptmx", "shm", "termination-log"] {
        assert!(names.contains(&name), "{name}: {names:?}");
    }
    // Its own devpts (the host's has ptmxmode=000 here), and the kubelet's file bound.
    assert_eq!(lines[split + 2], "1", "{lines:#?}");
    let status = client(&r, &["status", "-o", "json"]);
    let pod: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"],
        "privileged and told\n"
    );
}

/// A container that is not privileged may make any device node but open only runc's devices
/// (its device cgroup, as runc writes it); a privileged one may open every device. As under
/// the Docker engine here.
#[test]
fn only_a_privileged_container_may_open_a_device_it_makes() {
    if !is_root() {
        skip("device nodes are made as root");
        return;
    }
    if !Path::new("/dev/loop-control").exists() {
        skip("this host has no /dev/loop-control to try");
        return;
    }
    // loop-control (10:237): a device runc's rules leave out, which root may open here.
    let script = "mknod /made c 10 237 && echo made; (exec 3<>/made) 2>/dev/null && echo opened || echo refused; (exec 3<>/dev/null) && echo null";
    let manifest = |sc: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: app\n    command: [sh, -c, '{script}']\n{sc}"
        )
    };
    for (sc, want) in [
        ("", "made refused null"),
        (
            "    securityContext: {privileged: true}\n",
            "made opened null",
        ),
    ] {
        for extra in [&[][..], &["--live-restore"][..]] {
            let r = PodRun::new(&manifest(sc));
            let out = r.cmd(extra).output();
            assert_eq!(out.code(), 0, "{sc} {extra:?}: {out:?}");
            assert_eq!(r.log_lines("app", 1).join(" "), want, "{sc} {extra:?}");
        }
    }
    if let Err(why) = crate::docker::engine() {
        skip(&why);
        return;
    }
    let image = crate::security::BusyboxImage::build();
    let docker = Run::new("docker")
        .args(["run", "--rm", image.tag.as_str(), "sh", "-c", script])
        .output();
    assert_eq!(docker.code(), 0, "{docker:?}");
    assert_eq!(docker.stdout.replace('\n', " ").trim(), "made refused null");
}

/// A container a keeper kept from a podvisor that gave containers no device cgroup (v1: its
/// instance has no directory in the devices hierarchy) is taken over all the same.
#[test]
fn a_container_started_without_a_device_cgroup_is_taken_over() {
    if !is_root() {
        skip("the devices hierarchy is root's");
        return;
    }
    let r = PodRun::new(&crate::harness::pod(
        "Always",
        "  containers:\n  - name: app\n    command: [sleep, '600']\n",
    ));
    let mut first = r.cmd(&["--live-restore"]).start();
    let mut pid = None;
    wait_until("the container runs", || {
        pid = crate::resources::container_pid(&r, 0);
        pid.is_some()
    });
    let pid = pid.unwrap();
    let Some(instance) = crate::resources::cgroup_dir(pid, "devices") else {
        first.signal("KILL");
        first.wait();
        let _ = client(&r, &["delete", "--force"]);
        skip("this host has no v1 devices hierarchy");
        return;
    };
    first.signal("KILL");
    first.wait();
    // As an older podvisor left it: the container in its pod's devices cgroup.
    let pod_dir = instance.parent().unwrap();
    std::fs::write(pod_dir.join("cgroup.procs"), pid.to_string()).unwrap();
    std::fs::remove_dir(&instance).unwrap();
    let mut second = r.cmd(&["--live-restore"]).start();
    wait_until("app adopted", || {
        r.events().iter().any(|e| e["reason"] == "Adopted")
    });
    assert_eq!(crate::resources::container_pid(&r, 0), Some(pid));
    // With its cgroups (its usage is read from them).
    crate::resources::assert_usage(&crate::resources::status(&r), "app");
    assert_eq!(client(&r, &["stop"]).code(), 0);
    assert_eq!(second.wait().code(), Some(0));
    second.drain();
    assert!(
        !second.stderr.iter().any(|l| l.contains("cgroup")),
        "{:?}",
        second.stderr
    );
    first.assert_no_leftovers();
}
