//! `gpuslice-kubelet-plugin`: the Kubernetes DRA driver `gpuslice.io` on one node.
//!
//! * What the node offers the cluster: [`capacity`] (from the arbiter's own admission policy)
//!   and [`resourceslice`] (the ResourceSlice content), checked by [`validate`].
//! * What a claim becomes: [`plan`] (allocation result + [`sliceconfig`] → slice request), and
//!   [`driver`] (prepare / unprepare: arbiter, [`cdi`] spec, [`checkpoint`]).
//! * How kubelet reaches it: [`grpc`] services on the unix sockets of [`serve`], each connection
//!   through [`authority`] (kubelet's `:authority` made acceptable to h2).
//!
//! * The API server: [`apiserver`] (client, ResourceClaims) and [`publish`] (this node's
//!   ResourceSlices, republished at once when [`slicewatch`] sees them deleted or changed).
//!
//! Behind traits for tests without root, GPU, kubelet or API server: [`gpu::GpuSource`]
//! ([`nvml`] on a node), [`claim::ClaimSource`] ([`apiserver::ApiClaims`] on a node),
//! [`arbiter::Arbiter`], [`cdi::ClaimCdi`].

pub mod apiserver;
pub mod arbiter;
pub mod authority;
pub mod capacity;
pub mod cdi;
pub mod checkpoint;
pub mod claim;
pub mod deviceplugin;
pub mod driver;
pub mod gpu;
pub mod grpc;
pub mod nvml;
pub mod plan;
pub mod policysource;
pub mod privileges;
pub mod proto;
pub mod publish;
pub mod quantity;
pub mod resourceslice;
pub mod serve;
pub mod sliceconfig;
pub mod slicewatch;
pub mod validate;

/// The DRA driver name.
pub const DRIVER: &str = "gpuslice.io";
