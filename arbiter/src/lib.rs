//! The node arbiter's logic: the device inventory, admission (what fits where, and why not),
//! placement (bin-pack / spread) and, in the daemon, the control socket and persisted slice
//! records ([`server`], [`store`], [`nvml`]), the time-slice scheduler ([`sched`],
//! `docs/scheduling.md`), reclaim, the backstop, metrics, and the orderly stop ([`shutdown`]).
//!
//! The modules form layers; each imports only from layers below it (`tests/layers.rs` checks
//! that the imports have no circle):
//!
//! 1. **Daemon edges** — [`server`] (the control socket: accept, a bounded pool, one line in,
//!    one reply out), [`metrics`] (the HTTP scrape), [`reclaim`], [`backstop`] (its loop in
//!    `backstop/mod.rs`) and [`shutdown`]: each holds an `Arc<Mutex<State>>`.
//! 2. **Core** — [`state`]: the [`State`] (admission, records, scheduler, the [`state::Events`]
//!    counters and backstop history) and request handling (`state/handle.rs`).
//! 3. **Parts** — [`admission`] over [`fit`], [`placement`] and [`inventory`], [`contexts`] (the
//!    measured context footprint, its probe in [`contexts_driver`]) and [`nvml`]: re-exported
//!    from the `gpuslice-admission` crate; [`store`];
//!    [`slices`] (region files, measured use); [`owner`] (owner identity, `/proc`); [`sched`];
//!    the backstop's engine and adapters (`backstop/{engine,nvml,host}.rs`); [`nvml`];
//!    [`syscalls`]; [`privileges`]; [`convert`] (the number conversions the cast lints allow).
//!    None of them knows the state or the daemon.

// As in `region`, `abi` and the interposer: no silent narrowing or sign-changing `as`.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
// Functions with one job each: none over 100 lines (clippy.toml); a new one fails the lint.
#![warn(clippy::too_many_lines)]

// The admission rules live in their own crate (shared with the kubelet plugin); re-exported
// under their old paths so the daemon's modules read them as before.
pub use gpuslice_admission::{
    admission, contexts, contexts_driver, fit, inventory, nvml, placement,
};
pub mod backstop;
pub mod convert;
pub mod metrics;
pub mod owner;
pub mod privileges;
pub mod reclaim;
pub mod sched;
pub mod server;
pub mod shutdown;
pub mod slices;
pub mod state;
pub mod store;
pub mod syscalls;

pub use admission::{Admission, AdmitError, Admitted, Change, Holdings, Updated};
pub use fit::{Constraint, DeviceRefusal, Load, Policy, Refusal};
pub use inventory::{DeviceInfo, DeviceInventory, InventoryError, StaticInventory};
pub use state::State;
