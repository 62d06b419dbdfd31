//! The C ABI of NVIDIA's CUDA driver API and NVML as gpuslice needs it: handle types, result
//! codes, enums, `#[repr(C)]` structs and the table of symbol versions used by `cuGetProcAddress`.
//! Written by hand from the public headers (no bindgen: it would need libclang at build time and
//! pull in thousands of items we never touch). Shared by the interposer, the simulated driver and
//! the workloads so that all three agree on every layout.
//!
//! Files: `result` (CUresult), `types` (handles, device attributes, scalar typedefs), `memory`
//! (allocation, pool, VMM, array, memcpy and IPC structs), `exec` (streams, events, modules,
//! launches, graphs), `procaddr` (symbol → versioned export table), `nvml` (NVML types).

// Firecracker's cast lints: no silent narrowing or sign-changing `as` in the ABI definitions.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]

pub mod exec;
pub mod exports;
pub mod memory;
pub mod nvml;
pub mod procaddr;
pub mod result;
pub mod types;

pub use exports::pfn;
