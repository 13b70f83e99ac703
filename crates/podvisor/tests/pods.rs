//! Many pods, the kubectl way, through the binary: pods found by name and namespace under the
//! state base, `get pods` over running and ended pods, an ended pod's logs, events and status,
//! a client right after `run … &`, `stop` that deletes the pod (the next run is a new pod)
//! beside a kill -9 that keeps it, and `delete` (with what a killed run left).

use serde_json::Value;

use crate::harness::*;

/// A base of state dirs of its own, and the manifests run under it.
struct Base {
    dir: TempDir,
}

impl Base {
    fn new() -> Base {
        Base {
            dir: TempDir::new(),
        }
    }

    /// `podvisor ARGS` with this base.
    fn podvisor(&self, args: &[&str]) -> Run {
        Run::new(podvisor())
            .env("PODVISOR_STATE_BASE", self.dir.file("base"))
            .args(args)
    }

    /// `podvisor run -q` of a manifest written as `file`.
    fn run(&self, file: &str, manifest: &str) -> Run {
        let path = self.dir.file(file);
        std::fs::write(&path, manifest).unwrap();
        self.podvisor(&["run", "-q"]).arg(path)
    }

    fn out(&self, args: &[&str]) -> Output {
        self.podvisor(args).output()
    }
}

fn pod(namespace: &str, name: &str, policy: &str, containers: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n  containers:\n{containers}"
    )
}

const JOB: &str = "  - name: work\n    command: [sh, -c, 'echo working; exit 0']\n";
const WEB: &str = "  - name: app\n    command: [sh, -c, 'echo serving; trap \"exit 0\" TERM; while :; do sleep 0.1; done']\n  - name: side\n    command: [sleep, '600']\n";

#[test]
fn pods_by_name_listed_and_readable_after_they_end() {
    if !is_root() {
        skip("the pods' private roots need root");
        return;
    }
    let b = Base::new();
    let job = b
        .run("job.yaml", &pod("batch", "report", "Never", JOB))
        .output();
    assert_eq!(job.code(), 0, "{job:?}");
    // A client at once after `run … &` finds the pod: it waits for a run that has just begun.
    let mut web = b
        .run("web.yaml", &pod("shop", "web", "Always", WEB))
        .start();
    let status = b.out(&["status", "shop/web", "-o", "json"]);
    assert_eq!(status.code(), 0, "{status:?}");
    let mut web2 = b
        .run("web2.yaml", &pod("other", "web", "Always", WEB))
        .start();
    wait_until("both webs running", || {
        let out = b.out(&["get", "pods", "-A"]).stdout;
        out.lines()
            .filter(|l| l.contains(" 2/2 ") && l.contains("Running"))
            .count()
            == 2
    });

    // get pods: kubectl's columns, running and ended pods; -o name, -o json.
    let table = b.out(&["get", "pods", "-A"]);
    let lines: Vec<Vec<&str>> = table
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    assert_eq!(lines[1][..5], ["batch", "report", "0/1", "Completed", "0"]);
    assert_eq!(lines[2][..5], ["other", "web", "2/2", "Running", "0"]);
    assert_eq!(lines[3][..5], ["shop", "web", "2/2", "Running", "0"]);
    let names = b.out(&["ps", "-n", "shop", "-o", "name"]);
    assert_eq!(names.stdout, "pod/web");
    let list: Value = serde_json::from_str(&b.out(&["get", "pods", "-o", "json"]).stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().unwrap().len(), 3);

    // The ended pod, by name: its logs, events and status.
    assert_eq!(b.out(&["logs", "report"]).stdout, "working");
    assert_eq!(
        b.out(&["logs", "batch/report", "-c", "work"]).stdout,
        "working"
    );
    let events = b.out(&["events", "report"]).stdout;
    assert!(
        events.contains("Completed") && events.contains("exited with code 0"),
        "{events}"
    );
    let st = b.out(&["status", "report"]);
    assert!(
        st.stdout.lines().nth(1).unwrap().contains("Completed"),
        "{st:?}"
    );
    let describe = b.out(&["describe", "-n", "batch", "report"]);
    assert!(
        describe.stdout.contains("Status:") && describe.stdout.contains("Succeeded"),
        "{describe:?}"
    );

    // The same name in two namespaces, and two running pods: errors that name them.
    let out = b.out(&["status", "web"]);
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr.contains("several namespaces (other, shop)"),
        "{out:?}"
    );
    let out = b.out(&["status"]);
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr.contains("name one: other/web, shop/web"),
        "{out:?}"
    );
    let out = b.out(&["logs", "nope"]);
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr
            .contains("pods there: batch/report, other/web, shop/web"),
        "{out:?}"
    );
    // kubectl's forms for a pod's container.
    assert_eq!(
        b.out(&["logs", "-n", "shop", "web", "app"]).stdout,
        "serving"
    );
    let out = b.out(&["logs", "shop/web"]);
    assert_eq!(out.stdout, "serving");
    assert_eq!(out.stderr, "Defaulted container \"app\" out of: app, side");

    // A kill -9 keeps the pod: the next run resumes it.
    web2.signal("KILL");
    web2.wait();
    // Killed: its events and logs stay readable; its status cannot be told.
    let events = b.out(&["events", "other/web"]);
    assert!(
        events.stdout.contains("Started container side"),
        "{events:?}"
    );
    assert_eq!(b.out(&["logs", "other/web", "app"]).stdout, "serving");
    let out = b.out(&["status", "other/web"]);
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr
            .contains("ended without saying how the pod was (killed?)"),
        "{out:?}"
    );
    let listed = b.out(&["get", "pods", "-n", "other"]).stdout;
    assert!(
        listed.lines().nth(1).unwrap().contains("Unknown"),
        "{listed}"
    );
    // The processes a killed run left are the next run's to end (as here) or kill.
    let mut again = b
        .run("web2.yaml", &pod("other", "web", "Always", WEB))
        .start();
    wait_until("other/web resumed", || {
        b.out(&["events", "other/web"]).stdout.contains("Resumed")
    });
    let uid = |b: &Base| -> String {
        let out = b.out(&["status", "other/web", "-o", "json"]).stdout;
        let pod: Value = serde_json::from_str(&out).unwrap_or_default();
        pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let resumed = uid(&b);
    // `stop` deletes it: the next run is a new pod (a new uid, no Resumed).
    let out = b.out(&["stop", "other/web"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(again.wait().success());
    let out = b.out(&["delete", "shop/web"]);
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr.contains("is running: `podvisor stop shop/web`"),
        "{out:?}"
    );
    let mut third = b
        .run("web2.yaml", &pod("other", "web", "Always", WEB))
        .start();
    // (Until the new run begins, the ended one's last status and events are shown.)
    wait_until("other/web running again", || {
        let new = uid(&b);
        !new.is_empty()
            && new != resumed
            && b.out(&["events", "other/web"])
                .stdout
                .contains("Started container side")
    });
    assert!(!b.out(&["events", "other/web"]).stdout.contains("Resumed"));
    assert_eq!(b.out(&["stop", "other/web"]).code(), 0);
    assert!(third.wait().success());
    // Stopped: listed with its last status, its logs and events readable.
    let listed = b.out(&["get", "pods", "-n", "other"]).stdout;
    assert!(
        listed.lines().nth(1).unwrap().starts_with("web "),
        "{listed}"
    );
    // (Its shell may say `Terminated` of the sleep the stop killed.)
    let logs = b.out(&["logs", "other/web", "-c", "app"]).stdout;
    assert!(logs.starts_with("serving"), "{logs}");
    let events = b.out(&["events", "other/web"]).stdout;
    assert!(events.contains("Stopping container app"), "{events}");
    assert_eq!(b.out(&["stop", "shop/web"]).code(), 0);
    assert!(web.wait().success());

    // A container that never started: its logs say why.
    let nf = pod(
        "batch",
        "nf",
        "Never",
        "  - {name: web, command: [/nonexistent]}\n",
    );
    assert_eq!(b.run("nf.yaml", &nf).output().code(), 1);
    let out = b.out(&["logs", "nf"]);
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr.starts_with(
            "error: container \"web\" in pod \"nf\" never ran: StartError: exec: \"/nonexistent\""
        ),
        "{out:?}"
    );
    let events = b.out(&["events", "batch/nf"]).stdout;
    assert!(
        events.contains("Error: failed to start container web"),
        "{events}"
    );
    let listed = b.out(&["get", "pods", "batch/nf"]).stdout;
    assert!(listed.contains("StartError"), "{listed}");
    assert_eq!(b.out(&["delete", "batch/nf"]).code(), 0);

    // delete removes ended pods; get pods no longer lists them.
    let out = b.out(&["delete", "batch/report", "other/web", "shop/web"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let out = b.out(&["get", "pods", "-A"]);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("", "No resources found")
    );
}

#[test]
fn delete_refuses_a_pod_whose_containers_live_on_under_keepers() {
    if !is_root() {
        skip("the pods' private roots need root");
        return;
    }
    let b = Base::new();
    let manifest = pod("kept", "web", "Always", WEB);
    let mut first = b.run("web.yaml", &manifest).arg("--live-restore").start();
    wait_until("web running", || {
        b.out(&["events", "kept/web"])
            .stdout
            .contains("Started container side")
    });
    first.signal("KILL");
    first.wait();
    let out = b.out(&["delete", "kept/web"]);
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr
            .contains("still run under its keepers (--live-restore)"),
        "{out:?}"
    );
    // With no run, what needs one says where the containers are and what takes them over
    // (not that no pod runs).
    let out = b.out(&["stop", "kept/web"]);
    assert_eq!(out.code(), 1);
    assert!(
        out.stderr.contains(
            "its containers run on under their keepers (--live-restore) until `podvisor run --live-restore` of its manifest takes them over"
        ),
        "{out:?}"
    );
    // Taken over, stopped (deleted), then removed: nothing is left.
    let mut again = b.run("web.yaml", &manifest).arg("--live-restore").start();
    wait_until("web adopted", || {
        b.out(&["events", "kept/web"]).stdout.contains("Adopted")
    });
    assert_eq!(b.out(&["stop", "kept/web"]).code(), 0);
    assert!(again.wait().success());
    assert_eq!(b.out(&["delete", "kept/web"]).code(), 0);
    again.assert_no_leftovers();
}

#[test]
fn delete_removes_the_cgroups_a_killed_run_left_and_what_is_in_them() {
    if !is_root() {
        skip("the pods' private roots need root");
        return;
    }
    let b = Base::new();
    // The container starts a sleep of its own, which no parent-death signal reaches and, in
    // the host's PID namespace, no namespace's end either: it outlives the run in the pod's
    // cgroup.
    let manifest = pod(
        "gone",
        "web",
        "Always",
        "  - name: app\n    command: [sh, -c, 'sleep 600 & echo started; wait']\n",
    )
    .replace("spec:\n", "spec:\n  hostPID: true\n");
    let mut run = b.run("web.yaml", &manifest).start();
    wait_until("app started", || {
        b.out(&["logs", "gone/web"]).stdout.contains("started")
    });
    // While the run holds the state dir, delete is refused.
    let out = b.out(&["delete", "gone/web"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        out.stderr
            .contains("pod \"gone/web\" is running: `podvisor stop gone/web` stops and deletes it"),
        "{out:?}"
    );
    run.signal("KILL");
    run.wait();
    let dir = b.dir.file("base").join("gone").join("web");
    let cgroups = cgroups_of_state_dirs(std::slice::from_ref(&dir));
    let held = |cg: &std::path::PathBuf| {
        let mut procs = String::new();
        for e in walkdir(cg) {
            procs += &std::fs::read_to_string(e.join("cgroup.procs")).unwrap_or_default();
        }
        !procs.trim().is_empty()
    };
    let left_held = !cgroups.is_empty() && cgroups.iter().all(held);
    // Clients say what the killed run left running, and how it ends.
    let stop = b.out(&["stop", "gone/web"]);
    let status = b.out(&["status", "gone/web"]);
    // Something mounted below the state dir: refused, its files untouched.
    let mnt = dir.join("mnt");
    let tmpfs = Tmpfs::mount(&mnt, None);
    std::fs::write(mnt.join("keep"), "mine").unwrap();
    let refused = b.out(&["delete", "gone/web"]);
    let kept = std::fs::read_to_string(mnt.join("keep"));
    tmpfs.unmount();
    let out = b.out(&["delete", "gone/web"]);
    let left = cgroups_of_state_dirs(std::slice::from_ref(&dir));
    // Taken back here whatever the outcome, so that a failure leaves nothing either.
    for cg in &left {
        remove_cgroup_tree(cg);
    }
    assert_eq!(refused.code(), 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains(&format!("{} is mounted below its state dir", mnt.display())),
        "{refused:?}"
    );
    assert_eq!(kept.ok().as_deref(), Some("mine"));
    assert!(left_held, "the killed run's cgroups, held: {cgroups:?}");
    let left_said = "its run was killed and left 1 process running in the pod's cgroups (pid ";
    let ends = "): `podvisor delete` of the pod ends it, and so does the next `podvisor run` of its manifest, which resumes the pod";
    assert_eq!(stop.code(), 1, "{stop:?}");
    let no_run = format!("no run serves the pod in {}: {left_said}", dir.display());
    assert!(stop.stderr.contains(&no_run), "{stop:?}");
    assert!(stop.stderr.contains(ends), "{stop:?}");
    assert_eq!(status.code(), 1, "{status:?}");
    assert!(status.stderr.contains(left_said), "{status:?}");
    assert!(status.stderr.contains(ends), "{status:?}");
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "pod \"web\" deleted", "{out:?}");
    assert!(!dir.exists());
    assert_eq!(left, Vec::<std::path::PathBuf>::new());
    // The sleep went with them.
    run.assert_no_leftovers();
}

/// `dir` and every directory below it.
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut all = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            all.extend(walkdir(&e.path()));
        }
    }
    all
}

#[test]
fn a_client_right_after_run_in_the_background_of_a_shell_finds_the_pod() {
    if !is_root() {
        skip("the pods' private roots need root");
        return;
    }
    let b = Base::new();
    let manifest = b.dir.file("quick.yaml");
    std::fs::write(&manifest, pod("quick", "web", "Always", WEB)).unwrap();
    // The shell forks `run` and at once `status`: the run may not even have exec'd yet.
    let script = "for i in 1 2 3 4 5; do
        \"$PV\" run -q \"$M\" & run=$!
        \"$PV\" status quick/web >/dev/null || { kill $run; wait; exit 1; }
        echo found
        \"$PV\" stop quick/web >/dev/null || { kill $run; wait; exit 1; }
        wait $run || exit 1
    done";
    let out = Run::new("sh")
        .env("PODVISOR_STATE_BASE", b.dir.file("base"))
        .env("PV", podvisor())
        .env("M", &manifest)
        .args(["-c", script])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, ["found"; 5].join("\n"), "{out:?}");
}
