//! Execution side of the driver API (cuda.h, CUDA 12.9): stream and event flags, the special
//! stream handles, callback types, function attributes, launch configuration and attributes,
//! `extra` launch-parameter markers, stream capture enums and the graph node parameter structs.
//! Handle types themselves (`CUstream`, `CUevent`, `CUgraph`, …) live in `types`.

#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_uint, c_void};

use crate::result::CUresult;
use crate::types::{CUcontext, CUdeviceptr, CUevent, CUfunction, CUkernel, CUstream};

// ---------------------------------------------------------------------------------------------
// Streams

/// `CU_STREAM_DEFAULT`: the stream synchronises with the legacy default stream.
pub const CU_STREAM_DEFAULT: c_uint = 0x0;
/// `CU_STREAM_NON_BLOCKING`: the stream does not synchronise with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CU_STREAM_LEGACY` as an integer: the legacy default stream, whatever the compilation mode.
pub const CU_STREAM_LEGACY_HANDLE: usize = 0x1;
/// `CU_STREAM_PER_THREAD` as an integer: the calling thread's per-thread default stream.
pub const CU_STREAM_PER_THREAD_HANDLE: usize = 0x2;

/// `CU_STREAM_LEGACY` (`(CUstream)0x1`).
pub fn cu_stream_legacy() -> CUstream {
    CU_STREAM_LEGACY_HANDLE as CUstream
}

/// `CU_STREAM_PER_THREAD` (`(CUstream)0x2`).
pub fn cu_stream_per_thread() -> CUstream {
    CU_STREAM_PER_THREAD_HANDLE as CUstream
}

/// `CUhostFn`: host function run in stream order by `cuLaunchHostFunc` and host graph nodes.
pub type CUhostFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// `CUstreamCallback`: callback of `cuStreamAddCallback`.
pub type CUstreamCallback =
    Option<unsafe extern "C" fn(h_stream: CUstream, status: CUresult, user_data: *mut c_void)>;

/// `CUstreamCaptureStatus` (C enum, 32-bit).
pub type CUstreamCaptureStatus = c_uint;
/// `CU_STREAM_CAPTURE_STATUS_NONE`.
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
/// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: CUstreamCaptureStatus = 1;
/// `CU_STREAM_CAPTURE_STATUS_INVALIDATED`.
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: CUstreamCaptureStatus = 2;

/// `CUstreamCaptureMode` (C enum, 32-bit).
pub type CUstreamCaptureMode = c_uint;
/// `CU_STREAM_CAPTURE_MODE_GLOBAL`.
pub const CU_STREAM_CAPTURE_MODE_GLOBAL: CUstreamCaptureMode = 0;
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`.
pub const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: CUstreamCaptureMode = 1;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
pub const CU_STREAM_CAPTURE_MODE_RELAXED: CUstreamCaptureMode = 2;

// ---------------------------------------------------------------------------------------------
// Events

/// `CU_EVENT_DEFAULT`.
pub const CU_EVENT_DEFAULT: c_uint = 0x0;
/// `CU_EVENT_BLOCKING_SYNC`.
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 0x1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `CU_EVENT_INTERPROCESS` (requires `CU_EVENT_DISABLE_TIMING`).
pub const CU_EVENT_INTERPROCESS: c_uint = 0x4;
/// `CU_EVENT_RECORD_DEFAULT`.
pub const CU_EVENT_RECORD_DEFAULT: c_uint = 0x0;
/// `CU_EVENT_RECORD_EXTERNAL` (only valid during stream capture).
pub const CU_EVENT_RECORD_EXTERNAL: c_uint = 0x1;
/// `CU_EVENT_WAIT_DEFAULT`.
pub const CU_EVENT_WAIT_DEFAULT: c_uint = 0x0;
/// `CU_EVENT_WAIT_EXTERNAL` (only valid during stream capture).
pub const CU_EVENT_WAIT_EXTERNAL: c_uint = 0x1;

// ---------------------------------------------------------------------------------------------
// Functions

/// `CUfunction_attribute` (C enum, 32-bit).
pub type CUfunction_attribute = c_uint;
/// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
pub const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: CUfunction_attribute = 0;
/// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`.
pub const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: CUfunction_attribute = 1;
/// `CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES`.
pub const CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: CUfunction_attribute = 2;
/// `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`.
pub const CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: CUfunction_attribute = 3;
/// `CU_FUNC_ATTRIBUTE_NUM_REGS`.
pub const CU_FUNC_ATTRIBUTE_NUM_REGS: CUfunction_attribute = 4;
/// `CU_FUNC_ATTRIBUTE_PTX_VERSION`.
pub const CU_FUNC_ATTRIBUTE_PTX_VERSION: CUfunction_attribute = 5;
/// `CU_FUNC_ATTRIBUTE_BINARY_VERSION`.
pub const CU_FUNC_ATTRIBUTE_BINARY_VERSION: CUfunction_attribute = 6;
/// `CU_FUNC_ATTRIBUTE_CACHE_MODE_CA`.
pub const CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: CUfunction_attribute = 7;
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
pub const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: CUfunction_attribute = 8;
/// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`.
pub const CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: CUfunction_attribute = 9;
/// `CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET`.
pub const CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: CUfunction_attribute = 10;
/// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH`.
pub const CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: CUfunction_attribute = 11;
/// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT`.
pub const CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: CUfunction_attribute = 12;
/// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH`.
pub const CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: CUfunction_attribute = 13;
/// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED`.
pub const CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: CUfunction_attribute = 14;
/// `CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE`.
pub const CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: CUfunction_attribute = 15;
/// `CU_FUNC_ATTRIBUTE_MAX` (one past the last attribute).
pub const CU_FUNC_ATTRIBUTE_MAX: CUfunction_attribute = 16;

/// `CUjit_option` (C enum, 32-bit); the simulator accepts and ignores every option.
pub type CUjit_option = c_uint;
/// `CUlibraryOption` (C enum, 32-bit).
pub type CUlibraryOption = c_uint;

// ---------------------------------------------------------------------------------------------
// Launches

/// `CU_LAUNCH_PARAM_END` (`(void*)0x00`): terminates an `extra` array.
pub const CU_LAUNCH_PARAM_END: usize = 0x00;
/// `CU_LAUNCH_PARAM_BUFFER_POINTER` (`(void*)0x01`): next entry points at the packed parameters.
pub const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
/// `CU_LAUNCH_PARAM_BUFFER_SIZE` (`(void*)0x02`): next entry points at a `size_t` buffer size.
pub const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;

/// `CUlaunchAttributeID` (C enum, 32-bit).
pub type CUlaunchAttributeID = c_uint;
/// `CU_LAUNCH_ATTRIBUTE_IGNORE`.
pub const CU_LAUNCH_ATTRIBUTE_IGNORE: CUlaunchAttributeID = 0;
/// `CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW`.
pub const CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: CUlaunchAttributeID = 1;
/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
pub const CU_LAUNCH_ATTRIBUTE_COOPERATIVE: CUlaunchAttributeID = 2;
/// `CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY`.
pub const CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY: CUlaunchAttributeID = 3;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
pub const CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: CUlaunchAttributeID = 4;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE`.
pub const CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: CUlaunchAttributeID = 5;
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`.
pub const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: CUlaunchAttributeID = 6;
/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT`.
pub const CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT: CUlaunchAttributeID = 7;
/// `CU_LAUNCH_ATTRIBUTE_PRIORITY`.
pub const CU_LAUNCH_ATTRIBUTE_PRIORITY: CUlaunchAttributeID = 8;
/// `CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP`.
pub const CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: CUlaunchAttributeID = 9;
/// `CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN`.
pub const CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN: CUlaunchAttributeID = 10;
/// `CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION`.
pub const CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION: CUlaunchAttributeID = 11;
/// `CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`.
pub const CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: CUlaunchAttributeID = 12;
/// `CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE`.
pub const CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE: CUlaunchAttributeID = 13;
/// `CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`.
pub const CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: CUlaunchAttributeID = 14;

/// `CUlaunchAttributeValue`: a 64-byte union; read the member matching the attribute id.
#[repr(C)]
#[derive(Clone, Copy)]
pub union CUlaunchAttributeValue {
    /// `char pad[64]`: fixes the size.
    pub pad: [u8; 64],
    /// `int cooperative` (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`).
    pub cooperative: c_int,
    /// `int priority` (`CU_LAUNCH_ATTRIBUTE_PRIORITY`).
    pub priority: c_int,
    /// `clusterDim {x, y, z}` (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`).
    pub cluster_dim: [c_uint; 3],
    /// `launchCompletionEvent {CUevent event; int flags}` / `programmaticEvent`'s first members.
    pub event: CUlaunchAttributeEventValue,
}

/// Leading members shared by the `programmaticEvent` and `launchCompletionEvent` union members.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUlaunchAttributeEventValue {
    /// The event to record.
    pub event: CUevent,
    /// Event flags.
    pub flags: c_int,
}

/// `CUlaunchAttribute`: id, 4 bytes of padding, 64-byte value (72 bytes in all).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUlaunchAttribute {
    /// Attribute to set.
    pub id: CUlaunchAttributeID,
    /// `char pad[8 - sizeof(CUlaunchAttributeID)]`.
    pub pad: [u8; 4],
    /// Value of the attribute.
    pub value: CUlaunchAttributeValue,
}

/// `CUlaunchConfig`: the launch description of `cuLaunchKernelEx`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUlaunchConfig {
    /// Width of grid in blocks.
    pub grid_dim_x: c_uint,
    /// Height of grid in blocks.
    pub grid_dim_y: c_uint,
    /// Depth of grid in blocks.
    pub grid_dim_z: c_uint,
    /// X dimension of each thread block.
    pub block_dim_x: c_uint,
    /// Y dimension of each thread block.
    pub block_dim_y: c_uint,
    /// Z dimension of each thread block.
    pub block_dim_z: c_uint,
    /// Dynamic shared-memory size per thread block in bytes.
    pub shared_mem_bytes: c_uint,
    /// Stream identifier.
    pub h_stream: CUstream,
    /// Attribute list; may be null when `num_attrs == 0`.
    pub attrs: *mut CUlaunchAttribute,
    /// Number of attributes in `attrs`.
    pub num_attrs: c_uint,
}

// ---------------------------------------------------------------------------------------------
// Graphs

/// `CUgraphNodeType` (C enum, 32-bit).
pub type CUgraphNodeType = c_uint;
/// `CU_GRAPH_NODE_TYPE_KERNEL`.
pub const CU_GRAPH_NODE_TYPE_KERNEL: CUgraphNodeType = 0;
/// `CU_GRAPH_NODE_TYPE_MEMCPY`.
pub const CU_GRAPH_NODE_TYPE_MEMCPY: CUgraphNodeType = 1;
/// `CU_GRAPH_NODE_TYPE_MEMSET`.
pub const CU_GRAPH_NODE_TYPE_MEMSET: CUgraphNodeType = 2;
/// `CU_GRAPH_NODE_TYPE_HOST`.
pub const CU_GRAPH_NODE_TYPE_HOST: CUgraphNodeType = 3;
/// `CU_GRAPH_NODE_TYPE_GRAPH`.
pub const CU_GRAPH_NODE_TYPE_GRAPH: CUgraphNodeType = 4;
/// `CU_GRAPH_NODE_TYPE_EMPTY`.
pub const CU_GRAPH_NODE_TYPE_EMPTY: CUgraphNodeType = 5;
/// `CU_GRAPH_NODE_TYPE_WAIT_EVENT`.
pub const CU_GRAPH_NODE_TYPE_WAIT_EVENT: CUgraphNodeType = 6;
/// `CU_GRAPH_NODE_TYPE_EVENT_RECORD`.
pub const CU_GRAPH_NODE_TYPE_EVENT_RECORD: CUgraphNodeType = 7;
/// `CU_GRAPH_NODE_TYPE_MEM_ALLOC`.
pub const CU_GRAPH_NODE_TYPE_MEM_ALLOC: CUgraphNodeType = 10;
/// `CU_GRAPH_NODE_TYPE_MEM_FREE`.
pub const CU_GRAPH_NODE_TYPE_MEM_FREE: CUgraphNodeType = 11;

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`.
pub const CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: u64 = 1;
/// `CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD`.
pub const CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: u64 = 2;
/// `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`.
pub const CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH: u64 = 4;
/// `CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY`.
pub const CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: u64 = 8;

/// `CUDA_KERNEL_NODE_PARAMS_v1` (argument of `cuGraphAddKernelNode`, the CUDA 10.0 variant).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_KERNEL_NODE_PARAMS_v1 {
    /// Kernel to launch.
    pub func: CUfunction,
    /// Width of grid in blocks.
    pub grid_dim_x: c_uint,
    /// Height of grid in blocks.
    pub grid_dim_y: c_uint,
    /// Depth of grid in blocks.
    pub grid_dim_z: c_uint,
    /// X dimension of each thread block.
    pub block_dim_x: c_uint,
    /// Y dimension of each thread block.
    pub block_dim_y: c_uint,
    /// Z dimension of each thread block.
    pub block_dim_z: c_uint,
    /// Dynamic shared-memory size per thread block in bytes.
    pub shared_mem_bytes: c_uint,
    /// Array of pointers to kernel parameters.
    pub kernel_params: *mut *mut c_void,
    /// Extra options (`CU_LAUNCH_PARAM_*` list).
    pub extra: *mut *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (= `CUDA_KERNEL_NODE_PARAMS`, argument of `cuGraphAddKernelNode_v2`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_KERNEL_NODE_PARAMS_v2 {
    /// Kernel to launch (if null, `kern` is used).
    pub func: CUfunction,
    /// Width of grid in blocks.
    pub grid_dim_x: c_uint,
    /// Height of grid in blocks.
    pub grid_dim_y: c_uint,
    /// Depth of grid in blocks.
    pub grid_dim_z: c_uint,
    /// X dimension of each thread block.
    pub block_dim_x: c_uint,
    /// Y dimension of each thread block.
    pub block_dim_y: c_uint,
    /// Z dimension of each thread block.
    pub block_dim_z: c_uint,
    /// Dynamic shared-memory size per thread block in bytes.
    pub shared_mem_bytes: c_uint,
    /// Array of pointers to kernel parameters.
    pub kernel_params: *mut *mut c_void,
    /// Extra options (`CU_LAUNCH_PARAM_*` list).
    pub extra: *mut *mut c_void,
    /// Context-independent kernel, used when `func` is null.
    pub kern: CUkernel,
    /// Context of the node (null: current context); ignored when `func` is set.
    pub ctx: CUcontext,
}

/// `CUDA_MEMSET_NODE_PARAMS` (v1).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEMSET_NODE_PARAMS {
    /// Destination device pointer.
    pub dst: CUdeviceptr,
    /// Pitch of the destination (unused when `height == 1`).
    pub pitch: usize,
    /// Value to set.
    pub value: c_uint,
    /// Element size in bytes: 1, 2 or 4.
    pub element_size: c_uint,
    /// Width of a row in elements.
    pub width: usize,
    /// Number of rows.
    pub height: usize,
}

/// `CUDA_HOST_NODE_PARAMS` (v1).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_HOST_NODE_PARAMS {
    /// Function called when the node executes.
    pub fn_: CUhostFn,
    /// Argument passed to `fn_`.
    pub user_data: *mut c_void,
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS` (argument of `cuGraphInstantiateWithParams`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_GRAPH_INSTANTIATE_PARAMS {
    /// Instantiation flags.
    pub flags: u64,
    /// Upload stream.
    pub h_upload_stream: CUstream,
    /// Out: node that caused instantiation to fail.
    pub h_err_node_out: crate::types::CUgraphNode,
    /// Out: `CUgraphInstantiateResult`.
    pub result_out: c_uint,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_cuda_h() {
        assert_eq!(size_of::<CUlaunchAttributeValue>(), 64);
        assert_eq!(size_of::<CUlaunchAttribute>(), 72);
        assert_eq!(offset_of!(CUlaunchAttribute, value), 8);
        assert_eq!(offset_of!(CUlaunchConfig, h_stream), 32);
        assert_eq!(offset_of!(CUlaunchConfig, attrs), 40);
        assert_eq!(size_of::<CUlaunchConfig>(), 56);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS_v1, kernel_params), 40);
        assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS_v1>(), 56);
        assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS_v2>(), 72);
        assert_eq!(size_of::<CUDA_MEMSET_NODE_PARAMS>(), 40);
        assert_eq!(size_of::<CUDA_HOST_NODE_PARAMS>(), 16);
        assert_eq!(size_of::<CUDA_GRAPH_INSTANTIATE_PARAMS>(), 32);
    }

    #[test]
    fn exact_values() {
        assert_eq!(CU_EVENT_DISABLE_TIMING, 2);
        assert_eq!(CU_LAUNCH_ATTRIBUTE_PRIORITY, 8);
        assert_eq!(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8);
        assert_eq!(CU_GRAPH_NODE_TYPE_MEM_FREE, 11);
        assert_eq!(cu_stream_per_thread() as usize, 2);
    }
}
