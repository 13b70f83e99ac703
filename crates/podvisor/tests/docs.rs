//! The docs are run: every ```console block of README.md and docs/*.md is read, its `$ `
//! commands run in order by `sh` from the repository's root (podvisor from this build first on
//! PATH, a state base of its own), and what each printed (stdout and stderr together) compared
//! with the lines under it, as snapbox compares: `...` alone on a line stands for any lines,
//! `[..]` for any text within one, and times (`2026-11-25T07:00:52.008Z`) are compared as
//! `[TIME]`. A command that ends with `&` runs in the background (what it prints is not
//! compared) until the block ends. A block that cannot be run as a test would be named in
//! `NOT_RUN` with why; any other block that does not run as shown fails.

use std::path::{Path, PathBuf};

use crate::harness::*;

/// Blocks that are not run, by their first command, and why (none today: keep it so).
const NOT_RUN: &[(&str, &str)] = &[];

/// Blocks whose output lines may come in any order (helpers that end together).
const UNORDERED: &[&str] = &["podvisor init -s --wait-all -- sh examples/init/app.sh"];

struct Block {
    file: PathBuf,
    line: usize,
    /// Each command with the output shown under it.
    steps: Vec<(String, String)>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn blocks() -> Vec<Block> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut current: Option<Block> = None;
        for (i, line) in text.lines().enumerate() {
            match (&mut current, line) {
                (None, "```console") => {
                    current = Some(Block {
                        file: file.clone(),
                        line: i + 1,
                        steps: Vec::new(),
                    })
                }
                (Some(_), "```") => found.push(current.take().unwrap()),
                (Some(b), l) => match l.strip_prefix("$ ") {
                    Some(cmd) => b.steps.push((cmd.to_string(), String::new())),
                    None => {
                        let step = b.steps.last_mut().expect("output before any command");
                        step.1.push_str(l);
                        step.1.push('\n');
                    }
                },
                (None, _) => {}
            }
        }
    }
    found
}

/// `2026-11-25T07:00:52.008Z` → `[TIME]`.
fn redact(text: &str) -> String {
    let b = text.as_bytes();
    let is_time = |s: &[u8]| {
        s.len() >= 24
            && s.iter().take(24).enumerate().all(|(i, &c)| match i {
                4 | 7 => c == b'-',
                10 => c == b'T',
                13 | 16 => c == b':',
                19 => c == b'.',
                23 => c == b'Z',
                _ => c.is_ascii_digit(),
            })
    };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if is_time(&b[i..]) {
            out.push_str("[TIME]");
            i += 24;
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

#[test]
fn every_console_block_runs_as_shown() {
    if !is_root() {
        skip("the docs' pods run as root (private roots, volumes)");
        return;
    }
    let bin = podvisor();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let all = blocks();
    assert!(all.len() >= 8, "found only {} console blocks", all.len());
    let mut ran = 0;
    for block in &all {
        let first = block
            .steps
            .first()
            .map(|s| s.0.as_str())
            .unwrap_or_default();
        if NOT_RUN.iter().any(|(cmd, _)| *cmd == first) {
            continue;
        }
        let base = TempDir::new();
        let mut last = 0;
        let mut background: Vec<Proc> = Vec::new();
        let mut failed = None;
        for (cmd, expected) in &block.steps {
            if let Some(cmd) = cmd.strip_suffix('&') {
                assert!(
                    expected.is_empty(),
                    "{cmd}: a background command shows no output"
                );
                let p = Run::new("sh")
                    .args(["-c", &format!("exec {cmd}")])
                    .current_dir(repo())
                    .env("PATH", &path)
                    .env("PODVISOR_STATE_BASE", base.file("base"))
                    .start();
                background.push(p);
                last = 0;
                continue;
            }
            // `$?` is the previous command's status.
            let script = format!("(exit {last}); {cmd} 2>&1");
            let out = Run::new("sh")
                .args(["-c", &script])
                .current_dir(repo())
                .env("PATH", &path)
                .env("PODVISOR_STATE_BASE", base.file("base"))
                .output_within(std::time::Duration::from_secs(120));
            last = out.code();
            let actual = match out.stdout.is_empty() {
                true => String::new(),
                false => redact(&format!("{}\n", out.stdout)),
            };
            let mut expected = redact(expected);
            let mut actual = actual;
            if UNORDERED.contains(&cmd.as_str()) {
                let sorted = |t: &str| {
                    let mut l: Vec<&str> = t.lines().collect();
                    l.sort();
                    l.join("\n") + "\n"
                };
                actual = sorted(&actual);
                expected = sorted(&expected);
            }
            let at = format!("{}:{}: $ {cmd}", block.file.display(), block.line);
            if let Err(e) = snapbox::Assert::new().try_eq(
                Some(&at),
                snapbox::Data::text(actual),
                snapbox::Data::text(expected),
            ) {
                failed = Some(format!("{at}\n{e}"));
                break;
            }
        }
        // What the block left running is stopped as `podvisor stop` would, and must end (a
        // failed step too: a run killed instead would leave its pod's cgroups behind).
        for mut p in background {
            if p.running() {
                p.signal("TERM");
            }
            p.wait_within(std::time::Duration::from_secs(60));
            if failed.is_none() {
                p.assert_no_leftovers();
            }
        }
        if let Some(failure) = failed {
            panic!("{failure}");
        }
        ran += 1;
    }
    assert!(ran >= 8, "ran only {ran} blocks");
}
