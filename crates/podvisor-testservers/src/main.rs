//! Servers that podvisor's probe tests run as containers, so that the tests need nothing but
//! the Rust toolchain:
//!
//! ```text
//! podvisor-testservers grpc-health PORT STATUS_FILE [--no-health]
//! podvisor-testservers h2-health PORT MODE
//! podvisor-testservers https PORT LOG
//! ```
//!
//! Each prints `listening PORT` once it accepts connections.

mod grpc;
mod h2;
mod https;
mod listen;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port = |i: usize| -> u16 {
        args.get(i)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| usage())
    };
    let arg = |i: usize| -> &str { args.get(i).map_or_else(|| usage(), String::as_str) };
    let result = match args.first().map(String::as_str) {
        Some("grpc-health") => grpc::serve(
            port(1),
            arg(2).into(),
            !args.iter().any(|a| a == "--no-health"),
        ),
        Some("h2-health") => h2::serve(port(1), h2::Mode::parse(arg(2)).unwrap_or_else(|| usage())),
        Some("https") => https::serve(port(1), arg(2).into()),
        _ => usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podvisor-testservers: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: podvisor-testservers grpc-health PORT STATUS_FILE [--no-health]\n       podvisor-testservers h2-health PORT serving|not-serving|unimplemented|malformed|oversized|bad-huffman\n       podvisor-testservers https PORT LOG"
    );
    std::process::exit(2)
}
