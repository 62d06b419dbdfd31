//! NVML ABI types: return codes and the structures the exported functions fill (per nvml.h).

#![allow(non_camel_case_types, non_snake_case, dead_code)]

use std::ffi::c_uint;

/// `nvmlReturn_t`.
pub type nvmlReturn_t = c_uint;
pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: nvmlReturn_t = 9;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

/// `nvmlPciInfo_t` (current layout, used by `_v2` and `_v3`).
#[repr(C)]
pub struct nvmlPciInfo_t {
    pub busIdLegacy: [u8; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub busId: [u8; 32],
}

/// The original `nvmlPciInfo_t` the unversioned `nvmlDeviceGetPciInfo` fills (52 bytes).
#[repr(C)]
pub struct nvmlPciInfo_v1_t {
    pub busId: [u8; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub reserved: [c_uint; 4],
}

#[repr(C)]
pub struct nvmlMemory_t {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

#[repr(C)]
pub struct nvmlMemory_v2_t {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`.
pub const NVML_MEMORY_V2: c_uint = (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);

#[repr(C)]
pub struct nvmlUtilization_t {
    pub gpu: c_uint,
    pub memory: c_uint,
}

#[repr(C)]
pub struct nvmlProcessInfo_v1_t {
    pub pid: c_uint,
    pub usedGpuMemory: u64,
}

/// `nvmlProcessInfo_v2_t` = `nvmlProcessInfo_t` (also used by `_v3`).
#[repr(C)]
pub struct nvmlProcessInfo_t {
    pub pid: c_uint,
    pub usedGpuMemory: u64,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

#[repr(C)]
pub struct nvmlProcessUtilizationSample_t {
    pub pid: c_uint,
    pub timeStamp: u64,
    pub smUtil: c_uint,
    pub memUtil: c_uint,
    pub encUtil: c_uint,
    pub decUtil: c_uint,
}

/// Opaque device handle: a pointer into this library's static handle table.
#[repr(C)]
pub struct nvmlDevice_st {
    pub index: u32,
}
pub type nvmlDevice_t = *const nvmlDevice_st;

pub const NVML_BRAND_NVIDIA: c_uint = 14;
pub const NVML_TEMPERATURE_GPU: c_uint = 0;
/// `nvmlClockType_t`.
pub const NVML_CLOCK_GRAPHICS: c_uint = 0;
pub const NVML_CLOCK_SM: c_uint = 1;
pub const NVML_CLOCK_MEM: c_uint = 2;
pub const NVML_CLOCK_VIDEO: c_uint = 3;
/// `nvmlMemoryErrorType_t` (corrected 0, uncorrected 1) and `nvmlEccCounterType_t` (volatile 0,
/// aggregate 1).
pub const NVML_MEMORY_ERROR_TYPE_UNCORRECTED: c_uint = 1;
pub const NVML_AGGREGATE_ECC: c_uint = 1;
pub const NVML_DEVICE_ARCH_VOLTA: c_uint = 5;
pub const NVML_DEVICE_ARCH_TURING: c_uint = 6;
pub const NVML_DEVICE_ARCH_AMPERE: c_uint = 7;
pub const NVML_DEVICE_ARCH_ADA: c_uint = 8;
pub const NVML_DEVICE_ARCH_HOPPER: c_uint = 9;
pub const NVML_DEVICE_ARCH_BLACKWELL: c_uint = 10;
/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned instance id.
pub const NO_INSTANCE: c_uint = 0xffff_ffff;
