//! Test support: kubelet's side of the device plugin API v1beta1 — **not a kubelet** (none can
//! be obtained on the machines this project is tested on). It speaks the real protocol over
//! real unix sockets: kubelet's `Registration` server on `<dir>/kubelet.sock`, and per
//! registration the `DevicePlugin` client on the socket the plugin named (options,
//! `ListAndWatch`), plus what kubelet's device manager does for one container: the free healthy
//! ids, `GetPreferredAllocation`, `Allocate`. Used by the kubelet plugin's stand-in tests and by
//! the CRI end-to-end test (`tests/e2e/tests/deviceplugin_cri.rs`); built with this crate's
//! `kubelet` feature (it links the plugin for its generated protocol types).
//!
//! Every function that starts tasks must run inside a tokio runtime.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::net::UnixListener;
use tokio::sync::{oneshot, watch};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

use gpuslice_kubelet_plugin::deviceplugin::{API_VERSION, HEALTHY, KUBELET_SOCKET};
use gpuslice_kubelet_plugin::proto::deviceplugin as api;
use gpuslice_kubelet_plugin::socket::unix_channel;

/// kubelet's `Registration` service: every request of the right version is passed on.
struct Registration(tokio::sync::mpsc::UnboundedSender<api::RegisterRequest>);

#[tonic::async_trait]
impl api::registration_server::Registration for Registration {
    async fn register(
        &self,
        request: Request<api::RegisterRequest>,
    ) -> Result<Response<api::Empty>, Status> {
        let r = request.into_inner();
        if r.version != API_VERSION {
            return Err(Status::invalid_argument(format!(
                "unsupported version {}",
                r.version
            )));
        }
        let _ = self.0.send(r);
        Ok(Response::new(api::Empty {}))
    }
}

/// The kubelet stand-in: registration server, and per registration a client on the plugin's
/// socket whose `ListAndWatch` stream feeds [`Kubelet::devices`].
pub struct Kubelet {
    dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    registrations: watch::Receiver<Vec<api::RegisterRequest>>,
    devices: watch::Receiver<Vec<api::Device>>,
    client: watch::Receiver<Option<Channel>>,
}

/// What kubelet's device manager got for one container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocated {
    /// The ids `GetPreferredAllocation` chose and `Allocate` was given.
    pub ids: Vec<String>,
    /// The environment `Allocate` returned (kubelet puts it in the container's CRI config).
    pub envs: Vec<(String, String)>,
}

fn status(s: Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

impl Kubelet {
    /// Starts like kubelet does: the directory emptied (created if missing), `kubelet.sock`
    /// bound and served.
    pub fn start(dir: &Path) -> std::io::Result<Kubelet> {
        if dir.exists() {
            for e in std::fs::read_dir(dir)? {
                std::fs::remove_file(e?.path())?;
            }
        }
        std::fs::create_dir_all(dir)?;
        let listener = UnixListener::bind(dir.join(KUBELET_SOCKET))?;
        let (reg_tx, mut reg_rx) = tokio::sync::mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel::<()>();
        tokio::spawn(
            Server::builder()
                .add_service(api::registration_server::RegistrationServer::new(
                    Registration(reg_tx),
                ))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stop_rx.await;
                }),
        );
        let (regs_tx, registrations) = watch::channel(Vec::new());
        let (dev_tx, devices) = watch::channel(Vec::new());
        let (client_tx, client) = watch::channel(None);
        let d = dir.to_path_buf();
        tokio::spawn(async move {
            while let Some(r) = reg_rx.recv().await {
                // Like kubelet: Register has been answered; a plugin that cannot be dialled, or
                // whose options differ from what it registered, is only logged.
                let Ok(ch) = unix_channel(&d.join(&r.endpoint)).await else {
                    continue;
                };
                let mut c = api::device_plugin_client::DevicePluginClient::new(ch.clone());
                let Ok(opts) = c.get_device_plugin_options(api::Empty {}).await else {
                    continue;
                };
                if Some(opts.into_inner()) != r.options {
                    eprintln!("kubelet stand-in: GetDevicePluginOptions differs from Register's");
                    continue;
                }
                let Ok(stream) = c.list_and_watch(api::Empty {}).await else {
                    continue;
                };
                let mut stream = stream.into_inner();
                let dev_tx = dev_tx.clone();
                tokio::spawn(async move {
                    while let Ok(Some(m)) = stream.message().await {
                        dev_tx.send_replace(m.devices);
                    }
                });
                client_tx.send_replace(Some(ch));
                regs_tx.send_modify(|v| v.push(r));
            }
        });
        Ok(Kubelet {
            dir: dir.to_path_buf(),
            stop: Some(stop),
            registrations,
            devices,
            client,
        })
    }

    /// kubelet going away (its socket closed and removed).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = std::fs::remove_file(self.dir.join(KUBELET_SOCKET));
    }

    /// The last device list `ListAndWatch` sent.
    pub fn devices(&self) -> Vec<api::Device> {
        self.devices.borrow().clone()
    }

    /// Waits until the device list satisfies `ok`; the list, or an error naming `what`.
    pub async fn wait_devices(
        &mut self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&[api::Device]) -> bool,
    ) -> Result<Vec<api::Device>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let d = self.devices.borrow_and_update();
                if ok(&d) {
                    return Ok(d.clone());
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "kubelet stand-in: timed out after {timeout:?} waiting for {what} (last list: {} devices)",
                    self.devices.borrow().len()
                ));
            }
            let _ = tokio::time::timeout(left, self.devices.changed()).await;
        }
    }

    /// Waits for at least `n` registrations (dialled back, options read, `ListAndWatch` open).
    pub async fn wait_registrations(
        &mut self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<api::RegisterRequest>, String> {
        match tokio::time::timeout(timeout, self.registrations.wait_for(|v| v.len() >= n)).await {
            Ok(Ok(v)) => Ok(v.clone()),
            _ => Err(format!(
                "kubelet stand-in: no registration #{n} within {timeout:?}"
            )),
        }
    }

    /// A client on the registered plugin's socket, once one registered.
    pub fn plugin(&self) -> Option<api::device_plugin_client::DevicePluginClient<Channel>> {
        self.client
            .borrow()
            .clone()
            .map(api::device_plugin_client::DevicePluginClient::new)
    }

    /// kubelet's device manager for one container asking `units`: the healthy ids not in
    /// `allocated`, `GetPreferredAllocation`, then `Allocate` of exactly the preferred ids
    /// (added to `allocated`). An error is the plugin's status (`Code: message`), what kubelet
    /// would put in the Pod's status.
    pub async fn allocate(
        &self,
        allocated: &mut BTreeSet<String>,
        units: i32,
    ) -> Result<Allocated, String> {
        let available: Vec<String> = self
            .devices()
            .into_iter()
            .filter(|d| d.health == HEALTHY && !allocated.contains(&d.id))
            .map(|d| d.id)
            .collect();
        let mut c = self
            .plugin()
            .ok_or("kubelet stand-in: no plugin registered")?;
        let pref = c
            .get_preferred_allocation(api::PreferredAllocationRequest {
                container_requests: vec![api::ContainerPreferredAllocationRequest {
                    available_device_i_ds: available,
                    must_include_device_i_ds: vec![],
                    allocation_size: units,
                }],
            })
            .await
            .map_err(status)?
            .into_inner();
        let ids = pref
            .container_responses
            .first()
            .map(|r| r.device_i_ds.clone())
            .unwrap_or_default();
        if ids.len() != units as usize {
            return Err(format!(
                "kubelet stand-in: GetPreferredAllocation gave {} ids for {units} units",
                ids.len()
            ));
        }
        let resp = c
            .allocate(api::AllocateRequest {
                container_requests: vec![api::ContainerAllocateRequest {
                    devices_ids: ids.clone(),
                }],
            })
            .await
            .map_err(status)?
            .into_inner();
        allocated.extend(ids.iter().cloned());
        let envs = resp
            .container_responses
            .first()
            .map(|r| r.envs.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        Ok(Allocated { ids, envs })
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// How many of `devs` are healthy units of the GPU `uuid`.
pub fn healthy(devs: &[api::Device], uuid: &str) -> usize {
    devs.iter()
        .filter(|d| d.id.starts_with(&format!("{uuid}::")) && d.health == HEALTHY)
        .count()
}
