//! For the PID 1 build only (no `full` feature, on glibc): link gcc's unwinder
//! statically instead of loading libgcc_s.so at every start.
//!
//! Why: std on linux-gnu asks for `-lgcc_s`; loading that one extra shared library costs about
//! 0.2 ms per exec here, a fifth of tini's whole start-up, for unwinding code that a
//! `panic = "abort"` binary never runs. A directory with a `libgcc_s.so` linker script that
//! points at gcc's static `libgcc_eh.a` is searched before the system's, so the linker takes the
//! static unwinder and records no dependency. Where gcc's archive cannot be found, nothing
//! changes (the binary simply loads libgcc_s as usual).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let init_only = std::env::var_os("CARGO_FEATURE_FULL").is_none();
    // (The profile's `panic = "abort"` is not visible here; the static unwinder would serve a
    // panicking build just as well.)
    if !(init_only && var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu")
    {
        return;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let archive = Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let Some(archive) = archive.filter(|p| p.is_absolute() && p.exists()) else {
        println!("cargo:warning=libgcc_eh.a not found with `{cc} -print-file-name`: the PID 1 build will load libgcc_s.so");
        return;
    };
    let dir = PathBuf::from(var("OUT_DIR")).join("static-libgcc");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/static-libgcc");
    std::fs::write(
        dir.join("libgcc_s.so"),
        format!("INPUT({})\n", archive.display()),
    )
    .expect("write the libgcc_s.so linker script");
    println!("cargo:rustc-link-search=native={}", dir.display());
}
