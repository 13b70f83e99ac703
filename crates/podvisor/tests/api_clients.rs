//! Slow and hostile clients on the API socket never hold the pod up: a hundred watchers served
//! at once, more clients than the bound turned away (503), a request that never ends (408),
//! huge heads and bodies (431, 413), garbage and half-closed connections; a watcher that never
//! reads is dropped with an event while the others go on, and the run's memory stays bounded.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::harness::*;
use crate::probes::{pod_with, stop};

/// A field of /proc/PID/status, in KiB.
fn status_kib(pid: i32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// What the server answers to `request` (it closes the connection after).
fn answer(sock: &Path, request: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A status watcher: its reader past the head.
fn watcher(sock: &Path) -> BufReader<UnixStream> {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(b"GET /status?watch=1 HTTP/1.1\r\nHost: p\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            return r;
        }
        assert!(!line.is_empty(), "the watch ended before its head did");
    }
}

#[test]
fn a_hundred_watchers_and_hostile_requests_never_hold_the_pod_up() {
    let r = PodRun::new(&pod_with(
        "Always",
        1,
        "  containers:\n  - {name: app, command: [sleep, '600']}\n",
    ));
    let mut p = r.cmd(&[]).start();
    r.wait_event("app", "Started", 1);
    let run = p.init_pid();
    let sock = r.dir.file("state").join("podvisor.sock");
    // Its anonymous memory: the pages of its own code, which it gives back when idle and the
    // requests fault in again, are not growth.
    let rss_before = status_kib(run, "RssAnon:");

    let mut watchers: Vec<_> = (0..100).map(|_| watcher(&sock)).collect();
    for w in &mut watchers {
        let mut first = String::new();
        w.read_line(&mut first).unwrap();
        assert!(first.contains("\"restartCount\":0"), "{first}");
    }
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    for w in &mut watchers {
        let mut line = String::new();
        while !line.contains("\"restartCount\":1") {
            line.clear();
            assert!(w.read_line(&mut line).unwrap() > 0, "a watcher was dropped");
        }
    }

    // Heads and bodies past 16 KiB, garbage, a client that half-closes after its request.
    let mut huge = b"GET /status HTTP/1.1\r\nX-Filler: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 20_000));
    huge.extend_from_slice(b"\r\n\r\n");
    assert!(answer(&sock, &huge).starts_with("HTTP/1.1 431"));
    let body = answer(
        &sock,
        b"PATCH /resize HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n{",
    );
    assert!(body.starts_with("HTTP/1.1 413"), "{body}");
    assert!(answer(&sock, b"\x16\x03\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    let mut half = UnixStream::connect(&sock).unwrap();
    half.write_all(b"GET /status HTTP/1.1\r\n\r\n").unwrap();
    half.shutdown(Shutdown::Write).unwrap();
    let mut out = String::new();
    half.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");

    // 100 clients are connected (the watchers): of 520 more, those past 512 are turned away at
    // once.
    let idle: Vec<UnixStream> = (0..520)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    let mut turned_away = vec![false; idle.len()];
    for s in &idle {
        s.set_nonblocking(true).unwrap();
    }
    wait_until("the clients past the bound turned away", || {
        for (s, seen) in idle.iter().zip(&mut turned_away) {
            let mut buf = [0u8; 64];
            match (&*s).read(&mut buf) {
                Ok(n) if !*seen => {
                    *seen = String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 503")
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        turned_away.iter().filter(|t| **t).count() >= 108
    });
    let turned_away = turned_away.iter().filter(|t| **t).count();
    assert_eq!(turned_away, 108);
    drop(idle);
    drop(watchers);

    // A request that never ends is answered 408 after 10 s; meanwhile the pod goes on.
    let mut slow = UnixStream::connect(&sock).unwrap();
    slow.write_all(b"GET /sta").unwrap();
    let began = std::time::Instant::now();
    assert_eq!(client(&r, &["restart", "app"]).code(), 0);
    r.wait_event("app", "Started", 3);

    let mut out = String::new();
    slow.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(began.elapsed() >= std::time::Duration::from_secs(9));
    // The pod was never held up, and answers as before.
    let s = crate::resources::status(&r);
    assert_eq!(
        s["status"]["containerStatuses"][0]["restartCount"], 2,
        "{s}"
    );
    let grown = status_kib(run, "RssAnon:").saturating_sub(rss_before);
    assert!(grown < 16 << 10, "the run grew by {grown} KiB");
    stop(&mut p);
}

#[test]
fn a_watcher_that_never_reads_is_dropped_and_the_others_go_on() {
    // Crash-looping containers in a pod with a 64 KiB annotation: every status line is as
    // big, some MiB a second.
    let filler = "x".repeat(64 << 10);
    let mut manifest = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns, annotations: {{podvisor.io/root-from: host, podvisor.io/host-root: writable, filler: {filler}}}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n");
    for i in 0..16 {
        manifest += &format!("  - {{name: crash{i}, command: ['false']}}\n");
    }
    let r = PodRun::new(&manifest);
    let mut p = r
        .cmd(&["--backoff-initial", "20ms", "--backoff-max", "20ms"])
        .start();
    r.wait_event("crash0", "Started", 1);
    let run = p.init_pid();
    let sock = r.dir.file("state").join("podvisor.sock");
    let silent = watcher(&sock);
    // Another watcher reads all the while, in a thread.
    let mut reading = watcher(&sock);
    let reader = std::thread::spawn(move || {
        let mut lines = 0u64;
        let mut line = String::new();
        while reading.read_line(&mut line).unwrap_or(0) > 0 {
            lines += 1;
            line.clear();
        }
        lines
    });
    let dropped = r.wait_event("pod", "WatcherDropped", 1);
    let message = dropped[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("dropped a status watcher that left ")
            && message.ends_with("(8 MiB each, 32 MiB in all)"),
        "{message}"
    );
    // The silent one reads to its end: what was kept for it, then nothing more.
    let mut rest = Vec::new();
    silent.into_inner().read_to_end(&mut rest).unwrap();
    assert!(rest.len() > 64 << 10, "{} bytes", rest.len());
    // The reading watcher was not dropped: one drop only, and its stream ends with the run.
    assert_eq!(r.find("pod", "WatcherDropped").len(), 1);
    let hwm = status_kib(run, "VmHWM:");
    assert!(hwm < 96 << 10, "the run's peak RSS: {hwm} KiB");
    stop(&mut p);
    assert!(reader.join().unwrap() > 10);
}
