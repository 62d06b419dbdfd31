//! Stream-ordered allocation and memory pools: `cuMemAllocAsync`, `cuMemFreeAsync`,
//! `cuMemAllocFromPoolAsync`, default / current / created pools, trim, attributes and access.
//!
//! Model (as the real driver behaves, without fragmentation): a pool *reserves* physical memory
//! from its device in granularity-sized chunks (a request larger than what is free in the pool
//! grows it by the missing amount rounded up to the granularity) and hands out *used* bytes from
//! it. `cuMemFreeAsync` returns the bytes to the pool when the stream reaches it; the pool keeps
//! them reserved up to its release threshold (default 0) and gives the rest back to the device at
//! the next synchronization (`on_synchronize`, called by context / stream / event synchronize)
//! or on `cuMemPoolTrimTo`. The ground truth is charged the pool's **reserved** bytes.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;

use crate::context;
use crate::device::{self, put, rc, round_up};
use crate::memory::{self, Kind, Range};

/// Sub-allocation alignment inside a pool.
const POOL_ALIGN: u64 = 512;
const POOL_HANDLE_BASE: usize = 0x0900_0000_0000;

struct Pool {
    id: u64,
    device: CUdevice,
    phys: u32,
    default: bool,
    max_size: u64,
    handle_types: u32,
    release_threshold: u64,
    reserved: u64,
    reserved_high: u64,
    used: u64,
    used_high: u64,
    reuse: [c_int; 3],
    /// Access granted to other devices (`CU_MEM_ACCESS_FLAGS_*`).
    access: HashMap<CUdevice, u32>,
    /// Live allocations: base → (footprint, owning context id).
    allocs: HashMap<CUdeviceptr, (u64, u64)>,
}

impl Pool {
    fn handle(&self) -> CUmemoryPool {
        (POOL_HANDLE_BASE + self.id as usize * 0x100) as CUmemoryPool
    }

    /// Grows the reservation so that `need` more bytes fit.
    fn reserve_for(&mut self, need: u64) -> Result<(), CUresult> {
        let free = self.reserved - self.used;
        if free >= need {
            return Ok(());
        }
        let grow = round_up(need - free, device::granularity());
        if self.max_size > 0 && self.reserved + grow > self.max_size {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let node = device::node()?;
        node.mem_alloc(self.phys, grow)
            .map_err(|e| device::sim_err(&e))?;
        self.reserved += grow;
        self.reserved_high = self.reserved_high.max(self.reserved);
        Ok(())
    }

    /// Releases reserved memory down to `keep` (never below what is in use).
    fn shrink_to(&mut self, keep: u64) {
        let target = round_up(self.used.max(keep), device::granularity());
        if self.reserved > target {
            let give = self.reserved - target;
            if let Ok(node) = device::node() {
                node.mem_free(self.phys, give);
            }
            self.reserved = target;
        }
    }
}

#[derive(Default)]
struct Pools {
    by_id: HashMap<u64, Pool>,
    /// Default pool id per device ordinal.
    default: HashMap<CUdevice, u64>,
    /// Current pool id per device ordinal (when set explicitly).
    current: HashMap<CUdevice, u64>,
}

static NEXT_POOL: AtomicU64 = AtomicU64::new(1);

fn pools() -> MutexGuard<'static, Pools> {
    static P: OnceLock<Mutex<Pools>> = OnceLock::new();
    P.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn new_pool(device: CUdevice, phys: u32, default: bool, props: Option<&CUmemPoolProps>) -> Pool {
    Pool {
        id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
        device,
        phys,
        default,
        max_size: props.map_or(0, |p| p.maxSize as u64),
        handle_types: props.map_or(0, |p| p.handleTypes),
        release_threshold: 0,
        reserved: 0,
        reserved_high: 0,
        used: 0,
        used_high: 0,
        reuse: [1, 1, 1],
        access: HashMap::new(),
        allocs: HashMap::new(),
    }
}

/// The default pool id of `dev`, created on first use.
fn default_pool(p: &mut Pools, dev: CUdevice) -> Result<u64, CUresult> {
    if let Some(id) = p.default.get(&dev) {
        return Ok(*id);
    }
    let phys = device::physical(dev)?;
    let pool = new_pool(dev, phys, true, None);
    let id = pool.id;
    p.by_id.insert(id, pool);
    p.default.insert(dev, id);
    Ok(id)
}

fn current_pool(p: &mut Pools, dev: CUdevice) -> Result<u64, CUresult> {
    match p.current.get(&dev) {
        Some(id) if p.by_id.contains_key(id) => Ok(*id),
        _ => default_pool(p, dev),
    }
}

fn pool_id(h: CUmemoryPool) -> Option<u64> {
    let v = (h as usize).checked_sub(POOL_HANDLE_BASE)?;
    (v % 0x100 == 0 && v > 0).then_some((v / 0x100) as u64)
}

/// The `CUmemoryPool` handle of pool `id` (for pointer attributes).
pub(crate) fn handle_of(id: u64) -> CUmemoryPool {
    (POOL_HANDLE_BASE + id as usize * 0x100) as CUmemoryPool
}

/// Allocates from pool `id` on behalf of the current context.
fn alloc_from(
    id: u64,
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
    ptsz: bool,
) -> Result<(), CUresult> {
    let ctx = context::current()?;
    // In a capture: an allocation node (graph memory); outside one, maybe prohibited by one.
    if let Some(r) = crate::graph::capture_alloc(stream, ptsz, bytes, dptr) {
        return r;
    }
    if dptr.is_null() || bytes == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let footprint = round_up(bytes as u64, POOL_ALIGN);
    let base = {
        let mut ps = pools();
        let pool = ps.by_id.get_mut(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        pool.reserve_for(footprint)?;
        let base = memory::reserve_va(footprint, POOL_ALIGN)?;
        pool.used += footprint;
        pool.used_high = pool.used_high.max(pool.used);
        pool.allocs.insert(base, (footprint, ctx.id));
        memory::register(Range {
            base,
            size: bytes as u64,
            charged: 0,
            kind: Kind::Pool(id),
            ctx_id: ctx.id,
            device: pool.device,
            phys: pool.phys,
            ctx_handle: ctx.handle() as usize,
            buffer_id: memory::next_buffer_id(),
        });
        base
    };
    // Stream-ordered: the allocation is usable from this point of the stream on. The stream
    // must be valid; if it is not, undo the allocation.
    if let Err(e) = memory::on_stream_in(stream, ptsz, || {}) {
        free_now(base);
        return Err(e);
    }
    // SAFETY: null-checked above.
    unsafe { dptr.write(base) };
    Ok(())
}

/// Returns a pool allocation to its pool immediately.
fn free_now(base: CUdeviceptr) {
    memory::unregister(base);
    let mut ps = pools();
    for pool in ps.by_id.values_mut() {
        if let Some((fp, _)) = pool.allocs.remove(&base) {
            pool.used -= fp;
            return;
        }
    }
}

fn alloc_async(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
    ptsz: bool,
) -> Result<(), CUresult> {
    let ctx = context::current()?;
    let id = current_pool(&mut pools(), ctx.device)?;
    alloc_from(id, dptr, bytes, stream, ptsz)
}

/// `cuMemAllocAsync`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    h_stream: CUstream,
) -> CUresult {
    rc(alloc_async(dptr, bytesize, h_stream, false))
}

/// `cuMemAllocAsync_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    h_stream: CUstream,
) -> CUresult {
    rc(alloc_async(dptr, bytesize, h_stream, true))
}

fn alloc_from_pool(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: CUmemoryPool,
    stream: CUstream,
    ptsz: bool,
) -> Result<(), CUresult> {
    context::current()?;
    let id = pool_id(pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    alloc_from(id, dptr, bytes, stream, ptsz)
}

/// `cuMemAllocFromPoolAsync`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    h_stream: CUstream,
) -> CUresult {
    rc(alloc_from_pool(dptr, bytesize, pool, h_stream, false))
}

/// `cuMemAllocFromPoolAsync_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    h_stream: CUstream,
) -> CUresult {
    rc(alloc_from_pool(dptr, bytesize, pool, h_stream, true))
}

fn free_async(ptr: CUdeviceptr, stream: CUstream, ptsz: bool) -> Result<(), CUresult> {
    context::current()?;
    // A graph allocation freed in a capture: a free node.
    if let Some(r) = crate::graph::capture_free(stream, ptsz, ptr) {
        return r;
    }
    let r = memory::find(ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if r.base != ptr {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match r.kind {
        Kind::Pool(_) => {
            // The pointer is dead for the API at once; the bytes return in stream order.
            memory::unregister(ptr);
            let done = memory::on_stream_in(stream, ptsz, move || {
                let mut ps = pools();
                for pool in ps.by_id.values_mut() {
                    if let Some((fp, _)) = pool.allocs.remove(&ptr) {
                        pool.used -= fp;
                        break;
                    }
                }
            });
            if let Err(e) = done {
                // Invalid stream: keep the allocation alive, as the real driver does.
                memory::register(r);
                return Err(e);
            }
            Ok(())
        }
        Kind::Device | Kind::Managed => {
            // Memory from cuMemAlloc freed in stream order.
            memory::on_stream_in(stream, ptsz, move || {
                let _ = memory::device_free(ptr);
            })
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuMemFreeAsync`.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, h_stream: CUstream) -> CUresult {
    rc(free_async(dptr, h_stream, false))
}

/// `cuMemFreeAsync_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, h_stream: CUstream) -> CUresult {
    rc(free_async(dptr, h_stream, true))
}

/// A synchronization point was reached on `device`: pools give back what exceeds their
/// release threshold. Called by `cuCtxSynchronize`, and by stream / event synchronize.
pub(crate) fn on_synchronize(device: CUdevice) {
    let mut ps = pools();
    for pool in ps.by_id.values_mut().filter(|p| p.device == device) {
        if pool.reserved > pool.release_threshold {
            let keep = pool.release_threshold;
            pool.shrink_to(keep);
        }
    }
}

/// A context died: its pool allocations are freed and pools give back their free memory.
pub(crate) fn release_context(ctx_id: u64) {
    memory::drain_where(|r| r.ctx_id == ctx_id && matches!(r.kind, Kind::Pool(_)));
    let mut ps = pools();
    for pool in ps.by_id.values_mut() {
        let dead: Vec<(CUdeviceptr, u64)> = pool
            .allocs
            .iter()
            .filter(|(_, (_, c))| *c == ctx_id)
            .map(|(b, (fp, _))| (*b, *fp))
            .collect();
        for (b, fp) in dead {
            pool.allocs.remove(&b);
            pool.used -= fp;
        }
        pool.shrink_to(0);
    }
}

/// `cuDeviceGetDefaultMemPool`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(
    pool_out: *mut CUmemoryPool,
    dev: CUdevice,
) -> CUresult {
    let r = (|| {
        device::node()?;
        device::physical(dev)?;
        let mut ps = pools();
        let id = default_pool(&mut ps, dev)?;
        put_pool(&ps, id, pool_out)
    })();
    rc(r)
}

/// `cuDeviceGetMemPool`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetMemPool(
    pool_out: *mut CUmemoryPool,
    dev: CUdevice,
) -> CUresult {
    let r = (|| {
        device::node()?;
        device::physical(dev)?;
        let mut ps = pools();
        let id = current_pool(&mut ps, dev)?;
        put_pool(&ps, id, pool_out)
    })();
    rc(r)
}

/// `cuDeviceSetMemPool`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) -> CUresult {
    let r = (|| {
        device::node()?;
        device::physical(dev)?;
        let id = pool_id(pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut ps = pools();
        match ps.by_id.get(&id) {
            Some(p) if p.device == dev => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        ps.current.insert(dev, id);
        Ok(())
    })();
    rc(r)
}

/// The device a CUDA 13.0 `cuMem{Get,Set}MemPool` location names: only device locations of
/// pinned allocations (the simulator has no host pools; the driver answers
/// `CUDA_ERROR_INVALID_VALUE` for a location it does not serve).
fn pool_location(
    location: *const CUmemLocation,
    kind: CUmemAllocationType,
) -> Result<CUdevice, CUresult> {
    device::node()?;
    if location.is_null() || kind != CU_MEM_ALLOCATION_TYPE_PINNED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller's location.
    let loc = unsafe { *location };
    if loc.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    device::physical(loc.id)?;
    Ok(loc.id)
}

/// Writes the handle of pool `id` to `out`.
fn put_pool(ps: &Pools, id: u64, out: *mut CUmemoryPool) -> Result<(), CUresult> {
    let h = ps
        .by_id
        .get(&id)
        .map(Pool::handle)
        .ok_or(CUDA_ERROR_UNKNOWN)?;
    // SAFETY: `put` null-checks.
    match unsafe { put(out, h) } {
        CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
}

/// Writes the pool `pick` chooses for a location's device to `out`.
fn pool_at(
    out: *mut CUmemoryPool,
    location: *const CUmemLocation,
    kind: CUmemAllocationType,
    pick: fn(&mut Pools, CUdevice) -> Result<u64, CUresult>,
) -> CUresult {
    let r = pool_location(location, kind).and_then(|dev| {
        let mut ps = pools();
        let id = pick(&mut ps, dev)?;
        put_pool(&ps, id, out)
    });
    rc(r)
}

/// `cuMemGetDefaultMemPool` (CUDA 13.0): the default pool of a location.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetDefaultMemPool(
    pool_out: *mut CUmemoryPool,
    location: *const CUmemLocation,
    kind: CUmemAllocationType,
) -> CUresult {
    pool_at(pool_out, location, kind, default_pool)
}

/// `cuMemGetMemPool` (CUDA 13.0): the current pool of a location (what `cuMemAllocAsync` on
/// that device draws from), as `cuDeviceGetMemPool`.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetMemPool(
    pool_out: *mut CUmemoryPool,
    location: *const CUmemLocation,
    kind: CUmemAllocationType,
) -> CUresult {
    pool_at(pool_out, location, kind, current_pool)
}

/// `cuMemSetMemPool` (CUDA 13.0): sets a location's current pool, as `cuDeviceSetMemPool`.
#[no_mangle]
pub unsafe extern "C" fn cuMemSetMemPool(
    location: *const CUmemLocation,
    kind: CUmemAllocationType,
    pool: CUmemoryPool,
) -> CUresult {
    let dev = match pool_location(location, kind) {
        Ok(d) => d,
        Err(e) => return e,
    };
    // SAFETY: same contract.
    unsafe { cuDeviceSetMemPool(dev, pool) }
}

/// `cuMemPoolCreate`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CUmemoryPool,
    props: *const CUmemPoolProps,
) -> CUresult {
    let r = (|| {
        device::node()?;
        if pool.is_null() || props.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes valid props.
        let pr = unsafe { props.read() };
        if pr.allocType != CU_MEM_ALLOCATION_TYPE_PINNED
            || pr.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE
            || pr.handleTypes & !CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR != 0
        {
            return Err(
                if pr.handleTypes & !CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR != 0 {
                    CUDA_ERROR_NOT_SUPPORTED
                } else {
                    CUDA_ERROR_INVALID_VALUE
                },
            );
        }
        let dev = pr.location.id;
        let phys = device::physical(dev).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        let p = new_pool(dev, phys, false, Some(&pr));
        let h = p.handle();
        pools().by_id.insert(p.id, p);
        // SAFETY: null-checked above.
        unsafe { pool.write(h) };
        Ok(())
    })();
    rc(r)
}

/// `cuMemPoolDestroy`: outstanding allocations die with the pool.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    let r = (|| {
        device::node()?;
        let id = pool_id(pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut ps = pools();
        match ps.by_id.get(&id) {
            Some(p) if !p.default => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        let mut p = ps.by_id.remove(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        ps.current.retain(|_, v| *v != id);
        drop(ps);
        memory::drain_where(|r| r.kind == Kind::Pool(id));
        p.allocs.clear();
        p.used = 0;
        p.shrink_to(0);
        Ok(())
    })();
    rc(r)
}

/// `cuMemPoolTrimTo`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, min_bytes_to_keep: usize) -> CUresult {
    let r = (|| {
        device::node()?;
        let id = pool_id(pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut ps = pools();
        let p = ps.by_id.get_mut(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        p.shrink_to(min_bytes_to_keep as u64);
        Ok(())
    })();
    rc(r)
}

/// `cuMemPoolSetAttribute`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    attr: CUmemPool_attribute,
    value: *mut c_void,
) -> CUresult {
    let r = (|| {
        device::node()?;
        let id = pool_id(pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut ps = pools();
        let p = ps.by_id.get_mut(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        match attr {
            CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
            | CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
            | CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                // SAFETY: int-valued attribute; non-null.
                p.reuse[(attr - 1) as usize] = unsafe { value.cast::<c_int>().read() };
            }
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => {
                // SAFETY: cuuint64_t-valued attribute; non-null.
                p.release_threshold = unsafe { value.cast::<u64>().read() };
            }
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH | CU_MEMPOOL_ATTR_USED_MEM_HIGH => {
                // SAFETY: cuuint64_t-valued attribute; non-null.
                if unsafe { value.cast::<u64>().read() } != 0 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                if attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH {
                    p.reserved_high = p.reserved;
                } else {
                    p.used_high = p.used;
                }
            }
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    })();
    rc(r)
}

/// `cuMemPoolGetAttribute`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    attr: CUmemPool_attribute,
    value: *mut c_void,
) -> CUresult {
    let r = (|| {
        device::node()?;
        let id = pool_id(pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ps = pools();
        let p = ps.by_id.get(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let v64 = match attr {
            CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
            | CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
            | CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                // SAFETY: int-valued attribute; non-null.
                unsafe { value.cast::<c_int>().write(p.reuse[(attr - 1) as usize]) };
                return Ok(());
            }
            CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => p.release_threshold,
            CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => p.reserved,
            CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => p.reserved_high,
            CU_MEMPOOL_ATTR_USED_MEM_CURRENT => p.used,
            CU_MEMPOOL_ATTR_USED_MEM_HIGH => p.used_high,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        // SAFETY: cuuint64_t-valued attribute; non-null.
        unsafe { value.cast::<u64>().write(v64) };
        Ok(())
    })();
    rc(r)
}

/// `cuMemPoolSetAccess`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAccess(
    pool: CUmemoryPool,
    map: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    let r = (|| {
        device::node()?;
        let id = pool_id(pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if count > 0 && map.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let descs: Vec<CUmemAccessDesc> = (0..count)
            // SAFETY: the caller provides `count` descriptors.
            .map(|i| unsafe { map.add(i).read() })
            .collect();
        let mut ps = pools();
        let p = ps.by_id.get_mut(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        for d in &descs {
            if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE
                || device::physical(d.location.id).is_err()
                || !matches!(
                    d.flags,
                    CU_MEM_ACCESS_FLAGS_PROT_NONE
                        | CU_MEM_ACCESS_FLAGS_PROT_READ
                        | CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                )
            {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            // The owning device always has read-write access.
            if d.location.id == p.device && d.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE {
                return Err(CUDA_ERROR_INVALID_DEVICE);
            }
        }
        for d in descs {
            p.access.insert(d.location.id, d.flags);
        }
        Ok(())
    })();
    rc(r)
}

/// `cuMemPoolGetAccess`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAccess(
    flags: *mut CUmemAccess_flags,
    pool: CUmemoryPool,
    location: *mut CUmemLocation,
) -> CUresult {
    let r = (|| {
        device::node()?;
        let id = pool_id(pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if flags.is_null() || location.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a valid location.
        let loc = unsafe { location.read() };
        if loc.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        device::physical(loc.id).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        let ps = pools();
        let p = ps.by_id.get(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let f = if loc.id == p.device {
            CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        } else {
            p.access
                .get(&loc.id)
                .copied()
                .unwrap_or(CU_MEM_ACCESS_FLAGS_PROT_NONE)
        };
        // SAFETY: null-checked above.
        unsafe { flags.write(f) };
        Ok(())
    })();
    rc(r)
}

/// Export of pool handles is not simulated.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolExportToShareableHandle(
    _handle_out: *mut c_void,
    pool: CUmemoryPool,
    _handle_type: CUmemAllocationHandleType,
    _flags: u64,
) -> CUresult {
    let known =
        pool_id(pool).is_some_and(|id| pools().by_id.get(&id).is_some_and(|p| p.handle_types != 0));
    if known {
        CUDA_ERROR_NOT_SUPPORTED
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_handles_round_trip() {
        assert_eq!(pool_id(handle_of(7)), Some(7));
        assert_eq!(pool_id(std::ptr::null_mut()), None);
        assert_eq!(pool_id((POOL_HANDLE_BASE + 3) as CUmemoryPool), None);
    }
}
