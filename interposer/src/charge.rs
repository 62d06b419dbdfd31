//! The steps every allocating wrapper takes around the real call, and the charge corrections
//! that follow the driver: reserve-then-allocate ([`gated`]), free-then-uncharge ([`freed`]),
//! pools brought down to what they reserve ([`sync_pools`]), graph memory released or kept as
//! the device's graph cache ([`sync_cache`], [`free_later`]). Above the memory gate (`state`)
//! and the driver queries, below every export module.

use crate::driver::{current_device, pool_attr, reserved_by_driver};
use crate::graphmem::{Alloc, Graphs};
use crate::guard;
use crate::state::{memory_gate, MemoryGate, PoolCharge, GRANULARITY};
use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use std::collections::HashMap;

type R = CUresult;

pub(crate) fn round(bytes: u64) -> u64 {
    bytes.div_ceil(GRANULARITY).saturating_mul(GRANULARITY)
}

/// Context for one gated call: the gate and the current device's slice entry.
pub(crate) struct Site {
    pub(crate) gate: &'static MemoryGate,
    pub(crate) ordinal: CUdevice,
    pub(crate) entry: usize,
}

pub(crate) fn site() -> Option<Site> {
    let gate = memory_gate()?;
    let ordinal = current_device()?;
    let entry = gate.entry(ordinal)?;
    Some(Site {
        gate,
        ordinal,
        entry,
    })
}

/// Reserve-then-allocate: charges `round(size)`, runs `alloc`, keeps the charge under the
/// returned key on success and returns it otherwise.
pub(crate) fn gated(size: u64, alloc: impl FnOnce() -> (R, Option<u64>)) -> R {
    let Some(_g) = guard::enter() else {
        return alloc().0;
    };
    let Some(s) = site().filter(|_| size > 0) else {
        return alloc().0;
    };
    let bytes = round(size);
    if let Err(e) = s.gate.charge(s.ordinal, s.entry, bytes) {
        // Stream-ordered pools may hold memory the app already freed: give it back and retry.
        if !crate::charge::sync_pools(s.gate) || s.gate.charge(s.ordinal, s.entry, bytes).is_err() {
            return e;
        }
    }
    let (r, key) = alloc();
    match (r, key) {
        (CUDA_SUCCESS, Some(k)) => s.gate.track(k, s.entry, bytes),
        _ => s.gate.uncharge(s.entry, bytes),
    }
    r
}

/// Free-then-uncharge (never below the driver's truth).
pub(crate) fn freed(key: u64, free: impl FnOnce() -> R) -> R {
    let Some(g) = memory_gate() else {
        return free();
    };
    // Out of the table before the driver frees: once it has, another thread may be given the
    // same address and track it, and a later untrack would take that thread's charge.
    let held = g.untrack(key);
    let r = free();
    match (r, held) {
        (CUDA_SUCCESS, Some((e, b))) => g.uncharge(e, b),
        (CUDA_SUCCESS, None) => crate::charge::free_now(g, key),
        (_, Some((e, b))) => {
            if let Ok(mut m) = g.allocs.lock() {
                m.entry(key).or_insert((e, b));
            }
        }
        (_, None) => {}
    }
    r
}

pub(crate) fn sync_locked(g: &MemoryGate, pools: &mut HashMap<usize, PoolCharge>) -> bool {
    let mut lowered = false;
    for (&p, c) in pools.iter_mut() {
        if let Some(now) = pool_attr(p as CUmemoryPool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) {
            if now < c.charged {
                g.uncharge(c.entry, c.charged - now);
                c.charged = now;
                lowered = true;
            }
        }
    }
    lowered
}

/// Brings every known pool's charge down to its current reserved size (and graph memory to
/// what the driver still holds). Returns whether any charge went down.
pub(crate) fn sync_pools(g: &MemoryGate) -> bool {
    let mut lowered = match g.pools.lock() {
        Ok(mut pools) => sync_locked(g, &mut pools),
        Err(_) => false,
    };
    lowered |= crate::charge::sync_cache(g);
    lowered
}

/// Lowers the graph-cache charges to what the driver still reserves beyond live allocations.
/// Returns whether a charge went down.
pub(crate) fn sync_cache(g: &MemoryGate) -> bool {
    let Ok(mut gr) = g.graphs.lock() else {
        return false;
    };
    if gr.cache.is_empty() {
        return false;
    }
    let mut lowered = false;
    let devices: Vec<CUdevice> = gr.cache.keys().copied().collect();
    for d in devices {
        let live: u64 = gr
            .allocs
            .values()
            .filter(|a| a.live && a.ordinal == d)
            .map(|a| a.bytes)
            .sum();
        let target = reserved_by_driver(d).map_or(0, |r| r.saturating_sub(live));
        if let Some((e, c)) = gr.cache.get_mut(&d) {
            if target < *c {
                g.uncharge(*e, *c - target);
                *c = target;
                lowered = true;
            }
        }
    }
    lowered
}

/// An allocation stopped being live: its bytes leave the slice, or stay as the device's graph
/// cache when the driver reports one.
pub(crate) fn release(g: &MemoryGate, gr: &mut Graphs, a: Alloc) {
    if reserved_by_driver(a.ordinal).is_some() {
        gr.cache.entry(a.ordinal).or_insert((a.entry, 0)).1 += a.bytes;
    } else {
        g.uncharge(a.entry, a.bytes);
    }
}

/// A free in stream order of graph memory at `va` (`cuMemFreeAsync`): returns the work to run
/// when the stream gets there, or `None` when `va` is not a live graph allocation.
pub(crate) fn free_later(g: &MemoryGate, va: u64) -> Option<Box<dyn FnOnce() + Send>> {
    let gen = {
        let gr = g.graphs.lock().ok()?;
        let a = gr.allocs.get(&va).filter(|a| a.live)?;
        a.gen
    };
    Some(Box::new(move || free_if(va, gen)))
}

/// `cuMemFree` of graph memory.
pub(crate) fn free_now(g: &MemoryGate, va: u64) {
    if let Some(f) = free_later(g, va) {
        f();
    }
}

pub(crate) fn free_if(va: u64, gen: u64) {
    let Some(g) = memory_gate() else { return };
    let Ok(mut gr) = g.graphs.lock() else { return };
    let Some(a) = gr.allocs.get_mut(&va) else {
        return;
    };
    if a.live && a.gen == gen {
        a.live = false;
        let a = *a;
        release(g, &mut gr, a);
    }
}
