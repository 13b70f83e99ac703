//! The `podvisor` binary: all the work is in the library; this maps it to an exit code.
//!
//! `no_main`: as PID 1 we want nothing between exec and our code. Rust's usual start-up would
//! install a SIGSEGV alternate stack, read /proc/self/maps for the stack guard and set SIGPIPE to
//! ignored before `main`; skipping it keeps the inherited SIGPIPE disposition intact for the
//! child and keeps the resident size near tini's. std (args, env, I/O, Command) works the same:
//! on glibc it captures argv through `.init_array`.
#![no_main]

// SAFETY: exporting the C `main` symbol is what `no_main` requires; it is defined once, in this
// binary only, with the signature the C runtime calls it with.
#[allow(unsafe_code)]
#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    podvisor::cli::main(std::env::args_os().collect())
}
