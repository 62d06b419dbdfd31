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
