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

legacy_and_ptsz! {
    /// `cuLaunchKernel`, `cuLaunchKernel_ptsz`.
    fn cuLaunchKernel, cuLaunchKernel_ptsz(
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
    ) -> R;
    |real, per_thread| gated_launch(stream, || {
        real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
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

legacy_and_ptsz! {
    /// `cuLaunchKernelEx`, `cuLaunchKernelEx_ptsz`.
    fn cuLaunchKernelEx, cuLaunchKernelEx_ptsz(
        config: *const CUlaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> R;
    |real, per_thread| gated_launch(config_stream(config), || real(config, f, params, extra))
}

legacy_and_ptsz! {
    /// `cuLaunchCooperativeKernel`, `cuLaunchCooperativeKernel_ptsz`.
    fn cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz(
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
    ) -> R;
    |real, per_thread| gated_launch(stream, || {
        real(f, gx, gy, gz, bx, by, bz, shmem, stream, params)
    })
}

legacy_and_ptsz! {
    /// `cuGraphLaunch`, `cuGraphLaunch_ptsz`: gated like a kernel launch; graph memory nodes are
    /// charged first.
    fn cuGraphLaunch, cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) -> R;
    |real, per_thread| gated_launch(stream, || {
        crate::graph::launch(exec, stream, per_thread, || real(exec, stream))
    })
}
