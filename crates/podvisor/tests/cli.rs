//! podvisor's own command line (clap): suggestions, one-line usage errors with exit 2,
//! completions that complete, and the man page.

use crate::harness::*;

fn podvisor_cmd(args: &[&str]) -> Output {
    Run::new(podvisor()).args(args).output()
}

fn require_full_build() -> bool {
    let out = podvisor_cmd(&["--version"]);
    if out.stdout.contains("init-only") {
        skip("the PID 1 build has no clap command line");
        return false;
    }
    true
}

#[test]
fn mistakes_get_one_error_line_a_suggestion_and_exit_2() {
    if !require_full_build() {
        return;
    }
    let out = podvisor_cmd(&["run", "--stat-dir", "x", "pod.yaml"]);
    assert_eq!(out.code(), 2);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines[0],
        "error: unexpected argument '--stat-dir' found (a similar argument exists: '--state-dir')"
    );
    assert!(lines[1].starts_with("Usage: podvisor run"), "{out:?}");
    let out = podvisor_cmd(&["sttus"]);
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr.starts_with(
            "error: unrecognized subcommand 'sttus' (a similar subcommand exists: 'status')"
        ),
        "{out:?}"
    );
    let out = podvisor_cmd(&["logs"]);
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr.starts_with(
            "error: the following required arguments were not provided: <POD|CONTAINER>"
        ),
        "{out:?}"
    );
    // --help and --version go to stdout, exit 0.
    let out = podvisor_cmd(&["status", "--help"]);
    assert_eq!(out.code(), 0);
    assert!(out.stdout.contains("--state-dir <DIR>"), "{out:?}");
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    if !require_full_build() {
        return;
    }
    for shell in ["bash", "zsh", "fish"] {
        let out = podvisor_cmd(&["completion", shell]);
        assert_eq!(out.code(), 0, "{shell}");
        assert!(out.stdout.contains("podvisor"), "{shell}");
    }
    let out = podvisor_cmd(&["completion", "tcsh"]);
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr.contains("[possible values: bash, zsh, fish]"),
        "{out:?}"
    );
    // The bash script completes: `podvisor ru<TAB>` gives `run`, `podvisor run --sta<TAB>`
    // gives `--state-dir`.
    let dir = TempDir::new();
    std::fs::write(
        dir.file("complete.bash"),
        podvisor_cmd(&["completion", "bash"]).stdout,
    )
    .unwrap();
    let script = format!(
        "source {}; COMP_WORDS=(podvisor ru); COMP_CWORD=1; _podvisor podvisor ru podvisor; echo \"${{COMPREPLY[@]}}\"; COMP_WORDS=(podvisor run --sta); COMP_CWORD=2; _podvisor podvisor --sta run; echo \"${{COMPREPLY[@]}}\"",
        dir.file("complete.bash").display()
    );
    let out = Run::new("bash").args(["-c", &script]).output();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines, ["run", "--state-dir"], "{out:?}");
}

#[test]
fn a_man_page() {
    if !require_full_build() {
        return;
    }
    let out = podvisor_cmd(&["man"]);
    assert_eq!(out.code(), 0);
    assert!(
        out.stdout.contains(".TH podvisor 1"),
        "{}",
        &out.stdout[..200.min(out.stdout.len())]
    );
    assert!(out.stdout.contains("completion"));
}
