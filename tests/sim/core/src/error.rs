//! Errors of the simulated node (configuration, shared state, resources).

/// Everything that can go wrong in the simulated node.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// Not enough device memory left for the request.
    #[error("device {dev}: out of memory (requested {requested} bytes, {free} free of {total})")]
    OutOfMemory {
        /// Device index.
        dev: u32,
        /// Bytes asked for.
        requested: u64,
        /// Bytes free at the time of the refusal.
        free: u64,
        /// Device capacity.
        total: u64,
    },
    /// No such device index.
    #[error("invalid device index {0}")]
    InvalidDevice(u32),
    /// A `GPUSLICE_SIM_*` variable (or a `SimConfig` field) is malformed.
    #[error("simulator configuration: {0}")]
    Config(String),
    /// The shared state file cannot be created, attached or used.
    #[error("simulator shared state: {0}")]
    State(String),
    /// The process table of the shared state is full.
    #[error("simulator process table full ({0} slots)")]
    ProcessTableFull(usize),
}
