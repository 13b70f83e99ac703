//! Without root, the manifest's users and groups through the subordinate ids of
//! `/etc/subuid` and `/etc/subgid` (newuidmap / newgidmap), as rootless podman maps them:
//! read back inside the container (`/proc/self/status`, its maps), on the host (the owner of
//! a file it wrote), in an exec probe and in `podvisor exec` (which also see the container's
//! PID namespace), under live restore (the keeper starts the container); what the map cannot
//! hold is refused by field; a host directory in which something is mounted after the run
//! started is bound read-only at later starts. Run as the user
//! `podvisor-sub`, whose ranges `.ci/run` makes (docs/testing.md).

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::harness::*;

/// The user with subordinate ids these tests run as.
const SUB_USER: &str = "podvisor-sub";

/// `podvisor-sub`'s first subordinate uid and gid, when this machine can map them.
fn sub_user_ranges() -> Option<(u32, u32)> {
    if !is_root() {
        skip("needs root to become podvisor-sub");
        return None;
    }
    let first = |file: &str| {
        std::fs::read_to_string(file).ok()?.lines().find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == SUB_USER).then(|| f.next()?.parse().ok())?
        })
    };
    match (first("/etc/subuid"), first("/etc/subgid")) {
        (Some(u), Some(g)) if have("newuidmap", "the subordinate id tests") => Some((u, g)),
        _ => {
            skip("no podvisor-sub in /etc/subuid and /etc/subgid (.ci/run makes it)");
            None
        }
    }
}

const AS_SUB_USER: [&str; 4] = [
    "setpriv",
    "--reuid=podvisor-sub",
    "--regid=podvisor-sub",
    "--clear-groups",
];

/// A pod of ours with a root of its own (no `host-root: writable`).
fn sub_pod(pod_sc: &str, rest: &str) -> PodRun {
    let r = PodRun::new(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: subids, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  securityContext: {pod_sc}\n{rest}"
    ));
    std::fs::set_permissions(r.dir.file(""), std::fs::Permissions::from_mode(0o777)).unwrap();
    r
}

/// `podvisor ARGS --state-dir` of `r`, as podvisor-sub.
fn client_as_sub_user(r: &PodRun, args: &[&str]) -> Output {
    let (cmd, rest) = args.split_first().unwrap();
    Run::new("setpriv")
        .args(&AS_SUB_USER[1..])
        .arg(podvisor())
        .arg(cmd)
        .arg("--state-dir")
        .arg(r.dir.file("state"))
        .args(rest)
        .output()
}

#[test]
fn without_root_the_manifests_users_and_groups_are_subordinate_ids() {
    let Some((uid_start, gid_start)) = sub_user_ranges() else {
        return;
    };
    let r = sub_pod(
        "{runAsUser: 1000, runAsGroup: 1001, supplementalGroups: [2000], fsGroup: 0}",
        "  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: app
    command: [sh, -c, 'grep -E \"^(Uid|Gid|Groups|CapEff|NoNewPrivs):\" /proc/self/status; cat /proc/self/uid_map /proc/self/gid_map; echo pid=$$$$; touch /data/f /tmp/ready; exec sleep 600']
    volumeMounts: [{name: data, mountPath: /data}]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    readinessProbe: {exec: {command: [sh, -c, 'test \"$(id -u):$(id -g)\" = 1000:1001 && grep -q sleep /proc/1/cmdline && cat /tmp/ready']}, periodSeconds: 1}
",
    );
    // Under live restore, so that the keeper starts the container: it enters the run's
    // user namespace too.
    let mut p = r.cmd_under(&AS_SUB_USER, &["--live-restore"]).start();
    wait_until("the app is ready", || {
        r.reasons("app").iter().any(|x| x == "Ready")
    });
    let log = r.log("app", 1);
    for want in [
        "Uid:\t1000\t1000\t1000\t1000",
        "Gid:\t1001\t1001\t1001\t1001",
        "Groups:\t0 1001 2000",
        "CapEff:\t0000000000000000",
        "NoNewPrivs:\t1",
        "pid=1",
    ] {
        assert!(log.contains(want), "{want:?} in {log}");
    }
    // uid 0 inside is podvisor-sub, uids 1 and up its subordinate ids.
    let maps: Vec<Vec<String>> = r
        .log_lines("app", 1)
        .iter()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|f| f.len() == 3 && f.iter().all(|x| x.parse::<u64>().is_ok()))
        .collect();
    assert_eq!(maps.len(), 4, "{log}");
    assert_eq!(maps[1], ["1", &uid_start.to_string(), "65536"], "{log}");
    assert_eq!(maps[3], ["1", &gid_start.to_string(), "65536"], "{log}");
    // On the host the file it wrote belongs to subordinate uid 999 and gid 0's (fsGroup 0
    // is podvisor-sub's group: the volume's directory is setgid to it).
    let f = std::fs::metadata(r.dir.file("state").join("volumes/data/f")).unwrap();
    let sub_gid = std::fs::metadata(r.dir.file("state").join("volumes/data")).unwrap();
    assert_eq!(f.uid(), uid_start + 999);
    assert_eq!(f.gid(), sub_gid.gid());
    // podvisor exec: the container's user, groups and PID namespace.
    let out = client_as_sub_user(
        &r,
        &[
            "exec",
            "--",
            "sh",
            "-c",
            "id -u; id -g; id -G; tr '\\0' ' ' < /proc/1/cmdline",
        ],
    );
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(
        out.stdout.lines().collect::<Vec<_>>(),
        ["1000", "1001", "1001 0 2000", "sleep 600 "],
        "{out:?}"
    );
    let describe = client_as_sub_user(&r, &["describe"]);
    assert!(
        describe.stdout.contains(
            "rootless (user namespace: uids 0-65536, gids 0-65536 from /etc/subuid, /etc/subgid)"
        ),
        "{describe:?}"
    );
    let stop = client_as_sub_user(&r, &["stop"]);
    assert_eq!(stop.code(), 0, "{stop:?}");
    assert_eq!(p.wait().code(), Some(0));
}

#[test]
fn without_root_what_the_map_cannot_hold_is_refused_by_field() {
    let Some(_) = sub_user_ranges() else {
        return;
    };
    let refused = |who: &[&str], pod_sc: &str| {
        let r = sub_pod(
            pod_sc,
            "  containers:\n  - name: app\n    command: [\"true\"]\n",
        );
        let out = r.cmd_under(who, &[]).output();
        assert_eq!(out.code(), 2, "{out:?}");
        out.stderr
    };
    let err = refused(&AS_SUB_USER, "{runAsUser: 70000}");
    assert!(
        err.contains("securityContext.runAsUser") && err.contains("maps uids 0 to 65536"),
        "{err}"
    );
    let err = refused(&AS_SUB_USER, "{runAsUser: 5, supplementalGroups: [65537]}");
    assert!(
        err.contains("securityContext.runAsGroup") && err.contains("not 65537"),
        "{err}"
    );
    let err = refused(&AS_SUB_USER, "{fsGroup: 3000}");
    assert!(
        err.contains("securityContext.fsGroup") && err.contains("not 3000"),
        "{err}"
    );
    // nobody has no subordinate ids: only root inside, and the message says why.
    let nobody = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
    ];
    let err = refused(&nobody, "{runAsUser: 1000}");
    assert!(
        err.contains("securityContext.runAsUser")
            && err.contains("/etc/subuid gives nobody (uid 65534) no subordinate uids"),
        "{err}"
    );
}

/// A mount made below a host directory after the run read the host's mounts (a container
/// engine's, an automount) is locked in a container's user namespace, and the kernel refuses
/// that directory as a layer of its overlay: later starts bind it read-only instead, as a
/// directory with mounts is bound from the start, rather than failing until it goes away.
#[test]
fn without_root_a_mount_made_after_the_run_started_is_bound_read_only() {
    let Some(_) = sub_user_ranges() else {
        return;
    };
    if (mount_points().iter()).any(|p| p == "/usr" || p.starts_with("/usr/")) {
        skip("something is mounted at or below /usr: a rootless root binds it from the start");
        return;
    }
    let r = sub_pod(
        "{}",
        "  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: app
    command: [sh, -c, 'awk \"\\$5 == \\\"/usr\\\" { for (i = 7; \\$i != \\\"-\\\"; i++); print \\\"usr:\\\", \\$(i + 1), \\$6 }\" /proc/self/mountinfo; ls /usr/local; until [ -e /data/go ]; do sleep 0.1; done; exit 1']
    volumeMounts: [{name: data, mountPath: /data}]
",
    );
    // In a mount namespace of its own, so that the mount made below touches no other test.
    let mut wrapper = vec!["unshare", "--mount", "--propagation", "private"];
    wrapper.extend(AS_SUB_USER);
    let mut p = r.cmd_under(&wrapper, &[]).start();
    let log = |n: u32| r.dir.file(&format!("state/logs/app/{n}.log"));
    wait_for_file_line(&log(1), "/usr's mount", |l| l.contains("usr:"));
    let mounted = sh_in_mounts_of(
        p.init_pid(),
        "mount -t tmpfs podvisor-test /usr/local && touch /usr/local/podvisor-marker",
    );
    assert_eq!(mounted.code(), 0, "{mounted:?}");
    std::fs::write(r.dir.file("state/volumes/data/go"), "").unwrap();
    wait_for_file_line(&log(2), "the new mount", |l| l.contains("podvisor-marker"));
    let first = r.log("app", 1);
    let second = r.log("app", 2);
    // "usr: FSTYPE OPTIONS" of each start's /usr.
    let usr = |log: &str| -> Vec<String> {
        let line = log
            .lines()
            .find_map(|l| l.split_once("usr: "))
            .map(|(_, u)| u);
        line.unwrap_or_default()
            .split(' ')
            .map(String::from)
            .collect()
    };
    let (first_usr, second_usr) = (usr(&first), usr(&second));
    assert_eq!(first_usr[0], "overlay", "{first}");
    assert!(!first.contains("podvisor-marker"), "{first}");
    assert_ne!(second_usr[0], "overlay", "{second}");
    let options = second_usr.get(1).map_or("", |o| o.as_str());
    assert!(options.split(',').any(|o| o == "ro"), "{second}");
    assert!(
        !r.reasons("app").iter().any(|x| x == "Failed"),
        "{:?}",
        r.events()
    );
    let stop = client_as_sub_user(&r, &["stop"]);
    assert_eq!(stop.code(), 0, "{stop:?}");
    assert_eq!(p.wait().code(), Some(0));
}
