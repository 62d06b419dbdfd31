//! What fits where on a node, and why not: the rules the node arbiter admits slices by and the
//! kubelet plugin advertises capacity by, in one library so the plugin need not link the daemon.
//!
//! The modules form layers; each imports only from layers below it (`tests/layers.rs`):
//!
//! 1. [`admission`]: the admitted slices of a node and the admit/update/release decisions,
//!    over [`fit`] (one device's capacity, the refusal reasons) and [`placement`]
//!    (bin-pack / spread among the devices that fit).
//! 2. [`contexts`]: the measured CUDA context footprint per device and the charge it implies
//!    (`contexts.json`), with its probe's driver calls in [`contexts_driver`].
//! 3. [`nvml`]: the device inventory read through NVML; [`inventory`]: what a device is, the
//!    trait in front of NVML, and [`files`] (a private file written atomically).

// As in `region`, `abi` and the interposer: no silent narrowing or sign-changing `as`.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
// Functions with one job each: none over 100 lines (clippy.toml); a new one fails the lint.
#![warn(clippy::too_many_lines)]

pub mod admission;
pub mod contexts;
pub mod contexts_driver;
pub mod files;
pub mod fit;
pub mod inventory;
pub mod nvml;
pub mod placement;
