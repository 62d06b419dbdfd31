//! Events: real timestamps, query / synchronize, elapsed-time error codes, stream waits.

mod exec_support;

use std::ffi::{c_float, c_uint};
use std::time::Instant;

use exec_support::*;

type CreateFn = unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult;
type RecordFn = unsafe extern "C" fn(Handle, Handle) -> CUresult;
type EvFn = unsafe extern "C" fn(Handle) -> CUresult;
type ElapsedFn = unsafe extern "C" fn(*mut c_float, Handle, Handle) -> CUresult;

fn event(flags: c_uint) -> Handle {
    let create: CreateFn = cuda().f("cuEventCreate");
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { create(&mut e, flags) }, SUCCESS);
    e
}

#[test]
fn event_pair_around_20ms_kernel_measures_about_20ms() {
    let _g = serial();
    init();
    let c = cuda();
    let record: RecordFn = c.f("cuEventRecord");
    let query: EvFn = c.f("cuEventQuery");
    let synchronize: EvFn = c.f("cuEventSynchronize");
    let elapsed: ElapsedFn = c.f("cuEventElapsedTime");
    let f = spin_function();
    let s = stream(0);
    let (a, b) = (event(0), event(0));
    let mut ms: c_float = -1.0;
    // SAFETY: valid handles and out-pointers.
    unsafe {
        assert_eq!(record(a, s), SUCCESS);
        assert_eq!(launch_spin(f, s, 20_000), SUCCESS);
        assert_eq!(record(b, s), SUCCESS);
        assert_eq!(query(b), NOT_READY);
        assert_eq!(elapsed(&mut ms, a, b), NOT_READY);
        assert_eq!(synchronize(b), SUCCESS);
        assert_eq!(query(b), SUCCESS);
        assert_eq!(elapsed(&mut ms, a, b), SUCCESS);
    }
    assert!((18.0..40.0).contains(&ms), "event pair measured {ms} ms");
}

#[test]
fn elapsed_time_error_codes() {
    let _g = serial();
    init();
    let c = cuda();
    let record: RecordFn = c.f("cuEventRecord");
    let synchronize: EvFn = c.f("cuEventSynchronize");
    let elapsed: ElapsedFn = c.f("cuEventElapsedTime");
    let destroy: EvFn = c.f("cuEventDestroy_v2");
    let query: EvFn = c.f("cuEventQuery");
    let create: CreateFn = c.f("cuEventCreate");
    let s = stream(0);
    let (timed, untimed, never) = (event(0), event(2), event(0));
    let mut ms: c_float = 0.0;
    // SAFETY: driver calls with valid or deliberately bogus handles.
    unsafe {
        assert_eq!(record(timed, s), SUCCESS);
        assert_eq!(record(untimed, s), SUCCESS);
        assert_eq!(synchronize(untimed), SUCCESS);
        assert_eq!(
            elapsed(&mut ms, timed, untimed),
            INVALID_HANDLE,
            "DISABLE_TIMING"
        );
        assert_eq!(
            elapsed(&mut ms, timed, never),
            INVALID_HANDLE,
            "never recorded"
        );
        assert_eq!(query(never), SUCCESS, "a never-recorded event is complete");
        assert_eq!(elapsed(std::ptr::null_mut(), timed, timed), INVALID_VALUE);
        assert_eq!(elapsed(&mut ms, timed, timed), SUCCESS);
        assert_eq!(ms, 0.0);
        let mut e = std::ptr::null_mut();
        assert_eq!(
            create(&mut e, 4),
            INVALID_VALUE,
            "INTERPROCESS needs DISABLE_TIMING"
        );
        assert_eq!(create(&mut e, 0x10), INVALID_VALUE);
        assert_eq!(destroy(timed), SUCCESS);
        assert_eq!(destroy(timed), INVALID_HANDLE);
        assert_eq!(query(timed), INVALID_HANDLE);
        assert_eq!(record(timed, s), INVALID_HANDLE);
        assert_eq!(record(never, 0xbad0_usize as Handle), INVALID_HANDLE);
    }
}

#[test]
fn stream_wait_event_orders_two_streams() {
    let _g = serial();
    init();
    let c = cuda();
    let record: RecordFn = c.f("cuEventRecord");
    let wait: unsafe extern "C" fn(Handle, Handle, c_uint) -> CUresult = c.f("cuStreamWaitEvent");
    let f = spin_function();
    let (s1, s2) = (stream(1), stream(1));
    let e = event(2);
    let t = Instant::now();
    // SAFETY: valid handles.
    unsafe {
        assert_eq!(launch_spin(f, s1, 30_000), SUCCESS);
        assert_eq!(record(e, s1), SUCCESS);
        assert_eq!(wait(s2, e, 0), SUCCESS);
        assert_eq!(wait(s2, e, 7), INVALID_VALUE);
    }
    assert_eq!(launch_spin(f, s2, 1), SUCCESS);
    assert_eq!(sync(s2), SUCCESS);
    let waited = ms_since(t);
    assert!(
        waited >= 28.0,
        "s2 finished after {waited:.1} ms, before s1's event"
    );
    assert_eq!(query(s1), SUCCESS);
}

/// `CU_EVENT_BLOCKING_SYNC`.
const EVENT_BLOCKING_SYNC: c_uint = 1;

/// How busy a launch–wait loop of 1 ms kernels keeps the device for 1 s, `wait` after each
/// launch (given the stream and the event recorded after the kernel).
fn loop_busy(event_flags: c_uint, wait: impl Fn(Handle, Handle) -> CUresult) -> f64 {
    let record: RecordFn = cuda().f("cuEventRecord");
    let f = spin_function();
    let s = stream(0);
    let e = event(event_flags);
    let t = Instant::now();
    let mut kernels = 0u32;
    while t.elapsed().as_secs_f64() < 1.0 {
        assert_eq!(launch_spin(f, s, 1000), SUCCESS);
        // SAFETY: valid handles.
        assert_eq!(unsafe { record(e, s) }, SUCCESS);
        assert_eq!(wait(s, e), SUCCESS);
        kernels += 1;
    }
    f64::from(kernels) / ms_since(t)
}

/// A synchronous tenant (launch a 1 ms kernel, wait for it, launch the next) keeps the device as
/// busy as on the driver, whose default wait (`CU_CTX_SCHED_AUTO`) spins: the waiting thread is
/// running when the kernel ends and launches again within µs. Blocking on a condition variable
/// (and sleeping with Linux's 50 µs default timer slack) the simulator left 8–10 % of the device
/// idle between kernels on a 2-core host (0.91–0.92 here), which the scheduler's depth-1 tests
/// then charged to hand-offs (issue 36).
#[test]
fn a_launch_wait_loop_keeps_the_device_busy_as_the_drivers_spin_wait_does() {
    let _g = serial();
    init();
    let synchronize: EvFn = cuda().f("cuEventSynchronize");
    // SAFETY: valid handles.
    let by_event = loop_busy(0, |_, e| unsafe { synchronize(e) });
    let by_stream = loop_busy(0, |s, _| sync(s));
    // A blocking-sync event still waits for its kernel (its latency is the host's wake-up).
    // SAFETY: valid handles.
    let blocking = loop_busy(EVENT_BLOCKING_SYNC, |_, e| unsafe { synchronize(e) });
    eprintln!(
        "device busy: event sync {by_event:.3}, stream sync {by_stream:.3}, blocking-sync event \
         {blocking:.3}"
    );
    assert!(
        by_event >= 0.95,
        "cuEventSynchronize loop: busy {by_event:.3}"
    );
    assert!(
        by_stream >= 0.95,
        "cuStreamSynchronize loop: busy {by_stream:.3}"
    );
    assert!(
        blocking <= 1.0,
        "a blocking wait returned early: {blocking:.3}"
    );
}
