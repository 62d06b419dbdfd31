//! The `gpuslice` admin CLI as a library (so tests can drive each part): command-line
//! definitions ([`args`]), the control-socket client ([`client`]), turning options into requests
//! with errors that name the option ([`options`]), `gpuslice run` ([`run`]), and the status view
//! and its text / JSON rendering ([`status`]), engine configuration ([`configure`]) and the
//! node check ([`doctor`]). Reference: `docs/cli.md`.

pub mod args;
pub mod client;
pub mod configure;
pub mod configure_args;
pub mod doctor;
pub mod doctor_live;
pub mod doctor_owners;
pub mod options;
pub mod run;
pub mod run_mounts;
pub mod status;
