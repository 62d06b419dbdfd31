//! Events with real timestamps: an event records the CLOCK_MONOTONIC time at which its stream
//! reached the record (after every earlier item of the stream completed), so an event pair
//! around a kernel measures the kernel's time on the shared engine, waits included.
//!
//! Each `cuEventRecord` issues a new record number; the event's state is that of the most recent
//! record (`cuEventQuery` / `cuEventSynchronize` wait for it, `cuStreamWaitEvent` captures it).

use std::collections::HashMap;
use std::ffi::{c_float, c_uint};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, Weak};

use gpuslice_cuda_abi::exec::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;

use crate::context;
use crate::device::rc;
use crate::graph::CapturedAt;
use crate::stream::{self, Op, Stream};

/// Base of event handles.
const EVENT_HANDLE_BASE: usize = 0x0e7e_0000_0000;

#[derive(Default)]
struct State {
    /// Records issued (the latest record number).
    issued: u64,
    /// Time the completed record was reached.
    time_ns: u64,
    /// Where the latest record was captured, if it was recorded into a capturing stream.
    captured: Option<CapturedAt>,
    /// The stream whose worker completes record `on.1`, as its item `on.2` (`wait`: its
    /// waiters spin near the end).
    on: Option<(Weak<Stream>, u64, u64)>,
}

/// One event.
pub(crate) struct Event {
    /// `CU_EVENT_*` flags.
    pub(crate) flags: c_uint,
    /// The device of the context it was created in (its synchronization is that device's).
    pub(crate) device: CUdevice,
    st: Mutex<State>,
    cv: Condvar,
    /// Highest record number completed: written under `st`'s lock with the time it was
    /// reached (waiters on `cv` read it there), read without it by spinning waiters (`wait`).
    done: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Event {
    /// Highest record number completed.
    fn done(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Issues a new record number (for an item about to be enqueued).
    pub(crate) fn issue(&self) -> u64 {
        let mut st = lock(&self.st);
        st.issued += 1;
        st.captured = None;
        st.issued
    }

    /// The latest record number (0: never recorded).
    pub(crate) fn issued_gen(&self) -> u64 {
        lock(&self.st).issued
    }

    /// Marks record `gen` as reached at `t_ns` (stream workers).
    pub(crate) fn complete(&self, gen: u64, t_ns: u64) {
        let mut st = lock(&self.st);
        if gen > self.done() {
            st.time_ns = t_ns;
            self.done.store(gen, Ordering::Release);
        }
        drop(st);
        self.cv.notify_all();
    }

    /// Blocks until record `gen` has completed.
    pub(crate) fn wait_gen(&self, gen: u64) {
        if let Some((s, item)) = self.spinning_stream(gen) {
            let since = s.completed();
            s.expect.wait(since, item, || self.done() >= gen);
            return;
        }
        let mut st = lock(&self.st);
        while self.done() < gen {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Record `gen` is completed by stream `s`'s worker, as its item `item`.
    pub(crate) fn set_stream(&self, s: &Arc<Stream>, gen: u64, item: u64) {
        lock(&self.st).on = Some((Arc::downgrade(s), gen, item));
    }

    /// The stream to wait on for record `gen` with the driver's spin (`wait`), when this event
    /// and that stream's context wait actively.
    fn spinning_stream(&self, gen: u64) -> Option<(Arc<Stream>, u64)> {
        if self.flags & CU_EVENT_BLOCKING_SYNC != 0 {
            return None;
        }
        let (s, item) = match &lock(&self.st).on {
            Some((s, g, item)) if *g == gen => (s.upgrade()?, *item),
            _ => return None,
        };
        crate::wait::spins(s.ctx.flags.load(Ordering::Relaxed)).then_some((s, item))
    }

    /// Remembers that the latest record happened inside a stream capture.
    pub(crate) fn set_captured(&self, at: CapturedAt) {
        lock(&self.st).captured = Some(at);
    }

    /// The capture position of the latest record, if it was captured.
    pub(crate) fn captured(&self) -> Option<CapturedAt> {
        lock(&self.st).captured.clone()
    }

    fn query(&self) -> bool {
        let st = lock(&self.st);
        self.done() >= st.issued
    }
}

static EVENTS: LazyLock<Mutex<HashMap<usize, Arc<Event>>>> = LazyLock::new(Default::default);
static NEXT: AtomicU64 = AtomicU64::new(1);

/// The event behind `h` (`CUDA_ERROR_INVALID_HANDLE` if unknown or destroyed).
pub(crate) fn lookup(h: CUevent) -> Result<Arc<Event>, CUresult> {
    crate::device::node()?;
    lock(&EVENTS)
        .get(&(h as usize))
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

fn create(ph: *mut CUevent, flags: c_uint) -> Result<(), CUresult> {
    let device = context::current()?.device;
    if ph.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let all = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if flags & !all != 0
        || (flags & CU_EVENT_INTERPROCESS != 0 && flags & CU_EVENT_DISABLE_TIMING == 0)
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let handle = EVENT_HANDLE_BASE + NEXT.fetch_add(1, Ordering::Relaxed) as usize * 0x40;
    let ev = Arc::new(Event {
        flags,
        device,
        st: Mutex::new(State::default()),
        cv: Condvar::new(),
        done: AtomicU64::new(0),
    });
    lock(&EVENTS).insert(handle, ev);
    // SAFETY: null-checked above; the caller provides a writable CUevent.
    unsafe { ph.write(handle as CUevent) };
    Ok(())
}

/// `cuEventCreate`.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(ph: *mut CUevent, flags: c_uint) -> CUresult {
    rc(create(ph, flags))
}

fn record(ev: CUevent, h: CUstream, flags: c_uint, ptds: bool) -> Result<(), CUresult> {
    let e = lookup(ev)?;
    let s = stream::resolve(h, ptds)?;
    if flags & !CU_EVENT_RECORD_EXTERNAL != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if crate::graph::capture_record_event(&s, &e, flags & CU_EVENT_RECORD_EXTERNAL != 0)? {
        return Ok(());
    }
    if flags & CU_EVENT_RECORD_EXTERNAL != 0 {
        // Only meaningful during capture.
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let gen = e.issue();
    stream::submit(&s, Vec::new(), Op::Record(e.clone(), gen));
    // Its item number (another thread submitting to the same stream at once only makes the
    // waiters' spin start a kernel early or late).
    e.set_stream(&s, gen, s.submitted());
    Ok(())
}

/// `cuEventRecord`.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(ev: CUevent, h: CUstream) -> CUresult {
    rc(record(ev, h, 0, false))
}

/// `cuEventRecord_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecord_ptsz(ev: CUevent, h: CUstream) -> CUresult {
    rc(record(ev, h, 0, true))
}

/// `cuEventRecordWithFlags`.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags(
    ev: CUevent,
    h: CUstream,
    flags: c_uint,
) -> CUresult {
    rc(record(ev, h, flags, false))
}

/// `cuEventRecordWithFlags_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags_ptsz(
    ev: CUevent,
    h: CUstream,
    flags: c_uint,
) -> CUresult {
    rc(record(ev, h, flags, true))
}

/// `cuEventQuery`: `CUDA_ERROR_NOT_READY` until the latest record is reached (a never-recorded
/// event is complete).
#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(ev: CUevent) -> CUresult {
    match lookup(ev).and_then(may_wait_for) {
        Ok(e) if e.query() => CUDA_SUCCESS,
        Ok(_) => CUDA_ERROR_NOT_READY,
        Err(r) => r,
    }
}

/// A query or synchronisation of `e`: a captured record refuses it (`graph`), and otherwise it
/// is a potentially unsafe call (`capture_rules`).
fn may_wait_for(e: Arc<Event>) -> Result<Arc<Event>, CUresult> {
    if let Some(at) = e.captured() {
        return Err(crate::graph::captured_event_used(&at));
    }
    crate::capture_rules::unsafe_call()?;
    Ok(e)
}

/// `cuEventSynchronize`.
#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(ev: CUevent) -> CUresult {
    match lookup(ev).and_then(may_wait_for) {
        Ok(e) => {
            let gen = e.issued_gen();
            e.wait_gen(gen);
            // A synchronization point: pools give back what exceeds their threshold.
            crate::pool::on_synchronize(e.device);
            CUDA_SUCCESS
        }
        Err(r) => r,
    }
}

fn elapsed(out: *mut c_float, start: CUevent, end: CUevent) -> Result<(), CUresult> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (a, b) = (lookup(start)?, lookup(end)?);
    if a.flags & CU_EVENT_DISABLE_TIMING != 0 || b.flags & CU_EVENT_DISABLE_TIMING != 0 {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    // One lock at a time: `start` and `end` may be the same event.
    let snap = |e: &Event| {
        let st = lock(&e.st);
        (st.issued, e.done(), st.time_ns, st.captured.is_some())
    };
    let (sa, sb) = (snap(&a), snap(&b));
    if sa.3 || sb.3 {
        return Err(CUDA_ERROR_CAPTURED_EVENT);
    }
    if sa.0 == 0 || sb.0 == 0 {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    if sa.1 < sa.0 || sb.1 < sb.0 {
        return Err(CUDA_ERROR_NOT_READY);
    }
    let ms = (sb.2 as f64 - sa.2 as f64) / 1e6;
    // SAFETY: null-checked above; the caller provides a writable float.
    unsafe { out.write(ms as c_float) };
    Ok(())
}

/// `cuEventElapsedTime`: milliseconds between the times the two records were reached.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut c_float,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    rc(elapsed(ms, start, end))
}

/// `cuEventElapsedTime_v2` (CUDA 12.8; same semantics).
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut c_float,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    rc(elapsed(ms, start, end))
}

fn destroy(ev: CUevent) -> Result<(), CUresult> {
    crate::device::node()?;
    // Pending records keep their own reference and still complete.
    lock(&EVENTS)
        .remove(&(ev as usize))
        .map(|_| ())
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

/// `cuEventDestroy` (legacy export).
#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy(ev: CUevent) -> CUresult {
    rc(destroy(ev))
}

/// `cuEventDestroy_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(ev: CUevent) -> CUresult {
    rc(destroy(ev))
}
