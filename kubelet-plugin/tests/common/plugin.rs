//! The DRA plugin serving its sockets in a test's tokio runtime (no binary).

use std::sync::Arc;

use gpuslice_kubelet_plugin::dra::serve::{serve, Sockets};
use tokio::sync::{oneshot, Notify};

use super::Node;

/// The plugin serving on its sockets under `node.root`, stopped on drop of the sender.
pub struct Plugin {
    pub sockets: Sockets,
    /// Notified at each successful registration.
    pub registered: Arc<Notify>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Plugin {
    pub fn start(node: &Node) -> Plugin {
        let sockets = Sockets {
            registry_dir: node.root.join("plugins_registry"),
            plugin_dir: node.root.join("plugins/gpuslice.io"),
        };
        let (tx, rx) = oneshot::channel();
        let driver = Arc::new(node.driver());
        let s = sockets.clone();
        let registered = Arc::new(Notify::new());
        let r = registered.clone();
        let task = tokio::spawn(async move {
            serve(&s, driver, r, async {
                let _ = rx.await;
            })
            .await
        });
        Plugin {
            sockets,
            registered,
            stop: Some(tx),
            task,
        }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
        assert!(!self.sockets.dra().exists() && !self.sockets.registration().exists());
    }
}
