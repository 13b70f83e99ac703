//! `podvisor-bench init`: PID 1 figures beside tini and dumb-init.

use super::*;

pub fn init_bench(args: InitArgs) {
    let here = std::env::current_exe().unwrap();
    let target = here.parent().and_then(Path::parent).unwrap().to_path_buf();
    let podvisor = (args.podvisor).unwrap_or_else(|| target.join("init/podvisor"));
    let podvisor = must_exist(podvisor, "--podvisor");
    let testbin = (args.testbin).unwrap_or_else(|| here.with_file_name("podvisor-testbin"));
    let testbin = must_exist(testbin, "--testbin");
    let quick = args.quick;
    let install = installed(&podvisor, &[]);
    let inits = inits(&install.program);

    let (runs, rss_runs, reap_runs, zombies) = if quick {
        (30, 5, 2, 2_000)
    } else {
        (300, 15, 15, 20_000)
    };
    println!("podvisor-bench init: medians; {runs} runs of `-- true`, {rss_runs} of RSS, {reap_runs} of {zombies} zombies");
    println!();

    let wall = measure_interleaved(&inits, runs, |init| {
        let start = Instant::now();
        let status = Command::new(&init.argv[0])
            .args(&init.argv[1..])
            .arg("true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run init");
        assert!(status.success(), "{} -- true failed", init.name);
        start.elapsed().as_secs_f64() * 1e3
    });
    let rss = measure_interleaved(&inits, rss_runs, |init| {
        let mut child = Command::new(&init.argv[0])
            .args(&init.argv[1..])
            .args(["sleep", "0.4"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .running()
            .expect("run init");
        std::thread::sleep(Duration::from_millis(200));
        let kb = vm_hwm_kb(child.id()).expect("VmHWM");
        child.wait().unwrap();
        kb
    });
    let namespaces = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let reap = if namespaces {
        Some(measure_interleaved(&inits, reap_runs, |init| {
            reap_zombies(init, &testbin, zombies)
        }))
    } else {
        eprintln!("note: no PID namespace here (unshare -p -f); the reaping figure is left out");
        None
    };

    let sizes: Vec<f64> = inits
        .iter()
        .map(|i| {
            std::fs::metadata(&i.binary)
                .map(|m| m.len() as f64 / 1024.0)
                .unwrap_or(f64::NAN)
        })
        .collect();

    let rows = rows(wall, rss, reap, sizes);
    print_table(&inits, &rows);
}

/// podvisor's PID 1 build, and tini and dumb-init where they are installed.
fn inits(podvisor: &Path) -> Vec<Init> {
    let mut inits = vec![Init {
        name: "podvisor",
        argv: vec![
            podvisor.display().to_string(),
            "init".into(),
            "-s".into(),
            "--".into(),
        ],
        binary: podvisor.to_path_buf(),
    }];
    for (name, argv) in [
        ("tini", vec!["/usr/bin/tini", "-s", "--"]),
        ("dumb-init", vec!["/usr/bin/dumb-init"]),
    ] {
        if Path::new(argv[0]).exists() {
            inits.push(Init {
                name,
                argv: argv.into_iter().map(String::from).collect(),
                binary: PathBuf::from(argv_first(name)),
            });
        } else {
            eprintln!(
                "note: {} is not installed (apt-get install {name}); left out",
                argv[0]
            );
        }
    }

    inits
}

/// The table's rows: wall time, RSS, reaping (where PID namespaces work) and size.
fn rows(wall: Vec<f64>, rss: Vec<f64>, reap: Option<Vec<f64>>, sizes: Vec<f64>) -> Vec<Row> {
    let mut rows = vec![
        Row {
            label: "wall time of `INIT -- true` (ms)",
            values: wall,
            limit: Some(1.0),
            unit_limit: None,
        },
        Row {
            label: "peak RSS supervising sleep (KiB)",
            values: rss,
            limit: Some(1.0),
            unit_limit: None,
        },
    ];
    if let Some(reap) = reap {
        rows.push(Row {
            label: "reap zombies as PID 1 (ms)",
            values: reap,
            limit: Some(1.0),
            unit_limit: None,
        });
    }
    rows.push(Row {
        label: "binary size (KiB)",
        values: sizes,
        limit: None,
        unit_limit: Some(1024.0),
    });
    rows
}

fn argv_first(name: &str) -> String {
    format!("/usr/bin/{name}")
}

struct Row {
    label: &'static str,
    values: Vec<f64>,
    /// Target for podvisor / tini.
    limit: Option<f64>,
    /// Target for podvisor's own value.
    unit_limit: Option<f64>,
}

fn print_table(inits: &[Init], rows: &[Row]) {
    print!("{:<36}", "");
    for i in inits {
        print!("{:>12}", i.name);
    }
    println!("{:>16}  target", "podvisor/tini");
    for row in rows {
        print!("{:<36}", row.label);
        for v in &row.values {
            print!("{v:>12.2}");
        }
        let ratio = if inits.len() > 1 && inits[1].name == "tini" {
            row.values[0] / row.values[1]
        } else {
            f64::NAN
        };
        print!("{ratio:>16.2}");
        match (row.limit, row.unit_limit) {
            (Some(limit), _) => {
                let verdict = if ratio.is_nan() {
                    "n/a"
                } else if ratio <= limit {
                    "met"
                } else {
                    "MISSED"
                };
                println!("  ratio ≤ {limit}: {verdict}");
            }
            (None, Some(max)) => {
                let verdict = if row.values[0] <= max {
                    "met"
                } else {
                    "MISSED"
                };
                println!("  ≤ {max} KiB: {verdict}");
            }
            _ => println!(),
        }
    }
}

/// Milliseconds from the main child's exit (it prints the time, having made `n` zombies) to
/// the end of the namespace's init.
fn reap_zombies(init: &Init, testbin: &Path, n: usize) -> f64 {
    let out = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc"])
        .args(&init.argv)
        .arg(testbin)
        .args(["zombies", &n.to_string()])
        .stderr(Stdio::null())
        .output()
        .expect("unshare");
    let end = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let text = String::from_utf8_lossy(&out.stdout);
    let exited: u128 = text
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}: testbin said {text:?}", init.name));
    (end - exited) as f64 / 1e6
}
