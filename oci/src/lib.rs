//! What every gpuslice container entry point (`gpuslice-runtime`, `containerd-shim-gpuslice-v2`,
//! `gpuslice-hook`, the kubelet plugin's CDI edits) does to an OCI container: which containers get
//! a slice ([`select`]), the arbiter client ([`client`], from `gpuslice-api`), the edits themselves ([`edit`],
//! [`preload`], [`devices`]) on a JSON view of the OCI spec ([`spec`]), the whole bundle step with
//! its clean-up on failure ([`prepare`], [`bundle`]), the slice's life around the container
//! ([`lifecycle`], [`late_preload`]) and the OCI state a hook reads ([`hook_state`]). A library
//! only: the binaries are in `gpuslice-shim` and `gpuslice-hook`. Reference: `docs/runtime.md`.

pub mod bundle;
pub mod devices;
pub mod edit;
pub mod elf_versions;
pub mod hook_state;
pub mod ident;
pub mod late_preload;
pub mod lifecycle;
pub mod loadable;
pub mod preload;
pub mod prepare;
pub mod select;
pub mod settings;
pub mod spec;

/// The one arbiter client lives in `gpuslice-api` (the CLI uses it too); re-exported so code
/// written against this path (branches in flight) keeps building.
pub use gpuslice_api::client;
pub use prepare::{prepare_bundle, Outcome, PrepareError};
pub use settings::Settings;
