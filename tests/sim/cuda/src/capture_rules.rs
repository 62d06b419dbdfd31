//! What the driver lets a thread do while stream captures are live, as a real H200 (driver
//! 580, CUDA 13.0; `tests/gpu/probe/capture_rules.c`) showed it, and the capture interaction
//! mode of each thread (`cuThreadExchangeStreamCaptureMode`).
//!
//! A *potentially unsafe* call ([`unsafe_call`]: querying or synchronising an event or a stream
//! outside the capture, `cuMemAlloc`, `cuMemFree`, `cuMemAllocAsync` on a stream that is not
//! capturing) is refused with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates the
//! captures that prohibit it:
//! - a thread whose mode is `RELAXED` is never prohibited (even inside its own capture);
//! - otherwise the thread's own captures not begun `RELAXED` prohibit it;
//! - and, when its mode is `GLOBAL` (the default), every other thread's capture begun `GLOBAL`.
//!
//! Calls that necessarily conflict with a capture are refused in every mode and from every
//! thread (see `graph`): synchronising or querying a capturing stream or its context, querying
//! or synchronising a captured event, a capturing stream waiting on an event recorded outside
//! its capture. Legal everywhere: records, launches and memsets on other streams, the legacy
//! stream beside a non-blocking capture, `cuMemGetInfo`, `cuStreamIsCapturing`,
//! `cuStreamGetCaptureInfo`, `cuEventElapsedTime`, a synchronous `cuMemcpyHtoD`.

use std::cell::Cell;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};

use gpuslice_cuda_abi::exec::*;
use gpuslice_cuda_abi::result::*;

use crate::graph::CaptureSession;

thread_local! {
    /// This thread's capture interaction mode.
    static MODE: Cell<CUstreamCaptureMode> = const { Cell::new(CU_STREAM_CAPTURE_MODE_GLOBAL) };
}

/// Every capture begun and not ended yet, of every thread.
static LIVE: LazyLock<Mutex<Vec<Weak<CaptureSession>>>> = LazyLock::new(Default::default);

fn live() -> MutexGuard<'static, Vec<Weak<CaptureSession>>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A capture begins.
pub(crate) fn register(s: &Arc<CaptureSession>) {
    let mut l = live();
    l.retain(|w| w.strong_count() > 0);
    l.push(Arc::downgrade(s));
}

/// A capture ends (successfully or not).
pub(crate) fn unregister(s: &Arc<CaptureSession>) {
    live().retain(|w| w.upgrade().is_some_and(|x| !Arc::ptr_eq(&x, s)));
}

/// This thread's capture interaction mode.
fn thread_mode() -> CUstreamCaptureMode {
    MODE.with(Cell::get)
}

/// Checks a potentially unsafe call of this thread against the live captures: refused
/// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`) when one prohibits it, and every capture that
/// prohibits it is invalidated.
pub(crate) fn unsafe_call() -> Result<(), CUresult> {
    let mode = thread_mode();
    if mode == CU_STREAM_CAPTURE_MODE_RELAXED {
        return Ok(());
    }
    let me = std::thread::current().id();
    let prohibiting: Vec<Arc<CaptureSession>> = live()
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|s| {
            if s.thread() == me {
                s.mode() != CU_STREAM_CAPTURE_MODE_RELAXED
            } else {
                mode == CU_STREAM_CAPTURE_MODE_GLOBAL && s.mode() == CU_STREAM_CAPTURE_MODE_GLOBAL
            }
        })
        .collect();
    if prohibiting.is_empty() {
        return Ok(());
    }
    for s in &prohibiting {
        s.invalidate();
    }
    Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
}

/// `cuThreadExchangeStreamCaptureMode`: sets this thread's mode to `*mode` and writes the
/// previous one back.
///
/// # Safety
/// `mode` must be null or point to a writable `CUstreamCaptureMode`.
#[no_mangle]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(
    mode: *mut CUstreamCaptureMode,
) -> CUresult {
    if let Err(e) = crate::device::node() {
        return e;
    }
    if mode.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: null-checked above; the caller provides a readable and writable mode.
    let want = unsafe { mode.read() };
    if want > CU_STREAM_CAPTURE_MODE_RELAXED {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let old = MODE.with(|m| m.replace(want));
    // SAFETY: as above.
    unsafe { mode.write(old) };
    CUDA_SUCCESS
}
