//! Byte layout of the shared state file (layout version [`VERSION`]).
//!
//! ```text
//! 0        header (4 KiB): magic, version, fingerprint, size, devices, slots, table lock
//! 4 KiB    MAX_DEVICES device blocks of 4 KiB: memory total, engine lock and timeline, busy buckets
//! 68 KiB   MAX_SLOTS process slots of 36 KiB: identity, then one sub-block per device
//! ```
//! All fields are 8-byte words accessed atomically (the futex word is a 4-byte half of one).

use crate::config::MAX_DEVICES;

/// `GPUSLSIM` in ASCII.
pub const MAGIC: u64 = 0x4d49_534c_5350_4750;
/// Bumped whenever this layout changes, or the meaning of the lock bytes beyond it (version 5:
/// owners hold an owner byte besides their slot byte, `liveness::OWNER_BASE`; version 6: the
/// per-device memory lock [`D_MEM_LOCK`] and its journal, `memtxn`).
pub const VERSION: u64 = 6;

/// Process slots in the table (version 2: 2048, so a node with 1024 tenant processes fits; version
/// 1 had 256). A real driver has no such table; the limit is the simulator's.
pub const MAX_SLOTS: usize = 2048;
/// Utilisation history buckets per device and per process-device.
pub const BUCKETS: usize = 128;
/// Width of one bucket (10 ms: 128 buckets cover 1.28 s).
pub const BUCKET_NS: u64 = 10_000_000;

// header
pub const H_MAGIC: usize = 0;
pub const H_VERSION: usize = 8;
pub const H_FINGERPRINT: usize = 16;
pub const H_SIZE: usize = 24;
pub const H_DEVICES: usize = 32;
pub const H_SLOTS: usize = 40;
pub const H_TABLE_LOCK: usize = 48;
/// One past the highest slot index ever claimed (scans stop there).
pub const H_SLOT_HWM: usize = 56;

// device blocks
pub const DEV_BASE: usize = 4096;
pub const DEV_STRIDE: usize = 4096;
pub const D_USED: usize = 0;
pub const D_ENGINE_LOCK: usize = 8;
/// u32 futex word, bumped on every dispatch.
pub const D_WAKE: usize = 16;
pub const D_FREE_AT: usize = 24;
/// Slot index + 1 of the latest grant (0: none).
pub const D_CUR_SLOT: usize = 32;
pub const D_CUR_START: usize = 40;
/// Slot index + 1 whose context the engine holds (for switch costs and round robin).
pub const D_LAST_SLOT: usize = 48;
pub const D_BUSY: usize = 56;
pub const D_KERNELS: usize = 64;
pub const D_SWITCHES: usize = 72;
/// Start time of the process that owns the latest grant (guards against slot reuse).
pub const D_CUR_ID: usize = 80;
/// Whether the latest grant is already folded into the buckets.
pub const D_CUR_COMMITTED: usize = 88;
/// Time-sliced engine (version 4): virtual time up to which the schedule is decided and
/// accounted; the held context is [`D_LAST_SLOT`].
pub const D_TS_T: usize = 96;
/// Time-sliced engine: start of the held context's first slice (boundaries every time slice).
pub const D_TS_SLICE_START: usize = 104;
/// Time-sliced engine: end of the switch into the held context.
pub const D_TS_RUN_FROM: usize = 112;
/// Robust lock under which [`D_USED`] and a slot's [`SD_USED`] change together, through the
/// journal below (`memtxn`, version 6).
pub const D_MEM_LOCK: usize = 120;
pub const D_BUCKETS: usize = 128;
/// The memory journal (after the buckets): non-zero while a transaction is being stored, then
/// the slot, the device total and the slot figure it stores (`memtxn`).
pub const D_J_VALID: usize = 2304;
pub const D_J_SLOT: usize = 2312;
pub const D_J_DEV: usize = 2320;
pub const D_J_SLOTV: usize = 2328;

// process slots
pub const SLOT_BASE: usize = DEV_BASE + MAX_DEVICES * DEV_STRIDE;
pub const SLOT_STRIDE: usize = 36 * 1024;
/// `(state << 32) | pid`; state [`SLOT_LIVE`] or 0 (free). The pid is the owner's in its own
/// pid namespace; whether the owner lives is told by its lock byte (`liveness`), not by the pid.
pub const S_TAG: usize = 0;
pub const S_START: usize = 8;
/// Inode of the owner's pid namespace (version 3).
pub const S_PIDNS: usize = 16;
/// Bumped by every claim of the slot, so a lock word naming a former owner reads as dead.
pub const S_GEN: usize = 24;
pub const SLOT_LIVE: u64 = 1;
pub const SD_BASE: usize = 64;
pub const SD_STRIDE: usize = 128 + BUCKETS * 16;
pub const SD_USED: usize = 0;
pub const SD_CTX: usize = 8;
/// Ready time of the waiting kernel (0: nothing waiting).
pub const SD_WANT_READY: usize = 16;
pub const SD_WANT_DUR: usize = 24;
pub const SD_GRANT_SEQ: usize = 32;
pub const SD_GRANT_START: usize = 40;
pub const SD_GRANT_END: usize = 48;
pub const SD_BUSY: usize = 56;
pub const SD_KERNELS: usize = 64;
/// Time-sliced engine (version 4): engine time the waiting kernel still needs.
pub const SD_REM: usize = 72;
/// Time-sliced engine: when the waiting kernel first ran (0: not yet).
pub const SD_STARTED: usize = 80;
pub const SD_BUCKETS: usize = 128;

/// Total file size.
pub const FILE_SIZE: usize = SLOT_BASE + MAX_SLOTS * SLOT_STRIDE;

const _: () = assert!(SD_BASE + MAX_DEVICES * SD_STRIDE <= SLOT_STRIDE);
const _: () = assert!(D_BUCKETS + BUCKETS * 16 <= D_J_VALID);
const _: () = assert!(D_J_SLOTV + 8 <= DEV_STRIDE);

/// Offset of a device field.
pub const fn dev(d: usize, field: usize) -> usize {
    DEV_BASE + d * DEV_STRIDE + field
}

/// Offset of a slot field.
pub const fn slot(s: usize, field: usize) -> usize {
    SLOT_BASE + s * SLOT_STRIDE + field
}

/// Offset of a slot's per-device field.
pub const fn sdev(s: usize, d: usize, field: usize) -> usize {
    SLOT_BASE + s * SLOT_STRIDE + SD_BASE + d * SD_STRIDE + field
}
