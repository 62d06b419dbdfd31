//! The C ABI of NVIDIA's CUDA driver API and NVML as gpuslice needs it: handle types, result
//! codes, enums, `#[repr(C)]` structs, function signatures and the table of symbol versions used
//! by `cuGetProcAddress`. Shared by the interposer, the simulated driver and the workloads so
//! that all three agree on every layout.
//!
//! Two kinds of source:
//!
//! * **Written by hand** from the public headers (`cuda.h`, `nvml.h`; no bindgen: it would need
//!   libclang at build time and pull in thousands of items we never touch): `result` (CUresult),
//!   `types` (handles, device attributes, scalar typedefs), `memory` (allocation, pool, VMM,
//!   array, memcpy and IPC structs), `exec` (streams, events, modules, launches, graphs), `nvml`
//!   (NVML types), `exports` (every wrapped function's C signature, declared once: the `pfn`
//!   types and the interposer's export shells are generated from it by macros at compile time),
//!   and `procaddr`'s lookup code.
//! * **Generated, committed, not edited**: `procaddr_table.rs` (included by `procaddr`), the
//!   `cuGetProcAddress` symbol table — every `(name, CUDA version, flavour) → export` — written
//!   by `cargo xtask gen-procaddr INCLUDE_DIR…` (`xtask/src/gen_procaddr.rs`) from the
//!   `cudaTypedefs.h` and `cuda.h` of CUDA 12.9 and 13.0 (its `SOURCE_HEADERS`; the headers
//!   themselves are not committed). To change it, re-run the generator on newer headers.

// Firecracker's cast lints: no silent narrowing or sign-changing `as` in the ABI definitions.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
// Functions with one job each: none over 100 lines (clippy.toml); a new one fails the lint.
#![warn(clippy::too_many_lines)]

pub mod exec;
pub mod exports;
pub mod memory;
pub mod nvml;
pub mod procaddr;
pub mod result;
pub mod types;

pub use exports::pfn;
