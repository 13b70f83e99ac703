//! podvisor started as `tini` or `dumb-init`, side by side with the real programs (Debian's
//! packages, installed by .ci/run): same exit codes, same message shapes, same signal routing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::*;
use crate::require_pid_namespace;

fn ours(name: &str) -> PathBuf {
    persona_dir().join(name)
}

/// The real program, or `None` (and a loud skip notice) when it is not installed.
fn real(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from("/usr/bin").join(name);
    if path.exists() {
        Some(path)
    } else {
        skip(&format!(
            "side-by-side part: {name} not installed ({} is missing; apt-get install {name})",
            path.display()
        ));
        None
    }
}

/// Replaces pids (tini's `[WARN  tini (1234)]` and `with pid '1234'`) so that outputs can be
/// compared.
fn normalise(text: &str) -> String {
    let masked = mask_quoted_pids(text);
    let text = masked.as_str();
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(" tini (") {
        let after = &rest[start + 7..];
        match after.find(")]") {
            Some(end) if after[..end].bytes().all(|b| b.is_ascii_digit()) => {
                out.push_str(&rest[..start]);
                out.push_str(" tini (PID)]");
                rest = &after[end + 2..];
            }
            _ => {
                out.push_str(&rest[..start + 7]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `with pid '1234'` and `with pid: '1234'` (tini's INFO and DEBUG lines) with PID.
fn mask_quoted_pids(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("with pid") {
        let quote = match rest[start..].find('\'') {
            Some(q) if q <= "with pid: ".len() => start + q + 1,
            _ => start + "with pid".len(),
        };
        out.push_str(&rest[..quote]);
        rest = &rest[quote..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("PID");
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

fn compare(name: &str, cases: &[&[&str]]) {
    let Some(real) = real(name) else {
        // Without the original, still check that every case runs and exits.
        for args in cases {
            Run::new(ours(name)).args(*args).output();
        }
        return;
    };
    for args in cases {
        let theirs = Run::new(&real).args(*args).output();
        let mine = Run::new(ours(name)).args(*args).output();
        assert_eq!(
            mine.code(),
            theirs.code(),
            "{name} {args:?}: exit code\nours {mine:?}\ntheirs {theirs:?}"
        );
        assert_eq!(
            normalise(&mine.stderr).replace(&*ours(name).to_string_lossy(), "PROG"),
            normalise(&theirs.stderr).replace(&*real.to_string_lossy(), "PROG"),
            "{name} {args:?}: stderr"
        );
        if !args.contains(&"--version") && !args.contains(&"-l") {
            assert_eq!(
                normalise(&mine.stdout),
                normalise(&theirs.stdout),
                "{name} {args:?}: stdout"
            );
        }
    }
}

#[test]
fn tini_command_line_side_by_side() {
    compare(
        "tini",
        &[
            &[],
            &["--", "sh", "-c", "exit 5"],
            &["-e", "5", "--", "sh", "-c", "exit 5"],
            &["-e", "6", "--", "sh", "-c", "exit 5"],
            &["-s", "--", "sh", "-c", "kill -TERM $$"],
            &["--", "/no/such/program"],
            &["--", "/etc/passwd"],
            &["-x", "true"],
            &["-p", "KILL", "true"],
            &["-p", "SIGKILL", "--", "true"],
            &["-e", "300", "true"],
            &["-e"],
            &["-h"],
            &["-s", "sh", "-c", "exit 2"],
            &["-v", "-s", "true", "-s"],
        ],
    );
    let out = Run::new(ours("tini")).arg("--version").output();
    assert_eq!(out.code(), 0);
    assert!(out.stdout.starts_with("tini version 0.19.0"), "{out:?}");
}

/// tini's INFO, DEBUG and TRACE lines (`-v` to `-vvv`, or `TINI_VERBOSITY`) side by side: the
/// subreaper, a signal passed on, each child reaped, how the main child ended (a signal in the
/// C library's words), the loop's end. tini also wakes up each second to say "No child to
/// reap" (podvisor does not wake up for nothing): that line is left out of the comparison, and
/// podvisor's saying it at all must be matched by tini.
#[test]
fn tini_verbose_lines_side_by_side() {
    let Some(real) = real("tini") else {
        return;
    };
    let ignores_usr1 = "trap '' USR1; kill -USR1 $PPID; sleep 0.3; exit 3";
    let cases: [(Option<&str>, &[&str]); 4] = [
        (None, &["-vvv", "-s", "--", "sh", "-c", ignores_usr1]),
        (None, &["-vvv", "-s", "--", "sh", "-c", "kill -TERM $$"]),
        (None, &["-vv", "-s", "-e", "3", "--", "sh", "-c", "exit 3"]),
        (Some("4"), &["-s", "true"]),
    ];
    for (verbosity, args) in cases {
        let run = |init: &Path| {
            let mut run = Run::new(init).args(args);
            if let Some(v) = verbosity {
                run = run.env("TINI_VERBOSITY", v);
            }
            let out = run.output();
            let lines: Vec<String> = normalise(&out.stdout).lines().map(String::from).collect();
            let waited = lines.iter().any(|l| l.ends_with("] No child to reap"));
            let lines: Vec<String> = lines
                .into_iter()
                .filter(|l| !l.ends_with("] No child to reap"))
                .collect();
            (out.code(), normalise(&out.stderr), lines, waited)
        };
        let (mine, theirs) = (run(&ours("tini")), run(&real));
        assert_eq!(
            (mine.0, &mine.1, &mine.2),
            (theirs.0, &theirs.1, &theirs.2),
            "{verbosity:?} {args:?}: ours, then tini's"
        );
        // tini's once-a-second wake-up can add the line on a slow machine, so only ours is
        // held to it: podvisor says it after a turn that found nothing, which tini says too.
        assert!(
            !mine.3 || theirs.3,
            "{verbosity:?} {args:?}: No child to reap"
        );
    }
}

#[test]
fn tini_environment_variables() {
    // TINI_SUBREAPER (any value) makes it reap, so there is no warning.
    let out = Run::new(ours("tini"))
        .env("TINI_SUBREAPER", "")
        .arg("--")
        .arg(testbin())
        .args(["orphans", "100"])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    // TINI_VERBOSITY=0 silences warnings.
    let out = Run::new(ours("tini"))
        .env("TINI_VERBOSITY", "0")
        .args(["--", "true"])
        .output();
    assert!(out.stderr.is_empty(), "{out:?}");
    // TINI_VERBOSITY=2 adds tini's INFO lines on stdout.
    let out = Run::new(ours("tini"))
        .env("TINI_VERBOSITY", "2")
        .args(["-s", "--", "true"])
        .output();
    assert!(
        out.stdout.lines().all(|l| l.starts_with("[INFO  tini (")),
        "{out:?}"
    );
    assert!(!out.stdout.is_empty());
}

#[test]
fn dumb_init_command_line_side_by_side() {
    compare(
        "dumb-init",
        &[
            &[],
            &["sh", "-c", "exit 5"],
            &["/no/such/program"],
            &["-x", "true"],
            &["-r", "99:1", "true"],
            &["-r", "15"],
            &["--rewrite"],
            &["-V"],
            &["--version"],
            &["-h"],
            &["-c", "sh", "-c", "kill -TERM $$"],
            &["--single-child", "--", "sh", "-c", "exit 3"],
            &["--bogus", "true"],
        ],
    );
}

/// dumb-init's debug lines side by side: what `-v` and the environment variables each say at
/// the start, and, as PID 1 with zombies left by the child, nothing after the goodbye
/// (dumb-init leaves as soon as its child is reaped).
#[test]
fn dumb_init_debug_lines_side_by_side() {
    require_pid_namespace!();
    let Some(real) = real("dumb-init") else {
        return;
    };
    const DEBUG: (&str, &str) = ("DUMB_INIT_DEBUG", "1");
    const NO_SETSID: (&str, &str) = ("DUMB_INIT_SETSID", "0");
    /// (environment, options, whether it runs as PID 1 a child that leaves 5 zombies)
    type Case = (
        &'static [(&'static str, &'static str)],
        &'static [&'static str],
        bool,
    );
    let cases: [Case; 5] = [
        (&[], &["-v"], false),
        (&[DEBUG], &[], false),
        (&[NO_SETSID], &["-v"], false),
        (&[DEBUG, NO_SETSID], &[], false),
        (&[], &["-v"], true),
    ];
    for (env, flags, zombies) in cases {
        let lines = |init: &Path| {
            let mut run = match zombies {
                true => Run::pid1(init)
                    .args(flags)
                    .arg(testbin())
                    .args(["zombies", "5"]),
                false => Run::new(init).args(flags).arg("true"),
            };
            for (k, v) in env {
                run = run.env(k, v);
            }
            let out = run.output();
            assert_eq!(out.code(), 0, "{init:?} {env:?} {flags:?}: {out:?}");
            dumb_debug_lines(&out.stderr)
        };
        let (mine, theirs) = (lines(&ours("dumb-init")), lines(&real));
        assert_eq!(
            mine, theirs,
            "{env:?} {flags:?} zombies {zombies}: ours, then dumb-init's"
        );
    }
}

/// Runs `init testbin signals ... --spawn-peer`, sends USR1 then USR2 (which ends the child) to
/// the init, and returns (what the child recorded, what the peer recorded) once they match
/// `want` or a few seconds have passed, with, if `lines`, dumb-init's debug lines the init
/// printed (as `dumb_debug_lines` gives them; collecting them waits for the init's stderr to
/// fall quiet).
fn route(
    init: &Path,
    flags: &[&str],
    env: &[(&str, &str)],
    want: &(Vec<i32>, Vec<i32>),
    lines: bool,
) -> ((Vec<i32>, Vec<i32>), Vec<String>) {
    let dir = TempDir::new();
    let (main, peer) = (dir.file("main"), dir.file("peer"));
    let mut run = Run::new(init).args(flags);
    for (k, v) in env {
        run = run.env(k, v);
    }
    let mut p = run
        .arg(testbin())
        .args(["signals", "--exit-on", "USR2", "--out"])
        .arg(&main)
        .arg("--spawn-peer")
        .arg(&peer)
        .start();
    wait_for_file_line(&main, "ready", |l| l == "ready");
    p.signal("USR1");
    wait_for_file_line(&main, "USR1", |l| {
        l.starts_with("signal 10 ") || l.starts_with("signal 12 ")
    });
    // Unless the first signal already ended the child (rewritten to USR2), end it now. (Not
    // `p.running()`: the init may not have noticed the exit yet, and a second USR2 would reach
    // the peer.)
    if !recorded_signals(&main).contains(&12) {
        p.signal("USR2");
    }
    p.wait();
    let deadline = Instant::now() + Duration::from_secs(3);
    let got = loop {
        let got = (recorded_signals(&main), recorded_signals(&peer));
        if &got == want || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let lines = if lines {
        p.drain();
        dumb_debug_lines(&p.stderr.join("\n"))
    } else {
        Vec::new()
    };
    drop(p);
    (got, lines)
}

/// Flags, environment, and what (the child, its peer) should record.
type RoutingCase<'a> = (
    &'a [&'a str],
    &'a [(&'a str, &'a str)],
    (Vec<i32>, Vec<i32>),
);

#[test]
fn dumb_init_signal_routing_side_by_side() {
    let mine = ours("dumb-init");
    let real = real("dumb-init");
    let cases: &[RoutingCase] = &[
        // setsid mode: signals go to the whole group, and when the child exits the group gets
        // SIGTERM.
        (&[], &[], (vec![10, 12], vec![10, 12, 15])),
        // single-child mode: the child alone; the group's SIGTERM goes to the (dead) child.
        (&["-c"], &[], (vec![10, 12], vec![])),
        (&[], &[("DUMB_INIT_SETSID", "0")], (vec![10, 12], vec![])),
        // rewriting USR1 to USR2 makes the first signal end the child.
        (&["-r", "10:12"], &[], (vec![12], vec![12, 15])),
        // The same with `-v`: each signal received, translated and forwarded, in dumb-init's
        // words.
        (&["-v"], &[], (vec![10, 12], vec![10, 12, 15])),
        (&["-v", "-r", "10:12"], &[], (vec![12], vec![12, 15])),
    ];
    for (flags, env, want) in cases {
        let (got, lines) = route(&mine, flags, env, want, true);
        assert_eq!(&got, want, "ours, flags {flags:?} env {env:?}");
        if flags.contains(&"-v") {
            let forwarded = "[dumb-init] Forwarded signal 12 to children.";
            assert!(lines.iter().any(|l| l == forwarded), "{lines:?}");
        }
        if let Some(real) = &real {
            let (theirs, their_lines) = route(real, flags, env, want, true);
            assert_eq!(
                theirs, got,
                "dumb-init and ours differ for flags {flags:?} env {env:?}"
            );
            assert_eq!(
                lines, their_lines,
                "debug lines, flags {flags:?} env {env:?}: ours, then dumb-init's"
            );
        }
    }
}

#[test]
fn tini_signal_routing_side_by_side() {
    let mine = ours("tini");
    let real = real("tini");
    let cases: &[RoutingCase] = &[
        (&["-s", "--"], &[], (vec![10, 12], vec![])),
        (&["-s", "-g", "--"], &[], (vec![10, 12], vec![10, 12])),
        (
            &["-s", "--"],
            &[("TINI_KILL_PROCESS_GROUP", "1")],
            (vec![10, 12], vec![10, 12]),
        ),
    ];
    for (flags, env, want) in cases {
        let (got, _) = route(&mine, flags, env, want, false);
        assert_eq!(&got, want, "ours, flags {flags:?} env {env:?}");
        if let Some(real) = &real {
            let (theirs, _) = route(real, flags, env, want, false);
            assert_eq!(
                theirs, got,
                "tini and ours differ for flags {flags:?} env {env:?}"
            );
        }
    }
}

/// `sh -c SCRIPT` to completion, in `dir`.
fn shell_in(dir: &Path, script: &str) -> Output {
    Run::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
}

/// PIDs in dumb-init's debug lines masked, lines sorted: the child's lines and the parent's
/// interleave differently from run to run (and between a fork and our vfork-style clone).
fn dumb_debug_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("[dumb-init]"))
        .map(|l| {
            // The word after "PID" is a pid (of any length), never a signal number.
            let words: Vec<&str> = l.split(' ').collect();
            let masked: Vec<&str> = (0..words.len())
                .map(|i| match i > 0 && words[i - 1] == "PID" {
                    true => "N",
                    false => words[i],
                })
                .collect();
            masked.join(" ")
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn dumb_init_on_a_terminal_side_by_side() {
    let dir = TempDir::new();
    let inits: Vec<PathBuf> = std::iter::once(ours("dumb-init"))
        .chain(real("dumb-init"))
        .collect();
    let mut seen = Vec::new();
    for init in &inits {
        let init = init.display();
        // `exec`: the init must lead the pty's session, as under `docker run -it`; script(1)
        // runs the command with `$SHELL -c`, and /bin/sh (CI, no SHELL) forks first.
        // On a terminal (script(1)): the terminal hand-off's SIGHUP and SIGCONT are not the
        // child's, so `tac` reads its input and reverses it.
        let out = shell_in(
            &dir.file(""),
            &format!(
                "printf 'hello\\nworld\\n' | DUMB_INIT_DEBUG=1 script -qfec 'exec {init} tac' /dev/null"
            ),
        );
        let text: Vec<&str> = out
            .stdout
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .collect();
        let output: Vec<&str> = text
            .iter()
            .copied()
            .filter(|l| !l.starts_with('['))
            .collect();
        assert_eq!(
            output,
            ["hello", "world", "world", "hello"],
            "{init}: {out:?}"
        );
        assert_eq!(out.code(), 0, "{init}");
        let debug = dumb_debug_lines(&out.stdout.replace('\r', ""));
        assert!(
            debug.contains(&"[dumb-init] Ignoring tty hand-off signal 1.".to_string()),
            "{init}: {debug:#?}"
        );
        // Job control works in the child's session, and dumb-init leaves its directory.
        let jobs = shell_in(
            &dir.file(""),
            &format!("script -qfec \"exec {init} bash -m -c 'echo flags=\\$-; sleep 0.1 & jobs; wait'\" /dev/null"),
        );
        let cwd = shell_in(
            &dir.file(""),
            // dumb-init moves after starting the child: wait for it (at most 5 s).
            &format!("{init} sh -c 'for i in $(seq 100); do d=$(readlink /proc/$PPID/cwd); [ \"$d\" = / ] && break; sleep 0.05; done; echo $d'"),
        );
        seen.push((
            debug,
            jobs.stdout.replace('\r', ""),
            jobs.code(),
            cwd.stdout,
        ));
    }
    assert!(seen[0].1.contains("flags=hmBc"), "{:?}", seen[0]);
    assert_eq!(seen[0].3, "/");
    if seen.len() == 2 {
        assert_eq!(seen[0], seen[1], "ours, then dumb-init's");
    }
}

#[test]
fn tini_and_podvisor_init_on_a_terminal_side_by_side() {
    let dir = TempDir::new();
    let mut runs: Vec<(String, String)> = vec![
        (ours("tini").display().to_string(), "-s --".into()),
        (podvisor().display().to_string(), "init -s --".into()),
    ];
    if let Some(tini) = real("tini") {
        runs.push((tini.display().to_string(), "-s --".into()));
    }
    let mut seen = Vec::new();
    for (init, args) in &runs {
        // The child's group is the terminal's foreground: bash -m has job control.
        let jobs = shell_in(
            &dir.file(""),
            &format!("script -qfec \"exec {init} {args} bash -m -c 'echo flags=\\$-; sleep 0.1 & jobs; wait'\" /dev/null"),
        );
        let tac = shell_in(
            &dir.file(""),
            &format!("printf 'a\\nb\\n' | script -qfec 'exec {init} {args} tac' /dev/null"),
        );
        seen.push((
            jobs.stdout.replace('\r', ""),
            jobs.code(),
            tac.stdout.replace('\r', ""),
            tac.code(),
        ));
    }
    assert!(
        seen[0].0.contains("flags=hmBc") && seen[0].0.contains("Done"),
        "{:?}",
        seen[0]
    );
    assert_eq!(seen[0].2, "a\nb\nb\na");
    for (i, s) in seen.iter().enumerate().skip(1) {
        assert_eq!(s, &seen[0], "{} differs from ours", runs[i].0);
    }
}
