//! Queries of the real driver that the memory gate and the wrappers share: the current device,
//! a device's UUID and real total, what pools and graphs reserve, and running work in stream
//! order. Calls only the real functions (`real!` / `call!`), never a wrapper or the gate.

use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use std::ffi::c_void;

pub(crate) const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: u32 = 2;

/// Ordinal of the current context's device.
pub(crate) fn current_device() -> Option<CUdevice> {
    let f = real!(cuda_sym cuCtxGetDevice)?;
    let mut d: CUdevice = -1;
    // SAFETY: real cuCtxGetDevice writes one CUdevice to a valid pointer.
    (unsafe { f(&mut d) } == CUDA_SUCCESS).then_some(d)
}

/// UUID of `ordinal` as NVML spells it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
pub(crate) fn device_uuid(ordinal: CUdevice) -> Option<String> {
    let mut u = CUuuid::default();
    let r = if let Some(f) = real!(cuda_sym cuDeviceGetUuid_v2) {
        // SAFETY: writes 16 bytes into `u`.
        unsafe { f(&mut u, ordinal) }
    } else {
        let f = real!(cuda_sym cuDeviceGetUuid)?;
        // SAFETY: as above.
        unsafe { f(&mut u, ordinal) }
    };
    if r != CUDA_SUCCESS {
        return None;
    }
    let b: Vec<u8> = u
        .bytes
        .iter()
        .map(|&c| u8::from_ne_bytes(c.to_ne_bytes()))
        .collect();
    let hex = |r: std::ops::Range<usize>| {
        b.get(r)
            .unwrap_or_default()
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    };
    Some(format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    ))
}

/// The real total memory of `ordinal`.
pub(crate) fn real_total(ordinal: CUdevice) -> Option<u64> {
    let f = real!(cuda_sym cuDeviceTotalMem_v2)?;
    let mut t = 0usize;
    // SAFETY: writes one size_t.
    (unsafe { f(&mut t, ordinal) } == CUDA_SUCCESS).then_some(t as u64)
}

pub(crate) fn pool_attr(pool: CUmemoryPool, attr: CUmemPool_attribute) -> Option<u64> {
    let f = crate::real!(cuda_sym cuMemPoolGetAttribute)?;
    let mut v: u64 = 0;
    // SAFETY: the reserved / used attributes are cuuint64_t out-values.
    let r = unsafe { f(pool, attr, (&mut v as *mut u64).cast()) };
    (r == CUDA_SUCCESS).then_some(v)
}

pub(crate) fn current_pool(ordinal: CUdevice) -> Option<CUmemoryPool> {
    let f = crate::real!(cuda_sym cuDeviceGetMemPool)?;
    let mut p: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: writes one handle.
    (unsafe { f(&mut p, ordinal) } == CUDA_SUCCESS && !p.is_null()).then_some(p)
}

/// Runs `f` when `stream` reaches this point (a host function enqueued with
/// `cuLaunchHostFunc`); runs it at once if that cannot be enqueued.
pub(crate) fn in_stream_order(stream: CUstream, ptsz: bool, f: Box<dyn FnOnce() + Send>) {
    extern "C" fn trampoline(data: *mut c_void) {
        // SAFETY: `data` is the Box<Box<dyn FnOnce>> leaked below, run exactly once.
        let f = unsafe { Box::from_raw(data.cast::<Box<dyn FnOnce() + Send>>()) };
        f();
    }
    let data = Box::into_raw(Box::new(f)).cast::<c_void>();
    let cb: gpuslice_cuda_abi::exec::CUhostFn = Some(trampoline);
    let r = if ptsz {
        call!(cuLaunchHostFunc_ptsz; stream, cb, data)
    } else {
        call!(cuLaunchHostFunc; stream, cb, data)
    };
    if r != CUDA_SUCCESS {
        trampoline(data);
    }
}

pub(crate) fn reserved_by_driver(ordinal: CUdevice) -> Option<u64> {
    let f = crate::real!(cuda_sym cuDeviceGetGraphMemAttribute)?;
    let mut v: u64 = 0;
    // SAFETY: RESERVED_MEM_CURRENT is a cuuint64_t out-value.
    let r = unsafe {
        f(
            ordinal,
            CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
            (&mut v as *mut u64).cast(),
        )
    };
    (r == CUDA_SUCCESS).then_some(v)
}
