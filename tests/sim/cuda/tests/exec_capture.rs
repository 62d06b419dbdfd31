//! Stream-capture rules: the probe a real H200 ran (`tests/gpu/probe/capture_rules.c`) replayed
//! on the simulator, whose every result must be the driver's (`data/capture_rules_h200.txt`):
//! which calls a live capture prohibits, by capture mode (global, thread_local, relaxed) and by
//! calling thread, `cuThreadExchangeStreamCaptureMode`, captured events, isolation, the context,
//! and `cuStreamGetCaptureInfo` in every version; plus PyTorch's fork / join of a side stream.

mod exec_support;

use std::ffi::{c_uint, c_void};

use exec_support::*;
use gpuslice_cuda_abi::result::result_name;

const NON_BLOCKING: c_uint = 1;
const LEGACY: Handle = 1usize as Handle;
const MODES: [(&str, c_uint); 3] = [("global", 0), ("thread_local", 1), ("relaxed", 2)];

/// The driver's rows: (mode, thread, op) → (op result, status after, end result).
fn driver_rows() -> Vec<[String; 6]> {
    include_str!("data/capture_rules_h200.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let v: Vec<String> = l.split_whitespace().map(String::from).collect();
            [0, 1, 2, 3, 4, 5].map(|i| v[i].clone())
        })
        .collect()
}

fn name(r: CUresult) -> String {
    result_name(r).unwrap_or("?").to_string()
}

type Fn0 = unsafe extern "C" fn() -> CUresult;
type Fn1 = unsafe extern "C" fn(Handle) -> CUresult;
type Fn2 = unsafe extern "C" fn(Handle, Handle) -> CUresult;

/// The probe's handles: a capturing and another non-blocking stream, events, buffers.
struct Probe {
    ctx: Handle,
    cap: Handle,
    other: Handle,
    ev_done: Handle,
    ev_cap: Handle,
    ev_tmp: Handle,
    buf: u64,
    spare: u64,
    spin: Handle,
}

// SAFETY: driver handles are plain identifiers, usable from any thread of the process.
unsafe impl Send for Probe {}
// SAFETY: as above.
unsafe impl Sync for Probe {}

fn event(flags: c_uint) -> Handle {
    let create: unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult = cuda().f("cuEventCreate");
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { create(&mut e, flags) }, SUCCESS);
    e
}

fn alloc(bytes: usize) -> (CUresult, u64) {
    let f: unsafe extern "C" fn(*mut u64, usize) -> CUresult = cuda().f("cuMemAlloc_v2");
    let mut p = 0u64;
    // SAFETY: valid out-pointer.
    let r = unsafe { f(&mut p, bytes) };
    (r, p)
}

fn free(p: u64) -> CUresult {
    let f: unsafe extern "C" fn(u64) -> CUresult = cuda().f("cuMemFree_v2");
    // SAFETY: plain driver call.
    unsafe { f(p) }
}

fn memset(p: u64, v: u32, s: Handle) -> CUresult {
    let f: unsafe extern "C" fn(u64, u32, usize, Handle) -> CUresult = cuda().f("cuMemsetD32Async");
    // SAFETY: plain driver call on a live buffer of at least 16 words.
    unsafe { f(p, v, 16, s) }
}

fn alloc_async_and_free(s: Handle) -> CUresult {
    let a: unsafe extern "C" fn(*mut u64, usize, Handle) -> CUresult = cuda().f("cuMemAllocAsync");
    let f: unsafe extern "C" fn(u64, Handle) -> CUresult = cuda().f("cuMemFreeAsync");
    let mut p = 0u64;
    // SAFETY: valid out-pointer; the pointer is freed once on the same stream.
    unsafe {
        let r = a(&mut p, 1 << 20, s);
        if r == SUCCESS {
            f(p, s);
        }
        r
    }
}

fn record(e: Handle, s: Handle) -> CUresult {
    let f: Fn2 = cuda().f("cuEventRecord");
    // SAFETY: plain driver call.
    unsafe { f(e, s) }
}

fn wait_event(s: Handle, e: Handle) -> CUresult {
    let f: unsafe extern "C" fn(Handle, Handle, c_uint) -> CUresult = cuda().f("cuStreamWaitEvent");
    // SAFETY: plain driver call.
    unsafe { f(s, e, 0) }
}

fn ev_call(name: &str, e: Handle) -> CUresult {
    let f: Fn1 = cuda().f(name);
    // SAFETY: plain driver call.
    unsafe { f(e) }
}

fn is_capturing(s: Handle) -> (CUresult, c_uint) {
    let f: unsafe extern "C" fn(Handle, *mut c_uint) -> CUresult = cuda().f("cuStreamIsCapturing");
    let mut st = 9;
    // SAFETY: valid out-pointer.
    let r = unsafe { f(s, &mut st) };
    (r, st)
}

/// `cuThreadExchangeStreamCaptureMode`: sets `mode`, returns the previous one.
fn exchange(mode: c_uint) -> c_uint {
    let f: unsafe extern "C" fn(*mut c_uint) -> CUresult =
        cuda().f("cuThreadExchangeStreamCaptureMode");
    let mut m = mode;
    // SAFETY: valid in/out pointer.
    assert_eq!(unsafe { f(&mut m) }, SUCCESS);
    m
}

fn begin(s: Handle, mode: c_uint) -> CUresult {
    let f: unsafe extern "C" fn(Handle, c_uint) -> CUresult = cuda().f("cuStreamBeginCapture_v2");
    // SAFETY: plain driver call.
    unsafe { f(s, mode) }
}

/// `cuStreamEndCapture`; the graph is destroyed. Returns the result and the graph's node count.
fn end(s: Handle) -> (CUresult, usize) {
    let f: unsafe extern "C" fn(Handle, *mut Handle) -> CUresult = cuda().f("cuStreamEndCapture");
    let nodes: unsafe extern "C" fn(Handle, *mut Handle, *mut usize) -> CUresult =
        cuda().f("cuGraphGetNodes");
    let destroy: Fn1 = cuda().f("cuGraphDestroy");
    let mut g = std::ptr::null_mut();
    let mut n = 0;
    // SAFETY: valid out-pointers; the graph is destroyed once.
    let r = unsafe { f(s, &mut g) };
    if !g.is_null() {
        // SAFETY: as above.
        unsafe {
            nodes(g, std::ptr::null_mut(), &mut n);
            destroy(g);
        }
    }
    (r, n)
}

impl Probe {
    fn new() -> Probe {
        let ctx = init();
        let (r, buf) = alloc(1 << 20);
        assert_eq!(r, SUCCESS);
        Probe {
            ctx,
            cap: stream(NON_BLOCKING),
            other: stream(NON_BLOCKING),
            ev_done: event(0),
            ev_cap: event(0),
            ev_tmp: event(2),
            buf,
            spare: 0,
            spin: spin_function(),
        }
    }

    /// The probe's operation `op` (its `do_op`).
    fn op(&mut self, op: &str) -> CUresult {
        let c = cuda();
        let f0 = |n: &str| -> CUresult {
            let f: Fn0 = c.f(n);
            // SAFETY: plain driver call.
            unsafe { f() }
        };
        match op {
            "event_query_uncaptured" => ev_call("cuEventQuery", self.ev_done),
            "event_sync_uncaptured" => ev_call("cuEventSynchronize", self.ev_done),
            "event_query_captured" => ev_call("cuEventQuery", self.ev_cap),
            "event_sync_captured" => ev_call("cuEventSynchronize", self.ev_cap),
            "event_record_capturing_stream" => record(self.ev_tmp, self.cap),
            "event_record_other_stream" => record(self.ev_tmp, self.other),
            "stream_query_other" => query(self.other),
            "stream_sync_other" => sync(self.other),
            "stream_query_capturing" => query(self.cap),
            "stream_sync_capturing" => sync(self.cap),
            "ctx_synchronize" => f0("cuCtxSynchronize"),
            "mem_alloc_free" => {
                let (r, p) = alloc(1 << 20);
                if r == SUCCESS {
                    free(p);
                }
                r
            }
            "mem_free_preallocated" => {
                let r = free(self.spare);
                if r == SUCCESS {
                    self.spare = 0;
                }
                r
            }
            "mem_alloc_async_other" => alloc_async_and_free(self.other),
            "mem_alloc_async_capturing" => alloc_async_and_free(self.cap),
            "memset_legacy_stream" => memset(self.buf, 1, LEGACY),
            "memset_other_stream" => memset(self.buf, 1, self.other),
            "get_capture_info" => {
                let f: unsafe extern "C" fn(
                    Handle,
                    *mut c_uint,
                    *mut u64,
                    *mut Handle,
                    *mut *const Handle,
                    *mut *const c_void,
                    *mut usize,
                ) -> CUresult = c.f("cuStreamGetCaptureInfo_v3");
                let (mut st, mut id) = (0, 0);
                let null = std::ptr::null_mut();
                // SAFETY: valid or null out-pointers.
                unsafe {
                    f(
                        self.cap,
                        &mut st,
                        &mut id,
                        null,
                        null.cast(),
                        null.cast(),
                        null.cast(),
                    )
                }
            }
            "is_capturing" => is_capturing(self.cap).0,
            "mem_get_info" => {
                let f: unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult =
                    c.f("cuMemGetInfo_v2");
                let (mut a, mut b) = (0, 0);
                // SAFETY: valid out-pointers.
                unsafe { f(&mut a, &mut b) }
            }
            "wait_event_capturing_on_uncaptured" => wait_event(self.cap, self.ev_done),
            "launch_other_stream" => launch_spin(self.spin, self.other, 1),
            "exchange_relaxed_then_event_sync" => {
                let prev = exchange(2);
                let r = ev_call("cuEventSynchronize", self.ev_done);
                assert_eq!(exchange(prev), 2);
                r
            }
            "memcpy_htod_sync" => {
                let f: unsafe extern "C" fn(u64, *const c_void, usize) -> CUresult =
                    c.f("cuMemcpyHtoD_v2");
                let host = 0u32;
                // SAFETY: 4 readable host bytes into a live device buffer.
                unsafe { f(self.buf, (&host as *const u32).cast(), 4) }
            }
            "event_elapsed_uncaptured" => {
                let f: unsafe extern "C" fn(*mut f32, Handle, Handle) -> CUresult =
                    c.f("cuEventElapsedTime");
                let mut ms = 0f32;
                // SAFETY: valid out-pointer.
                unsafe { f(&mut ms, self.ev_done, self.ev_done) }
            }
            "stream_query_legacy" => query(LEGACY),
            _ => panic!("unknown probe op {op}"),
        }
    }

    /// The probe's `one()`: begin a capture in `mode`, a memset and a record into it, `op` on
    /// this thread or another, then the status, more work and the end. Returns the row.
    fn one(&mut self, mode: c_uint, op: &str, other_thread: bool) -> [String; 3] {
        if self.spare == 0 {
            let (r, p) = alloc(1 << 20);
            assert_eq!(r, SUCCESS);
            self.spare = p;
        }
        assert_eq!(record(self.ev_done, self.other), SUCCESS);
        assert_eq!(sync(self.other), SUCCESS);
        assert_eq!(begin(self.cap, mode), SUCCESS);
        assert_eq!(
            memset(self.buf, 7, self.cap),
            SUCCESS,
            "memset into a capture"
        );
        assert_eq!(record(self.ev_cap, self.cap), SUCCESS);
        let rc = if other_thread {
            let ctx = self.ctx as usize;
            let me: &mut Probe = self;
            std::thread::scope(|s| {
                s.spawn(|| {
                    let set: Fn1 = cuda().f("cuCtxSetCurrent");
                    // SAFETY: the live primary context.
                    assert_eq!(unsafe { set(ctx as Handle) }, SUCCESS);
                    me.op(op)
                })
                .join()
                .expect("probe thread")
            })
        } else {
            self.op(op)
        };
        let (isr, st) = is_capturing(self.cap);
        assert_eq!(isr, SUCCESS);
        let _ = memset(self.buf, 8, self.cap);
        let (end_rc, _) = end(self.cap);
        let ctx_sync: Fn0 = cuda().f("cuCtxSynchronize");
        // SAFETY: plain driver call.
        assert_eq!(unsafe { ctx_sync() }, SUCCESS, "no capture is left");
        let status = ["none", "active", "invalidated"][st.min(2) as usize];
        [name(rc), status.to_string(), name(end_rc)]
    }
}

/// Replays the driver's rows whose op satisfies `pick` and returns the mismatches.
fn replay(pick: impl Fn(&str, &str) -> bool) -> (usize, Vec<String>) {
    let mut p = Probe::new();
    let mut bad = Vec::new();
    let mut n = 0;
    for row in driver_rows().into_iter().filter(|r| pick(&r[0], &r[2])) {
        let mode = MODES.iter().find(|m| m.0 == row[0]).expect("mode").1;
        let got = p.one(mode, &row[2], row[1] == "other");
        n += 1;
        if got[..] != row[3..] {
            bad.push(format!(
                "{} {} {}: driver {:?}, simulator {:?}",
                row[0],
                row[1],
                row[2],
                &row[3..],
                got
            ));
        }
    }
    (n, bad)
}

fn assert_like_the_driver(pick: impl Fn(&str, &str) -> bool, at_least: usize) {
    let _g = serial();
    let (n, bad) = replay(pick);
    assert!(n >= at_least, "only {n} driver rows replayed");
    assert!(
        bad.is_empty(),
        "{} of {n} rows differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Potentially unsafe calls: synchronising or querying outside the capture, `cuMemAlloc`,
/// `cuMemFree`, `cuMemAllocAsync` elsewhere, the legacy stream's query.
const UNSAFE: &[&str] = &[
    "event_query_uncaptured",
    "event_sync_uncaptured",
    "stream_query_other",
    "stream_sync_other",
    "mem_alloc_free",
    "mem_free_preallocated",
    "mem_alloc_async_other",
    "stream_query_legacy",
];

#[test]
fn global_capture_prohibits_unsafe_calls_of_every_thread() {
    assert_like_the_driver(|m, op| m == "global" && UNSAFE.contains(&op), 16);
}

#[test]
fn thread_local_capture_prohibits_unsafe_calls_of_its_own_thread_only() {
    assert_like_the_driver(|m, op| m == "thread_local" && UNSAFE.contains(&op), 16);
}

#[test]
fn relaxed_capture_prohibits_no_unsafe_call() {
    assert_like_the_driver(|m, op| m == "relaxed" && UNSAFE.contains(&op), 16);
}

#[test]
fn a_relaxed_thread_may_make_unsafe_calls_in_every_mode() {
    assert_like_the_driver(|_, op| op == "exchange_relaxed_then_event_sync", 6);
}

#[test]
fn captured_events_cannot_be_waited_on_and_invalidate_the_capture() {
    assert_like_the_driver(
        |_, op| op.starts_with("event_") && op.ends_with("_captured"),
        12,
    );
}

#[test]
fn capturing_stream_and_its_context_cannot_be_waited_on_in_any_mode() {
    assert_like_the_driver(
        |_, op| op.ends_with("_capturing") && op.starts_with("stream_") || op == "ctx_synchronize",
        18,
    );
}

#[test]
fn a_capture_may_not_wait_on_an_event_recorded_outside_it() {
    assert_like_the_driver(|_, op| op == "wait_event_capturing_on_uncaptured", 6);
}

#[test]
fn safe_calls_leave_every_capture_active() {
    const SAFE: &[&str] = &[
        "event_record_capturing_stream",
        "event_record_other_stream",
        "mem_alloc_async_capturing",
        "memset_legacy_stream",
        "memset_other_stream",
        "get_capture_info",
        "is_capturing",
        "mem_get_info",
        "launch_other_stream",
        "memcpy_htod_sync",
        "event_elapsed_uncaptured",
    ];
    assert_like_the_driver(|_, op| SAFE.contains(&op), 66);
}

#[test]
fn thread_capture_mode_is_per_thread_and_checked() {
    let _g = serial();
    init();
    let f: unsafe extern "C" fn(*mut c_uint) -> CUresult =
        cuda().f("cuThreadExchangeStreamCaptureMode");
    let mut bad = 3;
    // SAFETY: valid in/out pointer, then null.
    unsafe {
        assert_eq!(f(&mut bad), INVALID_VALUE, "mode 3 does not exist");
        assert_eq!(f(std::ptr::null_mut()), INVALID_VALUE);
    }
    assert_eq!(bad, 3, "a refused exchange leaves the argument alone");
    assert_eq!(exchange(1), 0, "every thread starts in global mode");
    let seen_elsewhere = std::thread::spawn(|| exchange(0)).join().expect("thread");
    assert_eq!(seen_elsewhere, 0, "another thread's mode is its own");
    assert_eq!(exchange(0), 1);
}

/// PyTorch's fork / join: an event recorded in the capture forks a side stream into it, the
/// side stream's record joins it back; events record no nodes; a joined event is stale after.
#[test]
fn fork_and_join_capture_a_side_stream_like_the_driver() {
    let _g = serial();
    let p = Probe::new();
    for (mode_name, mode) in MODES {
        let (fork, join) = (event(2), event(2));
        assert_eq!(begin(p.cap, mode), SUCCESS);
        assert_eq!(record(fork, p.cap), SUCCESS);
        assert_eq!(wait_event(p.other, fork), SUCCESS);
        assert_eq!(
            is_capturing(p.other),
            (SUCCESS, 1),
            "{mode_name}: side stream joins"
        );
        assert_eq!(launch_spin(p.spin, p.other, 1), SUCCESS);
        assert_eq!(record(join, p.other), SUCCESS);
        assert_eq!(wait_event(p.cap, join), SUCCESS);
        assert_eq!(end(p.cap), (SUCCESS, 1), "{mode_name}: one kernel node");
        assert_eq!(is_capturing(p.other), (SUCCESS, 0));
        assert_eq!(
            ev_call("cuEventQuery", join),
            INVALID_VALUE,
            "{mode_name}: an event last recorded in an ended capture"
        );
    }
}

/// `cuStreamGetCaptureInfo_v2` / `_v3` name the graph being built and the stream's current
/// dependencies; v1 gives status and id; not capturing, none.
#[test]
fn capture_info_in_every_version() {
    let _g = serial();
    let p = Probe::new();
    type V1 = unsafe extern "C" fn(Handle, *mut c_uint, *mut u64) -> CUresult;
    type V2 = unsafe extern "C" fn(
        Handle,
        *mut c_uint,
        *mut u64,
        *mut Handle,
        *mut *const Handle,
        *mut usize,
    ) -> CUresult;
    type V3 = unsafe extern "C" fn(
        Handle,
        *mut c_uint,
        *mut u64,
        *mut Handle,
        *mut *const Handle,
        *mut *const c_void,
        *mut usize,
    ) -> CUresult;
    let c = cuda();
    let v1: V1 = c.f("cuStreamGetCaptureInfo");
    let v2: V2 = c.f("cuStreamGetCaptureInfo_v2");
    let v3: V3 = c.f("cuStreamGetCaptureInfo_v3");
    for n in [
        "cuStreamGetCaptureInfo_ptsz",
        "cuStreamGetCaptureInfo_v2_ptsz",
    ] {
        assert!(!c.raw(n).is_null(), "{n} exported");
    }
    assert!(!c.raw("cuStreamGetCaptureInfo_v3_ptsz").is_null());
    let (mut st, mut id, mut g) = (9, 0u64, std::ptr::null_mut());
    let mut deps: *const Handle = std::ptr::null();
    let mut edges: *const c_void = std::ptr::null();
    let mut n = 7usize;
    // SAFETY: valid out-pointers; the dependency array is read while the capture is live and
    // before any other call on the stream.
    unsafe {
        assert_eq!(
            v2(p.cap, &mut st, &mut id, &mut g, &mut deps, &mut n),
            SUCCESS
        );
        assert_eq!(st, 0, "not capturing");
        assert_eq!(begin(p.cap, 0), SUCCESS);
        assert_eq!(v1(p.cap, &mut st, &mut id), SUCCESS);
        assert_eq!(st, 1);
        let first = id;
        assert_eq!(launch_spin(p.spin, p.cap, 1), SUCCESS);
        let r = v3(
            p.cap, &mut st, &mut id, &mut g, &mut deps, &mut edges, &mut n,
        );
        assert_eq!((r, st, id), (SUCCESS, 1, first));
        assert!(!g.is_null() && !deps.is_null() && !edges.is_null());
        assert_eq!(n, 1, "the launch is the one dependency");
        let ty: unsafe extern "C" fn(Handle, *mut c_uint) -> CUresult = c.f("cuGraphNodeGetType");
        let mut t = 99;
        assert_eq!(ty(*deps, &mut t), SUCCESS);
        assert_eq!(t, 0, "a kernel node");
        assert_eq!(
            v2(p.cap, &mut st, &mut id, &mut g, &mut deps, &mut n),
            SUCCESS
        );
        assert_eq!(n, 1);
        let f: unsafe extern "C" fn(Handle, *mut Handle) -> CUresult = c.f("cuStreamEndCapture");
        let mut got = std::ptr::null_mut();
        assert_eq!(f(p.cap, &mut got), SUCCESS);
        assert_eq!(got, g, "the graph ends as the one being built");
        assert_eq!(v1(p.cap, std::ptr::null_mut(), &mut id), INVALID_VALUE);
    }
}
