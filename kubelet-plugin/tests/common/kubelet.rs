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
//! The wipe may land before or after the registration (it waits for the Node object, with
//! back-off), so tests run both orders. The `:authority` kubelet's grpc-go sends is reproduced by
//! the grpc-go client of [`super::grpcgo`].

use std::path::Path;

use gpuslice_kubelet_plugin::proto::registration as reg;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};

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
    let ch = gpuslice_kubelet_plugin::serve::unix_channel(socket)
        .await
        .expect("dial the registration socket");
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
