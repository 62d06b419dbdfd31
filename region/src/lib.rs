//! The shared-memory ABI of a slice directory: the files the arbiter writes and tenants read
//! (`limits`, `lease`), the file the tenant's processes write (`usage`), and the lock-free
//! memory-reservation protocol on top of `usage`. Layout and protocol are described in
//! `docs/region.md`.
//!
//! Modules: `layout` (byte layout, versioned), `map` (the one audited mmap accessor),
//! `files` (typed views, creation), `protocol` (reserve / release / reclaim, generic so that the
//! model test can run it on `loom` atomics), `atomics` (the word traits it uses), `liveness`
//! (`/proc` pid + start time), `quantity` (`512Mi`, `25%`, HAMi limits), `sigbus` (readers of
//! tenant-writable files survive the tenant truncating them), `futex` (the waits and wakes on
//! region words that the launch gate and the scheduler share), `lease` (the lease protocol:
//! every word the launch gate and the scheduler share, both halves' state machines, generic
//! for its `loom` models).

// Readers of tenant-writable memory and the interposer's C paths must not panic (the profiles
// abort on panic): no unwrap, expect, panic or unchecked indexing outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]
// Firecracker's cast lints: every narrowing or sign-changing conversion of a value from a shared
// file or the caller is explicit (`try_from`), never a silent `as`.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]

pub mod atomics;
pub mod error;
pub mod files;
pub mod futex;
pub mod layout;
pub mod lease;
pub mod liveness;
pub mod map;
pub mod protocol;
pub mod quantity;
pub mod sigbus;

pub use error::RegionError;
pub use files::{
    create_slice, DeviceSpec, GateWords, Lease, LeaseWord, LeaseWriter, Limits, LimitsWriter,
    ProcessUsage, SchedSample, Slice, SliceSpec, Usage, UsageSnapshot,
};
pub use layout::{MAX_DEVICES, MAX_PROCS, UNCAPPED};
pub use protocol::{Liveness, RecomputeError, ReserveError};
pub use quantity::{parse_hami_limit, parse_quantity, MemQuantity};
