//! Primary and created contexts and the per-thread context stack.
//!
//! A context is charged to the ground truth when it comes to life (`ctx_attach`: the configured
//! per-context overhead on its device) and returns it when it dies. The primary context of a device
//! has one stable handle for the life of the process; it is *active* while its retain count is
//! non-zero (each activation is a new [`Context`] incarnation with a fresh id). Destroying a context
//! (or releasing / resetting a primary one) first synchronizes its streams, then frees every
//! allocation made in it (device memory, pools, arrays), like the real driver.
//!
//! For the rest of the crate: [`current`] (the calling thread's current context, with the driver's
//! error codes), [`lookup`] (a `CUcontext` handle, null meaning current), [`Context::handle`],
//! [`Context::is_alive`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;

use crate::device::{self, put, rc};

/// One context incarnation.
#[derive(Debug)]
pub(crate) struct Context {
    /// Unique id of this incarnation (never reused in the process).
    pub(crate) id: u64,
    /// The `CUcontext` value handed to the application.
    handle: usize,
    /// Application device ordinal.
    pub(crate) device: CUdevice,
    /// Ground-truth device index.
    pub(crate) phys: u32,
    /// Whether this is the device's primary context.
    pub(crate) primary: bool,
    /// `CU_CTX_*` flags.
    pub(crate) flags: AtomicU32,
    alive: AtomicBool,
    /// `CU_LIMIT_STACK_SIZE` now, bytes per thread.
    stack: AtomicUsize,
    /// Device memory charged for stack beyond the default (see [`cuCtxSetLimit`]).
    stack_charged: AtomicU64,
    /// The largest stack size set so far (what `stack_charged` covers).
    stack_high: AtomicUsize,
}

/// The driver's default stack size per thread.
const DEFAULT_STACK: usize = 1024;

impl Context {
    /// The `CUcontext` handle of this context.
    pub(crate) fn handle(&self) -> CUcontext {
        self.handle as CUcontext
    }

    /// Whether the context is still alive (not destroyed, primary not released to zero).
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

#[derive(Default)]
struct Primary {
    ctx: Option<Arc<Context>>,
    refcount: u32,
    flags: u32,
}

#[derive(Default)]
struct Registry {
    /// Every handle ever given out → its latest incarnation.
    by_handle: HashMap<usize, Arc<Context>>,
    /// Alive incarnations by id.
    alive: HashMap<u64, Arc<Context>>,
    /// Primary context state per application ordinal.
    primaries: HashMap<CUdevice, Primary>,
}

/// Base of primary context handles (one per device, stable).
const PRIMARY_HANDLE_BASE: usize = 0x0c7c_0000_0000;
/// Base of created context handles (never reused).
const CREATED_HANDLE_BASE: usize = 0x0c7d_0000_0000;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_CREATED: AtomicU64 = AtomicU64::new(1);

fn registry() -> MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    static STACK: RefCell<Vec<Arc<Context>>> = const { RefCell::new(Vec::new()) };
}

fn stack_top() -> Option<Arc<Context>> {
    STACK
        .try_with(|s| s.borrow().last().cloned())
        .ok()
        .flatten()
}

fn stack_push(ctx: Arc<Context>) {
    let _ = STACK.try_with(|s| s.borrow_mut().push(ctx));
}

fn stack_pop() -> Option<Arc<Context>> {
    STACK.try_with(|s| s.borrow_mut().pop()).ok().flatten()
}

/// The calling thread's current context: `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`,
/// `CUDA_ERROR_INVALID_CONTEXT` when there is none, `CUDA_ERROR_CONTEXT_IS_DESTROYED` when it died.
pub(crate) fn current() -> Result<Arc<Context>, CUresult> {
    device::node()?;
    let ctx = stack_top().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if ctx.is_alive() {
        return Ok(ctx);
    }
    if ctx.primary {
        // The primary context keeps its handle across incarnations: if it was retained again,
        // the thread's binding follows it.
        let live = registry().by_handle.get(&ctx.handle).cloned();
        if let Some(live) = live.filter(|c| c.is_alive()) {
            let _ = STACK.try_with(|s| {
                if let Some(top) = s.borrow_mut().last_mut() {
                    *top = live.clone();
                }
            });
            return Ok(live);
        }
    }
    Err(CUDA_ERROR_CONTEXT_IS_DESTROYED)
}

/// The context behind `h` (null means the current one).
pub(crate) fn lookup(h: CUcontext) -> Result<Arc<Context>, CUresult> {
    if h.is_null() {
        return current();
    }
    device::node()?;
    let ctx = registry()
        .by_handle
        .get(&(h as usize))
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if ctx.is_alive() {
        Ok(ctx)
    } else {
        Err(CUDA_ERROR_CONTEXT_IS_DESTROYED)
    }
}

/// Brings a new incarnation to life: charges the context overhead.
fn birth(
    dev: CUdevice,
    handle: usize,
    primary: bool,
    flags: u32,
) -> Result<Arc<Context>, CUresult> {
    let node = device::node()?;
    let phys = device::physical(dev)?;
    node.ctx_attach(phys).map_err(|e| device::sim_err(&e))?;
    let ctx = Arc::new(Context {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        handle,
        device: dev,
        phys,
        primary,
        flags: AtomicU32::new(flags),
        alive: AtomicBool::new(true),
        stack: AtomicUsize::new(DEFAULT_STACK),
        stack_charged: AtomicU64::new(0),
        stack_high: AtomicUsize::new(DEFAULT_STACK),
    });
    let mut r = registry();
    r.by_handle.insert(handle, ctx.clone());
    r.alive.insert(ctx.id, ctx.clone());
    Ok(ctx)
}

/// Ends an incarnation: waits for its work, frees what was allocated in it, returns the overhead.
/// Must be called without the registry lock held.
fn death(ctx: &Arc<Context>) {
    crate::stream::destroy_context_streams(ctx.id);
    ctx.alive.store(false, Ordering::Release);
    registry().alive.remove(&ctx.id);
    crate::pool::release_context(ctx.id);
    crate::array::release_context(ctx.id);
    crate::memory::release_context(ctx.id);
    crate::module::release_context(ctx.id);
    if let Ok(node) = device::node() {
        node.mem_free(ctx.phys, ctx.stack_charged.swap(0, Ordering::AcqRel));
        node.ctx_detach(ctx.phys);
    }
}

fn validate_flags(flags: c_uint) -> Result<(), CUresult> {
    let sched = flags & CU_CTX_SCHED_MASK;
    if flags & !CU_CTX_FLAGS_MASK != 0 || sched == 3 || sched > CU_CTX_SCHED_BLOCKING_SYNC {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

fn create(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> Result<(), CUresult> {
    device::node()?;
    if pctx.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    device::physical(dev)?;
    validate_flags(flags)?;
    let n = NEXT_CREATED.fetch_add(1, Ordering::Relaxed) as usize;
    let ctx = birth(dev, CREATED_HANDLE_BASE + n * 0x1000, false, flags)?;
    // SAFETY: null-checked above; the caller provides a valid CUcontext slot.
    unsafe { pctx.write(ctx.handle()) };
    stack_push(ctx);
    Ok(())
}

/// `cuCtxCreate` (legacy export, same signature as `_v2`).
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate(
    pctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    rc(create(pctx, flags, dev))
}

/// `cuCtxCreate_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    pctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    rc(create(pctx, flags, dev))
}

/// `cuCtxCreate_v3` (execution affinity parameters are accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    params: *mut c_void,
    num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    if num_params < 0 || (num_params > 0 && params.is_null()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc(create(pctx, flags, dev))
}

/// `cuCtxCreate_v4` (`CUctxCreateParams` accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    _params: *mut c_void,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    rc(create(pctx, flags, dev))
}

fn destroy(h: CUcontext) -> Result<(), CUresult> {
    device::node()?;
    if h.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ctx = registry()
        .by_handle
        .get(&(h as usize))
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if ctx.primary || !ctx.is_alive() {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    death(&ctx);
    // The real driver pops the context if it is current to the calling thread.
    let _ = STACK.try_with(|s| s.borrow_mut().retain(|c| c.id != ctx.id));
    Ok(())
}

/// `cuCtxDestroy`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy(ctx: CUcontext) -> CUresult {
    rc(destroy(ctx))
}

/// `cuCtxDestroy_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    rc(destroy(ctx))
}

fn push(h: CUcontext) -> Result<(), CUresult> {
    device::node()?;
    if h.is_null() {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    let ctx = lookup(h)?;
    stack_push(ctx);
    Ok(())
}

/// `cuCtxPushCurrent`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent(ctx: CUcontext) -> CUresult {
    rc(push(ctx))
}

/// `cuCtxPushCurrent_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    rc(push(ctx))
}

fn pop(pctx: *mut CUcontext) -> Result<(), CUresult> {
    device::node()?;
    let ctx = stack_pop().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if !pctx.is_null() {
        // SAFETY: non-null; the caller provides a valid CUcontext slot.
        unsafe { pctx.write(ctx.handle()) };
    }
    Ok(())
}

/// `cuCtxPopCurrent`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent(pctx: *mut CUcontext) -> CUresult {
    rc(pop(pctx))
}

/// `cuCtxPopCurrent_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    rc(pop(pctx))
}

/// `cuCtxSetCurrent`: replaces the top of the stack (null unbinds it).
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    if let Err(e) = device::node() {
        return e;
    }
    if ctx.is_null() {
        stack_pop();
        return CUDA_SUCCESS;
    }
    match lookup(ctx) {
        Ok(c) => {
            stack_pop();
            stack_push(c);
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

/// `cuCtxGetCurrent`: null (and success) when no context is bound.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    if let Err(e) = device::node() {
        return e;
    }
    let h = stack_top().map_or(std::ptr::null_mut(), |c| c.handle());
    // SAFETY: `put` null-checks.
    unsafe { put(pctx, h) }
}

/// `cuCtxGetDevice`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    match current() {
        // SAFETY: `put` null-checks.
        Ok(c) => unsafe { put(device, c.device) },
        Err(e) => e,
    }
}

/// `cuCtxGetDevice_v2` (CUDA 13.0): the device of `ctx` (null: the current context).
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice_v2(device: *mut CUdevice, ctx: CUcontext) -> CUresult {
    match lookup(ctx) {
        // SAFETY: `put` null-checks.
        Ok(c) => unsafe { put(device, c.device) },
        Err(e) => e,
    }
}

/// `cuCtxGetFlags`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    match current() {
        // SAFETY: `put` null-checks.
        Ok(c) => unsafe { put(flags, c.flags.load(Ordering::Relaxed)) },
        Err(e) => e,
    }
}

/// `cuCtxSetFlags`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetFlags(flags: c_uint) -> CUresult {
    let c = match current() {
        Ok(c) => c,
        Err(e) => return e,
    };
    if let Err(e) = validate_flags(flags) {
        return e;
    }
    c.flags.store(flags, Ordering::Relaxed);
    CUDA_SUCCESS
}

/// `cuCtxGetId`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetId(ctx: CUcontext, ctx_id: *mut u64) -> CUresult {
    match lookup(ctx) {
        // SAFETY: `put` null-checks.
        Ok(c) => unsafe { put(ctx_id, c.id) },
        Err(e) => e,
    }
}

/// `cuCtxGetApiVersion`: 3020, the version of every `_v2`-era context.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) -> CUresult {
    match lookup(ctx) {
        // SAFETY: `put` null-checks.
        Ok(_) => unsafe { put(version, 3020) },
        Err(e) => e,
    }
}

/// `cuCtxSynchronize`: waits for every stream of the current context, then lets pools release
/// memory above their thresholds (as the real driver does at synchronization points).
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    let c = match current() {
        Ok(c) => c,
        Err(e) => return e,
    };
    let r = crate::stream::synchronize_context(c.id);
    crate::pool::on_synchronize(c.device);
    r
}

/// `cuCtxSynchronize_v2` (CUDA 13.0): waits for `ctx` (null: the current context), which need
/// not be current.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize_v2(ctx: CUcontext) -> CUresult {
    let c = match lookup(ctx) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let r = crate::stream::synchronize_context(c.id);
    crate::pool::on_synchronize(c.device);
    r
}

/// `cuCtxGetLimit`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(pvalue: *mut usize, limit: CUlimit) -> CUresult {
    if let Err(e) = current() {
        return e;
    }
    let ctx = match current() {
        Ok(c) => c,
        Err(e) => return e,
    };
    let v = match limit {
        CU_LIMIT_STACK_SIZE => ctx.stack.load(Ordering::Acquire),
        CU_LIMIT_PRINTF_FIFO_SIZE => 1 << 20,
        CU_LIMIT_MALLOC_HEAP_SIZE => 8 << 20,
        CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH => 2,
        CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT => 2048,
        CU_LIMIT_MAX_L2_FETCH_GRANULARITY => 64,
        CU_LIMIT_PERSISTING_L2_CACHE_SIZE => 0,
        _ => return CUDA_ERROR_UNSUPPORTED_LIMIT,
    };
    // SAFETY: `put` null-checks.
    unsafe { put(pvalue, v) }
}

/// `cuCtxSetLimit`. A larger `CU_LIMIT_STACK_SIZE` makes the context reserve local memory for
/// every thread the device can hold resident (SMs × 2 048), outside any allocation, as the real
/// driver does (an H200's process grew by 16.6 GiB for 64 KiB of stack); it fails with
/// `CUDA_ERROR_OUT_OF_MEMORY` when the device cannot hold it. A lower limit keeps what was
/// reserved. Other limits are accepted, not modelled.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: CUlimit, value: usize) -> CUresult {
    let ctx = match current() {
        Ok(c) => c,
        Err(e) => return e,
    };
    if limit >= CU_LIMIT_SHMEM_SIZE {
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    }
    if limit == CU_LIMIT_STACK_SIZE {
        if let Err(e) = grow_stack(&ctx, value) {
            return e;
        }
        ctx.stack.store(value, Ordering::Release);
    }
    CUDA_SUCCESS
}

/// Charges the local memory a stack of `value` bytes per thread takes beyond what `ctx` holds.
fn grow_stack(ctx: &Context, value: usize) -> Result<(), CUresult> {
    let high = ctx.stack_high.load(Ordering::Acquire);
    if value <= high {
        return Ok(());
    }
    let node = device::node()?;
    let resident = u64::from(
        node.device(ctx.phys)
            .map_err(|e| device::sim_err(&e))?
            .sm_count,
    ) * 2048;
    let bytes = ((value - high) as u64).saturating_mul(resident);
    node.mem_alloc(ctx.phys, bytes)
        .map_err(|e| device::sim_err(&e))?;
    ctx.stack_charged.fetch_add(bytes, Ordering::AcqRel);
    ctx.stack_high.store(value, Ordering::Release);
    Ok(())
}

fn primary_handle(dev: CUdevice) -> usize {
    PRIMARY_HANDLE_BASE + (dev as usize) * 0x1000
}

/// `cuDevicePrimaryCtxRetain`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    if let Err(e) = device::node() {
        return e;
    }
    if pctx.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = device::physical(dev) {
        return e;
    }
    let (active, flags) = {
        let mut r = registry();
        let p = r.primaries.entry(dev).or_default();
        match &p.ctx {
            Some(c) if c.is_alive() => {
                p.refcount += 1;
                (Some(c.handle()), 0)
            }
            _ => (None, p.flags),
        }
    };
    let h = match active {
        Some(h) => h,
        None => {
            let ctx = match birth(dev, primary_handle(dev), true, flags) {
                Ok(c) => c,
                Err(e) => return e,
            };
            let mut r = registry();
            let p = r.primaries.entry(dev).or_default();
            p.ctx = Some(ctx.clone());
            p.refcount = 1;
            ctx.handle()
        }
    };
    // SAFETY: null-checked above.
    unsafe { pctx.write(h) };
    CUDA_SUCCESS
}

/// Deactivates the primary context of `dev` (reset, or release to zero).
fn primary_down(dev: CUdevice, release: bool) -> Result<(), CUresult> {
    device::node()?;
    device::physical(dev)?;
    let dying = {
        let mut r = registry();
        let p = r.primaries.entry(dev).or_default();
        let active = p.ctx.as_ref().is_some_and(|c| c.is_alive()) && p.refcount > 0;
        if release {
            if !active {
                return Err(CUDA_ERROR_INVALID_CONTEXT);
            }
            p.refcount -= 1;
            if p.refcount > 0 {
                return Ok(());
            }
        } else {
            p.refcount = 0;
            p.flags = 0;
        }
        if active {
            p.ctx.clone()
        } else {
            None
        }
    };
    if let Some(c) = dying {
        death(&c);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxRelease`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    rc(primary_down(dev, true))
}

/// `cuDevicePrimaryCtxRelease_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    rc(primary_down(dev, true))
}

/// `cuDevicePrimaryCtxReset`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset(dev: CUdevice) -> CUresult {
    rc(primary_down(dev, false))
}

/// `cuDevicePrimaryCtxReset_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    rc(primary_down(dev, false))
}

/// `cuDevicePrimaryCtxGetState`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    if let Err(e) = device::node().and_then(|_| device::physical(dev)) {
        return e;
    }
    if flags.is_null() || active.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let (f, a) = {
        let r = registry();
        match r.primaries.get(&dev) {
            Some(p) => match &p.ctx {
                Some(c) if c.is_alive() => (c.flags.load(Ordering::Relaxed), 1),
                _ => (p.flags, 0),
            },
            None => (0, 0),
        }
    };
    // SAFETY: both null-checked above.
    unsafe {
        flags.write(f);
        active.write(a);
    }
    CUDA_SUCCESS
}

fn primary_set_flags(dev: CUdevice, flags: c_uint) -> Result<(), CUresult> {
    device::node()?;
    device::physical(dev)?;
    validate_flags(flags)?;
    let mut r = registry();
    let p = r.primaries.entry(dev).or_default();
    p.flags = flags;
    if let Some(c) = p.ctx.as_ref().filter(|c| c.is_alive()) {
        c.flags.store(flags, Ordering::Relaxed);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxSetFlags`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: c_uint) -> CUresult {
    rc(primary_set_flags(dev, flags))
}

/// `cuDevicePrimaryCtxSetFlags_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) -> CUresult {
    rc(primary_set_flags(dev, flags))
}
