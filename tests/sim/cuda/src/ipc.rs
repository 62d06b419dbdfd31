//! IPC memory handles: `cuIpcGetMemHandle`, `cuIpcOpenMemHandle` / `_v2`, `cuIpcCloseMemHandle`.
//!
//! A handle names the exporter `(pid, start time)`, the exported base address, its size and the
//! device (by UUID bytes, so it survives different `CUDA_VISIBLE_DEVICES` orders). Opening maps
//! the range at a fresh address in the importer and charges nobody (the exporter owns the memory);
//! opening the same handle again returns the same address (reference counted); opening a handle
//! of a process that has exited, or one's own handle, fails like the real driver.

use std::collections::HashMap;
use std::ffi::{c_char, c_uint};
use std::sync::{Mutex, MutexGuard, OnceLock};

use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use gpuslice_sim_core::procs;

use crate::context;
use crate::device::{self, rc};
use crate::memory::{self, Kind, Range};

const MAGIC: u32 = 0x4753_4950; // "GSIP"

/// Decoded handle contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Exported {
    pid: u32,
    start: u64,
    base: u64,
    size: u64,
    uuid: [u8; 16],
}

impl Exported {
    fn encode(&self) -> CUipcMemHandle {
        let mut b = [0u8; CU_IPC_HANDLE_SIZE];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.pid.to_le_bytes());
        b[8..16].copy_from_slice(&self.start.to_le_bytes());
        b[16..24].copy_from_slice(&self.base.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b[32..48].copy_from_slice(&self.uuid);
        let mut h = CUipcMemHandle::default();
        for (d, s) in h.reserved.iter_mut().zip(b) {
            *d = s as c_char;
        }
        h
    }

    fn decode(h: &CUipcMemHandle) -> Option<Exported> {
        let b: Vec<u8> = h.reserved.iter().map(|c| *c as u8).collect();
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        if u32_at(0) != MAGIC {
            return None;
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[32..48]);
        Some(Exported {
            pid: u32_at(4),
            start: u64_at(8),
            base: u64_at(16),
            size: u64_at(24),
            uuid,
        })
    }
}

#[derive(Default)]
struct Opened {
    /// Handle contents → (local base, reference count).
    by_handle: HashMap<Exported, (CUdeviceptr, u32)>,
    /// Local base → handle contents.
    by_base: HashMap<CUdeviceptr, Exported>,
}

fn opened() -> MutexGuard<'static, Opened> {
    static O: OnceLock<Mutex<Opened>> = OnceLock::new();
    O.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// `cuIpcGetMemHandle`: `dptr` must be the base of a `cuMemAlloc` allocation.
#[no_mangle]
pub unsafe extern "C" fn cuIpcGetMemHandle(
    handle: *mut CUipcMemHandle,
    dptr: CUdeviceptr,
) -> CUresult {
    let r = (|| {
        context::current()?;
        if handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let range = memory::find(dptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if range.kind != Kind::Device {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let spec = device::spec(range.device)?;
        let (pid, start) = procs::self_identity();
        let e = Exported {
            pid,
            start,
            base: range.base,
            size: range.size,
            uuid: device::uuid_bytes(&spec.uuid),
        };
        // SAFETY: null-checked above.
        unsafe { handle.write(e.encode()) };
        Ok(())
    })();
    rc(r)
}

fn open(pdptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: c_uint) -> Result<(), CUresult> {
    let ctx = context::current()?;
    if pdptr.is_null() || flags & !CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let e = Exported::decode(&handle).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let (me, my_start) = procs::self_identity();
    if e.pid == me && e.start == my_start {
        // The real driver refuses to open a handle in the process that exported it.
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    if !procs::alive(e.pid, e.start) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // Find the exporter's device among ours (by UUID).
    let node = device::node()?;
    let mut dev = None;
    for i in 0..device::visible_count() {
        let ordinal = i as CUdevice;
        if let Ok(p) = device::physical(ordinal) {
            if node
                .device(p)
                .is_ok_and(|s| device::uuid_bytes(&s.uuid) == e.uuid)
            {
                dev = Some((ordinal, p));
            }
        }
    }
    let (dev, phys) = dev.ok_or(CUDA_ERROR_INVALID_DEVICE)?;
    let mut o = opened();
    if let Some((base, refs)) = o.by_handle.get_mut(&e) {
        *refs += 1;
        // SAFETY: null-checked above.
        unsafe { pdptr.write(*base) };
        return Ok(());
    }
    let base = memory::reserve_va(e.size.max(1), device::granularity())?;
    memory::register(Range {
        base,
        size: e.size,
        charged: 0,
        kind: Kind::Ipc,
        ctx_id: ctx.id,
        device: dev,
        phys,
        ctx_handle: ctx.handle() as usize,
        buffer_id: memory::next_buffer_id(),
    });
    o.by_handle.insert(e, (base, 1));
    o.by_base.insert(base, e);
    // SAFETY: null-checked above.
    unsafe { pdptr.write(base) };
    Ok(())
}

/// `cuIpcOpenMemHandle` (legacy export; same arguments as `_v2`).
#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: c_uint,
) -> CUresult {
    rc(open(pdptr, handle, flags))
}

/// `cuIpcOpenMemHandle_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: c_uint,
) -> CUresult {
    rc(open(pdptr, handle, flags))
}

/// `cuIpcCloseMemHandle`.
#[no_mangle]
pub unsafe extern "C" fn cuIpcCloseMemHandle(dptr: CUdeviceptr) -> CUresult {
    let r = (|| {
        context::current()?;
        let mut o = opened();
        let e = *o.by_base.get(&dptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let last = match o.by_handle.get_mut(&e) {
            Some((_, refs)) => {
                *refs -= 1;
                *refs == 0
            }
            None => true,
        };
        if last {
            o.by_handle.remove(&e);
            o.by_base.remove(&dptr);
            memory::unregister(dptr);
        }
        Ok(())
    })();
    rc(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_round_trip() {
        let e = Exported {
            pid: 42,
            start: 7,
            base: 0x7f00_0020_0000,
            size: 12345,
            uuid: [9; 16],
        };
        assert_eq!(Exported::decode(&e.encode()), Some(e));
        assert_eq!(Exported::decode(&CUipcMemHandle::default()), None);
    }
}
