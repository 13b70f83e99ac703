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

    // A copy, as an install writes it: the linker's own file is in the page cache in small
    // folios and keeps less resident (see `Installed`); tini-static is its package's file.
    let install = installed(&podvisor, &[]);
    // Both as a subreaper, as `podvisor-bench init` measures `init -s -- sleep`.
    let init = |name, binary: &Path, argv: &[&str]| Init {
        name,
        argv: std::iter::once(binary.display().to_string())
            .chain(argv.iter().map(|a| a.to_string()))
            .collect(),
        binary: binary.to_path_buf(),
    };
    let mut inits = vec![init(
        "podvisor static",
        &install.program,
        &["init", "-s", "--"],
    )];
    let tini = Path::new("/usr/bin/tini-static");
    if tini.exists() {
        inits.push(init("tini-static", tini, &["-s", "--"]));
    } else {
        println!("tini-static is not installed (apt-get install tini): no peer for size and RSS");
    }
    let rss = measure_interleaved(&inits, 5, |init| {
        let mut child = Command::new(&init.argv[0])
            .args(&init.argv[1..])
            .args(["sleep", "1"])
            .stderr(Stdio::null())
            .running()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let kb = vm_hwm_kb(child.id()).unwrap_or(f64::NAN);
        child.wait().unwrap();
        kb
    });
    println!();
    println!("static PID 1 builds: size, peak RSS supervising sleep (median of 5, interleaved)");
    for (init, kb) in inits.iter().zip(rss) {
        let size = std::fs::metadata(&init.binary).unwrap().len();
        println!(
            "  {:<16} {:9} bytes ({:.1} KiB)   {:7.0} KiB RSS",
            init.name,
            size,
            size as f64 / 1024.0,
            kb
        );
    }
}
