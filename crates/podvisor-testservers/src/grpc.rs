//! A grpc.health.v1 server (tonic-health) whose overall status (service "") is read from a
//! file every 100 ms: `SERVING`, `NOT_SERVING` or `UNKNOWN`, `SERVING` when the file is
//! missing. Without the health service every call ends with UNIMPLEMENTED.

use std::path::PathBuf;
use std::time::Duration;

use tonic_health::ServingStatus;

pub fn serve(port: u16, status_file: PathBuf, health: bool) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std({
            let l = crate::listen::listen(port)?;
            l.set_nonblocking(true)?;
            l
        })?;
        let (reporter, service) = tonic_health::server::health_reporter();
        tokio::spawn(async move {
            loop {
                let status = match std::fs::read_to_string(&status_file) {
                    Ok(s) if s.trim() == "NOT_SERVING" => ServingStatus::NotServing,
                    Ok(s) if s.trim() == "UNKNOWN" => ServingStatus::Unknown,
                    _ => ServingStatus::Serving,
                };
                reporter.set_service_status("", status).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tonic::transport::Server::builder()
            .add_optional_service(health.then_some(service))
            .serve_with_incoming(incoming)
            .await
            .map_err(std::io::Error::other)
    })
}
