//! A container's standard streams through the binary, as CRI gives them: with `tty` a
//! terminal of its own (in its own devpts, its controlling terminal, `TERM=xterm`), whose
//! output is logged as stdout with each line's "\r\n" read as its end, as the Docker engine
//! here gives `docker run -t`; with `stdin` a stdin that stays open (its reads wait), without
//! it /dev/null. Started by the run and by keepers.

use crate::harness::*;

/// What a container with a terminal says of it.
const TERMINAL: &str = "tty; for fd in 0 1 2; do [ -t $fd ] && echo \"$fd terminal\"; done; echo \"TERM=$TERM\"; echo to-stderr >&2";

fn pod(containers: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: streams, namespace: ns, annotations: {{podvisor.io/root-from: host}}}}\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  containers:\n{containers}")
}

#[test]
fn a_container_with_tty_gets_a_terminal_of_its_own_logged_as_stdout() {
    if !is_root() {
        skip("the terminal is opened in the container's own /dev (a private root: root only)");
        return;
    }
    let manifest = pod(&format!(
        "  - name: app\n    tty: true\n    command: [sh, -c, '{TERMINAL}']\n"
    ));
    let want = "/dev/pts/0\n0 terminal\n1 terminal\n2 terminal\nTERM=xterm\nto-stderr\n";
    for extra in [&[][..], &["--live-restore"][..]] {
        let r = PodRun::new(&manifest);
        let out = r.cmd(extra).output();
        assert_eq!(out.code(), 0, "{extra:?}: {out:?}");
        let log = r.log("app", 1);
        let mut said = String::new();
        for line in log.split_terminator('\n') {
            let mut parts = line.splitn(4, ' ');
            let (_time, stream, tag) = (parts.next(), parts.next(), parts.next());
            // One stream, stdout; each line whole, its "\r\n" not in it.
            assert_eq!(
                (stream, tag),
                (Some("stdout"), Some("F")),
                "{extra:?}: {log}"
            );
            said.push_str(parts.next().unwrap_or_default());
            said.push('\n');
        }
        assert_eq!(said, want, "{extra:?}: {log:?}");
        let logs = client(&r, &["logs", "streams", "app"]);
        assert_eq!(logs.stdout, want.trim_end(), "{extra:?}");
    }
    if let Err(why) = crate::docker::engine() {
        skip(&why);
        return;
    }
    // `docker run -t`: the same terminal, the same words (its client gets "\r\n").
    let image = crate::security::BusyboxImage::build();
    let docker = Run::new("docker")
        .args([
            "run",
            "--rm",
            "-t",
            image.tag.as_str(),
            "sh",
            "-c",
            TERMINAL,
        ])
        .output();
    assert_eq!(docker.code(), 0, "{docker:?}");
    assert_eq!(docker.stdout.replace("\r\n", "\n"), want.trim_end());
}

#[test]
fn stdin_stays_open_with_stdin_and_is_dev_null_without() {
    // Its stdin, and how a read of it ends: at once at end of input (1), or not before a
    // timeout kills it (124).
    let script = "readlink /proc/self/fd/0 | cut -d: -f1; timeout 1 sh -c \"read line\"; echo $?";
    let manifest = pod(&format!(
        "  - name: plain\n    command: [sh, -c, '{script}']
  - name: open\n    stdin: true\n    command: [sh, -c, '{script}']
  - name: once\n    stdin: true\n    stdinOnce: true\n    command: [sh, -c, '{script}']\n"
    ));
    for extra in [&[][..], &["--live-restore"][..]] {
        let r = PodRun::new(&manifest);
        let out = r.cmd(extra).output();
        assert_eq!(out.code(), 0, "{extra:?}: {out:?}");
        assert_eq!(r.log_lines("plain", 1), ["/dev/null", "1"], "{extra:?}");
        for name in ["open", "once"] {
            assert_eq!(r.log_lines(name, 1), ["pipe", "124"], "{name} {extra:?}");
        }
    }
}
