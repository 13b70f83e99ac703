//! podvisor as PID 1 of real containers under the Docker engine, each case beside the same case
//! with `docker run --init` (tini) where it applies: `docker stop`, `docker kill`, orphans,
//! exit codes, a terminal, podvisor's own options, and staged instrumentation across real
//! container restarts (`docker run` again, `docker restart`, Compose's `restart: on-failure`).
//!
//! The images come from `scripts/build-images` with a tag of the test's own; every container,
//! volume, Compose project and image tag a test makes is removed when it ends, also when it
//! fails. Without a Docker engine, or without Debian's busybox-static to build the images from,
//! the tests say skipped.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::harness::*;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether a Docker engine answers and the images can be built (scripts/build-images makes
/// them from Debian's static busybox); when not, why.
pub fn engine() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            match Command::new("docker").arg("info").output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => {
                    let why = String::from_utf8_lossy(&o.stderr).trim().to_string();
                    return Err(format!("no Docker engine: {why}"));
                }
                Err(e) => return Err(format!("no Docker engine: docker: {e}")),
            }
            let ldd = Command::new("ldd").arg("/bin/busybox").output();
            match ldd {
                Ok(o) if String::from_utf8_lossy(&o.stdout).contains("not a dynamic")
                    || String::from_utf8_lossy(&o.stderr).contains("not a dynamic") =>
                {
                    Ok(())
                }
                _ => Err("busybox-static not installed (the test images are built from /bin/busybox; apt-get install busybox-static)".to_string()),
            }
        })
        .clone()
}

macro_rules! require_docker {
    () => {
        if let Err(why) = engine() {
            skip(&why);
            return;
        }
    };
}

/// A name no other test (or test run) uses.
pub fn unique(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "pvtest-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// `docker ARGS`, to completion.
fn docker(args: &[&str]) -> Output {
    Run::new("docker").args(args).output()
}

/// The images of one test, tagged for it, removed with it.
struct Images {
    tag: String,
}

impl Images {
    fn build() -> Images {
        let tag = unique("img");
        // It compiles the static PID 1 build when it is not there yet (a fresh clone): minutes.
        // `--no-cache`: the tests build at once, and with the build cache they would share one
        // image, which one test's removal can take from under another's build.
        let out = Run::new(root().join("scripts/build-images"))
            .args(["--tag", &tag, "--no-controller", "--no-cache"])
            .output_within(std::time::Duration::from_secs(900));
        let images = Images { tag };
        assert_eq!(out.code(), 0, "scripts/build-images: {out:?}");
        images
    }

    /// The example app image (podvisor as its ENTRYPOINT).
    fn app(&self) -> String {
        format!("podvisor-app:{}", self.tag)
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        // With the intermediate images beneath: built without the cache, they are this test's.
        let _ = Command::new("docker")
            .args(["rmi", "-f"])
            .arg(format!("podvisor-app:{}", self.tag))
            .arg(format!("podvisor:{}", self.tag))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Containers and volumes to remove at the end.
#[derive(Default)]
struct Cleanup {
    containers: Vec<String>,
    volumes: Vec<String>,
}

impl Cleanup {
    fn container(&mut self, what: &str) -> String {
        let name = unique(what);
        self.containers.push(name.clone());
        name
    }

    fn volume(&mut self, what: &str) -> String {
        let name = unique(what);
        self.volumes.push(name.clone());
        name
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v", c])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        for v in &self.volumes {
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f", v])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The two ways to run a command as PID 1: podvisor (the image's ENTRYPOINT) and Docker's own
/// `--init` (tini), each as the `docker run` arguments that come before the command.
fn inits(image: &str) -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("podvisor", vec![image.to_string()]),
        (
            "docker --init",
            vec![
                "--init".to_string(),
                "--entrypoint".to_string(),
                "/bin/sh".to_string(),
                image.to_string(),
                "-c".to_string(),
            ],
        ),
    ]
}

/// `sh -c SCRIPT` as the container's command for either init.
fn shell(init: &(&str, Vec<String>), script: &str) -> Vec<String> {
    let mut v = init.1.clone();
    if init.0 == "podvisor" {
        v.extend(["sh".to_string(), "-c".to_string()]);
    }
    v.push(script.to_string());
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn exit_code(name: &str) -> i32 {
    let out = docker(&["inspect", "-f", "{{.State.ExitCode}}", name]);
    out.stdout.trim().parse().unwrap_or(-1)
}

fn wait_exited(name: &str) {
    wait_until(&format!("{name} to exit"), || {
        docker(&["inspect", "-f", "{{.State.Running}}", name])
            .stdout
            .trim()
            == "false"
    });
}

fn logs(name: &str) -> String {
    let out = docker(&["logs", name]);
    format!("{}\n{}", out.stdout, out.stderr)
}

/// Starts `sh -c SCRIPT` detached under `init` and waits for its `ready` line.
fn start(c: &mut Cleanup, init: &(&str, Vec<String>), script: &str) -> String {
    let name = c.container("app");
    let mut args = vec!["run", "-d", "--name", &name];
    let cmd = shell(init, script);
    args.extend(strs(&cmd));
    let out = docker(&args);
    assert_eq!(out.code(), 0, "{out:?}");
    wait_until(&format!("{} ready", init.0), || {
        logs(&name).contains("ready")
    });
    name
}

#[test]
fn images_built_at_the_same_time_share_nothing_and_outlive_each_other() {
    // The tests build at once and remove their images when done: two builds of the same files
    // must not share an image, or one test's removal takes it from under the other (its tag
    // then names nothing and its next `FROM` looks for the image on Docker Hub).
    require_docker!();
    let first = Images::build();
    let second = Images::build();
    let id = |image: &str| {
        let out = docker(&["image", "inspect", "-f", "{{.Id}}", image]);
        assert_eq!(out.code(), 0, "{out:?}");
        out.stdout.trim().to_string()
    };
    for name in ["podvisor", "podvisor-app"] {
        let ours = id(&format!("{name}:{}", first.tag));
        let theirs = id(&format!("{name}:{}", second.tag));
        assert_ne!(ours, theirs, "{name}: one image for both builds");
    }
    drop(first);
    let out = docker(&["run", "--rm", "--network", "none", &second.app(), "true"]);
    assert_eq!(out.code(), 0, "{out:?}");
}

#[test]
fn docker_stop_kill_and_exit_codes_as_under_tini() {
    require_docker!();
    let images = Images::build();
    let mut c = Cleanup::default();
    for init in inits(&images.app()) {
        let who = init.0;
        // docker stop: SIGTERM reaches the app; its exit code is the container's.
        let name = start(
            &mut c,
            &init,
            "trap 'exit 42' TERM; echo ready; while :; do sleep 0.1; done",
        );
        assert_eq!(docker(&["stop", &name]).code(), 0);
        assert_eq!(exit_code(&name), 42, "{who}: {}", logs(&name));

        // docker stop -t 1 on an app that ignores SIGTERM: SIGKILL after the timeout.
        let name = start(
            &mut c,
            &init,
            "trap '' TERM; echo ready; while :; do sleep 0.1; done",
        );
        let t = Instant::now();
        assert_eq!(docker(&["stop", "-t", "1", &name]).code(), 0);
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(10),
            "{who}: {took:?}"
        );
        assert_eq!(exit_code(&name), 137, "{who}");

        // docker kill -s HUP: the signal is forwarded.
        let name = start(
            &mut c,
            &init,
            "trap 'echo got HUP; exit 3' HUP; echo ready; while :; do sleep 0.1; done",
        );
        assert_eq!(docker(&["kill", "-s", "HUP", &name]).code(), 0);
        wait_exited(&name);
        assert_eq!(exit_code(&name), 3, "{who}");
        assert!(logs(&name).contains("got HUP"), "{who}");

        // Exit codes, signal deaths included, come through `docker run`.
        for (script, want) in [
            ("exit 0", 0),
            ("exit 1", 1),
            ("kill -KILL $$", 137),
            ("kill -SEGV $$", 139),
        ] {
            let mut args = vec!["run", "--rm"];
            let cmd = shell(&init, script);
            args.extend(strs(&cmd));
            assert_eq!(docker(&args).code(), want, "{who}: {script}");
        }

        // A burst of 1,000 orphans is reaped: the helper exits 0 once PID 1 has no other
        // child left, zombie or alive.
        let app = images.app();
        let args: Vec<&str> = if who == "podvisor" {
            vec!["run", "--rm", &app, "testbin", "orphans", "1000"]
        } else {
            vec![
                "run",
                "--rm",
                "--init",
                "--entrypoint",
                "/bin/testbin",
                &app,
                "orphans",
                "1000",
            ]
        };
        let out = docker(&args);
        assert_eq!(out.code(), 0, "{who}: {out:?}");
    }
}

#[test]
fn podvisors_own_options_in_a_container() {
    require_docker!();
    let images = Images::build();
    let app = images.app();
    let mut c = Cleanup::default();
    let podvisor = |c: &mut Cleanup, opts: &[&str], cmd: &[&str]| {
        let name = c.container("opt");
        let mut args = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--entrypoint",
            "/podvisor",
            &app,
            "init",
        ];
        args.extend(opts);
        args.push("--");
        args.extend(cmd);
        let out = docker(&args);
        assert_eq!(out.code(), 0, "{out:?}");
        name
    };
    // --rewrite TERM:INT: docker stop's SIGTERM reaches the app as SIGINT.
    let name = podvisor(
        &mut c,
        &["--rewrite", "TERM:INT"],
        &["testbin", "signals", "--exit-on", "INT"],
    );
    wait_until("ready", || logs(&name).contains("ready"));
    assert_eq!(docker(&["stop", &name]).code(), 0);
    assert_eq!(exit_code(&name), 0);
    assert!(logs(&name).contains("signal 2 from"), "{}", logs(&name));

    // --stop-delay 1s: SIGTERM is held for a second (time for a load balancer to drain).
    let name = podvisor(
        &mut c,
        &["--stop-delay", "1s"],
        &["testbin", "signals", "--exit-on", "TERM"],
    );
    wait_until("ready", || logs(&name).contains("ready"));
    let t = Instant::now();
    assert_eq!(docker(&["stop", "-t", "10", &name]).code(), 0);
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(exit_code(&name), 0);
    assert!(logs(&name).contains("signal 15 from"));

    // --kill-descendants: when the app exits, what it left gets SIGTERM and time to clean up;
    // without it, PID 1's exit takes the namespace down with SIGKILL.
    let script = "(trap 'echo descendant got TERM; exit 0' TERM; while :; do sleep 0.1; done) & sleep 0.5; exit 5";
    for (opts, cleaned) in [(&["--kill-descendants=5s"][..], true), (&[][..], false)] {
        let name = podvisor(&mut c, opts, &["sh", "-c", script]);
        wait_exited(&name);
        assert_eq!(exit_code(&name), 5);
        assert_eq!(
            logs(&name).contains("descendant got TERM"),
            cleaned,
            "{opts:?}: {}",
            logs(&name)
        );
    }
}

#[test]
fn a_terminal_with_job_control_and_ctrl_c() {
    require_docker!();
    let images = Images::build();
    for (who, run) in [
        ("podvisor", format!("{} sh", images.app())),
        (
            "docker --init",
            format!("--init --entrypoint /bin/sh {}", images.app()),
        ),
    ] {
        // `docker run -it` on a pty (script(1)), as a person at a terminal.
        let cmd = format!("exec docker run -it --rm {run}");
        let mut p = Run::new("script")
            .args(["-qfec", &cmd, "/dev/null"])
            .start();
        let say = |p: &mut Proc, text: &str, then: &str| {
            p.write_stdin(text.as_bytes());
            p.expect_line(then, |l| l.contains(then));
        };
        say(&mut p, "echo hi-$((1+1))\n", "hi-2");
        // Ctrl-C reaches the foreground job, not the shell.
        p.write_stdin(b"sleep 30\n");
        std::thread::sleep(Duration::from_millis(700));
        p.write_stdin(b"\x03");
        say(&mut p, "echo rc-$?\n", "rc-130");
        // Ctrl-Z stops it; `fg` takes it back to the foreground, where Ctrl-C ends it.
        p.write_stdin(b"sleep 31\n");
        std::thread::sleep(Duration::from_millis(700));
        p.write_stdin(b"\x1a");
        p.expect_line("a stopped job", |l| l.contains("Stopped"));
        p.write_stdin(b"fg\n");
        std::thread::sleep(Duration::from_millis(700));
        p.write_stdin(b"\x03");
        say(&mut p, "echo after-fg-$?\n", "after-fg-130");
        p.write_stdin(b"exit 7\n");
        assert_eq!(p.wait().code(), Some(7), "{who}: {:?}", p.stdout);
        p.assert_no_leftovers();
    }
}

/// A Supervision for the staged tests, in a directory to bind-mount.
fn supervision_dir() -> TempDir {
    let dir = TempDir::new();
    std::fs::write(
        dir.file("supervision.yaml"),
        "apiVersion: podvisor.io/v1alpha1\nkind: Supervision\nspec:\n  stagedInstrumentation:\n    env: {AGENT: 'on'}\n    debugEnv: {AGENT_LOG: debug}\n",
    )
    .unwrap();
    dir
}

#[test]
fn staged_instrumentation_across_real_container_restarts() {
    require_docker!();
    let images = Images::build();
    let app = images.app();
    let sup = supervision_dir();
    let mount = format!("{}:/etc/podvisor:ro", sup.file("").display());
    let mut c = Cleanup::default();
    let state = c.volume("state");
    // The image's ENTRYPOINT is `podvisor init --`: `init` gets its options this way.
    let staged = |extra: &[&str], state: &str| -> Output {
        let vol = format!("{state}:/podvisor-state");
        Run::new("docker")
            .args(["run", "--rm", "-v", &vol, "-v", &mount])
            .args(extra)
            .args(["--entrypoint", "/podvisor", &app, "init"])
            .args(["--supervision", "/etc/podvisor/supervision.yaml"])
            .args(["--state-dir", "/podvisor-state", "--", "sh", "-c"])
            .arg("echo $PODVISOR_INSTR_STAGE agent=$AGENT log=$AGENT_LOG")
            .output()
    };
    // (a) A fresh /tmp at each start (a tmpfs), the count in a named volume: 8 starts.
    let seen: Vec<String> = (0..8)
        .map(|_| {
            let out = staged(&["--tmpfs", "/tmp"], &state);
            assert_eq!(out.code(), 0, "{out:?}");
            out.stdout
        })
        .collect();
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
    // (c) /tmp on a named volume, which outlives the containers: never counted, Nominal.
    let state_c = c.volume("state");
    let tmp_c = c.volume("tmp");
    let tmp_mount = format!("{tmp_c}:/tmp");
    for _ in 0..4 {
        assert_eq!(
            staged(&["-v", &tmp_mount], &state_c).stdout,
            "Nominal agent=on log="
        );
    }
    // (d) A read-only root and no /tmp volume: Disabled, with one warning.
    let state_d = c.volume("state");
    let out = staged(&["--read-only"], &state_d);
    assert_eq!(out.stdout, "Disabled agent= log=");
    assert_eq!(
        out.stderr
            .matches("cannot hold the instrumentation lock")
            .count(),
        1,
        "{out:?}"
    );
}

#[test]
fn docker_restart_keeps_tmp_unless_it_is_a_tmpfs() {
    require_docker!();
    let images = Images::build();
    let app = images.app();
    let sup = supervision_dir();
    let mount = format!("{}:/etc/podvisor:ro", sup.file("").display());
    let mut c = Cleanup::default();
    for (tmpfs, counted) in [(false, false), (true, true)] {
        let name = c.container("restart");
        let state = format!("{}:/podvisor-state", c.volume("state"));
        let mut args = vec![
            "create",
            "--name",
            &name,
            "-v",
            &state,
            "-v",
            &mount,
            "--entrypoint",
            "/podvisor",
        ];
        if tmpfs {
            args.extend(["--tmpfs", "/tmp"]);
        }
        args.extend([
            &app[..],
            "init",
            "--supervision",
            "/etc/podvisor/supervision.yaml",
            "--state-dir",
            "/podvisor-state",
            "--",
            "sh",
            "-c",
            "grep -o '\"starts\": [0-9]*' /podvisor-state/podvisor-init.state",
        ]);
        assert_eq!(docker(&args).code(), 0);
        let first = docker(&["start", "-a", &name]).stdout;
        // `docker restart` (and restart policies) start the same container again: its
        // writable layer, /tmp included, is kept, so the lock is still there.
        let second = docker(&["start", "-a", &name]).stdout;
        assert_eq!(first, "\"starts\": 1");
        assert_eq!(
            second,
            if counted {
                "\"starts\": 2"
            } else {
                "\"starts\": 1"
            },
            "tmpfs {tmpfs}"
        );
    }
}

#[test]
fn the_compose_example_escalates_across_restart_on_failure() {
    require_docker!();
    if !have(
        "docker-compose",
        "examples/docker/compose.yaml runs under it",
    ) {
        return;
    }
    let images = Images::build();
    let project = unique("compose").replace('-', "");
    struct Down(String);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = Command::new("docker-compose")
                .current_dir(root().join("examples/docker"))
                .args(["-p", &self.0, "down", "-v", "-t", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
    let _down = Down(project.clone());
    let compose = |args: &[&str]| {
        Run::new("docker-compose")
            .current_dir(root().join("examples/docker"))
            .env("PODVISOR_TAG", &images.tag)
            .args(["-p", &project])
            .args(args)
            .output()
    };
    assert_eq!(compose(&["up", "-d"]).code(), 0);
    let mut lines = Vec::new();
    // Docker's back-off between the 7 starts adds up to 6.3 s; each `docker-compose logs`
    // (Python) costs about half a second of CPU, so it is asked once a second.
    let deadline = Instant::now() + Duration::from_secs(120);
    while lines.len() < 7 {
        assert!(Instant::now() < deadline, "only {lines:?}");
        std::thread::sleep(Duration::from_secs(1));
        lines = compose(&["logs", "--no-color", "app"])
            .stdout
            .lines()
            .filter_map(|l| l.split("start in stage ").nth(1))
            .map(String::from)
            .collect();
    }
    let expected = [
        "Nominal agent=on",
        "Nominal agent=on",
        "Nominal agent=on",
        "Debug agent=on",
        "Debug agent=on",
        "Debug agent=on",
        "Disabled agent=",
    ];
    if lines[..7] != expected {
        // What Docker did, for a failure that has not been seen twice: its containers of the
        // project, their starts, the log with its times, and the count in the volume.
        let containers = docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=com.docker.compose.project={project}"),
            "--format",
            "{{.ID}} {{.Names}} {{.Status}}",
        ]);
        let id = containers.stdout.split(' ').next().unwrap_or_default();
        let inspect = docker(&[
            "inspect",
            "--format",
            "restarts={{.RestartCount}} mounts={{json .Mounts}}",
            id,
        ]);
        let logs = compose(&["logs", "--no-color", "--timestamps", "app"]);
        let count = docker(&[
            "run",
            "--rm",
            "-v",
            &format!("{project}_state:/s"),
            "--entrypoint",
            "/bin/sh",
            &images.app(),
            "-c",
            "ls -la /s; cat /s/podvisor-init.state",
        ]);
        // The long parts first and a summary last: a CI log cut in the middle keeps its end.
        panic!(
            "logs: {logs:?}\ncontainers: {containers:?}\n\
             summary: stages {lines:?}, expected {expected:?}\n\
             summary: {}\nsummary: the volume: {} {}",
            inspect.stdout.trim(),
            count.stdout.trim(),
            count.stderr.trim()
        );
    }
}

#[test]
fn podvisors_own_images_run_under_podvisor_run_as_any_image() {
    require_docker!();
    if !is_root() {
        skip("an image's root is mounted as root");
        return;
    }
    let images = Images::build();
    let app = images.app();
    let dir = TempDir::new();
    let archive = dir.file("app.tar");
    let saved = Run::new("docker")
        .args(["save", "-o"])
        .arg(&archive)
        .arg(&app)
        .output();
    assert_eq!(saved.code(), 0, "{saved:?}");
    let pv = |args: &[&str]| {
        Run::new(podvisor())
            .env("PODVISOR_STATE_BASE", dir.file("base"))
            .args(args)
    };
    let loaded = pv(&["image", "load"]).arg(&archive).output();
    assert_eq!(loaded.code(), 0, "{loaded:?}");
    // The image's ENTRYPOINT is `/podvisor init --`: the args run under podvisor as PID 1 of
    // the container, inside podvisor's pod.
    let manifest = dir.file("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: pid1, annotations: {{podvisor.io/root-from: image}}}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: app\n    image: {app}\n    imagePullPolicy: Never\n    args: [sh, -c, 'echo parent $PPID; exit 3']\n"
        ),
    )
    .unwrap();
    let run = pv(&["run", "-q"]).arg(&manifest).output();
    assert_eq!(run.code(), 1, "{run:?}");
    assert_eq!(pv(&["logs", "pid1", "app"]).output().stdout, "parent 1");
    let pod: serde_json::Value =
        serde_json::from_str(&pv(&["status", "pid1", "-o", "json"]).output().stdout).unwrap();
    let state = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(state["exitCode"], 3, "{pod}");
}
