//! Contexts count: every process's first context on a device is charged to its slice before the
//! driver creates it (`DeviceLimits::context_charge`, under the cap plus the slice's context
//! reserve), so the processes of a slice together never hold more than it was promised, however
//! many there are; a context that does not fit is refused with `CUDA_ERROR_OUT_OF_MEMORY`
//! (the allocation paths charge it too, for contexts made in ways not wrapped here).
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
use std::ffi::{c_int, c_uint, c_void};

type R = CUresult;

/// Charges this process's context on `dev` (the driver's ordinal) before it is created.
fn admit(dev: CUdevice) -> Result<(), R> {
    let Some(_g) = guard::enter() else {
        return Ok(());
    };
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
