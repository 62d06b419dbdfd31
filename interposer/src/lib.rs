//! libgpuslice.so: the CUDA driver / NVML interposer (issue 3). Loaded by `LD_PRELOAD` or
//! `/etc/ld.so.preload`, it exports wrappers under the driver's own names, overrides `dlsym` /
//! `dlvsym` and `cuGetProcAddress` so that every way of reaching the driver lands in a wrapper,
//! and enforces the slice's memory caps with reserve-then-allocate on the shared region
//! (`gpuslice-region`). See `docs/interposer.md`.
//!
//! Modules: `ctor` (the only load-time work), `real` / `elf` (finding the real functions),
//! `dl` (dlsym/dlvsym), `table` (name → wrapper), `state` (lazy mode, caps, usage record),
//! `cuda` / `nvml` (the wrappers), `guard` (re-entrancy), `log`.

pub mod ctor;
pub mod cuda;
pub mod dl;
pub mod elf;
pub mod guard;
pub mod log;
pub mod nvml;
pub mod real;
pub mod state;
pub mod table;
