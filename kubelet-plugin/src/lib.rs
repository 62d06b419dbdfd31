//! `gpuslice-kubelet-plugin`: how Kubernetes learns about gpuslice on one node. One binary, two
//! plugins, one at a time (a node-wide lock keeps them apart):
//!
//! * [`dra`] (`--mode dra`, the default): the DRA driver `gpuslice.io`; a ResourceClaim's
//!   memory becomes a slice admitted when kubelet prepares the claim, handed to the container
//!   as a CDI spec. Reference: `docs/dra.md`.
//! * [`deviceplugin`] (`--mode device-plugin`): the device plugin of the extended resource
//!   `gpuslice.io/gpu-memory`, for clusters without consumable-capacity DRA; the runtime admits
//!   the slice at container creation. Reference: `docs/device-plugin.md`.
//!
//! What both share sits here at the top: the GPUs ([`gpu::GpuSource`], [`nvml`] on a node),
//! what a node offers ([`capacity`], from the arbiter's own admission policy, with the policy
//! read by [`policysource`]), memory quantities ([`quantity`]), the gRPC plumbing ([`proto`],
//! [`socket`], and [`authority`]: kubelet's `:authority` made acceptable to h2), the
//! process's [`privileges`] and the lock that lets one mode run per node ([`exclusive`]). Neither plugin imports the other.

// Functions with one job each: a product function over 100 lines (clippy.toml) is split, or
// carries an `allow` saying why it must not be.
#![warn(clippy::too_many_lines)]

pub mod authority;
pub mod capacity;
pub mod deviceplugin;
pub mod dra;
pub mod exclusive;
pub mod gpu;
pub mod nvml;
pub mod policysource;
pub mod privileges;
pub mod proto;
pub mod quantity;
pub mod socket;

/// The DRA driver name.
pub const DRIVER: &str = "gpuslice.io";
