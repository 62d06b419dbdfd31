//! The `DevicePlugin` gRPC service over a [`Plugin`]: the node's units as a watch channel
//! (refreshed by [`Plugin::refresh`] from NVML and the arbiter), `ListAndWatch` streaming every
//! change, `GetPreferredAllocation` / `Allocate` from [`super::place`].

use crate::policysource::PolicySource;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use gpuslice_api::client::{Client, ClientError};
use gpuslice_api::{NodeStatus, Request, Response};
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request as GrpcRequest, Response as GrpcResponse, Status};

use super::place;
use super::units::{device_id, inventory, GpuUnits, UnitPolicy};
use super::{HEALTHY, UNHEALTHY};
use crate::gpu::GpuSource;
use crate::proto::deviceplugin as api;

/// Why the arbiter's view of the node could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SlicesError {
    /// The arbiter is down, or said no.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// It answered something else than its status.
    #[error("arbiter answered status with {0}")]
    Unexpected(String),
}

/// The arbiter's view of the node (devices and slices).
pub trait NodeSlices: Send + Sync {
    /// `status`, or why it could not be had.
    fn status(&self) -> Result<NodeStatus, SlicesError>;
}

/// The arbiter daemon at `<state_dir>/arbiter.sock`.
#[derive(Clone, Debug)]
pub struct SocketSlices {
    state_dir: PathBuf,
    timeout: Duration,
}

impl SocketSlices {
    /// The arbiter of `state_dir`, each call bounded by `timeout`.
    pub fn new(state_dir: &Path, timeout: Duration) -> Self {
        SocketSlices {
            state_dir: state_dir.to_path_buf(),
            timeout,
        }
    }
}

impl NodeSlices for SocketSlices {
    fn status(&self) -> Result<NodeStatus, SlicesError> {
        let r = Client::connect(&self.state_dir, self.timeout)
            .and_then(|mut c| c.call(Request::Status {}))?;
        match r {
            Response::Status(s) => Ok(s),
            other => Err(SlicesError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// The plugin's state.
pub struct Plugin {
    policy: std::sync::Mutex<UnitPolicy>,
    /// Where the arbiter's policy comes from when it is followed ([`Plugin::following`]).
    source: Option<Arc<PolicySource>>,
    gpus: Arc<dyn GpuSource>,
    slices: Arc<dyn NodeSlices>,
    units: watch::Sender<Vec<GpuUnits>>,
}

impl Plugin {
    /// A plugin with its first inventory taken.
    pub fn new(policy: UnitPolicy, gpus: Arc<dyn GpuSource>, slices: Arc<dyn NodeSlices>) -> Self {
        let p = Plugin {
            policy: std::sync::Mutex::new(policy),
            source: None,
            gpus,
            slices,
            units: watch::Sender::new(Vec::new()),
        };
        p.refresh();
        p
    }

    /// This plugin computing units with the arbiter's policy as `source` has it at each
    /// refresh: when the arbiter measures its contexts again, the units follow.
    pub fn following(mut self, source: Arc<PolicySource>) -> Self {
        self.source = Some(source);
        self.refresh();
        self
    }

    /// The unit policy now (the admission policy taken from the source, when followed).
    fn unit_policy(&self) -> UnitPolicy {
        let mut p = self
            .policy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(src) = &self.source {
            p.policy = src.current();
        }
        p.clone()
    }

    /// Bytes per unit.
    pub fn unit(&self) -> u64 {
        self.unit_policy().unit
    }

    /// The units as last computed.
    pub fn units(&self) -> Vec<GpuUnits> {
        self.units.borrow().clone()
    }

    /// Recomputes the units from NVML and the arbiter; `true` when they changed (every
    /// `ListAndWatch` stream then sends the new list).
    pub fn refresh(&self) -> bool {
        let previous = self.units();
        let next = match self.gpus.gpus() {
            Ok(gpus) => {
                let st = self.slices.status().map_err(|e| e.to_string());
                inventory(
                    &self.unit_policy(),
                    &gpus,
                    &previous,
                    st.as_ref().map_err(String::as_str),
                )
            }
            // NVML itself failed: every GPU known so far is unhealthy.
            Err(e) => previous
                .iter()
                .map(|g| GpuUnits {
                    available: 0,
                    note: format!("NVML: {e}"),
                    ..g.clone()
                })
                .collect(),
        };
        if next == previous {
            return false;
        }
        for g in &next {
            let msg = format!(
                "{}: {} of {} units available{}{}",
                g.label(),
                g.available,
                g.units,
                if g.note.is_empty() { "" } else { "; " },
                g.note
            );
            if g.available < g.units {
                tracing::warn!("{msg}");
            } else {
                tracing::info!("{msg}");
            }
        }
        self.units.send_replace(next);
        true
    }

    /// Refreshes every `period` until `stop` completes.
    pub async fn watch(
        self: Arc<Self>,
        period: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(period) => {}
            }
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.refresh()).await;
        }
    }
}

/// The device list kubelet gets.
pub fn devices(units: &[GpuUnits]) -> Vec<api::Device> {
    units
        .iter()
        .flat_map(|g| {
            (0..g.units).map(move |n| api::Device {
                id: device_id(&g.uuid, n),
                health: if n < g.available { HEALTHY } else { UNHEALTHY }.into(),
                topology: None,
            })
        })
        .collect()
}

/// The gRPC service.
#[derive(Clone)]
pub struct Service {
    /// The plugin.
    pub plugin: Arc<Plugin>,
    /// Set when this server stops: its `ListAndWatch` streams end (a graceful shutdown waits
    /// for them, and kubelet keeps them open for ever).
    pub stop: watch::Receiver<bool>,
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl api::device_plugin_server::DevicePlugin for Service {
    async fn get_device_plugin_options(
        &self,
        _request: GrpcRequest<api::Empty>,
    ) -> Result<GrpcResponse<api::DevicePluginOptions>, Status> {
        Ok(GrpcResponse::new(options()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _request: GrpcRequest<api::Empty>,
    ) -> Result<GrpcResponse<Self::ListAndWatchStream>, Status> {
        let mut rx = self.plugin.units.subscribe();
        let (tx, out) = tokio::sync::mpsc::channel(4);
        let mut stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                let list = devices(&rx.borrow_and_update());
                if tx
                    .send(Ok(api::ListAndWatchResponse { devices: list }))
                    .await
                    .is_err()
                {
                    return; // kubelet closed the stream
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    _ = tx.closed() => return,
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        });
        Ok(GrpcResponse::new(Box::pin(ReceiverStream::new(out))))
    }

    async fn get_preferred_allocation(
        &self,
        request: GrpcRequest<api::PreferredAllocationRequest>,
    ) -> Result<GrpcResponse<api::PreferredAllocationResponse>, Status> {
        let units = self.plugin.units();
        let unit = self.plugin.unit();
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            let ids = place::preferred(
                &units,
                unit,
                &c.available_device_i_ds,
                &c.must_include_device_i_ds,
                c.allocation_size,
            )
            .map_err(|e| {
                tracing::warn!("GetPreferredAllocation: {e}");
                Status::resource_exhausted(e.to_string())
            })?;
            container_responses
                .push(api::ContainerPreferredAllocationResponse { device_i_ds: ids });
        }
        Ok(GrpcResponse::new(api::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: GrpcRequest<api::AllocateRequest>,
    ) -> Result<GrpcResponse<api::AllocateResponse>, Status> {
        let units = self.plugin.units();
        let unit = self.plugin.unit();
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            let a = place::allocate(&units, unit, &c.devices_ids).map_err(|e| {
                tracing::warn!("Allocate: {e}");
                Status::invalid_argument(e.to_string())
            })?;
            tracing::info!(gpu = %a.uuid, units = a.units, bytes = a.bytes, "allocated");
            container_responses.push(api::ContainerAllocateResponse {
                envs: a.envs().into_iter().collect(),
                ..Default::default()
            });
        }
        Ok(GrpcResponse::new(api::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _request: GrpcRequest<api::PreStartContainerRequest>,
    ) -> Result<GrpcResponse<api::PreStartContainerResponse>, Status> {
        Ok(GrpcResponse::new(api::PreStartContainerResponse {}))
    }
}

/// What the plugin tells kubelet at registration and in `GetDevicePluginOptions`.
pub fn options() -> api::DevicePluginOptions {
    api::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}
