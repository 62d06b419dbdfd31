//! `cuInit`, `cuDriverGetVersion`, device enumeration, names, UUIDs, attributes, totals, PCI ids,
//! peer access queries, and `cuGetErrorName` / `cuGetErrorString`.
//!
//! Devices the application sees are the node's devices filtered and reordered by
//! `CUDA_VISIBLE_DEVICES` (indices or `GPU-` UUID prefixes, as the real driver reads it at
//! `cuInit`); [`physical`] maps an application ordinal to the ground-truth device index.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::OnceLock;

use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use gpuslice_sim_core::{DeviceSpec, Node, SimError};

/// What `cuInit` established: the node and the visible devices (physical indices).
struct Driver {
    node: &'static Node,
    visible: Vec<u32>,
}

static DRIVER: OnceLock<Result<Driver, CUresult>> = OnceLock::new();

/// Maps a ground-truth error to the driver's result code.
pub(crate) fn sim_err(e: &SimError) -> CUresult {
    match e {
        SimError::OutOfMemory { .. } => CUDA_ERROR_OUT_OF_MEMORY,
        SimError::InvalidDevice(_) => CUDA_ERROR_INVALID_DEVICE,
        _ => CUDA_ERROR_UNKNOWN,
    }
}

fn visible_devices(node: &Node) -> Vec<u32> {
    let count = node.device_count();
    let Ok(list) = std::env::var("CUDA_VISIBLE_DEVICES") else {
        return (0..count).collect();
    };
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim) {
        // The real driver stops at the first entry it cannot resolve.
        let found = if let Ok(i) = item.parse::<u32>() {
            (i < count).then_some(i)
        } else if item.starts_with("GPU-") {
            (0..count).find(|&i| {
                node.device(i)
                    .map(|d| d.uuid.starts_with(item))
                    .unwrap_or(false)
            })
        } else {
            None
        };
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            _ => break,
        }
    }
    out
}

fn init_driver() -> Result<Driver, CUresult> {
    let node = Node::global().map_err(|e| match e {
        SimError::Config(_) | SimError::State(_) | SimError::ProcessTableFull(_) => {
            CUDA_ERROR_NOT_INITIALIZED
        }
        other => sim_err(&other),
    })?;
    let visible = visible_devices(node);
    if visible.is_empty() {
        return Err(CUDA_ERROR_NO_DEVICE);
    }
    Ok(Driver { node, visible })
}

fn driver() -> Result<&'static Driver, CUresult> {
    match DRIVER.get() {
        Some(Ok(d)) => Ok(d),
        Some(Err(e)) => Err(*e),
        None => Err(CUDA_ERROR_NOT_INITIALIZED),
    }
}

/// The node, or `CUDA_ERROR_NOT_INITIALIZED` before a successful `cuInit`.
pub(crate) fn node() -> Result<&'static Node, CUresult> {
    driver().map(|d| d.node)
}

/// Number of devices the application sees (0 before `cuInit`).
pub(crate) fn visible_count() -> usize {
    driver().map(|d| d.visible.len()).unwrap_or(0)
}

/// Ground-truth index of application ordinal `dev` (`CUDA_ERROR_INVALID_DEVICE` if out of range).
pub(crate) fn physical(dev: CUdevice) -> Result<u32, CUresult> {
    let d = driver()?;
    usize::try_from(dev)
        .ok()
        .and_then(|i| d.visible.get(i).copied())
        .ok_or(CUDA_ERROR_INVALID_DEVICE)
}

/// The spec of application ordinal `dev`.
pub(crate) fn spec(dev: CUdevice) -> Result<&'static DeviceSpec, CUresult> {
    let n = node()?;
    let p = physical(dev)?;
    n.device(p).map_err(|e| sim_err(&e))
}

/// Allocation granularity of the simulated driver (bytes, a power of two).
pub(crate) fn granularity() -> u64 {
    node()
        .map(|n| n.config().alloc_granularity)
        .ok()
        .filter(|g| *g > 0)
        .unwrap_or(2 << 20)
}

/// Rounds `bytes` up to a multiple of `align` (saturating).
pub(crate) fn round_up(bytes: u64, align: u64) -> u64 {
    if align == 0 {
        return bytes;
    }
    bytes.div_ceil(align).saturating_mul(align)
}

/// The 16 raw bytes of a `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` UUID string.
pub(crate) fn uuid_bytes(uuid: &str) -> [u8; 16] {
    let hex: Vec<u8> = uuid
        .trim_start_matches("GPU-")
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .collect();
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).take(16).enumerate() {
        let s = std::str::from_utf8(pair).unwrap_or("0");
        out[i] = u8::from_str_radix(s, 16).unwrap_or(0);
    }
    out
}

/// `(domain, bus, device, function)` of a `DDDDDDDD:BB:DD.F` / `DDDD:BB:DD.F` / `BB:DD.F` id.
fn parse_pci(id: &str) -> Option<(u32, u32, u32, u32)> {
    let id = id.trim().trim_end_matches('\0');
    let (rest, func) = id.rsplit_once('.')?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (dom, bus, dev) = match parts.as_slice() {
        [d, b, v] => (*d, *b, *v),
        [b, v] => ("0", *b, *v),
        _ => return None,
    };
    Some((
        u32::from_str_radix(dom, 16).ok()?,
        u32::from_str_radix(bus, 16).ok()?,
        u32::from_str_radix(dev, 16).ok()?,
        u32::from_str_radix(func, 16).ok()?,
    ))
}

/// Copies `s` NUL-terminated into `dst[..len]` (truncating like the driver).
///
/// # Safety
/// `dst` must be valid for `len` bytes of writes.
pub(crate) unsafe fn write_cstr(dst: *mut c_char, len: c_int, s: &str) -> CUresult {
    if dst.is_null() || len <= 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let cap = len as usize - 1;
    let bytes = s.as_bytes();
    let n = bytes.len().min(cap);
    // SAFETY: the caller guarantees `dst` holds `len` bytes; we write `n + 1 <= len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), dst, n);
        *dst.add(n) = 0;
    }
    CUDA_SUCCESS
}

/// Stores `v` through `out` after a null check.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) -> CUresult {
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null, and the caller guarantees it is valid for writes.
    unsafe { out.write(v) };
    CUDA_SUCCESS
}

/// Turns a `Result<(), CUresult>` into the C return value.
pub(crate) fn rc(r: Result<(), CUresult>) -> CUresult {
    match r {
        Ok(()) => CUDA_SUCCESS,
        Err(e) => e,
    }
}

/// `cuInit`.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match DRIVER.get_or_init(init_driver) {
        Ok(_) => CUDA_SUCCESS,
        Err(e) => *e,
    }
}

/// `cuDriverGetVersion` (works before `cuInit`).
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(driver_version: *mut c_int) -> CUresult {
    if driver_version.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: null-checked above; the caller provides a valid int.
    unsafe { put(driver_version, version()) }
}

/// The driver version the simulator advertises (`GPUSLICE_SIM_DRIVER_VERSION`, e.g. 13000).
pub(crate) fn version() -> c_int {
    match Node::global() {
        Ok(n) => n.config().driver_version,
        Err(_) => 12090,
    }
}

/// `cuDeviceGet`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    if let Err(e) = driver() {
        return e;
    }
    if device.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match physical(ordinal) {
        // SAFETY: null-checked above.
        Ok(_) => unsafe { put(device, ordinal) },
        Err(e) => e,
    }
}

/// `cuDeviceGetCount`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    if let Err(e) = driver() {
        return e;
    }
    // SAFETY: `put` null-checks; the caller provides a valid int otherwise.
    unsafe { put(count, visible_count() as c_int) }
}

/// `cuDeviceGetName`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    match spec(dev) {
        // SAFETY: the caller provides `len` writable bytes at `name`.
        Ok(s) => unsafe { write_cstr(name, len, &s.name) },
        Err(e) => e,
    }
}

/// `cuDeviceGetUuid`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    let s = match spec(dev) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let mut out = CUuuid::default();
    for (d, b) in out.bytes.iter_mut().zip(uuid_bytes(&s.uuid)) {
        *d = b as c_char;
    }
    // SAFETY: `put` null-checks; the caller provides a valid CUuuid otherwise.
    unsafe { put(uuid, out) }
}

/// `cuDeviceGetUuid_v2` (same answer: the simulator has no MIG instances).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    // SAFETY: same contract as cuDeviceGetUuid.
    unsafe { cuDeviceGetUuid(uuid, dev) }
}

/// `cuDeviceTotalMem_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    match spec(dev) {
        // SAFETY: `put` null-checks.
        Ok(s) => unsafe { put(bytes, s.total_mem as usize) },
        Err(e) => e,
    }
}

/// `cuDeviceTotalMem` (legacy 32-bit size, saturated).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, dev: CUdevice) -> CUresult {
    match spec(dev) {
        // SAFETY: `put` null-checks.
        Ok(s) => unsafe { put(bytes, u32::try_from(s.total_mem).unwrap_or(u32::MAX)) },
        Err(e) => e,
    }
}

/// `cuDeviceComputeCapability` (deprecated).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: CUdevice,
) -> CUresult {
    let s = match spec(dev) {
        Ok(s) => s,
        Err(e) => return e,
    };
    if major.is_null() || minor.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: both null-checked above.
    unsafe {
        put(major, s.cc_major as c_int);
        put(minor, s.cc_minor as c_int)
    }
}

/// The value of `attrib` for device `dev`.
fn attribute(s: &DeviceSpec, attrib: CUdevice_attribute) -> Option<c_int> {
    let (_, bus, devno, _) = parse_pci(&s.pci_bus_id).unwrap_or((0, 0, 0, 0));
    let (ma, mi) = (s.cc_major as c_int, s.cc_minor as c_int);
    let l2: c_int = if ma >= 9 {
        50 << 20
    } else if ma >= 8 {
        40 << 20
    } else {
        6 << 20
    };
    let smem_per_sm: c_int = if ma >= 9 {
        233_472
    } else if ma >= 8 {
        167_936
    } else {
        65_536
    };
    Some(match attrib {
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X | CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y => 1024,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z => 64,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X => i32::MAX,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y | CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z => 65_535,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK => 49_152,
        CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY => 65_536,
        CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
        CU_DEVICE_ATTRIBUTE_MAX_PITCH => i32::MAX,
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK => 65_536,
        CU_DEVICE_ATTRIBUTE_CLOCK_RATE => 1_755_000,
        CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT => 512,
        CU_DEVICE_ATTRIBUTE_GPU_OVERLAP => 1,
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => s.sm_count as c_int,
        CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT => 0,
        CU_DEVICE_ATTRIBUTE_INTEGRATED => 0,
        CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY => 1,
        CU_DEVICE_ATTRIBUTE_COMPUTE_MODE => CU_COMPUTEMODE_DEFAULT as c_int,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH => 131_072,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH => 131_072,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT => 65_536,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH
        | CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT
        | CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH => 16_384,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH
        | CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS => 2048,
        CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT => 512,
        CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS => 1,
        CU_DEVICE_ATTRIBUTE_ECC_ENABLED => 1,
        CU_DEVICE_ATTRIBUTE_PCI_BUS_ID => bus as c_int,
        CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID => devno as c_int,
        CU_DEVICE_ATTRIBUTE_TCC_DRIVER => 0,
        CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE => 2_619_000,
        CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH => 5120,
        CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE => l2,
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => 2048,
        CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT => 3,
        CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING => 1,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS => 2048,
        CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER => 1,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH
        | CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE
        | CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE => 8192,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE => 32_768,
        CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID => 0,
        CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT => 32,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS => 2046,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH => 131_072,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT => 65_536,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH => 16_384,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT => 16_384,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH => 16_384,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS => 2048,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS => 2048,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS => 2046,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH => 268_435_456,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH
        | CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT => 131_072,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH => 2_097_120,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH
        | CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT => 32_768,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => ma,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => mi,
        CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH => 32_768,
        CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED
        | CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => smem_per_sm,
        CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR => 65_536,
        CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY => 1,
        CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD => 0,
        CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID => s.minor as c_int,
        CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO => 2,
        CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS => 0,
        CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS => 1,
        CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM => 1,
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 => 0,
        CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1 => 0,
        CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1 => 0,
        CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH => 1,
        CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH => 0,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => smem_per_sm - 1024,
        CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES => 0,
        CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES => 0,
        CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST => 0,
        CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED
        | CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR => 32,
        CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE => l2 / 4 * 3,
        CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE => 134_213_632,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK => 1024,
        CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS => 0,
        CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING => 0,
        CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES => CU_MEM_HANDLE_TYPE_POSIX as c_int,
        CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH => c_int::from(ma >= 9),
        CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS
        | CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR => 1,
        CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED => 1,
        CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT => {
            if ma >= 9 {
                4
            } else {
                1
            }
        }
        CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED => c_int::from(ma >= 9),
        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS => 1,
        CU_DEVICE_ATTRIBUTE_NUMA_CONFIG => 0,
        CU_DEVICE_ATTRIBUTE_NUMA_ID => -1,
        CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_MPS_ENABLED => 0,
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID => -1,
        CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED | CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED => 0,
        CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK
        | CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH => 0,
        CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID => 0x2330_10de,
        CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID => 0x16c1_10de,
        CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        | CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED
        | CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED => 0,
        _ => return None,
    })
}

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`, the only shareable handle type simulated.
const CU_MEM_HANDLE_TYPE_POSIX: u32 =
    gpuslice_cuda_abi::memory::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

/// `cuDeviceGetAttribute`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: CUdevice_attribute,
    dev: CUdevice,
) -> CUresult {
    let s = match spec(dev) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match attribute(s, attrib) {
        // SAFETY: `put` null-checks.
        Some(v) => unsafe { put(pi, v) },
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// The CUDA spelling (`DDDD:BB:DD.F`) of the device's PCI bus id.
pub(crate) fn cuda_pci_id(s: &DeviceSpec) -> String {
    let (d, b, v, f) = parse_pci(&s.pci_bus_id).unwrap_or((0, 0, 0, 0));
    format!("{:04x}:{:02x}:{:02x}.{:x}", d & 0xffff, b, v, f)
}

/// `cuDeviceGetPCIBusId`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(
    pci_bus_id: *mut c_char,
    len: c_int,
    dev: CUdevice,
) -> CUresult {
    match spec(dev) {
        // SAFETY: the caller provides `len` writable bytes.
        Ok(s) => unsafe { write_cstr(pci_bus_id, len, &cuda_pci_id(s)) },
        Err(e) => e,
    }
}

/// `cuDeviceGetByPCIBusId`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(
    dev: *mut CUdevice,
    pci_bus_id: *const c_char,
) -> CUresult {
    let n = match node() {
        Ok(n) => n,
        Err(e) => return e,
    };
    if dev.is_null() || pci_bus_id.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let want = unsafe { std::ffi::CStr::from_ptr(pci_bus_id) };
    let Some(want) = want.to_str().ok().and_then(parse_pci) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    for i in 0..visible_count() {
        let ordinal = i as CUdevice;
        let Ok(p) = physical(ordinal) else { continue };
        let Ok(s) = n.device(p) else { continue };
        if parse_pci(&s.pci_bus_id) == Some(want) {
            // SAFETY: null-checked above.
            return unsafe { put(dev, ordinal) };
        }
    }
    CUDA_ERROR_INVALID_DEVICE
}

/// `cuDeviceCanAccessPeer`: distinct simulated devices can access each other.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    can_access_peer: *mut c_int,
    dev: CUdevice,
    peer_dev: CUdevice,
) -> CUresult {
    if let Err(e) = physical(dev).and_then(|_| physical(peer_dev)) {
        return e;
    }
    // SAFETY: `put` null-checks.
    unsafe { put(can_access_peer, c_int::from(dev != peer_dev)) }
}

/// `cuDeviceGetP2PAttribute`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetP2PAttribute(
    value: *mut c_int,
    attrib: CUdevice_P2PAttribute,
    src: CUdevice,
    dst: CUdevice,
) -> CUresult {
    if let Err(e) = physical(src).and_then(|_| physical(dst)) {
        return e;
    }
    if src == dst {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    let v = match attrib {
        CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK => 0,
        CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED
        | CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED
        | CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED => 1,
        _ => return CUDA_ERROR_INVALID_VALUE,
    };
    // SAFETY: `put` null-checks.
    unsafe { put(value, v) }
}

/// `cuGetErrorName`.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    if p_str.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let s = result_name(error).and_then(static_cstr);
    // SAFETY: null-checked above.
    unsafe { p_str.write(s.unwrap_or(std::ptr::null())) };
    if s.is_some() {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

/// `cuGetErrorString`.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    if p_str.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let s = result_description(error).and_then(static_cstr);
    // SAFETY: null-checked above.
    unsafe { p_str.write(s.unwrap_or(std::ptr::null())) };
    if s.is_some() {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

/// A process-lifetime NUL-terminated copy of a static string (interned, so each is leaked once).
fn static_cstr(s: &'static str) -> Option<*const c_char> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static CACHE: OnceLock<Mutex<HashMap<&'static str, usize>>> = OnceLock::new();
    let mut map = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let addr = *map.entry(s).or_insert_with(|| {
        let c = std::ffi::CString::new(s).unwrap_or_default();
        c.into_raw() as usize
    });
    Some(addr as *const c_char)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_and_pci_parsing() {
        let b = uuid_bytes("GPU-01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(b[0], 0x01);
        assert_eq!(b[15], 0xef);
        assert_eq!(parse_pci("00000000:18:00.0"), Some((0, 0x18, 0, 0)));
        assert_eq!(parse_pci("0000:2A:00.0"), Some((0, 0x2a, 0, 0)));
        assert_eq!(parse_pci("2a:00.0"), Some((0, 0x2a, 0, 0)));
        assert_eq!(parse_pci("junk"), None);
        assert_eq!(round_up(1, 512), 512);
        assert_eq!(round_up(1024, 512), 1024);
    }
}
