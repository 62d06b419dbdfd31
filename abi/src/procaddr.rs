//! The `cuGetProcAddress` symbol table: for every driver entry point (the name a caller passes,
//! without version suffix) each exported variant, the first CUDA version (`cudaVersion`, e.g. 3020
//! for 3.2) that maps to it, and whether it is the legacy-stream or the per-thread-default-stream
//! (`_ptds` / `_ptsz`) flavour; plus [`resolve`], the driver's lookup rule.
//!
//! Derived from the `PFN_<name>_v<version>[_ptds|_ptsz]` typedefs of cudaTypedefs.h (CUDA 12.9),
//! including its `__CUDA_API_VERSION_INTERNAL` section of older variants. Export names follow the
//! driver's convention, checked against every `#define cuX cuX_vN` / `__CUDA_API_PTDS(...)` line
//! of cuda.h: the variants of a symbol in version order are exported as `name`, `name_v2`,
//! `name_v3`, …; a per-thread variant is the legacy export current at its version plus `_ptds`
//! (synchronous calls) or `_ptsz` (calls taking a stream). One alias is not a suffix:
//! `cuGraphInstantiate` requested with `cudaVersion >= 12000` is `cuGraphInstantiateWithFlags`
//! (cuda.h defines `cuGraphInstantiate` as `cuGraphInstantiateWithFlags` and cudaTypedefs.h
//! `PFN_cuGraphInstantiate` as `PFN_cuGraphInstantiateWithFlags_v11040`).
//!
//! The table is the whole CUDA 12.9 driver API, not only what the simulator implements, so the
//! interposer can use it too; a caller that resolves the export name with `dlsym` must still
//! handle a library that lacks it.

use crate::result::{CUresult, CUDA_ERROR_NOT_FOUND};

/// `CUdriverProcAddress_flags`: `CU_GET_PROC_ADDRESS_DEFAULT` (legacy-stream variants).
pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`.
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1 << 0;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// `CUdriverProcAddressQueryResult` (C enum, 32-bit).
pub type CUdriverProcAddressQueryResult = u32;
/// `CU_GET_PROC_ADDRESS_SUCCESS`.
pub const CU_GET_PROC_ADDRESS_SUCCESS: CUdriverProcAddressQueryResult = 0;
/// `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: CUdriverProcAddressQueryResult = 1;
/// `CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT`.
pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: CUdriverProcAddressQueryResult = 2;

/// Which default-stream semantics an exported variant has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// The plain export: the NULL stream is the legacy default stream.
    Legacy,
    /// The `_ptds` / `_ptsz` export: the NULL stream is the per-thread default stream.
    PerThread,
}

/// One exported variant of a driver entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcAddrEntry {
    /// The name callers pass to `cuGetProcAddress` (no version or stream suffix).
    pub symbol: &'static str,
    /// First `cudaVersion` (1000 × major + 10 × minor) that maps to this variant.
    pub version: u32,
    /// Default-stream flavour of the variant.
    pub flavour: Flavour,
    /// The ELF symbol the driver exports for the variant.
    pub export: &'static str,
}

/// Why a lookup failed (mirrors `CUdriverProcAddressQueryResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcAddrStatus {
    /// No driver entry point has this name.
    SymbolNotFound,
    /// The entry point exists, but only in CUDA versions newer than the one requested.
    VersionNotSufficient,
}

impl ProcAddrStatus {
    /// The `CUdriverProcAddressQueryResult` value reported through `symbolStatus`.
    pub fn query_result(self) -> CUdriverProcAddressQueryResult {
        match self {
            ProcAddrStatus::SymbolNotFound => CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
            ProcAddrStatus::VersionNotSufficient => CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
        }
    }

    /// The `CUresult` `cuGetProcAddress` returns (the driver answers `CUDA_ERROR_NOT_FOUND` for both).
    pub fn result(self) -> CUresult {
        CUDA_ERROR_NOT_FOUND
    }
}

/// All variants of `symbol`, legacy flavour first, each flavour in ascending version order.
pub fn variants(symbol: &str) -> &'static [ProcAddrEntry] {
    let lo = PROC_ADDR_TABLE.partition_point(|e| e.symbol < symbol);
    let hi = PROC_ADDR_TABLE.partition_point(|e| e.symbol <= symbol);
    &PROC_ADDR_TABLE[lo..hi]
}

/// The driver's `cuGetProcAddress` rule: among the variants of `symbol` whose version is at most
/// `cuda_version`, the newest one; the per-thread flavour when `flags` asks for it with
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` (and not also for the legacy one) and the
/// symbol has such a variant by then, the legacy flavour otherwise (`CU_GET_PROC_ADDRESS_DEFAULT`
/// means legacy: cuda.h's per-thread wrapper adds the per-thread flag itself).
pub fn resolve(
    symbol: &str,
    cuda_version: i32,
    flags: u64,
) -> Result<&'static str, ProcAddrStatus> {
    let all = variants(symbol);
    if all.is_empty() {
        return Err(ProcAddrStatus::SymbolNotFound);
    }
    let per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0
        && flags & CU_GET_PROC_ADDRESS_LEGACY_STREAM == 0;
    let newest = |flavour: Flavour| {
        all.iter()
            .filter(|e| e.flavour == flavour && i64::from(e.version) <= i64::from(cuda_version))
            .max_by_key(|e| e.version)
    };
    let pick = if per_thread {
        newest(Flavour::PerThread).or_else(|| newest(Flavour::Legacy))
    } else {
        newest(Flavour::Legacy)
    };
    pick.map(|e| e.export)
        .ok_or(ProcAddrStatus::VersionNotSufficient)
}

/// The distinct entry-point names of the table, in order.
pub fn symbols() -> impl Iterator<Item = &'static str> {
    let mut last = "";
    PROC_ADDR_TABLE.iter().filter_map(move |e| {
        if e.symbol == last {
            None
        } else {
            last = e.symbol;
            Some(e.symbol)
        }
    })
}

const fn e(
    symbol: &'static str,
    version: u32,
    flavour: Flavour,
    export: &'static str,
) -> ProcAddrEntry {
    ProcAddrEntry {
        symbol,
        version,
        flavour,
        export,
    }
}

use Flavour::{Legacy, PerThread};

/// Every exported variant of the CUDA 12.9 driver API, sorted by `symbol`, then flavour (legacy
/// first), then version.
pub static PROC_ADDR_TABLE: &[ProcAddrEntry] = &[
    e("cuArray3DCreate", 2000, Legacy, "cuArray3DCreate"),
    e("cuArray3DCreate", 3020, Legacy, "cuArray3DCreate_v2"),
    e(
        "cuArray3DGetDescriptor",
        2000,
        Legacy,
        "cuArray3DGetDescriptor",
    ),
    e(
        "cuArray3DGetDescriptor",
        3020,
        Legacy,
        "cuArray3DGetDescriptor_v2",
    ),
    e("cuArrayCreate", 2000, Legacy, "cuArrayCreate"),
    e("cuArrayCreate", 3020, Legacy, "cuArrayCreate_v2"),
    e("cuArrayDestroy", 2000, Legacy, "cuArrayDestroy"),
    e("cuArrayGetDescriptor", 2000, Legacy, "cuArrayGetDescriptor"),
    e(
        "cuArrayGetDescriptor",
        3020,
        Legacy,
        "cuArrayGetDescriptor_v2",
    ),
    e(
        "cuArrayGetMemoryRequirements",
        11060,
        Legacy,
        "cuArrayGetMemoryRequirements",
    ),
    e("cuArrayGetPlane", 11020, Legacy, "cuArrayGetPlane"),
    e(
        "cuArrayGetSparseProperties",
        11010,
        Legacy,
        "cuArrayGetSparseProperties",
    ),
    e(
        "cuCheckpointProcessCheckpoint",
        12080,
        Legacy,
        "cuCheckpointProcessCheckpoint",
    ),
    e(
        "cuCheckpointProcessGetRestoreThreadId",
        12080,
        Legacy,
        "cuCheckpointProcessGetRestoreThreadId",
    ),
    e(
        "cuCheckpointProcessGetState",
        12080,
        Legacy,
        "cuCheckpointProcessGetState",
    ),
    e(
        "cuCheckpointProcessLock",
        12080,
        Legacy,
        "cuCheckpointProcessLock",
    ),
    e(
        "cuCheckpointProcessRestore",
        12080,
        Legacy,
        "cuCheckpointProcessRestore",
    ),
    e(
        "cuCheckpointProcessUnlock",
        12080,
        Legacy,
        "cuCheckpointProcessUnlock",
    ),
    e(
        "cuCoredumpGetAttribute",
        12010,
        Legacy,
        "cuCoredumpGetAttribute",
    ),
    e(
        "cuCoredumpGetAttributeGlobal",
        12010,
        Legacy,
        "cuCoredumpGetAttributeGlobal",
    ),
    e(
        "cuCoredumpSetAttribute",
        12010,
        Legacy,
        "cuCoredumpSetAttribute",
    ),
    e(
        "cuCoredumpSetAttributeGlobal",
        12010,
        Legacy,
        "cuCoredumpSetAttributeGlobal",
    ),
    e("cuCtxAttach", 2000, Legacy, "cuCtxAttach"),
    e("cuCtxCreate", 2000, Legacy, "cuCtxCreate"),
    e("cuCtxCreate", 3020, Legacy, "cuCtxCreate_v2"),
    e("cuCtxCreate", 11040, Legacy, "cuCtxCreate_v3"),
    e("cuCtxCreate", 12050, Legacy, "cuCtxCreate_v4"),
    e("cuCtxDestroy", 2000, Legacy, "cuCtxDestroy"),
    e("cuCtxDestroy", 4000, Legacy, "cuCtxDestroy_v2"),
    e("cuCtxDetach", 2000, Legacy, "cuCtxDetach"),
    e(
        "cuCtxDisablePeerAccess",
        4000,
        Legacy,
        "cuCtxDisablePeerAccess",
    ),
    e(
        "cuCtxEnablePeerAccess",
        4000,
        Legacy,
        "cuCtxEnablePeerAccess",
    ),
    e("cuCtxFromGreenCtx", 12040, Legacy, "cuCtxFromGreenCtx"),
    e("cuCtxGetApiVersion", 3020, Legacy, "cuCtxGetApiVersion"),
    e("cuCtxGetCacheConfig", 3020, Legacy, "cuCtxGetCacheConfig"),
    e("cuCtxGetCurrent", 4000, Legacy, "cuCtxGetCurrent"),
    e("cuCtxGetDevResource", 12040, Legacy, "cuCtxGetDevResource"),
    e("cuCtxGetDevice", 2000, Legacy, "cuCtxGetDevice"),
    e(
        "cuCtxGetExecAffinity",
        11040,
        Legacy,
        "cuCtxGetExecAffinity",
    ),
    e("cuCtxGetFlags", 7000, Legacy, "cuCtxGetFlags"),
    e("cuCtxGetId", 12000, Legacy, "cuCtxGetId"),
    e("cuCtxGetLimit", 3010, Legacy, "cuCtxGetLimit"),
    e(
        "cuCtxGetSharedMemConfig",
        4020,
        Legacy,
        "cuCtxGetSharedMemConfig",
    ),
    e(
        "cuCtxGetStreamPriorityRange",
        5050,
        Legacy,
        "cuCtxGetStreamPriorityRange",
    ),
    e("cuCtxPopCurrent", 2000, Legacy, "cuCtxPopCurrent"),
    e("cuCtxPopCurrent", 4000, Legacy, "cuCtxPopCurrent_v2"),
    e("cuCtxPushCurrent", 2000, Legacy, "cuCtxPushCurrent"),
    e("cuCtxPushCurrent", 4000, Legacy, "cuCtxPushCurrent_v2"),
    e("cuCtxRecordEvent", 12050, Legacy, "cuCtxRecordEvent"),
    e(
        "cuCtxResetPersistingL2Cache",
        11000,
        Legacy,
        "cuCtxResetPersistingL2Cache",
    ),
    e("cuCtxSetCacheConfig", 3020, Legacy, "cuCtxSetCacheConfig"),
    e("cuCtxSetCurrent", 4000, Legacy, "cuCtxSetCurrent"),
    e("cuCtxSetFlags", 12010, Legacy, "cuCtxSetFlags"),
    e("cuCtxSetLimit", 3010, Legacy, "cuCtxSetLimit"),
    e(
        "cuCtxSetSharedMemConfig",
        4020,
        Legacy,
        "cuCtxSetSharedMemConfig",
    ),
    e("cuCtxSynchronize", 2000, Legacy, "cuCtxSynchronize"),
    e("cuCtxWaitEvent", 12050, Legacy, "cuCtxWaitEvent"),
    e(
        "cuDestroyExternalMemory",
        10000,
        Legacy,
        "cuDestroyExternalMemory",
    ),
    e(
        "cuDestroyExternalSemaphore",
        10000,
        Legacy,
        "cuDestroyExternalSemaphore",
    ),
    e(
        "cuDevResourceGenerateDesc",
        12040,
        Legacy,
        "cuDevResourceGenerateDesc",
    ),
    e(
        "cuDevSmResourceSplitByCount",
        12040,
        Legacy,
        "cuDevSmResourceSplitByCount",
    ),
    e(
        "cuDeviceCanAccessPeer",
        4000,
        Legacy,
        "cuDeviceCanAccessPeer",
    ),
    e(
        "cuDeviceComputeCapability",
        2000,
        Legacy,
        "cuDeviceComputeCapability",
    ),
    e("cuDeviceGet", 2000, Legacy, "cuDeviceGet"),
    e("cuDeviceGetAttribute", 2000, Legacy, "cuDeviceGetAttribute"),
    e(
        "cuDeviceGetByPCIBusId",
        4010,
        Legacy,
        "cuDeviceGetByPCIBusId",
    ),
    e("cuDeviceGetCount", 2000, Legacy, "cuDeviceGetCount"),
    e(
        "cuDeviceGetDefaultMemPool",
        11020,
        Legacy,
        "cuDeviceGetDefaultMemPool",
    ),
    e(
        "cuDeviceGetDevResource",
        12040,
        Legacy,
        "cuDeviceGetDevResource",
    ),
    e(
        "cuDeviceGetExecAffinitySupport",
        11040,
        Legacy,
        "cuDeviceGetExecAffinitySupport",
    ),
    e(
        "cuDeviceGetGraphMemAttribute",
        11040,
        Legacy,
        "cuDeviceGetGraphMemAttribute",
    ),
    e("cuDeviceGetLuid", 10000, Legacy, "cuDeviceGetLuid"),
    e("cuDeviceGetMemPool", 11020, Legacy, "cuDeviceGetMemPool"),
    e("cuDeviceGetName", 2000, Legacy, "cuDeviceGetName"),
    e(
        "cuDeviceGetNvSciSyncAttributes",
        10020,
        Legacy,
        "cuDeviceGetNvSciSyncAttributes",
    ),
    e(
        "cuDeviceGetP2PAttribute",
        8000,
        Legacy,
        "cuDeviceGetP2PAttribute",
    ),
    e("cuDeviceGetPCIBusId", 4010, Legacy, "cuDeviceGetPCIBusId"),
    e(
        "cuDeviceGetProperties",
        2000,
        Legacy,
        "cuDeviceGetProperties",
    ),
    e(
        "cuDeviceGetTexture1DLinearMaxWidth",
        11010,
        Legacy,
        "cuDeviceGetTexture1DLinearMaxWidth",
    ),
    e("cuDeviceGetUuid", 9020, Legacy, "cuDeviceGetUuid"),
    e("cuDeviceGetUuid", 11040, Legacy, "cuDeviceGetUuid_v2"),
    e(
        "cuDeviceGraphMemTrim",
        11040,
        Legacy,
        "cuDeviceGraphMemTrim",
    ),
    e(
        "cuDevicePrimaryCtxGetState",
        7000,
        Legacy,
        "cuDevicePrimaryCtxGetState",
    ),
    e(
        "cuDevicePrimaryCtxRelease",
        7000,
        Legacy,
        "cuDevicePrimaryCtxRelease",
    ),
    e(
        "cuDevicePrimaryCtxRelease",
        11000,
        Legacy,
        "cuDevicePrimaryCtxRelease_v2",
    ),
    e(
        "cuDevicePrimaryCtxReset",
        7000,
        Legacy,
        "cuDevicePrimaryCtxReset",
    ),
    e(
        "cuDevicePrimaryCtxReset",
        11000,
        Legacy,
        "cuDevicePrimaryCtxReset_v2",
    ),
    e(
        "cuDevicePrimaryCtxRetain",
        7000,
        Legacy,
        "cuDevicePrimaryCtxRetain",
    ),
    e(
        "cuDevicePrimaryCtxSetFlags",
        7000,
        Legacy,
        "cuDevicePrimaryCtxSetFlags",
    ),
    e(
        "cuDevicePrimaryCtxSetFlags",
        11000,
        Legacy,
        "cuDevicePrimaryCtxSetFlags_v2",
    ),
    e(
        "cuDeviceRegisterAsyncNotification",
        12040,
        Legacy,
        "cuDeviceRegisterAsyncNotification",
    ),
    e(
        "cuDeviceSetGraphMemAttribute",
        11040,
        Legacy,
        "cuDeviceSetGraphMemAttribute",
    ),
    e("cuDeviceSetMemPool", 11020, Legacy, "cuDeviceSetMemPool"),
    e("cuDeviceTotalMem", 2000, Legacy, "cuDeviceTotalMem"),
    e("cuDeviceTotalMem", 3020, Legacy, "cuDeviceTotalMem_v2"),
    e(
        "cuDeviceUnregisterAsyncNotification",
        12040,
        Legacy,
        "cuDeviceUnregisterAsyncNotification",
    ),
    e("cuDriverGetVersion", 2020, Legacy, "cuDriverGetVersion"),
    e("cuEventCreate", 2000, Legacy, "cuEventCreate"),
    e("cuEventDestroy", 2000, Legacy, "cuEventDestroy"),
    e("cuEventDestroy", 4000, Legacy, "cuEventDestroy_v2"),
    e("cuEventElapsedTime", 2000, Legacy, "cuEventElapsedTime"),
    e("cuEventElapsedTime", 12080, Legacy, "cuEventElapsedTime_v2"),
    e("cuEventQuery", 2000, Legacy, "cuEventQuery"),
    e("cuEventRecord", 2000, Legacy, "cuEventRecord"),
    e("cuEventRecord", 7000, PerThread, "cuEventRecord_ptsz"),
    e(
        "cuEventRecordWithFlags",
        11010,
        Legacy,
        "cuEventRecordWithFlags",
    ),
    e(
        "cuEventRecordWithFlags",
        11010,
        PerThread,
        "cuEventRecordWithFlags_ptsz",
    ),
    e("cuEventSynchronize", 2000, Legacy, "cuEventSynchronize"),
    e(
        "cuExternalMemoryGetMappedBuffer",
        10000,
        Legacy,
        "cuExternalMemoryGetMappedBuffer",
    ),
    e(
        "cuExternalMemoryGetMappedMipmappedArray",
        10000,
        Legacy,
        "cuExternalMemoryGetMappedMipmappedArray",
    ),
    e(
        "cuFlushGPUDirectRDMAWrites",
        11030,
        Legacy,
        "cuFlushGPUDirectRDMAWrites",
    ),
    e("cuFuncGetAttribute", 2020, Legacy, "cuFuncGetAttribute"),
    e("cuFuncGetModule", 11000, Legacy, "cuFuncGetModule"),
    e("cuFuncGetName", 12030, Legacy, "cuFuncGetName"),
    e("cuFuncGetParamInfo", 12040, Legacy, "cuFuncGetParamInfo"),
    e("cuFuncIsLoaded", 12040, Legacy, "cuFuncIsLoaded"),
    e("cuFuncLoad", 12040, Legacy, "cuFuncLoad"),
    e("cuFuncSetAttribute", 9000, Legacy, "cuFuncSetAttribute"),
    e("cuFuncSetBlockShape", 2000, Legacy, "cuFuncSetBlockShape"),
    e("cuFuncSetCacheConfig", 3000, Legacy, "cuFuncSetCacheConfig"),
    e(
        "cuFuncSetSharedMemConfig",
        4020,
        Legacy,
        "cuFuncSetSharedMemConfig",
    ),
    e("cuFuncSetSharedSize", 2000, Legacy, "cuFuncSetSharedSize"),
    e("cuGetErrorName", 6000, Legacy, "cuGetErrorName"),
    e("cuGetErrorString", 6000, Legacy, "cuGetErrorString"),
    e("cuGetExportTable", 3000, Legacy, "cuGetExportTable"),
    e("cuGetProcAddress", 11030, Legacy, "cuGetProcAddress"),
    e("cuGetProcAddress", 12000, Legacy, "cuGetProcAddress_v2"),
    e(
        "cuGraphAddBatchMemOpNode",
        11070,
        Legacy,
        "cuGraphAddBatchMemOpNode",
    ),
    e(
        "cuGraphAddChildGraphNode",
        10000,
        Legacy,
        "cuGraphAddChildGraphNode",
    ),
    e(
        "cuGraphAddDependencies",
        10000,
        Legacy,
        "cuGraphAddDependencies",
    ),
    e(
        "cuGraphAddDependencies",
        12030,
        Legacy,
        "cuGraphAddDependencies_v2",
    ),
    e("cuGraphAddEmptyNode", 10000, Legacy, "cuGraphAddEmptyNode"),
    e(
        "cuGraphAddEventRecordNode",
        11010,
        Legacy,
        "cuGraphAddEventRecordNode",
    ),
    e(
        "cuGraphAddEventWaitNode",
        11010,
        Legacy,
        "cuGraphAddEventWaitNode",
    ),
    e(
        "cuGraphAddExternalSemaphoresSignalNode",
        11020,
        Legacy,
        "cuGraphAddExternalSemaphoresSignalNode",
    ),
    e(
        "cuGraphAddExternalSemaphoresWaitNode",
        11020,
        Legacy,
        "cuGraphAddExternalSemaphoresWaitNode",
    ),
    e("cuGraphAddHostNode", 10000, Legacy, "cuGraphAddHostNode"),
    e(
        "cuGraphAddKernelNode",
        10000,
        Legacy,
        "cuGraphAddKernelNode",
    ),
    e(
        "cuGraphAddKernelNode",
        12000,
        Legacy,
        "cuGraphAddKernelNode_v2",
    ),
    e(
        "cuGraphAddMemAllocNode",
        11040,
        Legacy,
        "cuGraphAddMemAllocNode",
    ),
    e(
        "cuGraphAddMemFreeNode",
        11040,
        Legacy,
        "cuGraphAddMemFreeNode",
    ),
    e(
        "cuGraphAddMemcpyNode",
        10000,
        Legacy,
        "cuGraphAddMemcpyNode",
    ),
    e(
        "cuGraphAddMemsetNode",
        10000,
        Legacy,
        "cuGraphAddMemsetNode",
    ),
    e("cuGraphAddNode", 12020, Legacy, "cuGraphAddNode"),
    e("cuGraphAddNode", 12030, Legacy, "cuGraphAddNode_v2"),
    e(
        "cuGraphBatchMemOpNodeGetParams",
        11070,
        Legacy,
        "cuGraphBatchMemOpNodeGetParams",
    ),
    e(
        "cuGraphBatchMemOpNodeSetParams",
        11070,
        Legacy,
        "cuGraphBatchMemOpNodeSetParams",
    ),
    e(
        "cuGraphChildGraphNodeGetGraph",
        10000,
        Legacy,
        "cuGraphChildGraphNodeGetGraph",
    ),
    e("cuGraphClone", 10000, Legacy, "cuGraphClone"),
    e(
        "cuGraphConditionalHandleCreate",
        12030,
        Legacy,
        "cuGraphConditionalHandleCreate",
    ),
    e("cuGraphCreate", 10000, Legacy, "cuGraphCreate"),
    e(
        "cuGraphDebugDotPrint",
        11030,
        Legacy,
        "cuGraphDebugDotPrint",
    ),
    e("cuGraphDestroy", 10000, Legacy, "cuGraphDestroy"),
    e("cuGraphDestroyNode", 10000, Legacy, "cuGraphDestroyNode"),
    e(
        "cuGraphEventRecordNodeGetEvent",
        11010,
        Legacy,
        "cuGraphEventRecordNodeGetEvent",
    ),
    e(
        "cuGraphEventRecordNodeSetEvent",
        11010,
        Legacy,
        "cuGraphEventRecordNodeSetEvent",
    ),
    e(
        "cuGraphEventWaitNodeGetEvent",
        11010,
        Legacy,
        "cuGraphEventWaitNodeGetEvent",
    ),
    e(
        "cuGraphEventWaitNodeSetEvent",
        11010,
        Legacy,
        "cuGraphEventWaitNodeSetEvent",
    ),
    e(
        "cuGraphExecBatchMemOpNodeSetParams",
        11070,
        Legacy,
        "cuGraphExecBatchMemOpNodeSetParams",
    ),
    e(
        "cuGraphExecChildGraphNodeSetParams",
        11010,
        Legacy,
        "cuGraphExecChildGraphNodeSetParams",
    ),
    e("cuGraphExecDestroy", 10000, Legacy, "cuGraphExecDestroy"),
    e(
        "cuGraphExecEventRecordNodeSetEvent",
        11010,
        Legacy,
        "cuGraphExecEventRecordNodeSetEvent",
    ),
    e(
        "cuGraphExecEventWaitNodeSetEvent",
        11010,
        Legacy,
        "cuGraphExecEventWaitNodeSetEvent",
    ),
    e(
        "cuGraphExecExternalSemaphoresSignalNodeSetParams",
        11020,
        Legacy,
        "cuGraphExecExternalSemaphoresSignalNodeSetParams",
    ),
    e(
        "cuGraphExecExternalSemaphoresWaitNodeSetParams",
        11020,
        Legacy,
        "cuGraphExecExternalSemaphoresWaitNodeSetParams",
    ),
    e("cuGraphExecGetFlags", 12000, Legacy, "cuGraphExecGetFlags"),
    e(
        "cuGraphExecHostNodeSetParams",
        10020,
        Legacy,
        "cuGraphExecHostNodeSetParams",
    ),
    e(
        "cuGraphExecKernelNodeSetParams",
        10010,
        Legacy,
        "cuGraphExecKernelNodeSetParams",
    ),
    e(
        "cuGraphExecKernelNodeSetParams",
        12000,
        Legacy,
        "cuGraphExecKernelNodeSetParams_v2",
    ),
    e(
        "cuGraphExecMemcpyNodeSetParams",
        10020,
        Legacy,
        "cuGraphExecMemcpyNodeSetParams",
    ),
    e(
        "cuGraphExecMemsetNodeSetParams",
        10020,
        Legacy,
        "cuGraphExecMemsetNodeSetParams",
    ),
    e(
        "cuGraphExecNodeSetParams",
        12020,
        Legacy,
        "cuGraphExecNodeSetParams",
    ),
    e("cuGraphExecUpdate", 10020, Legacy, "cuGraphExecUpdate"),
    e("cuGraphExecUpdate", 12000, Legacy, "cuGraphExecUpdate_v2"),
    e(
        "cuGraphExternalSemaphoresSignalNodeGetParams",
        11020,
        Legacy,
        "cuGraphExternalSemaphoresSignalNodeGetParams",
    ),
    e(
        "cuGraphExternalSemaphoresSignalNodeSetParams",
        11020,
        Legacy,
        "cuGraphExternalSemaphoresSignalNodeSetParams",
    ),
    e(
        "cuGraphExternalSemaphoresWaitNodeGetParams",
        11020,
        Legacy,
        "cuGraphExternalSemaphoresWaitNodeGetParams",
    ),
    e(
        "cuGraphExternalSemaphoresWaitNodeSetParams",
        11020,
        Legacy,
        "cuGraphExternalSemaphoresWaitNodeSetParams",
    ),
    e("cuGraphGetEdges", 10000, Legacy, "cuGraphGetEdges"),
    e("cuGraphGetEdges", 12030, Legacy, "cuGraphGetEdges_v2"),
    e("cuGraphGetNodes", 10000, Legacy, "cuGraphGetNodes"),
    e("cuGraphGetRootNodes", 10000, Legacy, "cuGraphGetRootNodes"),
    e(
        "cuGraphHostNodeGetParams",
        10000,
        Legacy,
        "cuGraphHostNodeGetParams",
    ),
    e(
        "cuGraphHostNodeSetParams",
        10000,
        Legacy,
        "cuGraphHostNodeSetParams",
    ),
    e("cuGraphInstantiate", 10000, Legacy, "cuGraphInstantiate"),
    e("cuGraphInstantiate", 11000, Legacy, "cuGraphInstantiate_v2"),
    e(
        "cuGraphInstantiate",
        12000,
        Legacy,
        "cuGraphInstantiateWithFlags",
    ),
    e(
        "cuGraphInstantiateWithFlags",
        11040,
        Legacy,
        "cuGraphInstantiateWithFlags",
    ),
    e(
        "cuGraphInstantiateWithParams",
        12000,
        Legacy,
        "cuGraphInstantiateWithParams",
    ),
    e(
        "cuGraphInstantiateWithParams",
        12000,
        PerThread,
        "cuGraphInstantiateWithParams_ptsz",
    ),
    e(
        "cuGraphKernelNodeCopyAttributes",
        11000,
        Legacy,
        "cuGraphKernelNodeCopyAttributes",
    ),
    e(
        "cuGraphKernelNodeGetAttribute",
        11000,
        Legacy,
        "cuGraphKernelNodeGetAttribute",
    ),
    e(
        "cuGraphKernelNodeGetParams",
        10000,
        Legacy,
        "cuGraphKernelNodeGetParams",
    ),
    e(
        "cuGraphKernelNodeGetParams",
        12000,
        Legacy,
        "cuGraphKernelNodeGetParams_v2",
    ),
    e(
        "cuGraphKernelNodeSetAttribute",
        11000,
        Legacy,
        "cuGraphKernelNodeSetAttribute",
    ),
    e(
        "cuGraphKernelNodeSetParams",
        10000,
        Legacy,
        "cuGraphKernelNodeSetParams",
    ),
    e(
        "cuGraphKernelNodeSetParams",
        12000,
        Legacy,
        "cuGraphKernelNodeSetParams_v2",
    ),
    e("cuGraphLaunch", 10000, Legacy, "cuGraphLaunch"),
    e("cuGraphLaunch", 10000, PerThread, "cuGraphLaunch_ptsz"),
    e(
        "cuGraphMemAllocNodeGetParams",
        11040,
        Legacy,
        "cuGraphMemAllocNodeGetParams",
    ),
    e(
        "cuGraphMemFreeNodeGetParams",
        11040,
        Legacy,
        "cuGraphMemFreeNodeGetParams",
    ),
    e(
        "cuGraphMemcpyNodeGetParams",
        10000,
        Legacy,
        "cuGraphMemcpyNodeGetParams",
    ),
    e(
        "cuGraphMemcpyNodeSetParams",
        10000,
        Legacy,
        "cuGraphMemcpyNodeSetParams",
    ),
    e(
        "cuGraphMemsetNodeGetParams",
        10000,
        Legacy,
        "cuGraphMemsetNodeGetParams",
    ),
    e(
        "cuGraphMemsetNodeSetParams",
        10000,
        Legacy,
        "cuGraphMemsetNodeSetParams",
    ),
    e(
        "cuGraphNodeFindInClone",
        10000,
        Legacy,
        "cuGraphNodeFindInClone",
    ),
    e(
        "cuGraphNodeGetDependencies",
        10000,
        Legacy,
        "cuGraphNodeGetDependencies",
    ),
    e(
        "cuGraphNodeGetDependencies",
        12030,
        Legacy,
        "cuGraphNodeGetDependencies_v2",
    ),
    e(
        "cuGraphNodeGetDependentNodes",
        10000,
        Legacy,
        "cuGraphNodeGetDependentNodes",
    ),
    e(
        "cuGraphNodeGetDependentNodes",
        12030,
        Legacy,
        "cuGraphNodeGetDependentNodes_v2",
    ),
    e(
        "cuGraphNodeGetEnabled",
        11060,
        Legacy,
        "cuGraphNodeGetEnabled",
    ),
    e("cuGraphNodeGetType", 10000, Legacy, "cuGraphNodeGetType"),
    e(
        "cuGraphNodeSetEnabled",
        11060,
        Legacy,
        "cuGraphNodeSetEnabled",
    ),
    e(
        "cuGraphNodeSetParams",
        12020,
        Legacy,
        "cuGraphNodeSetParams",
    ),
    e(
        "cuGraphReleaseUserObject",
        11030,
        Legacy,
        "cuGraphReleaseUserObject",
    ),
    e(
        "cuGraphRemoveDependencies",
        10000,
        Legacy,
        "cuGraphRemoveDependencies",
    ),
    e(
        "cuGraphRemoveDependencies",
        12030,
        Legacy,
        "cuGraphRemoveDependencies_v2",
    ),
    e(
        "cuGraphRetainUserObject",
        11030,
        Legacy,
        "cuGraphRetainUserObject",
    ),
    e("cuGraphUpload", 11010, Legacy, "cuGraphUpload"),
    e("cuGraphUpload", 11010, PerThread, "cuGraphUpload_ptsz"),
    e(
        "cuGraphicsMapResources",
        3000,
        Legacy,
        "cuGraphicsMapResources",
    ),
    e(
        "cuGraphicsMapResources",
        7000,
        PerThread,
        "cuGraphicsMapResources_ptsz",
    ),
    e(
        "cuGraphicsResourceGetMappedMipmappedArray",
        5000,
        Legacy,
        "cuGraphicsResourceGetMappedMipmappedArray",
    ),
    e(
        "cuGraphicsResourceGetMappedPointer",
        3000,
        Legacy,
        "cuGraphicsResourceGetMappedPointer",
    ),
    e(
        "cuGraphicsResourceGetMappedPointer",
        3020,
        Legacy,
        "cuGraphicsResourceGetMappedPointer_v2",
    ),
    e(
        "cuGraphicsResourceSetMapFlags",
        3000,
        Legacy,
        "cuGraphicsResourceSetMapFlags",
    ),
    e(
        "cuGraphicsResourceSetMapFlags",
        6050,
        Legacy,
        "cuGraphicsResourceSetMapFlags_v2",
    ),
    e(
        "cuGraphicsSubResourceGetMappedArray",
        3000,
        Legacy,
        "cuGraphicsSubResourceGetMappedArray",
    ),
    e(
        "cuGraphicsUnmapResources",
        3000,
        Legacy,
        "cuGraphicsUnmapResources",
    ),
    e(
        "cuGraphicsUnmapResources",
        7000,
        PerThread,
        "cuGraphicsUnmapResources_ptsz",
    ),
    e(
        "cuGraphicsUnregisterResource",
        3000,
        Legacy,
        "cuGraphicsUnregisterResource",
    ),
    e("cuGreenCtxCreate", 12040, Legacy, "cuGreenCtxCreate"),
    e("cuGreenCtxDestroy", 12040, Legacy, "cuGreenCtxDestroy"),
    e(
        "cuGreenCtxGetDevResource",
        12040,
        Legacy,
        "cuGreenCtxGetDevResource",
    ),
    e(
        "cuGreenCtxRecordEvent",
        12040,
        Legacy,
        "cuGreenCtxRecordEvent",
    ),
    e(
        "cuGreenCtxStreamCreate",
        12050,
        Legacy,
        "cuGreenCtxStreamCreate",
    ),
    e("cuGreenCtxWaitEvent", 12040, Legacy, "cuGreenCtxWaitEvent"),
    e(
        "cuImportExternalMemory",
        10000,
        Legacy,
        "cuImportExternalMemory",
    ),
    e(
        "cuImportExternalSemaphore",
        10000,
        Legacy,
        "cuImportExternalSemaphore",
    ),
    e("cuInit", 2000, Legacy, "cuInit"),
    e("cuIpcCloseMemHandle", 4010, Legacy, "cuIpcCloseMemHandle"),
    e("cuIpcGetEventHandle", 4010, Legacy, "cuIpcGetEventHandle"),
    e("cuIpcGetMemHandle", 4010, Legacy, "cuIpcGetMemHandle"),
    e("cuIpcOpenEventHandle", 4010, Legacy, "cuIpcOpenEventHandle"),
    e("cuIpcOpenMemHandle", 4010, Legacy, "cuIpcOpenMemHandle"),
    e("cuIpcOpenMemHandle", 11000, Legacy, "cuIpcOpenMemHandle_v2"),
    e(
        "cuKernelGetAttribute",
        12000,
        Legacy,
        "cuKernelGetAttribute",
    ),
    e("cuKernelGetFunction", 12000, Legacy, "cuKernelGetFunction"),
    e("cuKernelGetLibrary", 12050, Legacy, "cuKernelGetLibrary"),
    e("cuKernelGetName", 12030, Legacy, "cuKernelGetName"),
    e(
        "cuKernelGetParamInfo",
        12040,
        Legacy,
        "cuKernelGetParamInfo",
    ),
    e(
        "cuKernelSetAttribute",
        12000,
        Legacy,
        "cuKernelSetAttribute",
    ),
    e(
        "cuKernelSetCacheConfig",
        12000,
        Legacy,
        "cuKernelSetCacheConfig",
    ),
    e("cuLaunch", 2000, Legacy, "cuLaunch"),
    e(
        "cuLaunchCooperativeKernel",
        9000,
        Legacy,
        "cuLaunchCooperativeKernel",
    ),
    e(
        "cuLaunchCooperativeKernel",
        9000,
        PerThread,
        "cuLaunchCooperativeKernel_ptsz",
    ),
    e(
        "cuLaunchCooperativeKernelMultiDevice",
        9000,
        Legacy,
        "cuLaunchCooperativeKernelMultiDevice",
    ),
    e("cuLaunchGrid", 2000, Legacy, "cuLaunchGrid"),
    e("cuLaunchGridAsync", 2000, Legacy, "cuLaunchGridAsync"),
    e("cuLaunchHostFunc", 10000, Legacy, "cuLaunchHostFunc"),
    e(
        "cuLaunchHostFunc",
        10000,
        PerThread,
        "cuLaunchHostFunc_ptsz",
    ),
    e("cuLaunchKernel", 4000, Legacy, "cuLaunchKernel"),
    e("cuLaunchKernel", 7000, PerThread, "cuLaunchKernel_ptsz"),
    e("cuLaunchKernelEx", 11060, Legacy, "cuLaunchKernelEx"),
    e(
        "cuLaunchKernelEx",
        11060,
        PerThread,
        "cuLaunchKernelEx_ptsz",
    ),
    e(
        "cuLibraryEnumerateKernels",
        12040,
        Legacy,
        "cuLibraryEnumerateKernels",
    ),
    e("cuLibraryGetGlobal", 12000, Legacy, "cuLibraryGetGlobal"),
    e("cuLibraryGetKernel", 12000, Legacy, "cuLibraryGetKernel"),
    e(
        "cuLibraryGetKernelCount",
        12040,
        Legacy,
        "cuLibraryGetKernelCount",
    ),
    e("cuLibraryGetManaged", 12000, Legacy, "cuLibraryGetManaged"),
    e("cuLibraryGetModule", 12000, Legacy, "cuLibraryGetModule"),
    e(
        "cuLibraryGetUnifiedFunction",
        12000,
        Legacy,
        "cuLibraryGetUnifiedFunction",
    ),
    e("cuLibraryLoadData", 12000, Legacy, "cuLibraryLoadData"),
    e(
        "cuLibraryLoadFromFile",
        12000,
        Legacy,
        "cuLibraryLoadFromFile",
    ),
    e("cuLibraryUnload", 12000, Legacy, "cuLibraryUnload"),
    e("cuLinkAddData", 5050, Legacy, "cuLinkAddData"),
    e("cuLinkAddData", 6050, Legacy, "cuLinkAddData_v2"),
    e("cuLinkAddFile", 5050, Legacy, "cuLinkAddFile"),
    e("cuLinkAddFile", 6050, Legacy, "cuLinkAddFile_v2"),
    e("cuLinkComplete", 5050, Legacy, "cuLinkComplete"),
    e("cuLinkCreate", 5050, Legacy, "cuLinkCreate"),
    e("cuLinkCreate", 6050, Legacy, "cuLinkCreate_v2"),
    e("cuLinkDestroy", 5050, Legacy, "cuLinkDestroy"),
    e("cuLogsCurrent", 12090, Legacy, "cuLogsCurrent"),
    e("cuLogsDumpToFile", 12090, Legacy, "cuLogsDumpToFile"),
    e("cuLogsDumpToMemory", 12090, Legacy, "cuLogsDumpToMemory"),
    e(
        "cuLogsRegisterCallback",
        12090,
        Legacy,
        "cuLogsRegisterCallback",
    ),
    e(
        "cuLogsUnregisterCallback",
        12090,
        Legacy,
        "cuLogsUnregisterCallback",
    ),
    e("cuMemAddressFree", 10020, Legacy, "cuMemAddressFree"),
    e("cuMemAddressReserve", 10020, Legacy, "cuMemAddressReserve"),
    e("cuMemAdvise", 8000, Legacy, "cuMemAdvise"),
    e("cuMemAdvise", 12020, Legacy, "cuMemAdvise_v2"),
    e("cuMemAlloc", 2000, Legacy, "cuMemAlloc"),
    e("cuMemAlloc", 3020, Legacy, "cuMemAlloc_v2"),
    e("cuMemAllocAsync", 11020, Legacy, "cuMemAllocAsync"),
    e("cuMemAllocAsync", 11020, PerThread, "cuMemAllocAsync_ptsz"),
    e(
        "cuMemAllocFromPoolAsync",
        11020,
        Legacy,
        "cuMemAllocFromPoolAsync",
    ),
    e(
        "cuMemAllocFromPoolAsync",
        11020,
        PerThread,
        "cuMemAllocFromPoolAsync_ptsz",
    ),
    e("cuMemAllocHost", 2000, Legacy, "cuMemAllocHost"),
    e("cuMemAllocHost", 3020, Legacy, "cuMemAllocHost_v2"),
    e("cuMemAllocManaged", 6000, Legacy, "cuMemAllocManaged"),
    e("cuMemAllocPitch", 2000, Legacy, "cuMemAllocPitch"),
    e("cuMemAllocPitch", 3020, Legacy, "cuMemAllocPitch_v2"),
    e(
        "cuMemBatchDecompressAsync",
        12060,
        Legacy,
        "cuMemBatchDecompressAsync",
    ),
    e(
        "cuMemBatchDecompressAsync",
        12060,
        PerThread,
        "cuMemBatchDecompressAsync_ptsz",
    ),
    e("cuMemCreate", 10020, Legacy, "cuMemCreate"),
    e(
        "cuMemExportToShareableHandle",
        10020,
        Legacy,
        "cuMemExportToShareableHandle",
    ),
    e("cuMemFree", 2000, Legacy, "cuMemFree"),
    e("cuMemFree", 3020, Legacy, "cuMemFree_v2"),
    e("cuMemFreeAsync", 11020, Legacy, "cuMemFreeAsync"),
    e("cuMemFreeAsync", 11020, PerThread, "cuMemFreeAsync_ptsz"),
    e("cuMemFreeHost", 2000, Legacy, "cuMemFreeHost"),
    e("cuMemGetAccess", 10020, Legacy, "cuMemGetAccess"),
    e("cuMemGetAddressRange", 2000, Legacy, "cuMemGetAddressRange"),
    e(
        "cuMemGetAddressRange",
        3020,
        Legacy,
        "cuMemGetAddressRange_v2",
    ),
    e(
        "cuMemGetAllocationGranularity",
        10020,
        Legacy,
        "cuMemGetAllocationGranularity",
    ),
    e(
        "cuMemGetAllocationPropertiesFromHandle",
        10020,
        Legacy,
        "cuMemGetAllocationPropertiesFromHandle",
    ),
    e(
        "cuMemGetHandleForAddressRange",
        11070,
        Legacy,
        "cuMemGetHandleForAddressRange",
    ),
    e("cuMemGetInfo", 2000, Legacy, "cuMemGetInfo"),
    e("cuMemGetInfo", 3020, Legacy, "cuMemGetInfo_v2"),
    e("cuMemHostAlloc", 2020, Legacy, "cuMemHostAlloc"),
    e(
        "cuMemHostGetDevicePointer",
        2020,
        Legacy,
        "cuMemHostGetDevicePointer",
    ),
    e(
        "cuMemHostGetDevicePointer",
        3020,
        Legacy,
        "cuMemHostGetDevicePointer_v2",
    ),
    e("cuMemHostGetFlags", 2030, Legacy, "cuMemHostGetFlags"),
    e("cuMemHostRegister", 4000, Legacy, "cuMemHostRegister"),
    e("cuMemHostRegister", 6050, Legacy, "cuMemHostRegister_v2"),
    e("cuMemHostUnregister", 4000, Legacy, "cuMemHostUnregister"),
    e(
        "cuMemImportFromShareableHandle",
        10020,
        Legacy,
        "cuMemImportFromShareableHandle",
    ),
    e("cuMemMap", 10020, Legacy, "cuMemMap"),
    e("cuMemMapArrayAsync", 11010, Legacy, "cuMemMapArrayAsync"),
    e(
        "cuMemMapArrayAsync",
        11010,
        PerThread,
        "cuMemMapArrayAsync_ptsz",
    ),
    e("cuMemPoolCreate", 11020, Legacy, "cuMemPoolCreate"),
    e("cuMemPoolDestroy", 11020, Legacy, "cuMemPoolDestroy"),
    e(
        "cuMemPoolExportPointer",
        11020,
        Legacy,
        "cuMemPoolExportPointer",
    ),
    e(
        "cuMemPoolExportToShareableHandle",
        11020,
        Legacy,
        "cuMemPoolExportToShareableHandle",
    ),
    e("cuMemPoolGetAccess", 11020, Legacy, "cuMemPoolGetAccess"),
    e(
        "cuMemPoolGetAttribute",
        11020,
        Legacy,
        "cuMemPoolGetAttribute",
    ),
    e(
        "cuMemPoolImportFromShareableHandle",
        11020,
        Legacy,
        "cuMemPoolImportFromShareableHandle",
    ),
    e(
        "cuMemPoolImportPointer",
        11020,
        Legacy,
        "cuMemPoolImportPointer",
    ),
    e("cuMemPoolSetAccess", 11020, Legacy, "cuMemPoolSetAccess"),
    e(
        "cuMemPoolSetAttribute",
        11020,
        Legacy,
        "cuMemPoolSetAttribute",
    ),
    e("cuMemPoolTrimTo", 11020, Legacy, "cuMemPoolTrimTo"),
    e("cuMemPrefetchAsync", 8000, Legacy, "cuMemPrefetchAsync"),
    e("cuMemPrefetchAsync", 12020, Legacy, "cuMemPrefetchAsync_v2"),
    e(
        "cuMemPrefetchAsync",
        8000,
        PerThread,
        "cuMemPrefetchAsync_ptsz",
    ),
    e(
        "cuMemPrefetchAsync",
        12020,
        PerThread,
        "cuMemPrefetchAsync_v2_ptsz",
    ),
    e(
        "cuMemRangeGetAttribute",
        8000,
        Legacy,
        "cuMemRangeGetAttribute",
    ),
    e(
        "cuMemRangeGetAttributes",
        8000,
        Legacy,
        "cuMemRangeGetAttributes",
    ),
    e("cuMemRelease", 10020, Legacy, "cuMemRelease"),
    e(
        "cuMemRetainAllocationHandle",
        11000,
        Legacy,
        "cuMemRetainAllocationHandle",
    ),
    e("cuMemSetAccess", 10020, Legacy, "cuMemSetAccess"),
    e("cuMemUnmap", 10020, Legacy, "cuMemUnmap"),
    e("cuMemcpy", 4000, Legacy, "cuMemcpy"),
    e("cuMemcpy", 7000, PerThread, "cuMemcpy_ptds"),
    e("cuMemcpy2D", 2000, Legacy, "cuMemcpy2D"),
    e("cuMemcpy2D", 3020, Legacy, "cuMemcpy2D_v2"),
    e("cuMemcpy2D", 7000, PerThread, "cuMemcpy2D_v2_ptds"),
    e("cuMemcpy2DAsync", 2000, Legacy, "cuMemcpy2DAsync"),
    e("cuMemcpy2DAsync", 3020, Legacy, "cuMemcpy2DAsync_v2"),
    e(
        "cuMemcpy2DAsync",
        7000,
        PerThread,
        "cuMemcpy2DAsync_v2_ptsz",
    ),
    e("cuMemcpy2DUnaligned", 2000, Legacy, "cuMemcpy2DUnaligned"),
    e(
        "cuMemcpy2DUnaligned",
        3020,
        Legacy,
        "cuMemcpy2DUnaligned_v2",
    ),
    e(
        "cuMemcpy2DUnaligned",
        7000,
        PerThread,
        "cuMemcpy2DUnaligned_v2_ptds",
    ),
    e("cuMemcpy3D", 2000, Legacy, "cuMemcpy3D"),
    e("cuMemcpy3D", 3020, Legacy, "cuMemcpy3D_v2"),
    e("cuMemcpy3D", 7000, PerThread, "cuMemcpy3D_v2_ptds"),
    e("cuMemcpy3DAsync", 2000, Legacy, "cuMemcpy3DAsync"),
    e("cuMemcpy3DAsync", 3020, Legacy, "cuMemcpy3DAsync_v2"),
    e(
        "cuMemcpy3DAsync",
        7000,
        PerThread,
        "cuMemcpy3DAsync_v2_ptsz",
    ),
    e(
        "cuMemcpy3DBatchAsync",
        12080,
        Legacy,
        "cuMemcpy3DBatchAsync",
    ),
    e(
        "cuMemcpy3DBatchAsync",
        12080,
        PerThread,
        "cuMemcpy3DBatchAsync_ptsz",
    ),
    e("cuMemcpy3DPeer", 4000, Legacy, "cuMemcpy3DPeer"),
    e("cuMemcpy3DPeer", 7000, PerThread, "cuMemcpy3DPeer_ptds"),
    e("cuMemcpy3DPeerAsync", 4000, Legacy, "cuMemcpy3DPeerAsync"),
    e(
        "cuMemcpy3DPeerAsync",
        7000,
        PerThread,
        "cuMemcpy3DPeerAsync_ptsz",
    ),
    e("cuMemcpyAsync", 4000, Legacy, "cuMemcpyAsync"),
    e("cuMemcpyAsync", 7000, PerThread, "cuMemcpyAsync_ptsz"),
    e("cuMemcpyAtoA", 2000, Legacy, "cuMemcpyAtoA"),
    e("cuMemcpyAtoA", 3020, Legacy, "cuMemcpyAtoA_v2"),
    e("cuMemcpyAtoA", 7000, PerThread, "cuMemcpyAtoA_v2_ptds"),
    e("cuMemcpyAtoD", 2000, Legacy, "cuMemcpyAtoD"),
    e("cuMemcpyAtoD", 3020, Legacy, "cuMemcpyAtoD_v2"),
    e("cuMemcpyAtoD", 7000, PerThread, "cuMemcpyAtoD_v2_ptds"),
    e("cuMemcpyAtoH", 2000, Legacy, "cuMemcpyAtoH"),
    e("cuMemcpyAtoH", 3020, Legacy, "cuMemcpyAtoH_v2"),
    e("cuMemcpyAtoH", 7000, PerThread, "cuMemcpyAtoH_v2_ptds"),
    e("cuMemcpyAtoHAsync", 2000, Legacy, "cuMemcpyAtoHAsync"),
    e("cuMemcpyAtoHAsync", 3020, Legacy, "cuMemcpyAtoHAsync_v2"),
    e(
        "cuMemcpyAtoHAsync",
        7000,
        PerThread,
        "cuMemcpyAtoHAsync_v2_ptsz",
    ),
    e("cuMemcpyBatchAsync", 12080, Legacy, "cuMemcpyBatchAsync"),
    e(
        "cuMemcpyBatchAsync",
        12080,
        PerThread,
        "cuMemcpyBatchAsync_ptsz",
    ),
    e("cuMemcpyDtoA", 2000, Legacy, "cuMemcpyDtoA"),
    e("cuMemcpyDtoA", 3020, Legacy, "cuMemcpyDtoA_v2"),
    e("cuMemcpyDtoA", 7000, PerThread, "cuMemcpyDtoA_v2_ptds"),
    e("cuMemcpyDtoD", 2000, Legacy, "cuMemcpyDtoD"),
    e("cuMemcpyDtoD", 3020, Legacy, "cuMemcpyDtoD_v2"),
    e("cuMemcpyDtoD", 7000, PerThread, "cuMemcpyDtoD_v2_ptds"),
    e("cuMemcpyDtoDAsync", 3000, Legacy, "cuMemcpyDtoDAsync"),
    e("cuMemcpyDtoDAsync", 3020, Legacy, "cuMemcpyDtoDAsync_v2"),
    e(
        "cuMemcpyDtoDAsync",
        7000,
        PerThread,
        "cuMemcpyDtoDAsync_v2_ptsz",
    ),
    e("cuMemcpyDtoH", 2000, Legacy, "cuMemcpyDtoH"),
    e("cuMemcpyDtoH", 3020, Legacy, "cuMemcpyDtoH_v2"),
    e("cuMemcpyDtoH", 7000, PerThread, "cuMemcpyDtoH_v2_ptds"),
    e("cuMemcpyDtoHAsync", 2000, Legacy, "cuMemcpyDtoHAsync"),
    e("cuMemcpyDtoHAsync", 3020, Legacy, "cuMemcpyDtoHAsync_v2"),
    e(
        "cuMemcpyDtoHAsync",
        7000,
        PerThread,
        "cuMemcpyDtoHAsync_v2_ptsz",
    ),
    e("cuMemcpyHtoA", 2000, Legacy, "cuMemcpyHtoA"),
    e("cuMemcpyHtoA", 3020, Legacy, "cuMemcpyHtoA_v2"),
    e("cuMemcpyHtoA", 7000, PerThread, "cuMemcpyHtoA_v2_ptds"),
    e("cuMemcpyHtoAAsync", 2000, Legacy, "cuMemcpyHtoAAsync"),
    e("cuMemcpyHtoAAsync", 3020, Legacy, "cuMemcpyHtoAAsync_v2"),
    e(
        "cuMemcpyHtoAAsync",
        7000,
        PerThread,
        "cuMemcpyHtoAAsync_v2_ptsz",
    ),
    e("cuMemcpyHtoD", 2000, Legacy, "cuMemcpyHtoD"),
    e("cuMemcpyHtoD", 3020, Legacy, "cuMemcpyHtoD_v2"),
    e("cuMemcpyHtoD", 7000, PerThread, "cuMemcpyHtoD_v2_ptds"),
    e("cuMemcpyHtoDAsync", 2000, Legacy, "cuMemcpyHtoDAsync"),
    e("cuMemcpyHtoDAsync", 3020, Legacy, "cuMemcpyHtoDAsync_v2"),
    e(
        "cuMemcpyHtoDAsync",
        7000,
        PerThread,
        "cuMemcpyHtoDAsync_v2_ptsz",
    ),
    e("cuMemcpyPeer", 4000, Legacy, "cuMemcpyPeer"),
    e("cuMemcpyPeer", 7000, PerThread, "cuMemcpyPeer_ptds"),
    e("cuMemcpyPeerAsync", 4000, Legacy, "cuMemcpyPeerAsync"),
    e(
        "cuMemcpyPeerAsync",
        7000,
        PerThread,
        "cuMemcpyPeerAsync_ptsz",
    ),
    e("cuMemsetD16", 2000, Legacy, "cuMemsetD16"),
    e("cuMemsetD16", 3020, Legacy, "cuMemsetD16_v2"),
    e("cuMemsetD16", 7000, PerThread, "cuMemsetD16_v2_ptds"),
    e("cuMemsetD16Async", 3020, Legacy, "cuMemsetD16Async"),
    e("cuMemsetD16Async", 7000, PerThread, "cuMemsetD16Async_ptsz"),
    e("cuMemsetD2D16", 2000, Legacy, "cuMemsetD2D16"),
    e("cuMemsetD2D16", 3020, Legacy, "cuMemsetD2D16_v2"),
    e("cuMemsetD2D16", 7000, PerThread, "cuMemsetD2D16_v2_ptds"),
    e("cuMemsetD2D16Async", 3020, Legacy, "cuMemsetD2D16Async"),
    e(
        "cuMemsetD2D16Async",
        7000,
        PerThread,
        "cuMemsetD2D16Async_ptsz",
    ),
    e("cuMemsetD2D32", 2000, Legacy, "cuMemsetD2D32"),
    e("cuMemsetD2D32", 3020, Legacy, "cuMemsetD2D32_v2"),
    e("cuMemsetD2D32", 7000, PerThread, "cuMemsetD2D32_v2_ptds"),
    e("cuMemsetD2D32Async", 3020, Legacy, "cuMemsetD2D32Async"),
    e(
        "cuMemsetD2D32Async",
        7000,
        PerThread,
        "cuMemsetD2D32Async_ptsz",
    ),
    e("cuMemsetD2D8", 2000, Legacy, "cuMemsetD2D8"),
    e("cuMemsetD2D8", 3020, Legacy, "cuMemsetD2D8_v2"),
    e("cuMemsetD2D8", 7000, PerThread, "cuMemsetD2D8_v2_ptds"),
    e("cuMemsetD2D8Async", 3020, Legacy, "cuMemsetD2D8Async"),
    e(
        "cuMemsetD2D8Async",
        7000,
        PerThread,
        "cuMemsetD2D8Async_ptsz",
    ),
    e("cuMemsetD32", 2000, Legacy, "cuMemsetD32"),
    e("cuMemsetD32", 3020, Legacy, "cuMemsetD32_v2"),
    e("cuMemsetD32", 7000, PerThread, "cuMemsetD32_v2_ptds"),
    e("cuMemsetD32Async", 3020, Legacy, "cuMemsetD32Async"),
    e("cuMemsetD32Async", 7000, PerThread, "cuMemsetD32Async_ptsz"),
    e("cuMemsetD8", 2000, Legacy, "cuMemsetD8"),
    e("cuMemsetD8", 3020, Legacy, "cuMemsetD8_v2"),
    e("cuMemsetD8", 7000, PerThread, "cuMemsetD8_v2_ptds"),
    e("cuMemsetD8Async", 3020, Legacy, "cuMemsetD8Async"),
    e("cuMemsetD8Async", 7000, PerThread, "cuMemsetD8Async_ptsz"),
    e(
        "cuMipmappedArrayCreate",
        5000,
        Legacy,
        "cuMipmappedArrayCreate",
    ),
    e(
        "cuMipmappedArrayDestroy",
        5000,
        Legacy,
        "cuMipmappedArrayDestroy",
    ),
    e(
        "cuMipmappedArrayGetLevel",
        5000,
        Legacy,
        "cuMipmappedArrayGetLevel",
    ),
    e(
        "cuMipmappedArrayGetMemoryRequirements",
        11060,
        Legacy,
        "cuMipmappedArrayGetMemoryRequirements",
    ),
    e(
        "cuMipmappedArrayGetSparseProperties",
        11010,
        Legacy,
        "cuMipmappedArrayGetSparseProperties",
    ),
    e(
        "cuModuleEnumerateFunctions",
        12040,
        Legacy,
        "cuModuleEnumerateFunctions",
    ),
    e("cuModuleGetFunction", 2000, Legacy, "cuModuleGetFunction"),
    e(
        "cuModuleGetFunctionCount",
        12040,
        Legacy,
        "cuModuleGetFunctionCount",
    ),
    e("cuModuleGetGlobal", 2000, Legacy, "cuModuleGetGlobal"),
    e("cuModuleGetGlobal", 3020, Legacy, "cuModuleGetGlobal_v2"),
    e(
        "cuModuleGetLoadingMode",
        11070,
        Legacy,
        "cuModuleGetLoadingMode",
    ),
    e("cuModuleGetSurfRef", 3000, Legacy, "cuModuleGetSurfRef"),
    e("cuModuleGetTexRef", 2000, Legacy, "cuModuleGetTexRef"),
    e("cuModuleLoad", 2000, Legacy, "cuModuleLoad"),
    e("cuModuleLoadData", 2000, Legacy, "cuModuleLoadData"),
    e("cuModuleLoadDataEx", 2010, Legacy, "cuModuleLoadDataEx"),
    e(
        "cuModuleLoadFatBinary",
        2000,
        Legacy,
        "cuModuleLoadFatBinary",
    ),
    e("cuModuleUnload", 2000, Legacy, "cuModuleUnload"),
    e(
        "cuMulticastAddDevice",
        12010,
        Legacy,
        "cuMulticastAddDevice",
    ),
    e("cuMulticastBindAddr", 12010, Legacy, "cuMulticastBindAddr"),
    e("cuMulticastBindMem", 12010, Legacy, "cuMulticastBindMem"),
    e("cuMulticastCreate", 12010, Legacy, "cuMulticastCreate"),
    e(
        "cuMulticastGetGranularity",
        12010,
        Legacy,
        "cuMulticastGetGranularity",
    ),
    e("cuMulticastUnbind", 12010, Legacy, "cuMulticastUnbind"),
    e(
        "cuOccupancyAvailableDynamicSMemPerBlock",
        10020,
        Legacy,
        "cuOccupancyAvailableDynamicSMemPerBlock",
    ),
    e(
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        6050,
        Legacy,
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    ),
    e(
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
        7000,
        Legacy,
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    ),
    e(
        "cuOccupancyMaxActiveClusters",
        11070,
        Legacy,
        "cuOccupancyMaxActiveClusters",
    ),
    e(
        "cuOccupancyMaxPotentialBlockSize",
        6050,
        Legacy,
        "cuOccupancyMaxPotentialBlockSize",
    ),
    e(
        "cuOccupancyMaxPotentialBlockSizeWithFlags",
        7000,
        Legacy,
        "cuOccupancyMaxPotentialBlockSizeWithFlags",
    ),
    e(
        "cuOccupancyMaxPotentialClusterSize",
        11070,
        Legacy,
        "cuOccupancyMaxPotentialClusterSize",
    ),
    e("cuParamSetSize", 2000, Legacy, "cuParamSetSize"),
    e("cuParamSetTexRef", 2000, Legacy, "cuParamSetTexRef"),
    e("cuParamSetf", 2000, Legacy, "cuParamSetf"),
    e("cuParamSeti", 2000, Legacy, "cuParamSeti"),
    e("cuParamSetv", 2000, Legacy, "cuParamSetv"),
    e(
        "cuPointerGetAttribute",
        4000,
        Legacy,
        "cuPointerGetAttribute",
    ),
    e(
        "cuPointerGetAttributes",
        7000,
        Legacy,
        "cuPointerGetAttributes",
    ),
    e(
        "cuPointerSetAttribute",
        6000,
        Legacy,
        "cuPointerSetAttribute",
    ),
    e(
        "cuSignalExternalSemaphoresAsync",
        10000,
        Legacy,
        "cuSignalExternalSemaphoresAsync",
    ),
    e(
        "cuSignalExternalSemaphoresAsync",
        10000,
        PerThread,
        "cuSignalExternalSemaphoresAsync_ptsz",
    ),
    e("cuStreamAddCallback", 5000, Legacy, "cuStreamAddCallback"),
    e(
        "cuStreamAddCallback",
        7000,
        PerThread,
        "cuStreamAddCallback_ptsz",
    ),
    e(
        "cuStreamAttachMemAsync",
        6000,
        Legacy,
        "cuStreamAttachMemAsync",
    ),
    e(
        "cuStreamAttachMemAsync",
        7000,
        PerThread,
        "cuStreamAttachMemAsync_ptsz",
    ),
    e("cuStreamBatchMemOp", 8000, Legacy, "cuStreamBatchMemOp"),
    e("cuStreamBatchMemOp", 11070, Legacy, "cuStreamBatchMemOp_v2"),
    e(
        "cuStreamBatchMemOp",
        8000,
        PerThread,
        "cuStreamBatchMemOp_ptsz",
    ),
    e(
        "cuStreamBatchMemOp",
        11070,
        PerThread,
        "cuStreamBatchMemOp_v2_ptsz",
    ),
    e(
        "cuStreamBeginCapture",
        10000,
        Legacy,
        "cuStreamBeginCapture",
    ),
    e(
        "cuStreamBeginCapture",
        10010,
        Legacy,
        "cuStreamBeginCapture_v2",
    ),
    e(
        "cuStreamBeginCapture",
        10000,
        PerThread,
        "cuStreamBeginCapture_ptsz",
    ),
    e(
        "cuStreamBeginCapture",
        10010,
        PerThread,
        "cuStreamBeginCapture_v2_ptsz",
    ),
    e(
        "cuStreamBeginCaptureToGraph",
        12030,
        Legacy,
        "cuStreamBeginCaptureToGraph",
    ),
    e(
        "cuStreamBeginCaptureToGraph",
        12030,
        PerThread,
        "cuStreamBeginCaptureToGraph_ptsz",
    ),
    e(
        "cuStreamCopyAttributes",
        11000,
        Legacy,
        "cuStreamCopyAttributes",
    ),
    e(
        "cuStreamCopyAttributes",
        11000,
        PerThread,
        "cuStreamCopyAttributes_ptsz",
    ),
    e("cuStreamCreate", 2000, Legacy, "cuStreamCreate"),
    e(
        "cuStreamCreateWithPriority",
        5050,
        Legacy,
        "cuStreamCreateWithPriority",
    ),
    e("cuStreamDestroy", 2000, Legacy, "cuStreamDestroy"),
    e("cuStreamDestroy", 4000, Legacy, "cuStreamDestroy_v2"),
    e("cuStreamEndCapture", 10000, Legacy, "cuStreamEndCapture"),
    e(
        "cuStreamEndCapture",
        10000,
        PerThread,
        "cuStreamEndCapture_ptsz",
    ),
    e(
        "cuStreamGetAttribute",
        11000,
        Legacy,
        "cuStreamGetAttribute",
    ),
    e(
        "cuStreamGetAttribute",
        11000,
        PerThread,
        "cuStreamGetAttribute_ptsz",
    ),
    e(
        "cuStreamGetCaptureInfo",
        10010,
        Legacy,
        "cuStreamGetCaptureInfo",
    ),
    e(
        "cuStreamGetCaptureInfo",
        11030,
        Legacy,
        "cuStreamGetCaptureInfo_v2",
    ),
    e(
        "cuStreamGetCaptureInfo",
        12030,
        Legacy,
        "cuStreamGetCaptureInfo_v3",
    ),
    e(
        "cuStreamGetCaptureInfo",
        10010,
        PerThread,
        "cuStreamGetCaptureInfo_ptsz",
    ),
    e(
        "cuStreamGetCaptureInfo",
        11030,
        PerThread,
        "cuStreamGetCaptureInfo_v2_ptsz",
    ),
    e(
        "cuStreamGetCaptureInfo",
        12030,
        PerThread,
        "cuStreamGetCaptureInfo_v3_ptsz",
    ),
    e("cuStreamGetCtx", 9020, Legacy, "cuStreamGetCtx"),
    e("cuStreamGetCtx", 12050, Legacy, "cuStreamGetCtx_v2"),
    e("cuStreamGetCtx", 9020, PerThread, "cuStreamGetCtx_ptsz"),
    e("cuStreamGetCtx", 12050, PerThread, "cuStreamGetCtx_v2_ptsz"),
    e("cuStreamGetDevice", 12080, Legacy, "cuStreamGetDevice"),
    e(
        "cuStreamGetDevice",
        12080,
        PerThread,
        "cuStreamGetDevice_ptsz",
    ),
    e("cuStreamGetFlags", 5050, Legacy, "cuStreamGetFlags"),
    e("cuStreamGetFlags", 7000, PerThread, "cuStreamGetFlags_ptsz"),
    e("cuStreamGetGreenCtx", 12040, Legacy, "cuStreamGetGreenCtx"),
    e("cuStreamGetId", 12000, Legacy, "cuStreamGetId"),
    e("cuStreamGetId", 12000, PerThread, "cuStreamGetId_ptsz"),
    e("cuStreamGetPriority", 5050, Legacy, "cuStreamGetPriority"),
    e(
        "cuStreamGetPriority",
        7000,
        PerThread,
        "cuStreamGetPriority_ptsz",
    ),
    e("cuStreamIsCapturing", 10000, Legacy, "cuStreamIsCapturing"),
    e(
        "cuStreamIsCapturing",
        10000,
        PerThread,
        "cuStreamIsCapturing_ptsz",
    ),
    e("cuStreamQuery", 2000, Legacy, "cuStreamQuery"),
    e("cuStreamQuery", 7000, PerThread, "cuStreamQuery_ptsz"),
    e(
        "cuStreamSetAttribute",
        11000,
        Legacy,
        "cuStreamSetAttribute",
    ),
    e(
        "cuStreamSetAttribute",
        11000,
        PerThread,
        "cuStreamSetAttribute_ptsz",
    ),
    e("cuStreamSynchronize", 2000, Legacy, "cuStreamSynchronize"),
    e(
        "cuStreamSynchronize",
        7000,
        PerThread,
        "cuStreamSynchronize_ptsz",
    ),
    e(
        "cuStreamUpdateCaptureDependencies",
        11030,
        Legacy,
        "cuStreamUpdateCaptureDependencies",
    ),
    e(
        "cuStreamUpdateCaptureDependencies",
        12030,
        Legacy,
        "cuStreamUpdateCaptureDependencies_v2",
    ),
    e(
        "cuStreamUpdateCaptureDependencies",
        11030,
        PerThread,
        "cuStreamUpdateCaptureDependencies_ptsz",
    ),
    e(
        "cuStreamUpdateCaptureDependencies",
        12030,
        PerThread,
        "cuStreamUpdateCaptureDependencies_v2_ptsz",
    ),
    e("cuStreamWaitEvent", 3020, Legacy, "cuStreamWaitEvent"),
    e(
        "cuStreamWaitEvent",
        7000,
        PerThread,
        "cuStreamWaitEvent_ptsz",
    ),
    e("cuStreamWaitValue32", 8000, Legacy, "cuStreamWaitValue32"),
    e(
        "cuStreamWaitValue32",
        11070,
        Legacy,
        "cuStreamWaitValue32_v2",
    ),
    e(
        "cuStreamWaitValue32",
        8000,
        PerThread,
        "cuStreamWaitValue32_ptsz",
    ),
    e(
        "cuStreamWaitValue32",
        11070,
        PerThread,
        "cuStreamWaitValue32_v2_ptsz",
    ),
    e("cuStreamWaitValue64", 9000, Legacy, "cuStreamWaitValue64"),
    e(
        "cuStreamWaitValue64",
        11070,
        Legacy,
        "cuStreamWaitValue64_v2",
    ),
    e(
        "cuStreamWaitValue64",
        9000,
        PerThread,
        "cuStreamWaitValue64_ptsz",
    ),
    e(
        "cuStreamWaitValue64",
        11070,
        PerThread,
        "cuStreamWaitValue64_v2_ptsz",
    ),
    e("cuStreamWriteValue32", 8000, Legacy, "cuStreamWriteValue32"),
    e(
        "cuStreamWriteValue32",
        11070,
        Legacy,
        "cuStreamWriteValue32_v2",
    ),
    e(
        "cuStreamWriteValue32",
        8000,
        PerThread,
        "cuStreamWriteValue32_ptsz",
    ),
    e(
        "cuStreamWriteValue32",
        11070,
        PerThread,
        "cuStreamWriteValue32_v2_ptsz",
    ),
    e("cuStreamWriteValue64", 9000, Legacy, "cuStreamWriteValue64"),
    e(
        "cuStreamWriteValue64",
        11070,
        Legacy,
        "cuStreamWriteValue64_v2",
    ),
    e(
        "cuStreamWriteValue64",
        9000,
        PerThread,
        "cuStreamWriteValue64_ptsz",
    ),
    e(
        "cuStreamWriteValue64",
        11070,
        PerThread,
        "cuStreamWriteValue64_v2_ptsz",
    ),
    e("cuSurfObjectCreate", 5000, Legacy, "cuSurfObjectCreate"),
    e("cuSurfObjectDestroy", 5000, Legacy, "cuSurfObjectDestroy"),
    e(
        "cuSurfObjectGetResourceDesc",
        5000,
        Legacy,
        "cuSurfObjectGetResourceDesc",
    ),
    e("cuSurfRefGetArray", 3000, Legacy, "cuSurfRefGetArray"),
    e("cuSurfRefSetArray", 3000, Legacy, "cuSurfRefSetArray"),
    e(
        "cuTensorMapEncodeIm2col",
        12000,
        Legacy,
        "cuTensorMapEncodeIm2col",
    ),
    e(
        "cuTensorMapEncodeIm2colWide",
        12080,
        Legacy,
        "cuTensorMapEncodeIm2colWide",
    ),
    e(
        "cuTensorMapEncodeTiled",
        12000,
        Legacy,
        "cuTensorMapEncodeTiled",
    ),
    e(
        "cuTensorMapReplaceAddress",
        12000,
        Legacy,
        "cuTensorMapReplaceAddress",
    ),
    e("cuTexObjectCreate", 5000, Legacy, "cuTexObjectCreate"),
    e("cuTexObjectDestroy", 5000, Legacy, "cuTexObjectDestroy"),
    e(
        "cuTexObjectGetResourceDesc",
        5000,
        Legacy,
        "cuTexObjectGetResourceDesc",
    ),
    e(
        "cuTexObjectGetResourceViewDesc",
        5000,
        Legacy,
        "cuTexObjectGetResourceViewDesc",
    ),
    e(
        "cuTexObjectGetTextureDesc",
        5000,
        Legacy,
        "cuTexObjectGetTextureDesc",
    ),
    e("cuTexRefCreate", 2000, Legacy, "cuTexRefCreate"),
    e("cuTexRefDestroy", 2000, Legacy, "cuTexRefDestroy"),
    e("cuTexRefGetAddress", 2000, Legacy, "cuTexRefGetAddress"),
    e("cuTexRefGetAddress", 3020, Legacy, "cuTexRefGetAddress_v2"),
    e(
        "cuTexRefGetAddressMode",
        2000,
        Legacy,
        "cuTexRefGetAddressMode",
    ),
    e("cuTexRefGetArray", 2000, Legacy, "cuTexRefGetArray"),
    e(
        "cuTexRefGetBorderColor",
        8000,
        Legacy,
        "cuTexRefGetBorderColor",
    ),
    e(
        "cuTexRefGetFilterMode",
        2000,
        Legacy,
        "cuTexRefGetFilterMode",
    ),
    e("cuTexRefGetFlags", 2000, Legacy, "cuTexRefGetFlags"),
    e("cuTexRefGetFormat", 2000, Legacy, "cuTexRefGetFormat"),
    e(
        "cuTexRefGetMaxAnisotropy",
        5000,
        Legacy,
        "cuTexRefGetMaxAnisotropy",
    ),
    e(
        "cuTexRefGetMipmapFilterMode",
        5000,
        Legacy,
        "cuTexRefGetMipmapFilterMode",
    ),
    e(
        "cuTexRefGetMipmapLevelBias",
        5000,
        Legacy,
        "cuTexRefGetMipmapLevelBias",
    ),
    e(
        "cuTexRefGetMipmapLevelClamp",
        5000,
        Legacy,
        "cuTexRefGetMipmapLevelClamp",
    ),
    e(
        "cuTexRefGetMipmappedArray",
        5000,
        Legacy,
        "cuTexRefGetMipmappedArray",
    ),
    e("cuTexRefSetAddress", 2000, Legacy, "cuTexRefSetAddress"),
    e("cuTexRefSetAddress", 3020, Legacy, "cuTexRefSetAddress_v2"),
    e("cuTexRefSetAddress2D", 2020, Legacy, "cuTexRefSetAddress2D"),
    e(
        "cuTexRefSetAddress2D",
        3020,
        Legacy,
        "cuTexRefSetAddress2D_v2",
    ),
    e(
        "cuTexRefSetAddress2D",
        4010,
        Legacy,
        "cuTexRefSetAddress2D_v3",
    ),
    e(
        "cuTexRefSetAddressMode",
        2000,
        Legacy,
        "cuTexRefSetAddressMode",
    ),
    e("cuTexRefSetArray", 2000, Legacy, "cuTexRefSetArray"),
    e(
        "cuTexRefSetBorderColor",
        8000,
        Legacy,
        "cuTexRefSetBorderColor",
    ),
    e(
        "cuTexRefSetFilterMode",
        2000,
        Legacy,
        "cuTexRefSetFilterMode",
    ),
    e("cuTexRefSetFlags", 2000, Legacy, "cuTexRefSetFlags"),
    e("cuTexRefSetFormat", 2000, Legacy, "cuTexRefSetFormat"),
    e(
        "cuTexRefSetMaxAnisotropy",
        5000,
        Legacy,
        "cuTexRefSetMaxAnisotropy",
    ),
    e(
        "cuTexRefSetMipmapFilterMode",
        5000,
        Legacy,
        "cuTexRefSetMipmapFilterMode",
    ),
    e(
        "cuTexRefSetMipmapLevelBias",
        5000,
        Legacy,
        "cuTexRefSetMipmapLevelBias",
    ),
    e(
        "cuTexRefSetMipmapLevelClamp",
        5000,
        Legacy,
        "cuTexRefSetMipmapLevelClamp",
    ),
    e(
        "cuTexRefSetMipmappedArray",
        5000,
        Legacy,
        "cuTexRefSetMipmappedArray",
    ),
    e(
        "cuThreadExchangeStreamCaptureMode",
        10010,
        Legacy,
        "cuThreadExchangeStreamCaptureMode",
    ),
    e("cuUserObjectCreate", 11030, Legacy, "cuUserObjectCreate"),
    e("cuUserObjectRelease", 11030, Legacy, "cuUserObjectRelease"),
    e("cuUserObjectRetain", 11030, Legacy, "cuUserObjectRetain"),
    e(
        "cuWaitExternalSemaphoresAsync",
        10000,
        Legacy,
        "cuWaitExternalSemaphoresAsync",
    ),
    e(
        "cuWaitExternalSemaphoresAsync",
        10000,
        PerThread,
        "cuWaitExternalSemaphoresAsync_ptsz",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        assert!(PROC_ADDR_TABLE.windows(2).all(|w| {
            let key = |e: &ProcAddrEntry| (e.symbol, e.flavour == PerThread, e.version);
            key(&w[0]) < key(&w[1])
        }));
        let mut exports: Vec<_> = PROC_ADDR_TABLE.iter().map(|e| e.export).collect();
        exports.sort_unstable();
        let n = exports.len();
        exports.dedup();
        // cuGraphInstantiateWithFlags appears twice: as itself and as cuGraphInstantiate >= 12.0.
        assert_eq!(n - exports.len(), 1);
    }

    #[test]
    fn versions_pick_the_newest_sufficient_variant() {
        assert_eq!(resolve("cuMemAlloc", 3010, 0), Ok("cuMemAlloc"));
        assert_eq!(resolve("cuMemAlloc", 3020, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuMemAlloc", 12090, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuCtxCreate", 11040, 0), Ok("cuCtxCreate_v3"));
        assert_eq!(resolve("cuCtxCreate", 12050, 0), Ok("cuCtxCreate_v4"));
        assert_eq!(
            resolve("cuStreamBeginCapture", 10000, 0),
            Ok("cuStreamBeginCapture")
        );
        assert_eq!(
            resolve("cuStreamBeginCapture", 12000, 0),
            Ok("cuStreamBeginCapture_v2")
        );
        assert_eq!(
            resolve("cuGraphInstantiate", 11000, 0),
            Ok("cuGraphInstantiate_v2")
        );
        assert_eq!(
            resolve("cuGraphInstantiate", 12000, 0),
            Ok("cuGraphInstantiateWithFlags")
        );
        assert_eq!(
            resolve("cuGetProcAddress", 12000, 0),
            Ok("cuGetProcAddress_v2")
        );
    }

    #[test]
    fn per_thread_flavour() {
        let ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
        assert_eq!(
            resolve("cuLaunchKernel", 12000, ptds),
            Ok("cuLaunchKernel_ptsz")
        );
        assert_eq!(resolve("cuLaunchKernel", 12000, 0), Ok("cuLaunchKernel"));
        assert_eq!(
            resolve("cuMemcpyHtoD", 12000, ptds),
            Ok("cuMemcpyHtoD_v2_ptds")
        );
        assert_eq!(
            resolve("cuStreamBeginCapture", 12000, ptds),
            Ok("cuStreamBeginCapture_v2_ptsz")
        );
        // No per-thread variant before 7.0, and none at all for cuMemAlloc: legacy answers.
        assert_eq!(resolve("cuLaunchKernel", 6050, ptds), Ok("cuLaunchKernel"));
        assert_eq!(resolve("cuMemAlloc", 12000, ptds), Ok("cuMemAlloc_v2"));
        assert_eq!(
            resolve(
                "cuLaunchKernel",
                12000,
                ptds | CU_GET_PROC_ADDRESS_LEGACY_STREAM
            ),
            Ok("cuLaunchKernel")
        );
    }

    #[test]
    fn failures() {
        assert_eq!(
            resolve("cuNoSuchThing", 12000, 0),
            Err(ProcAddrStatus::SymbolNotFound)
        );
        assert_eq!(
            resolve("cuMemAlloc_v2", 12000, 0),
            Err(ProcAddrStatus::SymbolNotFound)
        );
        assert_eq!(
            resolve("cuLaunchKernelEx", 11040, 0),
            Err(ProcAddrStatus::VersionNotSufficient)
        );
        assert_eq!(
            resolve("cuMemAlloc", 1000, 0),
            Err(ProcAddrStatus::VersionNotSufficient)
        );
        assert_eq!(ProcAddrStatus::VersionNotSufficient.query_result(), 2);
        assert_eq!(
            ProcAddrStatus::SymbolNotFound.result(),
            CUDA_ERROR_NOT_FOUND
        );
    }

    #[test]
    fn symbols_are_distinct() {
        let v: Vec<_> = symbols().collect();
        assert!(v.windows(2).all(|w| w[0] < w[1]));
        assert!(v.contains(&"cuLaunchKernel"));
    }
}
