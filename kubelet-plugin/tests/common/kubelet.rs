//! kubelet's start-up as the DRA plugin sees it — NOT a kubelet (none can be obtained on these
//! machines): what kubelet 1.3x does that the plugin must survive, each from kubelet's source.
//!
//! * [`wipe`]: `wipeResourceSlices` (`pkg/kubelet/cm/dra/plugin/registration.go`), run in the
//!   background by `newRegistrationHandler` when kubelet starts: DeleteCollection of every
//!   ResourceSlice with `spec.nodeName=<node>`, all drivers, through the API server.
//! * [`register`]: the plugin watcher finding the registration socket again
//!   (`pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go`): `GetInfo`, then
//!   `NotifyRegistrationStatus(registered: true)`.
//!
//! * [`channel`]: how kubelet dials a plugin socket (`grpc.DialContext(ctx, socketPath, …)`,
//!   no `WithAuthority`), so the `:authority` is the socket path, percent-encoded as grpc-go
//!   1.54 and later send it. tonic's client can only send a valid authority, so the bytes it
//!   writes pass through [`Rewriter::setting_authority`]. The grpc-go client of
//!   [`super::grpcgo`] shows the same with kubelet's own gRPC library.
//!
//! The wipe may land before or after the registration (it waits for the Node object, with
//! back-off), so tests run both orders.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use gpuslice_kubelet_plugin::authority::Rewriter;
use gpuslice_kubelet_plugin::proto::registration as reg;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// `path` percent-encoded as grpc-go's `encodeAuthority` does (every byte outside RFC 3986's
/// unreserved, sub-delims and `:[]@`).
pub fn encoded_authority(path: &Path) -> String {
    path.to_string_lossy()
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]@".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A unix stream whose outgoing HTTP/2 requests carry a given `:authority`.
struct AsKubelet {
    inner: UnixStream,
    rewriter: Rewriter,
    /// Rewritten bytes not yet written.
    pending: Vec<u8>,
    at: usize,
}

impl AsKubelet {
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.at < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.at += n;
        }
        self.pending.clear();
        self.at = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for AsKubelet {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for AsKubelet {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        this.rewriter.feed(buf)?;
        this.pending = this.rewriter.take();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// A gRPC channel to the plugin socket `path`, dialled as kubelet dials it (see the module's
/// description).
pub async fn channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    let authority = encoded_authority(&path);
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let (p, a) = (path.clone(), authority.clone());
            async move {
                Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(AsKubelet {
                    inner: UnixStream::connect(p).await?,
                    rewriter: Rewriter::setting_authority(a.as_bytes()),
                    pending: Vec::new(),
                    at: 0,
                }))
            }
        }))
        .await
        .expect("dial the plugin socket")
}

/// Deletes every ResourceSlice of `node`, as a starting kubelet does.
pub async fn wipe(client: &Client, node: &str) {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().fields(&format!("spec.nodeName={node}")),
    )
    .await
    .expect("DeleteCollection of the node's ResourceSlices");
}

/// Registers the plugin behind `socket` again: `GetInfo`, then `NotifyRegistrationStatus`.
pub async fn register(socket: &Path) -> reg::PluginInfo {
    let ch = channel(socket).await;
    let mut c = reg::registration_client::RegistrationClient::new(ch);
    let info = c
        .get_info(reg::InfoRequest {})
        .await
        .expect("GetInfo")
        .into_inner();
    c.notify_registration_status(reg::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .expect("NotifyRegistrationStatus");
    info
}
