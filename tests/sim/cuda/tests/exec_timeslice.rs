//! Events across a preemption on the time-sliced engine (`GPUSLICE_SIM_ENGINE=timeslice`): a
//! second process saturates the device with 50 ms kernels, so this process's kernels are
//! time-sliced with them, and event timestamps follow the sliced timeline.

mod exec_support;

use std::ffi::{c_float, c_uint, CString};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use exec_support::*;

type CreateFn = unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult;
type RecordFn = unsafe extern "C" fn(Handle, Handle) -> CUresult;
type ElapsedFn = unsafe extern "C" fn(*mut c_float, Handle, Handle) -> CUresult;

const COMPETITOR: &str = "GPUSLICE_TS_TEST_COMPETITOR";

fn event() -> Handle {
    let create: CreateFn = cuda().f("cuEventCreate");
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { create(&mut e, 0) }, SUCCESS);
    e
}

fn elapsed(a: Handle, b: Handle) -> f32 {
    let f: ElapsedFn = cuda().f("cuEventElapsedTime");
    let mut ms: c_float = -1.0;
    // SAFETY: valid handles and out-pointer.
    assert_eq!(unsafe { f(&mut ms, a, b) }, SUCCESS);
    ms
}

/// `record(a)`, spin `us1`, `record(b)`, spin `us2`, `record(c)` on one stream, synchronised:
/// the elapsed times a→b and b→c in ms.
fn three_events(us1: u64, us2: u64) -> (f32, f32) {
    let record: RecordFn = cuda().f("cuEventRecord");
    let f = spin_function();
    let s = stream(0);
    let (a, b, c) = (event(), event(), event());
    // SAFETY: valid handles.
    unsafe {
        assert_eq!(record(a, s), SUCCESS);
        assert_eq!(launch_spin(f, s, us1), SUCCESS);
        assert_eq!(record(b, s), SUCCESS);
        assert_eq!(launch_spin(f, s, us2), SUCCESS);
        assert_eq!(record(c, s), SUCCESS);
    }
    assert_eq!(sync(s), SUCCESS);
    (elapsed(a, b), elapsed(b, c))
}

/// The competitor: the same test binary in another process on this process's state file,
/// launching 50 ms kernels back to back until its stdin closes.
fn competitor() {
    // Load the driver on the parent's state file (inherited GPUSLICE_SIM_STATE) before
    // `cuda()` points the variable at a private one: the library reads it at `cuInit`.
    let exe = std::env::current_exe().expect("current_exe");
    let lib = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("libcuda.so");
    let path = CString::new(lib.to_str().expect("utf-8")).expect("path");
    // SAFETY: dlopen of the simulator, then its cuInit through the same handle.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null());
        let name = CString::new("cuInit").expect("name");
        let cu_init: unsafe extern "C" fn(c_uint) -> CUresult =
            std::mem::transmute(libc::dlsym(h, name.as_ptr()));
        assert_eq!(cu_init(0), SUCCESS);
    }
    init();
    let f = spin_function();
    let s = stream(0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let mut l = String::new();
        while std::io::stdin()
            .read_line(&mut l)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(launch_spin(f, s, 50_000), SUCCESS);
    assert_eq!(sync(s), SUCCESS);
    println!("@ready");
    std::io::stdout().flush().expect("flush");
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        assert_eq!(launch_spin(f, s, 50_000), SUCCESS);
        assert_eq!(launch_spin(f, s, 50_000), SUCCESS);
        assert_eq!(sync(s), SUCCESS);
    }
}

#[test]
fn events_follow_the_sliced_timeline_across_a_preemption() {
    if std::env::var_os(COMPETITOR).is_some() {
        competitor();
        return;
    }
    let _g = serial();
    std::env::set_var("GPUSLICE_SIM_ENGINE", "timeslice");
    std::env::set_var("GPUSLICE_SIM_TIMESLICE_US", "2000");
    init();
    // Alone: a kernel is never preempted, events measure exactly its duration.
    let (ab, bc) = three_events(20_000, 10_000);
    assert!((19.99..20.5).contains(&ab), "alone: a→b {ab} ms");
    assert!((9.99..10.5).contains(&bc), "alone: b→c {bc} ms");

    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "events_follow_the_sliced_timeline_across_a_preemption",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(COMPETITOR, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn competitor");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains("@ready") {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "competitor died"
        );
    }
    // Beside a context saturating the device with 50 ms kernels, 2 ms slices: 20 ms of work
    // takes about 40 ms (our slices alternate with the competitor's), plus at most one slice
    // of waiting and the switches; the event between two preempted kernels marks the first
    // one's end exactly, so b→c is the second kernel's sliced time. With whole kernels in turn
    // b→c would include one of the competitor's 50 ms kernels.
    let (ab, bc) = three_events(20_000, 10_000);
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success(), "competitor failed");
    eprintln!("beside a 50 ms competitor: a→b {ab} ms, b→c {bc} ms");
    assert!((38.0..46.0).contains(&ab), "a→b {ab} ms");
    assert!((18.0..24.0).contains(&bc), "b→c {bc} ms");
}
