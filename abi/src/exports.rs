//! The C signature of every driver and NVML function the interposer exports or calls, declared
//! once (from `cuda.h` and `nvml.h`): `pfn::<name>` is its function-pointer type. The
//! interposer's lookup table checks each exported wrapper against these at compile time, and
//! its calls of the real functions are typed by them, so a signature is never written twice.
//! [`WRAPPED`] names the exported ones.

#![allow(non_camel_case_types)]

/// One `pub type <name> = unsafe extern "C" fn(..) -> ..;` per line, and the list of names.
macro_rules! declare {
    (wrapped { $($w:ident($($wt:ty),*) -> $wr:ty;)* } called { $($c:ident($($ct:ty),*) -> $cr:ty;)* }) => {
        $(pub type $w = unsafe extern "C" fn($($wt),*) -> $wr;)*
        $(pub type $c = unsafe extern "C" fn($($ct),*) -> $cr;)*
        /// Every function the interposer exports a wrapper of.
        pub const WRAPPED: &[&str] = &[$(stringify!($w)),*];
    };
}

/// The function-pointer types.
pub mod pfn {
    use crate::exec::*;
    use crate::memory::*;
    use crate::nvml::*;
    use crate::procaddr::CUdriverProcAddressQueryResult;
    use crate::result::CUresult;
    use crate::types::*;
    use std::ffi::{c_char, c_int, c_uint, c_void};

    #[rustfmt::skip]
    declare! {
    wrapped {
        cuArray3DCreate(*mut CUarray, *const CUDA_ARRAY3D_DESCRIPTOR_v1) -> CUresult;
        cuArray3DCreate_v2(*mut CUarray, *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult;
        cuArrayCreate(*mut CUarray, *const CUDA_ARRAY_DESCRIPTOR_v1) -> CUresult;
        cuArrayCreate_v2(*mut CUarray, *const CUDA_ARRAY_DESCRIPTOR) -> CUresult;
        cuArrayDestroy(CUarray) -> CUresult;
        cuCtxCreate(*mut CUcontext, c_uint, CUdevice) -> CUresult;
        cuCtxCreate_v2(*mut CUcontext, c_uint, CUdevice) -> CUresult;
        cuCtxCreate_v3(*mut CUcontext, *mut c_void, c_int, c_uint, CUdevice) -> CUresult;
        cuCtxCreate_v4(*mut CUcontext, *mut c_void, c_uint, CUdevice) -> CUresult;
        cuDeviceGraphMemTrim(CUdevice) -> CUresult;
        cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice) -> CUresult;
        cuDeviceTotalMem(*mut c_uint, CUdevice) -> CUresult;
        cuDeviceTotalMem_v2(*mut usize, CUdevice) -> CUresult;
        cuEventSynchronize(CUevent) -> CUresult;
        cuGetProcAddress(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult;
        cuGetProcAddress_v2(*const c_char, *mut *mut c_void, c_int, u64, *mut CUdriverProcAddressQueryResult) -> CUresult;
        cuGraphAddMemAllocNode(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize, *mut CUDA_MEM_ALLOC_NODE_PARAMS) -> CUresult;
        cuGraphAddMemFreeNode(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize, CUdeviceptr) -> CUresult;
        cuGraphAddNode(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize, *mut c_void) -> CUresult;
        cuGraphAddNode_v2(*mut CUgraphNode, CUgraph, *const CUgraphNode, *const c_void, usize, *mut c_void) -> CUresult;
        cuGraphClone(*mut CUgraph, CUgraph) -> CUresult;
        cuGraphDestroy(CUgraph) -> CUresult;
        cuGraphExecDestroy(CUgraphExec) -> CUresult;
        cuGraphInstantiate(*mut CUgraphExec, CUgraph, *mut CUgraphNode, *mut c_char, usize) -> CUresult;
        cuGraphInstantiateWithFlags(*mut CUgraphExec, CUgraph, u64) -> CUresult;
        cuGraphInstantiateWithParams(*mut CUgraphExec, CUgraph, *mut CUDA_GRAPH_INSTANTIATE_PARAMS) -> CUresult;
        cuGraphInstantiateWithParams_ptsz(*mut CUgraphExec, CUgraph, *mut CUDA_GRAPH_INSTANTIATE_PARAMS) -> CUresult;
        cuGraphInstantiate_v2(*mut CUgraphExec, CUgraph, *mut CUgraphNode, *mut c_char, usize) -> CUresult;
        cuGraphLaunch(CUgraphExec, CUstream) -> CUresult;
        cuGraphLaunch_ptsz(CUgraphExec, CUstream) -> CUresult;
        cuLaunchCooperativeKernel(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void) -> CUresult;
        cuLaunchCooperativeKernel_ptsz(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void) -> CUresult;
        cuLaunchKernel(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void) -> CUresult;
        cuLaunchKernelEx(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void) -> CUresult;
        cuLaunchKernelEx_ptsz(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void) -> CUresult;
        cuLaunchKernel_ptsz(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void) -> CUresult;
        cuMemAlloc(*mut CUdeviceptr_v1, c_uint) -> CUresult;
        cuMemAllocAsync(*mut CUdeviceptr, usize, CUstream) -> CUresult;
        cuMemAllocAsync_ptsz(*mut CUdeviceptr, usize, CUstream) -> CUresult;
        cuMemAllocFromPoolAsync(*mut CUdeviceptr, usize, CUmemoryPool, CUstream) -> CUresult;
        cuMemAllocFromPoolAsync_ptsz(*mut CUdeviceptr, usize, CUmemoryPool, CUstream) -> CUresult;
        cuMemAllocManaged(*mut CUdeviceptr, usize, c_uint) -> CUresult;
        cuMemAllocPitch(*mut CUdeviceptr_v1, *mut c_uint, c_uint, c_uint, c_uint) -> CUresult;
        cuMemAllocPitch_v2(*mut CUdeviceptr, *mut usize, usize, usize, c_uint) -> CUresult;
        cuMemAlloc_v2(*mut CUdeviceptr, usize) -> CUresult;
        cuMemCreate(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp, u64) -> CUresult;
        cuMemFree(CUdeviceptr_v1) -> CUresult;
        cuMemFreeAsync(CUdeviceptr, CUstream) -> CUresult;
        cuMemFreeAsync_ptsz(CUdeviceptr, CUstream) -> CUresult;
        cuMemFree_v2(CUdeviceptr) -> CUresult;
        cuMemGetDefaultMemPool(*mut CUmemoryPool, *const CUmemLocation, CUmemAllocationType) -> CUresult;
        cuMemGetInfo(*mut c_uint, *mut c_uint) -> CUresult;
        cuMemGetInfo_v2(*mut usize, *mut usize) -> CUresult;
        cuMemGetMemPool(*mut CUmemoryPool, *const CUmemLocation, CUmemAllocationType) -> CUresult;
        cuMemPoolCreate(*mut CUmemoryPool, *const CUmemPoolProps) -> CUresult;
        cuMemPoolDestroy(CUmemoryPool) -> CUresult;
        cuMemPoolSetAttribute(CUmemoryPool, CUmemPool_attribute, *mut c_void) -> CUresult;
        cuMemPoolTrimTo(CUmemoryPool, usize) -> CUresult;
        cuMemRelease(CUmemGenericAllocationHandle) -> CUresult;
        cuMemSetMemPool(*const CUmemLocation, CUmemAllocationType, CUmemoryPool) -> CUresult;
        cuMipmappedArrayCreate(*mut CUmipmappedArray, *const CUDA_ARRAY3D_DESCRIPTOR, c_uint) -> CUresult;
        cuMipmappedArrayDestroy(CUmipmappedArray) -> CUresult;
        cuStreamSynchronize(CUstream) -> CUresult;
        cuStreamSynchronize_ptsz(CUstream) -> CUresult;
        nvmlDeviceGetClock(nvmlDevice_t, c_uint, c_uint, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetClockInfo(nvmlDevice_t, c_uint, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t;
        nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
        nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
        nvmlDeviceGetDecoderUtilization(nvmlDevice_t, *mut c_uint, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetEncoderUtilization(nvmlDevice_t, *mut c_uint, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetFanSpeed(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetFanSpeed_v2(nvmlDevice_t, c_uint, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t;
        nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
        nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
        nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
        nvmlDeviceGetMemoryInfo(nvmlDevice_t, *mut nvmlMemory_t) -> nvmlReturn_t;
        nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, *mut nvmlMemory_v2_t) -> nvmlReturn_t;
        nvmlDeviceGetPerformanceState(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetPowerUsage(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetProcessUtilization(nvmlDevice_t, *mut nvmlProcessUtilizationSample_t, *mut c_uint, u64) -> nvmlReturn_t;
        nvmlDeviceGetTemperature(nvmlDevice_t, c_uint, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t, *mut u64) -> nvmlReturn_t;
        nvmlDeviceGetUtilizationRates(nvmlDevice_t, *mut nvmlUtilization_t) -> nvmlReturn_t;
    }
    called {
        cuCtxGetCurrent(*mut CUcontext) -> CUresult;
        cuCtxGetDevice(*mut CUdevice) -> CUresult;
        cuCtxSetCurrent(CUcontext) -> CUresult;
        cuCtxSynchronize() -> CUresult;
        cuDeviceGetGraphMemAttribute(CUdevice, u32, *mut c_void) -> CUresult;
        cuDeviceGetMemPool(*mut CUmemoryPool, CUdevice) -> CUresult;
        cuDeviceGetUuid(*mut CUuuid, CUdevice) -> CUresult;
        cuDeviceGetUuid_v2(*mut CUuuid, CUdevice) -> CUresult;
        cuDriverGetVersion(*mut c_int) -> CUresult;
        cuEventCreate(*mut CUevent, u32) -> CUresult;
        cuEventDestroy_v2(CUevent) -> CUresult;
        cuEventElapsedTime(*mut f32, CUevent, CUevent) -> CUresult;
        cuEventQuery(CUevent) -> CUresult;
        cuEventRecord(CUevent, CUstream) -> CUresult;
        cuLaunchHostFunc(CUstream, CUhostFn, *mut c_void) -> CUresult;
        cuLaunchHostFunc_ptsz(CUstream, CUhostFn, *mut c_void) -> CUresult;
        cuMemPoolGetAttribute(CUmemoryPool, CUmemPool_attribute, *mut c_void) -> CUresult;
        nvmlDeviceGetIndex(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetUUID(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    }
    }
}

pub use pfn::WRAPPED;

/// `for_each_wrapped_cuda!(m)` calls `m! { name, name, … }` with every CUDA driver function in
/// [`WRAPPED`], so another crate (the simulated driver) can check its own exports against
/// [`pfn`].
#[macro_export]
#[rustfmt::skip]
macro_rules! for_each_wrapped_cuda {
    ($m:ident) => {
        $m! {
        cuArray3DCreate, cuArray3DCreate_v2, cuArrayCreate, cuArrayCreate_v2, cuArrayDestroy,
        cuCtxCreate, cuCtxCreate_v2, cuCtxCreate_v3, cuCtxCreate_v4, cuDeviceGraphMemTrim,
        cuDevicePrimaryCtxRetain, cuDeviceTotalMem, cuDeviceTotalMem_v2, cuEventSynchronize,
        cuGetProcAddress, cuGetProcAddress_v2, cuGraphAddMemAllocNode, cuGraphAddMemFreeNode,
        cuGraphAddNode, cuGraphAddNode_v2, cuGraphClone, cuGraphDestroy, cuGraphExecDestroy,
        cuGraphInstantiate, cuGraphInstantiateWithFlags, cuGraphInstantiateWithParams,
        cuGraphInstantiateWithParams_ptsz, cuGraphInstantiate_v2, cuGraphLaunch,
        cuGraphLaunch_ptsz, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz,
        cuLaunchKernel, cuLaunchKernelEx, cuLaunchKernelEx_ptsz, cuLaunchKernel_ptsz, cuMemAlloc,
        cuMemAllocAsync, cuMemAllocAsync_ptsz, cuMemAllocFromPoolAsync,
        cuMemAllocFromPoolAsync_ptsz, cuMemAllocManaged, cuMemAllocPitch, cuMemAllocPitch_v2,
        cuMemAlloc_v2, cuMemCreate, cuMemFree, cuMemFreeAsync, cuMemFreeAsync_ptsz, cuMemFree_v2,
        cuMemGetDefaultMemPool, cuMemGetInfo, cuMemGetInfo_v2, cuMemGetMemPool, cuMemPoolCreate,
        cuMemPoolDestroy, cuMemPoolSetAttribute, cuMemPoolTrimTo, cuMemRelease, cuMemSetMemPool,
        cuMipmappedArrayCreate, cuMipmappedArrayDestroy, cuStreamSynchronize,
        cuStreamSynchronize_ptsz
        }
    };
}
