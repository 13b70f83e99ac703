//! `podvisor-keeper`: the keeper of a run's containers under `podvisor run --live-restore`
//! (see the library's `keeper` module), as a binary of its own: it links only what a keeper
//! runs, so that the memory it holds stays small.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(podvisor::keeper::main(&args));
}
