//! The byte layout of the three files of a slice directory (`limits`, `lease`, `usage`).
//!
//! Everything here is `#[repr(C)]`, made only of atomics (any bit pattern is a valid value, so a
//! zero-filled or hostile file can never produce an invalid Rust value), with compile-time size
//! and alignment assertions. `docs/region.md` describes the same layout in prose; a change of any
//! offset or meaning bumps [`LAYOUT_VERSION`].

use std::sync::atomic::{AtomicU32, AtomicU64};

/// `b"GPUSLICE"` read as a little-endian `u64`: first word of every file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"GPUSLICE");
/// Version of the layout described in this module. Readers refuse any other version.
pub const LAYOUT_VERSION: u32 = 1;
/// Number of device entries in every file (a slice may use fewer: see `LimitsFile::device_count`).
pub const MAX_DEVICES: usize = 16;
/// Number of per-process records in the usage file.
pub const MAX_PROCS: usize = 1024;
/// Bytes of a device UUID string (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` is 40), NUL-padded.
pub const UUID_BYTES: usize = 96;

/// File names inside a slice directory.
pub const LIMITS_FILE: &str = "limits";
/// See [`LIMITS_FILE`].
pub const LEASE_FILE: &str = "lease";
/// See [`LIMITS_FILE`].
pub const USAGE_FILE: &str = "usage";

/// Where a slice directory appears inside a container (read-only, its [`USAGE_FILE`] bound
/// read-write on top), and where the interposer looks for it when [`SLICE_DIR_ENV`] is unset.
/// The only spelling of this path in product code: a layer test refuses another.
pub const CONTAINER_SLICE_DIR: &str = "/run/gpuslice";
/// The usage file inside a container: [`CONTAINER_SLICE_DIR`] + `/` + [`USAGE_FILE`] (tested).
pub const CONTAINER_USAGE_FILE: &str = "/run/gpuslice/usage";
/// The interposer inside a container.
pub const CONTAINER_INTERPOSER: &str = "/usr/lib/gpuslice/libgpuslice.so";
/// The preload file inside a container (one line: [`CONTAINER_INTERPOSER`]).
pub const CONTAINER_PRELOAD: &str = "/etc/ld.so.preload";
/// The variable naming the slice directory to the interposer.
pub const SLICE_DIR_ENV: &str = "GPUSLICE_SLICE_DIR";
/// The arbiter's default state directory on the host (socket, slice directories). Spelled like
/// [`CONTAINER_SLICE_DIR`] on purpose: inside a container only its own slice shows there.
pub const HOST_STATE_DIR: &str = "/run/gpuslice";

/// Which file a header belongs to (`FileHeader::kind`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// `limits`: written by the arbiter, read-only for the tenant.
    Limits = 1,
    /// `lease`: written by the arbiter, read-only for the tenant.
    Lease = 2,
    /// `usage`: written by the tenant's processes.
    Usage = 3,
}

/// First 64 bytes of every file.
#[repr(C)]
pub struct FileHeader {
    /// [`MAGIC`].
    pub magic: AtomicU64,
    /// [`FileKind`] as `u32`.
    pub kind: AtomicU32,
    /// [`LAYOUT_VERSION`].
    pub version: AtomicU32,
    /// `size_of::<FileHeader>()` (64).
    pub header_size: AtomicU32,
    /// [`MAX_DEVICES`] at creation.
    pub max_devices: AtomicU32,
    /// Total file size in bytes.
    pub file_size: AtomicU64,
    /// [`MAX_PROCS`] for the usage file, 0 otherwise.
    pub records: AtomicU32,
    /// Usage file: one past the highest record ever claimed (0 = not kept: every record may be
    /// in use). Only bounds the search for dead records; tenant-written, so never trusted for
    /// anything a neighbour depends on. Zero in the other files.
    pub records_in_use: AtomicU32,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 3],
}

/// `LimitsFile::flags`: the slice was made by the interposer itself (`GPUSLICE_MEMORY` without
/// an arbiter); no compute shares are enforced.
pub const LIMITS_FLAG_STANDALONE: u32 = 1;
/// `LimitsFile::flags`: an arbiter manages this slice's leases (the launch gate waits for a lease).
pub const LIMITS_FLAG_LEASED: u32 = 2;

/// `DeviceLimits::memory_cap` value meaning "no cap".
pub const UNCAPPED: u64 = u64::MAX;
/// Compute shares are in basis points: 10000 = 100 % of one device's time.
pub const SHARE_FULL: u32 = 10_000;

/// `DeviceLimits::priority` values.
pub const PRIORITY_LOW: u32 = 0;
/// See [`PRIORITY_LOW`].
pub const PRIORITY_NORMAL: u32 = 1;
/// See [`PRIORITY_LOW`].
pub const PRIORITY_HIGH: u32 = 2;

/// The `limits` file.
#[repr(C)]
pub struct LimitsFile {
    /// Common header, kind [`FileKind::Limits`].
    pub header: FileHeader,
    /// Bumped (after the change) by every update of any device entry.
    pub generation: AtomicU64,
    /// Number of devices assigned to the slice (≤ [`MAX_DEVICES`]); entry `i` is the slice's
    /// device `i` in the order the container sees them.
    pub device_count: AtomicU32,
    /// `LIMITS_FLAG_*` bits.
    pub flags: AtomicU32,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 6],
    /// One entry per device.
    pub devices: [DeviceLimits; MAX_DEVICES],
}

/// Limits of one device (192 bytes).
#[repr(C)]
pub struct DeviceLimits {
    /// Seqlock: odd while the arbiter rewrites this entry; readers retry.
    pub seq: AtomicU32,
    /// Index of the device on the host (NVML index).
    pub host_index: AtomicU32,
    /// Memory cap in bytes ([`UNCAPPED`] = none).
    pub memory_cap: AtomicU64,
    /// The device's real total memory in bytes (informational; 0 = unknown).
    pub device_total: AtomicU64,
    /// Guaranteed share, basis points (0 = best effort).
    pub compute_guarantee: AtomicU32,
    /// Ceiling, basis points ([`SHARE_FULL`] = none).
    pub compute_limit: AtomicU32,
    /// `PRIORITY_*`.
    pub priority: AtomicU32,
    /// Reserved, zero.
    pub reserved0: AtomicU32,
    /// Bytes charged to the slice for each process's CUDA context on this device, at its first
    /// context there (0 = contexts are not charged: standalone mode, older arbiters).
    pub context_charge: AtomicU64,
    /// Bytes promised to the slice beyond `memory_cap` for its contexts (admission's context
    /// reserve). Allocations and context charges together stay within `memory_cap` plus this;
    /// allocations alone within `memory_cap`.
    pub context_reserve: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 5],
    /// Device UUID as NUL-padded ASCII, 8 bytes per word, little-endian.
    pub uuid: [AtomicU64; UUID_BYTES / 8],
}

/// `LeaseSlot::word` bit: the slice holds the device's lease; launches may proceed.
pub const LEASE_HELD: u32 = 1;
/// `LeaseSlot::word` bit: the device is not time-sliced for this slice (launches never wait).
pub const LEASE_UNGATED: u32 = 2;
/// `LeaseSlot::word`: the generation counter occupies the bits above the two flags; the arbiter
/// adds `LEASE_GENERATION_ONE` on every grant or revoke so that futex waiters see a change.
pub const LEASE_GENERATION_ONE: u32 = 4;

/// The `lease` file.
#[repr(C)]
pub struct LeaseFile {
    /// Common header, kind [`FileKind::Lease`].
    pub header: FileHeader,
    /// One slot per device, each on its own cache line.
    pub devices: [LeaseSlot; MAX_DEVICES],
}

/// Lease state of one device for this slice (64 bytes).
#[repr(C)]
pub struct LeaseSlot {
    /// The futex word: `LEASE_*` flag bits and a generation counter.
    pub word: AtomicU32,
    /// Grant id (scheduler): changes on every grant, stays the same while a lease is renewed.
    /// Processes register pending work under it (`DeviceUsage::pending`). 0 = never granted.
    pub grant: AtomicU32,
    /// Bound on kernels each process of the slice keeps queued on the device (0 = none). Set
    /// by the arbiter while a high-priority slice shares the device, so a revoke leaves at most
    /// this many kernels to drain before the high-priority slice runs.
    pub max_queue: AtomicU32,
    /// Device time, µs, a launch may have queued ahead of it by its own process (0 = no such
    /// limit; zero in files written before it existed). Set by the arbiter for normal slices
    /// while a high-priority slice shares the device: a slice keeps its next kernel back until
    /// the one running is about to end, so a revoke leaves at most this much plus one launch.
    pub ahead_us: AtomicU32,
    /// A one-launch pass (0 = none; zero in files written before it existed): while the slice
    /// does not hold the lease, the id of the grant it will get next. Set by the arbiter for a
    /// `priority: high` slice on a shared device, so a request's own thread queues its first
    /// kernel at once instead of waiting for the arbiter's loop and then its own wake-up; the
    /// slice's gates take it once (`DeviceUsage::passed`), register that launch under this
    /// grant id and count themselves in `demand`, and the arbiter grants the slice under it.
    pub pass: AtomicU32,
    /// Reserved, zero.
    pub reserved32: AtomicU32,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 5],
}

/// `DeviceUsage::total` bit 63: the total is frozen by a process recomputing it.
pub const TOTAL_FROZEN: u64 = 1 << 63;
/// `DeviceUsage::total` bits 48..63: record index of the freezer (valid while frozen).
pub const TOTAL_OWNER_SHIFT: u32 = 48;
/// `DeviceUsage::total` bits 0..48: bytes reserved by the slice on the device.
pub const TOTAL_BYTES_MASK: u64 = (1 << TOTAL_OWNER_SHIFT) - 1;

/// The `usage` file.
#[repr(C)]
pub struct UsageFile {
    /// Common header, kind [`FileKind::Usage`].
    pub header: FileHeader,
    /// Per-device totals and demand.
    pub devices: [DeviceUsage; MAX_DEVICES],
    /// Per-process records.
    pub records: [ProcRecord; MAX_PROCS],
}

/// Usage of one device by the whole slice (64 bytes).
#[repr(C)]
pub struct DeviceUsage {
    /// Reserved bytes of the slice with the freeze bit and owner (`TOTAL_*`).
    pub total: AtomicU64,
    /// Futex word for the launch gate: number of threads waiting for the lease.
    pub demand: AtomicU32,
    /// Scheduler: the lease word under which the slice last launched (activity signal; stored
    /// by a launch only when it differs, so at most once per lease renewal per process).
    pub seen: AtomicU32,
    /// Scheduler: work not yet drained, `(grant << 32) | processes`. A process adds itself on
    /// its first launch under a grant and removes itself once the work it queued under that
    /// grant has completed after a revoke. The low half is the arbiter's futex word.
    pub pending: AtomicU64,
    /// Scheduler: `(grant << 32) | processes` that, after a revoke of `grant`, still have more
    /// than their last kernel queued. Raised with `pending` when a process registers, lowered
    /// once per process when at most one of its kernels is left (or when it is drained). At 0
    /// the arbiter grants the next slice while that last kernel runs (an early hand-off); zero
    /// for another grant (an older gate never writes it) means no early hand-off.
    pub near: AtomicU64,
    /// Scheduler: `(grant << 32) | processes` of the slice that, under `grant`, have work
    /// queued on the device or a thread inside a launch. A process adds itself on its first
    /// launch after being quiet and removes itself once everything it queued has completed
    /// and it launched nothing for a short linger. At 0 for the current grant the holder is
    /// idle and the arbiter hands the lease on at once when others wait.
    pub busy: AtomicU64,
    /// The one-launch pass (`LeaseSlot::pass`) a process of the slice took last: a gate takes
    /// the pass by a compare-and-swap from any other value to it, so the slice's processes
    /// together make one launch per pass. Only the slice's own gates read it.
    pub passed: AtomicU32,
    /// Reserved, zero.
    pub reserved32: AtomicU32,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 2],
}

/// `ProcRecord::state` low byte values.
pub const REC_FREE: u64 = 0;
/// Being claimed by the pid in the high half; start time not yet written.
pub const REC_CLAIMING: u64 = 1;
/// Owned by the live process (pid in the high half, start time in `start_time`).
pub const REC_LIVE: u64 = 2;
/// Its process died; excluded from totals, waiting to be freed.
pub const REC_DEAD: u64 = 3;

/// One process of the slice (208 bytes).
#[repr(C)]
pub struct ProcRecord {
    /// `REC_*` in the low byte, pid in bits 32..64.
    pub state: AtomicU64,
    /// Start time of the process (field 22 of `/proc/<pid>/stat`, clock ticks since boot).
    pub start_time: AtomicU64,
    /// Bytes this process holds on each device.
    pub reserved: [AtomicU64; MAX_DEVICES],
    /// Number of reserve/release operations of this process in flight on each device.
    pub inflight: [AtomicU32; MAX_DEVICES],
}

const _: () = {
    assert!(std::mem::size_of::<FileHeader>() == 64);
    assert!(std::mem::size_of::<DeviceLimits>() == 192);
    assert!(std::mem::size_of::<LimitsFile>() == 64 + 64 + 192 * MAX_DEVICES);
    assert!(std::mem::size_of::<LeaseSlot>() == 64);
    assert!(std::mem::size_of::<LeaseFile>() == 64 + 64 * MAX_DEVICES);
    assert!(std::mem::size_of::<DeviceUsage>() == 64);
    assert!(std::mem::size_of::<ProcRecord>() == 208);
    assert!(std::mem::size_of::<UsageFile>() == 64 + 64 * MAX_DEVICES + 208 * MAX_PROCS);
    assert!(std::mem::align_of::<UsageFile>() == 8);
    assert!(std::mem::align_of::<LimitsFile>() == 8);
    assert!(std::mem::align_of::<LeaseFile>() == 8);
};

/// Packs a record state word.
pub const fn rec_state(state: u64, pid: u32) -> u64 {
    state | ((pid as u64) << 32)
}

/// Unpacks a record state word into (state, pid).
pub const fn rec_unpack(word: u64) -> (u64, u32) {
    (word & 0xff, (word >> 32) as u32)
}

/// Packs a UUID string into words (truncated to `UUID_BYTES - 1`, NUL-padded).
pub fn uuid_to_words(uuid: &str) -> [u64; UUID_BYTES / 8] {
    let mut bytes = [0u8; UUID_BYTES];
    let src = uuid.as_bytes();
    for (b, s) in bytes.iter_mut().zip(src.iter().take(UUID_BYTES - 1)) {
        *b = *s;
    }
    let mut words = [0u64; UUID_BYTES / 8];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    words
}

/// Unpacks UUID words; stops at the first NUL, keeps only printable ASCII.
pub fn uuid_from_words(words: &[u64; UUID_BYTES / 8]) -> String {
    let mut out = String::new();
    for w in words {
        for b in w.to_le_bytes() {
            if b == 0 {
                return out;
            }
            if b.is_ascii_graphic() {
                out.push(char::from(b));
            }
        }
    }
    out
}
