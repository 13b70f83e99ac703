//! `podvisor run` reads its manifest in a child process of its own: the process that
//! supervises the pod is the one the user started, under its own name and command line, and it
//! never holds the memory that reading took.

use crate::harness::*;

/// VmHWM of process `pid`, KiB.
fn peak_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn the_supervisor_keeps_its_name_and_never_holds_what_reading_took() {
    // 24 MiB of comments before the pod: reading the file takes that much memory at least, in
    // whichever process reads it (and a few seconds of a debug build on a loaded machine).
    let filler = format!("# {}\n", "x".repeat(1 << 20)).repeat(24);
    let containers = "  containers:\n  - {name: app, command: [sleep, '100']}\n";
    let r = PodRun::new(&format!("{filler}{}", pod("Always", containers)));
    let mut run = r.cmd(&[]).start();
    let deadline = std::time::Instant::now() + 6 * PATIENCE;
    while !r.reasons("app").contains(&"Started".to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the app never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = run.init_pid();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim_end(), "podvisor");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let last = cmdline.split(|&b| b == 0).rev().nth(1).unwrap();
    assert_eq!(last, r.dir.file("pod.yaml").as_os_str().as_encoded_bytes());
    // The supervisor's peak stays clear of what reading took (a debug build's own peak is
    // about 30 MiB here, a release build's under 10; with the reading in it, over 54).
    let peak = peak_kib(pid);
    assert!(peak < 44 * 1024, "the supervisor's peak RSS is {peak} KiB");
    run.signal("TERM");
    assert_eq!(run.wait().code(), Some(0));
    run.assert_no_leftovers();
}
