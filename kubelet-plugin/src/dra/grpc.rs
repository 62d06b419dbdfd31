//! The gRPC services kubelet calls: `pluginregistration.Registration` on the registration
//! socket, and the DRA node service `v1.DRAPlugin` and `v1beta1.DRAPlugin` (the same messages
//! under two packages) on the plugin socket. Thin: requests become [`Driver`] calls on a
//! blocking thread (the arbiter client and the checkpoint do file and socket I/O).

use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};

use crate::dra::claim::ClaimRef;
use crate::dra::driver::Driver;
use crate::proto::{dra_v1 as v1, dra_v1beta1 as v1beta1, registration as reg};
use crate::DRIVER;

/// Registration type kubelet expects from a DRA driver.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// The node services this plugin serves, as kubelet matches them at registration.
pub const SUPPORTED_VERSIONS: [&str; 2] = ["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// kubelet's answer to a registration that failed: its own sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kubelet refused the registration: {0}")]
pub struct RegistrationRefused(pub String);

/// `GetInfo` / `NotifyRegistrationStatus`.
#[derive(Clone, Debug)]
pub struct Registration {
    /// The DRA socket kubelet should use.
    pub endpoint: String,
    /// Told by kubelet whether registration succeeded (`true`), for readiness.
    pub registered: Arc<tokio::sync::watch::Sender<Option<Result<(), RegistrationRefused>>>>,
    /// Notified at each successful registration: a restarted kubelet has (or is about to have)
    /// deleted the node's ResourceSlices, so the publisher checks them ([`crate::dra::slicewatch`]).
    pub on_registered: Arc<tokio::sync::Notify>,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _request: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: PLUGIN_TYPE.into(),
            name: DRIVER.into(),
            endpoint: self.endpoint.clone(),
            supported_versions: SUPPORTED_VERSIONS.map(String::from).to_vec(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let s = request.into_inner();
        let outcome = if s.plugin_registered {
            tracing::info!("kubelet registered the plugin");
            self.on_registered.notify_one();
            Ok(())
        } else {
            tracing::error!(error = %s.error, "kubelet refused the registration");
            Err(RegistrationRefused(s.error))
        };
        self.registered.send_replace(Some(outcome));
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// The DRA node service over a [`Driver`].
#[derive(Clone)]
pub struct Dra {
    /// The driver.
    pub driver: Arc<Driver>,
}

fn refs(claims: Vec<v1::Claim>) -> Vec<ClaimRef> {
    claims
        .into_iter()
        .map(|c| ClaimRef {
            namespace: c.namespace,
            name: c.name,
            uid: c.uid,
        })
        .collect()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("driver task failed: {e}")))
}

impl Dra {
    async fn prepare(
        &self,
        req: v1::NodePrepareResourcesRequest,
    ) -> Result<v1::NodePrepareResourcesResponse, Status> {
        let driver = self.driver.clone();
        let claims = refs(req.claims);
        let results = blocking(move || driver.prepare(&claims)).await?;
        let claims = results
            .into_iter()
            .map(|(uid, r)| {
                let resp = match r {
                    Ok(devices) => v1::NodePrepareResourceResponse {
                        devices: devices
                            .into_iter()
                            .map(|d| v1::Device {
                                request_names: vec![d.request],
                                pool_name: d.pool,
                                device_name: d.device,
                                cdi_device_ids: d.cdi_device_ids,
                            })
                            .collect(),
                        error: String::new(),
                    },
                    Err(e) => v1::NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error: e.to_string(),
                    },
                };
                (uid, resp)
            })
            .collect();
        Ok(v1::NodePrepareResourcesResponse { claims })
    }

    async fn unprepare(
        &self,
        req: v1::NodeUnprepareResourcesRequest,
    ) -> Result<v1::NodeUnprepareResourcesResponse, Status> {
        let driver = self.driver.clone();
        let claims = refs(req.claims);
        let results = blocking(move || driver.unprepare(&claims)).await?;
        let claims = results
            .into_iter()
            .map(|(uid, r)| {
                let error = r.err().map(|e| e.to_string()).unwrap_or_default();
                (uid, v1::NodeUnprepareResourceResponse { error })
            })
            .collect();
        Ok(v1::NodeUnprepareResourcesResponse { claims })
    }
}

#[tonic::async_trait]
impl v1::dra_plugin_server::DraPlugin for Dra {
    async fn node_prepare_resources(
        &self,
        request: Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1::NodePrepareResourcesResponse>, Status> {
        self.prepare(request.into_inner()).await.map(Response::new)
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1::NodeUnprepareResourcesResponse>, Status> {
        self.unprepare(request.into_inner())
            .await
            .map(Response::new)
    }
}

/// v1beta1 and v1 messages are the same on the wire (same fields, same numbers): convert by
/// re-encoding rather than by a copy of every field.
fn convert<A: Message, B: Message + Default>(a: &A) -> Result<B, Status> {
    B::decode(a.encode_to_vec().as_slice())
        .map_err(|e| Status::internal(format!("v1beta1/v1 conversion: {e}")))
}

#[tonic::async_trait]
impl v1beta1::dra_plugin_server::DraPlugin for Dra {
    async fn node_prepare_resources(
        &self,
        request: Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodePrepareResourcesResponse>, Status> {
        let r = self.prepare(convert(request.get_ref())?).await?;
        convert(&r).map(Response::new)
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodeUnprepareResourcesResponse>, Status> {
        let r = self.unprepare(convert(request.get_ref())?).await?;
        convert(&r).map(Response::new)
    }
}
