//! Export name → our wrapper, for `dlsym`/`dlvsym` and `cuGetProcAddress`.

use std::ffi::c_void;

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
    };
}

table! {
    cuda::cuMemAlloc, cuda::cuMemAlloc_v2, cuda::cuMemAllocManaged,
    cuda::cuMemAllocPitch, cuda::cuMemAllocPitch_v2,
    cuda::cuMemFree, cuda::cuMemFree_v2,
    cuda::cuMemGetInfo, cuda::cuMemGetInfo_v2,
    cuda::cuDeviceTotalMem, cuda::cuDeviceTotalMem_v2,
    cuda::cuMemCreate, cuda::cuMemRelease,
    cuda::cuGetProcAddress, cuda::cuGetProcAddress_v2,
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
