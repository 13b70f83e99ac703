//! `podvisor-bench init`: the PID 1 figures of podvisor's init build beside tini and dumb-init
//! (Debian's packages), measured in one run and printed with ratios. See docs/benchmarks.md.
//!
//! Each figure is a median over repeated runs, with the programs interleaved so that a change
//! in machine load hits all of them alike:
//! - wall time of `INIT -- true`;
//! - peak resident size (VmHWM) of the init process while it supervises `sleep`;
//! - time to reap 20,000 orphaned zombies as PID 1 of a fresh PID namespace, from the moment
//!   the main child exits (having made them) to the moment the namespace's init has exited;
//! - size of the binary.
//!
//! `podvisor-bench run`: `podvisor run` with 100 containers of `sleep`: podvisor's own CPU time
//! while idle for 10 s (from /proc/PID/schedstat), its peak RSS, the time to stop all 100, and
//! how late a container whose backoff has expired is restarted.
//!
//! `podvisor-bench probes`: 1,000 containers of `sleep`, each with a TCP liveness probe and an
//! HTTP readiness probe at a period of 1 s against listeners in this process, for 30 s:
//! podvisor's own CPU (its schedstat, so the probe targets and containers are not counted), its
//! peak RSS, and how far each HTTP probe's arrival drifts from its schedule (first arrival plus
//! whole periods); then 200 containers with exec probes (`true`) at 1 s: podvisor's own CPU,
//! without the probe processes.
//!
//! `podvisor-bench api`: `podvisor status -o json` against a pod of 100 containers (wall time
//! of the whole command, median of 30), `podvisor logs` of a 100 MB log to /dev/null (MB/s of
//! log text), and the CPU of `status -w` and `logs -f` clients and of podvisor while nothing
//! changes for 5 s.
//!
//! `podvisor-bench state`: the cost of the saved state. 100 containers crash-looping at once:
//! each write of the record (write, fsync, rename, fsync of the directory) as podvisor's own
//! histogram times it, beside the same write of the same bytes timed here (the filesystem's
//! floor); podvisor's CPU while 100 containers idle; and the time from `podvisor run` on a saved
//! state dir to 100 containers running again, beside the same pod's fresh start.
//!
//! `podvisor-bench runtime`: what cgroups, the mount namespace and the private root add to a
//! container start beside the same starts without them; idle CPU and peak RSS beside horust.
//!
//! `podvisor-bench top`: `podvisor top` on 10 pods × 100 containers: its CPU and peak RSS, and
//! the supervisors' CPU (all their threads, and their main threads alone) with and without it
//! and `status -w` watchers attached, over rounds of alternating windows.
//!
//! `podvisor-bench live-restore`: keepers' start cost, memory and idle CPU, and the time to
//! adopt 100 running containers, beside a status read and horust's RSS.
//!
//! `podvisor-bench image-memory`: 100 containers of one image beside the same 100 on the
//! host's root, under `--live-restore`: run + keeper PSS and the mean start.
//!
//! `podvisor-bench docker`: `docker run --rm IMAGE true` with podvisor as ENTRYPOINT, with
//! `--init` and with no init; the static PID 1 build's size and RSS beside tini-static.

mod api;
mod docker;
mod images;
mod init;
mod live;
mod probes;
mod run;
mod runtime;
mod security;
mod state;
mod top;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};

struct Init {
    name: &'static str,
    /// The command line up to and including `--` (or what stands for it).
    argv: Vec<String>,
    binary: PathBuf,
}

/// podvisor's benchmarks, each run beside the programs it is compared with
/// (docs/benchmarks.md; the scripts/bench-* scripts build what they measure and run them).
#[derive(Parser)]
#[command(name = "podvisor-bench")]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// PID 1: `init -- true`, peak RSS and zombies reaped, beside tini and dumb-init
    Init(InitArgs),
    /// `podvisor run` with 100 containers: idle CPU, peak RSS, stop and restart lateness
    Run(WithHorust),
    /// 1,000 containers with TCP and HTTP probes, 200 with exec probes: CPU and drift
    Probes(Common),
    /// `status -o json`, `logs` of a 100 MB log, and idle watchers' CPU
    Api(Common),
    /// What the saved state costs: writes under a crash loop, idle CPU, taking over
    State(Common),
    /// `docker run --rm` with podvisor as ENTRYPOINT; the static PID 1 build beside tini-static
    Docker(DockerArgs),
    /// What cgroups, the mount namespace and the private root add to a start
    Runtime(WithHorust),
    /// `podvisor top` and `status -w` watchers on 10 pods of 100 containers
    Top(TopArgs),
    /// Keepers: start cost, memory, idle CPU and taking over 100 containers
    LiveRestore(WithHorust),
    /// What the securityContext and namespaces add to a start and to memory
    Security(WithHorust),
    /// 100 containers of one image beside the same 100 on the host's root
    ImageMemory(ImageArgs),
}

/// What every benchmark takes.
#[derive(clap::Args)]
struct Common {
    /// The podvisor binary to measure [default: `podvisor` beside this benchmark's binary]
    #[arg(long, value_name = "PATH")]
    podvisor: Option<PathBuf>,
    /// Fewer and shorter runs
    #[arg(long)]
    quick: bool,
}

/// A benchmark that measures horust beside podvisor when given it.
#[derive(clap::Args)]
struct WithHorust {
    #[command(flatten)]
    common: Common,
    /// horust's binary, measured beside podvisor (left out without it)
    #[arg(long, value_name = "PATH")]
    horust: Option<PathBuf>,
}

#[derive(clap::Args)]
struct InitArgs {
    /// The PID 1 build [default: target/init/podvisor]
    #[arg(long, value_name = "PATH")]
    podvisor: Option<PathBuf>,
    /// podvisor-testbin [default: beside this benchmark's binary]
    #[arg(long, value_name = "PATH")]
    testbin: Option<PathBuf>,
    /// Fewer runs
    #[arg(long)]
    quick: bool,
}

#[derive(clap::Args)]
struct DockerArgs {
    /// The static PID 1 build, measured beside tini-static
    #[arg(long, value_name = "PATH")]
    podvisor: PathBuf,
    /// The image with podvisor as its ENTRYPOINT (scripts/build-images)
    #[arg(long, value_name = "IMAGE")]
    image: String,
    /// Fewer runs
    #[arg(long)]
    quick: bool,
}

#[derive(clap::Args)]
struct TopArgs {
    #[command(flatten)]
    common: Common,
    /// No crash loop: nothing changes (what top costs a quiet machine)
    #[arg(long)]
    idle: bool,
    /// `status -w` watchers on each pod
    #[arg(long, value_name = "N", default_value_t = 5)]
    watchers: usize,
    /// Rounds of a window without and one with the watchers [default: 8, 2 with --quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    rounds: Option<u32>,
}

#[derive(clap::Args)]
struct ImageArgs {
    #[command(flatten)]
    common: Common,
    /// The image the containers run (pulled by podvisor)
    #[arg(long, value_name = "REF")]
    image: String,
}

fn main() {
    // A flag that is not a benchmark's, or a value that does not parse, is refused by name
    // (exit 2) before anything is measured; `--help` prints each benchmark's flags.
    match Cli::parse().bench {
        Bench::Init(a) => init::init_bench(a),
        Bench::Run(a) => run::run_bench(a),
        Bench::Probes(a) => probes::probes_bench(a),
        Bench::Api(a) => api::api_bench(a),
        Bench::State(a) => state::state_bench(a),
        Bench::Docker(a) => docker::docker_bench(a),
        Bench::Runtime(a) => runtime::runtime_bench(a),
        Bench::Top(a) => top::top_bench(a),
        Bench::LiveRestore(a) => live::live_bench(a),
        Bench::Security(a) => security::security_bench(a),
        Bench::ImageMemory(a) => images::image_memory_bench(a),
    }
}

/// A free TCP port on 127.0.0.1 (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The program given with `--podvisor`, else `podvisor` beside this benchmark's binary
/// (target/release).
fn program(given: &Common) -> PathBuf {
    let path = (given.podvisor.clone())
        .unwrap_or_else(|| std::env::current_exe().unwrap().with_file_name("podvisor"));
    must_exist(path, "--podvisor")
}

/// `path`, refused by name (exit 2) when it is not there, before a bench makes its
/// directories, which a panic later would leave behind.
fn must_exist(path: PathBuf, flag: &str) -> PathBuf {
    if !path.is_file() {
        eprintln!(
            "podvisor-bench: {}: no such program (give it with {flag} PATH)",
            path.display()
        );
        std::process::exit(2);
    }
    path
}

/// A directory of this run's own under the system's temporary directory, removed when it is
/// dropped: at the end of a benchmark, and also when one panics (a pod that does not start in
/// time, a closed stdout), which would otherwise leave its pods' state and logs behind.
struct Scratch(PathBuf);

/// `$TMPDIR/podvisor-bench-NAME-PID`, made afresh (see `Scratch`).
fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("podvisor-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("make {}: {e}", dir.display()));
    Scratch(dir)
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A process a benchmark started (a pod's `podvisor run`, a peer, a watcher). Dropped while it
/// still runs, it is stopped as a user stops it (SIGTERM, SIGKILL 30 s later) and reaped, so
/// that a benchmark that panics midway leaves no pod running; one already waited for is left
/// alone. Declared after the `Scratch` it works in, it goes before that directory does.
struct Running(std::process::Child);

impl Running {
    /// SIGTERM, then its exit.
    fn stop(&mut self) -> std::process::ExitStatus {
        signal(self.0.id(), "TERM");
        self.0.wait().expect("wait for a child")
    }
}

impl std::ops::Deref for Running {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        signal(self.0.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.0.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = self.0.kill();
                let _ = self.0.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `Command::spawn`, the child held as `Running`.
trait SpawnRunning {
    fn running(&mut self) -> std::io::Result<Running>;
}

impl SpawnRunning for Command {
    fn running(&mut self) -> std::io::Result<Running> {
        self.spawn().map(Running)
    }
}

/// `kill -NAME PID`.
fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// A program copied into a directory of its own, as a user installs it, removed when dropped.
/// Why: a file the linker has just written is in the page cache in small folios, and the
/// kernel maps a whole folio of a file at a fault, so how much of a binary is resident, and
/// how many faults each exec of it takes, depends on how it came into the page cache; the
/// peers are measured as their packages installed them (docs/benchmarks.md).
struct Installed {
    dir: PathBuf,
    program: PathBuf,
}

/// `program` and the programs `beside` it (the keeper), copied (see `Installed`).
fn installed(program: &Path, beside: &[&str]) -> Installed {
    let dir = std::env::temp_dir().join(format!(
        "podvisor-bench-installed-{}-{}",
        std::process::id(),
        program.file_name().unwrap().to_string_lossy()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("make the install directory");
    let copy = |from: &Path| {
        let to = dir.join(from.file_name().unwrap());
        std::fs::copy(from, &to)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
        to
    };
    let installed = copy(program);
    for name in beside {
        copy(&program.with_file_name(name));
    }
    Installed {
        dir,
        program: installed,
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The CPU time (ns) of all of `pid`'s threads alive now.
fn cpu_ns(pid: u32) -> u64 {
    threads_ns(pid, None)
}

/// The CPU time (ns) of `pid`'s main thread alone (its thread group leader).
fn main_thread_ns(pid: u32) -> u64 {
    schedstat_ns(format!("/proc/{pid}/task/{pid}/schedstat")).unwrap_or(0)
}

/// The CPU time (ns) of `pid`'s threads alive now, from each one's schedstat; with `named`,
/// of the threads of that name only (0 without one).
fn threads_ns(pid: u32, named: Option<&str>) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    let wanted = |t: &std::fs::DirEntry| match named {
        None => true,
        Some(name) => {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|comm| comm.trim() == name)
        }
    };
    (tasks.flatten())
        .filter(wanted)
        .filter_map(|t| schedstat_ns(t.path().join("schedstat")))
        .sum()
}

/// The time a task has run (ns): the first field of a `schedstat` file.
fn schedstat_ns(path: impl AsRef<Path>) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn count_events(path: &Path, reason: &str) -> usize {
    let needle = format!("\"reason\":\"{reason}\"");
    std::fs::read_to_string(path)
        .map(|s| s.lines().filter(|l| l.contains(&needle)).count())
        .unwrap_or(0)
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Milliseconds of the day of an event's RFC 3339 `time`.
fn event_ms(line: &str) -> Option<f64> {
    let start = line.find("\"time\":\"")? + 8;
    let t = &line[start..start + 24];
    let h: f64 = t[11..13].parse().ok()?;
    let m: f64 = t[14..16].parse().ok()?;
    let s: f64 = t[17..23].parse().ok()?;
    Some(((h * 60.0 + m) * 60.0 + s) * 1000.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn vm_hwm_kb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `f` `runs` times for every init, round-robin, and returns each init's median.
fn measure_interleaved(inits: &[Init], runs: usize, mut f: impl FnMut(&Init) -> f64) -> Vec<f64> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); inits.len()];
    // One warm-up round, not counted: page cache and dynamic loader.
    for init in inits {
        f(init);
    }
    for _ in 0..runs {
        for (i, init) in inits.iter().enumerate() {
            samples[i].push(f(init));
        }
    }
    samples.into_iter().map(median).collect()
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The metrics text served on `port`.
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// The smallest bucket bound of histogram `metric` under which fraction `p` of the
/// observations between two scrapes fall.
fn bucket_percentile(before: &str, after: &str, metric: &str, p: f64) -> f64 {
    let prefix = format!("{metric}_bucket");
    let buckets = |text: &str| -> Vec<(f64, f64)> {
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| {
                let le = l.split("le=\"").nth(1)?.split('"').next()?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    };
    let (b, a) = (buckets(before), buckets(after));
    let diff: Vec<(f64, f64)> = a
        .iter()
        .map(|(le, n)| (*le, n - b.iter().find(|x| x.0 == *le).map_or(0.0, |x| x.1)))
        .collect();
    let total = diff.last().map_or(0.0, |x| x.1);
    diff.iter()
        .find(|(_, n)| *n >= p * total)
        .map_or(f64::NAN, |x| x.0)
}
