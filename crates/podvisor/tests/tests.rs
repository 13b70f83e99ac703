//! Integration tests of the `podvisor` binary: one test binary, modules per face (ripgrep's
//! layout), on the small harness in `harness.rs`.

mod api;
mod examples;
mod explain;
mod harness;
mod hooks;
mod init;
mod personas;
mod probes;
mod run;
mod validate;
