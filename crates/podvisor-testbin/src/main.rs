//! podvisor-testbin: a program for podvisor's tests to supervise. Each subcommand is one
//! behaviour a test needs, with output a test can read line by line:
//!
//! - `exit CODE` — exit with CODE.
//! - `die SIGNAL` — kill itself with SIGNAL (default action).
//! - `signals [--ignore SIG,...] [--exit-on SIG] [--out FILE] [--spawn-peer FILE]` — print
//!   `ready`, then one line `signal N from PID` per signal received, until `--exit-on` arrives
//!   (exit 0). `--spawn-peer` first starts a second recorder in the same process group, which exits on SIGTERM.
//! - `report` — print `pid ppid pgid sid`, SigBlk, SigIgn and the terminal's foreground group.
//! - `zombies N` — fork N children that exit at once, never wait for them, print the time in
//!   nanoseconds since the epoch, and exit: N orphaned zombies for whoever reaps.
//! - `orphans N` — double-fork N grandchildren that exit after a moment, then wait until our
//!   parent has no other child left, zombie or alive (exit 0), or 10 s pass (exit 1): checks
//!   that the init above us reaps what it adopts.
//! - `keyctl` — ask for the thread keyring's id (`keyctl`, a system call a seccomp default
//!   profile refuses) and print `ok` or `errno N`; exit 0 either way.
//! - `sleep SECS` — sleep, then exit 0.
//! - `watch DIR` — watch DIR with inotify, print `watching`, then the name of each file made
//!   in it or moved into it, a line each, until killed.
//! - `alloc MIB [hold]` — allocate MIB MiB, touching every page (so it is really charged), print
//!   `allocated MIB`, exit 0 (with `hold`: keep it until killed).
//! - `spin SECS` — burn CPU for SECS seconds of wall time, then exit 0.
//! - `serve PORT [--log FILE] [--dir DIR] [--healthy-for SECS]` — an HTTP/1.1 server on
//!   127.0.0.1:PORT for probe and hook tests; prints `listening PORT`. Each request is appended
//!   to `--log` as `PATH user-agent=UA accept=ACCEPT host=HOST`. Paths: `/healthz` (200 for the
//!   first `--healthy-for` seconds, then 500), `/status/N`, `/switch/NAME` (200 while
//!   DIR/NAME exists, else 503), `/redirect?loc=URL` (302 to URL), `/loop` (302 to itself),
//!   `/hang` (never answers), `/garbage` (not HTTP), `/endless` (a body that never ends),
//!   `/truncated` (closes mid-body); anything else 200.

#![no_main]

mod sys;

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// `no_main`, as podvisor: Rust's start-up would set SIGPIPE to ignored, and `report` must show
// the dispositions this program inherited, untouched.
// SAFETY: the C `main` symbol, defined once, with the C runtime's signature.
#[allow(unsafe_code)]
#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("exit") => args.get(1).and_then(|c| c.parse().ok()).unwrap_or(0),
        Some("die") => sys::raise_default(parse_sig(args.get(1).map_or("TERM", String::as_str))),
        Some("signals") => signals(&args[1..]),
        Some("report") => report(),
        Some("zombies") => zombies(args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1)),
        Some("orphans") => orphans(args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1)),
        Some("serve") => serve(&args[1..]),
        Some("alloc") => {
            let mib = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1);
            alloc(mib, args.get(2).is_some_and(|a| a == "hold"))
        }
        Some("spin") => spin(args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1.0)),
        Some("masked") => masked(&args[1..]),
        Some("keyctl") => {
            match sys::keyctl_thread_keyring() {
                Ok(()) => println!("ok"),
                Err(e) => println!("errno {}", e.raw_os_error().unwrap_or(0)),
            }
            0
        }
        Some("watch") => watch(args.get(1).map_or("", String::as_str)),
        Some("sleep") => {
            let secs: f64 = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1.0);
            std::thread::sleep(Duration::from_secs_f64(secs));
            0
        }
        _ => {
            eprintln!(
                "usage: podvisor-testbin exit|die|signals|report|zombies|orphans|serve|masked|keyctl|sleep|watch ..."
            );
            2
        }
    };
    let _ = std::io::stdout().flush();
    code
}

/// Blocks SIGUSR1, ignores SIGUSR2, SIGPIPE and SIGXFSZ (as a Python or a shell that set
/// them would), then execs its arguments: what a program started under such a parent inherits.
fn masked(cmd: &[String]) -> i32 {
    sys::block(libc::SIGUSR1);
    for sig in [libc::SIGUSR2, libc::SIGPIPE, libc::SIGXFSZ] {
        sys::ignore(sig);
    }
    if cmd.is_empty() {
        eprintln!("usage: podvisor-testbin masked CMD [ARG...]");
        return 2;
    }
    let e = sys::exec(cmd);
    eprintln!("podvisor-testbin: {}: {e}", cmd[0]);
    127
}

fn parse_sig(s: &str) -> i32 {
    let names = [
        ("HUP", 1),
        ("INT", 2),
        ("QUIT", 3),
        ("ILL", 4),
        ("TRAP", 5),
        ("ABRT", 6),
        ("BUS", 7),
        ("FPE", 8),
        ("KILL", 9),
        ("USR1", 10),
        ("SEGV", 11),
        ("USR2", 12),
        ("PIPE", 13),
        ("ALRM", 14),
        ("TERM", 15),
        ("STKFLT", 16),
        ("CHLD", 17),
        ("CONT", 18),
        ("STOP", 19),
        ("TSTP", 20),
        ("TTIN", 21),
        ("TTOU", 22),
        ("URG", 23),
        ("XCPU", 24),
        ("XFSZ", 25),
        ("VTALRM", 26),
        ("PROF", 27),
        ("WINCH", 28),
        ("IO", 29),
        ("PWR", 30),
        ("SYS", 31),
    ];
    let up = s.trim_start_matches("SIG").to_ascii_uppercase();
    names
        .iter()
        .find(|(n, _)| *n == up)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| up.parse().unwrap_or(0))
}

fn signals(args: &[String]) -> i32 {
    let mut exit_on = None;
    let mut out: Box<dyn Write> = Box::new(std::io::stdout());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--ignore" => {
                for s in it.next().map(String::as_str).unwrap_or("").split(',') {
                    sys::ignore(parse_sig(s));
                }
            }
            "--exit-on" => exit_on = it.next().map(|s| parse_sig(s)),
            "--spawn-peer" => {
                // A second recorder in our process group, writing to PEER_FILE: it shows
                // whether a signal went to the whole group or to us alone.
                let peer_out = it.next().expect("--spawn-peer FILE");
                let exe = std::env::current_exe().expect("current_exe");
                // Never waited for: it outlives us and is reaped by the init under test.
                #[allow(clippy::zombie_processes)]
                std::process::Command::new(exe)
                    .args(["signals", "--exit-on", "TERM", "--out", peer_out])
                    .spawn()
                    .expect("spawn peer");
                wait_for_line(peer_out, "ready");
            }
            "--out" => {
                let path = it.next().expect("--out FILE");
                out = Box::new(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .expect("open --out"),
                );
            }
            other => panic!("unknown option {other}"),
        }
    }
    // Ignored signals stay ignored: sigwaitinfo would still take them if blocked, so leave
    // those unblocked and let the kernel drop them.
    let mut set = sys::block_all_but_faults();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ignored = ignored_mask(&status).unwrap_or(0);
    for sig in 1..=64 {
        if ignored & (1u64 << (sig - 1)) != 0 {
            sys::unblock(&mut set, sig);
        }
    }
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    loop {
        match sys::wait_signal(&set) {
            Ok((sig, from)) => {
                let _ = writeln!(out, "signal {sig} from {from}");
                let _ = out.flush();
                if Some(sig) == exit_on {
                    return 0;
                }
            }
            Err(e) => {
                eprintln!("sigwaitinfo: {e}");
                return 3;
            }
        }
    }
}

fn wait_for_line(path: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|s| s.lines().any(|l| l == want)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("{path} never said {want}");
}

fn ignored_mask(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("SigIgn:"))?;
    u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
}

fn report() -> i32 {
    let (pid, ppid, pgid, sid) = sys::ids();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("?")
            .to_string()
    };
    println!("ids {pid} {ppid} {pgid} {sid}");
    println!("SigBlk {}", field("SigBlk:"));
    println!("SigIgn {}", field("SigIgn:"));
    println!("tty-foreground {}", sys::foreground_group());
    0
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn zombies(n: usize) -> i32 {
    for _ in 0..n {
        if let Err(e) = sys::fork_then(|| 0) {
            eprintln!("fork: {e}");
            return 1;
        }
    }
    println!("{}", now_ns());
    0
}

fn orphans(n: usize) -> i32 {
    for _ in 0..n {
        let mid = sys::fork_then(|| {
            // The grandchild outlives its parent briefly, so it is orphaned while alive and
            // becomes a zombie of whoever adopted it.
            let _ = sys::fork_then(|| {
                std::thread::sleep(Duration::from_millis(50));
                0
            });
            0
        });
        match mid {
            Ok(pid) => {
                let _ = sys::wait_pid(pid);
            }
            Err(e) => {
                eprintln!("fork: {e}");
                return 1;
            }
        }
    }
    // The grandchildren were adopted by whoever reaps for us (our parent, when it is PID 1 or a
    // subreaper): wait until none of our parent's other children is left, zombie or alive.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (me, parent) = (std::process::id(), sys::ids().1 as u32);
    loop {
        let (zombies, others) = count_siblings(me, parent);
        if zombies == 0 && others == 0 {
            println!("all {n} orphans reaped");
            return 0;
        }
        if Instant::now() > deadline {
            println!("left: {zombies} zombies, {others} live");
            return 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Counts the other children of `parent`: (zombies, live).
fn count_siblings(me: u32, parent: u32) -> (usize, usize) {
    let (mut z, mut live) = (0, 0);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let mut fields = stat[close + 1..].split_whitespace();
        let state = fields.next().unwrap_or("");
        if fields.next().and_then(|p| p.parse::<u32>().ok()) != Some(parent) {
            continue;
        }
        if state == "Z" {
            z += 1;
        } else {
            live += 1;
        }
    }
    (z, live)
}

/// The `serve` subcommand: one thread per connection, `Connection: close` always.
fn serve(args: &[String]) -> i32 {
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;
    let port: u16 = args.first().and_then(|p| p.parse().ok()).unwrap_or(8080);
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let log = opt("--log");
    let dir = opt("--dir");
    let healthy_for: Option<f64> = opt("--healthy-for").and_then(|s| s.parse().ok());
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("serve: {e}");
            return 1;
        }
    };
    println!("listening {port}");
    let _ = std::io::stdout().flush();
    let started = Instant::now();
    let log_lock = std::sync::Arc::new(std::sync::Mutex::new(()));
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let (log, dir, log_lock) = (log.clone(), dir.clone(), log_lock.clone());
        std::thread::spawn(move || {
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                return; // a TCP probe: connected, closed
            }
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.trim_end().split_once(':') {
                    headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
                }
            }
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k == name)
                    .map_or("", |(_, v)| v.as_str())
                    .to_string()
            };
            let path = request_line.split(' ').nth(1).unwrap_or("/").to_string();
            if let Some(log) = &log {
                let _guard = log_lock.lock();
                let line = format!(
                    "{path} user-agent={} accept={} host={}\n",
                    header("user-agent"),
                    header("accept"),
                    header("host")
                );
                let _ = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .and_then(|mut f| f.write_all(line.as_bytes()));
            }
            let reply = |conn: &mut std::net::TcpStream, status: u16, extra: &str, body: &str| {
                let _ = conn.write_all(
                    format!(
                        "HTTP/1.1 {status} X\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            };
            let (route, query) = path.split_once('?').unwrap_or((&path, ""));
            match route {
                "/healthz" => {
                    let ok = healthy_for.is_none_or(|s| started.elapsed().as_secs_f64() < s);
                    reply(&mut conn, if ok { 200 } else { 500 }, "", "ok");
                }
                "/loop" => reply(&mut conn, 302, "Location: /loop\r\n", ""),
                "/redirect" => {
                    let loc = query.strip_prefix("loc=").unwrap_or("/");
                    reply(&mut conn, 302, &format!("Location: {loc}\r\n"), "moved");
                }
                "/hang" => std::thread::sleep(Duration::from_secs(3600)),
                "/garbage" => {
                    let _ = conn.write_all(b"garbage\r\n\r\n");
                }
                "/endless" => {
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                    let chunk = [b'x'; 4096];
                    while conn.write_all(&chunk).is_ok() {}
                }
                "/truncated" => {
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort");
                }
                _ => {
                    if let Some(code) = route.strip_prefix("/status/") {
                        reply(&mut conn, code.parse().unwrap_or(500), "", "status");
                    } else if let Some(name) = route.strip_prefix("/switch/") {
                        let on = dir
                            .as_ref()
                            .is_some_and(|d| std::path::Path::new(d).join(name).exists());
                        reply(&mut conn, if on { 200 } else { 503 }, "", "switch");
                    } else {
                        reply(&mut conn, 200, "", "hello");
                    }
                }
            }
        });
    }
    0
}

/// Allocates `mib` MiB a MiB at a time, writing to every page of each.
/// Allocates and touches `mib` MiB; with `hold`, keeps it until killed.
fn alloc(mib: usize, hold: bool) -> i32 {
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(mib);
    for _ in 0..mib {
        let mut block = vec![0u8; 1 << 20];
        for page in block.chunks_mut(4096) {
            page[0] = 1;
        }
        kept.push(block);
    }
    println!("allocated {}", kept.len());
    if hold {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
            std::hint::black_box(&kept);
        }
    }
    0
}

/// Busy for `secs` seconds of wall time.
fn spin(secs: f64) -> i32 {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut x: u64 = 1;
    while Instant::now() < end {
        for _ in 0..10_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
    }
    0
}

/// `watch DIR`: the names of the files made in DIR, as they come.
fn watch(dir: &str) -> i32 {
    use std::io::Read;
    let mut events = match sys::watch_made(dir) {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => {
            eprintln!("watch {dir}: {e}");
            return 1;
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "watching");
    let _ = out.flush();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match events.read(&mut buf) {
            Ok(n) if n > 0 => {
                for name in sys::event_names(&buf[..n]) {
                    let _ = writeln!(out, "{name}");
                }
                let _ = out.flush();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => return 1,
        }
    }
}
