//! Exported CUDA driver wrappers for plain memory: every allocating entry point goes through
//! the memory gate (`charge::gated`: reserve in the slice before calling the driver, return the
//! reservation if the driver fails), frees (`charge::freed`), and the slice's view of memory
//! totals (`cuMemGetInfo`, `cuDeviceTotalMem`). See `docs/interposer.md` for the table of every
//! memory-creating API and how it is handled.

#![allow(non_snake_case)]

use crate::charge::{freed, gated, round};
use crate::driver::current_device;
use crate::guard;
use crate::state::memory_gate;
use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use gpuslice_region::UNCAPPED;
use std::ffi::c_uint;

type R = CUresult;

/// `cuMemAlloc_v2`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> R {
    gated(bytesize as u64, || {
        let r = call!(cuMemAlloc_v2; dptr, bytesize);
        // SAFETY: on success the driver wrote *dptr.
        (
            r,
            (r == CUDA_SUCCESS && !dptr.is_null()).then(|| unsafe { *dptr }),
        )
    })
}

/// `cuMemAlloc` (32-bit device pointers).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemAlloc(dptr: *mut CUdeviceptr_v1, bytesize: c_uint) -> R {
    gated(u64::from(bytesize), || {
        let r = call!(cuMemAlloc; dptr, bytesize);
        // SAFETY: on success the driver wrote *dptr.
        (
            r,
            (r == CUDA_SUCCESS && !dptr.is_null()).then(|| u64::from(unsafe { *dptr })),
        )
    })
}

/// `cuMemAllocManaged`: charged to the current device (the memory may live there).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: c_uint,
) -> R {
    gated(bytesize as u64, || {
        let r = call!(cuMemAllocManaged; dptr, bytesize, flags);
        // SAFETY: on success the driver wrote *dptr.
        (
            r,
            (r == CUDA_SUCCESS && !dptr.is_null()).then(|| unsafe { *dptr }),
        )
    })
}

fn pitch_estimate(width: u64, height: u64) -> u64 {
    width
        .div_ceil(512)
        .saturating_mul(512)
        .saturating_mul(height)
}

/// `cuMemAllocPitch_v2`: charged `round(pitch × height)`; the pitch is estimated (512-byte rows)
/// before the call and the charge corrected after it.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> R {
    let est = pitch_estimate(width as u64, height as u64);
    let r = gated(est, || {
        let r = call!(cuMemAllocPitch_v2;
            dptr, pitch, width, height, elem);
        // SAFETY: on success the driver wrote *dptr.
        (
            r,
            (r == CUDA_SUCCESS && !dptr.is_null()).then(|| unsafe { *dptr }),
        )
    });
    if r == CUDA_SUCCESS && !pitch.is_null() && !dptr.is_null() {
        // SAFETY: both written by the driver on success.
        let (p, d) = unsafe { (*pitch as u64, *dptr) };
        recharge(d, round(p.saturating_mul(height as u64)));
    }
    r
}

/// `cuMemAllocPitch` (32-bit).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemAllocPitch(
    dptr: *mut CUdeviceptr_v1,
    pitch: *mut c_uint,
    width: c_uint,
    height: c_uint,
    elem: c_uint,
) -> R {
    let est = pitch_estimate(u64::from(width), u64::from(height));
    let r = gated(est, || {
        let r = call!(cuMemAllocPitch;
            dptr, pitch, width, height, elem);
        // SAFETY: on success the driver wrote *dptr.
        (
            r,
            (r == CUDA_SUCCESS && !dptr.is_null()).then(|| u64::from(unsafe { *dptr })),
        )
    });
    if r == CUDA_SUCCESS && !pitch.is_null() && !dptr.is_null() {
        // SAFETY: both written by the driver on success.
        let (p, d) = unsafe { (u64::from(*pitch), u64::from(*dptr)) };
        recharge(d, round(p.saturating_mul(u64::from(height))));
    }
    r
}

/// Corrects the charge of a tracked allocation to `actual` (grows only if the cap allows; a
/// shortfall is logged — the memory exists and must stay accounted).
fn recharge(key: u64, actual: u64) {
    let Some(g) = memory_gate() else { return };
    let Ok(mut m) = g.allocs.lock() else { return };
    let Some((entry, charged)) = m.get_mut(&key) else {
        return;
    };
    if actual > *charged {
        let extra = actual - *charged;
        if let Some(o) = current_device() {
            if g.charge(o, *entry, extra).is_ok() {
                *charged = actual;
            } else {
                crate::log!(
                    crate::log::Level::Warn,
                    "pitched allocation larger than estimated by {extra} B"
                );
            }
        }
    } else if actual < *charged {
        g.uncharge(*entry, *charged - actual);
        *charged = actual;
    }
}

/// `cuMemFree_v2`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemFree_v2(dptr: CUdeviceptr) -> R {
    freed(dptr, || call!(cuMemFree_v2; dptr))
}

/// `cuMemFree` (32-bit).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemFree(dptr: CUdeviceptr_v1) -> R {
    freed(u64::from(dptr), || call!(cuMemFree; dptr))
}

/// The slice's view: `(free, total)` from the real values, or `None` when uncapped.
fn slice_view(ordinal: CUdevice, real_free: u64, real_total: u64) -> Option<(u64, u64)> {
    let g = memory_gate()?;
    let entry = g.entry(ordinal)?;
    let cap = g.cap(ordinal, entry);
    if cap == UNCAPPED {
        return None;
    }
    crate::charge::sync_pools(g);
    g.refresh();
    let total = cap.min(real_total);
    let free = g.free_view(cap, entry).min(total).min(real_free);
    Some((free, total))
}

/// `cuMemGetInfo_v2`: free = min(cap − used, real free), total = min(cap, real total).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> R {
    let r = call!(cuMemGetInfo_v2; free, total);
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() || memory_gate().is_none() {
        return r;
    }
    let Some(_g) = guard::enter() else { return r };
    if let Some(o) = current_device() {
        // SAFETY: both written by the driver on success.
        let (f, t) = unsafe { (*free as u64, *total as u64) };
        if let Some((f2, t2)) = slice_view(o, f, t) {
            // SAFETY: valid out-pointers (checked non-null above).
            unsafe {
                *free = usize::try_from(f2).unwrap_or(usize::MAX);
                *total = usize::try_from(t2).unwrap_or(usize::MAX);
            }
        }
    }
    r
}

/// `cuMemGetInfo` (32-bit sizes; saturated).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> R {
    let r = call!(cuMemGetInfo; free, total);
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() || memory_gate().is_none() {
        return r;
    }
    let Some(_g) = guard::enter() else { return r };
    if let Some(o) = current_device() {
        // SAFETY: both written by the driver on success.
        let (f, t) = unsafe { (u64::from(*free), u64::from(*total)) };
        if let Some((f2, t2)) = slice_view(o, f, t) {
            // SAFETY: valid out-pointers.
            unsafe {
                *free = c_uint::try_from(f2).unwrap_or(c_uint::MAX);
                *total = c_uint::try_from(t2).unwrap_or(c_uint::MAX);
            }
        }
    }
    r
}

/// `cuDeviceTotalMem_v2`: min(cap, real).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> R {
    let r = call!(cuDeviceTotalMem_v2; bytes, dev);
    if r == CUDA_SUCCESS && !bytes.is_null() {
        if let Some(_g) = guard::enter() {
            // SAFETY: written by the driver on success.
            let t = unsafe { *bytes as u64 };
            if let Some((_, t2)) = slice_view_total(dev, t) {
                // SAFETY: valid out-pointer.
                unsafe { *bytes = usize::try_from(t2).unwrap_or(usize::MAX) };
            }
        }
    }
    r
}

fn slice_view_total(dev: CUdevice, real_total: u64) -> Option<((), u64)> {
    let g = memory_gate()?;
    let entry = g.entry(dev)?;
    let cap = g.cap(dev, entry);
    (cap != UNCAPPED).then_some(((), cap.min(real_total)))
}

/// `cuDeviceTotalMem` (32-bit).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) -> R {
    let r = call!(cuDeviceTotalMem; bytes, dev);
    if r == CUDA_SUCCESS && !bytes.is_null() {
        if let Some(_g) = guard::enter() {
            // SAFETY: written by the driver on success.
            let t = u64::from(unsafe { *bytes });
            if let Some((_, t2)) = slice_view_total(dev, t) {
                // SAFETY: valid out-pointer.
                unsafe { *bytes = c_uint::try_from(t2).unwrap_or(c_uint::MAX) };
            }
        }
    }
    r
}

// ---- VMM: physical memory is counted once, at cuMemCreate ----

/// `cuMemCreate`: charged `round(size)` on `prop.location` (a device ordinal).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> R {
    let run = || call!(cuMemCreate; handle, size, prop, flags);
    if prop.is_null() || handle.is_null() {
        return run();
    }
    // SAFETY: non-null pointer to the caller's property struct.
    let loc = unsafe { (*prop).location };
    if loc.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return run();
    }
    let Some(_g) = guard::enter() else {
        return run();
    };
    let Some(g) = memory_gate() else { return run() };
    let Some(entry) = g.entry(loc.id) else {
        return run();
    };
    let bytes = round(size as u64);
    if g.charge(loc.id, entry, bytes).is_err()
        && (!crate::charge::sync_pools(g) || g.charge(loc.id, entry, bytes).is_err())
    {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let r = run();
    if r == CUDA_SUCCESS {
        // SAFETY: written by the driver on success.
        g.track(unsafe { *handle } | (1 << 63), entry, bytes);
    } else {
        g.uncharge(entry, bytes);
    }
    r
}

/// `cuMemRelease`: returns the charge of a handle we created (imported handles were never
/// charged: the exporter owns that memory).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> R {
    freed(handle | (1 << 63), || call!(cuMemRelease; handle))
}
