//! The region files of each admitted slice: created (with the arbiter's lease flag) in the slice
//! directory on admit, rewritten on update — a memory cap change is one atomic store
//! (`LimitsWriter::set_memory_cap`), read by the interposer's next reservation, so a live resize
//! takes effect at once — and removed with the directory on release (by the store).
//!
//! A best-effort slice (no cap) gets its effective cap written as its `memory_cap`
//! (`AssignedDevice::memory_best_effort`, its share of the memory no capped slice was promised):
//! its interposer enforces it and reports it as the total. The arbiter rewrites it
//! ([`write_memory_caps`]) whenever a slice on the device comes, goes or changes.

use gpuslice_api::{AssignedDevice, Priority, SliceStatus};
use gpuslice_region::layout::{
    LIMITS_FLAG_LEASED, PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, SHARE_FULL, UNCAPPED,
};
use gpuslice_region::liveness::ProcessTable;
use gpuslice_region::{
    create_slice, DeviceSpec, Limits, LimitsWriter, RegionError, SliceSpec, Usage,
};
use std::collections::BTreeMap;
use std::path::Path;

fn spec_of(slice: &SliceStatus, d: &AssignedDevice) -> DeviceSpec {
    let r = &slice.request;
    DeviceSpec {
        host_index: d.index,
        uuid: d.uuid.clone(),
        memory_cap: effective_cap(d),
        device_total: d.memory_total,
        compute_guarantee: u32::from(r.compute.unwrap_or(0).min(100)) * 100,
        compute_limit: r
            .compute_limit
            .map_or(SHARE_FULL, |l| u32::from(l.clamp(1, 100)) * 100),
        priority: match r.priority {
            Priority::High => PRIORITY_HIGH,
            Priority::Normal => PRIORITY_NORMAL,
            Priority::Low => PRIORITY_LOW,
        },
    }
}

/// The cap the slice's interposer enforces on `d`: its own, else its best-effort share, else
/// none (`overcommit_memory`).
pub fn effective_cap(d: &AssignedDevice) -> u64 {
    d.memory_cap.or(d.memory_best_effort).unwrap_or(UNCAPPED)
}

/// Creates the slice's `limits`, `lease` and `usage` in `dir` (which exists), unless they are
/// there already (a restart: running tenants keep their mappings; the limits are rewritten).
///
/// `context` gives, for a device's NVML index, (charge per process context, reserve per slice)
/// there from the admission policy: the interposer charges each process's context on each
/// device what that device's contexts cost and holds the slice to cap + reserve.
pub fn create(
    dir: &Path,
    slice: &SliceStatus,
    context: impl Fn(u32) -> (u64, u64),
) -> Result<(), RegionError> {
    let spec = SliceSpec {
        devices: slice.devices.iter().map(|d| spec_of(slice, d)).collect(),
        flags: LIMITS_FLAG_LEASED,
    };
    if !create_slice(dir, &spec, false)? {
        write_limits(dir, slice)?;
    }
    let w = LimitsWriter::open(dir)?;
    for (i, d) in slice.devices.iter().enumerate() {
        let (charge, reserve) = context(d.index);
        w.set_context(i, charge, reserve)?;
    }
    Ok(())
}

/// Rewrites the limits of every device of the slice (live resize). The memory cap is stored
/// first, alone, so the next reservation sees it even while the seqlocked entry is rewritten.
pub fn write_limits(dir: &Path, slice: &SliceStatus) -> Result<(), RegionError> {
    let w = LimitsWriter::open(dir)?;
    for (i, d) in slice.devices.iter().enumerate() {
        let spec = spec_of(slice, d);
        w.set_memory_cap(i, spec.memory_cap)?;
        w.set_device(i, &spec)?;
    }
    Ok(())
}

/// Rewrites only the memory caps of the slice's devices (a best-effort slice whose share
/// changed because a neighbour came, went or changed): one atomic store each.
pub fn write_memory_caps(dir: &Path, slice: &SliceStatus) -> Result<(), RegionError> {
    let w = LimitsWriter::open(dir)?;
    for (i, d) in slice.devices.iter().enumerate() {
        w.set_memory_cap(i, effective_cap(d))?;
    }
    Ok(())
}

/// Measured use of a slice (bytes per slice device, live processes) from its `usage` file,
/// validated and clamped by the region crate. `None` without region files. Processes are
/// judged in the owner's pid namespace, found in `procs` (one `/proc` scan for all slices);
/// without `procs` none is judged (and 0 counted): the bytes alone need no `/proc`.
pub fn slice_usage(
    dir: &Path,
    slice: &SliceStatus,
    procs: Option<&ProcessTable>,
) -> Option<(Vec<u64>, usize)> {
    let limits = Limits::open(dir).ok()?;
    let n = limits.device_count().min(slice.devices.len());
    let usage = Usage::open_read_only(dir, n).ok()?;
    let caps: Vec<u64> = (0..n).map(|d| limits.memory_cap(d)).collect();
    let snap = match procs {
        Some(p) => usage.snapshot_for_owner(&caps, slice.owner.pid, p),
        None => usage.snapshot_by(&caps, &|_, _| false),
    };
    Some((snap.used, snap.processes.len()))
}

/// Bytes a slice holds now, by device UUID (for `update`'s below-use warning). Read from the
/// slice's `usage` file (validated, clamped to the current caps: a tenant can at most make its
/// own warning appear); empty without region files.
pub fn measured_use(dir: &Path, slice: &SliceStatus) -> BTreeMap<String, u64> {
    let Some((used, _)) = slice_usage(dir, slice, None) else {
        return BTreeMap::new();
    };
    slice
        .devices
        .iter()
        .zip(used)
        .map(|(d, u)| (d.uuid.clone(), u))
        .collect()
}
