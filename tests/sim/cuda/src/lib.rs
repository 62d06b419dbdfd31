//! Simulated `libcuda.so.1`: the CUDA driver API with real signatures, exported names and error
//! codes, backed by the shared ground truth of `gpuslice-sim-core` (memory, engines, processes).
//! A test double: no product binary links it or looks for it.
//!
//! Module ownership (each file has one job):
//! - `device`: `cuInit`, `cuDriverGetVersion`, device enumeration, names, UUIDs, attributes, totals.
//! - `context`: primary and created contexts, the per-thread context stack.
//! - `memory`: `cuMemAlloc*`, `cuMemFree*`, `cuMemGetInfo*`, host allocations, memcpy/memset.
//! - `pool`: stream-ordered allocation and memory pools.
//! - `vmm`: virtual memory management and shareable-handle export / import.
//! - `array`: CUDA arrays, 3D arrays, mipmapped arrays.
//! - `ipc`: IPC memory handles.
//! - `stream`: streams with priorities and their asynchronous in-order worker.
//! - `event`: events with real timestamps.
//! - `module`: modules and functions (`spin` and friends).
//! - `launch`: `cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`.
//! - `graph`: CUDA Graphs and stream capture.
//! - `capture_rules`: which calls a live capture prohibits, by capture mode and thread.
//! - `procaddr`: `cuGetProcAddress` / `cuGetProcAddress_v2` and the symbol version table.

mod array;
mod capture_rules;
mod context;
mod device;
mod event;
mod graph;
mod ipc;
mod launch;
mod memory;
mod module;
mod pool;
mod procaddr;
mod stream;
mod vmm;
mod wait;

/// Every driver function the interposer wraps is exported here with the signature declared
/// once in `gpuslice_cuda_abi::pfn` (an export that drifted from it does not compile), except
/// the four the simulator does not implement: `cuDeviceGraphMemTrim`, `cuGraphAddNode`
/// (`_v2`) and `cuGraphClone`.
mod abi_check {
    #[allow(unused_imports)]
    use crate::{
        array::*, context::*, device::*, event::*, graph::*, ipc::*, launch::*, memory::*,
        module::*, pool::*, procaddr::*, stream::*, vmm::*,
    };
    // The interposer's declaration (`for_each_wrapped!`), its CUDA part: one name at a time, so
    // the few the simulator does not implement can be skipped.
    macro_rules! check {
        (cuda { $($w:ident $(/ $twin:ident)? ($($p:tt)*) -> $r:ty;)* } nvml { $($nvml:tt)* }) => {
            $(check!(@one $w); $(check!(@one $twin);)?)*
        };
        (@one cuDeviceGraphMemTrim) => {};
        (@one cuGraphAddNode) => {};
        (@one cuGraphAddNode_v2) => {};
        (@one cuGraphClone) => {};
        (@one $name:ident) => {
            const _: gpuslice_cuda_abi::pfn::$name = $name;
        };
    }
    gpuslice_cuda_abi::for_each_wrapped!(check);
}
