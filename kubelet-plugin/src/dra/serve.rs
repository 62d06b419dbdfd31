//! The two unix sockets: the registration socket in kubelet's `plugins_registry` directory
//! (`<registry dir>/gpuslice.io-reg.sock`) and the DRA socket in the plugin's own directory
//! (`<plugin dir>/dra.sock`). A stale socket file from an earlier run is replaced; both files
//! are removed when serving stops.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use crate::authority::{incoming, server};
use crate::dra::driver::Driver;
use crate::dra::grpc::{Dra, Registration};
use crate::proto::{dra_v1, dra_v1beta1, registration};
use crate::socket::listen;
use crate::DRIVER;

/// Where the sockets go.
#[derive(Clone, Debug)]
pub struct Sockets {
    /// kubelet's plugin registry (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: PathBuf,
    /// This plugin's directory (`/var/lib/kubelet/plugins/gpuslice.io`).
    pub plugin_dir: PathBuf,
}

impl Sockets {
    /// The registration socket.
    pub fn registration(&self) -> PathBuf {
        self.registry_dir.join(format!("{DRIVER}-reg.sock"))
    }

    /// The DRA node service socket.
    pub fn dra(&self) -> PathBuf {
        self.plugin_dir.join("dra.sock")
    }
}

/// Serves both sockets until `shutdown` completes, notifying `on_registered` at each successful
/// registration. The DRA socket is bound before the registration socket, so kubelet never sees
/// a plugin whose endpoint is not there yet.
pub async fn serve(
    sockets: &Sockets,
    driver: Arc<Driver>,
    on_registered: Arc<tokio::sync::Notify>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let dra_path = sockets.dra();
    let reg_path = sockets.registration();
    let dra_listener =
        listen(&dra_path).with_context(|| format!("binding {}", dra_path.display()))?;
    let reg_listener =
        listen(&reg_path).with_context(|| format!("binding {}", reg_path.display()))?;
    let (tx, _rx) = tokio::sync::watch::channel(None);
    let reg = Registration {
        endpoint: dra_path.display().to_string(),
        registered: Arc::new(tx),
        on_registered,
    };
    let dra = Dra { driver };
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stop = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    // kubelet's grpc-go sends the socket path as :authority: `incoming` makes h2 accept it.
    let dra_server = server()
        .add_service(dra_v1::dra_plugin_server::DraPluginServer::new(dra.clone()))
        .add_service(dra_v1beta1::dra_plugin_server::DraPluginServer::new(dra))
        .serve_with_incoming_shutdown(incoming(dra_listener), stop(&stop_tx));
    let reg_server = server()
        .add_service(registration::registration_server::RegistrationServer::new(
            reg,
        ))
        .serve_with_incoming_shutdown(incoming(reg_listener), stop(&stop_tx));
    tracing::info!(
        registration = %reg_path.display(),
        dra = %dra_path.display(),
        "serving"
    );
    let stopper = async move {
        shutdown.await;
        let _ = stop_tx.send(());
        Ok::<(), tonic::transport::Error>(())
    };
    let result = tokio::try_join!(dra_server, reg_server, stopper);
    let _ = std::fs::remove_file(&reg_path);
    let _ = std::fs::remove_file(&dra_path);
    result.map(|_| ()).context("gRPC server")
}
