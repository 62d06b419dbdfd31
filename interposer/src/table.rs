//! Export name → our wrapper, for `dlsym`/`dlvsym` and `cuGetProcAddress`, and the
//! `cuGetProcAddress` wrappers themselves (the table names them too).

use gpuslice_cuda_abi::procaddr::{resolve, CUdriverProcAddressQueryResult};
use gpuslice_cuda_abi::result::*;
use std::ffi::{c_char, c_int, c_void, CStr};

type R = CUresult;

macro_rules! table {
    ($($m:ident :: $f:ident),* $(,)?) => {
        /// Our wrapper for the exported symbol `name`, if we wrap it.
        pub fn lookup(name: &[u8]) -> Option<*mut c_void> {
            $(
                if name == stringify!($f).as_bytes() {
                    return Some(crate::$m::$f as *mut c_void);
                }
            )*
            None
        }
        /// Every symbol we wrap.
        pub const WRAPPED: &[&str] = &[$(stringify!($f)),*];
        // Each wrapper has the C signature declared once in `gpuslice_cuda_abi::pfn`: a
        // wrapper that drifted from it does not compile.
        $(const _: gpuslice_cuda_abi::pfn::$f = crate::$m::$f;)*
    };
}

table! {
    cuda::cuMemAlloc, cuda::cuMemAlloc_v2, cuda::cuMemAllocManaged,
    cuda::cuMemAllocPitch, cuda::cuMemAllocPitch_v2,
    cuda::cuMemFree, cuda::cuMemFree_v2,
    cuda::cuMemGetInfo, cuda::cuMemGetInfo_v2,
    cuda::cuDeviceTotalMem, cuda::cuDeviceTotalMem_v2,
    cuda::cuMemCreate, cuda::cuMemRelease,
    table::cuGetProcAddress, table::cuGetProcAddress_v2,
    context::cuCtxCreate, context::cuCtxCreate_v2, context::cuCtxCreate_v3,
    context::cuCtxCreate_v4, context::cuDevicePrimaryCtxRetain,
    context::cuStreamSynchronize, context::cuStreamSynchronize_ptsz, context::cuEventSynchronize,
    pool::cuMemAllocAsync, pool::cuMemAllocAsync_ptsz,
    pool::cuMemAllocFromPoolAsync, pool::cuMemAllocFromPoolAsync_ptsz,
    pool::cuMemFreeAsync, pool::cuMemFreeAsync_ptsz,
    pool::cuMemPoolCreate, pool::cuMemPoolSetAttribute,
    pool::cuMemPoolTrimTo, pool::cuMemPoolDestroy,
    pool::cuMemGetDefaultMemPool, pool::cuMemGetMemPool, pool::cuMemSetMemPool,
    array::cuArrayCreate, array::cuArrayCreate_v2,
    array::cuArray3DCreate, array::cuArray3DCreate_v2, array::cuArrayDestroy,
    array::cuMipmappedArrayCreate, array::cuMipmappedArrayDestroy,
    graph::cuGraphAddMemAllocNode, graph::cuGraphAddMemFreeNode,
    graph::cuGraphAddNode, graph::cuGraphAddNode_v2, graph::cuGraphClone, graph::cuGraphDestroy,
    graph::cuGraphInstantiate, graph::cuGraphInstantiate_v2, graph::cuGraphInstantiateWithFlags,
    graph::cuGraphInstantiateWithParams, graph::cuGraphInstantiateWithParams_ptsz,
    graph::cuGraphExecDestroy, graph::cuDeviceGraphMemTrim,
    launch::cuLaunchKernel, launch::cuLaunchKernel_ptsz,
    launch::cuLaunchKernelEx, launch::cuLaunchKernelEx_ptsz,
    launch::cuLaunchCooperativeKernel, launch::cuLaunchCooperativeKernel_ptsz,
    launch::cuGraphLaunch, launch::cuGraphLaunch_ptsz,
    nvml::nvmlDeviceGetMemoryInfo, nvml::nvmlDeviceGetMemoryInfo_v2,
    nvml_procs::nvmlDeviceGetComputeRunningProcesses,
    nvml_procs::nvmlDeviceGetComputeRunningProcesses_v2,
    nvml_procs::nvmlDeviceGetComputeRunningProcesses_v3,
    nvml_procs::nvmlDeviceGetGraphicsRunningProcesses,
    nvml_procs::nvmlDeviceGetGraphicsRunningProcesses_v2,
    nvml_procs::nvmlDeviceGetGraphicsRunningProcesses_v3,
    nvml_procs::nvmlDeviceGetMPSComputeRunningProcesses_v3,
    nvml_procs::nvmlDeviceGetProcessUtilization,
    nvml_private::nvmlDeviceGetUtilizationRates, nvml_private::nvmlDeviceGetPowerUsage,
    nvml_private::nvmlDeviceGetTotalEnergyConsumption, nvml_private::nvmlDeviceGetTemperature,
    nvml_private::nvmlDeviceGetFanSpeed, nvml_private::nvmlDeviceGetFanSpeed_v2,
    nvml_private::nvmlDeviceGetClockInfo, nvml_private::nvmlDeviceGetClock,
    nvml_private::nvmlDeviceGetPerformanceState,
    nvml_private::nvmlDeviceGetEncoderUtilization, nvml_private::nvmlDeviceGetDecoderUtilization,
}

// `cuGetProcAddress`: the driver answers, and for names we wrap the pointer is our wrapper.

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
        if let Some(ours) = lookup(export.as_bytes()) {
            // SAFETY: valid out-pointer the driver just wrote.
            unsafe { *pfn = ours };
        }
    }
}

/// The real driver's `cuDriverGetVersion`, read once (it works before `cuInit`).
fn driver_version() -> Option<c_int> {
    static V: std::sync::OnceLock<Option<c_int>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let f = crate::real!(cuda_sym cuDriverGetVersion)?;
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
    let r = call!(cuGetProcAddress_v2;
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
    let r = call!(cuGetProcAddress; symbol, pfn, version, flags);
    if r == CUDA_SUCCESS {
        substitute(symbol, pfn, version, flags);
    }
    r
}
