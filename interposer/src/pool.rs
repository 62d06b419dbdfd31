//! Stream-ordered allocation and memory pools. A pool is charged what it *reserves*
//! (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`), not what the app asked: an allocation pre-charges
//! only the growth the pool needs (the missing bytes rounded to the granularity), and the charge
//! follows the reserved size down when the pool releases memory (synchronisation above the
//! release threshold, `cuMemPoolTrimTo`, destroy). `cuMemFreeAsync` of plain memory returns its
//! charge in stream order (a host function enqueued behind the free).

#![allow(non_snake_case)]

use crate::charge::{round, site, sync_locked, sync_pools};
use crate::driver::{current_pool, in_stream_order, pool_attr};
use crate::entry::Twin;
use crate::guard;
use crate::state::{memory_gate, PoolCharge};
use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::pfn;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use std::ffi::c_void;

type R = CUresult;

/// Sub-allocation alignment of pools (the driver's and the simulator's).
const POOL_ALIGN: u64 = 512;

/// Pool allocation: pre-charges the growth the pool needs, runs `alloc`, then sets the pool's
/// charge to what it reserves now.
fn pool_alloc(pool: Option<CUmemoryPool>, size: u64, alloc: impl FnOnce() -> R) -> R {
    let Some(_g) = guard::enter() else {
        return alloc();
    };
    let Some(g) = memory_gate() else {
        return alloc();
    };
    if size == 0 {
        return alloc();
    }
    let known = pool.and_then(|p| {
        let m = g.pools.lock().ok()?;
        m.get(&(p as usize)).map(|c| (p, c.ordinal, c.entry))
    });
    let target = match known {
        Some(k) => Some(k),
        None => site().and_then(|s| {
            let p = pool.or_else(|| current_pool(s.ordinal))?;
            Some((p, s.ordinal, s.entry))
        }),
    };
    let Some((pool, ordinal, entry)) = target else {
        return alloc();
    };
    let Ok(mut pools) = g.pools.lock() else {
        return alloc();
    };
    let mut slot = *pools.entry(pool as usize).or_insert(PoolCharge {
        entry,
        ordinal,
        charged: 0,
    });
    let need = size.div_ceil(POOL_ALIGN).saturating_mul(POOL_ALIGN);
    let mut pre;
    let mut retried = false;
    loop {
        let reserved =
            pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT).unwrap_or(slot.charged);
        if reserved < slot.charged {
            g.uncharge(slot.entry, slot.charged - reserved);
            slot.charged = reserved;
            pools.insert(pool as usize, slot);
        }
        let used = pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT).unwrap_or(reserved);
        let room = reserved.saturating_sub(used);
        pre = if need > room { round(need - room) } else { 0 };
        if reserved > slot.charged {
            // Reserved memory we have not charged (a growth we could not charge before): it
            // is part of what this call must fit under the cap.
            pre += reserved - slot.charged;
        }
        if pre == 0 || g.charge(slot.ordinal, slot.entry, pre).is_ok() {
            break;
        }
        // Pools (this one included) may have released memory: re-read everything once.
        let lowered = sync_locked(g, &mut pools) | crate::charge::sync_cache(g);
        if let Some(c) = pools.get(&(pool as usize)) {
            slot.charged = c.charged;
        }
        if retried || !lowered {
            pools.insert(pool as usize, slot);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        retried = true;
    }
    let r = alloc();
    let held = slot.charged + pre;
    let now = match pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) {
        Some(n) => n,
        None if r == CUDA_SUCCESS => held,
        // Unreadable after a failure (e.g. not a pool the driver knows): nothing grew.
        None => {
            g.uncharge(slot.entry, pre);
            if slot.charged == 0 {
                pools.remove(&(pool as usize));
            }
            return r;
        }
    };
    let mut settled = now;
    if now > held {
        if g.charge(slot.ordinal, slot.entry, now - held).is_err() {
            // Charged at the next allocation from this pool (see above).
            settled = held;
            crate::log!(
                crate::log::Level::Warn,
                "pool grew {} B beyond its reservation",
                now - held
            );
        }
    } else {
        g.uncharge(slot.entry, held - now);
    }
    slot.charged = settled;
    pools.insert(pool as usize, slot);
    r
}

/// `cuMemAllocAsync`, `cuMemAllocAsync_ptsz`.
///
/// # Safety
/// The driver's contract for the function of this name.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
pub(crate) unsafe fn cuMemAllocAsync(
    twin: Twin<pfn::cuMemAllocAsync>,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    stream: CUstream,
) -> R {
    pool_alloc(
        None,
        bytesize as u64,
        || forward!(twin; dptr, bytesize, stream),
    )
}

/// `cuMemAllocFromPoolAsync`, `cuMemAllocFromPoolAsync_ptsz`.
///
/// # Safety
/// The driver's contract for the function of this name.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
pub(crate) unsafe fn cuMemAllocFromPoolAsync(
    twin: Twin<pfn::cuMemAllocFromPoolAsync>,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> R {
    pool_alloc(
        Some(pool).filter(|p| !p.is_null()),
        bytesize as u64,
        || forward!(twin; dptr, bytesize, pool, stream),
    )
}

fn free_async(dptr: CUdeviceptr, stream: CUstream, ptsz: bool, free: impl FnOnce() -> R) -> R {
    let r = free();
    if r != CUDA_SUCCESS {
        return r;
    }
    let Some(_g) = guard::enter() else { return r };
    let Some(g) = memory_gate() else { return r };
    if let Some((e, b)) = g.untrack(dptr) {
        // Plain memory freed in stream order: its charge returns when the stream gets there.
        in_stream_order(
            stream,
            ptsz,
            Box::new(move || {
                if let Some(g) = memory_gate() {
                    g.uncharge(e, b);
                }
            }),
        );
    } else if let Some(done) = crate::charge::free_later(g, dptr) {
        in_stream_order(stream, ptsz, done);
    }
    // Pool memory stays reserved by its pool: charges follow RESERVED_MEM_CURRENT.
    r
}

/// `cuMemFreeAsync`, `cuMemFreeAsync_ptsz`: the charge of plain memory returns when the
/// stream reaches the free.
///
/// # Safety
/// The driver's contract for the function of this name.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
pub(crate) unsafe fn cuMemFreeAsync(
    twin: Twin<pfn::cuMemFreeAsync>,
    dptr: CUdeviceptr,
    stream: CUstream,
) -> R {
    free_async(
        dptr,
        stream,
        twin.per_thread,
        || forward!(twin; dptr, stream),
    )
}

/// `cuMemPoolCreate`: remembers the pool's device so its allocations are charged there.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> R {
    let r = call!(cuMemPoolCreate; pool, props);
    if r != CUDA_SUCCESS || pool.is_null() || props.is_null() {
        return r;
    }
    // SAFETY: non-null; the caller's props and the handle the driver wrote.
    let (loc, h) = unsafe { ((*props).location, *pool) };
    remember_pool_device(h, &loc);
    r
}

/// Remembers that `pool` serves device `loc` (when it is a device location), so allocations
/// from it are charged there whatever context is current.
fn remember_pool_device(pool: CUmemoryPool, loc: &CUmemLocation) {
    if pool.is_null() || loc.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return;
    }
    let Some(_g) = guard::enter() else { return };
    if let Some(g) = memory_gate() {
        if let (Some(entry), Ok(mut pools)) = (g.entry(loc.id), g.pools.lock()) {
            pools.entry(pool as usize).or_insert(PoolCharge {
                entry,
                ordinal: loc.id,
                charged: 0,
            });
        }
    }
}

/// The location a CUDA 13.0 pool call names, if readable.
fn location(loc: *const CUmemLocation) -> Option<CUmemLocation> {
    // SAFETY: non-null (checked); the caller's location, which the driver accepted.
    (!loc.is_null()).then(|| unsafe { *loc })
}

/// After a successful pool query by location: remembers the pool's device. Returns `r`.
fn got_pool(r: R, pool: *mut CUmemoryPool, loc: *const CUmemLocation) -> R {
    if let (CUDA_SUCCESS, false, Some(l)) = (r, pool.is_null(), location(loc)) {
        // SAFETY: non-null; written by the driver on success.
        remember_pool_device(unsafe { *pool }, &l);
    }
    r
}

/// `cuMemGetDefaultMemPool` (CUDA 13.0): the device default pool by location; its device is
/// remembered so `cuMemAllocFromPoolAsync` with it is charged on that device.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemGetDefaultMemPool(
    pool: *mut CUmemoryPool,
    loc: *const CUmemLocation,
    kind: CUmemAllocationType,
) -> R {
    let r = call!(cuMemGetDefaultMemPool; pool, loc, kind);
    got_pool(r, pool, loc)
}

/// `cuMemGetMemPool` (CUDA 13.0): a location's current pool (remembered as above).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemGetMemPool(
    pool: *mut CUmemoryPool,
    loc: *const CUmemLocation,
    kind: CUmemAllocationType,
) -> R {
    let r = call!(cuMemGetMemPool; pool, loc, kind);
    got_pool(r, pool, loc)
}

/// `cuMemSetMemPool` (CUDA 13.0): `cuMemAllocAsync` on that device now draws from `pool`,
/// whose device is remembered; the charge follows what it reserves, as for any pool.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemSetMemPool(
    loc: *const CUmemLocation,
    kind: CUmemAllocationType,
    pool: CUmemoryPool,
) -> R {
    let r = call!(cuMemSetMemPool; loc, kind, pool);
    if let (CUDA_SUCCESS, Some(l)) = (r, location(loc)) {
        remember_pool_device(pool, &l);
    }
    r
}

/// `cuMemPoolSetAttribute`: the release threshold decides what a pool keeps after
/// synchronisation; charges follow the reserved size, re-read here.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    attr: CUmemPool_attribute,
    value: *mut c_void,
) -> R {
    let r = call!(cuMemPoolSetAttribute; pool, attr, value);
    if r == CUDA_SUCCESS {
        if let (Some(_g), Some(g)) = (guard::enter(), memory_gate()) {
            sync_pools(g);
        }
    }
    r
}

/// `cuMemPoolTrimTo`: after trimming, pool charges follow the reserved sizes down.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemPoolTrimTo(pool: CUmemoryPool, keep: usize) -> R {
    let r = call!(cuMemPoolTrimTo; pool, keep);
    if let (Some(_g), Some(g)) = (guard::enter(), memory_gate()) {
        sync_pools(g);
    }
    r
}

/// `cuMemPoolDestroy`: the pool's memory goes back to the device.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMemPoolDestroy(pool: CUmemoryPool) -> R {
    let r = call!(cuMemPoolDestroy; pool);
    if r == CUDA_SUCCESS {
        if let Some(g) = memory_gate() {
            if let Ok(mut pools) = g.pools.lock() {
                if let Some(c) = pools.remove(&(pool as usize)) {
                    g.uncharge(c.entry, c.charged);
                }
            }
        }
    }
    r
}
