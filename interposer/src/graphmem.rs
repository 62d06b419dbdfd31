//! Graph-memory bookkeeping of a process (plain data, held by the memory gate): allocation nodes
//! by address, each graph's and executable graph's allocation and free nodes, and the bytes
//! charged for what the driver caches for graphs. The operations are in `charge` and `graph`.

use gpuslice_cuda_abi::types::CUdevice;
use std::collections::HashMap;

/// One graph allocation (by address).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Alloc {
    pub(crate) entry: usize,
    pub(crate) ordinal: CUdevice,
    pub(crate) bytes: u64,
    pub(crate) live: bool,
    pub(crate) gen: u64,
}

/// Allocation and free nodes of a graph.
#[derive(Clone, Debug, Default)]
pub(crate) struct Nodes {
    pub(crate) allocs: Vec<u64>,
    pub(crate) frees: Vec<u64>,
}

/// Graph-memory bookkeeping of this process.
#[derive(Debug, Default)]
pub struct Graphs {
    pub(crate) allocs: HashMap<u64, Alloc>,
    pub(crate) graphs: HashMap<usize, Nodes>,
    pub(crate) execs: HashMap<usize, (Nodes, bool)>,
    /// Per ordinal: (entry, bytes charged for memory the driver caches for graphs).
    pub(crate) cache: HashMap<CUdevice, (usize, u64)>,
}
