//! libgpuslice.so: the CUDA driver / NVML interposer. Loaded by `LD_PRELOAD` or
//! `/etc/ld.so.preload`, it exports wrappers under the driver's own names, overrides `dlsym` /
//! `dlvsym` and `cuGetProcAddress` so that every way of reaching the driver lands in a wrapper,
//! and enforces the slice's memory caps with reserve-then-allocate on the shared region
//! (`gpuslice-region`). See `docs/interposer.md`.
//!
//! Modules: `ctor` (the only load-time work), `real` / `elf` (finding the real functions),
//! `dl` (dlsym/dlvsym), `table` (name → wrapper), `state` (lazy mode, caps, usage record),
//! `cuda` / `pool` / `array` / `graph` / `nvml` (the memory wrappers and totals), `launch` (launch
//! entry points) calling `gate` (the launch gate), `nvml_procs` (NVML process lists and
//! samples limited to the slice's own processes), `guard` (re-entrancy), `log`.

// The wrappers are `extern "C"` and the profiles abort on panic, so a panic kills the
// application: no panicking construct outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

#[macro_use]
pub mod real;
pub mod array;
pub mod context;
pub mod ctor;
pub mod cuda;
pub mod dl;
pub mod elf;
// Its `ENTRIES[e]` indexes take `e` from `entry_of`, which returns only `e < MAX_DEVICES`
// (the array's length); converting them to checked reads is left for the launch-gate rework.
#[allow(clippy::indexing_slicing)]
mod gate;
pub mod graph;
pub mod guard;
pub mod launch;
pub mod log;
pub mod nvml;
pub mod nvml_private;
pub mod nvml_procs;
pub mod pool;
pub mod state;
pub mod table;
