//! NVML types and constants (nvml.h) used by the interposer's memory queries and by the simulated
//! `libnvidia-ml.so.1`: return codes, the device handle, memory structs and buffer sizes.

#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

/// `nvmlReturn_t` (C enum, 32-bit).
pub type nvmlReturn_t = u32;
/// `NVML_SUCCESS`.
pub const NVML_SUCCESS: nvmlReturn_t = 0;
/// `NVML_ERROR_UNINITIALIZED`.
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
/// `NVML_ERROR_INVALID_ARGUMENT`.
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
/// `NVML_ERROR_NOT_SUPPORTED`.
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
/// `NVML_ERROR_NO_PERMISSION`.
pub const NVML_ERROR_NO_PERMISSION: nvmlReturn_t = 4;
/// `NVML_ERROR_NOT_FOUND`.
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
/// `NVML_ERROR_INSUFFICIENT_SIZE`.
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
/// `NVML_ERROR_DRIVER_NOT_LOADED`.
pub const NVML_ERROR_DRIVER_NOT_LOADED: nvmlReturn_t = 9;
/// `NVML_ERROR_GPU_IS_LOST`.
pub const NVML_ERROR_GPU_IS_LOST: nvmlReturn_t = 15;
/// `NVML_ERROR_FUNCTION_NOT_FOUND`.
pub const NVML_ERROR_FUNCTION_NOT_FOUND: nvmlReturn_t = 13;
/// `NVML_ERROR_LIBRARY_NOT_FOUND`.
pub const NVML_ERROR_LIBRARY_NOT_FOUND: nvmlReturn_t = 12;
/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`.
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
/// `NVML_ERROR_UNKNOWN`.
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

/// Opaque `struct nvmlDevice_st`.
#[repr(C)]
pub struct nvmlDevice_st {
    _private: [u8; 0],
}
/// `nvmlDevice_t`.
pub type nvmlDevice_t = *mut nvmlDevice_st;

/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
pub const NVML_DEVICE_UUID_V2_BUFFER_SIZE: usize = 96;
/// `NVML_DEVICE_NAME_V2_BUFFER_SIZE`.
pub const NVML_DEVICE_NAME_V2_BUFFER_SIZE: usize = 96;
/// `NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE`.
pub const NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE: usize = 80;

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nvmlMemory_t {
    /// Total physical device memory.
    pub total: u64,
    /// Unallocated device memory.
    pub free: u64,
    /// Reserved plus allocated device memory.
    pub used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nvmlMemory_v2_t {
    /// Must be [`nvmlMemory_v2`].
    pub version: u32,
    /// Total physical device memory.
    pub total: u64,
    /// Memory reserved for system use.
    pub reserved: u64,
    /// Unallocated device memory.
    pub free: u64,
    /// Allocated device memory.
    pub used: u64,
}

/// `nvmlMemory_v2` = `NVML_STRUCT_VERSION(Memory, 2)` = `sizeof(nvmlMemory_v2_t) | 2 << 24`.
// The struct's size (a few dozen bytes) in the low bits, as NVML's NVML_STRUCT_VERSION macro.
#[allow(clippy::cast_possible_truncation)]
pub const nvmlMemory_v2: u32 = (std::mem::size_of::<nvmlMemory_v2_t>() as u32) | (2 << 24);

/// `nvmlProcessInfo_t` (the v2 layout used by `nvmlDeviceGetComputeRunningProcesses_v3`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nvmlProcessInfo_t {
    /// Process id.
    pub pid: u32,
    /// Bytes of device memory used by the process.
    pub usedGpuMemory: u64,
    /// MIG GPU instance id (0xFFFFFFFF when not MIG).
    pub gpuInstanceId: u32,
    /// MIG compute instance id (0xFFFFFFFF when not MIG).
    pub computeInstanceId: u32,
}

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nvmlUtilization_t {
    /// Percent of time a kernel ran over the last sample period.
    pub gpu: u32,
    /// Percent of time device memory was read or written.
    pub memory: u32,
}

const _: () = {
    assert!(std::mem::size_of::<nvmlMemory_t>() == 24);
    assert!(std::mem::size_of::<nvmlMemory_v2_t>() == 40);
    assert!(std::mem::size_of::<nvmlProcessInfo_t>() == 24);
};

/// `nvmlProcessInfo_v1_t` (the legacy unsuffixed and `_v1` list functions).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nvmlProcessInfo_v1_t {
    /// Process id.
    pub pid: u32,
    /// Bytes of device memory used.
    pub usedGpuMemory: u64,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct nvmlProcessUtilizationSample_t {
    /// Process id.
    pub pid: u32,
    /// CPU timestamp, µs.
    pub timeStamp: u64,
    /// SM utilisation, percent.
    pub smUtil: u32,
    /// Memory utilisation, percent.
    pub memUtil: u32,
    /// Encoder utilisation, percent.
    pub encUtil: u32,
    /// Decoder utilisation, percent.
    pub decUtil: u32,
}
