//! Streams: created streams (with flags and priorities), the legacy default stream of each
//! context, the per-thread default streams, and the asynchronous in-order worker behind each.
//!
//! Every stream owns a worker thread that executes its queue in order. Enqueueing only pushes an
//! item (no engine wait in the caller). Kernels occupy the device's shared engine through
//! `Node::engine_execute_ready`, first passing a process-local per-device gate that lets the
//! highest-priority waiting stream go next (FIFO among equals), so stream priorities order this
//! process's kernels while the engine arbitrates between processes.
//!
//! Legacy default stream semantics: work in the legacy stream waits for all earlier work of the
//! blocking streams (created without `CU_STREAM_NON_BLOCKING`, and per-thread default streams)
//! of its context, and work in a blocking stream waits for earlier legacy-stream work. Both are
//! expressed as dependencies captured at enqueue time under one lock, so they cannot form cycles.
//!
//! For the rest of the crate: [`resolve`], [`enqueue_host`], [`synchronize_context`],
//! [`destroy_context_streams`], [`submit`] and [`Dep`] / [`Op`].

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};

use gpuslice_cuda_abi::exec::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use gpuslice_sim_core::{now_ns, MAX_DEVICES};

use crate::context::{self, Context};
use crate::device::{put, rc};
use crate::event::Event;
use crate::graph::StreamCapture;
use crate::wait::Expect;

/// Greatest (numerically lowest) stream priority, as on Hopper.
pub(crate) const GREATEST_PRIORITY: c_int = -5;
/// Least (default) stream priority.
pub(crate) const LEAST_PRIORITY: c_int = 0;

/// Base of created stream handles (never reused, never 0x1 / 0x2).
const STREAM_HANDLE_BASE: usize = 0x05e0_0000_0000;

/// What kind of stream a [`Stream`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Created by `cuStreamCreate*`.
    Created,
    /// The context's legacy default stream (NULL / `CU_STREAM_LEGACY`).
    Legacy,
    /// A thread's per-thread default stream (NULL in `_ptsz` calls / `CU_STREAM_PER_THREAD`).
    PerThread,
}

/// A wait an item must satisfy before it runs.
pub(crate) enum Dep {
    /// Until the stream has completed this many items.
    Stream(Arc<Stream>, u64),
    /// Until the event's record number `n` has completed.
    Event(Arc<Event>, u64),
}

impl Dep {
    fn wait(&self) {
        match self {
            Dep::Stream(s, n) => s.wait_completed(*n),
            Dep::Event(e, n) => e.wait_gen(*n),
        }
    }
}

/// The work of one stream item.
pub(crate) enum Op {
    /// A kernel occupying the engine for `duration_ns`, at `priority` (None: the stream's).
    Kernel {
        duration_ns: u64,
        priority: Option<c_int>,
    },
    /// Host code run in stream order.
    Host(Box<dyn FnOnce() + Send>),
    /// Completion of the event's record number `gen`.
    Record(Arc<Event>, u64),
    /// Nothing (an item that only carries dependencies).
    Nop,
}

struct Item {
    deps: Vec<Dep>,
    op: Op,
    enqueued_ns: u64,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    submitted: u64,
    closed: bool,
}

/// One stream.
pub(crate) struct Stream {
    /// Unique id (also `cuStreamGetId`).
    pub(crate) id: u64,
    /// The `CUstream` value of a created stream; 0 for implicit streams.
    pub(crate) handle: usize,
    /// Owning context.
    pub(crate) ctx: Arc<Context>,
    /// `CU_STREAM_*` flags.
    pub(crate) flags: c_uint,
    /// Priority (lower is higher).
    pub(crate) priority: c_int,
    /// Created, legacy or per-thread.
    pub(crate) kind: Kind,
    q: Mutex<Queue>,
    cv: Condvar,
    /// Items completed: raised by the worker under the queue's lock (waiters on `cv` read it
    /// there), read without it by spinning waiters (`wait`).
    completed: AtomicU64,
    /// When the running kernel ends, for waiters (`wait`).
    pub(crate) expect: Expect,
    /// Stream capture state (see `graph`).
    pub(crate) capture: Mutex<Option<StreamCapture>>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Stream {
    /// Whether legacy-stream implicit synchronisation applies to this stream.
    fn blocking(&self) -> bool {
        match self.kind {
            Kind::Created => self.flags & CU_STREAM_NON_BLOCKING == 0,
            Kind::PerThread => true,
            Kind::Legacy => false,
        }
    }

    /// Items completed so far.
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// Items enqueued so far.
    pub(crate) fn submitted(&self) -> u64 {
        lock(&self.q).submitted
    }

    /// Whether every enqueued item has completed.
    pub(crate) fn idle(&self) -> bool {
        let q = lock(&self.q);
        self.completed() == q.submitted
    }

    /// Blocks until at least `n` items have completed.
    pub(crate) fn wait_completed(&self, n: u64) {
        if crate::wait::spins(self.ctx.flags.load(Ordering::Relaxed)) {
            let since = self.completed.load(Ordering::Acquire);
            self.expect
                .wait(since, n, || self.completed.load(Ordering::Acquire) >= n);
            return;
        }
        let mut q = lock(&self.q);
        while self.completed() < n {
            q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Blocks until everything enqueued before the call has completed.
    pub(crate) fn synchronize(&self) {
        let n = self.submitted();
        self.wait_completed(n);
    }

    fn push(&self, deps: Vec<Dep>, op: Op) {
        let mut q = lock(&self.q);
        q.items.push_back(Item {
            deps,
            op,
            enqueued_ns: now_ns(),
        });
        q.submitted += 1;
        drop(q);
        self.cv.notify_all();
    }

    fn close(&self) {
        lock(&self.q).closed = true;
        self.cv.notify_all();
    }
}

fn worker(s: Arc<Stream>) {
    let mut prev_end = 0u64;
    loop {
        let item = {
            let mut q = lock(&s.q);
            loop {
                if let Some(it) = q.items.pop_front() {
                    break it;
                }
                if q.closed {
                    return;
                }
                q = s.cv.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        // This item's number: items complete in order.
        let no = s.completed.load(Ordering::Relaxed) + 1;
        let mut ready = item.enqueued_ns.max(prev_end);
        if !item.deps.is_empty() {
            for d in &item.deps {
                d.wait();
            }
            ready = ready.max(now_ns());
        }
        // An event completes once the stream counts its record done: a thread woken by the
        // event then sees the stream idle (`cuStreamQuery`), as on the real device.
        let mut reached = None;
        match item.op {
            Op::Kernel {
                duration_ns,
                priority,
            } => {
                let prio = priority.unwrap_or(s.priority);
                let dev = s.ctx.phys;
                let _g = gate_enter(dev, prio);
                let end = match crate::device::node() {
                    Ok(node) => {
                        node.engine_execute_observed(dev, duration_ns, ready, &|end| {
                            s.expect.publish(no, end);
                        })
                        .end_ns
                    }
                    Err(_) => now_ns(),
                };
                prev_end = end;
            }
            Op::Host(f) => {
                f();
                prev_end = now_ns();
            }
            Op::Record(ev, gen) => {
                // The device reaches the record when the previous item ended (or when the
                // record was enqueued on an idle stream): stamp that, not the worker's wake-up.
                reached = Some((ev, gen, ready));
                prev_end = ready;
            }
            Op::Nop => prev_end = ready,
        }
        {
            // Under the queue's lock: a `cv` waiter checks the count there before it sleeps.
            let _q = lock(&s.q);
            s.completed.fetch_add(1, Ordering::AcqRel);
        }
        if let Some((ev, gen, t)) = reached {
            ev.complete(gen, t);
        }
        s.cv.notify_all();
        s.expect.bump();
    }
}

// ---------------------------------------------------------------------------------------------
// Process-local priority gate per device.

#[derive(Default)]
struct GateState {
    busy: bool,
    waiting: BTreeSet<(c_int, u64)>,
    next_ticket: u64,
}

static GATES: LazyLock<Vec<(Mutex<GateState>, Condvar)>> = LazyLock::new(|| {
    (0..MAX_DEVICES)
        .map(|_| (Mutex::new(GateState::default()), Condvar::new()))
        .collect()
});

struct GateGuard(usize);

impl Drop for GateGuard {
    fn drop(&mut self) {
        if let Some((m, cv)) = GATES.get(self.0) {
            lock(m).busy = false;
            cv.notify_all();
        }
    }
}

fn gate_enter(dev: u32, prio: c_int) -> Option<GateGuard> {
    let i = dev as usize;
    let (m, cv) = GATES.get(i)?;
    let mut g = lock(m);
    let me = (prio, g.next_ticket);
    g.next_ticket += 1;
    g.waiting.insert(me);
    while g.busy || g.waiting.first() != Some(&me) {
        g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
    }
    g.waiting.remove(&me);
    g.busy = true;
    Some(GateGuard(i))
}

// ---------------------------------------------------------------------------------------------
// Registry.

#[derive(Default)]
struct Registry {
    by_handle: HashMap<usize, Arc<Stream>>,
    legacy: HashMap<u64, Arc<Stream>>,
    per_thread: HashMap<u64, Arc<Stream>>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);
/// Serialises dependency capture + push so implicit synchronisation never forms a cycle.
static ENQUEUE: Mutex<()> = Mutex::new(());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn registry() -> MutexGuard<'static, Registry> {
    lock(&REGISTRY)
}

fn spawn(
    ctx: Arc<Context>,
    kind: Kind,
    flags: c_uint,
    priority: c_int,
) -> Result<Arc<Stream>, CUresult> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let handle = if kind == Kind::Created {
        STREAM_HANDLE_BASE + (id as usize) * 0x40
    } else {
        0
    };
    let s = Arc::new(Stream {
        id,
        handle,
        ctx,
        flags,
        priority,
        kind,
        q: Mutex::new(Queue::default()),
        cv: Condvar::new(),
        completed: AtomicU64::new(0),
        expect: Expect::default(),
        capture: Mutex::new(None),
    });
    let w = s.clone();
    std::thread::Builder::new()
        .name(format!("cuda-stream-{id}"))
        .spawn(move || worker(w))
        .map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
    Ok(s)
}

/// Per-thread default streams of this thread, by context id; closed when the thread exits.
struct PerThreadStreams(HashMap<u64, Arc<Stream>>);

impl Drop for PerThreadStreams {
    fn drop(&mut self) {
        let mut r = registry();
        for s in self.0.values() {
            r.per_thread.remove(&s.id);
            s.close();
        }
    }
}

thread_local! {
    static PER_THREAD: RefCell<PerThreadStreams> = RefCell::new(PerThreadStreams(HashMap::new()));
}

fn legacy_of(ctx: Arc<Context>) -> Result<Arc<Stream>, CUresult> {
    let mut r = registry();
    if let Some(s) = r.legacy.get(&ctx.id) {
        return Ok(s.clone());
    }
    let id = ctx.id;
    let s = spawn(ctx, Kind::Legacy, CU_STREAM_DEFAULT, LEAST_PRIORITY)?;
    r.legacy.insert(id, s.clone());
    Ok(s)
}

fn per_thread_of(ctx: Arc<Context>) -> Result<Arc<Stream>, CUresult> {
    let found = PER_THREAD
        .try_with(|p| p.borrow().0.get(&ctx.id).cloned())
        .map_err(|_| CUDA_ERROR_INVALID_CONTEXT)?;
    if let Some(s) = found {
        return Ok(s);
    }
    let id = ctx.id;
    let s = spawn(ctx, Kind::PerThread, CU_STREAM_DEFAULT, LEAST_PRIORITY)?;
    registry().per_thread.insert(s.id, s.clone());
    let _ = PER_THREAD.try_with(|p| p.borrow_mut().0.insert(id, s.clone()));
    Ok(s)
}

/// The stream behind `h`: NULL is the legacy default stream of the current context, or its
/// per-thread default stream when `per_thread_default` (the `_ptsz` / `_ptds` entry points);
/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` name those explicitly. Unknown handles give
/// `CUDA_ERROR_INVALID_HANDLE`; special handles without a current context its error.
pub(crate) fn resolve(h: CUstream, per_thread_default: bool) -> Result<Arc<Stream>, CUresult> {
    match h as usize {
        0 if per_thread_default => per_thread_of(context::current()?),
        0 | CU_STREAM_LEGACY_HANDLE => legacy_of(context::current()?),
        CU_STREAM_PER_THREAD_HANDLE => per_thread_of(context::current()?),
        x => {
            crate::device::node()?;
            let s = registry()
                .by_handle
                .get(&x)
                .cloned()
                .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            if !s.ctx.is_alive() {
                return Err(CUDA_ERROR_CONTEXT_IS_DESTROYED);
            }
            Ok(s)
        }
    }
}

/// Enqueues `op` after `deps`, adding the legacy-stream implicit dependencies. Never blocks on
/// device work. Capture is the caller's business (see `graph::launch_op`).
pub(crate) fn submit(stream: &Arc<Stream>, deps: Vec<Dep>, op: Op) {
    submit_batch(stream, vec![(deps, op)]);
}

/// Enqueues several items back to back (a graph launch): no other enqueue interleaves.
pub(crate) fn submit_batch(stream: &Arc<Stream>, items: Vec<(Vec<Dep>, Op)>) {
    let _g = lock(&ENQUEUE);
    let mut deps = Vec::new();
    match stream.kind {
        Kind::Legacy => {
            let others: Vec<Arc<Stream>> = {
                let r = registry();
                r.by_handle
                    .values()
                    .chain(r.per_thread.values())
                    .filter(|s| s.ctx.id == stream.ctx.id && s.blocking())
                    .cloned()
                    .collect()
            };
            for s in others {
                let q = lock(&s.q);
                if s.completed() < q.submitted {
                    let n = q.submitted;
                    drop(q);
                    deps.push(Dep::Stream(s, n));
                }
            }
        }
        _ if stream.blocking() => {
            let legacy = registry().legacy.get(&stream.ctx.id).cloned();
            if let Some(l) = legacy {
                let q = lock(&l.q);
                if l.completed() < q.submitted {
                    let n = q.submitted;
                    drop(q);
                    deps.push(Dep::Stream(l, n));
                }
            }
        }
        _ => {}
    }
    let mut first = true;
    for (mut d, op) in items {
        if first {
            d.append(&mut deps);
            first = false;
        }
        stream.push(d, op);
    }
}

/// Runs `f` in stream order on `stream` (for memory operations of other modules: copies,
/// memsets, frees). On a capturing stream the operation becomes an empty node of the capture
/// (as a real memset or copy node, without its device time) and `f` is dropped: the simulator
/// does not replay those effects (a graph's own allocations are freed by free nodes).
pub(crate) fn enqueue_host(stream: &Stream, f: Box<dyn FnOnce() + Send>) -> Result<(), CUresult> {
    let arc = find_arc(stream).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    if let Some(r) = crate::graph::capture_node(&arc, crate::graph::NodeOp::Empty) {
        return r;
    }
    submit(&arc, Vec::new(), Op::Host(f));
    Ok(())
}

/// Whether a blocking stream of context `ctx_id` is capturing (the legacy stream is then
/// unusable).
pub(crate) fn blocking_capture_in(ctx_id: u64) -> bool {
    context_streams(ctx_id)
        .iter()
        .any(|s| s.kind != Kind::Legacy && s.blocking() && lock(&s.capture).is_some())
}

fn find_arc(stream: &Stream) -> Option<Arc<Stream>> {
    let r = registry();
    match stream.kind {
        Kind::Created => r.by_handle.get(&stream.handle).cloned(),
        Kind::Legacy => r.legacy.get(&stream.ctx.id).cloned(),
        Kind::PerThread => r.per_thread.get(&stream.id).cloned(),
    }
}

fn context_streams(ctx_id: u64) -> Vec<Arc<Stream>> {
    let r = registry();
    r.by_handle
        .values()
        .chain(r.legacy.values())
        .chain(r.per_thread.values())
        .filter(|s| s.ctx.id == ctx_id)
        .cloned()
        .collect()
}

/// Waits for all work enqueued so far in every stream of context `ctx_id`. Refused while a
/// stream of the context captures, in every capture mode and from every thread (the capture is
/// invalidated), and as a potentially unsafe call (`capture_rules`).
pub(crate) fn synchronize_context(ctx_id: u64) -> CUresult {
    let streams = context_streams(ctx_id);
    let mut capturing = false;
    for s in &streams {
        capturing |= crate::graph::invalidate_if_capturing(s);
    }
    if capturing {
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if let Err(e) = crate::capture_rules::unsafe_call() {
        return e;
    }
    let targets: Vec<(Arc<Stream>, u64)> = streams
        .into_iter()
        .map(|s| {
            let n = s.submitted();
            (s, n)
        })
        .collect();
    for (s, n) in targets {
        s.wait_completed(n);
    }
    CUDA_SUCCESS
}

/// Synchronises and forgets every stream of context `ctx_id` (its workers exit).
pub(crate) fn destroy_context_streams(ctx_id: u64) {
    let _ = synchronize_context(ctx_id);
    let gone: Vec<Arc<Stream>> = {
        let mut r = registry();
        let mut gone = Vec::new();
        r.by_handle.retain(|_, s| {
            let keep = s.ctx.id != ctx_id;
            if !keep {
                gone.push(s.clone());
            }
            keep
        });
        if let Some(s) = r.legacy.remove(&ctx_id) {
            gone.push(s);
        }
        r.per_thread.retain(|_, s| {
            let keep = s.ctx.id != ctx_id;
            if !keep {
                gone.push(s.clone());
            }
            keep
        });
        gone
    };
    for s in gone {
        s.close();
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points.

fn create(ph: *mut CUstream, flags: c_uint, priority: c_int) -> Result<(), CUresult> {
    let ctx = context::current()?;
    if ph.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // Out-of-range priorities are clamped, as the driver does.
    let priority = priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY);
    let s = spawn(ctx, Kind::Created, flags, priority)?;
    registry().by_handle.insert(s.handle, s.clone());
    // SAFETY: null-checked above; the caller provides a writable CUstream slot.
    unsafe { ph.write(s.handle as CUstream) };
    Ok(())
}

/// `cuStreamCreate`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut CUstream, flags: c_uint) -> CUresult {
    rc(create(ph, flags, LEAST_PRIORITY))
}

/// `cuStreamCreateWithPriority`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    rc(create(ph, flags, priority))
}

/// `cuCtxGetStreamPriorityRange`: least 0, greatest -5 (Hopper). Either pointer may be null.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    if let Err(e) = context::current() {
        return e;
    }
    if !least.is_null() {
        // SAFETY: non-null; the caller provides a writable int.
        unsafe { least.write(LEAST_PRIORITY) };
    }
    if !greatest.is_null() {
        // SAFETY: non-null; the caller provides a writable int.
        unsafe { greatest.write(GREATEST_PRIORITY) };
    }
    CUDA_SUCCESS
}

fn destroy(h: CUstream) -> Result<(), CUresult> {
    crate::device::node()?;
    let s = registry()
        .by_handle
        .remove(&(h as usize))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    // Pending work still completes; the worker exits once the queue is empty.
    s.close();
    Ok(())
}

/// `cuStreamDestroy` (legacy export).
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy(h: CUstream) -> CUresult {
    rc(destroy(h))
}

/// `cuStreamDestroy_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(h: CUstream) -> CUresult {
    rc(destroy(h))
}

/// A query or synchronisation of `s`: refused on a capturing stream (invalidated, in every
/// mode) and, elsewhere, a potentially unsafe call (`capture_rules`).
fn may_wait_for(s: &Arc<Stream>) -> Result<(), CUresult> {
    if crate::graph::invalidate_if_capturing(s) {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    crate::capture_rules::unsafe_call()
}

fn synchronize(h: CUstream, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    may_wait_for(&s)?;
    s.synchronize();
    // A synchronization point: pools give back what exceeds their threshold.
    crate::pool::on_synchronize(s.ctx.device);
    Ok(())
}

/// `cuStreamSynchronize`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(h: CUstream) -> CUresult {
    rc(synchronize(h, false))
}

/// `cuStreamSynchronize_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize_ptsz(h: CUstream) -> CUresult {
    rc(synchronize(h, true))
}

fn query(h: CUstream, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    may_wait_for(&s)?;
    if s.idle() {
        Ok(())
    } else {
        Err(CUDA_ERROR_NOT_READY)
    }
}

/// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while work is pending.
#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(h: CUstream) -> CUresult {
    rc(query(h, false))
}

/// `cuStreamQuery_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery_ptsz(h: CUstream) -> CUresult {
    rc(query(h, true))
}

fn wait_event(h: CUstream, ev: CUevent, flags: c_uint, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    let e = crate::event::lookup(ev)?;
    if flags & !CU_EVENT_WAIT_EXTERNAL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if crate::graph::capture_wait_event(&s, &e)? {
        return Ok(());
    }
    let gen = e.issued_gen();
    if gen == 0 {
        return Ok(());
    }
    submit(&s, vec![Dep::Event(e, gen)], Op::Nop);
    Ok(())
}

/// `cuStreamWaitEvent`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(h: CUstream, ev: CUevent, flags: c_uint) -> CUresult {
    rc(wait_event(h, ev, flags, false))
}

/// `cuStreamWaitEvent_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent_ptsz(
    h: CUstream,
    ev: CUevent,
    flags: c_uint,
) -> CUresult {
    rc(wait_event(h, ev, flags, true))
}

fn get_priority(h: CUstream, out: *mut c_int, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    // SAFETY: `put` null-checks; the caller provides a writable int.
    rc_to(unsafe { put(out, s.priority) })
}

fn rc_to(r: CUresult) -> Result<(), CUresult> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

/// `cuStreamGetPriority`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(h: CUstream, priority: *mut c_int) -> CUresult {
    rc(get_priority(h, priority, false))
}

/// `cuStreamGetPriority_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority_ptsz(h: CUstream, priority: *mut c_int) -> CUresult {
    rc(get_priority(h, priority, true))
}

fn get_flags(h: CUstream, out: *mut c_uint, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    // SAFETY: `put` null-checks; the caller provides a writable unsigned int.
    rc_to(unsafe { put(out, s.flags) })
}

/// `cuStreamGetFlags`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags(h: CUstream, flags: *mut c_uint) -> CUresult {
    rc(get_flags(h, flags, false))
}

/// `cuStreamGetFlags_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags_ptsz(h: CUstream, flags: *mut c_uint) -> CUresult {
    rc(get_flags(h, flags, true))
}

fn get_ctx(h: CUstream, out: *mut CUcontext, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    // SAFETY: `put` null-checks; the caller provides a writable CUcontext.
    rc_to(unsafe { put(out, s.ctx.handle()) })
}

/// `cuStreamGetCtx`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(h: CUstream, pctx: *mut CUcontext) -> CUresult {
    rc(get_ctx(h, pctx, false))
}

/// `cuStreamGetCtx_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx_ptsz(h: CUstream, pctx: *mut CUcontext) -> CUresult {
    rc(get_ctx(h, pctx, true))
}

fn get_ctx_v2(
    h: CUstream,
    pctx: *mut CUcontext,
    pgreen: *mut CUgreenCtx,
    ptds: bool,
) -> Result<(), CUresult> {
    if pctx.is_null() && pgreen.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let s = resolve(h, ptds)?;
    if !pctx.is_null() {
        // SAFETY: non-null; the caller provides a writable CUcontext.
        unsafe { pctx.write(s.ctx.handle()) };
    }
    if !pgreen.is_null() {
        // SAFETY: non-null; the caller provides a writable CUgreenCtx. No green contexts here.
        unsafe { pgreen.write(std::ptr::null_mut()) };
    }
    Ok(())
}

/// `cuStreamGetCtx_v2` (CUDA 12.5; the simulator has no green contexts).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx_v2(
    h: CUstream,
    pctx: *mut CUcontext,
    pgreen: *mut CUgreenCtx,
) -> CUresult {
    rc(get_ctx_v2(h, pctx, pgreen, false))
}

/// `cuStreamGetCtx_v2_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx_v2_ptsz(
    h: CUstream,
    pctx: *mut CUcontext,
    pgreen: *mut CUgreenCtx,
) -> CUresult {
    rc(get_ctx_v2(h, pctx, pgreen, true))
}

fn get_id(h: CUstream, out: *mut c_ulonglong, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    // SAFETY: `put` null-checks; the caller provides a writable unsigned long long.
    rc_to(unsafe { put(out, s.id) })
}

/// `cuStreamGetId`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetId(h: CUstream, id: *mut c_ulonglong) -> CUresult {
    rc(get_id(h, id, false))
}

/// `cuStreamGetId_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetId_ptsz(h: CUstream, id: *mut c_ulonglong) -> CUresult {
    rc(get_id(h, id, true))
}

fn get_device(h: CUstream, out: *mut CUdevice, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    // SAFETY: `put` null-checks; the caller provides a writable CUdevice.
    rc_to(unsafe { put(out, s.ctx.device) })
}

/// `cuStreamGetDevice` (CUDA 12.8).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetDevice(h: CUstream, dev: *mut CUdevice) -> CUresult {
    rc(get_device(h, dev, false))
}

/// `cuStreamGetDevice_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetDevice_ptsz(h: CUstream, dev: *mut CUdevice) -> CUresult {
    rc(get_device(h, dev, true))
}

/// Raw pointers that travel to a stream worker; the application owns what they point to.
struct SendPtr(*mut c_void, usize);
// SAFETY: the driver contract hands `userData` and the stream value to another thread (the
// callback runs on a driver thread); the simulator never dereferences them itself.
unsafe impl Send for SendPtr {}

fn host_func(h: CUstream, f: CUhostFn, data: *mut c_void, ptds: bool) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    let Some(f) = f else {
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    crate::graph::launch_op(
        &s,
        crate::graph::NodeOp::Host {
            f,
            data: data as usize,
        },
    )
}

/// `cuLaunchHostFunc`: runs `fn(userData)` in stream order on the stream's worker thread.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    h: CUstream,
    f: CUhostFn,
    user_data: *mut c_void,
) -> CUresult {
    rc(host_func(h, f, user_data, false))
}

/// `cuLaunchHostFunc_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc_ptsz(
    h: CUstream,
    f: CUhostFn,
    user_data: *mut c_void,
) -> CUresult {
    rc(host_func(h, f, user_data, true))
}

fn add_callback(
    h: CUstream,
    cb: CUstreamCallback,
    data: *mut c_void,
    flags: c_uint,
    ptds: bool,
) -> Result<(), CUresult> {
    let s = resolve(h, ptds)?;
    let Some(cb) = cb else {
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if crate::graph::invalidate_if_capturing(&s) {
        return Err(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    let p = SendPtr(data, h as usize);
    submit(
        &s,
        Vec::new(),
        Op::Host(Box::new(move || {
            let p = p;
            // SAFETY: the application registered `cb` for exactly this call with this stream
            // value and user data; it runs on a driver-owned thread as the API specifies.
            unsafe { cb(p.1 as CUstream, CUDA_SUCCESS, p.0) };
        })),
    );
    Ok(())
}

/// `cuStreamAddCallback`: `callback(hStream, CUDA_SUCCESS, userData)` in stream order.
#[no_mangle]
pub unsafe extern "C" fn cuStreamAddCallback(
    h: CUstream,
    cb: CUstreamCallback,
    user_data: *mut c_void,
    flags: c_uint,
) -> CUresult {
    rc(add_callback(h, cb, user_data, flags, false))
}

/// `cuStreamAddCallback_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamAddCallback_ptsz(
    h: CUstream,
    cb: CUstreamCallback,
    user_data: *mut c_void,
    flags: c_uint,
) -> CUresult {
    rc(add_callback(h, cb, user_data, flags, true))
}

/// Runs a `CUhostFn` with its user data (used by host nodes and `cuLaunchHostFunc`).
pub(crate) fn host_fn_op(f: unsafe extern "C" fn(*mut c_void), data: usize) -> Op {
    let p = SendPtr(data as *mut c_void, 0);
    Op::Host(Box::new(move || {
        let p = p;
        // SAFETY: the application supplied `f` and its user data for this call.
        unsafe { f(p.0) };
    }))
}
