//! `podvisor exec` through the binary: a command in a running container with the
//! container's identity, namespaces and environment (read back from `/proc/self/status`
//! beside its main process's), its exit code as kubectl gives it, stdin with `-i`, the
//! default container, clear refusals, and a command that goes with its client or its pod.

use crate::harness::*;
use crate::probes::stop;

/// Two sleeping containers; `app` runs as 1000:1000 with no capabilities, no_new_privs and
/// the runtime's default seccomp profile, in a root of its own (its own PID namespace).
fn pod() -> String {
    "apiVersion: v1\nkind: Pod\nmetadata: {name: ex, namespace: ns, annotations: {podvisor.io/root-from: host}}\nspec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 1000, runAsGroup: 1000}
  containers:
  - name: app
    command: [sleep, '600']
    env: [{name: GREETING, value: hello}]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
      seccompProfile: {type: RuntimeDefault}
  - name: side
    command: [sleep, '600']
"
    .to_string()
}

/// The identity lines of a status file, as field → value.
fn identity(lines: &[&str]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| {
            ["Uid", "Gid", "Groups", "Cap", "NoNewPrivs", "Seccomp:"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn exec_runs_as_the_container_and_answers_as_kubectl() {
    if !is_root() {
        skip("setting users and private roots need root");
        return;
    }
    let r = PodRun::new(&pod());
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    r.wait_event("side", "Started", 1);
    // (`client` puts --state-dir last: here that is after `--`.)
    let exec = |args: &[&str]| {
        Run::new(podvisor())
            .arg("exec")
            .arg("--state-dir")
            .arg(r.dir.file("state"))
            .args(args)
            .output()
    };
    // What the command sees is what the container's main process (its PID 1) has.
    let out = exec(&[
        "-c",
        "app",
        "--",
        "sh",
        "-c",
        "cat /proc/self/status; echo ==; cat /proc/1/status; echo ==; echo $GREETING $(hostname) $(id -u):$(id -g); exit 3",
    ]);
    assert_eq!(out.code(), 3, "{out:?}");
    assert_eq!(out.stderr.trim(), "command terminated with exit code 3");
    let parts: Vec<Vec<&str>> = out
        .stdout
        .split("==\n")
        .map(|p| p.lines().collect())
        .collect();
    let (ours, main) = (identity(&parts[0]), identity(&parts[1]));
    assert_eq!(ours, main, "exec'd beside the main process");
    assert!(
        ours.contains(&"Uid: 1000 1000 1000 1000".to_string()),
        "{ours:?}"
    );
    assert!(
        ours.contains(&"CapBnd: 0000000000000000".to_string()),
        "{ours:?}"
    );
    assert!(ours.contains(&"NoNewPrivs: 1".to_string()), "{ours:?}");
    assert!(ours.contains(&"Seccomp: 2".to_string()), "{ours:?}");
    assert!(main.iter().any(|l| l.starts_with("Uid")));
    assert_eq!(parts[2], ["hello ex 1000:1000"]);

    // The command is in the container's mount namespace (its root and mounts). The run
    // joins it through the container's process and holds no descriptor on the namespace:
    // it goes with the container's processes, as under runc.
    let out = exec(&[
        "-c",
        "app",
        "--",
        "readlink",
        "/proc/self/ns/mnt",
        "/proc/1/ns/mnt",
    ]);
    let links: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(links.len(), 2, "{out:?}");
    assert_eq!(
        links[0], links[1],
        "exec'd in the main process's mount namespace"
    );
    let own = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    assert_ne!(
        links[0],
        own.to_str().unwrap(),
        "a mount namespace of its own"
    );
    let held: Vec<_> = std::fs::read_dir(format!("/proc/{}/fd", p.init_pid()))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|link| link.to_string_lossy().starts_with("mnt:"))
        .collect();
    assert!(held.is_empty(), "the run holds mount namespaces: {held:?}");

    // -i: this command's stdin; the pod named as kubectl names it.
    let mut piped = Run::new(podvisor())
        .args(["exec", "-i", "-c", "side", "ns/ex", "--state-dir"])
        .arg(r.dir.file("state"))
        .args(["--", "sh", "-c", "tr a-z A-Z"])
        .start();
    piped.write_stdin(b"through stdin\n");
    piped.close_stdin();
    assert_eq!(piped.wait().code(), Some(0));
    piped.drain();
    assert_eq!(piped.stdout, ["THROUGH STDIN"]);
    // Without -i the command reads /dev/null.
    let out = exec(&["-c", "side", "--", "cat"]);
    assert_eq!((out.code(), out.stdout.as_str()), (0, ""), "{out:?}");

    // kubectl's default container, said on stderr.
    let out = exec(&["--", "true"]);
    assert_eq!(out.code(), 0);
    assert_eq!(
        out.stderr.trim(),
        "Defaulted container \"app\" out of: app, side"
    );

    // Refusals name what exists.
    let out = exec(&["-c", "nope", "--", "true"]);
    assert_eq!(out.code(), 1);
    assert_eq!(
        out.stderr.trim(),
        "error: no container \"nope\" in pod ex; its containers: app, side"
    );
    let out = exec(&["other", "--", "true"]);
    assert_eq!(out.code(), 1);
    assert_eq!(
        out.stderr.trim(),
        format!(
            "error: pods \"other\" not found in {}: it holds ns/ex",
            r.dir.file("state").display()
        )
    );
    let out = exec(&["-c", "side", "--", "/nonexistent/cmd"]);
    assert_eq!(out.code(), 127, "{out:?}");
    assert!(out.stderr.contains("no such file or directory"), "{out:?}");
    let out = exec(&["-c", "side", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.code(), 137);

    // A client that goes away takes its command with it.
    let mut c = Run::new(podvisor())
        .args(["exec", "-c", "side", "--state-dir"])
        .arg(r.dir.file("state"))
        .args(["--", "sleep", "987.25"])
        .start();
    let running = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|c| c == b"sleep\x00987.25\x00")
    };
    wait_until("the exec'd sleep", running);
    c.signal("KILL");
    c.wait();
    wait_until("the exec'd sleep to go", || !running());
    stop(&mut p);
}

#[test]
fn exec_with_a_terminal_gives_the_command_one_of_its_own_in_the_container() {
    if !is_root() {
        skip("setting users and private roots need root");
        return;
    }
    if !have("tmux", "podvisor exec -it runs in a real terminal (tmux)") {
        return;
    }
    let r = PodRun::new(&pod());
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    // What exec leaves behind in the outer terminal: its exit code and whether the terminal
    // is back in canonical mode.
    let cmd = format!(
        "{} exec -it -c app --state-dir {} -- sh; echo exit=$?; stty -a | grep -o -- '-*icanon'; sleep 600",
        podvisor().display(),
        r.dir.file("state").display()
    );
    let t = crate::top::Tmux::command(100, 30, &cmd);
    t.wait("the container's shell", |s| s.starts_with('$'));
    t.type_text("tty; stty size; echo $TERM; echo $((6*7)); id -u");
    t.keys(&["Enter"]);
    let screen = t.wait("the answers", |s| s.contains("\n1000\n"));
    // A terminal of the container's own /dev, of this terminal's size, as CRI's exec gives.
    for want in ["\n/dev/pts/0\n", "\n30 100\n", "\nxterm\n", "\n42\n"] {
        assert!(screen.contains(want), "{want:?} in\n{screen}");
    }
    // Its size follows this one's; Ctrl-C reaches its foreground job, not exec.
    t.tmux(&["resize-window", "-t", "top", "-x", "80", "-y", "20"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    t.type_text("stty size; sleep 600");
    t.keys(&["Enter"]);
    t.wait("the new size", |s| s.contains("\n20 80\n"));
    t.keys(&["C-c"]);
    // Typed once the shell is back at its prompt: typed before, a loaded machine may show the
    // answer on the prompt's line, or the shell may drop the line with the interrupt.
    t.wait("the prompt after Ctrl-C", |s| s.trim_end().ends_with('$'));
    t.type_text("echo after; exit 3");
    t.keys(&["Enter"]);
    let screen = t.wait("exec's end", |s| s.contains("icanon"));
    assert!(screen.contains("\nafter"), "{screen}");
    assert!(
        screen.contains("command terminated with exit code 3") && screen.contains("exit=3"),
        "{screen}"
    );
    assert!(!screen.contains("-icanon"), "{screen}");
    drop(t);
    stop(&mut p);
}

#[test]
fn exec_it_without_a_terminal_says_so_and_runs_without_one() {
    if !is_root() {
        skip("setting users and private roots need root");
        return;
    }
    let r = PodRun::new(&pod());
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    let out = Run::new(podvisor())
        .args(["exec", "-it", "--state-dir"])
        .arg(r.dir.file("state"))
        .args(["--", "sh", "-c", "test -t 0 || echo no terminal"])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stderr
            .contains("Unable to use a TTY - input is not a terminal or the right kind of file"),
        "{out:?}"
    );
    assert!(out.stdout.starts_with("no terminal"), "{out:?}");
    stop(&mut p);
}
