//! Memory-management ABI of the CUDA driver API (cuda.h, CUDA 12.9): allocation, stream-ordered
//! pool, VMM, array, memcpy and IPC structs with the exact C layout, and their enums and flags.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_void};

use crate::types::{CUarray, CUcontext, CUdeviceptr, CUdeviceptr_v1};

/// `CU_IPC_HANDLE_SIZE`: bytes in an IPC memory / event handle.
pub const CU_IPC_HANDLE_SIZE: usize = 64;

/// `CU_MEMHOSTALLOC_PORTABLE`.
pub const CU_MEMHOSTALLOC_PORTABLE: u32 = 0x01;
/// `CU_MEMHOSTALLOC_DEVICEMAP`.
pub const CU_MEMHOSTALLOC_DEVICEMAP: u32 = 0x02;
/// `CU_MEMHOSTALLOC_WRITECOMBINED`.
pub const CU_MEMHOSTALLOC_WRITECOMBINED: u32 = 0x04;
/// `CU_MEMHOSTREGISTER_PORTABLE`.
pub const CU_MEMHOSTREGISTER_PORTABLE: u32 = 0x01;
/// `CU_MEMHOSTREGISTER_DEVICEMAP`.
pub const CU_MEMHOSTREGISTER_DEVICEMAP: u32 = 0x02;
/// `CU_MEMHOSTREGISTER_IOMEMORY`.
pub const CU_MEMHOSTREGISTER_IOMEMORY: u32 = 0x04;
/// `CU_MEMHOSTREGISTER_READ_ONLY`.
pub const CU_MEMHOSTREGISTER_READ_ONLY: u32 = 0x08;
/// `CU_MEM_CREATE_USAGE_TILE_POOL`.
pub const CU_MEM_CREATE_USAGE_TILE_POOL: u16 = 0x1;
/// `CU_MEM_CREATE_USAGE_HW_DECOMPRESS`.
pub const CU_MEM_CREATE_USAGE_HW_DECOMPRESS: u16 = 0x2;
/// `CU_MEM_POOL_CREATE_USAGE_HW_DECOMPRESS`.
pub const CU_MEM_POOL_CREATE_USAGE_HW_DECOMPRESS: u16 = 0x2;

/// `CUDA_ARRAY3D_LAYERED`.
pub const CUDA_ARRAY3D_LAYERED: u32 = 0x01;
/// `CUDA_ARRAY3D_2DARRAY` (deprecated alias of `CUDA_ARRAY3D_LAYERED`).
pub const CUDA_ARRAY3D_2DARRAY: u32 = 0x01;
/// `CUDA_ARRAY3D_SURFACE_LDST`.
pub const CUDA_ARRAY3D_SURFACE_LDST: u32 = 0x02;
/// `CUDA_ARRAY3D_CUBEMAP`.
pub const CUDA_ARRAY3D_CUBEMAP: u32 = 0x04;
/// `CUDA_ARRAY3D_TEXTURE_GATHER`.
pub const CUDA_ARRAY3D_TEXTURE_GATHER: u32 = 0x08;
/// `CUDA_ARRAY3D_DEPTH_TEXTURE`.
pub const CUDA_ARRAY3D_DEPTH_TEXTURE: u32 = 0x10;
/// `CUDA_ARRAY3D_COLOR_ATTACHMENT`.
pub const CUDA_ARRAY3D_COLOR_ATTACHMENT: u32 = 0x20;
/// `CUDA_ARRAY3D_SPARSE`.
pub const CUDA_ARRAY3D_SPARSE: u32 = 0x40;
/// `CUDA_ARRAY3D_DEFERRED_MAPPING`.
pub const CUDA_ARRAY3D_DEFERRED_MAPPING: u32 = 0x80;
/// `CUDA_ARRAY3D_VIDEO_ENCODE_DECODE`.
pub const CUDA_ARRAY3D_VIDEO_ENCODE_DECODE: u32 = 0x100;

/// `CUmemorytype` (C enum, passed as a 32-bit integer).
pub type CUmemorytype = u32;
/// `CU_MEMORYTYPE_HOST`.
pub const CU_MEMORYTYPE_HOST: CUmemorytype = 1;
/// `CU_MEMORYTYPE_DEVICE`.
pub const CU_MEMORYTYPE_DEVICE: CUmemorytype = 2;
/// `CU_MEMORYTYPE_ARRAY`.
pub const CU_MEMORYTYPE_ARRAY: CUmemorytype = 3;
/// `CU_MEMORYTYPE_UNIFIED`.
pub const CU_MEMORYTYPE_UNIFIED: CUmemorytype = 4;

/// `CUmemAttach_flags` (C enum, passed as a 32-bit integer).
pub type CUmemAttach_flags = u32;
/// `CU_MEM_ATTACH_GLOBAL`.
pub const CU_MEM_ATTACH_GLOBAL: CUmemAttach_flags = 1;
/// `CU_MEM_ATTACH_HOST`.
pub const CU_MEM_ATTACH_HOST: CUmemAttach_flags = 2;
/// `CU_MEM_ATTACH_SINGLE`.
pub const CU_MEM_ATTACH_SINGLE: CUmemAttach_flags = 4;

/// `CUipcMem_flags` (C enum, passed as a 32-bit integer).
pub type CUipcMem_flags = u32;
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
pub const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: CUipcMem_flags = 1;

/// `CUmem_advise` (C enum, passed as a 32-bit integer).
pub type CUmem_advise = u32;
/// `CU_MEM_ADVISE_SET_READ_MOSTLY`.
pub const CU_MEM_ADVISE_SET_READ_MOSTLY: CUmem_advise = 1;
/// `CU_MEM_ADVISE_UNSET_READ_MOSTLY`.
pub const CU_MEM_ADVISE_UNSET_READ_MOSTLY: CUmem_advise = 2;
/// `CU_MEM_ADVISE_SET_PREFERRED_LOCATION`.
pub const CU_MEM_ADVISE_SET_PREFERRED_LOCATION: CUmem_advise = 3;
/// `CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION`.
pub const CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: CUmem_advise = 4;
/// `CU_MEM_ADVISE_SET_ACCESSED_BY`.
pub const CU_MEM_ADVISE_SET_ACCESSED_BY: CUmem_advise = 5;
/// `CU_MEM_ADVISE_UNSET_ACCESSED_BY`.
pub const CU_MEM_ADVISE_UNSET_ACCESSED_BY: CUmem_advise = 6;

/// `CUmem_range_attribute` (C enum, passed as a 32-bit integer).
pub type CUmem_range_attribute = u32;
/// `CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY`.
pub const CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: CUmem_range_attribute = 1;
/// `CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION`.
pub const CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: CUmem_range_attribute = 2;
/// `CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY`.
pub const CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: CUmem_range_attribute = 3;
/// `CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION`.
pub const CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: CUmem_range_attribute = 4;
/// `CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE`.
pub const CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE: CUmem_range_attribute = 5;
/// `CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID`.
pub const CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: CUmem_range_attribute = 6;
/// `CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE`.
pub const CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: CUmem_range_attribute = 7;
/// `CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID`.
pub const CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: CUmem_range_attribute = 8;

/// `CUarray_format` (C enum, passed as a 32-bit integer).
pub type CUarray_format = u32;
/// `CU_AD_FORMAT_UNSIGNED_INT8`.
pub const CU_AD_FORMAT_UNSIGNED_INT8: CUarray_format = 1;
/// `CU_AD_FORMAT_UNSIGNED_INT16`.
pub const CU_AD_FORMAT_UNSIGNED_INT16: CUarray_format = 2;
/// `CU_AD_FORMAT_UNSIGNED_INT32`.
pub const CU_AD_FORMAT_UNSIGNED_INT32: CUarray_format = 3;
/// `CU_AD_FORMAT_SIGNED_INT8`.
pub const CU_AD_FORMAT_SIGNED_INT8: CUarray_format = 8;
/// `CU_AD_FORMAT_SIGNED_INT16`.
pub const CU_AD_FORMAT_SIGNED_INT16: CUarray_format = 9;
/// `CU_AD_FORMAT_SIGNED_INT32`.
pub const CU_AD_FORMAT_SIGNED_INT32: CUarray_format = 0xa;
/// `CU_AD_FORMAT_HALF`.
pub const CU_AD_FORMAT_HALF: CUarray_format = 0x10;
/// `CU_AD_FORMAT_FLOAT`.
pub const CU_AD_FORMAT_FLOAT: CUarray_format = 0x20;
/// `CU_AD_FORMAT_NV12`.
pub const CU_AD_FORMAT_NV12: CUarray_format = 0xb0;
/// `CU_AD_FORMAT_UNORM_INT8X1`.
pub const CU_AD_FORMAT_UNORM_INT8X1: CUarray_format = 0xc0;
/// `CU_AD_FORMAT_UNORM_INT8X2`.
pub const CU_AD_FORMAT_UNORM_INT8X2: CUarray_format = 0xc1;
/// `CU_AD_FORMAT_UNORM_INT8X4`.
pub const CU_AD_FORMAT_UNORM_INT8X4: CUarray_format = 0xc2;
/// `CU_AD_FORMAT_UNORM_INT16X1`.
pub const CU_AD_FORMAT_UNORM_INT16X1: CUarray_format = 0xc3;
/// `CU_AD_FORMAT_UNORM_INT16X2`.
pub const CU_AD_FORMAT_UNORM_INT16X2: CUarray_format = 0xc4;
/// `CU_AD_FORMAT_UNORM_INT16X4`.
pub const CU_AD_FORMAT_UNORM_INT16X4: CUarray_format = 0xc5;
/// `CU_AD_FORMAT_SNORM_INT8X1`.
pub const CU_AD_FORMAT_SNORM_INT8X1: CUarray_format = 0xc6;
/// `CU_AD_FORMAT_SNORM_INT8X2`.
pub const CU_AD_FORMAT_SNORM_INT8X2: CUarray_format = 0xc7;
/// `CU_AD_FORMAT_SNORM_INT8X4`.
pub const CU_AD_FORMAT_SNORM_INT8X4: CUarray_format = 0xc8;
/// `CU_AD_FORMAT_SNORM_INT16X1`.
pub const CU_AD_FORMAT_SNORM_INT16X1: CUarray_format = 0xc9;
/// `CU_AD_FORMAT_SNORM_INT16X2`.
pub const CU_AD_FORMAT_SNORM_INT16X2: CUarray_format = 0xca;
/// `CU_AD_FORMAT_SNORM_INT16X4`.
pub const CU_AD_FORMAT_SNORM_INT16X4: CUarray_format = 0xcb;
/// `CU_AD_FORMAT_BC1_UNORM`.
pub const CU_AD_FORMAT_BC1_UNORM: CUarray_format = 0x91;
/// `CU_AD_FORMAT_BC1_UNORM_SRGB`.
pub const CU_AD_FORMAT_BC1_UNORM_SRGB: CUarray_format = 0x92;
/// `CU_AD_FORMAT_BC2_UNORM`.
pub const CU_AD_FORMAT_BC2_UNORM: CUarray_format = 0x93;
/// `CU_AD_FORMAT_BC2_UNORM_SRGB`.
pub const CU_AD_FORMAT_BC2_UNORM_SRGB: CUarray_format = 0x94;
/// `CU_AD_FORMAT_BC3_UNORM`.
pub const CU_AD_FORMAT_BC3_UNORM: CUarray_format = 0x95;
/// `CU_AD_FORMAT_BC3_UNORM_SRGB`.
pub const CU_AD_FORMAT_BC3_UNORM_SRGB: CUarray_format = 0x96;
/// `CU_AD_FORMAT_BC4_UNORM`.
pub const CU_AD_FORMAT_BC4_UNORM: CUarray_format = 0x97;
/// `CU_AD_FORMAT_BC4_SNORM`.
pub const CU_AD_FORMAT_BC4_SNORM: CUarray_format = 0x98;
/// `CU_AD_FORMAT_BC5_UNORM`.
pub const CU_AD_FORMAT_BC5_UNORM: CUarray_format = 0x99;
/// `CU_AD_FORMAT_BC5_SNORM`.
pub const CU_AD_FORMAT_BC5_SNORM: CUarray_format = 0x9a;
/// `CU_AD_FORMAT_BC6H_UF16`.
pub const CU_AD_FORMAT_BC6H_UF16: CUarray_format = 0x9b;
/// `CU_AD_FORMAT_BC6H_SF16`.
pub const CU_AD_FORMAT_BC6H_SF16: CUarray_format = 0x9c;
/// `CU_AD_FORMAT_BC7_UNORM`.
pub const CU_AD_FORMAT_BC7_UNORM: CUarray_format = 0x9d;
/// `CU_AD_FORMAT_BC7_UNORM_SRGB`.
pub const CU_AD_FORMAT_BC7_UNORM_SRGB: CUarray_format = 0x9e;
/// `CU_AD_FORMAT_P010`.
pub const CU_AD_FORMAT_P010: CUarray_format = 0x9f;
/// `CU_AD_FORMAT_P016`.
pub const CU_AD_FORMAT_P016: CUarray_format = 0xa1;
/// `CU_AD_FORMAT_NV16`.
pub const CU_AD_FORMAT_NV16: CUarray_format = 0xa2;
/// `CU_AD_FORMAT_P210`.
pub const CU_AD_FORMAT_P210: CUarray_format = 0xa3;
/// `CU_AD_FORMAT_P216`.
pub const CU_AD_FORMAT_P216: CUarray_format = 0xa4;
/// `CU_AD_FORMAT_YUY2`.
pub const CU_AD_FORMAT_YUY2: CUarray_format = 0xa5;
/// `CU_AD_FORMAT_Y210`.
pub const CU_AD_FORMAT_Y210: CUarray_format = 0xa6;
/// `CU_AD_FORMAT_Y216`.
pub const CU_AD_FORMAT_Y216: CUarray_format = 0xa7;
/// `CU_AD_FORMAT_AYUV`.
pub const CU_AD_FORMAT_AYUV: CUarray_format = 0xa8;
/// `CU_AD_FORMAT_Y410`.
pub const CU_AD_FORMAT_Y410: CUarray_format = 0xa9;
/// `CU_AD_FORMAT_Y416`.
pub const CU_AD_FORMAT_Y416: CUarray_format = 0xb1;
/// `CU_AD_FORMAT_Y444_PLANAR8`.
pub const CU_AD_FORMAT_Y444_PLANAR8: CUarray_format = 0xb2;
/// `CU_AD_FORMAT_Y444_PLANAR10`.
pub const CU_AD_FORMAT_Y444_PLANAR10: CUarray_format = 0xb3;
/// `CU_AD_FORMAT_YUV444_8bit_SemiPlanar`.
pub const CU_AD_FORMAT_YUV444_8bit_SemiPlanar: CUarray_format = 0xb4;
/// `CU_AD_FORMAT_YUV444_16bit_SemiPlanar`.
pub const CU_AD_FORMAT_YUV444_16bit_SemiPlanar: CUarray_format = 0xb5;
/// `CU_AD_FORMAT_UNORM_INT_101010_2`.
pub const CU_AD_FORMAT_UNORM_INT_101010_2: CUarray_format = 0x50;
/// `CU_AD_FORMAT_MAX`.
pub const CU_AD_FORMAT_MAX: CUarray_format = 0x7fffffff;

/// `CUmemAllocationHandleType` (C enum, passed as a 32-bit integer).
pub type CUmemAllocationHandleType = u32;
/// `CU_MEM_HANDLE_TYPE_NONE`.
pub const CU_MEM_HANDLE_TYPE_NONE: CUmemAllocationHandleType = 0;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: CUmemAllocationHandleType = 1;
/// `CU_MEM_HANDLE_TYPE_WIN32`.
pub const CU_MEM_HANDLE_TYPE_WIN32: CUmemAllocationHandleType = 2;
/// `CU_MEM_HANDLE_TYPE_WIN32_KMT`.
pub const CU_MEM_HANDLE_TYPE_WIN32_KMT: CUmemAllocationHandleType = 4;
/// `CU_MEM_HANDLE_TYPE_FABRIC`.
pub const CU_MEM_HANDLE_TYPE_FABRIC: CUmemAllocationHandleType = 8;
/// `CU_MEM_HANDLE_TYPE_MAX`.
pub const CU_MEM_HANDLE_TYPE_MAX: CUmemAllocationHandleType = 0x7fffffff;

/// `CUmemAccess_flags` (C enum, passed as a 32-bit integer).
pub type CUmemAccess_flags = u32;
/// `CU_MEM_ACCESS_FLAGS_PROT_NONE`.
pub const CU_MEM_ACCESS_FLAGS_PROT_NONE: CUmemAccess_flags = 0;
/// `CU_MEM_ACCESS_FLAGS_PROT_READ`.
pub const CU_MEM_ACCESS_FLAGS_PROT_READ: CUmemAccess_flags = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: CUmemAccess_flags = 3;
/// `CU_MEM_ACCESS_FLAGS_PROT_MAX`.
pub const CU_MEM_ACCESS_FLAGS_PROT_MAX: CUmemAccess_flags = 0x7fffffff;

/// `CUmemLocationType` (C enum, passed as a 32-bit integer).
pub type CUmemLocationType = u32;
/// `CU_MEM_LOCATION_TYPE_INVALID`.
pub const CU_MEM_LOCATION_TYPE_INVALID: CUmemLocationType = 0;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const CU_MEM_LOCATION_TYPE_DEVICE: CUmemLocationType = 1;
/// `CU_MEM_LOCATION_TYPE_HOST`.
pub const CU_MEM_LOCATION_TYPE_HOST: CUmemLocationType = 2;
/// `CU_MEM_LOCATION_TYPE_HOST_NUMA`.
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA: CUmemLocationType = 3;
/// `CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT`.
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: CUmemLocationType = 4;
/// `CU_MEM_LOCATION_TYPE_MAX`.
pub const CU_MEM_LOCATION_TYPE_MAX: CUmemLocationType = 0x7fffffff;

/// `CUmemAllocationType` (C enum, passed as a 32-bit integer).
pub type CUmemAllocationType = u32;
/// `CU_MEM_ALLOCATION_TYPE_INVALID`.
pub const CU_MEM_ALLOCATION_TYPE_INVALID: CUmemAllocationType = 0;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: CUmemAllocationType = 1;
/// `CU_MEM_ALLOCATION_TYPE_MAX`.
pub const CU_MEM_ALLOCATION_TYPE_MAX: CUmemAllocationType = 0x7fffffff;

/// `CUmemAllocationGranularity_flags` (C enum, passed as a 32-bit integer).
pub type CUmemAllocationGranularity_flags = u32;
/// `CU_MEM_ALLOC_GRANULARITY_MINIMUM`.
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: CUmemAllocationGranularity_flags = 0;
/// `CU_MEM_ALLOC_GRANULARITY_RECOMMENDED`.
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: CUmemAllocationGranularity_flags = 1;

/// `CUmemRangeHandleType` (C enum, passed as a 32-bit integer).
pub type CUmemRangeHandleType = u32;
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
pub const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: CUmemRangeHandleType = 1;
/// `CU_MEM_RANGE_HANDLE_TYPE_MAX`.
pub const CU_MEM_RANGE_HANDLE_TYPE_MAX: CUmemRangeHandleType = 0x7fffffff;

/// `CUmemAllocationCompType` (C enum, passed as a 32-bit integer).
pub type CUmemAllocationCompType = u32;
/// `CU_MEM_ALLOCATION_COMP_NONE`.
pub const CU_MEM_ALLOCATION_COMP_NONE: CUmemAllocationCompType = 0;
/// `CU_MEM_ALLOCATION_COMP_GENERIC`.
pub const CU_MEM_ALLOCATION_COMP_GENERIC: CUmemAllocationCompType = 1;

/// `CUmemPool_attribute` (C enum, passed as a 32-bit integer).
pub type CUmemPool_attribute = u32;
/// `CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES`.
pub const CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: CUmemPool_attribute = 1;
/// `CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC`.
pub const CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: CUmemPool_attribute = 2;
/// `CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES`.
pub const CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: CUmemPool_attribute = 3;
/// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`.
pub const CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: CUmemPool_attribute = 4;
/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`.
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: CUmemPool_attribute = 5;
/// `CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH`.
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: CUmemPool_attribute = 6;
/// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT`.
pub const CU_MEMPOOL_ATTR_USED_MEM_CURRENT: CUmemPool_attribute = 7;
/// `CU_MEMPOOL_ATTR_USED_MEM_HIGH`.
pub const CU_MEMPOOL_ATTR_USED_MEM_HIGH: CUmemPool_attribute = 8;

/// `CUmemOperationType` (C enum, passed as a 32-bit integer).
pub type CUmemOperationType = u32;
/// `CU_MEM_OPERATION_TYPE_MAP`.
pub const CU_MEM_OPERATION_TYPE_MAP: CUmemOperationType = 1;
/// `CU_MEM_OPERATION_TYPE_UNMAP`.
pub const CU_MEM_OPERATION_TYPE_UNMAP: CUmemOperationType = 2;

/// `CUmemHandleType` (C enum, passed as a 32-bit integer).
pub type CUmemHandleType = u32;
/// `CU_MEM_HANDLE_TYPE_GENERIC`.
pub const CU_MEM_HANDLE_TYPE_GENERIC: CUmemHandleType = 0;

/// `CUipcMemHandle`: an opaque IPC memory handle (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUipcMemHandle {
    /// Opaque bytes.
    pub reserved: [c_char; CU_IPC_HANDLE_SIZE],
}

impl Default for CUipcMemHandle {
    fn default() -> Self {
        Self {
            reserved: [0; CU_IPC_HANDLE_SIZE],
        }
    }
}

/// `CUipcEventHandle`: an opaque IPC event handle (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUipcEventHandle {
    /// Opaque bytes.
    pub reserved: [c_char; CU_IPC_HANDLE_SIZE],
}

impl Default for CUipcEventHandle {
    fn default() -> Self {
        Self {
            reserved: [0; CU_IPC_HANDLE_SIZE],
        }
    }
}

/// `CUmemFabricHandle`: an opaque fabric handle (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUmemFabricHandle {
    /// Opaque bytes.
    pub data: [u8; CU_IPC_HANDLE_SIZE],
}

/// `CUmemLocation`: where memory lives (a device ordinal, the host, a NUMA node).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUmemLocation {
    /// A `CU_MEM_LOCATION_TYPE_*` value.
    pub type_: CUmemLocationType,
    /// Device ordinal or NUMA node id, per `type_`.
    pub id: i32,
}

/// The `allocFlags` member of [`CUmemAllocationProp`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUmemAllocationPropFlags {
    /// A `CU_MEM_ALLOCATION_COMP_*` value.
    pub compressionType: u8,
    /// Non-zero to request GPUDirect RDMA capable memory.
    pub gpuDirectRDMACapable: u8,
    /// `CU_MEM_CREATE_USAGE_*` bits.
    pub usage: u16,
    /// Must be zero.
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp`: properties of a `cuMemCreate` allocation.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUmemAllocationProp {
    /// A `CU_MEM_ALLOCATION_TYPE_*` value (must be `PINNED`).
    pub type_: CUmemAllocationType,
    /// Bitmask of `CU_MEM_HANDLE_TYPE_*` the allocation may be exported as.
    pub requestedHandleTypes: CUmemAllocationHandleType,
    /// Where the memory lives.
    pub location: CUmemLocation,
    /// Windows only; null elsewhere.
    pub win32HandleMetaData: *mut c_void,
    /// Compression, RDMA and usage hints.
    pub allocFlags: CUmemAllocationPropFlags,
}

impl Default for CUmemAllocationProp {
    fn default() -> Self {
        Self {
            type_: 0,
            requestedHandleTypes: 0,
            location: CUmemLocation::default(),
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: CUmemAllocationPropFlags::default(),
        }
    }
}

/// `CUmemAccessDesc`: access rights of one location to a mapped range.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUmemAccessDesc {
    /// The location whose access is described.
    pub location: CUmemLocation,
    /// A `CU_MEM_ACCESS_FLAGS_PROT_*` value.
    pub flags: CUmemAccess_flags,
}

/// `CUmemPoolProps`: properties of a memory pool created by `cuMemPoolCreate`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUmemPoolProps {
    /// A `CU_MEM_ALLOCATION_TYPE_*` value (must be `PINNED`).
    pub allocType: CUmemAllocationType,
    /// Handle types allocations of the pool can be exported as.
    pub handleTypes: CUmemAllocationHandleType,
    /// Where the pool's memory lives.
    pub location: CUmemLocation,
    /// Windows only; null elsewhere.
    pub win32SecurityAttributes: *mut c_void,
    /// Maximum pool size; 0 means a system dependent default.
    pub maxSize: usize,
    /// Usage bits (`CU_MEM_POOL_CREATE_USAGE_*`).
    pub usage: u16,
    /// Must be zero.
    pub reserved: [u8; 54],
}

impl Default for CUmemPoolProps {
    fn default() -> Self {
        Self {
            allocType: 0,
            handleTypes: 0,
            location: CUmemLocation::default(),
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: 0,
            usage: 0,
            reserved: [0; 54],
        }
    }
}

/// `CUmemPoolPtrExportData`: opaque data describing an exported pool allocation.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUmemPoolPtrExportData {
    /// Opaque bytes.
    pub reserved: [u8; 64],
}

impl Default for CUmemPoolPtrExportData {
    fn default() -> Self {
        Self { reserved: [0; 64] }
    }
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS_v1` (also the layout of `CUDA_MEM_ALLOC_NODE_PARAMS`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEM_ALLOC_NODE_PARAMS_v1 {
    /// Pool properties; `handleTypes` must be `CU_MEM_HANDLE_TYPE_NONE`.
    pub poolProps: CUmemPoolProps,
    /// Peer access descriptors.
    pub accessDescs: *const CUmemAccessDesc,
    /// Number of entries in `accessDescs`.
    pub accessDescCount: usize,
    /// Requested size in bytes.
    pub bytesize: usize,
    /// Out: the address of the allocation.
    pub dptr: CUdeviceptr,
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS_v2`: same layout as v1 in CUDA 12.x (used in `CUgraphNodeParams`).
pub type CUDA_MEM_ALLOC_NODE_PARAMS_v2 = CUDA_MEM_ALLOC_NODE_PARAMS_v1;
/// `CUDA_MEM_ALLOC_NODE_PARAMS`.
pub type CUDA_MEM_ALLOC_NODE_PARAMS = CUDA_MEM_ALLOC_NODE_PARAMS_v1;

/// `CUDA_MEM_FREE_NODE_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUDA_MEM_FREE_NODE_PARAMS {
    /// The pointer to free.
    pub dptr: CUdeviceptr,
}

/// `CUDA_ARRAY_DESCRIPTOR` (`_v2`, size_t extents).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUDA_ARRAY_DESCRIPTOR {
    /// Width in elements.
    pub Width: usize,
    /// Height in elements (0 for 1D).
    pub Height: usize,
    /// Element format.
    pub Format: CUarray_format,
    /// Channels per element (1, 2 or 4).
    pub NumChannels: u32,
}

/// `CUDA_ARRAY_DESCRIPTOR_v1`: 32-bit extents, used by the unsuffixed legacy entry points.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUDA_ARRAY_DESCRIPTOR_v1 {
    /// Width in elements.
    pub Width: u32,
    /// Height in elements.
    pub Height: u32,
    /// Element format.
    pub Format: CUarray_format,
    /// Channels per element.
    pub NumChannels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR` (`_v2`, size_t extents).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUDA_ARRAY3D_DESCRIPTOR {
    /// Width in elements.
    pub Width: usize,
    /// Height in elements.
    pub Height: usize,
    /// Depth in elements (or layers).
    pub Depth: usize,
    /// Element format.
    pub Format: CUarray_format,
    /// Channels per element.
    pub NumChannels: u32,
    /// `CUDA_ARRAY3D_*` flags.
    pub Flags: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR_v1`: 32-bit extents, used by the unsuffixed legacy entry points.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUDA_ARRAY3D_DESCRIPTOR_v1 {
    /// Width in elements.
    pub Width: u32,
    /// Height in elements.
    pub Height: u32,
    /// Depth in elements.
    pub Depth: u32,
    /// Element format.
    pub Format: CUarray_format,
    /// Channels per element.
    pub NumChannels: u32,
    /// `CUDA_ARRAY3D_*` flags.
    pub Flags: u32,
}

/// `CUDA_ARRAY_MEMORY_REQUIREMENTS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUDA_ARRAY_MEMORY_REQUIREMENTS {
    /// Total required size.
    pub size: usize,
    /// Alignment requirement.
    pub alignment: usize,
    /// Reserved.
    pub reserved: [u32; 4],
}

/// `CUDA_MEMCPY2D` (`_v2`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEMCPY2D {
    /// Source X in bytes.
    pub srcXInBytes: usize,
    /// Source row.
    pub srcY: usize,
    /// Source memory type.
    pub srcMemoryType: CUmemorytype,
    /// Source host pointer.
    pub srcHost: *const c_void,
    /// Source device pointer.
    pub srcDevice: CUdeviceptr,
    /// Source array.
    pub srcArray: CUarray,
    /// Source pitch.
    pub srcPitch: usize,
    /// Destination X in bytes.
    pub dstXInBytes: usize,
    /// Destination row.
    pub dstY: usize,
    /// Destination memory type.
    pub dstMemoryType: CUmemorytype,
    /// Destination host pointer.
    pub dstHost: *mut c_void,
    /// Destination device pointer.
    pub dstDevice: CUdeviceptr,
    /// Destination array.
    pub dstArray: CUarray,
    /// Destination pitch.
    pub dstPitch: usize,
    /// Width of the copy in bytes.
    pub WidthInBytes: usize,
    /// Rows to copy.
    pub Height: usize,
}

/// `CUDA_MEMCPY2D_v1`: 32-bit fields, used by the unsuffixed legacy entry points.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEMCPY2D_v1 {
    /// Source X in bytes.
    pub srcXInBytes: u32,
    /// Source row.
    pub srcY: u32,
    /// Source memory type.
    pub srcMemoryType: CUmemorytype,
    /// Source host pointer.
    pub srcHost: *const c_void,
    /// Source device pointer.
    pub srcDevice: CUdeviceptr_v1,
    /// Source array.
    pub srcArray: CUarray,
    /// Source pitch.
    pub srcPitch: u32,
    /// Destination X in bytes.
    pub dstXInBytes: u32,
    /// Destination row.
    pub dstY: u32,
    /// Destination memory type.
    pub dstMemoryType: CUmemorytype,
    /// Destination host pointer.
    pub dstHost: *mut c_void,
    /// Destination device pointer.
    pub dstDevice: CUdeviceptr_v1,
    /// Destination array.
    pub dstArray: CUarray,
    /// Destination pitch.
    pub dstPitch: u32,
    /// Width of the copy in bytes.
    pub WidthInBytes: u32,
    /// Rows to copy.
    pub Height: u32,
}

/// `CUDA_MEMCPY3D` (`_v2`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEMCPY3D {
    /// Source X in bytes.
    pub srcXInBytes: usize,
    /// Source row.
    pub srcY: usize,
    /// Source slice.
    pub srcZ: usize,
    /// Source mip level.
    pub srcLOD: usize,
    /// Source memory type.
    pub srcMemoryType: CUmemorytype,
    /// Source host pointer.
    pub srcHost: *const c_void,
    /// Source device pointer.
    pub srcDevice: CUdeviceptr,
    /// Source array.
    pub srcArray: CUarray,
    /// Must be null.
    pub reserved0: *mut c_void,
    /// Source pitch.
    pub srcPitch: usize,
    /// Source height.
    pub srcHeight: usize,
    /// Destination X in bytes.
    pub dstXInBytes: usize,
    /// Destination row.
    pub dstY: usize,
    /// Destination slice.
    pub dstZ: usize,
    /// Destination mip level.
    pub dstLOD: usize,
    /// Destination memory type.
    pub dstMemoryType: CUmemorytype,
    /// Destination host pointer.
    pub dstHost: *mut c_void,
    /// Destination device pointer.
    pub dstDevice: CUdeviceptr,
    /// Destination array.
    pub dstArray: CUarray,
    /// Must be null.
    pub reserved1: *mut c_void,
    /// Destination pitch.
    pub dstPitch: usize,
    /// Destination height.
    pub dstHeight: usize,
    /// Width of the copy in bytes.
    pub WidthInBytes: usize,
    /// Rows to copy.
    pub Height: usize,
    /// Slices to copy.
    pub Depth: usize,
}

/// `CUDA_MEMCPY3D_PEER`: a 3D copy between contexts.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_MEMCPY3D_PEER {
    /// Source X in bytes.
    pub srcXInBytes: usize,
    /// Source row.
    pub srcY: usize,
    /// Source slice.
    pub srcZ: usize,
    /// Source mip level.
    pub srcLOD: usize,
    /// Source memory type.
    pub srcMemoryType: CUmemorytype,
    /// Source host pointer.
    pub srcHost: *const c_void,
    /// Source device pointer.
    pub srcDevice: CUdeviceptr,
    /// Source array.
    pub srcArray: CUarray,
    /// Source context.
    pub srcContext: CUcontext,
    /// Source pitch.
    pub srcPitch: usize,
    /// Source height.
    pub srcHeight: usize,
    /// Destination X in bytes.
    pub dstXInBytes: usize,
    /// Destination row.
    pub dstY: usize,
    /// Destination slice.
    pub dstZ: usize,
    /// Destination mip level.
    pub dstLOD: usize,
    /// Destination memory type.
    pub dstMemoryType: CUmemorytype,
    /// Destination host pointer.
    pub dstHost: *mut c_void,
    /// Destination device pointer.
    pub dstDevice: CUdeviceptr,
    /// Destination array.
    pub dstArray: CUarray,
    /// Destination context.
    pub dstContext: CUcontext,
    /// Destination pitch.
    pub dstPitch: usize,
    /// Destination height.
    pub dstHeight: usize,
    /// Width of the copy in bytes.
    pub WidthInBytes: usize,
    /// Rows to copy.
    pub Height: usize,
    /// Slices to copy.
    pub Depth: usize,
}

/// Bytes per channel of an array element of `format`, `None` for formats the simulator does not
/// size (block-compressed and video formats).
pub fn array_format_bytes(format: CUarray_format) -> Option<u64> {
    Some(match format {
        CU_AD_FORMAT_UNSIGNED_INT8 | CU_AD_FORMAT_SIGNED_INT8 => 1,
        CU_AD_FORMAT_UNSIGNED_INT16 | CU_AD_FORMAT_SIGNED_INT16 | CU_AD_FORMAT_HALF => 2,
        CU_AD_FORMAT_UNSIGNED_INT32 | CU_AD_FORMAT_SIGNED_INT32 | CU_AD_FORMAT_FLOAT => 4,
        CU_AD_FORMAT_UNORM_INT8X1 | CU_AD_FORMAT_SNORM_INT8X1 => 1,
        CU_AD_FORMAT_UNORM_INT8X2 | CU_AD_FORMAT_SNORM_INT8X2 => 2,
        CU_AD_FORMAT_UNORM_INT8X4 | CU_AD_FORMAT_SNORM_INT8X4 => 4,
        CU_AD_FORMAT_UNORM_INT16X1 | CU_AD_FORMAT_SNORM_INT16X1 => 2,
        CU_AD_FORMAT_UNORM_INT16X2 | CU_AD_FORMAT_SNORM_INT16X2 => 4,
        CU_AD_FORMAT_UNORM_INT16X4 | CU_AD_FORMAT_SNORM_INT16X4 => 8,
        CU_AD_FORMAT_UNORM_INT_101010_2 => 4,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn struct_sizes_match_cuda_h() {
        assert_eq!(size_of::<CUipcMemHandle>(), 64);
        assert_eq!(size_of::<CUipcEventHandle>(), 64);
        assert_eq!(size_of::<CUmemLocation>(), 8);
        assert_eq!(size_of::<CUmemAccessDesc>(), 12);
        assert_eq!(size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(offset_of!(CUmemAllocationProp, win32HandleMetaData), 16);
        assert_eq!(offset_of!(CUmemAllocationProp, allocFlags), 24);
        assert_eq!(size_of::<CUmemPoolProps>(), 88);
        assert_eq!(offset_of!(CUmemPoolProps, maxSize), 24);
        assert_eq!(offset_of!(CUmemPoolProps, usage), 32);
        assert_eq!(size_of::<CUmemPoolPtrExportData>(), 64);
        assert_eq!(size_of::<CUDA_MEM_ALLOC_NODE_PARAMS>(), 120);
        assert_eq!(offset_of!(CUDA_MEM_ALLOC_NODE_PARAMS, dptr), 112);
        assert_eq!(size_of::<CUDA_ARRAY_DESCRIPTOR>(), 24);
        assert_eq!(size_of::<CUDA_ARRAY_DESCRIPTOR_v1>(), 16);
        assert_eq!(size_of::<CUDA_ARRAY3D_DESCRIPTOR>(), 40);
        assert_eq!(size_of::<CUDA_ARRAY3D_DESCRIPTOR_v1>(), 24);
        assert_eq!(size_of::<CUDA_MEMCPY2D>(), 128);
        assert_eq!(offset_of!(CUDA_MEMCPY2D, dstXInBytes), 56);
        assert_eq!(size_of::<CUDA_MEMCPY2D_v1>(), 96);
        assert_eq!(size_of::<CUDA_MEMCPY3D>(), 200);
        assert_eq!(offset_of!(CUDA_MEMCPY3D, dstXInBytes), 88);
        assert_eq!(size_of::<CUDA_MEMCPY3D_PEER>(), 200);
    }

    #[test]
    fn exact_values() {
        assert_eq!(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 4);
        assert_eq!(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 8);
        assert_eq!(CU_AD_FORMAT_FLOAT, 0x20);
        assert_eq!(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1);
        assert_eq!(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 3);
        assert_eq!(CU_MEMORYTYPE_DEVICE, 2);
        assert_eq!(array_format_bytes(CU_AD_FORMAT_HALF), Some(2));
    }
}
