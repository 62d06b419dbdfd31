//! Contexts count: every process's first context on a device is charged to its slice before the
//! driver creates it (`DeviceLimits::context_charge`, under the cap plus the slice's context
//! reserve), so the processes of a slice together never hold more than it was promised, however
//! many there are; a context that does not fit is refused with `CUDA_ERROR_OUT_OF_MEMORY`
//! (the allocation paths charge it too, for contexts made in ways not wrapped here).
//!
//! **Stack size** (`cuCtxSetLimit(CU_LIMIT_STACK_SIZE)`): the driver reserves local memory for
//! every thread the device can hold resident, at once and outside any allocation call (on an
//! H200, 64 KiB of stack grew a process by 16.6 GiB: (64 KiB − 1 KiB) × 132 SMs × 2 048
//! threads). The growth beyond the largest stack this process has set is charged before the
//! driver makes it, like an allocation, and refused with `CUDA_ERROR_OUT_OF_MEMORY` when it does
//! not fit; a lower limit keeps the charge until the process exits (the driver need not give the
//! memory back).
//!
//! Synchronisation points (`cuStreamSynchronize`, `cuEventSynchronize`) are where the driver
//! gives pool memory above the release threshold back: the pools' charges follow at once, so
//! the slice's count never lags what the device holds for it.

#![allow(non_snake_case)]

use crate::entry::Twin;
use crate::guard;
use crate::state::memory_gate;
use gpuslice_cuda_abi::pfn;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;

type R = CUresult;

/// Per device ordinal: the largest stack size (bytes per thread) this process has had charged.
static STACK: Mutex<Option<HashMap<CUdevice, usize>>> = Mutex::new(None);

/// Device memory a stack of `per_thread` bytes takes for every resident thread of `dev`.
fn stack_bytes(dev: CUdevice, per_thread: usize) -> Option<u64> {
    let attr = crate::real!(cuda_sym cuDeviceGetAttribute)?;
    let (mut sms, mut threads): (c_int, c_int) = (0, 0);
    // SAFETY: the driver's contract; out-pointers are live locals.
    let ok = unsafe {
        attr(&mut sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS
            && attr(
                &mut threads,
                CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                dev,
            ) == CUDA_SUCCESS
    };
    let resident = u64::try_from(sms).ok()? * u64::try_from(threads).ok()?;
    ok.then(|| (per_thread as u64).saturating_mul(resident))
}

/// The stack limit now in force in the current context.
fn stack_limit() -> Option<usize> {
    let get = crate::real!(cuda_sym cuCtxGetLimit)?;
    let mut v = 0usize;
    // SAFETY: the driver's contract; the out-pointer is a live local.
    (unsafe { get(&mut v, CU_LIMIT_STACK_SIZE) } == CUDA_SUCCESS).then_some(v)
}

/// Charges the growth to a stack of `value` bytes per thread on the current device, returning
/// `(entry, bytes charged, previous high-water mark)` to undo it if the driver refuses.
fn charge_stack(value: usize) -> Result<Option<(usize, u64, CUdevice, usize)>, R> {
    let Some(_g) = guard::enter() else {
        return Ok(None);
    };
    let Some(site) = crate::charge::site() else {
        return Ok(None);
    };
    let mut marks = STACK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let marks = marks.get_or_insert_with(HashMap::new);
    let high = match marks.get(&site.ordinal) {
        Some(&h) => h,
        None => stack_limit().unwrap_or(0),
    };
    if value <= high {
        return Ok(None);
    }
    let Some(bytes) = stack_bytes(site.ordinal, value - high).map(crate::charge::round) else {
        return Ok(None);
    };
    site.gate.charge(site.ordinal, site.entry, bytes)?;
    marks.insert(site.ordinal, value);
    Ok(Some((site.entry, bytes, site.ordinal, high)))
}

/// `cuCtxSetLimit`: a larger stack is charged before the driver reserves it (module docs).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuCtxSetLimit(limit: CUlimit, value: usize) -> R {
    if limit != CU_LIMIT_STACK_SIZE {
        return call!(cuCtxSetLimit; limit, value);
    }
    let charged = match charge_stack(value) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let r = call!(cuCtxSetLimit; limit, value);
    if let (true, Some((entry, bytes, dev, high))) = (r != CUDA_SUCCESS, charged) {
        if let Some(g) = memory_gate() {
            g.uncharge(entry, bytes);
        }
        let mut marks = STACK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(m) = marks.as_mut() {
            m.insert(dev, high);
        }
    }
    r
}

/// Charges this process's context on `dev` (the driver's ordinal) before it is created.
fn admit(dev: CUdevice) -> Result<(), R> {
    let Some(_g) = guard::enter() else {
        return Ok(());
    };
    // Placed in a slice it cannot attach to: no context, rather than one without the caps.
    if crate::state::refused() {
        return Err(CUDA_ERROR_NOT_PERMITTED);
    }
    let Some(g) = memory_gate() else {
        return Ok(());
    };
    let Some(entry) = g.entry(dev) else {
        return Ok(());
    };
    g.charge_context(dev, entry)
}

/// `cuCtxCreate_v2`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> R {
    if let Err(e) = admit(dev) {
        return e;
    }
    call!(cuCtxCreate_v2; pctx, flags, dev)
}

/// `cuCtxCreate` (legacy export).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuCtxCreate(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> R {
    if let Err(e) = admit(dev) {
        return e;
    }
    call!(cuCtxCreate; pctx, flags, dev)
}

/// `cuCtxCreate_v3` (execution affinity).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    params: *mut c_void,
    num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> R {
    if let Err(e) = admit(dev) {
        return e;
    }
    call!(cuCtxCreate_v3;
        pctx, params, num_params, flags, dev)
}

/// `cuCtxCreate_v4` (`CUctxCreateParams`).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    params: *mut c_void,
    flags: c_uint,
    dev: CUdevice,
) -> R {
    if let Err(e) = admit(dev) {
        return e;
    }
    call!(cuCtxCreate_v4;
        pctx, params, flags, dev)
}

/// `cuDevicePrimaryCtxRetain` (the runtime API's context).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> R {
    if let Err(e) = admit(dev) {
        return e;
    }
    call!(cuDevicePrimaryCtxRetain; pctx, dev)
}

/// After a synchronisation point: pool charges follow what the driver released.
fn synced(r: R) -> R {
    if r == CUDA_SUCCESS {
        if let Some(_g) = guard::enter() {
            if let Some(g) = memory_gate() {
                crate::charge::sync_pools(g);
            }
        }
    }
    r
}

/// `cuStreamSynchronize`, `cuStreamSynchronize_ptsz`.
///
/// # Safety
/// The driver's contract for the function of this name.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
pub(crate) unsafe fn cuStreamSynchronize(twin: Twin<pfn::cuStreamSynchronize>, h: CUstream) -> R {
    synced(forward!(twin; h))
}

/// `cuEventSynchronize`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuEventSynchronize(ev: CUevent) -> R {
    synced(call!(cuEventSynchronize; ev))
}
