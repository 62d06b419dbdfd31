//! The launch gate and stream capture, on the simulated GPU (which enforces the H200's capture
//! rules, `tests/sim/cuda/tests/exec_capture.rs`), in a slice directory whose lease this test
//! writes itself (no arbiter):
//! - a launch into a capturing stream is not gated: with the lease not held it neither waits
//!   (the gate would wait up to 30 s) nor counts in `demand`;
//! - with the lease held on a shared device (queue bound 8), captured launches are not
//!   bounded: the capture ends with exactly the captured kernels (b667c01 recorded queue-bound
//!   events into it and waited on them: the capture was invalidated);
//! - another thread launching uncaptured kernels meanwhile, bounded, never invalidates a
//!   global-mode capture (its waits are made in the relaxed capture mode).

#[macro_use]
mod support;

use gpuslice_region::layout::{LEASE_GENERATION_ONE, LEASE_HELD, LIMITS_FLAG_LEASED};
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;
use support::{field, setup, Driver, Env};

type H = *mut c_void;
const NON_BLOCKING: u32 = 1;
const GLOBAL: u32 = 0;

/// A slice of one device whose lease is `held` (or not), with queue bound `max_queue`.
fn slice(e: &Env, held: bool, max_queue: u32) -> PathBuf {
    let dir = e.dir.join("slice");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = gpuslice_region::SliceSpec {
        devices: vec![gpuslice_region::DeviceSpec::default()],
        flags: LIMITS_FLAG_LEASED,
    };
    gpuslice_region::create_slice(&dir, &spec, true).unwrap();
    let w = gpuslice_region::LeaseWriter::open(&dir).unwrap();
    w.max_queue(0).unwrap().store(max_queue, SeqCst);
    w.grant(0).unwrap().store(1, SeqCst);
    let word = LEASE_GENERATION_ONE | if held { LEASE_HELD } else { 0 };
    w.word(0).unwrap().store(word, SeqCst);
    dir
}

fn demand(dir: &Path) -> u32 {
    let u = gpuslice_region::Usage::open(dir, 1).unwrap();
    u.gate_words(0).unwrap().demand.load(Relaxed)
}

// ---------------------------------------------------------------- child side

/// The `noop` kernel of a freshly loaded module.
fn noop(d: &Driver) -> H {
    let (mut m, mut f): (H, H) = (std::ptr::null_mut(), std::ptr::null_mut());
    let image = b"image\0";
    assert_eq!(
        cu!(d, "cuModuleLoadData": fn(*mut H, *const c_void) (&mut m, image.as_ptr().cast())),
        0
    );
    assert_eq!(
        cu!(d, "cuModuleGetFunction": fn(*mut H, H, *const i8) (&mut f, m, c"noop".as_ptr())),
        0
    );
    f
}

fn stream(d: &Driver) -> H {
    let mut s: H = std::ptr::null_mut();
    assert_eq!(
        cu!(d, "cuStreamCreate": fn(*mut H, u32) (&mut s, NON_BLOCKING)),
        0
    );
    s
}

fn launch(d: &Driver, f: H, s: H) -> u32 {
    let null: *mut *mut c_void = std::ptr::null_mut();
    cu!(d, "cuLaunchKernel": fn(H, u32, u32, u32, u32, u32, u32, u32, H, *mut *mut c_void,
        *mut *mut c_void) (f, 1, 1, 1, 1, 1, 1, 0, s, null, null))
}

/// Captures `n` noop launches on `s` in global mode; prints the results, the graph's nodes and
/// the time the launches took.
fn capture(d: &Driver, f: H, s: H, n: usize) {
    assert_eq!(cu!(d, "cuStreamBeginCapture_v2": fn(H, u32) (s, GLOBAL)), 0);
    let t = Instant::now();
    let mut bad = 0;
    for _ in 0..n {
        bad += u64::from(launch(d, f, s) != 0);
    }
    let ms = t.elapsed().as_millis();
    let mut g: H = std::ptr::null_mut();
    let end = cu!(d, "cuStreamEndCapture": fn(H, *mut H) (s, &mut g));
    let mut nodes = 0usize;
    if !g.is_null() {
        assert_eq!(
            cu!(d, "cuGraphGetNodes": fn(H, *mut H, *mut usize) (g, std::ptr::null_mut(), &mut nodes)),
            0
        );
    }
    println!("FAILED_LAUNCHES={bad} END={end} NODES={nodes} MS={ms}");
}

/// `capture`: one thread captures 16 launches. `beside`: meanwhile another thread launches
/// 200 uncaptured kernels on its own stream (bounded by the gate: it waits on their events).
fn child(mode: &str) {
    let d = Driver::open();
    d.context(0);
    let f = noop(&d);
    let s = stream(&d);
    match mode {
        "capture" => capture(&d, f, s, 16),
        "beside" => {
            let other = stream(&d) as usize;
            let fa = f as usize;
            let busy = std::thread::spawn(move || {
                let d = Driver::open();
                d.context(0);
                let mut bad = 0;
                for _ in 0..200 {
                    bad += u32::from(launch(&d, fa as H, other as H) != 0);
                }
                bad
            });
            for _ in 0..20 {
                capture(&d, f, s, 16);
            }
            println!("BESIDE_FAILED={}", busy.join().unwrap());
        }
        m => panic!("unknown child mode {m}"),
    }
}

#[test]
fn child_entry() {
    if let Ok(mode) = std::env::var("H6_CHILD") {
        child(&mode);
    }
}

// ---------------------------------------------------------------- parent side

fn run_in(e: &Env, dir: &Path, mode: &str) -> String {
    let d = dir.to_string_lossy().into_owned();
    e.run(mode, &[("GPUSLICE_SLICE_DIR", &d)]).0
}

#[test]
fn captured_launches_do_not_wait_for_the_lease() {
    let e = setup("cap-unheld");
    let dir = slice(&e, false, 8);
    let t = Instant::now();
    let out = run_in(&e, &dir, "capture");
    assert_eq!(field(&out, "END"), 0, "{out}");
    assert_eq!(field(&out, "NODES"), 16, "{out}");
    assert_eq!(field(&out, "FAILED_LAUNCHES"), 0, "{out}");
    assert!(
        t.elapsed().as_secs() < 10,
        "the captured launches waited for a lease: {out}"
    );
    assert_eq!(
        demand(&dir),
        0,
        "a captured launch counted itself in demand"
    );
}

#[test]
fn captured_launches_are_not_bounded_on_a_shared_device() {
    let e = setup("cap-shared");
    let dir = slice(&e, true, 8);
    let out = run_in(&e, &dir, "capture");
    assert_eq!(field(&out, "FAILED_LAUNCHES"), 0, "{out}");
    assert_eq!(field(&out, "END"), 0, "the capture was invalidated: {out}");
    assert_eq!(field(&out, "NODES"), 16, "{out}");
}

#[test]
fn the_gates_waits_on_other_threads_leave_a_global_capture_alone() {
    let e = setup("cap-beside");
    let dir = slice(&e, true, 8);
    let out = run_in(&e, &dir, "beside");
    assert_eq!(field(&out, "BESIDE_FAILED"), 0, "{out}");
    for line in out.lines().filter(|l| l.starts_with("FAILED_LAUNCHES")) {
        assert!(
            line.contains("FAILED_LAUNCHES=0 END=0 NODES=16"),
            "a capture beside bounded launches failed: {line}"
        );
    }
    assert_eq!(out.matches("END=0").count(), 20, "{out}");
}
