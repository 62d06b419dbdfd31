//! Simulated GPU node: the ground truth shared by the fake `libcuda.so.1` and
//! `libnvidia-ml.so.1` of every process on the machine.
//!
//! The state lives in one file mapped `MAP_SHARED` by every participating process
//! (see [`layout`] for its format and [`shm`] for the only code that touches it raw):
//! per-device memory accounting charged to `(pid, start time)` process slots, and one
//! execution engine per device that arbitrates between processes like a time-sliced GPU.
//! Configuration comes from `GPUSLICE_SIM_*` variables (tests/sim/README.md).

pub mod clock;
pub mod config;
mod engine;
pub mod error;
pub mod layout;
pub mod liveness;
mod memtxn;
mod node;
pub mod procs;
pub mod shm;
mod trace;

pub use clock::{now_ns, sleep_until};
pub use config::{DeviceSpec, EngineMode, SimConfig, MAX_DEVICES};
pub use engine::{KernelTiming, ProcessSample, SAMPLE_PERIOD_NS};
pub use error::SimError;
pub use node::{Node, ProcessUsage};
