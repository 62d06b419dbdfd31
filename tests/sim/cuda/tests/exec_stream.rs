//! Streams: asynchronous in-order execution on the shared engine, query / synchronize,
//! host-function ordering, priorities, legacy default stream semantics, error codes.

mod exec_support;

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;
use std::time::Instant;

use exec_support::*;

#[test]
fn ten_spins_enqueue_fast_then_run_about_100ms() {
    let _g = serial();
    init();
    let f = spin_function();
    let s = stream(0);
    let t0 = Instant::now();
    for _ in 0..10 {
        assert_eq!(launch_spin(f, s, 10_000), SUCCESS);
    }
    let enqueue_ms = ms_since(t0);
    assert!(
        enqueue_ms < 20.0,
        "enqueueing ten launches took {enqueue_ms:.2} ms"
    );
    assert_eq!(query(s), NOT_READY);
    assert_eq!(sync(s), SUCCESS);
    let total = ms_since(t0);
    assert!(
        (90.0..300.0).contains(&total),
        "ten 10 ms spins took {total:.1} ms"
    );
    assert_eq!(query(s), SUCCESS);
}

static ORDER: Mutex<Vec<usize>> = Mutex::new(Vec::new());

unsafe extern "C" fn push_order(data: *mut c_void) {
    ORDER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(data as usize);
}

#[test]
fn host_functions_and_kernels_run_in_stream_order() {
    let _g = serial();
    init();
    ORDER.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let f = spin_function();
    let s = stream(0);
    for i in 0..20usize {
        if i % 3 == 0 {
            assert_eq!(launch_spin(f, s, 500), SUCCESS);
        }
        assert_eq!(host_fn(s, push_order, i as *mut c_void), SUCCESS);
    }
    assert_eq!(sync(s), SUCCESS);
    let got = ORDER.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(got, (0..20).collect::<Vec<_>>());
}

static DONE_AT: Mutex<Vec<(usize, Instant)>> = Mutex::new(Vec::new());

unsafe extern "C" fn stamp(data: *mut c_void) {
    DONE_AT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((data as usize, Instant::now()));
}

#[test]
fn priorities_range_and_high_priority_stream_goes_first() {
    let _g = serial();
    init();
    let c = cuda();
    let range: unsafe extern "C" fn(*mut c_int, *mut c_int) -> CUresult =
        c.f("cuCtxGetStreamPriorityRange");
    let create: unsafe extern "C" fn(*mut Handle, c_uint, c_int) -> CUresult =
        c.f("cuStreamCreateWithPriority");
    let get: unsafe extern "C" fn(Handle, *mut c_int) -> CUresult = c.f("cuStreamGetPriority");
    let (mut least, mut greatest) = (99, 99);
    // SAFETY: valid out-pointers.
    assert_eq!(unsafe { range(&mut least, &mut greatest) }, SUCCESS);
    assert_eq!((least, greatest), (0, -5));
    let (mut lo, mut hi) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(create(&mut lo, 0, 0), SUCCESS);
        assert_eq!(create(&mut hi, 0, -100), SUCCESS); // clamped to -5
    }
    let mut p = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { get(hi, &mut p) }, SUCCESS);
    assert_eq!(p, -5);
    DONE_AT.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let f = spin_function();
    for _ in 0..10 {
        assert_eq!(launch_spin(f, lo, 10_000), SUCCESS);
    }
    assert_eq!(
        host_fn(lo, stamp, std::ptr::null_mut::<c_void>().wrapping_add(1)),
        SUCCESS
    );
    std::thread::sleep(std::time::Duration::from_millis(15));
    assert_eq!(launch_spin(f, hi, 10_000), SUCCESS);
    assert_eq!(
        host_fn(hi, stamp, std::ptr::null_mut::<c_void>().wrapping_add(2)),
        SUCCESS
    );
    assert_eq!(sync(lo), SUCCESS);
    assert_eq!(sync(hi), SUCCESS);
    let v = DONE_AT.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let at = |k: usize| {
        v.iter()
            .find(|(i, _)| *i == k)
            .map(|(_, t)| *t)
            .expect("stamp")
    };
    let (low_done, high_done) = (at(1), at(2));
    // The high-priority kernel overtakes the queued low-priority ones: it finishes long before.
    let lead = low_done.duration_since(high_done).as_secs_f64() * 1e3;
    assert!(
        high_done < low_done && lead > 40.0,
        "high priority finished only {lead:.1} ms earlier"
    );
}

#[test]
fn legacy_stream_waits_for_blocking_streams_but_not_non_blocking_ones() {
    let _g = serial();
    init();
    let f = spin_function();
    let blocking = stream(0);
    let non_blocking = stream(1);
    let legacy = 1usize as Handle;

    // A kernel in the legacy stream waits for earlier work of a blocking stream.
    assert_eq!(launch_spin(f, blocking, 30_000), SUCCESS);
    assert_eq!(launch_spin(f, legacy, 1), SUCCESS);
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(query(legacy), NOT_READY);
    assert_eq!(sync(legacy), SUCCESS);
    assert_eq!(
        query(blocking),
        SUCCESS,
        "legacy work completed before the blocking stream's"
    );

    // Work in a non-blocking stream does not make the legacy stream wait.
    assert_eq!(launch_spin(f, non_blocking, 40_000), SUCCESS);
    let t = Instant::now();
    // The host function in the legacy stream runs without waiting for the 40 ms kernel.
    static FLAG: Mutex<Option<Instant>> = Mutex::new(None);
    unsafe extern "C" fn mark(_: *mut c_void) {
        *FLAG.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }
    assert_eq!(host_fn(legacy, mark, std::ptr::null_mut()), SUCCESS);
    assert_eq!(sync(legacy), SUCCESS);
    let ran = FLAG.lock().unwrap_or_else(|p| p.into_inner()).expect("ran");
    assert!(ran.duration_since(t).as_secs_f64() * 1e3 < 30.0);
    assert_eq!(query(non_blocking), NOT_READY);
    assert_eq!(sync(non_blocking), SUCCESS);
}

#[test]
fn per_thread_default_stream_is_separate_from_legacy() {
    let _g = serial();
    init();
    let c = cuda();
    let launch_ptsz: LaunchFn = c.f("cuLaunchKernel_ptsz");
    let query_ptsz: unsafe extern "C" fn(Handle) -> CUresult = c.f("cuStreamQuery_ptsz");
    let get_id: unsafe extern "C" fn(Handle, *mut u64) -> CUresult = c.f("cuStreamGetId");
    let get_id_ptsz: unsafe extern "C" fn(Handle, *mut u64) -> CUresult = c.f("cuStreamGetId_ptsz");
    let f = spin_function();
    let (mut a, mut b, mut pt) = (0u64, 0u64, 0u64);
    // SAFETY: valid out-pointers; NULL / 0x2 are the driver's special streams.
    unsafe {
        assert_eq!(get_id(std::ptr::null_mut(), &mut a), SUCCESS);
        assert_eq!(get_id_ptsz(std::ptr::null_mut(), &mut b), SUCCESS);
        assert_eq!(get_id(2usize as Handle, &mut pt), SUCCESS);
    }
    assert_ne!(a, b, "NULL in a _ptsz call is the per-thread stream");
    assert_eq!(b, pt);
    let mut arg = 20_000u64;
    let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
    // SAFETY: kernelParams holds one pointer to the u64 argument.
    let r = unsafe {
        launch_ptsz(
            f,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            std::ptr::null_mut(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, SUCCESS);
    // SAFETY: plain driver call.
    assert_eq!(unsafe { query_ptsz(std::ptr::null_mut()) }, NOT_READY);
    assert_eq!(sync(2usize as Handle), SUCCESS);
}

static CB_STATUS: Mutex<Vec<(usize, CUresult, usize)>> = Mutex::new(Vec::new());

unsafe extern "C" fn callback(s: Handle, status: CUresult, data: *mut c_void) {
    CB_STATUS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((s as usize, status, data as usize));
}

#[test]
fn stream_callbacks_get_stream_status_and_data() {
    let _g = serial();
    init();
    type Cb = Option<unsafe extern "C" fn(Handle, CUresult, *mut c_void)>;
    let add: unsafe extern "C" fn(Handle, Cb, *mut c_void, c_uint) -> CUresult =
        cuda().f("cuStreamAddCallback");
    let s = stream(0);
    CB_STATUS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    // SAFETY: valid callback; integer cookie.
    unsafe {
        assert_eq!(add(s, Some(callback), 7usize as *mut c_void, 0), SUCCESS);
        assert_eq!(
            add(s, Some(callback), 7usize as *mut c_void, 1),
            INVALID_VALUE
        );
    }
    assert_eq!(sync(s), SUCCESS);
    let v = CB_STATUS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(v, vec![(s as usize, SUCCESS, 7)]);
}

#[test]
fn bad_handles_and_arguments() {
    let _g = serial();
    init();
    let c = cuda();
    let destroy: unsafe extern "C" fn(Handle) -> CUresult = c.f("cuStreamDestroy_v2");
    let flags: unsafe extern "C" fn(Handle, *mut c_uint) -> CUresult = c.f("cuStreamGetFlags");
    let create: unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult = c.f("cuStreamCreate");
    let bogus = 0xdead_beef_usize as Handle;
    assert_eq!(sync(bogus), INVALID_HANDLE);
    assert_eq!(query(bogus), INVALID_HANDLE);
    let f = spin_function();
    assert_eq!(launch_spin(f, bogus, 1), INVALID_HANDLE);
    // SAFETY: driver calls with bogus handles / flags; the driver validates them.
    unsafe {
        assert_eq!(destroy(bogus), INVALID_HANDLE);
        let mut out = 0;
        assert_eq!(flags(bogus, &mut out), INVALID_HANDLE);
        let mut s = std::ptr::null_mut();
        assert_eq!(create(&mut s, 4), INVALID_VALUE);
        assert_eq!(create(std::ptr::null_mut(), 0), INVALID_VALUE);
        assert_eq!(create(&mut s, 1), SUCCESS);
        assert_eq!(flags(s, &mut out), SUCCESS);
        assert_eq!(out, 1);
        assert_eq!(destroy(s), SUCCESS);
        assert_eq!(destroy(s), INVALID_HANDLE);
        assert_eq!(flags(s, &mut out), INVALID_HANDLE);
    }
}
