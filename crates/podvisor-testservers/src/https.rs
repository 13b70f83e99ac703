//! An HTTPS server with a self-signed certificate made at start (rcgen), which the prober must
//! accept as the kubelet's does. `GET /healthz` answers 200, anything else 500; each request's
//! path and User-Agent is appended to the log file.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::sync::Arc;

pub fn serve(port: u16, log: PathBuf) -> std::io::Result<()> {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .map_err(std::io::Error::other)?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .map_err(std::io::Error::other)?;
    let config = Arc::new(config);
    let listener = crate::listen::listen(port)?;
    for conn in listener.incoming() {
        let tls = rustls::ServerConnection::new(config.clone()).map_err(std::io::Error::other)?;
        let mut stream = rustls::StreamOwned::new(tls, conn?);
        // A client that goes away mid-request (the startup probe's TCP connects) is not an error.
        if one_request(&mut stream, &log).is_ok() {
            stream.conn.send_close_notify();
            let _ = stream.flush();
        }
    }
    Ok(())
}

fn one_request<S: std::io::Read + Write>(stream: S, log: &std::path::Path) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut agent = String::from("None");
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("user-agent") {
                agent = value.trim().to_string();
            }
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    writeln!(f, "{path} {agent}")?;
    let (code, body) = if path == "/healthz" {
        ("200 OK", "ok")
    } else {
        ("500 Internal Server Error", "no")
    };
    let stream = reader.get_mut();
    write!(
        stream,
        "HTTP/1.1 {code}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}
