//! The C signature of every driver and NVML function the interposer exports or calls, declared
//! once (from `cuda.h` and `nvml.h`): `pfn::<name>` is its function-pointer type.
//!
//! The exported ones are declared in [`for_each_wrapped!`] with named parameters, and a pair
//! `name / name_ptsz` declares a legacy-stream export and its per-thread-stream twin (one C
//! signature). That one declaration generates the `pfn` types and [`WRAPPED`] here, the
//! interposer's export shells, their twins and its lookup table, and the simulated driver's
//! check of its own exports. The functions the interposer only calls are declared in `pfn`
//! itself. [`WRAPPED`] names the exported ones.

#![allow(non_camel_case_types)]

/// `for_each_wrapped!(m)` calls `m! { cuda { … } nvml { … } }` with every function the
/// interposer exports a wrapper of, one entry a line:
/// `name(param: Type, …) -> Ret;` or, for a function with a per-thread-stream twin of the same
/// signature, `name / name_ptsz(param: Type, …) -> Ret;`. The types are named as `pfn` imports
/// them (`gpuslice_cuda_abi::{exec, memory, nvml, procaddr, result, types}` and `std::ffi`), so a
/// callback that emits them must have those in scope.
#[macro_export]
#[rustfmt::skip]
macro_rules! for_each_wrapped {
    ($m:ident) => {
        $m! {
        cuda {
            cuArray3DCreate(h: *mut CUarray, d: *const CUDA_ARRAY3D_DESCRIPTOR_v1) -> CUresult;
            cuArray3DCreate_v2(h: *mut CUarray, d: *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult;
            cuArrayCreate(h: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR_v1) -> CUresult;
            cuArrayCreate_v2(h: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR) -> CUresult;
            cuArrayDestroy(h: CUarray) -> CUresult;
            cuCtxCreate(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult;
            cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult;
            cuCtxCreate_v3(pctx: *mut CUcontext, params: *mut c_void, num_params: c_int, flags: c_uint, dev: CUdevice) -> CUresult;
            cuCtxCreate_v4(pctx: *mut CUcontext, params: *mut c_void, flags: c_uint, dev: CUdevice) -> CUresult;
            cuCtxSetLimit(limit: CUlimit, value: usize) -> CUresult;
            cuDeviceGraphMemTrim(dev: CUdevice) -> CUresult;
            cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult;
            cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) -> CUresult;
            cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult;
            cuEventSynchronize(ev: CUevent) -> CUresult;
            cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> CUresult;
            cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut CUdriverProcAddressQueryResult) -> CUresult;
            cuGraphAddMemAllocNode(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, ndeps: usize, params: *mut CUDA_MEM_ALLOC_NODE_PARAMS) -> CUresult;
            cuGraphAddMemFreeNode(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, ndeps: usize, dptr: CUdeviceptr) -> CUresult;
            cuGraphAddNode(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, ndeps: usize, params: *mut c_void) -> CUresult;
            cuGraphAddNode_v2(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, edges: *const c_void, ndeps: usize, params: *mut c_void) -> CUresult;
            cuGraphClone(clone: *mut CUgraph, original: CUgraph) -> CUresult;
            cuGraphDestroy(graph: CUgraph) -> CUresult;
            cuGraphExecDestroy(exec: CUgraphExec) -> CUresult;
            cuGraphInstantiate(exec: *mut CUgraphExec, graph: CUgraph, err: *mut CUgraphNode, log: *mut c_char, size: usize) -> CUresult;
            cuGraphInstantiateWithFlags(exec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> CUresult;
            cuGraphInstantiateWithParams / cuGraphInstantiateWithParams_ptsz(exec: *mut CUgraphExec, graph: CUgraph, p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS) -> CUresult;
            cuGraphInstantiate_v2(exec: *mut CUgraphExec, graph: CUgraph, err: *mut CUgraphNode, log: *mut c_char, size: usize) -> CUresult;
            cuGraphLaunch / cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) -> CUresult;
            cuLaunchCooperativeKernel / cuLaunchCooperativeKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, stream: CUstream, params: *mut *mut c_void) -> CUresult;
            cuLaunchKernel / cuLaunchKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shmem: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) -> CUresult;
            cuLaunchKernelEx / cuLaunchKernelEx_ptsz(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) -> CUresult;
            cuMemAlloc(dptr: *mut CUdeviceptr_v1, bytesize: c_uint) -> CUresult;
            cuMemAllocAsync / cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) -> CUresult;
            cuMemAllocFromPoolAsync / cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) -> CUresult;
            cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) -> CUresult;
            cuMemAllocPitch(dptr: *mut CUdeviceptr_v1, pitch: *mut c_uint, width: c_uint, height: c_uint, elem: c_uint) -> CUresult;
            cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint) -> CUresult;
            cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult;
            cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: u64) -> CUresult;
            cuMemFree(dptr: CUdeviceptr_v1) -> CUresult;
            cuMemFreeAsync / cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: CUstream) -> CUresult;
            cuMemFree_v2(dptr: CUdeviceptr) -> CUresult;
            cuMemGetDefaultMemPool(pool: *mut CUmemoryPool, loc: *const CUmemLocation, kind: CUmemAllocationType) -> CUresult;
            cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CUresult;
            cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult;
            cuMemGetMemPool(pool: *mut CUmemoryPool, loc: *const CUmemLocation, kind: CUmemAllocationType) -> CUresult;
            cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> CUresult;
            cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult;
            cuMemPoolSetAttribute(pool: CUmemoryPool, attr: CUmemPool_attribute, value: *mut c_void) -> CUresult;
            cuMemPoolTrimTo(pool: CUmemoryPool, keep: usize) -> CUresult;
            cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult;
            cuMemSetMemPool(loc: *const CUmemLocation, kind: CUmemAllocationType, pool: CUmemoryPool) -> CUresult;
            cuMipmappedArrayCreate(h: *mut CUmipmappedArray, d: *const CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint) -> CUresult;
            cuMipmappedArrayDestroy(h: CUmipmappedArray) -> CUresult;
            cuStreamSynchronize / cuStreamSynchronize_ptsz(h: CUstream) -> CUresult;
        }
        nvml {
            nvmlDeviceGetClock(device: nvmlDevice_t, clock: c_uint, id: c_uint, mhz: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetClockInfo(device: nvmlDevice_t, clock: c_uint, mhz: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetComputeRunningProcesses(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t;
            nvmlDeviceGetComputeRunningProcesses_v2(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t;
            nvmlDeviceGetComputeRunningProcesses_v3(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t;
            nvmlDeviceGetDecoderUtilization(device: nvmlDevice_t, percent: *mut c_uint, period_us: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetEncoderUtilization(device: nvmlDevice_t, percent: *mut c_uint, period_us: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetFanSpeed(device: nvmlDevice_t, percent: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetFanSpeed_v2(device: nvmlDevice_t, fan: c_uint, percent: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetGraphicsRunningProcesses(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t;
            nvmlDeviceGetGraphicsRunningProcesses_v2(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t;
            nvmlDeviceGetGraphicsRunningProcesses_v3(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t;
            nvmlDeviceGetMPSComputeRunningProcesses_v3(device: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t;
            nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) -> nvmlReturn_t;
            nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) -> nvmlReturn_t;
            nvmlDeviceGetPerformanceState(device: nvmlDevice_t, pstate: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetPowerUsage(device: nvmlDevice_t, milliwatts: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetProcessUtilization(device: nvmlDevice_t, samples: *mut nvmlProcessUtilizationSample_t, count: *mut c_uint, last_seen: u64) -> nvmlReturn_t;
            nvmlDeviceGetTemperature(device: nvmlDevice_t, sensor: c_uint, celsius: *mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetTotalEnergyConsumption(device: nvmlDevice_t, millijoules: *mut u64) -> nvmlReturn_t;
            nvmlDeviceGetUtilizationRates(device: nvmlDevice_t, utilization: *mut nvmlUtilization_t) -> nvmlReturn_t;
        }
        }
    };
}

/// `pub type <name> = unsafe extern "C" fn(..) -> ..;` for each declared function, the twins'
/// too, and the list of the exported names.
macro_rules! declare {
    (cuda { $($w:ident $(/ $wt:ident)? ($($wp:tt)*) -> $wr:ty;)* } nvml { $($n:ident $np:tt -> $nr:ty;)* }) => {
        $(declare!(@entry $w [$($wt)?] ($($wp)*) $wr);)*
        $(declare!(@one $n $np $nr);)*
        /// Every function the interposer exports a wrapper of.
        pub const WRAPPED: &[&str] = &[$(stringify!($w), $(stringify!($wt),)?)* $(stringify!($n)),*];
    };
    (called { $($c:ident($($ct:ty),*) -> $cr:ty;)* }) => {
        $(pub type $c = unsafe extern "C" fn($($ct),*) -> $cr;)*
    };
    (@entry $name:ident [] $p:tt $r:ty) => {
        declare!(@one $name $p $r);
    };
    (@entry $name:ident [$twin:ident] $p:tt $r:ty) => {
        declare!(@one $name $p $r);
        declare!(@one $twin $p $r);
    };
    (@one $name:ident ($($p:ident: $t:ty),*) $r:ty) => {
        pub type $name = unsafe extern "C" fn($($t),*) -> $r;
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

    for_each_wrapped!(declare);

    #[rustfmt::skip]
    declare! {
    called {
        cuCtxGetCurrent(*mut CUcontext) -> CUresult;
        cuCtxGetDevice(*mut CUdevice) -> CUresult;
        cuCtxGetLimit(*mut usize, CUlimit) -> CUresult;
        cuDeviceGetAttribute(*mut c_int, CUdevice_attribute, CUdevice) -> CUresult;
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
        cuStreamIsCapturing(CUstream, *mut CUstreamCaptureStatus) -> CUresult;
        cuStreamIsCapturing_ptsz(CUstream, *mut CUstreamCaptureStatus) -> CUresult;
        cuThreadExchangeStreamCaptureMode(*mut CUstreamCaptureMode) -> CUresult;
        nvmlDeviceGetIndex(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
        nvmlDeviceGetUUID(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    }
    }
}

pub use pfn::WRAPPED;
