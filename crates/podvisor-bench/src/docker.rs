//! `podvisor-bench docker`: podvisor as the ENTRYPOINT of a real container beside Docker's own
//! `--init` (tini) and beside no init at all: the wall time of `docker run --rm IMAGE true`,
//! interleaved, medians; and podvisor's static PID 1 build beside Debian's tini-static: binary
//! size and peak RSS (VmHWM) while supervising `sleep`.

use super::*;

pub fn docker_bench(args: DockerArgs) {
    let image = args.image;
    let podvisor = must_exist(args.podvisor, "--podvisor");
    let quick = args.quick;
    let runs = if quick { 5 } else { 20 };
    let variants: [(&str, Vec<&str>); 3] = [
        ("podvisor (ENTRYPOINT)", vec!["run", "--rm", &image, "true"]),
        (
            "docker run --init (tini)",
            vec!["run", "--rm", "--init", "--entrypoint", "/bin/true", &image],
        ),
        (
            "no init",
            vec!["run", "--rm", "--entrypoint", "/bin/true", &image],
        ),
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for round in 0..=runs {
        for (i, (_, argv)) in variants.iter().enumerate() {
            let t = Instant::now();
            let status = Command::new("docker")
                .args(argv)
                .stdout(Stdio::null())
                .status()
                .expect("docker");
            assert!(status.success(), "docker {argv:?}: {status}");
            // The first round warms the engine and the page cache; it is not counted.
            if round > 0 {
                samples[i].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    println!("docker run --rm IMAGE true: median of {runs}, interleaved");
    for ((name, _), s) in variants.iter().zip(&samples) {
        println!("  {name:<28} {:8.1} ms", median(s.clone()));
    }

    let tini = Path::new("/usr/bin/tini-static");
    let mut peers: Vec<(&str, PathBuf)> = vec![("podvisor static", PathBuf::from(&podvisor))];
    if tini.exists() {
        peers.push(("tini-static", tini.to_path_buf()));
    } else {
        println!("tini-static is not installed (apt-get install tini): no peer for size and RSS");
    }
    println!();
    println!("static PID 1 builds: size, peak RSS supervising sleep (median of 5)");
    for (name, bin) in &peers {
        let size = std::fs::metadata(bin).unwrap().len();
        let rss: Vec<f64> = (0..5)
            .map(|_| {
                let mut cmd = Command::new(bin);
                if *name == "podvisor static" {
                    cmd.args(["init", "-q", "--", "sleep", "1"]);
                } else {
                    cmd.args(["-s", "--", "sleep", "1"]);
                }
                let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
                std::thread::sleep(Duration::from_millis(300));
                let kb = vm_hwm_kb(child.id()).unwrap_or(f64::NAN);
                child.wait().unwrap();
                kb
            })
            .collect();
        println!(
            "  {name:<16} {:9} bytes ({:.1} KiB)   {:7.0} KiB RSS",
            size,
            size as f64 / 1024.0,
            median(rss)
        );
    }
}
