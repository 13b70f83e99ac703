//! `podvisor init --supervision FILE --state-dir DIR [--lock-dir DIR]`: staged instrumentation
//! across container restarts that someone else performs. A new container is simulated by
//! emptying the lock dir between runs, as a runtime gives each container a fresh /tmp. These
//! tests also run against the PID 1 build (`.ci/run`).

use std::path::{Path, PathBuf};

use crate::harness::*;

const SUPERVISION: &str = "apiVersion: podvisor.io/v1alpha1
kind: Supervision
metadata: {name: default}
spec:
  stagedInstrumentation:
    env: {AGENT: 'on'}              # the add-on's switch
    debugEnv: {AGENT_LOG: debug}
";

/// A scratch area: the Supervision file, a state dir, a lock dir.
struct Container {
    dir: TempDir,
}

impl Container {
    fn new(supervision: &str) -> Container {
        let dir = TempDir::new();
        std::fs::write(dir.file("sup.yaml"), supervision).unwrap();
        std::fs::create_dir_all(dir.file("tmp")).unwrap();
        Container { dir }
    }

    fn lock_dir(&self) -> PathBuf {
        self.dir.file("tmp")
    }

    /// A new container instance: its /tmp starts empty.
    fn fresh_tmp(&self) {
        let _ = std::fs::remove_dir_all(self.lock_dir());
        std::fs::create_dir_all(self.lock_dir()).unwrap();
    }

    fn start(&self, lock_dir: &Path, extra_env: &[(&str, &str)]) -> Output {
        let mut run = Run::new(podvisor())
            .args(["init", "--supervision"])
            .arg(self.dir.file("sup.yaml"))
            .arg("--state-dir")
            .arg(self.dir.file("state"))
            .arg("--lock-dir")
            .arg(lock_dir)
            .args([
                "--",
                "sh",
                "-c",
                "echo \"$PODVISOR_INSTR_STAGE agent=$AGENT log=$AGENT_LOG\"",
            ]);
        for (k, v) in extra_env {
            run = run.env(k, v);
        }
        let out = run.output();
        assert_eq!(out.code(), 0, "{out:?}");
        out
    }

    fn seen(&self) -> String {
        self.start(&self.lock_dir(), &[]).stdout
    }
}

#[test]
fn case_a_each_container_start_counts_once() {
    let c = Container::new(SUPERVISION);
    let mut seen = Vec::new();
    for _ in 0..8 {
        c.fresh_tmp();
        seen.push(c.seen());
        // Another process of the same container (its lock is there): the same stage.
        assert_eq!(&c.seen(), seen.last().unwrap());
    }
    assert_eq!(
        seen,
        [
            "Nominal agent=on log=",
            "Nominal agent=on log=",
            "Nominal agent=on log=",
            "Debug agent=on log=debug",
            "Debug agent=on log=debug",
            "Debug agent=on log=debug",
            "Disabled agent= log=",
            "Disabled agent= log=",
        ]
    );
    let state = saved_record(&c.dir.file("state").join("podvisor-init.state"));
    assert_eq!(state["starts"], 8, "{state}");
    // CMD is told where the lock is, so that its own children (and a podvisor among them)
    // are known to belong to this start.
    let out = Run::new(podvisor())
        .args(["init", "--supervision"])
        .arg(c.dir.file("sup.yaml"))
        .arg("--state-dir")
        .arg(c.dir.file("state"))
        .arg("--lock-dir")
        .arg(c.lock_dir())
        .args(["--", "sh", "-c", "echo $PODVISOR_INSTR_STATE_LOCK"])
        .output();
    assert_eq!(
        out.stdout,
        c.lock_dir()
            .join("podvisor-instr-state.lock")
            .display()
            .to_string()
    );
}

#[test]
fn case_b_a_removed_lock_counts_only_for_a_process_that_lost_the_variable() {
    let c = Container::new(SUPERVISION);
    c.fresh_tmp();
    assert_eq!(c.seen(), "Nominal agent=on log=");
    let lock = c.lock_dir().join("podvisor-instr-state.lock");
    // Some process removed the lock; the next podvisor still has the variable: no count, and
    // the lock is back.
    std::fs::remove_file(&lock).unwrap();
    let lock_var = lock.display().to_string();
    let out = c.start(&c.lock_dir(), &[("PODVISOR_INSTR_STATE_LOCK", &lock_var)]);
    assert_eq!(out.stdout, "Nominal agent=on log=");
    assert!(lock.exists());
    let state = c.dir.file("state").join("podvisor-init.state");
    assert_eq!(saved_record(&state)["starts"], 1);
    // Removed again, and this time the variable is gone too: it counts as a new start.
    std::fs::remove_file(&lock).unwrap();
    c.seen();
    assert_eq!(saved_record(&state)["starts"], 2);
}

#[test]
fn case_c_a_lock_dir_that_survives_restarts_stays_nominal() {
    let c = Container::new(SUPERVISION);
    c.fresh_tmp();
    for _ in 0..8 {
        // /tmp is a volume: nothing clears it between container starts.
        assert_eq!(c.seen(), "Nominal agent=on log=");
    }
}

#[test]
fn case_d_no_lock_dir_or_a_read_only_one_runs_disabled_with_one_warning() {
    let c = Container::new(SUPERVISION);
    for lock_dir in [c.dir.file("missing"), PathBuf::from("/proc")] {
        let out = c.start(&lock_dir, &[]);
        assert_eq!(out.stdout, "Disabled agent= log=");
        let warnings: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.contains("instrumentation lock"))
            .collect();
        assert_eq!(warnings.len(), 1, "{out:?}");
        assert!(
            warnings[0].starts_with(
                "podvisor init: warning: the lock dir cannot hold the instrumentation lock ("
            ),
            "{out:?}"
        );
    }
    // Nothing was counted.
    assert!(!c.dir.file("state").join("podvisor-init.state").exists());
}

#[test]
fn containers_and_logging_select_and_shape_the_stages() {
    let sup = "apiVersion: podvisor.io/v1alpha1
kind: Supervision
spec:
  stagedInstrumentation:
    containers: [app]
    env: {AGENT: 'on'}
    debugEnv: {AGENT_LOG: debug}
    debugAfterRestarts: 1
    logging: true
";
    let c = Container::new(sup);
    let run = |name: Option<&str>| {
        c.fresh_tmp();
        let mut r = Run::new(podvisor())
            .args(["init", "--supervision"])
            .arg(c.dir.file("sup.yaml"))
            .arg("--state-dir")
            .arg(c.dir.file("state"))
            .arg("--lock-dir")
            .arg(c.lock_dir());
        if let Some(n) = name {
            r = r.args(["--container", n]);
        }
        r.args([
            "--",
            "sh",
            "-c",
            "echo \"${PODVISOR_INSTR_STAGE:-none} agent=$AGENT log=$AGENT_LOG\"",
        ])
        .output()
    };
    // logging: Nominal already has the debug variables, then Disabled.
    assert_eq!(run(Some("app")).stdout, "Nominal agent=on log=debug");
    assert_eq!(run(Some("app")).stdout, "Disabled agent= log=");
    // Another container: left alone.
    assert_eq!(run(Some("sidecar")).stdout, "none agent= log=");
    // Which one is this? It must be said.
    let out = run(None);
    assert_eq!(out.code(), 2);
    assert!(out.stderr.contains("pass --container NAME"), "{out:?}");
}

#[test]
fn bad_input_is_refused_with_its_place() {
    let c = Container::new(
        "apiVersion: podvisor.io/v1alpha1
kind: Supervision
spec:
  stagedInstrumentation: {debugAfterRestarts: 4, disableAfterRestarts: 2}
  podRestart: {afterContainerRestarts: 5, within: 10m, maxPodRestarts: 3}
",
    );
    let init = |args: &[&str]| Run::new(podvisor()).arg("init").args(args).output();
    let sup = c.dir.file("sup.yaml").display().to_string();
    let state = c.dir.file("state").display().to_string();
    let out = init(&["--supervision", &sup, "--state-dir", &state, "--", "true"]);
    assert_eq!(out.code(), 2);
    assert_eq!(
        out.stderr,
        format!(
            "error: {sup}:4:50: spec.stagedInstrumentation.disableAfterRestarts: Invalid value: 2: must be >= debugAfterRestarts (4)\n{sup}:5:3: spec.podRestart: Forbidden: a container cannot restart its own pod: podRestart is for podvisor run and the cluster controller"
        )
    );
    // Flags that need each other.
    let out = init(&["--supervision", &sup, "--", "true"]);
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr
            .starts_with("error: --supervision needs --state-dir"),
        "{out:?}"
    );
    let out = init(&["--lock-dir", "/tmp", "--", "true"]);
    assert_eq!(out.code(), 2);
    // Not YAML: the place, as `podvisor run` says it (the same reader in both builds).
    std::fs::write(c.dir.file("sup.yaml"), "kind: Supervision\nspec: {x: 1\n").unwrap();
    let out = init(&["--supervision", &sup, "--state-dir", &state, "--", "true"]);
    assert_eq!(out.code(), 2);
    assert_eq!(
        out.stderr,
        format!("error: {sup}:2:7: unclosed bracket '{{'")
    );
    // A start count that cannot be read is refused, not reset.
    std::fs::write(c.dir.file("sup.yaml"), SUPERVISION).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let file = c.dir.file("state").join("podvisor-init.state");
    std::fs::write(&file, "podvisor-state 1 init\nstarts 3\n").unwrap();
    let out = init(&["--supervision", &sup, "--state-dir", &state, "--", "true"]);
    assert_eq!(out.code(), 2);
    assert_eq!(
        out.stderr,
        format!(
            "error: {}: the saved start count cannot be used: it ends before its checksum line: the file is truncated; remove the file to count from zero",
            file.display()
        )
    );
}

#[test]
fn init_and_run_read_the_supervision_with_the_same_words() {
    // One reader for both builds: a value refused by `podvisor init --supervision` (here
    // perhaps the PID 1 build) is refused by `podvisor validate` (the full build) at the same
    // place with the same message.
    let supervision = "apiVersion: podvisor.io/v1alpha1
kind: Supervision
spec:
  stagedInstrumentation: {debugAfterRestarts: 4, disableAfterRestarts: 2, verdictAfter: 3x, colour: blue}
";
    let c = Container::new(supervision);
    let pod = c.dir.file("pod.yaml");
    std::fs::write(
        &pod,
        format!("{supervision}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  containers:\n  - {{name: app, image: x, command: ['true']}}\n"),
    )
    .unwrap();
    let sup = c.dir.file("sup.yaml");
    let state = c.dir.file("state");
    let init = Run::new(podvisor())
        .args(["init", "--supervision"])
        .arg(&sup)
        .arg("--state-dir")
        .arg(&state)
        .args(["--", "true"])
        .output();
    let validate = Run::new(env!("CARGO_BIN_EXE_podvisor"))
        .arg("validate")
        .arg(&pod)
        .output();
    assert_eq!(
        (init.code(), validate.code()),
        (2, 2),
        "{init:?} {validate:?}"
    );
    let problems = |text: &str, file: &Path| -> Vec<String> {
        let prefix = format!("{}:", file.display());
        text.lines()
            .map(|l| l.trim_start_matches("error: "))
            .map(|l| l.strip_prefix(&prefix).unwrap_or(l).to_string())
            .collect()
    };
    let from_init = problems(&init.stderr, &sup);
    assert_eq!(from_init.len(), 3, "{from_init:?}");
    assert_eq!(from_init, problems(&validate.stderr, &pod));
}
