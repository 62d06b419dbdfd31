//! The plugin's socket in kubelet's device plugin directory, registration at `kubelet.sock`, and
//! re-registration: kubelet, when it restarts, deletes every file in that directory and creates
//! `kubelet.sock` anew. Every `poll` the plugin checks that its own socket is still there and
//! that `kubelet.sock` is the one it registered with (same inode); if not, it binds its socket
//! again and registers again (waiting for `kubelet.sock` to appear).

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::sync::watch;

use super::service::{options, Plugin, Service};
use super::{API_VERSION, KUBELET_SOCKET, RESOURCE, SOCKET};
use crate::authority::{incoming, server};
use crate::proto::deviceplugin as api;
use crate::socket::listen;

fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

enum RegisterError {
    /// kubelet is not there (yet): try again.
    Retry(String),
    /// kubelet answered and refused.
    Refused(String),
}

async fn register(kubelet: &Path) -> Result<(u64, u64), RegisterError> {
    let id = identity(kubelet)
        .ok_or_else(|| RegisterError::Retry(format!("{} is not there", kubelet.display())))?;
    let ch = crate::socket::unix_channel(kubelet)
        .await
        .map_err(|e| RegisterError::Retry(format!("connecting to {}: {e}", kubelet.display())))?;
    let mut client = api::registration_client::RegistrationClient::new(ch);
    let req = api::RegisterRequest {
        version: API_VERSION.into(),
        endpoint: SOCKET.into(),
        resource_name: RESOURCE.into(),
        options: Some(options()),
    };
    match client.register(req).await {
        Ok(_) => Ok(id),
        Err(s) if s.code() == tonic::Code::Unavailable => Err(RegisterError::Retry(s.to_string())),
        Err(s) => Err(RegisterError::Refused(s.message().to_string())),
    }
}

/// Where the plugin serves.
#[derive(Clone, Debug)]
pub struct Paths {
    /// kubelet's device plugin directory (`/var/lib/kubelet/device-plugins`).
    pub dir: PathBuf,
}

impl Paths {
    /// The plugin's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join(SOCKET)
    }

    /// kubelet's registration socket.
    pub fn kubelet(&self) -> PathBuf {
        self.dir.join(KUBELET_SOCKET)
    }
}

/// Serves and registers until `shutdown` completes, re-registering after kubelet restarts, and
/// refreshing the units every `poll`. An error when the socket cannot be bound or kubelet
/// refuses the registration (a device plugin is expected to exit then).
pub async fn serve(
    paths: &Paths,
    plugin: Arc<Plugin>,
    poll: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let refresher = tokio::spawn(plugin.clone().watch(poll, stopped(stop_rx.clone())));
    let sock = paths.socket();
    let kubelet = paths.kubelet();
    let result = async {
        let mut round = 0u32;
        while !*stop_rx.borrow() {
            round += 1;
            let listener = listen(&sock).with_context(|| format!("binding {}", sock.display()))?;
            let (srv_stop, srv_rx) = tokio::sync::oneshot::channel::<()>();
            let (streams_stop, streams_rx) = watch::channel(false);
            let server = tokio::spawn(
                // Kubelets before kubernetes#112597 send the socket path as :authority.
                server()
                    .add_service(api::device_plugin_server::DevicePluginServer::new(
                        Service {
                            plugin: plugin.clone(),
                            stop: streams_rx,
                        },
                    ))
                    .serve_with_incoming_shutdown(incoming(listener), async {
                        let _ = srv_rx.await;
                    }),
            );
            tracing::info!(socket = %sock.display(), "serving {RESOURCE}");
            let mut said = String::new();
            let registered = loop {
                if !sock.exists() {
                    // kubelet, starting, emptied its directory after the socket was bound.
                    tracing::info!("{} was removed: binding it again", sock.display());
                    break None;
                }
                match register(&kubelet).await {
                    Ok(id) => break Some(id),
                    Err(RegisterError::Refused(e)) => {
                        let _ = streams_stop.send(true);
                        let _ = srv_stop.send(());
                        let _ = server.await;
                        bail!("kubelet refused the registration of {RESOURCE}: {e}");
                    }
                    Err(RegisterError::Retry(e)) => {
                        if e != said {
                            tracing::info!("waiting for kubelet: {e}");
                            said = e;
                        }
                    }
                }
                let mut rx = stop_rx.clone();
                tokio::select! {
                    _ = rx.wait_for(|s| *s) => break None,
                    _ = tokio::time::sleep(poll) => {}
                }
            };
            // `None`: stopping, or the socket must be bound again (the `while` decides).
            if let Some(id) = registered {
                tracing::info!(
                    kubelet = %kubelet.display(),
                    "registered {RESOURCE} with kubelet{}",
                    if round > 1 { " again" } else { "" }
                );
                loop {
                    let mut rx = stop_rx.clone();
                    tokio::select! {
                        _ = rx.wait_for(|s| *s) => break,
                        _ = tokio::time::sleep(poll) => {}
                    }
                    if !sock.exists() || identity(&kubelet) != Some(id) {
                        tracing::warn!(
                            "kubelet restarted ({} or {} changed): serving and registering again",
                            kubelet.display(),
                            sock.display()
                        );
                        break;
                    }
                }
            }
            let _ = streams_stop.send(true);
            let _ = srv_stop.send(());
            server
                .await
                .context("device plugin server task")?
                .context("device plugin gRPC server")?;
        }
        Ok(())
    }
    .await;
    refresher.abort();
    let _ = std::fs::remove_file(&sock);
    result
}
