//! Each server starts, says where it listens, and accepts a connection; a bad command line is
//! refused. (podvisor's probe tests use them in earnest.)

// Test code reads top to bottom: the 120-line limit (clippy.toml) is for product code.
#![allow(clippy::too_many_lines)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the server when the test ends, whatever happens.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn each_server_listens_where_it_says() {
    let dir = std::env::temp_dir().join(format!("podvisor-testservers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log").display().to_string();
    let status = dir.join("status").display().to_string();
    for args in [
        vec!["grpc-health", &status],
        vec!["grpc-health", &status, "--no-health"],
        vec!["h2-health", "serving"],
        vec!["https", &log],
    ] {
        let port = free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_podvisor-testservers"))
            .arg(args[0])
            .arg(port.to_string())
            .args(&args[1..])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let server = Server(child);
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line).unwrap();
        assert_eq!(line, format!("listening {port}\n"), "{args:?}");
        std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        drop(server);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_command_line_is_refused() {
    for args in [&["h2-health", "1", "sideways"][..], &["gopher", "1"], &[]] {
        let out = Command::new(env!("CARGO_BIN_EXE_podvisor-testservers"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("usage: "));
    }
}
