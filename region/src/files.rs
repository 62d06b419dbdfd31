//! Typed views of the three files of a slice directory and their creation.
//!
//! * [`Limits`] / [`Lease`]: read-only views (the tenant's side); only loads are reachable.
//! * [`LimitsWriter`]: the arbiter's side of `limits` (seqlocked multi-field updates).
//! * [`Usage`]: the tenant-writable ledger; implements [`Ledger`] for the reservation protocol.
//!
//! Values read from `usage` are hostile: anything another party derives from them goes through
//! [`Usage::snapshot`], which validates and clamps.

use crate::error::RegionError;
use crate::layout::*;
use crate::lease::gate::Gate;
use crate::lease::{SlotWords, UsageWords};
use crate::liveness::ProcEnv;
use crate::map::Mapping;
use crate::protocol::{self, Ledger, Liveness, RecomputeError, ReserveError};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// What the arbiter (or standalone mode) puts into `limits` for one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Host (NVML) index.
    pub host_index: u32,
    /// UUID string (`GPU-…`).
    pub uuid: String,
    /// Memory cap in bytes ([`UNCAPPED`] = none).
    pub memory_cap: u64,
    /// The device's real memory (0 = unknown).
    pub device_total: u64,
    /// Guaranteed share, basis points.
    pub compute_guarantee: u32,
    /// Ceiling, basis points.
    pub compute_limit: u32,
    /// `PRIORITY_*`.
    pub priority: u32,
}

impl Default for DeviceSpec {
    fn default() -> Self {
        DeviceSpec {
            host_index: 0,
            uuid: String::new(),
            memory_cap: UNCAPPED,
            device_total: 0,
            compute_guarantee: 0,
            compute_limit: SHARE_FULL,
            priority: PRIORITY_NORMAL,
        }
    }
}

/// Content of a new slice directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceSpec {
    /// The slice's devices, in the order the tenant sees them (at most [`MAX_DEVICES`]).
    pub devices: Vec<DeviceSpec>,
    /// `LIMITS_FLAG_*`.
    pub flags: u32,
}

fn write_device(d: &DeviceLimits, s: &DeviceSpec) {
    let seq = d.seq.load(Relaxed);
    d.seq.store(seq.wrapping_add(1) | 1, SeqCst);
    d.host_index.store(s.host_index, Relaxed);
    d.memory_cap.store(s.memory_cap, Relaxed);
    d.device_total.store(s.device_total, Relaxed);
    d.compute_guarantee
        .store(s.compute_guarantee.min(SHARE_FULL), Relaxed);
    d.compute_limit
        .store(s.compute_limit.min(SHARE_FULL), Relaxed);
    d.priority.store(s.priority.min(PRIORITY_HIGH), Relaxed);
    for (w, v) in d.uuid.iter().zip(uuid_to_words(&s.uuid)) {
        w.store(v, Relaxed);
    }
    d.seq.store((seq | 1).wrapping_add(1), Release);
}

fn read_device(d: &DeviceLimits) -> DeviceSpec {
    let mut tries = 0u32;
    loop {
        let s1 = d.seq.load(Acquire);
        let mut words = [0u64; UUID_BYTES / 8];
        for (o, w) in words.iter_mut().zip(d.uuid.iter()) {
            *o = w.load(Relaxed);
        }
        let spec = DeviceSpec {
            host_index: d.host_index.load(Relaxed),
            uuid: uuid_from_words(&words),
            memory_cap: d.memory_cap.load(Relaxed),
            device_total: d.device_total.load(Relaxed),
            compute_guarantee: d.compute_guarantee.load(Relaxed).min(SHARE_FULL),
            compute_limit: d.compute_limit.load(Relaxed).min(SHARE_FULL),
            priority: d.priority.load(Relaxed).min(PRIORITY_HIGH),
        };
        std::sync::atomic::fence(Acquire);
        let s2 = d.seq.load(Relaxed);
        tries += 1;
        // A writer that died mid-update leaves an odd seq: accept after many tries rather than
        // spin forever (every field is individually valid).
        if (s1 == s2 && s1 & 1 == 0) || tries > 10_000 {
            return spec;
        }
        std::hint::spin_loop();
    }
}

/// Creates `dir/name` atomically: fills a temporary file and links it into place.
/// With `replace = false`, an existing file wins and `Ok(false)` is returned.
fn publish<T: crate::map::FileLayout>(
    dir: &Path,
    name: &str,
    mode: u32,
    replace: bool,
    fill: impl FnOnce(&T),
) -> Result<bool, RegionError> {
    let final_path = dir.join(name);
    let tmp = dir
        .join(format!(
            ".{name}.tmp.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ))
        .with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    {
        let m = Mapping::<T>::create(&tmp)?;
        fill(m.get());
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .map_err(|e| RegionError::io(&tmp, e))?;
    let r = if replace {
        std::fs::rename(&tmp, &final_path).map(|()| true)
    } else {
        match std::fs::hard_link(&tmp, &final_path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    };
    let _ = std::fs::remove_file(&tmp);
    r.map_err(|e| RegionError::io(&final_path, e))
}

/// Creates (or, with `replace`, recreates) the three files of a slice in `dir` (which must exist).
/// Returns `false` when `replace` is off and a slice already existed (it is left untouched).
pub fn create_slice(dir: &Path, spec: &SliceSpec, replace: bool) -> Result<bool, RegionError> {
    if spec.devices.len() > MAX_DEVICES {
        return Err(RegionError::NoDevice(spec.devices.len()));
    }
    // usage first, limits last: a reader that finds `limits` finds the others too.
    publish::<UsageFile>(dir, USAGE_FILE, 0o666, replace, |_| {})?;
    let flags = spec.flags;
    publish::<LeaseFile>(dir, LEASE_FILE, 0o644, replace, |l| {
        let w = if flags & LIMITS_FLAG_LEASED != 0 {
            0
        } else {
            LEASE_UNGATED
        };
        for s in &l.devices {
            s.word.store(w, Relaxed);
        }
    })?;
    publish::<LimitsFile>(dir, LIMITS_FILE, 0o644, replace, |l| {
        for (d, s) in l.devices.iter().zip(&spec.devices) {
            write_device(d, s);
        }
        // At most MAX_DEVICES (checked above).
        l.device_count.store(
            u32::try_from(spec.devices.len()).unwrap_or(u32::MAX),
            Relaxed,
        );
        l.flags.store(spec.flags, Relaxed);
        l.generation.store(1, Release);
    })
}

/// Read-only view of `limits`.
#[derive(Debug)]
pub struct Limits {
    map: Mapping<LimitsFile>,
}

impl Limits {
    /// Maps `dir/limits` read-only.
    pub fn open(dir: &Path) -> Result<Self, RegionError> {
        Ok(Limits {
            map: Mapping::open(&dir.join(LIMITS_FILE), false)?,
        })
    }
    /// Number of devices of the slice (clamped to [`MAX_DEVICES`]).
    pub fn device_count(&self) -> usize {
        (self.map.get().device_count.load(Acquire) as usize).min(MAX_DEVICES)
    }
    /// `LIMITS_FLAG_*`.
    pub fn flags(&self) -> u32 {
        self.map.get().flags.load(Acquire)
    }
    /// Update counter.
    pub fn generation(&self) -> u64 {
        self.map.get().generation.load(Acquire)
    }
    /// The memory cap of device `dev` (one atomic load); [`UNCAPPED`] beyond the slice's devices.
    pub fn memory_cap(&self, dev: usize) -> u64 {
        if dev >= self.device_count() {
            return UNCAPPED;
        }
        self.map
            .get()
            .devices
            .get(dev)
            .map_or(UNCAPPED, |d| d.memory_cap.load(Acquire))
    }
    /// A consistent copy of device `dev`'s entry.
    pub fn device(&self, dev: usize) -> Option<DeviceSpec> {
        if dev >= self.device_count() {
            return None;
        }
        self.map.get().devices.get(dev).map(read_device)
    }
    /// Device `dev`'s context accounting: (charge per process, reserve beyond the cap), both
    /// 0 beyond the slice's devices or when the slice does not charge contexts.
    pub fn context(&self, dev: usize) -> (u64, u64) {
        if dev >= self.device_count() {
            return (0, 0);
        }
        self.map.get().devices.get(dev).map_or((0, 0), |d| {
            (
                d.context_charge.load(Acquire),
                d.context_reserve.load(Acquire),
            )
        })
    }
    /// The bound on allocations plus context charges on `dev`: the cap plus the context
    /// reserve when contexts are charged, else the cap.
    pub fn memory_limit(&self, dev: usize) -> u64 {
        let cap = self.memory_cap(dev);
        match self.context(dev) {
            (0, _) => cap,
            (_, reserve) => cap.saturating_add(reserve),
        }
    }
    /// All device entries.
    pub fn devices(&self) -> Vec<DeviceSpec> {
        (0..self.device_count())
            .filter_map(|i| self.device(i))
            .collect()
    }
}

/// The arbiter's writable view of `limits`.
#[derive(Debug)]
pub struct LimitsWriter {
    map: Mapping<LimitsFile>,
}

impl LimitsWriter {
    /// Maps `dir/limits` read-write.
    pub fn open(dir: &Path) -> Result<Self, RegionError> {
        Ok(LimitsWriter {
            map: Mapping::open(&dir.join(LIMITS_FILE), true)?,
        })
    }
    /// Rewrites device `dev`'s entry (seqlocked) and bumps the generation.
    pub fn set_device(&self, dev: usize, spec: &DeviceSpec) -> Result<(), RegionError> {
        let l = self.map.get();
        let d = l.devices.get(dev).ok_or(RegionError::NoDevice(dev))?;
        write_device(d, spec);
        if dev >= l.device_count.load(Relaxed) as usize {
            // `dev` < MAX_DEVICES: its entry exists.
            l.device_count
                .store(u32::try_from(dev + 1).unwrap_or(u32::MAX), Release);
        }
        l.generation.fetch_add(1, Release);
        Ok(())
    }
    /// Sets device `dev`'s context accounting: `charge` per process at its first context,
    /// `reserve` promised beyond the cap (see [`Limits::context`]).
    pub fn set_context(&self, dev: usize, charge: u64, reserve: u64) -> Result<(), RegionError> {
        let l = self.map.get();
        let d = l.devices.get(dev).ok_or(RegionError::NoDevice(dev))?;
        d.context_reserve.store(reserve, Release);
        d.context_charge.store(charge, Release);
        l.generation.fetch_add(1, Release);
        Ok(())
    }
    /// Changes only the memory cap (a single atomic store: takes effect on the next reservation).
    pub fn set_memory_cap(&self, dev: usize, cap: u64) -> Result<(), RegionError> {
        let l = self.map.get();
        let d = l.devices.get(dev).ok_or(RegionError::NoDevice(dev))?;
        d.memory_cap.store(cap, Release);
        l.generation.fetch_add(1, Release);
        Ok(())
    }
}

/// Load-only handle on one lease futex word.
#[derive(Clone, Copy, Debug)]
pub struct LeaseWord<'a>(&'a AtomicU32);

impl LeaseWord<'_> {
    /// Current word (`LEASE_*` bits and generation).
    #[inline(always)]
    pub fn load(&self) -> u32 {
        self.0.load(Acquire)
    }
    /// Address of the word, for `futex(FUTEX_WAIT)`.
    pub fn as_ptr(&self) -> *const u32 {
        self.0.as_ptr()
    }
}

/// Read-only view of `lease` (used by the issue-4 launch gate).
#[derive(Debug)]
pub struct Lease {
    map: Mapping<LeaseFile>,
}

impl Lease {
    /// Maps `dir/lease` read-only.
    pub fn open(dir: &Path) -> Result<Self, RegionError> {
        Ok(Lease {
            map: Mapping::open(&dir.join(LEASE_FILE), false)?,
        })
    }
    /// The lease word of device `dev`.
    pub fn word(&self, dev: usize) -> Option<LeaseWord<'_>> {
        self.map.get().devices.get(dev).map(|s| LeaseWord(&s.word))
    }
    /// The queue bound of device `dev` (`LeaseSlot::max_queue`, 0 = none).
    pub fn max_queue(&self, dev: usize) -> u32 {
        self.map
            .get()
            .devices
            .get(dev)
            .map_or(0, |s| s.max_queue.load(Relaxed))
    }
    /// The pace of device `dev` (`LeaseSlot::ahead_us`, 0 = none).
    pub fn ahead_us(&self, dev: usize) -> u32 {
        self.map
            .get()
            .devices
            .get(dev)
            .map_or(0, |s| s.ahead_us.load(Relaxed))
    }
    /// The current grant id of device `dev` (0 beyond the file's slots).
    pub fn grant(&self, dev: usize) -> u32 {
        self.map
            .get()
            .devices
            .get(dev)
            .map_or(0, |s| s.grant.load(Acquire))
    }
    /// The lease-protocol words of device `dev`'s slot (`crate::lease`; read only here).
    #[inline]
    pub fn slot(&self, dev: usize) -> Option<SlotWords<'_, AtomicU32>> {
        self.map.get().devices.get(dev).map(slot_words)
    }
    /// The one-launch pass of device `dev` (`LeaseSlot::pass`, 0 = none).
    pub fn pass(&self, dev: usize) -> u32 {
        self.map
            .get()
            .devices
            .get(dev)
            .map_or(0, |s| s.pass.load(Acquire))
    }
}

/// The arbiter's writable view of `lease`.
#[derive(Debug)]
pub struct LeaseWriter {
    map: Mapping<LeaseFile>,
}

impl LeaseWriter {
    /// Maps `dir/lease` read-write.
    pub fn open(dir: &Path) -> Result<Self, RegionError> {
        Ok(LeaseWriter {
            map: Mapping::open(&dir.join(LEASE_FILE), true)?,
        })
    }
    /// The lease-protocol words of device `dev`'s slot (`crate::lease::sched` writes them).
    #[inline]
    pub fn slot(&self, dev: usize) -> Option<SlotWords<'_, AtomicU32>> {
        self.map.get().devices.get(dev).map(slot_words)
    }
    /// The lease word of device `dev` (the arbiter stores and wakes).
    pub fn word(&self, dev: usize) -> Option<&AtomicU32> {
        self.map.get().devices.get(dev).map(|s| &s.word)
    }
    /// The grant id of device `dev` (`LeaseSlot::grant`).
    pub fn grant(&self, dev: usize) -> Option<&AtomicU32> {
        self.map.get().devices.get(dev).map(|s| &s.grant)
    }
    /// The queue bound of device `dev` (`LeaseSlot::max_queue`).
    pub fn max_queue(&self, dev: usize) -> Option<&AtomicU32> {
        self.map.get().devices.get(dev).map(|s| &s.max_queue)
    }
    /// The pace of device `dev` (`LeaseSlot::ahead_us`).
    pub fn ahead_us(&self, dev: usize) -> Option<&AtomicU32> {
        self.map.get().devices.get(dev).map(|s| &s.ahead_us)
    }
    /// The one-launch pass of device `dev` (`LeaseSlot::pass`).
    pub fn pass(&self, dev: usize) -> Option<&AtomicU32> {
        self.map.get().devices.get(dev).map(|s| &s.pass)
    }
}

/// The launch gate's words in `usage` for one device (tenant side, writable mapping only).
pub type GateWords<'a> = UsageWords<'a, AtomicU32, AtomicU64>;

#[inline]
fn slot_words(s: &LeaseSlot) -> SlotWords<'_, AtomicU32> {
    SlotWords {
        word: &s.word,
        grant: &s.grant,
        max_queue: &s.max_queue,
        ahead_us: &s.ahead_us,
        pass: &s.pass,
    }
}

#[inline]
fn usage_words(d: &DeviceUsage) -> GateWords<'_> {
    UsageWords {
        demand: &d.demand,
        seen: &d.seen,
        pending: &d.pending,
        near: &d.near,
        busy: &d.busy,
        passed: &d.passed,
    }
}

/// A copy of one device's scheduler words from `usage`, as the arbiter reads them. Hostile:
/// any value may be anything; the scheduler only uses them for this slice's own decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedSample {
    /// Threads waiting at the gate (claimed).
    pub demand: u32,
    /// Lease word of the last launch.
    pub seen: u32,
    /// `(grant << 32) | processes` with undrained work.
    pub pending: u64,
    /// `(grant << 32) | processes` with more than their last kernel still queued.
    pub near: u64,
    /// `(grant << 32) | processes` with work queued or a launch in progress.
    pub busy: u64,
}

/// One live process as read (and clamped) from `usage`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessUsage {
    /// Record index.
    pub record: usize,
    /// Process id (as seen in the tenant's pid namespace).
    pub pid: u32,
    /// Start time in clock ticks since boot.
    pub start_time: u64,
    /// Bytes per device (clamped to the cap of that device).
    pub reserved: Vec<u64>,
}

/// A validated copy of `usage`, safe to show or act on outside the tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageSnapshot {
    /// Per-device totals, clamped to `[0, cap]` where a cap is given.
    pub used: Vec<u64>,
    /// Records in state LIVE with a plausible pid.
    pub processes: Vec<ProcessUsage>,
}

/// The tenant-writable `usage` file, with the reservation protocol on top.
#[derive(Debug)]
pub struct Usage {
    map: Mapping<UsageFile>,
    devices: usize,
    env: ProcEnv,
}

// The protocol calls these with `dev < devices()` (≤ MAX_DEVICES, the array's length, checked
// when the file is opened) and `rec < records()` (= MAX_PROCS), the trait's contract; indexes
// never come from the shared file.
#[allow(clippy::indexing_slicing)]
impl Ledger for Usage {
    type W64 = AtomicU64;
    type W32 = AtomicU32;
    fn devices(&self) -> usize {
        self.devices
    }
    fn records(&self) -> usize {
        MAX_PROCS
    }
    fn in_use(&self) -> usize {
        // Tenant-written: garbage can only widen the search (0 or too large: every record) or
        // hide the slice's own dead records from it (its own charges stay: self-harm only).
        match usize::try_from(self.map.get().header.records_in_use.load(Acquire)) {
            Ok(n) if n > 0 => n.min(MAX_PROCS),
            _ => MAX_PROCS,
        }
    }
    fn note_claim(&self, rec: usize) {
        if let Ok(n) = u32::try_from(rec.saturating_add(1)) {
            self.map.get().header.records_in_use.fetch_max(n, AcqRel);
        }
    }
    fn total(&self, dev: usize) -> &AtomicU64 {
        &self.map.get().devices[dev].total
    }
    fn state(&self, rec: usize) -> &AtomicU64 {
        &self.map.get().records[rec].state
    }
    fn start_time(&self, rec: usize) -> &AtomicU64 {
        &self.map.get().records[rec].start_time
    }
    fn reserved(&self, rec: usize, dev: usize) -> &AtomicU64 {
        &self.map.get().records[rec].reserved[dev]
    }
    fn inflight(&self, rec: usize, dev: usize) -> &AtomicU32 {
        &self.map.get().records[rec].inflight[dev]
    }
}

impl Usage {
    /// Maps `dir/usage` read-write for a slice of `devices` devices.
    pub fn open(dir: &Path, devices: usize) -> Result<Self, RegionError> {
        Self::open_file(&dir.join(USAGE_FILE), devices, true)
    }

    /// Maps `dir/usage` read-only (arbiter status; never modifies the tenant's file).
    pub fn open_read_only(dir: &Path, devices: usize) -> Result<Self, RegionError> {
        Self::open_file(&dir.join(USAGE_FILE), devices, false)
    }

    fn open_file(path: &Path, devices: usize, writable: bool) -> Result<Self, RegionError> {
        Ok(Usage {
            map: Mapping::open(path, writable)?,
            devices: devices.min(MAX_DEVICES),
            env: ProcEnv::default(),
        })
    }

    fn check(&self, rec: usize, dev: usize) -> Result<(), RegionError> {
        if dev >= self.devices {
            return Err(RegionError::NoDevice(dev));
        }
        if rec >= MAX_PROCS || !self.map.writable() {
            return Err(RegionError::Full(MAX_PROCS));
        }
        Ok(())
    }

    /// Claims a record for (`pid`, `start`), reclaiming dead records if all are taken.
    pub fn claim(&self, pid: u32, start: u64) -> Result<usize, RegionError> {
        if !self.map.writable() {
            return Err(RegionError::Full(0));
        }
        if let Some(r) = protocol::claim(self, pid, start) {
            return Ok(r);
        }
        // Every record is taken: free those of dead processes. The freeze needs an owner tag; we
        // have no record yet, so the last index serves as the tag (if its own process is alive,
        // waiters simply wait for our bounded recomputation to finish).
        let _ = protocol::reclaim(self, &self.env, MAX_PROCS - 1);
        protocol::claim(self, pid, start).ok_or(RegionError::Full(MAX_PROCS))
    }

    /// Gives up record `rec` of `pid` (at exit); its bytes leave the totals at the next reclaim.
    pub fn unclaim(&self, rec: usize, pid: u32) -> bool {
        self.map.writable() && protocol::unclaim(self, rec, pid)
    }

    /// Reserves `bytes` on `dev` for record `rec` under `cap`. On [`ReserveError::OverCap`],
    /// reclaims dead processes once and retries.
    pub fn reserve(
        &self,
        rec: usize,
        dev: usize,
        bytes: u64,
        cap: u64,
    ) -> Result<(), ReserveError> {
        if self.check(rec, dev).is_err() {
            return Err(ReserveError::OverCap { used: 0, cap: 0 });
        }
        match protocol::reserve(self, &self.env, rec, dev, bytes, cap) {
            Err(e @ ReserveError::OverCap { .. }) => {
                // Memory of processes that died (even by SIGKILL) may still be charged.
                match protocol::reclaim(self, &self.env, rec) {
                    Ok(n) if n > 0 => protocol::reserve(self, &self.env, rec, dev, bytes, cap),
                    _ => Err(e),
                }
            }
            r => r,
        }
    }

    /// Returns `bytes` on `dev` of record `rec`; returns what was actually released.
    pub fn release(&self, rec: usize, dev: usize, bytes: u64) -> u64 {
        if self.check(rec, dev).is_err() {
            return 0;
        }
        protocol::release(self, &self.env, rec, dev, bytes)
    }

    /// Frees records of dead processes and repairs the totals.
    pub fn reclaim(&self, rec: usize) -> Result<usize, RecomputeError> {
        if !self.map.writable() {
            return Ok(0);
        }
        protocol::reclaim(self, &self.env, rec.min(MAX_PROCS - 1))
    }

    /// The launch gate's words of device `dev` (`None` on a read-only mapping or beyond
    /// [`MAX_DEVICES`]).
    #[inline]
    pub fn gate_words(&self, dev: usize) -> Option<GateWords<'_>> {
        if !self.map.writable() {
            return None;
        }
        self.lease_words(dev)
    }

    /// The lease-protocol words of device `dev`, on any mapping (the scheduler reads them
    /// through `crate::lease::sched`; `None` beyond [`MAX_DEVICES`]).
    #[inline]
    pub fn lease_words(&self, dev: usize) -> Option<GateWords<'_>> {
        self.map.get().devices.get(dev).map(usage_words)
    }

    /// Loads the scheduler words of device `dev` (zero beyond [`MAX_DEVICES`]).
    pub fn sched_sample(&self, dev: usize) -> SchedSample {
        self.map
            .get()
            .devices
            .get(dev)
            .map_or(SchedSample::default(), |d| SchedSample {
                demand: d.demand.load(Acquire),
                seen: d.seen.load(Acquire),
                pending: d.pending.load(Acquire),
                near: d.near.load(Acquire),
                busy: d.busy.load(Acquire),
            })
    }

    /// Bytes the slice holds on `dev` (0 beyond the slice's devices).
    pub fn used(&self, dev: usize) -> u64 {
        if dev >= self.devices {
            return 0;
        }
        protocol::used(self, dev)
    }

    /// Bytes record `rec` holds on `dev`.
    pub fn held(&self, rec: usize, dev: usize) -> u64 {
        if dev >= self.devices || rec >= MAX_PROCS {
            return 0;
        }
        self.reserved(rec, dev).load(Acquire)
    }

    /// A validated, clamped copy for readers outside the tenant. `caps[d]` bounds device `d`.
    /// Only records whose process is alive (per the reader's `/proc`, so for tenants in the
    /// reader's pid namespace; see [`Usage::snapshot_by`]) are listed.
    pub fn snapshot(&self, caps: &[u64]) -> UsageSnapshot {
        self.snapshot_by(caps, &|pid, start| {
            crate::liveness::liveness(pid, Some(start)) != Liveness::Dead
        })
    }

    /// [`Usage::snapshot`] for a reader on the host: records are judged in the pid namespace of
    /// `owner` (the host pid of the slice's owner: a container's init, a bare process), found in
    /// `procs` (one scan of `/proc` serves every slice), so a container's processes are seen as
    /// alive; without an owner (or one that is gone), in the reader's own namespace.
    pub fn snapshot_for_owner(
        &self,
        caps: &[u64],
        owner: Option<u32>,
        procs: &crate::liveness::ProcessTable,
    ) -> UsageSnapshot {
        match owner.and_then(|p| procs.namespace_of(p)) {
            Some(ns) => self.snapshot_by(caps, &|pid, start| ns.alive(pid, start)),
            None => self.snapshot(caps),
        }
    }

    /// [`Usage::snapshot`] with the liveness of (pid, start time) decided by `alive`: records
    /// carry pids of the tenant's pid namespace, which a reader in another namespace (the host,
    /// for a container) must map itself.
    pub fn snapshot_by(&self, caps: &[u64], alive: &dyn Fn(u32, u64) -> bool) -> UsageSnapshot {
        let clamp = |d: usize, v: u64| v.min(caps.get(d).copied().unwrap_or(UNCAPPED));
        let used = (0..self.devices)
            .map(|d| clamp(d, protocol::used(self, d)))
            .collect();
        let mut processes = Vec::new();
        for rec in 0..MAX_PROCS {
            let (st, pid) = rec_unpack(self.state(rec).load(Acquire));
            if st != REC_LIVE || pid == 0 || pid > (1 << 22) {
                continue;
            }
            let start = self.start_time(rec).load(Acquire);
            if !alive(pid, start) {
                continue;
            }
            processes.push(ProcessUsage {
                record: rec,
                pid,
                start_time: start,
                reserved: (0..self.devices)
                    .map(|d| clamp(d, self.reserved(rec, d).load(Acquire)))
                    .collect(),
            });
        }
        UsageSnapshot { used, processes }
    }
}

/// A slice directory opened by a tenant process: limits and lease read-only, usage read-write.
#[derive(Debug)]
pub struct Slice {
    /// The directory.
    pub dir: PathBuf,
    /// `limits`.
    pub limits: Limits,
    /// `lease`.
    pub lease: Lease,
    /// `usage`.
    pub usage: Usage,
}

impl Slice {
    /// Opens the three files of `dir`.
    pub fn open(dir: &Path) -> Result<Self, RegionError> {
        let limits = Limits::open(dir)?;
        let lease = Lease::open(dir)?;
        let usage = Usage::open(dir, limits.device_count())?;
        Ok(Slice {
            dir: dir.to_path_buf(),
            limits,
            lease,
            usage,
        })
    }

    /// The launch gate's half of the lease protocol on device `dev` (`None` beyond the
    /// files' slots).
    #[inline]
    pub fn gate(&self, dev: usize) -> Option<Gate<'_, AtomicU32, AtomicU64>> {
        Some(Gate::new(
            self.lease.slot(dev)?,
            self.usage.gate_words(dev)?,
        ))
    }

    /// Reserves on `dev` under the cap currently in `limits`.
    pub fn reserve(&self, rec: usize, dev: usize, bytes: u64) -> Result<(), ReserveError> {
        self.usage
            .reserve(rec, dev, bytes, self.limits.memory_cap(dev))
    }
}
