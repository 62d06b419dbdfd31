//! The `gpuslice` admin CLI as a library (so tests can drive each part): command-line
//! definitions ([`args`]), the control-socket client ([`client`]: `gpuslice-api`'s, with the
//! CLI's timeout), turning options into requests
//! with errors that name the option ([`options`]), `gpuslice run` ([`run`]), and the status view
//! and its text / JSON rendering ([`status`]), engine configuration ([`configure`]) and the
//! node check ([`doctor`]). Reference: `docs/cli.md`.

// Functions with one job each: none over 100 lines (clippy.toml); a new one fails the lint.
#![warn(clippy::too_many_lines)]

pub mod args;
pub mod configure;
pub mod configure_args;
pub mod doctor;
pub mod options;
pub mod run;
pub mod run_mounts;
pub mod status;

/// The arbiter client, shared with the runtime, the hook and the kubelet plugin.
pub mod client {
    pub use gpuslice_api::client::{Client, ClientError};

    /// How long the CLI waits for the arbiter to answer (a `status` on a busy node).
    pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
}
