//! The helper's own behaviour, checked so that podvisor's tests can trust it. (Having an
//! integration test also makes `cargo test --workspace` build the helper's binary, which
//! podvisor's tests run.)

// Test code reads top to bottom: the 120-line limit (clippy.toml) is for product code.
#![allow(clippy::too_many_lines)]

use std::process::Command;

fn testbin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_podvisor-testbin"))
}

#[test]
fn exits_with_the_code_asked_for() {
    for code in [0, 1, 7, 255] {
        let status = testbin()
            .args(["exit", &code.to_string()])
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code));
    }
}

#[test]
fn dies_of_the_signal_asked_for() {
    use std::os::unix::process::ExitStatusExt;
    for (name, num) in [("TERM", 15), ("SEGV", 11), ("KILL", 9), ("USR1", 10)] {
        let status = testbin().args(["die", name]).status().unwrap();
        assert_eq!(status.signal(), Some(num), "{name}");
    }
}

#[test]
fn reports_its_ids_and_masks() {
    let out = testbin().arg("report").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let ids: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(ids[0], "ids");
    assert_eq!(ids[2], std::process::id().to_string(), "ppid: {text}");
    // std's Command resets SIGPIPE for its children, and the helper (no_main) leaves it alone.
    let ignored = text
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn "))
        .unwrap();
    let ignored = u64::from_str_radix(ignored, 16).unwrap();
    assert_eq!(ignored & (1 << 12), 0, "SIGPIPE ignored: {text}");
    assert!(text.contains("SigBlk 0000000000000000"), "{text}");
}
