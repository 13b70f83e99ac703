//! `podvisor init` through the binary: as PID 1 of a fresh PID namespace and as a plain child.

use std::time::{Duration, Instant};

use crate::harness::*;
use crate::require_pid_namespace;

fn init() -> Run {
    Run::new(podvisor()).arg("init")
}

fn init_pid1() -> Run {
    Run::pid1(podvisor()).arg("init")
}

/// Signals that every init forwards: all catchable ones but those tini keeps for itself (the
/// fault signals, and SIGTTIN/SIGTTOU, which it ignores) and SIGCHLD.
fn forwardable() -> Vec<i32> {
    let not_forwarded = [4, 5, 6, 7, 8, 9, 11, 17, 19, 21, 22, 31];
    let mut sigs: Vec<i32> = (1..=31).filter(|s| !not_forwarded.contains(s)).collect();
    // A few real-time signals too (SIGRTMIN is 34 under glibc).
    sigs.extend([34, 40, 64]);
    sigs
}

#[test]
fn reaps_thousands_of_orphans_as_pid1() {
    require_pid_namespace!();
    let out = init_pid1()
        .arg("--")
        .arg(testbin())
        .args(["orphans", "3000"])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("all 3000 orphans reaped"), "{out:?}");
}

#[test]
fn reaps_orphans_as_subreaper() {
    let out = init()
        .arg("-s")
        .arg(testbin())
        .args(["orphans", "500"])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout.contains("all 500 orphans reaped"), "{out:?}");
    assert!(
        !out.stderr.contains("warning"),
        "a subreaper has nothing to warn about: {out:?}"
    );

    // The environment variable does the same.
    let out = init()
        .env("PODVISOR_SUBREAPER", "1")
        .arg(testbin())
        .args(["orphans", "50"])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
}

#[test]
fn warns_once_when_it_cannot_reap() {
    let out = init().arg("true").output();
    assert_eq!(out.code(), 0);
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{out:?}");
    assert!(
        warnings[0].contains("not PID 1 and not a child subreaper"),
        "{out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "a single line: {out:?}");
}

#[test]
fn warns_on_each_adopted_zombie_with_w() {
    require_pid_namespace!();
    let out = init_pid1()
        .args(["-w", "--"])
        .arg(testbin())
        .args(["orphans", "5"])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
    let reaped = out
        .stderr
        .lines()
        .filter(|l| l.contains("reaped adopted zombie"))
        .count();
    assert_eq!(reaped, 5, "{out:?}");
}

fn check_every_signal_reaches_the_child(pid1: bool) {
    let dir = TempDir::new();
    let rec = dir.file("rec");
    let run = if pid1 { init_pid1() } else { init() };
    let p = run
        .arg("-s")
        .arg(testbin())
        .args(["signals", "--exit-on", "USR2", "--out"])
        .arg(&rec)
        .start();
    wait_for_file_line(&rec, "ready", |l| l == "ready");
    let mut want = Vec::new();
    for sig in forwardable().into_iter().filter(|&s| s != 12) {
        p.signal(&sig.to_string());
        // One at a time: standard signals of one number coalesce if sent faster than read.
        wait_for_file_line(&rec, &format!("signal {sig}"), |l| {
            l.starts_with(&format!("signal {sig} "))
        });
        want.push(sig);
    }
    p.signal("USR2");
    let mut p = p;
    assert!(p.wait().success());
    want.push(12);
    assert_eq!(recorded_signals(&rec), want);
    p.assert_no_leftovers();
}

#[test]
fn forwards_every_signal_as_pid1() {
    require_pid_namespace!();
    check_every_signal_reaches_the_child(true);
}

#[test]
fn forwards_every_signal_as_a_plain_child() {
    check_every_signal_reaches_the_child(false);
}

#[test]
fn forwards_to_the_process_group_with_g() {
    for (flags, env, group) in [
        (&["-g"][..], None, true),
        (&[][..], Some(("PODVISOR_KILL_PROCESS_GROUP", "1")), true),
        (&[][..], Some(("TINI_KILL_PROCESS_GROUP", "")), true),
        (&[][..], None, false),
    ] {
        let dir = TempDir::new();
        let (main, peer) = (dir.file("main"), dir.file("peer"));
        let mut run = init().args(flags);
        if let Some((k, v)) = env {
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
        wait_for_file_line(&main, "USR1", |l| l.starts_with("signal 10 "));
        p.signal("USR2");
        assert!(p.wait().success());
        if group {
            wait_for_file_line(&peer, "USR1 at the peer", |l| l.starts_with("signal 10 "));
            // The peer took USR2 too (it records, it does not exit on it): gone with the group.
        } else {
            assert!(
                recorded_signals(&peer).is_empty(),
                "{flags:?} {env:?}: peer got {:?}",
                recorded_signals(&peer)
            );
        }
        drop(p);
    }
}

#[test]
fn exit_codes_pass_through() {
    // Every exit code, in one init per code: 0..=255.
    let script = "for c in $(seq 0 255); do \"$0\" init -q -- sh -c \"exit $c\"; r=$?; [ $r = $c ] || { echo \"exit $c gave $r\"; exit 1; }; done; echo all";
    let out = Run::new("sh").args(["-c", script]).arg(podvisor()).output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "all", "{out:?}");
}

#[test]
fn death_by_signal_is_128_plus_n() {
    for (sig, code) in [
        ("TERM", 143),
        ("KILL", 137),
        ("INT", 130),
        ("SEGV", 139),
        ("USR1", 138),
    ] {
        let out = init()
            .args(["-q", "--"])
            .arg(testbin())
            .args(["die", sig])
            .output();
        assert_eq!(out.code(), code, "{sig}: {out:?}");
    }
}

#[test]
fn expected_codes_map_to_zero() {
    let out = init()
        .args(["-q", "-e", "3", "-e", "143", "--", "sh", "-c", "exit 3"])
        .output();
    assert_eq!(out.code(), 0);
    let out = init()
        .args(["-q", "-e143", "--"])
        .arg(testbin())
        .args(["die", "TERM"])
        .output();
    assert_eq!(out.code(), 0);
    let out = init()
        .args(["-q", "-e", "3", "--", "sh", "-c", "exit 4"])
        .output();
    assert_eq!(out.code(), 4);
}

#[test]
fn command_not_found_and_not_executable() {
    let out = init().args(["-q", "--", "/no/such/program"]).output();
    assert_eq!(out.code(), 127, "{out:?}");
    assert!(out.stderr.starts_with("error: "), "{out:?}");
    assert!(out.stderr.contains("No such file or directory"), "{out:?}");
    let dir = TempDir::new();
    let script = dir.file("not-executable");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let out = init().args(["-q", "--"]).arg(&script).output();
    assert_eq!(out.code(), 126, "{out:?}");
    assert!(out.stderr.contains("Permission denied"), "{out:?}");
}

#[test]
fn usage_errors_exit_2_with_one_error_line() {
    for args in [
        &[][..],
        &["--bogus", "true"][..],
        &["-e", "x", "true"][..],
        &["-p"][..],
    ] {
        let out = init().args(args).output();
        assert_eq!(out.code(), 2, "{args:?}: {out:?}");
        assert_eq!(
            out.stderr
                .lines()
                .filter(|l| l.starts_with("error:"))
                .count(),
            1,
            "{out:?}"
        );
    }
    let out = Run::new(podvisor()).arg("frobnicate").output();
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr
            .starts_with("error: unrecognized subcommand 'frobnicate'"),
        "{out:?}"
    );
}

#[test]
fn parent_death_signal_is_delivered() {
    let dir = TempDir::new();
    let rec = dir.file("rec");
    // sh starts init in the background and exits once the child is ready: init's parent dies
    // and -p makes the kernel send it USR1, which it forwards to the child.
    let script = r#"
        "$1" init -q -s -p USR1 -- "$2" signals --exit-on USR1 --out "$3" &
        while ! grep -qx ready "$3" 2>/dev/null; do sleep 0.01; done
    "#;
    let out = Run::new("sh")
        .args(["-c", script, "sh"])
        .arg(podvisor())
        .arg(testbin())
        .arg(&rec)
        .output();
    assert!(out.status.success(), "{out:?}");
    let lines = wait_for_file_line(&rec, "USR1", |l| l.starts_with("signal 10 "));
    assert!(
        lines.iter().any(|l| l.starts_with("signal 10 ")),
        "{lines:?}"
    );
}

#[test]
fn a_child_that_ignores_sigterm_keeps_running() {
    let dir = TempDir::new();
    let rec = dir.file("rec");
    let mut p = init()
        .args(["-q", "--"])
        .arg(testbin())
        .args(["signals", "--ignore", "TERM", "--exit-on", "INT", "--out"])
        .arg(&rec)
        .start();
    wait_for_file_line(&rec, "ready", |l| l == "ready");
    p.signal("TERM");
    // SIGTERM is forwarded and ignored; the next signal proves both are still alive.
    p.signal("HUP");
    wait_for_file_line(&rec, "HUP", |l| l.starts_with("signal 1 "));
    assert!(p.running());
    assert!(!recorded_signals(&rec).contains(&15));
    p.signal("INT");
    assert_eq!(p.wait().code(), Some(0));
    p.assert_no_leftovers();
}

#[test]
fn rewrites_and_drops_signals() {
    let dir = TempDir::new();
    let rec = dir.file("rec");
    let mut p = init()
        .args([
            "-q",
            "--rewrite",
            "TERM:QUIT",
            "--rewrite",
            "USR1:none",
            "--rewrite",
            "HUP:12",
            "--",
        ])
        .arg(testbin())
        .args(["signals", "--exit-on", "USR2", "--out"])
        .arg(&rec)
        .start();
    wait_for_file_line(&rec, "ready", |l| l == "ready");
    p.signal("TERM");
    wait_for_file_line(&rec, "QUIT", |l| l.starts_with("signal 3 "));
    p.signal("USR1");
    p.signal("HUP");
    assert_eq!(p.wait().code(), Some(0));
    // USR1 was dropped; HUP arrived as USR2 and ended the child.
    assert_eq!(recorded_signals(&rec), vec![3, 12]);
}

#[test]
fn stop_delay_holds_sigterm() {
    let dir = TempDir::new();
    let rec = dir.file("rec");
    let mut p = init()
        .args(["-q", "--stop-delay", "1s", "--"])
        .arg(testbin())
        .args(["signals", "--exit-on", "TERM", "--out"])
        .arg(&rec)
        .start();
    wait_for_file_line(&rec, "ready", |l| l == "ready");
    let sent = Instant::now();
    p.signal("TERM");
    // Other signals are not held.
    p.signal("USR1");
    wait_for_file_line(&rec, "USR1", |l| l.starts_with("signal 10 "));
    assert!(
        !recorded_signals(&rec).contains(&15),
        "SIGTERM came before the delay"
    );
    assert_eq!(p.wait().code(), Some(0));
    assert!(
        sent.elapsed() >= Duration::from_millis(950),
        "forwarded after {:?}",
        sent.elapsed()
    );
    assert_eq!(recorded_signals(&rec), vec![10, 15]);
}

#[test]
fn a_second_stop_signal_cuts_the_delay_short() {
    let dir = TempDir::new();
    let rec = dir.file("rec");
    let mut p = init()
        .args(["-v", "--stop-delay", "60s", "--"])
        .arg(testbin())
        .args(["signals", "--exit-on", "INT", "--out"])
        .arg(&rec)
        .start();
    wait_for_file_line(&rec, "ready", |l| l == "ready");
    p.signal("TERM");
    // INT only once TERM is held: two signals pending at once are read lowest number first
    // (INT before TERM), whatever order they were sent in.
    p.expect_line("holding SIGTERM", |l| l.contains("holding SIGTERM"));
    p.signal("INT");
    // The 60 s delay would outlast PATIENCE: exiting at all proves INT went through at once.
    assert_eq!(p.wait().code(), Some(0));
    assert_eq!(recorded_signals(&rec), vec![2]);
}

#[test]
fn kill_descendants_terminates_then_kills_what_remains() {
    let dir = TempDir::new();
    let stubborn = dir.file("stubborn");
    let polite = dir.file("polite");
    // The main child leaves two descendants behind: one that exits on SIGTERM and one that
    // ignores it, and exits 3.
    let script = r#"
        "$1" signals --ignore TERM --out "$2" &
        "$1" signals --exit-on TERM --out "$3" &
        while ! grep -qx ready "$2" 2>/dev/null || ! grep -qx ready "$3" 2>/dev/null; do sleep 0.01; done
        exit 3
    "#;
    let started = Instant::now();
    let out = init()
        .args([
            "-q",
            "--kill-descendants=1s",
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(testbin())
        .arg(&stubborn)
        .arg(&polite)
        .output();
    assert_eq!(out.code(), 3, "{out:?}");
    assert!(
        recorded_signals(&polite).contains(&15),
        "the polite one got SIGTERM"
    );
    // The stubborn one ignored SIGTERM (and recorded the SIGCONT that follows it).
    assert_eq!(recorded_signals(&stubborn), vec![18]);
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "SIGKILL came before the grace"
    );
    // `output()` has already checked that nothing is left.
}

#[test]
fn kill_descendants_as_pid1() {
    require_pid_namespace!();
    let out = init_pid1()
        .args([
            "-q",
            "--kill-descendants",
            "--",
            "sh",
            "-c",
            "sleep 100 & sleep 100 & exit 0",
        ])
        .output();
    assert_eq!(out.code(), 0, "{out:?}");
}

#[test]
fn wait_all_waits_for_every_descendant() {
    let started = Instant::now();
    let out = init()
        .args([
            "-q",
            "--wait-all",
            "--",
            "sh",
            "-c",
            "(sleep 1; exit 9) & exit 4",
        ])
        .output();
    // The main child's code, after the orphan's second.
    assert_eq!(out.code(), 4, "{out:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "exited after {:?}",
        started.elapsed()
    );
}

#[test]
fn wait_all_forwards_signals_to_descendants() {
    let dir = TempDir::new();
    let rec = dir.file("rec");
    let script = r#"
        "$1" signals --exit-on TERM --out "$2" &
        while ! grep -qx ready "$2" 2>/dev/null; do sleep 0.01; done
        exit 0
    "#;
    let mut p = init()
        .args(["-q", "--wait-all", "--", "sh", "-c", script, "sh"])
        .arg(testbin())
        .arg(&rec)
        .start();
    wait_for_file_line(&rec, "ready", |l| l == "ready");
    // Once the main child is gone, the recorder is init's only child (adopted, as subreaper).
    let init_pid = p.init_pid();
    wait_until("the main child is gone", || {
        let kids = children_of(init_pid);
        kids.len() == 1 && kids[0].1.starts_with("podvisor-testbi")
    });
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(0));
    assert_eq!(recorded_signals(&rec), vec![15]);
}

/// The SigBlk and SigIgn lines of a testbin `report`.
fn mask_and_ignored(out: &Output) -> (String, String) {
    let field = |name: &str| {
        let line = out.stdout.lines().find(|l| l.starts_with(name));
        line.unwrap_or_else(|| panic!("no {name} in {out:?}"))
            .to_string()
    };
    (field("SigBlk"), field("SigIgn"))
}

#[test]
fn the_child_gets_back_the_inherited_mask_and_dispositions() {
    // The testbin blocks USR1 and ignores USR2, PIPE and XFSZ, then execs its arguments: the
    // child must see the same with podvisor init in between as without it, not podvisor's own
    // mask or its ignored SIGTTIN/SIGTTOU.
    let direct = Run::new(testbin())
        .arg("masked")
        .arg(testbin())
        .arg("report")
        .output();
    let through = Run::new(testbin())
        .arg("masked")
        .arg(podvisor())
        .args(["init", "-q", "--"])
        .arg(testbin())
        .arg("report")
        .output();
    assert_eq!(through.code(), 0, "{through:?}");
    let (blocked, ignored) = mask_and_ignored(&through);
    assert_eq!(
        (blocked.as_str(), ignored.clone()),
        ("SigBlk 0000000000000200", mask_and_ignored(&direct).1)
    );
    // The dumb-init persona, which starts its child another way (a new session), too.
    let dumb = Run::new(testbin())
        .arg("masked")
        .arg(persona_dir().join("dumb-init"))
        .arg(testbin())
        .arg("report")
        .output();
    assert_eq!(
        mask_and_ignored(&dumb),
        mask_and_ignored(&through),
        "{dumb:?}"
    );
    let ign = u64::from_str_radix(ignored.split_whitespace().nth(1).unwrap(), 16).unwrap();
    let bit = |sig: u32| 1u64 << (sig - 1);
    assert_eq!(ign & (bit(12) | bit(13)), bit(12) | bit(13), "{through:?}");

    // And from this test process too: whatever it passes on arrives unchanged.
    let direct = Run::new(testbin()).arg("report").output();
    let through = init()
        .args(["-q", "--"])
        .arg(testbin())
        .arg("report")
        .output();
    assert_eq!(mask_and_ignored(&through), mask_and_ignored(&direct));
    assert_eq!(mask_and_ignored(&through).0, "SigBlk 0000000000000000");
}

#[test]
fn the_child_leads_its_own_process_group() {
    let out = init()
        .args(["-q", "--"])
        .arg(testbin())
        .arg("report")
        .output();
    let ids: Vec<i32> = out
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let (pid, pgid) = (ids[0], ids[2]);
    assert_eq!(pid, pgid, "{out:?}");
}

/// Runs `podvisor init` on a pseudo-terminal with script(1), whose stdin we write to. `exec`
/// makes it the session leader of the pty whatever shell script(1) runs it with (`$SHELL`, or
/// `/bin/sh` when unset, which forks first).
fn on_a_terminal(args: &str) -> Run {
    Run::new("script").args(["-q", "-e", "-c", &format!("exec {args}"), "/dev/null"])
}

fn have_script() -> bool {
    std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn on_a_terminal_the_child_owns_the_foreground_and_gets_ctrl_c() {
    if !have_script() {
        skip("script(1) from util-linux is needed for a pseudo-terminal");
        return;
    }
    let cmd = format!(
        "{} init -q -- {} report",
        podvisor().display(),
        testbin().display()
    );
    let out = on_a_terminal(&cmd).output();
    let text = out.stdout.replace('\r', "");
    let pgid: i32 = text
        .lines()
        .find(|l| l.starts_with("ids "))
        .unwrap()
        .split_whitespace()
        .nth(3)
        .unwrap()
        .parse()
        .unwrap();
    let fg: i32 = text
        .lines()
        .find(|l| l.starts_with("tty-foreground "))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(fg, pgid, "the child's group owns the terminal: {out:?}");

    // Ctrl-C on the terminal goes to the foreground group: the child, not podvisor.
    let cmd = format!(
        "{} init -q -- {} signals --exit-on INT",
        podvisor().display(),
        testbin().display()
    );
    let mut p = on_a_terminal(&cmd).start();
    p.expect_line("ready", |l| l.trim() == "ready");
    p.write_stdin(b"\x03");
    // The terminal echoes ^C in front of the child's line.
    p.expect_line("SIGINT at the child", |l| l.contains("signal 2 "));
    assert_eq!(p.wait().code(), Some(0));
    p.assert_no_leftovers();
}

#[test]
fn version_and_help() {
    let out = Run::new(podvisor()).arg("--version").output();
    assert_eq!(out.code(), 0);
    assert!(out.stdout.starts_with("podvisor "), "{out:?}");
    let out = init().arg("--help").output();
    assert_eq!(out.code(), 0);
    assert!(out.stdout.contains("--kill-descendants"), "{out:?}");
}

/// Voluntary context switches of a process: each wake-up from sleep adds one.
fn wakeups(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("voluntary_ctxt_switches:"))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `init -q -s -- testbin sleep 30`, once its child has exec'd: the run and init's pid.
fn supervising_sleep() -> (Proc, i32) {
    let p = init()
        .args(["-q", "-s", "--"])
        .arg(testbin())
        .args(["sleep", "30"])
        .start();
    let pid = p.init_pid();
    wait_until("the child is running", || {
        children_of(pid)
            .iter()
            .any(|(_, name)| name.starts_with("podvisor-testbi"))
    });
    (p, pid)
}

#[test]
fn sleeps_without_timers_while_nothing_happens() {
    // tini wakes once a second (sigtimedwait with a 1 s timeout); podvisor must not wake at all
    // while its child runs quietly.
    let (mut p, pid) = supervising_sleep();
    // Settled: the child has exec'd (above) and podvisor is asleep with the same count for a
    // while (it switches out once more when it first blocks).
    let last = std::cell::Cell::new(wakeups(pid));
    wait_until("podvisor init is asleep", || {
        std::thread::sleep(Duration::from_millis(200));
        let now = wakeups(pid);
        last.replace(now) == now
    });
    let before = last.get();
    std::thread::sleep(Duration::from_millis(2500));
    let after = wakeups(pid);
    assert_eq!(
        after,
        before,
        "podvisor init woke up {} times while idle",
        after - before
    );
    assert!(p.running());
    // A signal does wake it, and is forwarded.
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(143));
}

#[test]
fn keeps_no_page_of_the_loader_while_its_child_runs() {
    // The loader ran once, before podvisor's `main`; PID 1 takes what it and libc's start left
    // in its page tables out of them, so that what stays resident is what supervising runs.
    let loader = |f: &std::path::Path| {
        f.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("ld-linux"))
    };
    let (mut p, pid) = supervising_sleep();
    // A program linked statically has no loader: nothing to look at. (PID 1 gives the pages
    // back just after the child's exec: a moment after it shows.)
    if file_code_kib(pid, loader).is_some() {
        wait_until("at most 8 KiB of the loader's code resident", || {
            file_code_kib(pid, loader).is_some_and(|kib| kib <= 8)
        });
        // The child, which runs the loader itself, is not touched.
        let (child, _) = children_of(pid)[0].clone();
        assert!(
            file_code_kib(child, loader).is_some_and(|k| k > 8),
            "the child's loader"
        );
    }
    p.signal("TERM");
    assert_eq!(p.wait().code(), Some(143));
}

#[test]
fn copy_self_installs_this_binary_where_asked() {
    // What the cluster webhook's init container runs (the image has no `cp`); in both builds.
    let dir = TempDir::new();
    let dest = dir.file("bin-podvisor");
    let out = Run::new(podvisor()).arg("copy-self").arg(&dest).output();
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(
        std::fs::read(&dest).unwrap(),
        std::fs::read(podvisor()).unwrap()
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    let version = Run::new(&dest).arg("--version").output();
    assert_eq!(version.code(), 0, "{version:?}");
    assert!(!dir.file("bin-podvisor.tmp").exists());
    // Again, over the first copy.
    assert_eq!(
        Run::new(podvisor())
            .arg("copy-self")
            .arg(&dest)
            .output()
            .code(),
        0
    );

    let missing = dir.file("no-such-dir/podvisor");
    let out = Run::new(podvisor()).arg("copy-self").arg(&missing).output();
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with(&format!("error: copy-self {}: ", missing.display())),
        "{out:?}"
    );
    let out = Run::new(podvisor()).arg("copy-self").output();
    assert_eq!(out.code(), 2, "{out:?}");
}
