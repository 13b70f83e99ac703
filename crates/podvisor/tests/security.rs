//! The securityContext through the binary, as root: each field read back from inside the
//! container (`/proc/self/status`: Uid, Gid, Groups, the capability sets, NoNewPrivs,
//! Seccomp), a system call the runtime's default profile refuses, `runAsNonRoot` refused with
//! the kubelet's words, exec probes that run as the container does, fsGroup on volumes, the
//! API server's errors in `validate`, and the same settings under the Docker engine beside
//! podvisor's.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::harness::*;
use crate::probes::pod_with;

/// The lines of `/proc/self/status` the tests compare.
const STATUS_LINES: &str =
    "^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):";

/// A one-container pod (`restartPolicy: Never`) whose container prints its status lines, then
/// runs `then`; `pod_sc` and `sc` are the pod's and the container's securityContext (flow
/// YAML, or empty).
fn status_pod(pod_sc: &str, sc: &str, then: &str) -> String {
    let pod_sc = if pod_sc.is_empty() {
        String::new()
    } else {
        format!("  securityContext: {pod_sc}\n")
    };
    let sc = if sc.is_empty() {
        String::new()
    } else {
        format!("    securityContext: {sc}\n")
    };
    let spec = format!(
        "{pod_sc}  containers:\n  - name: app\n    command: [sh, -c, 'grep -E \"{STATUS_LINES}\" /proc/self/status; {then}']\n{sc}"
    );
    pod_with("Never", 1, &spec)
}

/// Runs `pod` to its end (with `extra` flags) and returns app's output lines.
fn run_to_end(pod: &str, extra: &[&str]) -> (PodRun, Vec<String>) {
    let r = PodRun::new(pod);
    let out = r.cmd(extra).output();
    assert_eq!(out.code(), 0, "{out:?}");
    let lines = r.log_lines("app", 1);
    (r, lines)
}

/// `/proc/self/status` lines as field → value (tabs folded to spaces).
fn fields(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
            Some((k.to_string(), v))
        })
        .collect()
}

#[test]
fn users_groups_capabilities_and_filters_are_the_manifests() {
    if !is_root() {
        skip("setting users and capabilities needs root");
        return;
    }
    let pod = status_pod(
        "{runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true, supplementalGroups: [2000], fsGroup: 3000}",
        "{capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}, allowPrivilegeEscalation: false, seccompProfile: {type: RuntimeDefault}}",
        "id -u",
    );
    let (r, lines) = run_to_end(&pod, &[]);
    let f = fields(&lines);
    assert_eq!(f["Uid"], "1000 1000 1000 1000", "{lines:?}");
    // The status says so, as CRI reports a container's user (KEP-3619): the primary group,
    // then fsGroup and supplementalGroups, in the order they are given.
    let s: Value = serde_json::from_str(&client(&r, &["status", "-o", "json"]).stdout).unwrap();
    assert_eq!(
        s["status"]["containerStatuses"][0]["user"],
        serde_json::json!({"linux": {"uid": 1000, "gid": 1000, "supplementalGroups": [1000, 3000, 2000]}})
    );
    assert_eq!(f["Gid"], "1000 1000 1000 1000");
    // The primary group, then fsGroup and supplementalGroups (the kernel sorts them).
    assert_eq!(f["Groups"], "1000 2000 3000");
    assert_eq!(f["CapBnd"], "0000000000000400", "NET_BIND_SERVICE alone");
    // A non-root program keeps no capability across its exec (it has no file capabilities).
    assert_eq!(f["CapEff"], "0000000000000000");
    assert_eq!(f["CapPrm"], "0000000000000000");
    assert_eq!(f["CapInh"], "0000000000000000");
    assert_eq!(f["CapAmb"], "0000000000000000");
    assert_eq!(f["NoNewPrivs"], "1");
    assert_eq!(f["Seccomp"], "2");
    assert_eq!(lines.last().map(String::as_str), Some("1000"));
}

#[test]
fn without_root_or_user_namespaces_a_container_runs_as_podvisors_user_and_its_status_says_so() {
    if !is_root() {
        skip("needs root to become nobody");
        return;
    }
    if !crate::rootfs::user_namespaces_for_nobody() {
        skip("this kernel gives nobody no user namespace");
        return;
    }
    // 33 user namespaces deep, each mapping nobody to itself: the kernel lets no process there
    // make another, so podvisor finds none to use, as on a host that gives its users none.
    let mut wrapper = vec![
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--groups=4242",
    ];
    for _ in 0..33 {
        wrapper.extend(["unshare", "--user", "--map-current-user"]);
    }
    let r = PodRun::new(&status_pod("", "", "true"));
    let open: std::fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    std::fs::set_permissions(r.dir.file(""), open.clone()).unwrap();
    let out = r.cmd_under(&wrapper, &[]).output();
    assert_eq!(out.code(), 0, "{out:?}");
    let f = fields(&r.log_lines("app", 1));
    let ids = |k: &str| -> Vec<u32> { (f[k].split(' ')).filter_map(|v| v.parse().ok()).collect() };
    let (uid, gid) = (ids("Uid")[0], ids("Gid")[0]);
    assert_eq!(ids("Uid"), [uid; 4], "{f:?}");
    assert_ne!(uid, 0, "{f:?}");
    assert_eq!(f["CapEff"], "0000000000000000");
    // The status names the user the process runs as, the primary group first, then what the
    // kernel shows of its others (4242, not mapped here, is the overflow group).
    let mut groups = vec![gid];
    groups.extend(ids("Groups").into_iter().filter(|g| *g != gid));
    let s: Value = serde_json::from_str(&client(&r, &["status", "-o", "json"]).stdout).unwrap();
    assert_eq!(
        s["status"]["containerStatuses"][0]["user"],
        serde_json::json!({"linux": {"uid": uid, "gid": gid, "supplementalGroups": groups}}),
        "{f:?}"
    );
    // Another user is refused before anything runs, naming the container and the field.
    let other = PodRun::new(&status_pod("{runAsUser: 0}", "", "true"));
    std::fs::set_permissions(other.dir.file(""), open).unwrap();
    let out = other.cmd_under(&wrapper, &[]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains(
            "container \"app\": securityContext.runAsUser needs another user, which podvisor cannot make here: podvisor runs as uid"
        ),
        "{out:?}"
    );
}

#[test]
fn a_root_container_gets_the_runtime_defaults_and_seccomp_default_refuses_keyctl() {
    if !is_root() {
        skip("capabilities need root");
        return;
    }
    let keyctl = format!("{} keyctl", testbin().display());
    let pod = status_pod("", "", &keyctl);
    let (_r, lines) = run_to_end(&pod, &[]);
    let f = fields(&lines);
    assert_eq!(f["Uid"], "0 0 0 0");
    // containerd's 14: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
    // NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
    for set in ["CapBnd", "CapEff", "CapPrm"] {
        assert_eq!(f[set], "00000000a80425fb", "{set}: {lines:?}");
    }
    assert_eq!(f["NoNewPrivs"], "0");
    // The kubelet gives no profile unless asked (--seccomp-default).
    assert_eq!(f["Seccomp"], "0");
    assert_ne!(lines.last().map(String::as_str), Some("errno 1"));
    let (_r, lines) = run_to_end(&pod, &["--seccomp-default"]);
    assert_eq!(fields(&lines)["Seccomp"], "2");
    assert_eq!(lines.last().map(String::as_str), Some("errno 1"), "EPERM");
    // Privileged: every capability podvisor holds (containerd gives its own: fewer than the
    // kernel knows on a restricted host), no filter, even with --seccomp-default.
    let pod = status_pod("", "{privileged: true}", "true");
    let (_r, lines) = run_to_end(&pod, &["--seccomp-default"]);
    let f = fields(&lines);
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let held = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    assert_eq!(f["CapEff"], held);
    assert_eq!(f["CapBnd"], held);
    assert_eq!(f["Seccomp"], "0");
}

#[test]
fn a_localhost_profile_is_loaded_from_the_profiles_directory() {
    if !is_root() {
        skip("seccomp profiles are tested as root");
        return;
    }
    let dir = TempDir::new();
    let profiles = dir.file("profiles");
    std::fs::create_dir_all(profiles.join("team")).unwrap();
    // Everything allowed but mkdir, which fails with EACCES (13).
    std::fs::write(
        profiles.join("team/no-mkdir.json"),
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}"#,
    )
    .unwrap();
    let pod = status_pod(
        "",
        "{seccompProfile: {type: Localhost, localhostProfile: team/no-mkdir.json}}",
        "mkdir /tmp/pv-seccomp-$$ 2>&1; echo mkdir=$?",
    );
    let root = profiles.display().to_string();
    let (_r, lines) = run_to_end(&pod, &["--seccomp-profile-root", &root]);
    assert_eq!(fields(&lines)["Seccomp"], "2");
    assert!(
        lines.iter().any(|l| l.contains("Permission denied")),
        "{lines:?}"
    );
    assert_eq!(lines.last().map(String::as_str), Some("mkdir=1"));
    // A profile that is not there refuses the run before anything starts.
    let pod = status_pod(
        "",
        "{seccompProfile: {type: Localhost, localhostProfile: team/missing.json}}",
        "true",
    );
    let r = PodRun::new(&pod);
    let out = r.cmd(&["--seccomp-profile-root", &root]).output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr
            .contains("container \"app\": securityContext.seccompProfile")
            && out.stderr.contains("team/missing.json"),
        "{}",
        out.stderr
    );
}

#[test]
fn run_as_non_root_with_a_root_user_is_a_config_error() {
    let spec =
        "  securityContext: {runAsNonRoot: true}\n  containers:\n  - {name: app, command: [id]}\n";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let mut p = r.cmd(&[]).start();
    let failed = r.wait_event("app", "Failed", 1);
    let message = failed[0]["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with(
            "Error: container has runAsNonRoot and image will run as root (pod: \"p_ns("
        ) && message.ends_with(")\", container: app)"),
        "{message}"
    );
    let s: Value = serde_json::from_str(&client(&r, &["status", "-o", "json"]).stdout).unwrap();
    let c = &s["status"]["containerStatuses"][0];
    assert_eq!(
        c["state"]["waiting"]["reason"], "CreateContainerConfigError",
        "{c}"
    );
    assert_eq!(c["restartCount"], 0);
    assert!(r.find("app", "Created").is_empty() && r.find("app", "Started").is_empty());
    assert_eq!(s["status"]["phase"], "Pending");
    // runAsUser: 0 breaks the policy too, in the kubelet's other words.
    let spec = "  securityContext: {runAsNonRoot: true, runAsUser: 0}\n  containers:\n  - {name: app, command: [id]}\n";
    let r2 = PodRun::new(&pod_with("Always", 1, spec));
    let mut p2 = r2.cmd(&[]).start();
    let failed = r2.wait_event("app", "Failed", 1);
    assert!(failed[0]["message"]
        .as_str()
        .unwrap()
        .starts_with("Error: container's runAsUser breaks non-root policy"));
    crate::probes::stop(&mut p);
    crate::probes::stop(&mut p2);
}

#[test]
fn exec_probes_run_as_the_container_does() {
    if !is_root() {
        skip("setting users needs root");
        return;
    }
    let spec = "  securityContext: {runAsUser: 1000, runAsGroup: 1000}
  containers:
  - name: app
    command: [sleep, '600']
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    readinessProbe:
      exec: {command: [sh, -c, '[ \"$(id -u):$(id -g)\" = 1000:1000 ] && grep -q \"^NoNewPrivs:.1\" /proc/self/status && grep -q \"^CapBnd:.0000000000000000\" /proc/self/status']}
      periodSeconds: 1
      timeoutSeconds: 5
";
    let r = PodRun::new(&pod_with("Always", 1, spec));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Ready", 1);
    // (A probe in flight when the stop kills the container may fail: checked before it.)
    assert!(r.find("app", "Unhealthy").is_empty());
    crate::probes::stop(&mut p);
}

#[test]
fn fs_group_owns_the_volumes_and_their_directories_are_setgid() {
    if !is_root() {
        skip("volumes need root");
        return;
    }
    let spec = "  securityContext: {runAsUser: 1000, fsGroup: 3000}
  containers:
  - name: app
    command: [sh, -c, 'stat -c \"%a %g %n\" /data /config /config/key; touch /data/made && stat -c \"%g %n\" /data/made']
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: config, mountPath: /config}
  volumes:
  - {name: data, emptyDir: {}}
  - {name: config, configMap: {name: settings}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ns}
data: {key: value}
";
    let (_r, lines) = run_to_end(&pod_with("Never", 1, spec), &[]);
    assert_eq!(
        lines,
        [
            "2777 3000 /data",
            "2755 3000 /config",
            "644 3000 /config/key",
            "3000 /data/made"
        ],
        "emptyDir 0777 + setgid; configMap read-only (g+r), setgid"
    );
}

#[test]
fn validate_has_the_api_servers_words() {
    let dir = TempDir::new();
    let file = dir.file("pod.yaml");
    let spec = "  securityContext: {runAsUser: -1, supplementalGroupsPolicy: Loose}
  containers:
  - name: a
    command: [sh]
    securityContext:
      privileged: true
      allowPrivilegeEscalation: false
      capabilities: {add: [CAP_SYS_ADMIN]}
      seccompProfile: {type: Localhost}
  - name: b
    command: [sh]
    securityContext:
      seccompProfile: {type: Weird}
      appArmorProfile: {type: RuntimeDefault}
      procMount: Unmasked
";
    std::fs::write(&file, pod_with("Always", 1, spec)).unwrap();
    let out = Run::new(podvisor()).arg("validate").arg(&file).output();
    assert_eq!(out.code(), 2, "{out:?}");
    for expected in [
        "spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive",
        "spec.securityContext.supplementalGroupsPolicy: Unsupported value: \"Loose\": supported values: \"Merge\", \"Strict\"",
        "spec.containers[0].securityContext: Invalid value: \"privileged: true, allowPrivilegeEscalation: false\": cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
        "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
        "spec.containers[0].securityContext.capabilities.add[0]: Unsupported value: \"CAP_SYS_ADMIN\": not a capability",
        "spec.containers[0].securityContext.seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost",
        "spec.containers[1].securityContext.seccompProfile.type: Unsupported value: \"Weird\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"",
        "spec.containers[1].securityContext.appArmorProfile.type: Unsupported value: \"RuntimeDefault\": podvisor does not apply AppArmor profiles",
        "spec.containers[1].securityContext.procMount: Unsupported value: \"Unmasked\"",
    ] {
        assert!(out.stderr.contains(expected), "missing {expected:?} in:\n{}", out.stderr);
    }
}

/// Docker's engine on a busybox-static image FROM scratch, and podvisor, with the same
/// settings: the same status lines. (Docker gives every container its default seccomp
/// profile, the kubelet only when asked: podvisor runs with --seccomp-default here.)
#[test]
fn the_same_settings_read_the_same_under_docker() {
    if !is_root() {
        skip("capabilities need root");
        return;
    }
    if let Err(why) = crate::docker::engine() {
        skip(&why);
        return;
    }
    let image = BusyboxImage::build();
    let script = format!("grep -E \"{STATUS_LINES}\" /proc/self/status");
    let cases: [(&[&str], &str, &str); 3] = [
        (&[], "", ""),
        (
            &["--user", "1000:1000", "--group-add", "2000", "--cap-drop", "ALL", "--cap-add", "NET_BIND_SERVICE", "--security-opt", "no-new-privileges"],
            "{runAsUser: 1000, runAsGroup: 1000, supplementalGroups: [2000]}",
            "{capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}, allowPrivilegeEscalation: false}",
        ),
        (
            &["--cap-drop", "CHOWN", "--cap-add", "SYS_PTRACE"],
            "",
            "{capabilities: {drop: [CHOWN], add: [SYS_PTRACE]}}",
        ),
    ];
    for (flags, pod_sc, sc) in cases {
        let mut args = vec!["run", "--rm"];
        args.extend(flags);
        args.extend([image.tag.as_str(), "sh", "-c", &script]);
        let docker = Run::new("docker").args(&args).output();
        assert_eq!(docker.code(), 0, "{docker:?}");
        let theirs = fields(&docker.stdout.lines().map(String::from).collect::<Vec<_>>());
        let (_r, lines) = run_to_end(&status_pod(pod_sc, sc, "true"), &["--seccomp-default"]);
        let ours = fields(&lines);
        assert_eq!(ours, theirs, "flags {flags:?}");
    }
}

/// An image FROM scratch with Debian's static busybox, removed when dropped.
pub(crate) struct BusyboxImage {
    pub(crate) tag: String,
    _dir: TempDir,
}

impl BusyboxImage {
    pub(crate) fn build() -> BusyboxImage {
        let dir = TempDir::new();
        let ctx = dir.file("ctx");
        std::fs::create_dir_all(&ctx).unwrap();
        std::fs::copy("/bin/busybox", ctx.join("busybox")).unwrap();
        std::fs::write(
            ctx.join("Dockerfile"),
            "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n",
        )
        .unwrap();
        let tag = crate::docker::unique("busybox");
        let out = Run::new("docker")
            .args(["build", "-q", "--no-cache", "-t", &tag])
            .arg(&ctx)
            .output();
        assert_eq!(out.code(), 0, "docker build: {out:?}");
        BusyboxImage { tag, _dir: dir }
    }
}

impl Drop for BusyboxImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", &self.tag])
            .output();
    }
}

#[test]
fn explain_says_what_each_container_runs_as_and_may_do() {
    let dir = TempDir::new();
    let file = dir.file("pod.yaml");
    let spec = "  securityContext: {runAsUser: 1000, runAsGroup: 1000, fsGroup: 3000, runAsNonRoot: true}
  shareProcessNamespace: true
  containers:
  - name: app
    command: [sh]
    securityContext: {capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}, allowPrivilegeEscalation: false, seccompProfile: {type: RuntimeDefault}}
";
    std::fs::write(&file, pod_with("Always", 1, spec)).unwrap();
    let out = Run::new(podvisor()).arg("explain").arg(&file).output();
    assert_eq!(out.code(), 0, "{out:?}");
    for line in [
        "  namespaces: uts the pod's (hostname p); ipc the pod's; pid the pod's (shareProcessNamespace, under podvisor's PID 1); network the host's",
        "  runs as:        uid 1000, gid 1000, supplementary groups 3000",
        "  capabilities:   NET_BIND_SERVICE",
        "  no_new_privs:   yes",
        "  seccomp:        RuntimeDefault (containerd's profile)",
        "  runAsNonRoot:   checked before each start",
    ] {
        assert!(out.stdout.lines().any(|l| l == line), "missing {line:?} in:\n{}", out.stdout);
    }
}

#[test]
fn a_container_gets_a_dev_of_its_own_a_read_only_sys_and_masked_proc_as_under_docker() {
    if !is_root() {
        skip("private roots need root");
        return;
    }
    let script = "ls /dev | tr \"\\n\" \" \"; echo; touch /sys/x 2>/dev/null && echo sys=written || echo sys=read-only; stat -c \"%a %t,%T\" /dev/null; (echo 1 > /proc/sys/kernel/shm_rmid_forced) 2>/dev/null && echo procsys=written || echo procsys=read-only; echo keys=$(cat /proc/keys 2>/dev/null | wc -c)";
    let pod = |sc: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: app\n    command: [sh, -c, '{}']\n{sc}",
            script.replace('\'', "''")
        )
    };
    let r = PodRun::new(&pod(""));
    assert_eq!(r.cmd(&[]).output().code(), 0);
    let ours = r.log_lines("app", 1);
    // runc's devices and links (`core` where the kernel has a /proc/kcore), and the file
    // the kubelet binds for the termination message.
    let core = if std::path::Path::new("/proc/kcore").exists() {
        "core "
    } else {
        ""
    };
    assert_eq!(
        ours[0].trim(),
        format!(
            "{core}fd full mqueue null ptmx pts random shm stderr stdin stdout termination-log tty urandom zero"
        )
    );
    assert_eq!(ours[1], "sys=read-only");
    assert_eq!(ours[2], "666 1,3");
    // containerd's read-only and masked paths.
    assert_eq!(ours[3], "procsys=read-only");
    assert_eq!(ours[4], "keys=0");
    // Privileged: the host's /dev and a writable /sys.
    let r = PodRun::new(&pod("    securityContext: {privileged: true}\n"));
    assert_eq!(r.cmd(&[]).output().code(), 0);
    let privileged = r.log_lines("app", 1);
    assert!(privileged[0].split(' ').count() > 20, "{privileged:?}");
    if let Err(why) = crate::docker::engine() {
        skip(&why);
        return;
    }
    let image = BusyboxImage::build();
    let docker = Run::new("docker")
        .args(["run", "--rm", image.tag.as_str(), "sh", "-c", script])
        .output();
    assert_eq!(docker.code(), 0, "{docker:?}");
    let theirs: Vec<&str> = docker.stdout.lines().collect();
    assert_eq!(
        theirs[0].trim(),
        ours[0].trim().replace(" termination-log", ""),
        "the same /dev as Docker's, but for the kubelet's file"
    );
    assert_eq!(theirs[1], ours[1]);
    assert_eq!(theirs[2..], ours[2..]);
}
