//! The keeper's protocol (docs/live-restore.md): keepers of the earlier protocols are taken
//! over, one of an unknown protocol or a socket that never greets refuses the run, and the
//! exits a run counts are never written to disk as notes.

use crate::harness::*;
use crate::live_restore::{
    alive, containers, count_cmdline, keepers, sleeper, status, stop_and_find_nothing_left, LIVE,
};
use crate::probes::pod_with;

#[test]
fn a_keeper_of_the_first_protocol_is_taken_over() {
    // The first release's keepers spoke protocol 1 (lines of text); a keeper told to speak
    // it writes what they wrote.
    taken_over(
        "1",
        "600.75",
        |pid| format!("podvisor-keeper 1 keeper={pid}\n"),
        "podvisor-keeper-exit 1\n",
    );
}

#[test]
fn a_keeper_of_the_second_protocol_is_taken_over() {
    // Protocol 2's keepers wrote each exit's note before telling it, to every run.
    taken_over(
        "2",
        "600.76",
        |pid| format!("{{\"hello\":{{\"protocol\":2,\"keeper\":{pid},\"holds\":["),
        "{\"podvisor-keeper-exit\":2,",
    );
}

/// A keeper started to speak `protocol` is taken over: `app` exits (3) while no podvisor
/// runs, `idle` (`sleep TAG`) runs on. Its hello starts with `hello(pid)`, its note with
/// `note`.
fn taken_over(protocol: &str, tag: &str, hello_starts: fn(i32) -> String, note_starts: &str) {
    let spec = format!(
        "  containers:
  - name: idle
    command: [sleep, '{tag}']
  - name: app
    command: [sh, -c, 'sleep 1; exit 3']
"
    );
    let r = PodRun::new(&pod_with("Always", 1, &spec));
    let state = r.dir.file("state");
    let backoff = ["--live-restore", "--backoff-initial", "3s"];
    let mut first = r
        .cmd(&backoff)
        .env("PODVISOR_TEST_KEEPER_PROTOCOL", protocol)
        .start();
    r.wait_event("app", "Started", 1);
    let idle = containers(&r)[0].1;
    let keeper = keepers(&state);
    assert_eq!(keeper.len(), 1, "{keeper:?}");
    // Its hello is that protocol's.
    let socket = state
        .join("keepers")
        .join(format!("keeper.{}.sock", keeper[0].0));
    let mut hello = String::new();
    let conn = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(conn), &mut hello).unwrap();
    assert!(hello.starts_with(&hello_starts(keeper[0].0)), "{hello}");
    first.signal("KILL");
    first.wait();
    let note = state.join("keepers").join("app.1.exit");
    wait_until("the keeper notes app's exit", || note.exists());
    let text = std::fs::read_to_string(&note).unwrap();
    assert!(text.starts_with(note_starts), "{text}");

    let mut second = r.cmd(&backoff).start();
    r.wait_event("idle", "Adopted", 1);
    r.wait_event("app", "Adopted", 1);
    let s = status(&r);
    let app = &s["status"]["containerStatuses"][1];
    assert_eq!(app["lastState"]["terminated"]["exitCode"], 3, "{app}");
    assert_eq!(containers(&r)[0].1, idle);
    assert_eq!(count_cmdline(&["sleep", tag]), 1);
    // app starts again under this run's keeper (this release's protocol); the stop ends
    // idle under the old one, whose exit (noted in the old protocol) the run reads.
    r.wait_event("app", "Started", 2);
    stop_and_find_nothing_left(&r, &mut second);
    assert!(!alive(idle));
    first.assert_no_leftovers();
}

#[test]
fn a_keeper_of_an_unknown_protocol_is_refused_and_left_running() {
    let r = sleeper();
    let state = r.dir.file("state");
    let mut first = r
        .cmd(&LIVE)
        .env("PODVISOR_TEST_KEEPER_PROTOCOL", "4")
        .start();
    r.wait_event("app", "Started", 1);
    let pid = containers(&r)[0].1;
    first.signal("KILL");
    first.wait();
    let out = r.cmd(&LIVE).output();
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("the pod's containers are held by a keeper")
            && out
                .stderr
                .contains("that speaks protocol 4; this podvisor adopts protocols 1..=3"),
        "{}",
        out.stderr
    );
    // Nothing was touched: the container and its keeper run on.
    assert!(alive(pid));
    assert_eq!(keepers(&state).len(), 1);
    assert_eq!(r.find("app", "Started").len(), 1);
    // `first`'s drop kills its tree (keeper and container) when the test ends.
}

#[test]
fn a_keeper_socket_that_never_greets_refuses_the_run_and_harms_nothing() {
    let r = sleeper();
    let state = r.dir.file("state");
    let mut first = r.cmd(&LIVE).start();
    r.wait_event("app", "Started", 1);
    let pid = containers(&r)[0].1;
    first.signal("KILL");
    first.wait();
    // Something listening on a keeper's socket that accepts and never says a word.
    let silent = state.join("keepers/keeper.1.sock");
    let listener = std::os::unix::net::UnixListener::bind(&silent).unwrap();
    let out = r.cmd(&LIVE).output();
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(&silent.display().to_string())
            && out.stderr.contains("a keeper: no greeting within 2s"),
        "{}",
        out.stderr
    );
    // Nothing was touched: once the socket is gone the pod is taken over as it was.
    assert!(alive(pid));
    drop(listener);
    std::fs::remove_file(&silent).unwrap();
    let mut second = r.cmd(&LIVE).start();
    r.wait_event("app", "Adopted", 1);
    assert_eq!(containers(&r)[0].1, pid);
    assert_eq!(r.find("app", "Started").len(), 1);
    stop_and_find_nothing_left(&r, &mut second);
}

#[test]
fn an_exit_the_run_counts_is_never_written_as_a_note() {
    // The run's own keeper tells each exit with the message; the run says when its saved
    // record counts it, and no note is written. (The exit at the stop is not saved, as
    // nothing is once a stop is asked for: its note is written when the run ends, and
    // removed with the pod's record.)
    let made = notes_made(None);
    assert!(
        !made
            .iter()
            .any(|n| n.contains("app.1.") || n.contains("app.2.")),
        "notes written: {made:?}"
    );
}

#[test]
fn a_keeper_of_protocol_2_writes_a_note_of_each_exit() {
    // The other side of the test above: the same pod under a keeper of protocol 2 notes
    // every exit before it tells it.
    let made = notes_made(Some("2"));
    assert!(
        made.iter().any(|n| n.contains("app.1.exit"))
            && made.iter().any(|n| n.contains("app.2.exit")),
        "{made:?}"
    );
}

/// Runs a pod whose `app` exits (3) twice and is stopped, under a keeper of `protocol` (this
/// release's by default), and returns the names of the exit-note files made in `keepers/`
/// while it ran (inotify).
fn notes_made(protocol: Option<&str>) -> Vec<String> {
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sh, -c, 'sleep 1; exit 3']}\n",
    ));
    let state = r.dir.file("state");
    let mut run = r.cmd(&["--live-restore", "--backoff-initial", "100ms"]);
    if let Some(p) = protocol {
        run = run.env("PODVISOR_TEST_KEEPER_PROTOCOL", p);
    }
    let mut p = run.start();
    // The keepers dir is made before the first start; app's first exit is a second later.
    r.wait_event("app", "Started", 1);
    let mut watch = Run::new(testbin())
        .arg("watch")
        .arg(state.join("keepers"))
        .start();
    watch.expect_line("watching", |l| l == "watching");
    r.wait_event("app", "Started", 3);
    stop_and_find_nothing_left(&r, &mut p);
    watch.signal("KILL");
    watch.wait();
    watch.drain();
    (watch.stdout.iter())
        .filter(|n| n.contains(".exit"))
        .cloned()
        .collect()
}
