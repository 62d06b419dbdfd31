//! libgpuslice.so: the CUDA driver / NVML interposer. Loaded by `LD_PRELOAD` or
//! `/etc/ld.so.preload`, it exports wrappers under the driver's own names, overrides `dlsym` /
//! `dlvsym` and `cuGetProcAddress` so that every way of reaching the driver lands in a wrapper,
//! and enforces the slice's memory caps with reserve-then-allocate on the shared region
//! (`gpuslice-region`). See `docs/interposer.md`.
//!
//! Modules, bottom to top (no module imports one above it; `tests/layers.rs` checks there is
//! no circle): `log`, `guard` (re-entrancy), `ctor` (the only load-time work); `real` / `elf`
//! (finding the real functions); `entry` (the generator of the exported shells and the lookup
//! table, and the `Twin` of a `_ptsz` pair); `driver` (queries of the real driver: current device, UUID,
//! real total, pool and graph reserves, stream-ordered callbacks); `graphmem` (graph-memory
//! bookkeeping, plain data); `state` (the memory gate: mode, caps, charges, tables); `charge`
//! (what every allocating wrapper does around the real call: reserve-then-allocate,
//! free-then-uncharge, pool and graph-cache corrections); the modules behind the exports, `cuda`
//! / `pool` / `array` / `graph` / `context` / `nvml` / `nvml_procs` / `nvml_private` (the
//! wrappers' implementations and the slice's totals and NVML view) and `launch` (launch entry
//! points) calling `gate` (the launch gate, which asks `capture` about stream capture); `table` (the exported shells, generated from the
//! one declaration in `gpuslice_cuda_abi::for_each_wrapped!`, name → shell, and the
//! `cuGetProcAddress` implementations) and `dl` (dlsym/dlvsym) on top.

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
// As in `region` and `abi`: no silent narrowing or sign-changing `as`. A conversion that can be
// out of range is checked (`try_from`: saturating, `None` or an error code); an `as` that must stay
// (today one float-to-integer conversion, which std cannot check) carries an `allow` on the
// smallest item with the reason.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
// Functions with one job each: none is over 100 lines (clippy.toml), and a new one fails the lint.
#![warn(clippy::too_many_lines)]

// The CUDA driver is 64-bit only, and so is this library: the remaining plain `as` between
// `usize`, `u64` and `u32` (sizes the driver hands over, handles used as map keys) are lossless
// here, which is why the lints above pass them.
const _: () = assert!(
    usize::BITS == 64,
    "libgpuslice is built for 64-bit targets only"
);

#[macro_use]
pub mod real;
#[macro_use]
pub mod entry;
pub mod array;
mod capture;
pub mod charge;
pub mod context;
pub mod ctor;
pub mod cuda;
pub mod dl;
pub mod driver;
pub mod elf;
// Its `ENTRIES[e]` indexes take `e` from `entry_of`, which returns only `e < MAX_DEVICES`
// (the array's length); converting them to checked reads is left for the launch-gate rework.
#[allow(clippy::indexing_slicing)]
mod gate;
pub mod graph;
pub mod graphmem;
pub mod guard;
pub mod launch;
mod linger;
pub mod log;
pub mod nvml;
pub mod nvml_private;
pub mod nvml_procs;
pub mod pool;
pub mod state;
pub mod table;
