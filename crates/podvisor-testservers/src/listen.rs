//! Where every server starts.

/// Binds 127.0.0.1:`port` and says so on stdout.
pub fn listen(port: u16) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    println!("listening {port}");
    Ok(listener)
}
