//! Stream capture, as the launch gate must see it (docs/scheduling.md, "Stream capture").
//!
//! A launch into a capturing stream does not run: it adds a node to the graph being captured,
//! so it is not device time and the gate leaves it alone ([`capturing`]). The gate's own
//! driver calls must never disturb an application's capture: on the real driver (H200, driver
//! 580; `tests/gpu/probe/capture_rules.c`) an event query or synchronisation from *any* thread
//! whose capture interaction mode is `GLOBAL` (every thread's default) invalidates every
//! `GLOBAL`-mode capture of the process — PyTorch's default — and the application's next
//! launch fails. So the gate makes those calls in the `RELAXED` mode ([`relaxed`], and the gate
//! thread once for good), never records or waits on a capturing stream, and never
//! synchronises a context (refused in every mode while one of its streams captures).

use gpuslice_cuda_abi::exec::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::CUstream;

/// Whether `stream` (of a `_ptsz` entry point when `per_thread`) is capturing — its capture
/// active or invalidated, or it is the legacy stream while a blocking stream captures
/// (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`). One driver call, no lock or allocation (15–23 ns on
/// the H200). A driver without `cuStreamIsCapturing`, or any other error: not capturing (the
/// launch is gated as any other).
#[inline]
pub(crate) fn capturing(stream: CUstream, per_thread: bool) -> bool {
    let f = if per_thread {
        crate::real!(cuda_sym cuStreamIsCapturing_ptsz)
    } else {
        crate::real!(cuda_sym cuStreamIsCapturing)
    };
    let Some(f) = f else { return false };
    let mut st: CUstreamCaptureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: `stream` is the handle the application launches on; valid out-pointer.
    match unsafe { f(stream, &mut st) } {
        CUDA_SUCCESS => st != CU_STREAM_CAPTURE_STATUS_NONE,
        CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => true,
        _ => false,
    }
}

/// Sets this thread's capture interaction mode to `mode`; returns the previous one (`None`: the
/// driver lacks the call or refused).
fn exchange(mode: CUstreamCaptureMode) -> Option<CUstreamCaptureMode> {
    let f = crate::real!(cuda_sym cuThreadExchangeStreamCaptureMode)?;
    let mut m = mode;
    // SAFETY: a valid in/out pointer to a mode.
    (unsafe { f(&mut m) } == CUDA_SUCCESS).then_some(m)
}

/// Runs `f` — the gate's event queries and synchronisations on an application thread — in the
/// `RELAXED` capture mode, then restores the thread's mode: the calls then neither invalidate a
/// capture of this or another thread nor fail because of one.
pub(crate) fn relaxed<T>(f: impl FnOnce() -> T) -> T {
    let prev = exchange(CU_STREAM_CAPTURE_MODE_RELAXED);
    let r = f();
    if let Some(p) = prev {
        exchange(p);
    }
    r
}

/// The gate thread: `RELAXED` for the life of the thread (it only ever waits on the gate's own
/// events and streams the application launched on). Made once a context is current (and again
/// with each context it switches to); false if the driver refused.
pub(crate) fn relax_this_thread() -> bool {
    exchange(CU_STREAM_CAPTURE_MODE_RELAXED).is_some()
}
