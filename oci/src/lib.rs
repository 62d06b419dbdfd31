//! Spec edits shared by every gpuslice entry point (`gpuslice-runtime`, `gpuslice-hook`, later
//! `containerd-shim-gpuslice-v2`): which containers get a slice ([`select`]), the arbiter client
//! ([`client`]), the edits themselves ([`edit`], [`preload`], [`devices`]) on a JSON view of the
//! OCI spec ([`spec`]), the whole bundle step with its clean-up on failure ([`prepare`]), and
//! runc's command line ([`runc_args`]). Reference: `docs/runtime.md`.

pub mod bundle;
pub mod client;
pub mod devices;
pub mod edit;
pub mod ident;
pub mod late_preload;
pub mod lifecycle;
pub mod logfile;
pub mod preload;
pub mod prepare;
pub mod runc_args;
pub mod select;
pub mod settings;
pub mod shimv2;
pub mod spec;

pub use prepare::{prepare_bundle, Outcome, PrepareError};
pub use settings::Settings;
