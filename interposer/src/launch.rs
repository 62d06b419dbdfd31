//! Launch entry points: `cuLaunchKernel(_ptsz)`, `cuLaunchKernelEx(_ptsz)`,
//! `cuLaunchCooperativeKernel(_ptsz)`, `cuGraphLaunch(_ptsz)`. Each calls the launch gate
//! (`crate::gate::before_launch`) first and `after_launch` after the driver returned. The fast
//! path is the gate's check plus one cached pointer load: no allocation, lock, syscall, `getenv`
//! or logging. Graph launches also account graph memory nodes (`crate::graph`).

#![allow(non_snake_case)]

use crate::gate::{after_launch, before_launch};
use gpuslice_cuda_abi::exec::CUlaunchConfig;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use std::ffi::{c_uint, c_void};

type R = CUresult;

/// Runs `launch` between the gate's hooks.
#[inline(always)]
fn gated_launch(stream: CUstream, launch: impl FnOnce() -> R) -> R {
    let counted = match before_launch(stream) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let r = launch();
    after_launch(stream, counted);
    r
}

/// `cuLaunchKernel`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
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
    gated_launch(stream, || {
        call!(cuLaunchKernel: fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void) -> R;
            f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
    })
}

/// `cuLaunchKernel_ptsz`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel_ptsz(
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
    gated_launch(stream, || {
        call!(cuLaunchKernel_ptsz: fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void) -> R;
            f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
    })
}

fn config_stream(config: *const CUlaunchConfig) -> CUstream {
    if config.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: non-null; the caller's launch configuration.
        unsafe { (*config).h_stream }
    }
}

/// `cuLaunchKernelEx`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> R {
    gated_launch(config_stream(config), || {
        call!(cuLaunchKernelEx: fn(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void) -> R;
            config, f, params, extra)
    })
}

/// `cuLaunchKernelEx_ptsz`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx_ptsz(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> R {
    gated_launch(config_stream(config), || {
        call!(cuLaunchKernelEx_ptsz: fn(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void) -> R;
            config, f, params, extra)
    })
}

/// `cuLaunchCooperativeKernel`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
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
    gated_launch(stream, || {
        call!(cuLaunchCooperativeKernel: fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void) -> R;
            f, gx, gy, gz, bx, by, bz, shmem, stream, params)
    })
}

/// `cuLaunchCooperativeKernel_ptsz`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchCooperativeKernel_ptsz(
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
    gated_launch(stream, || {
        call!(cuLaunchCooperativeKernel_ptsz: fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void) -> R;
            f, gx, gy, gz, bx, by, bz, shmem, stream, params)
    })
}

/// `cuGraphLaunch`: gated like a kernel launch; graph memory nodes are charged first.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> R {
    gated_launch(stream, || {
        crate::graph::launch(
            exec,
            stream,
            false,
            || call!(cuGraphLaunch: fn(CUgraphExec, CUstream) -> R; exec, stream),
        )
    })
}

/// `cuGraphLaunch_ptsz`.
///
/// # Safety
/// C ABI; same contract as the driver's.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) -> R {
    gated_launch(stream, || {
        crate::graph::launch(
            exec,
            stream,
            true,
            || call!(cuGraphLaunch_ptsz: fn(CUgraphExec, CUstream) -> R; exec, stream),
        )
    })
}
