//! Five choices of the link on glibc; the last two only for the PID 1 build (no `full` feature).
//!
//! Link gcc's unwinder statically instead of loading libgcc_s.so at every start. Why: std on
//! linux-gnu asks for `-lgcc_s`; loading that one extra shared library (and running its
//! constructor) costs about 0.2 ms per exec here: a fifth of tini's whole start-up for the PID 1
//! build, whose `panic = "abort"` never unwinds, and for the full build a share of every pod's
//! start, which execs the binary twice (`run` hands its plan to a fresh image of itself) and a
//! keeper once more. The static unwinder unwinds a panic of the full build just as well (gcc's
//! `-static-libgcc`). A directory with a `libgcc_s.so` linker script that points at gcc's
//! static `libgcc_eh.a` is searched before the system's, so the linker takes the static
//! unwinder and records no dependency. Where gcc's archive cannot be found, nothing changes
//! (the binary simply loads libgcc_s as usual).
//!
//! Put the functions that the binaries run day to day first and together: the PID 1 build's
//! listed in `init-order.txt` (written by `scripts/init-order`), the others' (`podvisor` and
//! `podvisor-keeper` with the `full` feature; the list is made from the shipped build, `--profile
//! dist`) in `run-order.txt` (`scripts/run-order`). Why: a page fault of a file maps the cached
//! pages around it too, so what is resident follows how far apart the used functions lie, not
//! their size: spread over the binary, they kept about 830 KiB of the PID 1 build resident and
//! 5.3 MiB of the shipped `podvisor run`'s (docs/benchmarks.md). Only with rust-lld, the linker
//! of x86_64 linux-gnu since Rust 1.90 (GNU ld has no `--symbol-ordering-file`);
//! `PODVISOR_CODE_ORDER=off` turns it off. Names the build does not have (another toolchain,
//! other dependencies, another profile: the names carry hashes of them) are skipped by the
//! linker.
//!
//! Leave out DT_INIT and DT_FINI. Why: the loader calls `_init` (and `exit` calls `_fini`),
//! which sit at the very end of the code, so that their one call kept another 64 KiB of the
//! binary resident. They do nothing here: crti's `_init` only calls `__gmon_start__` for gprof
//! builds, and constructors and destructors are in `.init_array` and `.fini_array`, which stay.
//! Naming a symbol that does not exist (`-init=`, `-fini=`) leaves the entries out; a static
//! binary calls `_init` from glibc's start itself and is not changed by it.
//!
//! Leave the unwinding tables out of the PID 1 build (`.eh_frame`, its index and
//! `.gcc_except_table`: 137 KB of its 1.1 MB), with a linker script that only discards them
//! (`INSERT`, so the linker's own layout stays). Why: its profile aborts on a panic, so nothing
//! unwinds; the tables were read-only pages mapped beside the strings, and an eighth of the
//! file. What goes: the backtrace `RUST_BACKTRACE=1` would print on a panic (the message
//! stays); a debug build of it, which would unwind, aborts on a panic instead.
//!
//! Link the PID 1 build as a position-dependent executable (`-no-pie`; its code is compiled
//! position-independent as usual, the linker fixes its address). Why: a PIE is relocated by the
//! loader at every start: it read 982 relocations (24 KB) and wrote every page of
//! `.data.rel.ro` that holds a pointer, so that podvisor's own file kept 292 KiB resident while
//! it supervised `sleep`; linked at a fixed address it keeps 228 (docs/benchmarks.md). What
//! goes: address-space randomization of the binary's own image (libraries, heap and stack are
//! still randomized), as for tini-static, Docker's `docker-init` and the images' static build.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let init_only = std::env::var_os("CARGO_FEATURE_FULL").is_none();
    // (The profile's `panic = "abort"` is not visible here; the static unwinder would serve a
    // panicking build just as well.)
    if !(var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu") {
        return;
    }
    let list = if init_only {
        "init-order.txt"
    } else {
        "run-order.txt"
    };
    symbol_order(&var, list);
    for entry in ["init", "fini"] {
        println!("cargo:rustc-link-arg-bins=-Wl,-{entry}=podvisor_has_no_{entry}_function");
    }
    if init_only {
        discard_unwind_tables(&var);
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    static_unwinder(&var);
}

/// Links gcc's unwinder statically where gcc has its archive (see the top of this file).
fn static_unwinder(var: &dyn Fn(&str) -> String) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let archive = Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let Some(archive) = archive.filter(|p| p.is_absolute() && p.exists()) else {
        println!("cargo:warning=libgcc_eh.a not found with `{cc} -print-file-name`: the binaries will load libgcc_s.so");
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

/// Asks the linker to place the functions listed in the file `list` first, where it is rust-lld.
fn symbol_order(var: &dyn Fn(&str) -> String, list: &str) {
    println!("cargo:rerun-if-changed={list}");
    println!("cargo:rerun-if-env-changed=PODVISOR_CODE_ORDER");
    // A linker chosen in RUSTFLAGS may not be rust-lld.
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    if var("PODVISOR_CODE_ORDER") == "off"
        || var("CARGO_CFG_TARGET_ARCH") != "x86_64"
        || flags.contains("linker")
        || flags.contains("fuse-ld")
    {
        return;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let minor = Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split_whitespace()
                .nth(1)?
                .split('.')
                .nth(1)?
                .parse::<u32>()
                .ok()
        });
    if minor.is_none_or(|m| m < 90) {
        return;
    }
    let file = PathBuf::from(var("CARGO_MANIFEST_DIR")).join(list);
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        file.display()
    );
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

/// Links the bins with a script that discards the unwinding tables (see the top of this file).
fn discard_unwind_tables(var: &dyn Fn(&str) -> String) {
    let script = PathBuf::from(var("OUT_DIR")).join("no-unwind-tables.ld");
    std::fs::write(
        &script,
        "SECTIONS {\n  /DISCARD/ : { *(.eh_frame) *(.eh_frame_hdr) *(.gcc_except_table .gcc_except_table.*) }\n} INSERT AFTER .text;\n",
    )
    .expect("write the linker script");
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
}
