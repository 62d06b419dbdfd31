//! Exported CUDA driver wrappers: the memory gate (every allocating entry point reserves in the
//! slice before calling the driver and returns the reservation if the driver fails), frees, the
//! slice's view of memory totals, `cuGetProcAddress`, and pass-through launch entry points.
//! See `docs/interposer.md` for the table of every memory-creating API and how it is handled.

#![allow(non_snake_case)]

use crate::guard;
use crate::state::{gate, Gate, GRANULARITY};
use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::procaddr::{resolve, CUdriverProcAddressQueryResult};
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use gpuslice_region::UNCAPPED;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

type R = CUresult;

pub(crate) fn round(bytes: u64) -> u64 {
    bytes.div_ceil(GRANULARITY).saturating_mul(GRANULARITY)
}

/// Ordinal of the current context's device.
pub(crate) fn current_device() -> Option<CUdevice> {
    let f = real!(cuda_sym cuCtxGetDevice: fn(*mut CUdevice) -> R)?;
    let mut d: CUdevice = -1;
    // SAFETY: real cuCtxGetDevice writes one CUdevice to a valid pointer.
    (unsafe { f(&mut d) } == CUDA_SUCCESS).then_some(d)
}

/// UUID of `ordinal` as NVML spells it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
pub fn device_uuid(ordinal: CUdevice) -> Option<String> {
    let mut u = CUuuid::default();
    let r = if let Some(f) = real!(cuda_sym cuDeviceGetUuid_v2: fn(*mut CUuuid, CUdevice) -> R) {
        // SAFETY: writes 16 bytes into `u`.
        unsafe { f(&mut u, ordinal) }
    } else {
        let f = real!(cuda_sym cuDeviceGetUuid: fn(*mut CUuuid, CUdevice) -> R)?;
        // SAFETY: as above.
        unsafe { f(&mut u, ordinal) }
    };
    if r != CUDA_SUCCESS {
        return None;
    }
    let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
    let hex = |r: std::ops::Range<usize>| {
        b.get(r)
            .unwrap_or_default()
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    };
    Some(format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    ))
}

/// The real total memory of `ordinal`.
pub fn real_total(ordinal: CUdevice) -> Option<u64> {
    let f = real!(cuda_sym cuDeviceTotalMem_v2: fn(*mut usize, CUdevice) -> R)?;
    let mut t = 0usize;
    // SAFETY: writes one size_t.
    (unsafe { f(&mut t, ordinal) } == CUDA_SUCCESS).then_some(t as u64)
}

/// Context for one gated call: the gate and the current device's slice entry.
pub(crate) struct Site {
    pub(crate) gate: &'static Gate,
    pub(crate) ordinal: CUdevice,
    pub(crate) entry: usize,
}

pub(crate) fn site() -> Option<Site> {
    let gate = gate()?;
    let ordinal = current_device()?;
    let entry = gate.entry(ordinal)?;
    Some(Site {
        gate,
        ordinal,
        entry,
    })
}

/// Reserve-then-allocate: charges `round(size)`, runs `alloc`, keeps the charge under the
/// returned key on success and returns it otherwise.
pub(crate) fn gated(size: u64, alloc: impl FnOnce() -> (R, Option<u64>)) -> R {
    let Some(_g) = guard::enter() else {
        return alloc().0;
    };
    let Some(s) = site().filter(|_| size > 0) else {
        return alloc().0;
    };
    let bytes = round(size);
    if let Err(e) = s.gate.charge(s.ordinal, s.entry, bytes) {
        // Stream-ordered pools may hold memory the app already freed: give it back and retry.
        if !crate::pool::sync_pools(s.gate) || s.gate.charge(s.ordinal, s.entry, bytes).is_err() {
            return e;
        }
    }
    let (r, key) = alloc();
    match (r, key) {
        (CUDA_SUCCESS, Some(k)) => s.gate.track(k, s.entry, bytes),
        _ => s.gate.uncharge(s.entry, bytes),
    }
    r
}

/// Free-then-uncharge (never below the driver's truth).
pub(crate) fn freed(key: u64, free: impl FnOnce() -> R) -> R {
    let Some(g) = gate() else { return free() };
    // Out of the table before the driver frees: once it has, another thread may be given the
    // same address and track it, and a later untrack would take that thread's charge.
    let held = g.untrack(key);
    let r = free();
    match (r, held) {
        (CUDA_SUCCESS, Some((e, b))) => g.uncharge(e, b),
        (CUDA_SUCCESS, None) => crate::graph::free_now(g, key),
        (_, Some((e, b))) => {
            if let Ok(mut m) = g.allocs.lock() {
                m.entry(key).or_insert((e, b));
            }
        }
        (_, None) => {}
    }
    r
}

/// `cuMemAlloc_v2`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> R {
    gated(bytesize as u64, || {
        let r = call!(cuMemAlloc_v2: fn(*mut CUdeviceptr, usize) -> R; dptr, bytesize);
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
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc(dptr: *mut CUdeviceptr_v1, bytesize: c_uint) -> R {
    gated(u64::from(bytesize), || {
        let r = call!(cuMemAlloc: fn(*mut CUdeviceptr_v1, c_uint) -> R; dptr, bytesize);
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
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: c_uint,
) -> R {
    gated(bytesize as u64, || {
        let r = call!(cuMemAllocManaged: fn(*mut CUdeviceptr, usize, c_uint) -> R; dptr, bytesize, flags);
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
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> R {
    let est = pitch_estimate(width as u64, height as u64);
    let r = gated(est, || {
        let r = call!(cuMemAllocPitch_v2: fn(*mut CUdeviceptr, *mut usize, usize, usize, c_uint) -> R;
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
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch(
    dptr: *mut CUdeviceptr_v1,
    pitch: *mut c_uint,
    width: c_uint,
    height: c_uint,
    elem: c_uint,
) -> R {
    let est = pitch_estimate(u64::from(width), u64::from(height));
    let r = gated(est, || {
        let r = call!(cuMemAllocPitch: fn(*mut CUdeviceptr_v1, *mut c_uint, c_uint, c_uint, c_uint) -> R;
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
    let Some(g) = gate() else { return };
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
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> R {
    freed(dptr, || call!(cuMemFree_v2: fn(CUdeviceptr) -> R; dptr))
}

/// `cuMemFree` (32-bit).
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree(dptr: CUdeviceptr_v1) -> R {
    freed(
        u64::from(dptr),
        || call!(cuMemFree: fn(CUdeviceptr_v1) -> R; dptr),
    )
}

/// The slice's view: `(free, total)` from the real values, or `None` when uncapped.
fn slice_view(ordinal: CUdevice, real_free: u64, real_total: u64) -> Option<(u64, u64)> {
    let g = gate()?;
    let entry = g.entry(ordinal)?;
    let cap = g.cap(ordinal, entry);
    if cap == UNCAPPED {
        return None;
    }
    crate::pool::sync_pools(g);
    g.refresh();
    let total = cap.min(real_total);
    let free = g.free_view(cap, entry).min(total).min(real_free);
    Some((free, total))
}

/// `cuMemGetInfo_v2`: free = min(cap − used, real free), total = min(cap, real total).
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> R {
    let r = call!(cuMemGetInfo_v2: fn(*mut usize, *mut usize) -> R; free, total);
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() || gate().is_none() {
        return r;
    }
    let Some(_g) = guard::enter() else { return r };
    if let Some(o) = current_device() {
        // SAFETY: both written by the driver on success.
        let (f, t) = unsafe { (*free as u64, *total as u64) };
        if let Some((f2, t2)) = slice_view(o, f, t) {
            // SAFETY: valid out-pointers (checked non-null above).
            unsafe {
                *free = f2 as usize;
                *total = t2 as usize;
            }
        }
    }
    r
}

/// `cuMemGetInfo` (32-bit sizes; saturated).
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> R {
    let r = call!(cuMemGetInfo: fn(*mut c_uint, *mut c_uint) -> R; free, total);
    if r != CUDA_SUCCESS || free.is_null() || total.is_null() || gate().is_none() {
        return r;
    }
    let Some(_g) = guard::enter() else { return r };
    if let Some(o) = current_device() {
        // SAFETY: both written by the driver on success.
        let (f, t) = unsafe { (u64::from(*free), u64::from(*total)) };
        if let Some((f2, t2)) = slice_view(o, f, t) {
            // SAFETY: valid out-pointers.
            unsafe {
                *free = f2.min(u64::from(u32::MAX)) as c_uint;
                *total = t2.min(u64::from(u32::MAX)) as c_uint;
            }
        }
    }
    r
}

/// `cuDeviceTotalMem_v2`: min(cap, real).
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> R {
    let r = call!(cuDeviceTotalMem_v2: fn(*mut usize, CUdevice) -> R; bytes, dev);
    if r == CUDA_SUCCESS && !bytes.is_null() {
        if let Some(_g) = guard::enter() {
            // SAFETY: written by the driver on success.
            let t = unsafe { *bytes as u64 };
            if let Some((_, t2)) = slice_view_total(dev, t) {
                // SAFETY: valid out-pointer.
                unsafe { *bytes = t2 as usize };
            }
        }
    }
    r
}

fn slice_view_total(dev: CUdevice, real_total: u64) -> Option<((), u64)> {
    let g = gate()?;
    let entry = g.entry(dev)?;
    let cap = g.cap(dev, entry);
    (cap != UNCAPPED).then_some(((), cap.min(real_total)))
}

/// `cuDeviceTotalMem` (32-bit).
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) -> R {
    let r = call!(cuDeviceTotalMem: fn(*mut c_uint, CUdevice) -> R; bytes, dev);
    if r == CUDA_SUCCESS && !bytes.is_null() {
        if let Some(_g) = guard::enter() {
            // SAFETY: written by the driver on success.
            let t = u64::from(unsafe { *bytes });
            if let Some((_, t2)) = slice_view_total(dev, t) {
                // SAFETY: valid out-pointer.
                unsafe { *bytes = t2.min(u64::from(u32::MAX)) as c_uint };
            }
        }
    }
    r
}

// ---- VMM: physical memory is counted once, at cuMemCreate ----

/// `cuMemCreate`: charged `round(size)` on `prop.location` (a device ordinal).
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> R {
    let run = || call!(cuMemCreate: fn(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp, u64) -> R; handle, size, prop, flags);
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
    let Some(g) = gate() else { return run() };
    let Some(entry) = g.entry(loc.id) else {
        return run();
    };
    let bytes = round(size as u64);
    if g.charge(loc.id, entry, bytes).is_err()
        && (!crate::pool::sync_pools(g) || g.charge(loc.id, entry, bytes).is_err())
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
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> R {
    freed(
        handle | (1 << 63),
        || call!(cuMemRelease: fn(CUmemGenericAllocationHandle) -> R; handle),
    )
}

// ---- cuGetProcAddress ----

/// Replaces `*pfn` by our wrapper when the export the driver's rule selects is one we wrap.
fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: cuGetProcAddress's contract: `symbol` is NUL-terminated.
    let Ok(name) = unsafe { CStr::from_ptr(symbol) }.to_str() else {
        return;
    };
    // The driver picks among its own variants only: a 12.x driver asked for `cudaVersion` 13000
    // hands out its 12.x variant, so our choice (the wrapper's signature) must be capped alike.
    let version = match driver_version() {
        Some(d) => version.min(d),
        None => version,
    };
    if let Ok(export) = resolve(name, version, flags) {
        if let Some(ours) = crate::table::lookup(export.as_bytes()) {
            // SAFETY: valid out-pointer the driver just wrote.
            unsafe { *pfn = ours };
        }
    }
}

/// The real driver's `cuDriverGetVersion`, read once (it works before `cuInit`).
fn driver_version() -> Option<c_int> {
    static V: std::sync::OnceLock<Option<c_int>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let f = crate::real!(cuda_sym cuDriverGetVersion: fn(*mut c_int) -> R)?;
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        (unsafe { f(&mut v) } == CUDA_SUCCESS && v > 0).then_some(v)
    })
}

/// `cuGetProcAddress_v2`: the driver answers (status and errors unchanged); for symbols we wrap,
/// the pointer is our wrapper of the variant the driver chose by `cudaVersion` and `flags`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> R {
    let r = call!(cuGetProcAddress_v2: fn(*const c_char, *mut *mut c_void, c_int, u64, *mut CUdriverProcAddressQueryResult) -> R;
        symbol, pfn, version, flags, status);
    if r == CUDA_SUCCESS {
        substitute(symbol, pfn, version, flags);
    }
    r
}

/// `cuGetProcAddress` (CUDA 11.3–11.8 signature).
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> R {
    let r = call!(cuGetProcAddress: fn(*const c_char, *mut *mut c_void, c_int, u64) -> R; symbol, pfn, version, flags);
    if r == CUDA_SUCCESS {
        substitute(symbol, pfn, version, flags);
    }
    r
}
