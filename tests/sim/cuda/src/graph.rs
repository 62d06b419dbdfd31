//! CUDA Graphs and stream capture.
//!
//! A graph is a list of nodes with dependencies (kernel, memset, host, empty, event record /
//! wait, memory alloc / free). Instantiation fixes a topological order (creation order: a node
//! can only depend on earlier nodes); a launch enqueues the nodes into the stream in that order,
//! as one uninterrupted batch, so they run serially (the simulated device has one engine, so
//! kernels never overlap anyway; independent host nodes are serialised too).
//!
//! Graph memory: `cuGraphAddMemAllocNode` fixes the address at add time, like the driver, but
//! from a private virtual range of the simulator; the memory is charged (through
//! `memory::device_alloc`) when the graph is launched and returned when the free node runs.
//! Simplification: those addresses are not known to the rest of the simulator, so they cannot
//! be passed to `cuMemFree`, memcpy or memset; only graph free nodes can free them. Relaunching
//! a graph whose allocation is still live is `CUDA_ERROR_INVALID_VALUE` unless it was
//! instantiated with `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`.
//!
//! Capture (`cuStreamBeginCapture*` … `cuStreamEndCapture`): kernels, host functions, memsets,
//! copies, event records / waits and stream-ordered allocations issued to a capturing stream
//! become nodes instead of running (memsets and copies as empty nodes: no device time); an
//! event recorded in a capturing stream and waited on by another stream forks the capture into
//! that stream, and waiting back joins it. Synchronising or querying a capturing stream, its
//! context or a captured event, callbacks (`cuStreamAddCallback`), and waiting on an event
//! recorded outside the capture invalidate the capture in every mode, from every thread (the
//! call fails: `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, `CUDA_ERROR_CAPTURED_EVENT`,
//! `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`; `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` at the end).
//! Once its capture ended, a captured event is `CUDA_ERROR_INVALID_VALUE` to query or wait on.
//! Potentially unsafe calls elsewhere, by capture mode and thread: `capture_rules`.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::thread::ThreadId;

use gpuslice_cuda_abi::exec::*;
use gpuslice_cuda_abi::memory::CUDA_MEM_ALLOC_NODE_PARAMS;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;

use crate::context::{self, Context};
use crate::device::rc;
use crate::event::Event;
use crate::launch::{self, Dims};
use crate::module;
use crate::stream::{self, Dep, Op, Stream};

/// Memset bandwidth of the simulated device (bytes per ns, i.e. 2 TB/s).
const MEMSET_BYTES_PER_NS: u64 = 2;
/// Base of the simulator's private graph-memory virtual range.
const GRAPH_VA_BASE: u64 = 0x7e00_0000_0000;
const GRAPH_BASE: usize = 0x0a90_0000_0000;
const NODE_BASE: usize = 0x0a91_0000_0000;
const EXEC_BASE: usize = 0x0a92_0000_0000;

/// What a node does.
#[derive(Clone)]
pub(crate) enum NodeOp {
    /// A kernel of `duration_ns` (priority: launch attribute, or the stream's).
    Kernel {
        duration_ns: u64,
        priority: Option<i32>,
    },
    /// A memset of `bytes` (engine time at 2 TB/s).
    Memset { bytes: u64 },
    /// `f(data)` on the host.
    Host {
        f: unsafe extern "C" fn(*mut c_void),
        data: usize,
    },
    /// Nothing.
    Empty,
    /// Records the event.
    EventRecord(Arc<Event>),
    /// Waits for the event's latest record.
    EventWait(Arc<Event>),
    /// Graph allocation of `bytes` at private address `va`, charged in `ctx` at launch.
    MemAlloc {
        va: u64,
        bytes: u64,
        ctx: Arc<Context>,
    },
    /// Frees the graph allocation at `va`.
    MemFree { va: u64 },
}

impl NodeOp {
    fn type_code(&self) -> CUgraphNodeType {
        match self {
            NodeOp::Kernel { .. } => CU_GRAPH_NODE_TYPE_KERNEL,
            NodeOp::Memset { .. } => CU_GRAPH_NODE_TYPE_MEMSET,
            NodeOp::Host { .. } => CU_GRAPH_NODE_TYPE_HOST,
            NodeOp::Empty => CU_GRAPH_NODE_TYPE_EMPTY,
            NodeOp::EventRecord(_) => CU_GRAPH_NODE_TYPE_EVENT_RECORD,
            NodeOp::EventWait(_) => CU_GRAPH_NODE_TYPE_WAIT_EVENT,
            NodeOp::MemAlloc { .. } => CU_GRAPH_NODE_TYPE_MEM_ALLOC,
            NodeOp::MemFree { .. } => CU_GRAPH_NODE_TYPE_MEM_FREE,
        }
    }
}

struct NodeRec {
    handle: usize,
    op: NodeOp,
    deps: Vec<usize>,
}

/// A graph.
pub(crate) struct Graph {
    nodes: Mutex<Vec<NodeRec>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

static NEXT: AtomicU64 = AtomicU64::new(1);

fn next(base: usize) -> usize {
    base + NEXT.fetch_add(1, Ordering::Relaxed) as usize * 0x40
}

impl Graph {
    fn new() -> Arc<Graph> {
        Arc::new(Graph {
            nodes: Mutex::new(Vec::new()),
        })
    }

    /// Adds a node after the nodes at indices `deps`; returns its index.
    fn add(self: &Arc<Self>, op: NodeOp, deps: Vec<usize>) -> (usize, usize) {
        let handle = next(NODE_BASE);
        let mut n = lock(&self.nodes);
        n.push(NodeRec { handle, op, deps });
        let idx = n.len() - 1;
        drop(n);
        lock(&REG).nodes.insert(handle, (Arc::downgrade(self), idx));
        (idx, handle)
    }

    /// Indices of every node `from` depends on, transitively, plus `from` itself.
    fn ancestors(&self, from: &[usize]) -> HashSet<usize> {
        let n = lock(&self.nodes);
        let mut seen: HashSet<usize> = HashSet::new();
        let mut todo: Vec<usize> = from.to_vec();
        while let Some(i) = todo.pop() {
            if seen.insert(i) {
                if let Some(r) = n.get(i) {
                    todo.extend(r.deps.iter().copied());
                }
            }
        }
        seen
    }
}

struct GraphExec {
    ops: Vec<NodeOp>,
    flags: u64,
}

#[derive(Default)]
struct Registry {
    graphs: HashMap<usize, Arc<Graph>>,
    nodes: HashMap<usize, (Weak<Graph>, usize)>,
    execs: HashMap<usize, Arc<GraphExec>>,
    /// Live graph allocations: private address → (real allocation, bytes).
    live: HashMap<u64, CUdeviceptr>,
    /// Every private address handed out by an alloc node.
    vas: HashSet<u64>,
    next_va: u64,
}

static REG: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

fn reg() -> MutexGuard<'static, Registry> {
    lock(&REG)
}

fn lookup_graph(h: CUgraph) -> Result<Arc<Graph>, CUresult> {
    crate::device::node()?;
    reg()
        .graphs
        .get(&(h as usize))
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

// ---------------------------------------------------------------------------------------------
// Capture.

/// One capture sequence (the origin stream plus the streams it forked into).
pub(crate) struct CaptureSession {
    graph: Arc<Graph>,
    id: u64,
    origin: u64,
    mode: CUstreamCaptureMode,
    thread: ThreadId,
    invalidated: AtomicBool,
    /// The capture ended (`cuStreamEndCapture`): its captured events are stale.
    ended: AtomicBool,
    /// The `CUgraph` handle of the graph being built (`cuStreamGetCaptureInfo_v2`).
    handle: usize,
    members: Mutex<Vec<Weak<Stream>>>,
}

impl CaptureSession {
    /// The thread that began the capture.
    pub(crate) fn thread(&self) -> ThreadId {
        self.thread
    }

    /// The mode the capture was begun in.
    pub(crate) fn mode(&self) -> CUstreamCaptureMode {
        self.mode
    }

    /// Invalidates the capture: further work fails and so does its end.
    pub(crate) fn invalidate(&self) {
        self.invalidated.store(true, Ordering::Release);
    }
}

/// The capture state of one stream.
pub(crate) struct StreamCapture {
    session: Arc<CaptureSession>,
    leaves: Vec<usize>,
    /// The leaves' node handles as last reported by `cuStreamGetCaptureInfo_v2` / `_v3`
    /// (the array the caller reads stays valid until the next call on the stream).
    /// (Handles as `usize`, the layout of `CUgraphNode`.)
    reported: Vec<usize>,
    /// Zeroed edge data for those (`_v3`): 8 bytes per dependency.
    edges: Vec<u64>,
}

impl StreamCapture {
    fn new(session: Arc<CaptureSession>, leaves: Vec<usize>) -> StreamCapture {
        StreamCapture {
            session,
            leaves,
            reported: Vec::new(),
            edges: Vec::new(),
        }
    }
}

/// Where an event was recorded during capture.
#[derive(Clone)]
pub(crate) struct CapturedAt {
    session: Arc<CaptureSession>,
    nodes: Vec<usize>,
}

static NEXT_CAPTURE: AtomicU64 = AtomicU64::new(1);

/// Marks `s`'s capture (if any) invalidated; true if the stream is capturing.
pub(crate) fn invalidate_if_capturing(s: &Arc<Stream>) -> bool {
    match lock(&s.capture).as_ref() {
        Some(c) => {
            c.session.invalidated.store(true, Ordering::Release);
            true
        }
        None => false,
    }
}

/// Records `e` into `s`'s capture if `s` is capturing (true), else leaves it to the caller.
pub(crate) fn capture_record_event(
    s: &Arc<Stream>,
    e: &Arc<Event>,
    external: bool,
) -> Result<bool, CUresult> {
    let mut cap = lock(&s.capture);
    let Some(c) = cap.as_mut() else {
        return Ok(false);
    };
    if external {
        let (idx, _) = c
            .session
            .graph
            .add(NodeOp::EventRecord(e.clone()), c.leaves.clone());
        c.leaves = vec![idx];
    } else {
        e.set_captured(CapturedAt {
            session: c.session.clone(),
            nodes: c.leaves.clone(),
        });
    }
    Ok(true)
}

/// Handles `cuStreamWaitEvent` for capture: joins or forks when the event was captured (true).
pub(crate) fn capture_wait_event(s: &Arc<Stream>, e: &Arc<Event>) -> Result<bool, CUresult> {
    let mut cap = lock(&s.capture);
    match (cap.as_mut(), e.captured()) {
        (Some(c), Some(at)) => {
            if !Arc::ptr_eq(&c.session, &at.session) {
                c.session.invalidated.store(true, Ordering::Release);
                return Err(CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
            }
            for n in at.nodes {
                if !c.leaves.contains(&n) {
                    c.leaves.push(n);
                }
            }
            Ok(true)
        }
        (Some(c), None) => {
            if e.issued_gen() == 0 {
                // Never recorded: nothing to wait for.
                return Ok(true);
            }
            // Recorded outside the capture: the capture may not depend on outside work.
            c.session.invalidate();
            Err(CUDA_ERROR_STREAM_CAPTURE_ISOLATION)
        }
        (None, Some(at)) => {
            if at.session.ended.load(Ordering::Acquire) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            if s.kind == stream::Kind::Legacy {
                at.session.invalidated.store(true, Ordering::Release);
                return Err(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
            }
            lock(&at.session.members).push(Arc::downgrade(s));
            *cap = Some(StreamCapture::new(at.session.clone(), at.nodes));
            Ok(true)
        }
        (None, None) => Ok(false),
    }
}

/// A query or synchronisation of an event whose latest record was captured at `at`: a live
/// capture is invalidated (`CUDA_ERROR_CAPTURED_EVENT`); after the capture ended the event is
/// `CUDA_ERROR_INVALID_VALUE`.
pub(crate) fn captured_event_used(at: &CapturedAt) -> CUresult {
    if at.session.ended.load(Ordering::Acquire) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    at.session.invalidate();
    CUDA_ERROR_CAPTURED_EVENT
}

/// Issues `op` as a node of `s`'s capture, if `s` is capturing (`Some`), else `None`.
pub(crate) fn capture_node(s: &Arc<Stream>, op: NodeOp) -> Option<Result<(), CUresult>> {
    let mut cap = lock(&s.capture);
    let c = cap.as_mut()?;
    if c.session.invalidated.load(Ordering::Acquire) {
        return Some(Err(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
    }
    let (idx, _) = c.session.graph.add(op, c.leaves.clone());
    c.leaves = vec![idx];
    Some(Ok(()))
}

/// `cuMemAllocAsync` / `cuMemAllocFromPoolAsync` on `h`: in a capture, an allocation node of
/// the graph (its address written to `dptr`, charged when the graph is launched); outside one,
/// a potentially unsafe call (`capture_rules`). `None`: not capturing, allowed.
pub(crate) fn capture_alloc(
    h: CUstream,
    ptsz: bool,
    bytes: usize,
    dptr: *mut CUdeviceptr,
) -> Option<Result<(), CUresult>> {
    let s = match stream::resolve(h, ptsz) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    if lock(&s.capture).is_none() {
        return crate::capture_rules::unsafe_call().err().map(Err);
    }
    if dptr.is_null() || bytes == 0 {
        return Some(Err(CUDA_ERROR_INVALID_VALUE));
    }
    let ctx = match context::current() {
        Ok(c) => c,
        Err(e) => return Some(Err(e)),
    };
    let va = graph_va(bytes as u64);
    let r = capture_node(
        &s,
        NodeOp::MemAlloc {
            va,
            bytes: bytes as u64,
            ctx,
        },
    )?;
    if r.is_ok() {
        // SAFETY: null-checked above; the caller provides a writable pointer.
        unsafe { dptr.write(va) };
    }
    Some(r)
}

/// `cuMemFreeAsync` of a graph allocation on a capturing stream: a free node (`None`: not a
/// graph allocation, or the stream is not capturing).
pub(crate) fn capture_free(
    h: CUstream,
    ptsz: bool,
    ptr: CUdeviceptr,
) -> Option<Result<(), CUresult>> {
    if !reg().vas.contains(&ptr) {
        return None;
    }
    let s = stream::resolve(h, ptsz).ok()?;
    capture_node(&s, NodeOp::MemFree { va: ptr })
}

/// Turns a node into stream work (at launch time: event records get their record number now).
fn to_stream_op(op: NodeOp) -> (Vec<Dep>, Op) {
    match op {
        NodeOp::Kernel {
            duration_ns,
            priority,
        } => (
            Vec::new(),
            Op::Kernel {
                duration_ns,
                priority,
            },
        ),
        NodeOp::Memset { bytes } => (
            Vec::new(),
            Op::Kernel {
                duration_ns: (bytes / MEMSET_BYTES_PER_NS).max(module::NOOP_NS),
                priority: None,
            },
        ),
        NodeOp::Host { f, data } => (Vec::new(), stream::host_fn_op(f, data)),
        NodeOp::Empty | NodeOp::MemAlloc { .. } => (Vec::new(), Op::Nop),
        NodeOp::EventRecord(e) => {
            let gen = e.issue();
            (Vec::new(), Op::Record(e, gen))
        }
        NodeOp::EventWait(e) => {
            let gen = e.issued_gen();
            let deps = if gen > 0 {
                vec![Dep::Event(e, gen)]
            } else {
                Vec::new()
            };
            (deps, Op::Nop)
        }
        NodeOp::MemFree { va } => (
            Vec::new(),
            Op::Host(Box::new(move || {
                let real = reg().live.remove(&va);
                if let Some(p) = real {
                    let _ = crate::memory::device_free(p);
                }
            })),
        ),
    }
}

/// Issues `op` to `s`: a node of the capture graph if `s` is capturing, stream work otherwise.
pub(crate) fn launch_op(s: &Arc<Stream>, op: NodeOp) -> Result<(), CUresult> {
    if let Some(r) = capture_node(s, op.clone()) {
        return r;
    }
    let (deps, op) = to_stream_op(op);
    stream::submit(s, deps, op);
    Ok(())
}

fn begin_capture(h: CUstream, mode: CUstreamCaptureMode, ptds: bool) -> Result<(), CUresult> {
    let s = stream::resolve(h, ptds)?;
    if mode > CU_STREAM_CAPTURE_MODE_RELAXED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if s.kind == stream::Kind::Legacy {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    let mut cap = lock(&s.capture);
    if cap.is_some() {
        return Err(CUDA_ERROR_ILLEGAL_STATE);
    }
    let graph = Graph::new();
    let handle = next(GRAPH_BASE);
    reg().graphs.insert(handle, graph.clone());
    let session = Arc::new(CaptureSession {
        graph,
        id: NEXT_CAPTURE.fetch_add(1, Ordering::Relaxed),
        origin: s.id,
        mode,
        thread: std::thread::current().id(),
        invalidated: AtomicBool::new(false),
        ended: AtomicBool::new(false),
        handle,
        members: Mutex::new(vec![Arc::downgrade(&s)]),
    });
    crate::capture_rules::register(&session);
    *cap = Some(StreamCapture::new(session, Vec::new()));
    Ok(())
}

/// `cuStreamBeginCapture` (CUDA 10.0 form: global mode).
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture(h: CUstream) -> CUresult {
    rc(begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, false))
}

/// `cuStreamBeginCapture_ptsz` (CUDA 10.0 form).
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_ptsz(h: CUstream) -> CUresult {
    rc(begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, true))
}

/// `cuStreamBeginCapture_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(
    h: CUstream,
    mode: CUstreamCaptureMode,
) -> CUresult {
    rc(begin_capture(h, mode, false))
}

/// `cuStreamBeginCapture_v2_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2_ptsz(
    h: CUstream,
    mode: CUstreamCaptureMode,
) -> CUresult {
    rc(begin_capture(h, mode, true))
}

fn end_capture(h: CUstream, pgraph: *mut CUgraph, ptds: bool) -> Result<(), CUresult> {
    if pgraph.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let s = stream::resolve(h, ptds)?;
    let session = {
        let cap = lock(&s.capture);
        let c = cap.as_ref().ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        if c.session.origin != s.id {
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
        }
        if c.session.mode != CU_STREAM_CAPTURE_MODE_RELAXED
            && c.session.thread != std::thread::current().id()
        {
            return Err(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
        }
        c.session.clone()
    };
    // Every forked stream must have been joined back into the origin.
    let origin_leaves = lock(&s.capture)
        .as_ref()
        .map(|c| c.leaves.clone())
        .unwrap_or_default();
    let joined = session.graph.ancestors(&origin_leaves);
    let members: Vec<Arc<Stream>> = lock(&session.members)
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let mut unjoined = false;
    for m in &members {
        if let Some(c) = lock(&m.capture).take() {
            if m.id != s.id && c.leaves.iter().any(|l| !joined.contains(l)) {
                unjoined = true;
            }
        }
    }
    session.ended.store(true, Ordering::Release);
    crate::capture_rules::unregister(&session);
    // SAFETY: null-checked above; the caller provides a writable CUgraph.
    unsafe { pgraph.write(std::ptr::null_mut()) };
    if unjoined || session.invalidated.load(Ordering::Acquire) {
        // SAFETY: the graph handle was registered at begin and never given out as a result.
        unsafe { cuGraphDestroy(session.handle as CUgraph) };
        return Err(if unjoined {
            CUDA_ERROR_STREAM_CAPTURE_UNJOINED
        } else {
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        });
    }
    // SAFETY: as above.
    unsafe { pgraph.write(session.handle as CUgraph) };
    Ok(())
}

/// `cuStreamEndCapture`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(h: CUstream, pgraph: *mut CUgraph) -> CUresult {
    rc(end_capture(h, pgraph, false))
}

/// `cuStreamEndCapture_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture_ptsz(h: CUstream, pgraph: *mut CUgraph) -> CUresult {
    rc(end_capture(h, pgraph, true))
}

fn capture_status(h: CUstream, ptds: bool) -> Result<(CUstreamCaptureStatus, u64), CUresult> {
    let s = stream::resolve(h, ptds)?;
    if s.kind == stream::Kind::Legacy && stream::blocking_capture_in(s.ctx.id) {
        // The legacy stream is unusable while a blocking stream of its context captures.
        return Err(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    }
    let cap = lock(&s.capture);
    Ok(match cap.as_ref() {
        None => (CU_STREAM_CAPTURE_STATUS_NONE, 0),
        Some(c) if c.session.invalidated.load(Ordering::Acquire) => {
            (CU_STREAM_CAPTURE_STATUS_INVALIDATED, c.session.id)
        }
        Some(c) => (CU_STREAM_CAPTURE_STATUS_ACTIVE, c.session.id),
    })
}

fn is_capturing(h: CUstream, out: *mut CUstreamCaptureStatus, ptds: bool) -> Result<(), CUresult> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (st, _) = capture_status(h, ptds)?;
    // SAFETY: null-checked above; the caller provides a writable status.
    unsafe { out.write(st) };
    Ok(())
}

/// `cuStreamIsCapturing`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
) -> CUresult {
    rc(is_capturing(h, status, false))
}

/// `cuStreamIsCapturing_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing_ptsz(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
) -> CUresult {
    rc(is_capturing(h, status, true))
}

fn capture_info(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    ptds: bool,
) -> Result<(), CUresult> {
    if status.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (st, cid) = capture_status(h, ptds)?;
    // SAFETY: null-checked above; the caller provides a writable status.
    unsafe { status.write(st) };
    if !id.is_null() && st != CU_STREAM_CAPTURE_STATUS_NONE {
        // SAFETY: non-null; the caller provides a writable u64.
        unsafe { id.write(cid) };
    }
    Ok(())
}

/// `cuStreamGetCaptureInfo` (CUDA 10.1 form: status and id).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
) -> CUresult {
    rc(capture_info(h, status, id, false))
}

/// `cuStreamGetCaptureInfo_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_ptsz(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
) -> CUresult {
    rc(capture_info(h, status, id, true))
}

/// `cuStreamGetCaptureInfo_v2` / `_v3`: status and id, and while the capture is active its
/// graph and the stream's current dependencies (and, for `_v3`, zeroed edge data).
#[allow(clippy::too_many_arguments)]
fn capture_info_v2(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const c_void,
    ndeps: *mut usize,
    ptds: bool,
) -> Result<(), CUresult> {
    capture_info(h, status, id, ptds)?;
    let s = stream::resolve(h, ptds)?;
    let mut cap = lock(&s.capture);
    let active = cap
        .as_ref()
        .is_some_and(|c| !c.session.invalidated.load(Ordering::Acquire));
    let Some(c) = cap.as_mut().filter(|_| active) else {
        return Ok(());
    };
    let nodes = lock(&c.session.graph.nodes);
    c.reported = c
        .leaves
        .iter()
        .filter_map(|&i| nodes.get(i).map(|n| n.handle))
        .collect();
    drop(nodes);
    c.edges = vec![0; c.reported.len()];
    // SAFETY: each out-pointer is null-checked; the caller provides writable ones. The arrays
    // written out live in the stream's capture state until the next call on the stream.
    unsafe {
        if !graph.is_null() {
            graph.write(c.session.handle as CUgraph);
        }
        if !deps.is_null() {
            deps.write(c.reported.as_ptr().cast::<CUgraphNode>());
        }
        if !edges.is_null() {
            edges.write(c.edges.as_ptr().cast());
        }
        if !ndeps.is_null() {
            ndeps.write(c.reported.len());
        }
    }
    Ok(())
}

/// `cuStreamGetCaptureInfo_v2` (CUDA 11.3).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    ndeps: *mut usize,
) -> CUresult {
    let none = std::ptr::null_mut();
    rc(capture_info_v2(
        h, status, id, graph, deps, none, ndeps, false,
    ))
}

/// `cuStreamGetCaptureInfo_v2_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2_ptsz(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    ndeps: *mut usize,
) -> CUresult {
    let none = std::ptr::null_mut();
    rc(capture_info_v2(
        h, status, id, graph, deps, none, ndeps, true,
    ))
}

/// `cuStreamGetCaptureInfo_v3` (CUDA 12.3; `cuStreamGetCaptureInfo` of CUDA 13 headers).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const c_void,
    ndeps: *mut usize,
) -> CUresult {
    rc(capture_info_v2(
        h, status, id, graph, deps, edges, ndeps, false,
    ))
}

/// `cuStreamGetCaptureInfo_v3_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3_ptsz(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const c_void,
    ndeps: *mut usize,
) -> CUresult {
    rc(capture_info_v2(
        h, status, id, graph, deps, edges, ndeps, true,
    ))
}

// ---------------------------------------------------------------------------------------------
// Graph construction.

/// `cuGraphCreate` (flags must be 0).
#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(pgraph: *mut CUgraph, flags: c_uint) -> CUresult {
    if let Err(e) = crate::device::node() {
        return e;
    }
    if pgraph.is_null() || flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let h = next(GRAPH_BASE);
    reg().graphs.insert(h, Graph::new());
    // SAFETY: null-checked above; the caller provides a writable CUgraph.
    unsafe { pgraph.write(h as CUgraph) };
    CUDA_SUCCESS
}

/// `cuGraphDestroy`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: CUgraph) -> CUresult {
    if let Err(e) = crate::device::node() {
        return e;
    }
    let mut r = reg();
    match r.graphs.remove(&(graph as usize)) {
        Some(g) => {
            let handles: Vec<usize> = lock(&g.nodes).iter().map(|n| n.handle).collect();
            for h in handles {
                r.nodes.remove(&h);
            }
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Validates and adds a node built by `make` to `graph`, writing its handle to `out`.
fn add_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    op: Result<NodeOp, CUresult>,
) -> Result<(), CUresult> {
    let g = lookup_graph(graph)?;
    if out.is_null() || (ndeps > 0 && deps.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let op = op?;
    let mut idx = Vec::with_capacity(ndeps);
    {
        let r = reg();
        for i in 0..ndeps {
            // SAFETY: `deps` holds `ndeps` node handles per the contract.
            let d = unsafe { *deps.add(i) } as usize;
            match r.nodes.get(&d) {
                Some((wg, j)) if wg.upgrade().is_some_and(|x| Arc::ptr_eq(&x, &g)) => {
                    if idx.contains(j) {
                        return Err(CUDA_ERROR_INVALID_VALUE);
                    }
                    idx.push(*j);
                }
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            }
        }
    }
    let (_, handle) = g.add(op, idx);
    // SAFETY: null-checked above; the caller provides a writable CUgraphNode.
    unsafe { out.write(handle as CUgraphNode) };
    Ok(())
}

/// Builds a kernel node from the common fields of the kernel node parameter structs.
///
/// # Safety
/// `params` / `extra` must be valid per the launch contract.
unsafe fn kernel_op(
    func: CUfunction,
    dims: Dims,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Result<NodeOp, CUresult> {
    let f = module::lookup_function(func)?;
    launch::validate(&f, &dims)?;
    // SAFETY: forwarded caller guarantee.
    let p = unsafe { launch::read_param(&f, params, extra) }?;
    Ok(NodeOp::Kernel {
        duration_ns: f.kind.duration_ns(p),
        priority: None,
    })
}

/// `cuGraphAddKernelNode` (CUDA 10.0 parameter struct).
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    p: *const CUDA_KERNEL_NODE_PARAMS_v1,
) -> CUresult {
    let op = if p.is_null() {
        Err(CUDA_ERROR_INVALID_VALUE)
    } else {
        // SAFETY: non-null; the caller passes a valid parameter struct.
        let k = unsafe { p.read() };
        let d = Dims {
            grid: [k.grid_dim_x, k.grid_dim_y, k.grid_dim_z],
            block: [k.block_dim_x, k.block_dim_y, k.block_dim_z],
            shared_mem: k.shared_mem_bytes,
        };
        // SAFETY: the struct's parameter pointers follow the launch contract.
        unsafe { kernel_op(k.func, d, k.kernel_params, k.extra) }
    };
    rc(add_node(out, graph, deps, ndeps, op))
}

/// `cuGraphAddKernelNode_v2` (CUDA 12.0 struct: `func`, or `kern` when `func` is null).
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    p: *const CUDA_KERNEL_NODE_PARAMS_v2,
) -> CUresult {
    let op = if p.is_null() {
        Err(CUDA_ERROR_INVALID_VALUE)
    } else {
        // SAFETY: non-null; the caller passes a valid parameter struct.
        let k = unsafe { p.read() };
        let d = Dims {
            grid: [k.grid_dim_x, k.grid_dim_y, k.grid_dim_z],
            block: [k.block_dim_x, k.block_dim_y, k.block_dim_z],
            shared_mem: k.shared_mem_bytes,
        };
        let f = if k.func.is_null() {
            k.kern as CUfunction
        } else {
            k.func
        };
        // SAFETY: the struct's parameter pointers follow the launch contract.
        unsafe { kernel_op(f, d, k.kernel_params, k.extra) }
    };
    rc(add_node(out, graph, deps, ndeps, op))
}

/// `cuGraphAddMemsetNode`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemsetNode(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    p: *const CUDA_MEMSET_NODE_PARAMS,
    _ctx: CUcontext,
) -> CUresult {
    let op = if p.is_null() {
        Err(CUDA_ERROR_INVALID_VALUE)
    } else {
        // SAFETY: non-null; the caller passes a valid parameter struct.
        let m = unsafe { p.read() };
        let es = m.element_size as usize;
        if m.dst == 0
            || ![1, 2, 4].contains(&es)
            || m.width == 0
            || m.height == 0
            || (m.height > 1 && m.pitch < m.width.saturating_mul(es))
        {
            Err(CUDA_ERROR_INVALID_VALUE)
        } else {
            Ok(NodeOp::Memset {
                bytes: (m.width.saturating_mul(es).saturating_mul(m.height)) as u64,
            })
        }
    };
    rc(add_node(out, graph, deps, ndeps, op))
}

/// `cuGraphAddHostNode`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddHostNode(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    p: *const CUDA_HOST_NODE_PARAMS,
) -> CUresult {
    let op = if p.is_null() {
        Err(CUDA_ERROR_INVALID_VALUE)
    } else {
        // SAFETY: non-null; the caller passes a valid parameter struct.
        let h = unsafe { p.read() };
        match h.fn_ {
            Some(f) => Ok(NodeOp::Host {
                f,
                data: h.user_data as usize,
            }),
            None => Err(CUDA_ERROR_INVALID_VALUE),
        }
    };
    rc(add_node(out, graph, deps, ndeps, op))
}

/// `cuGraphAddEmptyNode`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEmptyNode(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
) -> CUresult {
    rc(add_node(out, graph, deps, ndeps, Ok(NodeOp::Empty)))
}

/// `cuGraphAddEventRecordNode`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEventRecordNode(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    ev: CUevent,
) -> CUresult {
    let op = crate::event::lookup(ev).map(NodeOp::EventRecord);
    rc(add_node(out, graph, deps, ndeps, op))
}

/// `cuGraphAddEventWaitNode`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddEventWaitNode(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    ev: CUevent,
) -> CUresult {
    let op = crate::event::lookup(ev).map(NodeOp::EventWait);
    rc(add_node(out, graph, deps, ndeps, op))
}

fn mem_alloc_op(p: *mut CUDA_MEM_ALLOC_NODE_PARAMS) -> Result<(NodeOp, u64), CUresult> {
    let ctx = context::current()?;
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid parameter struct.
    let m = unsafe { p.read() };
    if m.bytesize == 0 || m.poolProps.location.id != ctx.device {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let bytes = m.bytesize as u64;
    let va = graph_va(bytes);
    Ok((NodeOp::MemAlloc { va, bytes, ctx }, va))
}

/// A fresh private address for a graph allocation of `bytes`.
fn graph_va(bytes: u64) -> u64 {
    let gran = crate::device::granularity();
    let mut r = reg();
    if r.next_va == 0 {
        r.next_va = GRAPH_VA_BASE;
    }
    let va = r.next_va;
    r.next_va += crate::device::round_up(bytes, gran).max(gran);
    r.vas.insert(va);
    va
}

/// `cuGraphAddMemAllocNode`: the address is fixed now (written to `nodeParams->dptr`); memory
/// is charged when the graph is launched.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemAllocNode(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    p: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CUresult {
    let (op, va) = match mem_alloc_op(p) {
        Ok((op, va)) => (Ok(op), Some(va)),
        Err(e) => (Err(e), None),
    };
    let r = rc(add_node(out, graph, deps, ndeps, op));
    if let (CUDA_SUCCESS, Some(va)) = (r, va) {
        // SAFETY: `mem_alloc_op` null-checked `p`; `dptr` is the struct's out field.
        unsafe { (*p).dptr = va };
    }
    r
}

/// `cuGraphAddMemFreeNode`: `dptr` must be a graph allocation.
#[no_mangle]
pub unsafe extern "C" fn cuGraphAddMemFreeNode(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    ndeps: usize,
    dptr: CUdeviceptr,
) -> CUresult {
    let op = if reg().vas.contains(&dptr) {
        Ok(NodeOp::MemFree { va: dptr })
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    };
    rc(add_node(out, graph, deps, ndeps, op))
}

/// `cuGraphNodeGetType`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetType(
    node: CUgraphNode,
    ty: *mut CUgraphNodeType,
) -> CUresult {
    if ty.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let found = reg().nodes.get(&(node as usize)).cloned();
    let Some((g, i)) = found else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let Some(g) = g.upgrade() else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let code = lock(&g.nodes).get(i).map(|n| n.op.type_code());
    match code {
        Some(c) => {
            // SAFETY: null-checked above; the caller provides a writable node type.
            unsafe { ty.write(c) };
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// `cuGraphGetNodes`: with `nodes` null, only the count.
#[no_mangle]
pub unsafe extern "C" fn cuGraphGetNodes(
    graph: CUgraph,
    nodes: *mut CUgraphNode,
    num: *mut usize,
) -> CUresult {
    let g = match lookup_graph(graph) {
        Ok(g) => g,
        Err(e) => return e,
    };
    if num.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let handles: Vec<usize> = lock(&g.nodes).iter().map(|n| n.handle).collect();
    if !nodes.is_null() {
        // SAFETY: non-null; `*num` is the capacity of `nodes` the caller provides.
        let cap = unsafe { num.read() };
        for (i, h) in handles.iter().take(cap).enumerate() {
            // SAFETY: `i < cap`, within the caller's array.
            unsafe { nodes.add(i).write(*h as CUgraphNode) };
        }
    }
    // SAFETY: null-checked above.
    unsafe { num.write(handles.len()) };
    CUDA_SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Instantiation and launch.

fn instantiate(pexec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> Result<(), CUresult> {
    let g = lookup_graph(graph)?;
    if pexec.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let all = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
        | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
        | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
        | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    if flags & !all != 0
        || (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH != 0
            && flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH != 0)
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // Creation order is a topological order: dependencies always name earlier nodes.
    let ops: Vec<NodeOp> = lock(&g.nodes).iter().map(|n| n.op.clone()).collect();
    let h = next(EXEC_BASE);
    reg().execs.insert(h, Arc::new(GraphExec { ops, flags }));
    // SAFETY: null-checked above; the caller provides a writable CUgraphExec.
    unsafe { pexec.write(h as CUgraphExec) };
    Ok(())
}

/// `cuGraphInstantiate` (CUDA 10.0 form with error node and log buffer).
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate(
    pexec: *mut CUgraphExec,
    graph: CUgraph,
    err_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    if !err_node.is_null() {
        // SAFETY: non-null; the caller provides a writable CUgraphNode.
        unsafe { err_node.write(std::ptr::null_mut()) };
    }
    if !log.is_null() && log_size > 0 {
        // SAFETY: non-null buffer of `log_size >= 1` bytes: an empty log.
        unsafe { log.write(0) };
    }
    rc(instantiate(pexec, graph, 0))
}

/// `cuGraphInstantiate_v2` (CUDA 11.0; same signature).
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    pexec: *mut CUgraphExec,
    graph: CUgraph,
    err_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    // SAFETY: same contract as `cuGraphInstantiate`.
    unsafe { cuGraphInstantiate(pexec, graph, err_node, log, log_size) }
}

/// `cuGraphInstantiateWithFlags` (what `cuGraphInstantiate` means from CUDA 12.0 on).
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    pexec: *mut CUgraphExec,
    graph: CUgraph,
    flags: u64,
) -> CUresult {
    rc(instantiate(pexec, graph, flags))
}

fn instantiate_with_params(
    pexec: *mut CUgraphExec,
    graph: CUgraph,
    p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
    ptds: bool,
) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid parameter struct.
    let params = unsafe { p.read() };
    let r = instantiate(pexec, graph, params.flags);
    // SAFETY: as above; `result_out` / `h_err_node_out` are the struct's out fields.
    unsafe {
        (*p).h_err_node_out = std::ptr::null_mut();
        (*p).result_out = if r.is_ok() { 0 } else { 1 };
    }
    r?;
    if params.flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD != 0 {
        // Upload is a no-op, but the stream must be valid.
        stream::resolve(params.h_upload_stream, ptds)?;
    }
    Ok(())
}

/// `cuGraphInstantiateWithParams`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(
    pexec: *mut CUgraphExec,
    graph: CUgraph,
    p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
) -> CUresult {
    rc(instantiate_with_params(pexec, graph, p, false))
}

/// `cuGraphInstantiateWithParams_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams_ptsz(
    pexec: *mut CUgraphExec,
    graph: CUgraph,
    p: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
) -> CUresult {
    rc(instantiate_with_params(pexec, graph, p, true))
}

/// Charges the graph's allocations for one launch (rolling back on failure).
fn charge_allocations(exec: &GraphExec) -> Result<(), CUresult> {
    let mut done: Vec<u64> = Vec::new();
    for op in &exec.ops {
        let NodeOp::MemAlloc { va, bytes, ctx } = op else {
            continue;
        };
        let live = reg().live.get(va).copied();
        if let Some(real) = live {
            if exec.flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH == 0 {
                rollback(&done);
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            reg().live.remove(va);
            let _ = crate::memory::device_free(real);
        }
        match crate::memory::device_alloc(ctx, *bytes) {
            Ok(real) => {
                reg().live.insert(*va, real);
                done.push(*va);
            }
            Err(e) => {
                rollback(&done);
                return Err(e);
            }
        }
    }
    Ok(())
}

fn rollback(vas: &[u64]) {
    for va in vas {
        let real = reg().live.remove(va);
        if let Some(p) = real {
            let _ = crate::memory::device_free(p);
        }
    }
}

fn graph_launch(exec: CUgraphExec, h: CUstream, ptds: bool) -> Result<(), CUresult> {
    crate::device::node()?;
    let e = reg()
        .execs
        .get(&(exec as usize))
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let s = stream::resolve(h, ptds)?;
    if lock(&s.capture).is_some() {
        if e.ops
            .iter()
            .any(|o| matches!(o, NodeOp::MemAlloc { .. } | NodeOp::MemFree { .. }))
        {
            invalidate_if_capturing(&s);
            return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        for op in &e.ops {
            launch_op(&s, op.clone())?;
        }
        return Ok(());
    }
    charge_allocations(&e)?;
    let items: Vec<(Vec<Dep>, Op)> = e.ops.iter().cloned().map(to_stream_op).collect();
    stream::submit_batch(&s, items);
    Ok(())
}

/// `cuGraphLaunch`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: CUgraphExec, h: CUstream) -> CUresult {
    rc(graph_launch(exec, h, false))
}

/// `cuGraphLaunch_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(exec: CUgraphExec, h: CUstream) -> CUresult {
    rc(graph_launch(exec, h, true))
}

fn upload(exec: CUgraphExec, h: CUstream, ptds: bool) -> Result<(), CUresult> {
    crate::device::node()?;
    if !reg().execs.contains_key(&(exec as usize)) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    stream::resolve(h, ptds).map(|_| ())
}

/// `cuGraphUpload` (nothing to upload in the simulator; validates its arguments).
#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload(exec: CUgraphExec, h: CUstream) -> CUresult {
    rc(upload(exec, h, false))
}

/// `cuGraphUpload_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload_ptsz(exec: CUgraphExec, h: CUstream) -> CUresult {
    rc(upload(exec, h, true))
}

/// `cuGraphExecDestroy`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CUresult {
    if let Err(e) = crate::device::node() {
        return e;
    }
    match reg().execs.remove(&(exec as usize)) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}
