//! The unix sockets both plugins serve on and dial (kubelet's registration, the DRA socket, the
//! device plugin's socket and kubelet's `kubelet.sock`), and the stop signal both modes share.

use std::path::Path;
use std::time::Duration;

use tokio::net::UnixListener;
use tonic::transport::{Endpoint, Uri};

/// Binds a unix socket at `path` (its directory created, a stale socket file replaced).
pub fn listen(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    UnixListener::bind(path)
}

/// Resolves on SIGTERM (the DaemonSet's stop) or SIGINT, logging "stopping": the shutdown
/// future both modes hand their servers.
pub async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("stopping");
}

/// A gRPC channel to a unix socket.
pub async fn unix_channel(
    path: &Path,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    Endpoint::from_static("http://[::]:50051")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(p).await?,
                ))
            }
        }))
        .await
}
