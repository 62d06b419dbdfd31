//! `cuMemAlloc*`, `cuMemFree*`, `cuMemGetInfo*`, host allocations, `cuMemcpy*` / `cuMemset*`,
//! address-range and pointer-attribute queries; the process-wide device address space.
//!
//! # Memory model
//!
//! Device memory is bookkeeping: there is no backing store, copies and memsets only validate
//! their pointers (and async ones are ordered on their stream). What is exact is the accounting
//! the ground truth (`gpuslice-sim-core`) sees, per device and per process:
//!
//! - every `cuMemAlloc`, `cuMemAllocPitch` and `cuMemAllocManaged` is charged rounded **up to the
//!   allocation granularity** (`GPUSLICE_SIM_ALLOC_GRANULARITY`, 2 MiB by default), one charge
//!   per allocation (the real driver sub-allocates small buffers; the simulator deliberately
//!   does not, so a cap can be reasoned about allocation by allocation);
//! - `cuMemAllocPitch` rounds the pitch up to 512 bytes, then charges `pitch * height`, rounded;
//! - managed memory is charged to its device like ordinary device memory;
//! - a context costs the configured per-context overhead (see `context`);
//! - stream-ordered pools charge their *reserved* memory (see `pool`), VMM charges a physical
//!   allocation once, however often it is mapped (see `vmm`), arrays charge their extent (see
//!   `array`), an opened IPC handle charges nobody new (see `ipc`);
//! - `cuMemGetInfo` answers `free = total - used` of the device across *all* processes of the
//!   node, `total` = device capacity (= `cuDeviceTotalMem`);
//! - host allocations (`cuMemHostAlloc`, `cuMemAllocHost`) are real host memory from libc and
//!   never touch device accounting.
//!
//! Device pointers come from one process-wide virtual address allocator that never reuses an
//! address (so a stale pointer is always detected); `vmm` reserves from it too, and the legacy
//! 32-bit entry points (`cuMemAlloc`, ...) get addresses from a low window that fits 32 bits.
//! Every live device range (plain, pool, VMM mapping, opened IPC handle) is in one registry used
//! by address-range queries, pointer attributes and copy validation.

use std::collections::BTreeMap;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;

use crate::context::{self, Context};
use crate::device::{self, put, rc, round_up};

/// What kind of device range an address belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `cuMemAlloc` / `cuMemAllocPitch` (and graph memory nodes through [`device_alloc`]).
    Device,
    /// `cuMemAllocManaged`.
    Managed,
    /// A stream-ordered allocation of the pool with this id.
    Pool(u64),
    /// A VMM mapping of the physical allocation with this id.
    Vmm(u64),
    /// A mapping of another process's allocation opened through an IPC handle.
    Ipc,
}

/// One live device address range.
#[derive(Clone, Debug)]
pub(crate) struct Range {
    /// First address.
    pub(crate) base: CUdeviceptr,
    /// Size the application asked for (the range's extent).
    pub(crate) size: u64,
    /// Bytes this range charged to the ground truth itself (0 when someone else accounts).
    pub(crate) charged: u64,
    /// What it is.
    pub(crate) kind: Kind,
    /// Context incarnation that owns it (0: none).
    pub(crate) ctx_id: u64,
    /// Application device ordinal.
    pub(crate) device: CUdevice,
    /// Ground-truth device index.
    pub(crate) phys: u32,
    /// The owning context's handle (for pointer attributes).
    pub(crate) ctx_handle: usize,
    /// Unique id of the range (`CU_POINTER_ATTRIBUTE_BUFFER_ID`).
    pub(crate) buffer_id: u64,
}

/// A host allocation or registration.
#[derive(Clone, Debug)]
struct HostRange {
    size: usize,
    flags: u32,
    /// true: `cuMemHostRegister`ed user memory, false: allocated by us.
    registered: bool,
    ctx_handle: usize,
    device: CUdevice,
}

#[derive(Default)]
struct Tables {
    device: BTreeMap<u64, Range>,
    host: BTreeMap<usize, HostRange>,
}

fn tables() -> MutexGuard<'static, Tables> {
    static T: OnceLock<Mutex<Tables>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Start of the 64-bit device address window.
const VA_BASE: u64 = 0x7f00_0000_0000;
/// End of the 64-bit window (1 PiB of addresses).
const VA_END: u64 = VA_BASE + (1 << 50);
/// The 32-bit window of the legacy entry points.
const VA_LOW_BASE: u64 = 0x1000_0000;
const VA_LOW_END: u64 = 0xf000_0000;

static NEXT_VA: AtomicU64 = AtomicU64::new(VA_BASE);
static NEXT_VA_LOW: AtomicU64 = AtomicU64::new(VA_LOW_BASE);
static NEXT_BUFFER_ID: AtomicU64 = AtomicU64::new(1);

fn bump(next: &AtomicU64, end: u64, size: u64, align: u64) -> Option<u64> {
    let align = align.max(256).next_power_of_two();
    let mut out = 0;
    next.fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
        let start = round_up(cur, align);
        // Leave one alignment unit between ranges so off-by-one pointers never hit a neighbour.
        let stop = start.checked_add(size.max(1))?.checked_add(align)?;
        (stop <= end).then(|| {
            out = start;
            stop
        })
    })
    .ok()
    .map(|_| out)
}

/// Reserves `size` bytes of fresh device virtual address space aligned to `align`.
pub(crate) fn reserve_va(size: u64, align: u64) -> Result<CUdeviceptr, CUresult> {
    bump(&NEXT_VA, VA_END, size, align).ok_or(CUDA_ERROR_OUT_OF_MEMORY)
}

fn reserve_va_low(size: u64) -> Result<CUdeviceptr, CUresult> {
    bump(&NEXT_VA_LOW, VA_LOW_END, size, 512).ok_or(CUDA_ERROR_OUT_OF_MEMORY)
}

/// A new unique buffer id.
pub(crate) fn next_buffer_id() -> u64 {
    NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed)
}

/// Adds a live device range to the registry.
pub(crate) fn register(r: Range) {
    tables().device.insert(r.base, r);
}

/// Removes the range starting exactly at `base`.
pub(crate) fn unregister(base: CUdeviceptr) -> Option<Range> {
    tables().device.remove(&base)
}

/// The live range containing `ptr`, if any.
pub(crate) fn find(ptr: CUdeviceptr) -> Option<Range> {
    let t = tables();
    let (_, r) = t.device.range(..=ptr).next_back()?;
    (ptr < r.base.saturating_add(r.size.max(1))).then(|| r.clone())
}

/// Removes every range owned by context `ctx_id` for which `pred` holds; returns them.
pub(crate) fn drain_where(pred: impl Fn(&Range) -> bool) -> Vec<Range> {
    let mut t = tables();
    let keys: Vec<u64> = t
        .device
        .values()
        .filter(|r| pred(r))
        .map(|r| r.base)
        .collect();
    keys.into_iter()
        .filter_map(|k| t.device.remove(&k))
        .collect()
}

/// Checks that `[ptr, ptr + len)` lies inside one live device range.
pub(crate) fn check_device_range(ptr: CUdeviceptr, len: u64) -> Result<Range, CUresult> {
    let r = find(ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let end = ptr.checked_add(len).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if end > r.base + r.size.max(1) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(r)
}

fn charge(phys: u32, bytes: u64) -> Result<(), CUresult> {
    let node = device::node()?;
    node.mem_alloc(phys, bytes).map_err(|e| device::sim_err(&e))
}

fn uncharge(phys: u32, bytes: u64) {
    if let Ok(node) = device::node() {
        node.mem_free(phys, bytes);
    }
}

fn alloc_in(ctx: &Context, bytes: u64, kind: Kind, low: bool) -> Result<CUdeviceptr, CUresult> {
    if bytes == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let charged = round_up(bytes, device::granularity());
    let base = if low {
        reserve_va_low(charged)?
    } else {
        reserve_va(charged, device::granularity())?
    };
    charge(ctx.phys, charged)?;
    register(Range {
        base,
        size: bytes,
        charged,
        kind,
        ctx_id: ctx.id,
        device: ctx.device,
        phys: ctx.phys,
        ctx_handle: ctx.handle() as usize,
        buffer_id: next_buffer_id(),
    });
    Ok(base)
}

/// Allocates `bytes` of device memory in `ctx` (charged rounded up to the granularity).
pub(crate) fn device_alloc(ctx: &Context, bytes: u64) -> Result<CUdeviceptr, CUresult> {
    alloc_in(ctx, bytes, Kind::Device, false)
}

/// Frees an allocation made by [`device_alloc`] / `cuMemAlloc*` (`ptr` must be its base).
pub(crate) fn device_free(ptr: CUdeviceptr) -> Result<(), CUresult> {
    let mut t = tables();
    match t.device.get(&ptr) {
        Some(r) if matches!(r.kind, Kind::Device | Kind::Managed) => {}
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    let r = t.device.remove(&ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    drop(t);
    uncharge(r.phys, r.charged);
    Ok(())
}

/// Frees every plain allocation of a dying context.
pub(crate) fn release_context(ctx_id: u64) {
    for r in drain_where(|r| r.ctx_id == ctx_id && matches!(r.kind, Kind::Device | Kind::Managed)) {
        uncharge(r.phys, r.charged);
    }
}

fn mem_alloc(dptr: *mut CUdeviceptr, bytes: u64) -> Result<(), CUresult> {
    let ctx = context::current()?;
    crate::capture_rules::unsafe_call()?;
    if dptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = device_alloc(&ctx, bytes)?;
    // SAFETY: null-checked above.
    unsafe { dptr.write(p) };
    Ok(())
}

/// `cuMemAlloc_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    rc(mem_alloc(dptr, bytesize as u64))
}

/// `cuMemAlloc` (legacy: 32-bit size and pointer).
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc(dptr: *mut CUdeviceptr_v1, bytesize: c_uint) -> CUresult {
    let r = (|| {
        let ctx = context::current()?;
        crate::capture_rules::unsafe_call()?;
        if dptr.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let p = alloc_in(&ctx, u64::from(bytesize), Kind::Device, true)?;
        // SAFETY: null-checked above; the low window fits 32 bits.
        unsafe { dptr.write(p as u32) };
        Ok(())
    })();
    rc(r)
}

fn alloc_pitch(width: u64, height: u64, elem: u32) -> Result<(u64, u64), CUresult> {
    if width == 0 || height == 0 || !matches!(elem, 4 | 8 | 16) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let pitch = round_up(width, 512);
    Ok((
        pitch,
        pitch.checked_mul(height).ok_or(CUDA_ERROR_INVALID_VALUE)?,
    ))
}

/// `cuMemAllocPitch_v2`: pitch rounded up to 512 bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    p_pitch: *mut usize,
    width_in_bytes: usize,
    height: usize,
    element_size_bytes: c_uint,
) -> CUresult {
    let r = (|| {
        let ctx = context::current()?;
        if dptr.is_null() || p_pitch.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (pitch, bytes) = alloc_pitch(width_in_bytes as u64, height as u64, element_size_bytes)?;
        let p = device_alloc(&ctx, bytes)?;
        // SAFETY: both null-checked above.
        unsafe {
            dptr.write(p);
            p_pitch.write(pitch as usize);
        }
        Ok(())
    })();
    rc(r)
}

/// `cuMemAllocPitch` (legacy 32-bit).
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch(
    dptr: *mut CUdeviceptr_v1,
    p_pitch: *mut c_uint,
    width_in_bytes: c_uint,
    height: c_uint,
    element_size_bytes: c_uint,
) -> CUresult {
    let r = (|| {
        let ctx = context::current()?;
        if dptr.is_null() || p_pitch.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let (pitch, bytes) = alloc_pitch(
            u64::from(width_in_bytes),
            u64::from(height),
            element_size_bytes,
        )?;
        let p = alloc_in(&ctx, bytes, Kind::Device, true)?;
        // SAFETY: both null-checked above.
        unsafe {
            dptr.write(p as u32);
            p_pitch.write(pitch as u32);
        }
        Ok(())
    })();
    rc(r)
}

/// `cuMemAllocManaged`: charged to the context's device like device memory.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    let r = (|| {
        let ctx = context::current()?;
        if dptr.is_null() || !matches!(flags, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let p = alloc_in(&ctx, bytesize as u64, Kind::Managed, false)?;
        // SAFETY: null-checked above.
        unsafe { dptr.write(p) };
        Ok(())
    })();
    rc(r)
}

fn mem_free(ptr: CUdeviceptr) -> Result<(), CUresult> {
    context::current()?;
    crate::capture_rules::unsafe_call()?;
    if ptr == 0 {
        // Freeing null is a no-op, as in the real driver.
        return Ok(());
    }
    device_free(ptr)
}

/// `cuMemFree_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    rc(mem_free(dptr))
}

/// `cuMemFree` (legacy 32-bit).
#[no_mangle]
pub unsafe extern "C" fn cuMemFree(dptr: CUdeviceptr_v1) -> CUresult {
    rc(mem_free(u64::from(dptr)))
}

fn mem_info() -> Result<(u64, u64), CUresult> {
    let ctx = context::current()?;
    let node = device::node()?;
    let total = node.mem_total(ctx.phys);
    let used = node.mem_used(ctx.phys);
    Ok((total.saturating_sub(used), total))
}

/// `cuMemGetInfo_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    match mem_info() {
        Ok((f, t)) => {
            if free.is_null() || total.is_null() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            // SAFETY: both null-checked above.
            unsafe {
                free.write(f as usize);
                total.write(t as usize);
            }
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

/// `cuMemGetInfo` (legacy 32-bit, saturated).
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CUresult {
    match mem_info() {
        Ok((f, t)) => {
            if free.is_null() || total.is_null() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            // SAFETY: both null-checked above.
            unsafe {
                free.write(u32::try_from(f).unwrap_or(u32::MAX));
                total.write(u32::try_from(t).unwrap_or(u32::MAX));
            }
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

fn address_range(ptr: CUdeviceptr) -> Result<(u64, u64), CUresult> {
    context::current()?;
    let r = find(ptr).ok_or(CUDA_ERROR_NOT_FOUND)?;
    Ok((r.base, r.size))
}

/// `cuMemGetAddressRange_v2` (either out-pointer may be null).
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    pbase: *mut CUdeviceptr,
    psize: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    match address_range(dptr) {
        Ok((b, s)) => {
            // SAFETY: each is written only when non-null.
            unsafe {
                if !pbase.is_null() {
                    pbase.write(b);
                }
                if !psize.is_null() {
                    psize.write(s as usize);
                }
            }
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

/// `cuMemGetAddressRange` (legacy 32-bit).
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange(
    pbase: *mut CUdeviceptr_v1,
    psize: *mut c_uint,
    dptr: CUdeviceptr_v1,
) -> CUresult {
    match address_range(u64::from(dptr)) {
        Ok((b, s)) => {
            // SAFETY: each is written only when non-null.
            unsafe {
                if !pbase.is_null() {
                    pbase.write(b as u32);
                }
                if !psize.is_null() {
                    psize.write(s as u32);
                }
            }
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

// ---- host memory ----

fn host_alloc(pp: *mut *mut c_void, bytesize: usize, flags: u32) -> Result<(), CUresult> {
    let ctx = context::current()?;
    if pp.is_null()
        || flags
            & !(CU_MEMHOSTALLOC_PORTABLE
                | CU_MEMHOSTALLOC_DEVICEMAP
                | CU_MEMHOSTALLOC_WRITECOMBINED)
            != 0
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if bytesize == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: posix_memalign writes an aligned allocation of `bytesize` bytes into `p`.
    let err = unsafe { libc::posix_memalign(&mut p, 4096, bytesize) };
    if err != 0 || p.is_null() {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    tables().host.insert(
        p as usize,
        HostRange {
            size: bytesize,
            flags,
            registered: false,
            ctx_handle: ctx.handle() as usize,
            device: ctx.device,
        },
    );
    // SAFETY: null-checked above.
    unsafe { pp.write(p) };
    Ok(())
}

/// `cuMemHostAlloc`: page-aligned host memory (real memory; not device accounting).
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    rc(host_alloc(pp, bytesize, flags))
}

/// `cuMemAllocHost_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    rc(host_alloc(pp, bytesize, 0))
}

/// `cuMemAllocHost` (legacy 32-bit size).
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost(pp: *mut *mut c_void, bytesize: c_uint) -> CUresult {
    rc(host_alloc(pp, bytesize as usize, 0))
}

/// `cuMemFreeHost`.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    let r = (|| {
        context::current()?;
        let mut t = tables();
        match t.host.get(&(p as usize)) {
            Some(h) if !h.registered => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        t.host.remove(&(p as usize));
        drop(t);
        // SAFETY: `p` came from posix_memalign in host_alloc and is freed exactly once
        // (removed from the table above under the lock).
        unsafe { libc::free(p) };
        Ok(())
    })();
    rc(r)
}

fn host_find(p: usize) -> Option<(usize, HostRange)> {
    let t = tables();
    let (b, h) = t.host.range(..=p).next_back()?;
    (p < b + h.size).then(|| (*b, h.clone()))
}

fn host_device_pointer(p: *mut c_void, flags: u32) -> Result<u64, CUresult> {
    context::current()?;
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    host_find(p as usize).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    // Unified addressing: the device sees host memory at the same address.
    Ok(p as u64)
}

/// `cuMemHostGetDevicePointer_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    match host_device_pointer(p, flags) {
        // SAFETY: `put` null-checks.
        Ok(d) => unsafe { put(pdptr, d) },
        Err(e) => e,
    }
}

/// `cuMemHostGetDevicePointer` (legacy 32-bit: only addresses below 4 GiB are representable).
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer(
    pdptr: *mut CUdeviceptr_v1,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    match host_device_pointer(p, flags) {
        Ok(d) => match u32::try_from(d) {
            // SAFETY: `put` null-checks.
            Ok(v) => unsafe { put(pdptr, v) },
            Err(_) => CUDA_ERROR_NOT_SUPPORTED,
        },
        Err(e) => e,
    }
}

/// `cuMemHostGetFlags`.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetFlags(p_flags: *mut c_uint, p: *mut c_void) -> CUresult {
    if let Err(e) = context::current() {
        return e;
    }
    match host_find(p as usize) {
        // SAFETY: `put` null-checks.
        Some((_, h)) => unsafe { put(p_flags, h.flags) },
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

fn host_register(p: *mut c_void, bytesize: usize, flags: u32) -> Result<(), CUresult> {
    let ctx = context::current()?;
    let all = CU_MEMHOSTREGISTER_PORTABLE
        | CU_MEMHOSTREGISTER_DEVICEMAP
        | CU_MEMHOSTREGISTER_IOMEMORY
        | CU_MEMHOSTREGISTER_READ_ONLY;
    if p.is_null() || bytesize == 0 || flags & !all != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let start = p as usize;
    let end = start
        .checked_add(bytesize)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let mut t = tables();
    let overlaps = t
        .host
        .range(..end)
        .next_back()
        .is_some_and(|(b, h)| b + h.size > start);
    if overlaps {
        return Err(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    }
    t.host.insert(
        start,
        HostRange {
            size: bytesize,
            flags,
            registered: true,
            ctx_handle: ctx.handle() as usize,
            device: ctx.device,
        },
    );
    Ok(())
}

/// `cuMemHostRegister_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister_v2(
    p: *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    rc(host_register(p, bytesize, flags))
}

/// `cuMemHostRegister`.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister(
    p: *mut c_void,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    rc(host_register(p, bytesize, flags))
}

/// `cuMemHostUnregister`.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    if let Err(e) = context::current() {
        return e;
    }
    let mut t = tables();
    match t.host.get(&(p as usize)) {
        Some(h) if h.registered => {
            t.host.remove(&(p as usize));
            CUDA_SUCCESS
        }
        _ => CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
    }
}

// ---- pointer attributes ----

/// Writes attribute `attr` of `ptr` to `data`.
///
/// # Safety
/// `data` must be valid for a write of the attribute's type.
unsafe fn pointer_attribute(
    data: *mut c_void,
    attr: CUpointer_attribute,
    ptr: CUdeviceptr,
) -> CUresult {
    if data.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = device::node() {
        return e;
    }
    enum Found {
        Dev(Range),
        Host(usize, HostRange),
    }
    let found = match find(ptr) {
        Some(r) => Found::Dev(r),
        None => match host_find(ptr as usize) {
            Some((b, h)) => Found::Host(b, h),
            None => return CUDA_ERROR_INVALID_VALUE,
        },
    };
    // SAFETY: (every write below) the caller guarantees `data` points to storage of the
    // attribute's documented type; null was rejected above.
    unsafe {
        match (attr, &found) {
            (CU_POINTER_ATTRIBUTE_CONTEXT, Found::Dev(r)) => {
                data.cast::<CUcontext>().write(r.ctx_handle as CUcontext)
            }
            (CU_POINTER_ATTRIBUTE_CONTEXT, Found::Host(_, h)) => {
                data.cast::<CUcontext>().write(h.ctx_handle as CUcontext)
            }
            (CU_POINTER_ATTRIBUTE_MEMORY_TYPE, Found::Dev(_)) => {
                data.cast::<c_uint>().write(CU_MEMORYTYPE_DEVICE)
            }
            (CU_POINTER_ATTRIBUTE_MEMORY_TYPE, Found::Host(..)) => {
                data.cast::<c_uint>().write(CU_MEMORYTYPE_HOST)
            }
            (CU_POINTER_ATTRIBUTE_DEVICE_POINTER, _) => data.cast::<CUdeviceptr>().write(ptr),
            (CU_POINTER_ATTRIBUTE_HOST_POINTER, Found::Host(..)) => {
                data.cast::<*mut c_void>().write(ptr as *mut c_void)
            }
            (CU_POINTER_ATTRIBUTE_HOST_POINTER, Found::Dev(r)) if r.kind == Kind::Managed => {
                data.cast::<*mut c_void>().write(ptr as *mut c_void)
            }
            (CU_POINTER_ATTRIBUTE_HOST_POINTER, Found::Dev(_)) => return CUDA_ERROR_INVALID_VALUE,
            (CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, _) => data.cast::<c_uint>().write(0),
            (
                CU_POINTER_ATTRIBUTE_BUFFER_ID | CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,
                Found::Dev(r),
            ) => data.cast::<u64>().write(r.buffer_id),
            (
                CU_POINTER_ATTRIBUTE_BUFFER_ID | CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,
                Found::Host(b, _),
            ) => data.cast::<u64>().write(*b as u64),
            (CU_POINTER_ATTRIBUTE_IS_MANAGED, Found::Dev(r)) => data
                .cast::<c_uint>()
                .write(u32::from(r.kind == Kind::Managed)),
            (CU_POINTER_ATTRIBUTE_IS_MANAGED, Found::Host(..)) => data.cast::<c_uint>().write(0),
            (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, Found::Dev(r)) => {
                data.cast::<i32>().write(r.device)
            }
            (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, Found::Host(_, h)) => {
                data.cast::<i32>().write(h.device)
            }
            (CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, Found::Dev(r)) => data
                .cast::<c_uint>()
                .write(u32::from(r.kind == Kind::Device)),
            (CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, Found::Host(..)) => {
                data.cast::<c_uint>().write(0)
            }
            (
                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR | CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                Found::Dev(r),
            ) => data.cast::<CUdeviceptr>().write(r.base),
            (
                CU_POINTER_ATTRIBUTE_RANGE_START_ADDR | CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                Found::Host(b, _),
            ) => data.cast::<CUdeviceptr>().write(*b as u64),
            (
                CU_POINTER_ATTRIBUTE_RANGE_SIZE | CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
                Found::Dev(r),
            ) => data.cast::<usize>().write(r.size as usize),
            (
                CU_POINTER_ATTRIBUTE_RANGE_SIZE | CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
                Found::Host(_, h),
            ) => data.cast::<usize>().write(h.size),
            (CU_POINTER_ATTRIBUTE_MAPPED, _) => data.cast::<c_uint>().write(1),
            (CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, Found::Dev(r)) => {
                let t = match r.kind {
                    Kind::Vmm(id) => crate::vmm::handle_types_of(id),
                    _ => CU_MEM_HANDLE_TYPE_NONE,
                };
                data.cast::<u64>().write(u64::from(t))
            }
            (CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, Found::Host(..)) => {
                data.cast::<u64>().write(0)
            }
            (
                CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE
                | CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE,
                _,
            ) => data.cast::<c_uint>().write(0),
            (CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, _) => data
                .cast::<c_uint>()
                .write(CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
            (CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, Found::Dev(r)) => {
                let h = match r.kind {
                    Kind::Pool(id) => crate::pool::handle_of(id),
                    _ => std::ptr::null_mut(),
                };
                data.cast::<CUmemoryPool>().write(h)
            }
            (CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, Found::Host(..)) => {
                data.cast::<CUmemoryPool>().write(std::ptr::null_mut())
            }
            _ => return CUDA_ERROR_INVALID_VALUE,
        }
    }
    CUDA_SUCCESS
}

/// `cuPointerGetAttribute`.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: CUpointer_attribute,
    ptr: CUdeviceptr,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { pointer_attribute(data, attribute, ptr) }
}

/// `cuPointerGetAttributes`: unknown pointers leave zeroed values (like the real driver).
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttributes(
    num_attributes: c_uint,
    attributes: *mut CUpointer_attribute,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    if let Err(e) = device::node() {
        return e;
    }
    if num_attributes == 0 || attributes.is_null() || data.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    for i in 0..num_attributes as usize {
        // SAFETY: the caller provides `num_attributes` entries in both arrays.
        let (a, d) = unsafe { (*attributes.add(i), *data.add(i)) };
        // SAFETY: forwarded caller contract for each data slot.
        let r = unsafe { pointer_attribute(d, a, ptr) };
        if r == CUDA_ERROR_INVALID_VALUE && !d.is_null() && find(ptr).is_none() {
            // Unknown pointer: the real driver reports zeros rather than failing.
            // SAFETY: every attribute value is at most 8 bytes and the slot holds one.
            unsafe { d.cast::<u8>().write_bytes(0, attr_size(a)) };
        } else if r != CUDA_SUCCESS {
            return r;
        }
    }
    CUDA_SUCCESS
}

fn attr_size(a: CUpointer_attribute) -> usize {
    match a {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE
        | CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
        | CU_POINTER_ATTRIBUTE_IS_MANAGED
        | CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        | CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE
        | CU_POINTER_ATTRIBUTE_MAPPED
        | CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE
        | CU_POINTER_ATTRIBUTE_ACCESS_FLAGS
        | CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE => 4,
        _ => 8,
    }
}

/// `cuPointerSetAttribute` (only `SYNC_MEMOPS` is settable; accepted).
#[no_mangle]
pub unsafe extern "C" fn cuPointerSetAttribute(
    value: *const c_void,
    attribute: CUpointer_attribute,
    ptr: CUdeviceptr,
) -> CUresult {
    if let Err(e) = context::current() {
        return e;
    }
    if value.is_null() || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match find(ptr) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

// ---- copies and memsets (validation only) ----

/// Where one side of a copy lives.
enum Side {
    Host(*const c_void),
    Device(CUdeviceptr),
    Array(CUarray, u64),
    /// Either (unified addressing: `cuMemcpy`).
    Unified(CUdeviceptr),
}

fn check_side(s: &Side, len: u64) -> Result<(), CUresult> {
    match *s {
        Side::Host(p) if p.is_null() => Err(CUDA_ERROR_INVALID_VALUE),
        Side::Host(_) => Ok(()),
        Side::Device(p) => check_device_range(p, len).map(|_| ()),
        Side::Array(a, off) => {
            let size = crate::array::array_bytes(a).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            match off.checked_add(len) {
                Some(end) if end <= size => Ok(()),
                _ => Err(CUDA_ERROR_INVALID_VALUE),
            }
        }
        Side::Unified(p) => {
            if p == 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if find(p).is_some() {
                check_device_range(p, len).map(|_| ())
            } else {
                Ok(())
            }
        }
    }
}

fn copy(dst: Side, src: Side, len: u64) -> Result<(), CUresult> {
    context::current()?;
    if len == 0 {
        return Ok(());
    }
    check_side(&dst, len)?;
    check_side(&src, len)
}

/// Runs `f` in the order of `stream` (the stream module validates the handle; a null handle is
/// the legacy default stream, or the per-thread one when `per_thread` for `_ptsz` entry points).
pub(crate) fn on_stream_in(
    stream: CUstream,
    per_thread: bool,
    f: impl FnOnce() + Send + 'static,
) -> Result<(), CUresult> {
    let s = crate::stream::resolve(stream, per_thread)?;
    crate::stream::enqueue_host(&s, Box::new(f))
}

/// [`on_stream_in`] for the legacy default stream semantics of a null handle.
pub(crate) fn on_stream(
    stream: CUstream,
    f: impl FnOnce() + Send + 'static,
) -> Result<(), CUresult> {
    on_stream_in(stream, false, f)
}

fn copy_async(dst: Side, src: Side, len: u64, stream: CUstream) -> Result<(), CUresult> {
    copy(dst, src, len)?;
    on_stream(stream, || {})
}

fn memset(
    dst: CUdeviceptr,
    elem: u64,
    pitch: u64,
    width: u64,
    height: u64,
) -> Result<(), CUresult> {
    context::current()?;
    if width == 0 || height == 0 {
        return Ok(());
    }
    if height > 1 && pitch < width * elem {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if !dst.is_multiple_of(elem) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let extent = pitch * (height - 1) + width * elem;
    check_device_range(dst, extent).map(|_| ())
}

fn memset_async(
    dst: CUdeviceptr,
    elem: u64,
    pitch: u64,
    width: u64,
    height: u64,
    stream: CUstream,
) -> Result<(), CUresult> {
    memset(dst, elem, pitch, width, height)?;
    on_stream(stream, || {})
}

/// Generates exported copy entry points that forward to one body.
macro_rules! exports {
    ($( $(#[$m:meta])* fn [$($name:ident),+] $args:tt => $body:expr; )*) => {
        $( exports!(@group [$(#[$m])*] [$($name),+] $args $body); )*
    };
    (@group $attrs:tt [$($name:ident),+] $args:tt $body:expr) => {
        $( exports!(@one $attrs $name $args $body); )+
    };
    (@one [$(#[$m:meta])*] $name:ident ( $($arg:ident : $ty:ty),* ) $body:expr) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            rc($body)
        }
    };
}

exports! {
    /// `cuMemcpyHtoD` family.
    fn [cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds](dst: CUdeviceptr, src: *const c_void, n: usize)
        => copy(Side::Device(dst), Side::Host(src), n as u64);
    /// `cuMemcpyHtoD` (legacy 32-bit).
    fn [cuMemcpyHtoD](dst: CUdeviceptr_v1, src: *const c_void, n: c_uint)
        => copy(Side::Device(dst.into()), Side::Host(src), n.into());
    /// `cuMemcpyDtoH` family.
    fn [cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds](dst: *mut c_void, src: CUdeviceptr, n: usize)
        => copy(Side::Host(dst), Side::Device(src), n as u64);
    /// `cuMemcpyDtoH` (legacy 32-bit).
    fn [cuMemcpyDtoH](dst: *mut c_void, src: CUdeviceptr_v1, n: c_uint)
        => copy(Side::Host(dst), Side::Device(src.into()), n.into());
    /// `cuMemcpyDtoD` family.
    fn [cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds](dst: CUdeviceptr, src: CUdeviceptr, n: usize)
        => copy(Side::Device(dst), Side::Device(src), n as u64);
    /// `cuMemcpyDtoD` (legacy 32-bit).
    fn [cuMemcpyDtoD](dst: CUdeviceptr_v1, src: CUdeviceptr_v1, n: c_uint)
        => copy(Side::Device(dst.into()), Side::Device(src.into()), n.into());
    /// `cuMemcpy` (unified addressing).
    fn [cuMemcpy, cuMemcpy_ptds](dst: CUdeviceptr, src: CUdeviceptr, n: usize)
        => copy(Side::Unified(dst), Side::Unified(src), n as u64);
    /// `cuMemcpyPeer`.
    fn [cuMemcpyPeer, cuMemcpyPeer_ptds](dst: CUdeviceptr, _dc: CUcontext, src: CUdeviceptr, _sc: CUcontext, n: usize)
        => copy(Side::Device(dst), Side::Device(src), n as u64);
    /// `cuMemcpyHtoDAsync` family.
    fn [cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz](dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream)
        => copy_async(Side::Device(dst), Side::Host(src), n as u64, s);
    /// `cuMemcpyHtoDAsync` (legacy 32-bit).
    fn [cuMemcpyHtoDAsync](dst: CUdeviceptr_v1, src: *const c_void, n: c_uint, s: CUstream)
        => copy_async(Side::Device(dst.into()), Side::Host(src), n.into(), s);
    /// `cuMemcpyDtoHAsync` family.
    fn [cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz](dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream)
        => copy_async(Side::Host(dst), Side::Device(src), n as u64, s);
    /// `cuMemcpyDtoHAsync` (legacy 32-bit).
    fn [cuMemcpyDtoHAsync](dst: *mut c_void, src: CUdeviceptr_v1, n: c_uint, s: CUstream)
        => copy_async(Side::Host(dst), Side::Device(src.into()), n.into(), s);
    /// `cuMemcpyDtoDAsync` family.
    fn [cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz](dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream)
        => copy_async(Side::Device(dst), Side::Device(src), n as u64, s);
    /// `cuMemcpyDtoDAsync` (legacy 32-bit).
    fn [cuMemcpyDtoDAsync](dst: CUdeviceptr_v1, src: CUdeviceptr_v1, n: c_uint, s: CUstream)
        => copy_async(Side::Device(dst.into()), Side::Device(src.into()), n.into(), s);
    /// `cuMemcpyAsync` (unified addressing).
    fn [cuMemcpyAsync, cuMemcpyAsync_ptsz](dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream)
        => copy_async(Side::Unified(dst), Side::Unified(src), n as u64, s);
    /// `cuMemcpyPeerAsync`.
    fn [cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz](dst: CUdeviceptr, _dc: CUcontext, src: CUdeviceptr, _sc: CUcontext, n: usize, s: CUstream)
        => copy_async(Side::Device(dst), Side::Device(src), n as u64, s);
    /// `cuMemcpyDtoA` family.
    fn [cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds](dst: CUarray, off: usize, src: CUdeviceptr, n: usize)
        => copy(Side::Array(dst, off as u64), Side::Device(src), n as u64);
    /// `cuMemcpyDtoA` (legacy 32-bit).
    fn [cuMemcpyDtoA](dst: CUarray, off: c_uint, src: CUdeviceptr_v1, n: c_uint)
        => copy(Side::Array(dst, off.into()), Side::Device(src.into()), n.into());
    /// `cuMemcpyAtoD` family.
    fn [cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds](dst: CUdeviceptr, src: CUarray, off: usize, n: usize)
        => copy(Side::Device(dst), Side::Array(src, off as u64), n as u64);
    /// `cuMemcpyAtoD` (legacy 32-bit).
    fn [cuMemcpyAtoD](dst: CUdeviceptr_v1, src: CUarray, off: c_uint, n: c_uint)
        => copy(Side::Device(dst.into()), Side::Array(src, off.into()), n.into());
    /// `cuMemcpyHtoA` family.
    fn [cuMemcpyHtoA_v2, cuMemcpyHtoA_v2_ptds](dst: CUarray, off: usize, src: *const c_void, n: usize)
        => copy(Side::Array(dst, off as u64), Side::Host(src), n as u64);
    /// `cuMemcpyHtoA` (legacy 32-bit).
    fn [cuMemcpyHtoA](dst: CUarray, off: c_uint, src: *const c_void, n: c_uint)
        => copy(Side::Array(dst, off.into()), Side::Host(src), n.into());
    /// `cuMemcpyAtoH` family.
    fn [cuMemcpyAtoH_v2, cuMemcpyAtoH_v2_ptds](dst: *mut c_void, src: CUarray, off: usize, n: usize)
        => copy(Side::Host(dst), Side::Array(src, off as u64), n as u64);
    /// `cuMemcpyAtoH` (legacy 32-bit).
    fn [cuMemcpyAtoH](dst: *mut c_void, src: CUarray, off: c_uint, n: c_uint)
        => copy(Side::Host(dst), Side::Array(src, off.into()), n.into());
    /// `cuMemcpyAtoA` family.
    fn [cuMemcpyAtoA_v2, cuMemcpyAtoA_v2_ptds](dst: CUarray, doff: usize, src: CUarray, soff: usize, n: usize)
        => copy(Side::Array(dst, doff as u64), Side::Array(src, soff as u64), n as u64);
    /// `cuMemcpyAtoA` (legacy 32-bit).
    fn [cuMemcpyAtoA](dst: CUarray, doff: c_uint, src: CUarray, soff: c_uint, n: c_uint)
        => copy(Side::Array(dst, doff.into()), Side::Array(src, soff.into()), n.into());
    /// `cuMemcpyHtoAAsync` family.
    fn [cuMemcpyHtoAAsync_v2, cuMemcpyHtoAAsync_v2_ptsz](dst: CUarray, off: usize, src: *const c_void, n: usize, s: CUstream)
        => copy_async(Side::Array(dst, off as u64), Side::Host(src), n as u64, s);
    /// `cuMemcpyHtoAAsync` (legacy 32-bit).
    fn [cuMemcpyHtoAAsync](dst: CUarray, off: c_uint, src: *const c_void, n: c_uint, s: CUstream)
        => copy_async(Side::Array(dst, off.into()), Side::Host(src), n.into(), s);
    /// `cuMemcpyAtoHAsync` family.
    fn [cuMemcpyAtoHAsync_v2, cuMemcpyAtoHAsync_v2_ptsz](dst: *mut c_void, src: CUarray, off: usize, n: usize, s: CUstream)
        => copy_async(Side::Host(dst), Side::Array(src, off as u64), n as u64, s);
    /// `cuMemcpyAtoHAsync` (legacy 32-bit).
    fn [cuMemcpyAtoHAsync](dst: *mut c_void, src: CUarray, off: c_uint, n: c_uint, s: CUstream)
        => copy_async(Side::Host(dst), Side::Array(src, off.into()), n.into(), s);

    /// `cuMemsetD8` family.
    fn [cuMemsetD8_v2, cuMemsetD8_v2_ptds](dst: CUdeviceptr, _v: u8, n: usize)
        => memset(dst, 1, 0, n as u64, 1);
    /// `cuMemsetD8` (legacy 32-bit).
    fn [cuMemsetD8](dst: CUdeviceptr_v1, _v: u8, n: c_uint) => memset(dst.into(), 1, 0, n.into(), 1);
    /// `cuMemsetD16` family.
    fn [cuMemsetD16_v2, cuMemsetD16_v2_ptds](dst: CUdeviceptr, _v: u16, n: usize)
        => memset(dst, 2, 0, n as u64, 1);
    /// `cuMemsetD16` (legacy 32-bit).
    fn [cuMemsetD16](dst: CUdeviceptr_v1, _v: u16, n: c_uint) => memset(dst.into(), 2, 0, n.into(), 1);
    /// `cuMemsetD32` family.
    fn [cuMemsetD32_v2, cuMemsetD32_v2_ptds](dst: CUdeviceptr, _v: u32, n: usize)
        => memset(dst, 4, 0, n as u64, 1);
    /// `cuMemsetD32` (legacy 32-bit).
    fn [cuMemsetD32](dst: CUdeviceptr_v1, _v: u32, n: c_uint) => memset(dst.into(), 4, 0, n.into(), 1);
    /// `cuMemsetD2D8` family.
    fn [cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds](dst: CUdeviceptr, pitch: usize, _v: u8, w: usize, h: usize)
        => memset(dst, 1, pitch as u64, w as u64, h as u64);
    /// `cuMemsetD2D8` (legacy 32-bit).
    fn [cuMemsetD2D8](dst: CUdeviceptr_v1, pitch: c_uint, _v: u8, w: c_uint, h: c_uint)
        => memset(dst.into(), 1, pitch.into(), w.into(), h.into());
    /// `cuMemsetD2D16` family.
    fn [cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds](dst: CUdeviceptr, pitch: usize, _v: u16, w: usize, h: usize)
        => memset(dst, 2, pitch as u64, w as u64, h as u64);
    /// `cuMemsetD2D16` (legacy 32-bit).
    fn [cuMemsetD2D16](dst: CUdeviceptr_v1, pitch: c_uint, _v: u16, w: c_uint, h: c_uint)
        => memset(dst.into(), 2, pitch.into(), w.into(), h.into());
    /// `cuMemsetD2D32` family.
    fn [cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds](dst: CUdeviceptr, pitch: usize, _v: u32, w: usize, h: usize)
        => memset(dst, 4, pitch as u64, w as u64, h as u64);
    /// `cuMemsetD2D32` (legacy 32-bit).
    fn [cuMemsetD2D32](dst: CUdeviceptr_v1, pitch: c_uint, _v: u32, w: c_uint, h: c_uint)
        => memset(dst.into(), 4, pitch.into(), w.into(), h.into());
    /// `cuMemsetD8Async`.
    fn [cuMemsetD8Async, cuMemsetD8Async_ptsz](dst: CUdeviceptr, _v: u8, n: usize, s: CUstream)
        => memset_async(dst, 1, 0, n as u64, 1, s);
    /// `cuMemsetD16Async`.
    fn [cuMemsetD16Async, cuMemsetD16Async_ptsz](dst: CUdeviceptr, _v: u16, n: usize, s: CUstream)
        => memset_async(dst, 2, 0, n as u64, 1, s);
    /// `cuMemsetD32Async`.
    fn [cuMemsetD32Async, cuMemsetD32Async_ptsz](dst: CUdeviceptr, _v: u32, n: usize, s: CUstream)
        => memset_async(dst, 4, 0, n as u64, 1, s);
    /// `cuMemsetD2D8Async`.
    fn [cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz](dst: CUdeviceptr, pitch: usize, _v: u8, w: usize, h: usize, s: CUstream)
        => memset_async(dst, 1, pitch as u64, w as u64, h as u64, s);
    /// `cuMemsetD2D16Async`.
    fn [cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz](dst: CUdeviceptr, pitch: usize, _v: u16, w: usize, h: usize, s: CUstream)
        => memset_async(dst, 2, pitch as u64, w as u64, h as u64, s);
    /// `cuMemsetD2D32Async`.
    fn [cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz](dst: CUdeviceptr, pitch: usize, _v: u32, w: usize, h: usize, s: CUstream)
        => memset_async(dst, 4, pitch as u64, w as u64, h as u64, s);

    /// `cuMemcpy2D` family.
    fn [cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds](p: *const CUDA_MEMCPY2D)
        => copy_2d(p);
    /// `cuMemcpy2D` (legacy 32-bit descriptor).
    fn [cuMemcpy2D, cuMemcpy2DUnaligned](p: *const CUDA_MEMCPY2D_v1) => copy_2d_v1(p);
    /// `cuMemcpy2DAsync` family.
    fn [cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz](p: *const CUDA_MEMCPY2D, s: CUstream)
        => copy_2d(p).and_then(|()| on_stream(s, || {}));
    /// `cuMemcpy2DAsync` (legacy 32-bit descriptor).
    fn [cuMemcpy2DAsync](p: *const CUDA_MEMCPY2D_v1, s: CUstream)
        => copy_2d_v1(p).and_then(|()| on_stream(s, || {}));
    /// `cuMemcpy3D` family.
    fn [cuMemcpy3D_v2, cuMemcpy3D_v2_ptds](p: *const CUDA_MEMCPY3D) => copy_3d(p);
    /// `cuMemcpy3DAsync` family.
    fn [cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz](p: *const CUDA_MEMCPY3D, s: CUstream)
        => copy_3d(p).and_then(|()| on_stream(s, || {}));
    /// `cuMemcpy3DPeer`.
    fn [cuMemcpy3DPeer, cuMemcpy3DPeer_ptds](p: *const CUDA_MEMCPY3D_PEER) => copy_3d_peer(p);
    /// `cuMemcpy3DPeerAsync`.
    fn [cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz](p: *const CUDA_MEMCPY3D_PEER, s: CUstream)
        => copy_3d_peer(p).and_then(|()| on_stream(s, || {}));
}

/// The side of a 2D/3D copy described by its memory type and pointers.
#[allow(clippy::too_many_arguments)]
fn side_of(
    mt: CUmemorytype,
    host: *const c_void,
    dev: CUdeviceptr,
    array: CUarray,
    x: u64,
    y: u64,
    z: u64,
    pitch: u64,
    height: u64,
) -> Result<Side, CUresult> {
    match mt {
        CU_MEMORYTYPE_HOST => Ok(Side::Host(host)),
        CU_MEMORYTYPE_ARRAY => Ok(Side::Array(array, 0)),
        CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_UNIFIED => {
            let off = z
                .checked_mul(height)
                .and_then(|v| v.checked_add(y))
                .and_then(|v| v.checked_mul(pitch))
                .and_then(|v| v.checked_add(x))
                .ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let p = dev.checked_add(off).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            Ok(if mt == CU_MEMORYTYPE_DEVICE {
                Side::Device(p)
            } else {
                Side::Unified(p)
            })
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// The byte extent of a pitched copy of `width x height x depth` (0 if empty).
fn extent(pitch: u64, height_stride: u64, width: u64, height: u64, depth: u64) -> u64 {
    if width == 0 || height == 0 || depth == 0 {
        return 0;
    }
    let pitch = pitch.max(width);
    let slice = pitch * height_stride.max(height);
    (depth - 1) * slice + (height - 1) * pitch + width
}

fn check_pitched(s: Side, len: u64) -> Result<(), CUresult> {
    match s {
        // Arrays are checked by existence only (their layout is opaque).
        Side::Array(a, _) => crate::array::array_bytes(a)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_VALUE),
        other => check_side(&other, len),
    }
}

fn copy_2d(p: *const CUDA_MEMCPY2D) -> Result<(), CUresult> {
    context::current()?;
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid descriptor.
    let c = unsafe { p.read() };
    let (w, h) = (c.WidthInBytes as u64, c.Height as u64);
    if w == 0 || h == 0 {
        return Ok(());
    }
    let src = side_of(
        c.srcMemoryType,
        c.srcHost,
        c.srcDevice,
        c.srcArray,
        c.srcXInBytes as u64,
        c.srcY as u64,
        0,
        c.srcPitch.max(c.WidthInBytes) as u64,
        0,
    )?;
    let dst = side_of(
        c.dstMemoryType,
        c.dstHost,
        c.dstDevice,
        c.dstArray,
        c.dstXInBytes as u64,
        c.dstY as u64,
        0,
        c.dstPitch.max(c.WidthInBytes) as u64,
        0,
    )?;
    check_pitched(src, extent(c.srcPitch as u64, 0, w, h, 1))?;
    check_pitched(dst, extent(c.dstPitch as u64, 0, w, h, 1))
}

fn copy_2d_v1(p: *const CUDA_MEMCPY2D_v1) -> Result<(), CUresult> {
    context::current()?;
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid descriptor.
    let c = unsafe { p.read() };
    let wide = CUDA_MEMCPY2D {
        srcXInBytes: c.srcXInBytes as usize,
        srcY: c.srcY as usize,
        srcMemoryType: c.srcMemoryType,
        srcHost: c.srcHost,
        srcDevice: c.srcDevice.into(),
        srcArray: c.srcArray,
        srcPitch: c.srcPitch as usize,
        dstXInBytes: c.dstXInBytes as usize,
        dstY: c.dstY as usize,
        dstMemoryType: c.dstMemoryType,
        dstHost: c.dstHost,
        dstDevice: c.dstDevice.into(),
        dstArray: c.dstArray,
        dstPitch: c.dstPitch as usize,
        WidthInBytes: c.WidthInBytes as usize,
        Height: c.Height as usize,
    };
    copy_2d(&wide)
}

fn copy_3d(p: *const CUDA_MEMCPY3D) -> Result<(), CUresult> {
    context::current()?;
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid descriptor.
    let c = unsafe { p.read() };
    if !c.reserved0.is_null() || !c.reserved1.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (w, h, d) = (c.WidthInBytes as u64, c.Height as u64, c.Depth as u64);
    if w == 0 || h == 0 || d == 0 {
        return Ok(());
    }
    let sp = (c.srcPitch as u64).max(w);
    let dp = (c.dstPitch as u64).max(w);
    let src = side_of(
        c.srcMemoryType,
        c.srcHost,
        c.srcDevice,
        c.srcArray,
        c.srcXInBytes as u64,
        c.srcY as u64,
        c.srcZ as u64,
        sp,
        (c.srcHeight as u64).max(h),
    )?;
    let dst = side_of(
        c.dstMemoryType,
        c.dstHost,
        c.dstDevice,
        c.dstArray,
        c.dstXInBytes as u64,
        c.dstY as u64,
        c.dstZ as u64,
        dp,
        (c.dstHeight as u64).max(h),
    )?;
    check_pitched(src, extent(sp, c.srcHeight as u64, w, h, d))?;
    check_pitched(dst, extent(dp, c.dstHeight as u64, w, h, d))
}

fn copy_3d_peer(p: *const CUDA_MEMCPY3D_PEER) -> Result<(), CUresult> {
    context::current()?;
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid descriptor.
    let c = unsafe { p.read() };
    let same = CUDA_MEMCPY3D {
        srcXInBytes: c.srcXInBytes,
        srcY: c.srcY,
        srcZ: c.srcZ,
        srcLOD: c.srcLOD,
        srcMemoryType: c.srcMemoryType,
        srcHost: c.srcHost,
        srcDevice: c.srcDevice,
        srcArray: c.srcArray,
        reserved0: std::ptr::null_mut(),
        srcPitch: c.srcPitch,
        srcHeight: c.srcHeight,
        dstXInBytes: c.dstXInBytes,
        dstY: c.dstY,
        dstZ: c.dstZ,
        dstLOD: c.dstLOD,
        dstMemoryType: c.dstMemoryType,
        dstHost: c.dstHost,
        dstDevice: c.dstDevice,
        dstArray: c.dstArray,
        reserved1: std::ptr::null_mut(),
        dstPitch: c.dstPitch,
        dstHeight: c.dstHeight,
        WidthInBytes: c.WidthInBytes,
        Height: c.Height,
        Depth: c.Depth,
    };
    copy_3d(&same)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn va_allocator_is_aligned_and_disjoint() {
        let a = reserve_va(100, 1 << 21).unwrap_or(0);
        let b = reserve_va(100, 1 << 21).unwrap_or(0);
        assert_ne!(a, 0);
        assert_eq!(a % (1 << 21), 0);
        assert!(b >= a + 100);
        let low = reserve_va_low(4096).unwrap_or(0);
        assert!(low > 0 && low < u64::from(u32::MAX));
    }

    #[test]
    fn pitched_extent() {
        assert_eq!(extent(512, 0, 100, 3, 1), 2 * 512 + 100);
        assert_eq!(extent(0, 0, 100, 1, 1), 100);
        assert_eq!(extent(512, 4, 100, 2, 2), 4 * 512 + 512 + 100);
        assert_eq!(alloc_pitch(100, 3, 4), Ok((512, 1536)));
        assert_eq!(alloc_pitch(100, 3, 3), Err(CUDA_ERROR_INVALID_VALUE));
    }
}
