//! `--mode dra` (the default): the Kubernetes DRA driver `gpuslice.io` (kubelet plugin API
//! v1 / v1beta1), for clusters with consumable-capacity DRA. Reference: `docs/dra.md`.
//!
//! * What the node offers the cluster: [`resourceslice`] (the ResourceSlice content from
//!   [`crate::capacity`]), checked by [`validate`].
//! * What a claim becomes: [`plan`] (allocation result + [`sliceconfig`] → slice request), and
//!   [`driver`] (prepare / unprepare: [`arbiter`], [`cdi`] spec, [`checkpoint`]).
//! * How kubelet reaches it: [`grpc`] services on the unix sockets of [`serve`].
//! * The API server: [`apiserver`] (client, ResourceClaims) and [`publish`] (this node's
//!   ResourceSlices, republished at once when [`slicewatch`] sees them deleted or changed).
//!
//! Behind traits for tests without root, kubelet or API server: [`claim::ClaimSource`]
//! ([`apiserver::ApiClaims`] on a node), [`arbiter::Arbiter`], [`cdi::ClaimCdi`].

pub mod apiserver;
pub mod arbiter;
pub mod cdi;
pub mod checkpoint;
pub mod claim;
pub mod driver;
pub mod grpc;
pub mod plan;
pub mod publish;
pub mod resourceslice;
pub mod serve;
pub mod sliceconfig;
pub mod slicewatch;
pub mod validate;
