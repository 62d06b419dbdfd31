//! Launch entry points: `cuLaunchKernel(_ptsz)`, `cuLaunchKernelEx(_ptsz)`,
//! `cuLaunchCooperativeKernel(_ptsz)`, `cuGraphLaunch(_ptsz)`. Each calls the launch gate
//! (`crate::gate::before_launch`) first and `after_launch` after the driver returned; a launch
//! into a capturing stream passes the gate untouched (it only adds a node to a graph, whose
//! replays are gated). The fast
//! path is the gate's check plus one cached pointer load: no allocation, lock, syscall, `getenv`
//! or logging. Graph launches also account graph memory nodes (`crate::graph`).

#![allow(non_snake_case)]

use crate::entry::Twin;
use crate::gate::{after_launch, before_launch};
use gpuslice_cuda_abi::exec::CUlaunchConfig;
use gpuslice_cuda_abi::pfn;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use std::ffi::{c_uint, c_void};

type R = CUresult;

/// Runs `launch` between the gate's hooks (`per_thread`: a `_ptsz` entry point, whose null
/// stream is the per-thread default stream).
#[inline(always)]
fn gated_launch(stream: CUstream, per_thread: bool, launch: impl FnOnce() -> R) -> R {
    let counted = match before_launch(stream, per_thread) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let r = launch();
    after_launch(stream, counted);
    r
}

/// `cuLaunchKernel`, `cuLaunchKernel_ptsz`.
///
/// # Safety
/// The driver's contract for the function of this name.
// The driver's C signature, plus the twin.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn cuLaunchKernel(
    twin: Twin<pfn::cuLaunchKernel>,
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> R {
    gated_launch(
        stream,
        twin.per_thread,
        || forward!(twin; f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra),
    )
}

fn config_stream(config: *const CUlaunchConfig) -> CUstream {
    if config.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: non-null; the caller's launch configuration.
        unsafe { (*config).h_stream }
    }
}

/// `cuLaunchKernelEx`, `cuLaunchKernelEx_ptsz`.
///
/// # Safety
/// The driver's contract for the function of this name.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
pub(crate) unsafe fn cuLaunchKernelEx(
    twin: Twin<pfn::cuLaunchKernelEx>,
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> R {
    gated_launch(
        config_stream(config),
        twin.per_thread,
        || forward!(twin; config, f, params, extra),
    )
}

/// `cuLaunchCooperativeKernel`, `cuLaunchCooperativeKernel_ptsz`.
///
/// # Safety
/// The driver's contract for the function of this name.
// The driver's C signature, plus the twin.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn cuLaunchCooperativeKernel(
    twin: Twin<pfn::cuLaunchCooperativeKernel>,
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shmem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
) -> R {
    gated_launch(
        stream,
        twin.per_thread,
        || forward!(twin; f, gx, gy, gz, bx, by, bz, shmem, stream, params),
    )
}

/// `cuGraphLaunch`, `cuGraphLaunch_ptsz`: gated like a kernel launch; graph memory nodes are
/// charged first.
///
/// # Safety
/// The driver's contract for the function of this name.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
pub(crate) unsafe fn cuGraphLaunch(
    twin: Twin<pfn::cuGraphLaunch>,
    exec: CUgraphExec,
    stream: CUstream,
) -> R {
    gated_launch(stream, twin.per_thread, || {
        crate::graph::launch(
            exec,
            stream,
            twin.per_thread,
            || forward!(twin; exec, stream),
        )
    })
}
