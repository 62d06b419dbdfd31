//! `--mode device-plugin`: the Kubernetes device plugin of the extended resource
//! `gpuslice.io/gpu-memory` (device plugin API v1beta1), for clusters without consumable-capacity
//! DRA. One device-plugin "device" per unit of GPU memory (1 GiB by default), ids
//! `GPU-<uuid>::<n>` naming their GPU.
//!
//! * [`units`]: how many units each GPU offers (the DRA offer, [`crate::capacity::offer`], in
//!   units) and which of them are available given the slices the arbiter holds.
//! * [`place`]: `GetPreferredAllocation` (all units of a container on one GPU, bin-packed) and
//!   `Allocate` (one GPU per container, unknown ids refused), independent of gRPC.
//! * [`service`]: the `DevicePlugin` gRPC service; [`serve`]: its socket in kubelet's
//!   `device-plugins` directory, registration at `kubelet.sock`, and re-registration when
//!   kubelet restarts.
//! * kubelet's side of the API, for tests (not a kubelet), is in the test support crate
//!   (`gpuslice_test_support::kubelet`).
//!
//! The node-wide lock that keeps DRA and device-plugin modes from both offering the same GPU
//! memory to the scheduler is shared with DRA: [`crate::exclusive`].
//!
//! What a container gets from `Allocate` is environment only ([`ENV_MEMORY`], [`ENV_DEVICES`],
//! [`gpuslice_oci::select::DEVICE_PLUGIN_ENV`]); the runtime (`runtimeClassName: gpuslice`)
//! admits the slice at container creation and refuses a disagreeing `gpuslice.io/memory`.

pub mod place;
pub mod run;
pub mod serve;
pub mod service;
pub mod units;

/// The extended resource.
pub const RESOURCE: &str = "gpuslice.io/gpu-memory";
/// The device plugin API version this plugin speaks.
pub const API_VERSION: &str = "v1beta1";
/// kubelet's device plugin directory.
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/device-plugins";
/// kubelet's registration socket in that directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// This plugin's socket in that directory.
pub const SOCKET: &str = "gpuslice-gpu-memory.sock";
/// The cap, bytes, set by `Allocate`.
pub const ENV_MEMORY: &str = gpuslice_api::request::env::MEMORY;
/// The GPU (its UUID), set by `Allocate`.
pub const ENV_DEVICES: &str = gpuslice_api::request::env::DEVICES;
/// Device health as kubelet reads it.
pub const HEALTHY: &str = "Healthy";
/// Device health as kubelet reads it.
pub const UNHEALTHY: &str = "Unhealthy";
