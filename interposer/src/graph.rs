//! Graph memory nodes. `cuGraphAddMemAllocNode` (and `cuGraphAddNode` with a memory-allocation
//! node) fixes an address and a size; the memory exists from a launch of an executable graph
//! holding the node until a free node (or `cuMemFree` / `cuMemFreeAsync`) releases it. We record
//! each allocation node by address, copy a graph's allocation / free nodes into each executable
//! graph at instantiation, charge the allocations **before** `cuGraphLaunch` (reserve-then-
//! launch: over the cap the launch returns `CUDA_ERROR_OUT_OF_MEMORY` and nothing runs), and
//! return them in stream order after the free nodes ran (a host function enqueued behind the
//! graph). A relaunch with `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH` reuses the live
//! allocation's charge.
//!
//! Real drivers keep freed graph memory cached for reuse until `cuDeviceGraphMemTrim`; where the
//! driver reports `CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT`, freed bytes stay charged as the
//! device's graph *cache* until the driver's reserved size says they were released.

#![allow(non_snake_case)]

use crate::charge::{free_if, release, round, sync_cache};
use crate::entry::Twin;
use crate::graphmem::{Alloc, Graphs};
use crate::guard;
use crate::state::memory_gate;
use gpuslice_cuda_abi::exec::*;
use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::pfn;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use std::ffi::{c_char, c_void};

type R = CUresult;

fn record_alloc(graph: CUgraph, va: u64, bytes: usize, ordinal: CUdevice) {
    let Some(_g) = guard::enter() else { return };
    let Some(g) = memory_gate() else { return };
    let Some(entry) = g.entry(ordinal) else {
        return;
    };
    if let Ok(mut gr) = g.graphs.lock() {
        let old = gr.allocs.insert(
            va,
            Alloc {
                entry,
                ordinal,
                bytes: round(bytes as u64),
                live: false,
                gen: 0,
            },
        );
        if let Some(o) = old.filter(|o| o.live) {
            // The driver handed out an address we still thought live: it was freed.
            release(g, &mut gr, o);
        }
        gr.graphs.entry(graph as usize).or_default().allocs.push(va);
    }
}

fn record_free(graph: CUgraph, va: u64) {
    if let Some(g) = memory_gate() {
        if let Ok(mut gr) = g.graphs.lock() {
            gr.graphs.entry(graph as usize).or_default().frees.push(va);
        }
    }
}

/// `cuGraphAddMemAllocNode`: the address and size are recorded; memory is charged at launch.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphAddMemAllocNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> R {
    let r = call!(cuGraphAddMemAllocNode;
        node, graph, deps, ndeps, params);
    if r == CUDA_SUCCESS && !params.is_null() {
        // SAFETY: non-null; the driver wrote `dptr` on success.
        let p = unsafe { &*params };
        record_alloc(graph, p.dptr, p.bytesize, p.poolProps.location.id);
    }
    r
}

/// `cuGraphAddMemFreeNode`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphAddMemFreeNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    dptr: CUdeviceptr,
) -> R {
    let r = call!(cuGraphAddMemFreeNode;
        node, graph, deps, ndeps, dptr);
    if r == CUDA_SUCCESS {
        record_free(graph, dptr);
    }
    r
}

/// Offset of the union inside `CUgraphNodeParams` (type + 3 reserved ints).
const NODE_PARAMS_UNION: usize = 16;

/// After a successful generic `cuGraphAddNode*`: records memory nodes.
///
/// # Safety
/// `params` is null or the caller's `CUgraphNodeParams`.
unsafe fn record_generic(graph: CUgraph, params: *const u8) {
    if params.is_null() {
        return;
    }
    // SAFETY: the struct starts with its 32-bit node type.
    let ty = unsafe { params.cast::<CUgraphNodeType>().read_unaligned() };
    // SAFETY: the union starts at byte 16 of the (8-byte aligned) struct.
    let u = unsafe { params.add(NODE_PARAMS_UNION) };
    match ty {
        CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
            // SAFETY: the union holds CUDA_MEM_ALLOC_NODE_PARAMS_v2 for this type.
            let p = unsafe { u.cast::<CUDA_MEM_ALLOC_NODE_PARAMS>().read_unaligned() };
            record_alloc(graph, p.dptr, p.bytesize, p.poolProps.location.id);
        }
        CU_GRAPH_NODE_TYPE_MEM_FREE => {
            // SAFETY: the union holds CUDA_MEM_FREE_NODE_PARAMS for this type.
            let p = unsafe { u.cast::<CUDA_MEM_FREE_NODE_PARAMS>().read_unaligned() };
            record_free(graph, p.dptr);
        }
        _ => {}
    }
}

/// `cuGraphAddNode` (CUDA 12.2): memory nodes are recorded as by the dedicated calls.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphAddNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    params: *mut c_void,
) -> R {
    let r = call!(cuGraphAddNode;
        node, graph, deps, ndeps, params);
    if r == CUDA_SUCCESS {
        // SAFETY: the caller's CUgraphNodeParams, completed by the driver.
        unsafe { record_generic(graph, params.cast()) };
    }
    r
}

/// `cuGraphAddNode_v2` (CUDA 12.3, with edge data).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphAddNode_v2(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const c_void,
    ndeps: usize,
    params: *mut c_void,
) -> R {
    let r = call!(cuGraphAddNode_v2;
        node, graph, deps, edges, ndeps, params);
    if r == CUDA_SUCCESS {
        // SAFETY: as for cuGraphAddNode.
        unsafe { record_generic(graph, params.cast()) };
    }
    r
}

/// `cuGraphClone`: the clone holds the same memory nodes.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphClone(clone: *mut CUgraph, original: CUgraph) -> R {
    let r = call!(cuGraphClone; clone, original);
    if r == CUDA_SUCCESS && !clone.is_null() {
        if let Some(g) = memory_gate() {
            if let Ok(mut gr) = g.graphs.lock() {
                if let Some(n) = gr.graphs.get(&(original as usize)).cloned() {
                    // SAFETY: written by the driver on success.
                    gr.graphs.insert(unsafe { *clone } as usize, n);
                }
            }
        }
    }
    r
}

/// `cuGraphDestroy`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphDestroy(graph: CUgraph) -> R {
    let r = call!(cuGraphDestroy; graph);
    if r == CUDA_SUCCESS {
        if let Some(g) = memory_gate() {
            if let Ok(mut gr) = g.graphs.lock() {
                gr.graphs.remove(&(graph as usize));
            }
        }
    }
    r
}

fn record_exec(r: R, exec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> R {
    if r != CUDA_SUCCESS || exec.is_null() {
        return r;
    }
    if let Some(g) = memory_gate() {
        if let Ok(mut gr) = g.graphs.lock() {
            if let Some(n) = gr.graphs.get(&(graph as usize)).cloned() {
                let auto = flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH != 0;
                // SAFETY: written by the driver on success.
                gr.execs.insert(unsafe { *exec } as usize, (n, auto));
            }
        }
    }
    r
}

/// `cuGraphInstantiate` (CUDA 10 form).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphInstantiate(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    err: *mut CUgraphNode,
    log: *mut c_char,
    size: usize,
) -> R {
    let r = call!(cuGraphInstantiate;
        exec, graph, err, log, size);
    record_exec(r, exec, graph, 0)
}

/// `cuGraphInstantiate_v2`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphInstantiate_v2(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    err: *mut CUgraphNode,
    log: *mut c_char,
    size: usize,
) -> R {
    let r = call!(cuGraphInstantiate_v2;
        exec, graph, err, log, size);
    record_exec(r, exec, graph, 0)
}

/// `cuGraphInstantiateWithFlags` (`cuGraphInstantiate` from CUDA 12.0 on).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphInstantiateWithFlags(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    flags: u64,
) -> R {
    let r = call!(cuGraphInstantiateWithFlags; exec, graph, flags);
    record_exec(r, exec, graph, flags)
}

fn params_flags(p: *const CUDA_GRAPH_INSTANTIATE_PARAMS) -> u64 {
    if p.is_null() {
        0
    } else {
        // SAFETY: non-null; the caller's parameter struct.
        unsafe { (*p).flags }
    }
}

/// `cuGraphInstantiateWithParams`, `cuGraphInstantiateWithParams_ptsz`.
///
/// # Safety
/// The driver's contract for the function of this name.
// Inlined into both shells of the pair: the twin is a constant there.
#[inline]
pub(crate) unsafe fn cuGraphInstantiateWithParams(
    twin: Twin<pfn::cuGraphInstantiateWithParams>,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
) -> R {
    let r = forward!(twin; exec, graph, p);
    record_exec(r, exec, graph, params_flags(p))
}

/// `cuGraphExecDestroy`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGraphExecDestroy(exec: CUgraphExec) -> R {
    let r = call!(cuGraphExecDestroy; exec);
    if r == CUDA_SUCCESS {
        if let Some(g) = memory_gate() {
            if let Ok(mut gr) = g.graphs.lock() {
                gr.execs.remove(&(exec as usize));
            }
        }
    }
    r
}

/// `cuDeviceGraphMemTrim`: the driver releases cached graph memory; cache charges follow.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuDeviceGraphMemTrim(dev: CUdevice) -> R {
    let r = call!(cuDeviceGraphMemTrim; dev);
    if r == CUDA_SUCCESS {
        if let (Some(_g), Some(g)) = (guard::enter(), memory_gate()) {
            sync_cache(g);
        }
    }
    r
}

/// `cuGraphLaunch(_ptsz)` with graph memory: charges the executable graph's allocations, runs
/// `launch`, and schedules the return of what its free nodes release.
pub(crate) fn launch(
    exec: CUgraphExec,
    stream: CUstream,
    ptsz: bool,
    launch: impl FnOnce() -> R,
) -> R {
    let Some(g) = memory_gate() else {
        return launch();
    };
    let Some(_guard) = guard::enter() else {
        return launch();
    };
    let Ok(mut gr) = g.graphs.lock() else {
        return launch();
    };
    let Some((nodes, auto)) = gr.execs.get(&(exec as usize)).cloned() else {
        drop(gr);
        return launch();
    };
    if nodes.allocs.is_empty() && nodes.frees.is_empty() {
        drop(gr);
        return launch();
    }
    // Reserve: every allocation that is not a live one the launch itself frees and reuses.
    // (entry, charged now, ordinal, taken from the graph cache)
    let mut charged: Vec<(usize, u64, CUdevice, u64)> = Vec::new();
    let undo = |gr: &mut Graphs, charged: Vec<(usize, u64, CUdevice, u64)>| {
        for (e, b, o, c) in charged {
            g.uncharge(e, b);
            if c > 0 {
                gr.cache.entry(o).or_insert((e, 0)).1 += c;
            }
        }
    };
    for va in &nodes.allocs {
        let Some(a) = gr.allocs.get(va).copied() else {
            continue;
        };
        if a.live && auto {
            continue;
        }
        // Memory the driver caches for graphs is used first.
        let from_cache = gr.cache.get_mut(&a.ordinal).map_or(0, |c| {
            let t = c.1.min(a.bytes);
            c.1 -= t;
            t
        });
        let need = a.bytes - from_cache;
        let mut ok = need == 0 || g.charge(a.ordinal, a.entry, need).is_ok();
        if !ok {
            drop(gr);
            let lowered = crate::charge::sync_pools(g);
            gr = match g.graphs.lock() {
                Ok(x) => x,
                Err(_) => return CUDA_ERROR_OUT_OF_MEMORY,
            };
            ok = lowered && g.charge(a.ordinal, a.entry, need).is_ok();
        }
        charged.push((a.entry, if ok { need } else { 0 }, a.ordinal, from_cache));
        if !ok {
            undo(&mut gr, charged);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    // The driver may run host functions (ours among them) while launching: no lock held.
    drop(gr);
    let r = launch();
    let Ok(mut gr) = g.graphs.lock() else {
        return r;
    };
    if r != CUDA_SUCCESS {
        undo(&mut gr, charged);
        return r;
    }
    for va in &nodes.allocs {
        let Some(a) = gr.allocs.get(va).copied() else {
            continue;
        };
        if a.live && !auto {
            // The driver accepted a relaunch: the previous allocation was freed already.
            release(g, &mut gr, a);
        }
        if let Some(x) = gr.allocs.get_mut(va) {
            x.live = true;
            x.gen += 1;
        }
    }
    let frees: Vec<(u64, u64)> = nodes
        .frees
        .iter()
        .filter_map(|va| gr.allocs.get(va).map(|a| (*va, a.gen)))
        .collect();
    drop(gr);
    if !frees.is_empty() {
        crate::driver::in_stream_order(
            stream,
            ptsz,
            Box::new(move || {
                for (va, gen) in frees {
                    free_if(va, gen);
                }
            }),
        );
    }
    r
}
