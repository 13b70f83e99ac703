//! `podvisor top` in a real terminal: tmux runs it against real pods, `send-keys` acts,
//! `capture-pane` reads the screen.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::harness::*;
use crate::probes::stop;

const FAST: [&str; 4] = ["--backoff-initial", "10ms", "--backoff-max", "40ms"];

/// A tmux server of its own running one command (`podvisor top`, `podvisor exec -it`);
/// killed when dropped.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// `podvisor top` on `pods` (by their state dirs) in a `width` × `height` terminal.
    fn start(width: u16, height: u16, pods: &[&PodRun]) -> Tmux {
        let mut cmd = vec![podvisor().display().to_string(), "top".into()];
        for r in pods {
            cmd.push("--state-dir".into());
            cmd.push(r.dir.file("state").display().to_string());
        }
        Tmux::command(width, height, &cmd.join(" "))
    }

    /// The shell command `cmd` in a `width` × `height` terminal.
    pub fn command(width: u16, height: u16, cmd: &str) -> Tmux {
        static N: AtomicU32 = AtomicU32::new(0);
        let socket = format!(
            "podvisor-top-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let t = Tmux { socket };
        let ok = Command::new("tmux")
            .args([
                "-L",
                &t.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "top",
            ])
            .args(["-x", &width.to_string(), "-y", &height.to_string()])
            .args(["-e", "NO_COLOR=1", "-e", "TERM=xterm-256color"])
            .arg(cmd)
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux did not start");
        t
    }

    pub fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap()
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "top"]).stdout).into()
    }

    /// Sends keys (tmux key names or text), one at a time: an Escape followed at once by
    /// another key would read as an escape sequence.
    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.tmux(&["send-keys", "-t", "top", k]);
            std::thread::sleep(std::time::Duration::from_millis(60));
        }
    }

    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "top", "-l", text]);
    }

    /// Waits until the screen satisfies `pred`; the screen.
    pub fn wait(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            last = self.screen();
            if pred(&last) {
                return last;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}; the screen:\n{last}");
    }

    pub fn running(&self) -> bool {
        self.tmux(&["has-session", "-t", "top"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
        // The server leaves its socket file behind (killed, or ended with its session): it
        // goes too. tmux keeps it in $TMUX_TMPDIR (or /tmp)/tmux-UID.
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::var("TMUX_TMPDIR").unwrap_or_else(|_| "/tmp".into());
        if let Ok(me) = std::fs::metadata("/proc/self") {
            let _ = std::fs::remove_file(format!("{dir}/tmux-{}/{}", me.uid(), self.socket));
        }
    }
}

fn manifest(name: &str, containers: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ns, annotations: {{podvisor.io/root-from: host, podvisor.io/host-root: writable}}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n{containers}"
    )
}

fn have_tmux() -> bool {
    have("tmux", "podvisor top's terminal tests run it in tmux")
}

#[test]
fn lists_pods_follows_a_crash_and_restarts_from_the_keyboard() {
    if !have_tmux() {
        return;
    }
    let dir = TempDir::new();
    let go = dir.file("crash-now");
    let web = PodRun::new(&manifest(
        "web",
        "  - {name: app, command: [sh, -c, 'i=0; while [ $i -lt 20 ]; do i=$((i+1)); echo line $i; done; exec sleep 600']}\n  - {name: side, command: [sleep, '600']}\n",
    ));
    let batch = PodRun::new(&manifest(
        "batch",
        &format!(
            "  - {{name: worker, command: [sh, -c, 'while [ ! -e {g} ]; do sleep 0.05; done; exit 3']}}\n",
            g = go.display()
        ),
    ));
    let mut pw = web.cmd(&FAST).start();
    let mut pb = batch.cmd(&FAST).start();
    web.wait_event("side", "Started", 1);
    batch.wait_event("worker", "Started", 1);
    let t = Tmux::start(120, 40, &[&web, &batch]);
    let screen = t.wait("both pods, running", |s| {
        s.contains("ns/web") && s.contains("ns/batch") && s.matches("Running").count() >= 4
    });
    assert!(screen.contains("NAME"), "{screen}");
    assert!(screen.contains("MEMORY"), "{screen}");
    // The worker crashes: it shows up, with its event.
    std::fs::write(&go, "").unwrap();
    t.wait("the crash", |s| {
        (s.contains("CrashLoopBackOff") || s.contains("Error (3)")) && s.contains("BackOff worker")
    });

    // Restart web's app from the keyboard: rows are batch, worker, web, app, side.
    t.keys(&["Down", "Down", "Down"]);
    t.keys(&["r"]);
    t.wait("the question", |s| {
        s.contains("Restart container app of pod ns/web? (y/n)")
    });
    t.keys(&["y"]);
    t.wait("the result", |s| {
        s.contains("restarting container app of ns/web")
    });
    web.wait_event("app", "Started", 2);
    assert_eq!(web.find("side", "Started").len(), 1, "only app restarted");

    // Its log, searched.
    t.keys(&["Enter"]);
    t.wait("the log", |s| {
        s.contains("log app #2") && s.contains("line 20")
    });
    t.keys(&["/"]);
    t.type_text("line 7");
    t.keys(&["Enter"]);
    t.wait("the match", |s| s.contains("/line 7 1/1"));
    t.keys(&["n"]);
    // The previous instance.
    t.keys(&["p"]);
    t.wait("the previous log", |s| s.contains("log app #1 (previous)"));

    // Help, then quit: the pods run on.
    t.keys(&["Escape"]);
    t.keys(&["?"]);
    t.wait("the help", |s| {
        s.contains("Quitting never touches the pods.")
    });
    t.keys(&["Escape"]);
    t.keys(&["q"]);
    wait_until("top to quit", || !t.running());
    assert!(pw.running() && pb.running(), "quitting top touched a pod");
    stop(&mut pw);
    stop(&mut pb);
}

#[test]
fn a_pod_that_goes_away_and_a_narrow_terminal() {
    if !have_tmux() {
        return;
    }
    let one = PodRun::new(&manifest(
        "one",
        "  - {name: app, command: [sleep, '600']}\n",
    ));
    let two = PodRun::new(&manifest(
        "two",
        "  - {name: app, command: [sleep, '600']}\n",
    ));
    let mut p1 = one.cmd(&[]).start();
    let mut p2 = two.cmd(&[]).start();
    one.wait_event("app", "Started", 1);
    two.wait_event("app", "Started", 1);
    let t = Tmux::start(120, 30, &[&one, &two]);
    t.wait("both pods", |s| {
        s.contains("ns/one") && s.contains("ns/two")
    });
    // Narrow: the first columns stay, the usage columns go; wide again: back.
    t.tmux(&["resize-window", "-t", "top", "-x", "60", "-y", "30"]);
    let narrow = t.wait("the narrow layout", |s| {
        s.contains("STATUS") && s.contains("ns/one") && !s.contains("MEMORY")
    });
    assert!(narrow.lines().all(|l| l.chars().count() <= 60), "{narrow}");
    t.tmux(&["resize-window", "-t", "top", "-x", "120", "-y", "30"]);
    t.wait("the wide layout", |s| s.contains("MEMORY"));
    // Pod one stops: Gone, then off the list.
    stop(&mut p1);
    t.wait("pod one gone", |s| s.contains("Gone"));
    t.wait("pod one off the list", |s| {
        !s.contains("ns/one") && s.contains("ns/two")
    });
    // Stop pod two from the keyboard, confirmed.
    t.keys(&["x"]);
    t.wait("the question", |s| s.contains("Stop pod ns/two? (y/n)"));
    t.keys(&["y"]);
    assert!(p2.wait().success());
    p2.assert_no_leftovers();
}

#[test]
fn without_a_terminal_top_says_so() {
    let out = Run::new(podvisor()).arg("top").output();
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr
            .starts_with("error: podvisor top needs a terminal"),
        "{out:?}"
    );
}
