//! Bench client for `cargo xtask bench interposer`: times driver calls one by one and prints the
//! samples (nanoseconds) as `OP <name> <ns> <ns> …` lines. Run with and without
//! `LD_PRELOAD=libgpuslice.so`; the xtask alternates the configurations and compares.
//!
//! Operations: `launch` (cuLaunchKernel of the `noop` kernel on the legacy stream — the CPU cost
//! of the call; the stream is synchronised outside the timed region every 256 launches),
//! `alloc_free` (cuMemAlloc_v2 of 1 MiB + cuMemFree_v2), `mem_get_info` (cuMemGetInfo_v2). Each
//! sample is the mean of a batch of `BATCH` consecutive calls (the clock's own cost and
//! resolution would otherwise hide a few nanoseconds).
//! Every entry point is reached through `dlsym` on `libcuda.so.1` (under the preload: our wrapper).
//!
//! On the counting stub (`stub_cuda`, which exports `gpuslice_stub_calls`) it also prints the
//! driver calls made per launch, `CALLS thread <name>=<per launch> …` (the launching thread:
//! what each launch waits for) and `CALLS process …` (every thread, the gate thread's
//! background waits included). `bench_client make-slice DIR alone|shared` (run without the
//! preload) writes a slice directory whose lease is held, with no queue bound (alone on its
//! device) or the arbiter's bound of 8 (a shared device), for `GPUSLICE_SLICE_DIR`.

#![allow(clippy::missing_transmute_annotations)]

use std::ffi::{c_uint, c_void, CString};
use std::time::Instant;

type R = u32;
const BATCH: usize = 16;

fn sym(h: *mut c_void, name: &str) -> *mut c_void {
    let n = CString::new(name).expect("name");
    // SAFETY: valid handle and NUL-terminated name.
    let p = unsafe { libc::dlsym(h, n.as_ptr()) };
    assert!(!p.is_null(), "{name} not found");
    p
}

fn print(name: &str, v: &[u64]) {
    let s: Vec<String> = v.iter().map(u64::to_string).collect();
    println!("OP {name} {}", s.join(" "));
}

/// `make-slice DIR alone|shared`: a slice holding its device's lease, as the arbiter leaves one
/// alone on its device (no queue bound) or beside another (`max_queue` 8).
fn make_slice(dir: &str, state: &str) {
    use gpuslice_region::layout::{LEASE_GENERATION_ONE, LEASE_HELD, LIMITS_FLAG_LEASED};
    use std::sync::atomic::Ordering::SeqCst;
    let dir = std::path::Path::new(dir);
    std::fs::create_dir_all(dir).expect("slice directory");
    let spec = gpuslice_region::SliceSpec {
        devices: vec![gpuslice_region::DeviceSpec::default()],
        flags: LIMITS_FLAG_LEASED,
    };
    gpuslice_region::create_slice(dir, &spec, true).expect("create_slice");
    let w = gpuslice_region::LeaseWriter::open(dir).expect("lease");
    let mq = match state {
        "alone" => 0,
        "shared" => 8,
        _ => panic!("make-slice DIR alone|shared, not {state:?}"),
    };
    w.max_queue(0).expect("slot").store(mq, SeqCst);
    w.grant(0).expect("slot").store(1, SeqCst);
    w.word(0)
        .expect("slot")
        .store(LEASE_GENERATION_ONE | LEASE_HELD, SeqCst);
}

type Counts = unsafe extern "C" fn(i32, *mut u64, usize) -> usize;
type CountName = extern "C" fn(usize) -> *const std::ffi::c_char;

/// The stub's counters of this thread (`thread`) or the process.
fn counts(f: Counts, thread: bool) -> Vec<u64> {
    let mut v = vec![0u64; 64];
    // SAFETY: 64 writable counters.
    let n = unsafe { f(i32::from(thread), v.as_mut_ptr(), v.len()) };
    v.truncate(n);
    v
}

/// Prints the driver calls per launch, measured around `launches` calls of `launch`.
fn print_calls(h: *mut c_void, launches: usize, mut launch: impl FnMut()) {
    // SAFETY: a live handle and NUL-terminated names.
    let (c, nm) = unsafe {
        (
            libc::dlsym(h, c"gpuslice_stub_calls".as_ptr()),
            libc::dlsym(h, c"gpuslice_stub_call_name".as_ptr()),
        )
    };
    if c.is_null() || nm.is_null() {
        return;
    }
    // SAFETY: the stub's exports of these signatures.
    let (c, nm): (Counts, CountName) = unsafe { (std::mem::transmute(c), std::mem::transmute(nm)) };
    let (t0, p0) = (counts(c, true), counts(c, false));
    for _ in 0..launches {
        launch();
    }
    let (t1, p1) = (counts(c, true), counts(c, false));
    for (scope, a, b) in [("thread", t0, t1), ("process", p0, p1)] {
        let mut line = format!("CALLS {scope}");
        let mut total = 0u64;
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            if y > x {
                // SAFETY: the stub's static NUL-terminated name.
                let name = unsafe { std::ffi::CStr::from_ptr(nm(i)) }.to_string_lossy();
                line += &format!(" {name}={:.3}", (y - x) as f64 / launches as f64);
                total += y - x;
            }
        }
        println!("{line} total={:.3}", total as f64 / launches as f64);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("make-slice") {
        make_slice(&args[2], &args[3]);
        return;
    }
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    // SAFETY: loading the driver by soname.
    let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null(), "dlopen libcuda.so.1");
    // SAFETY: driver entry points transmuted to their cuda.h signatures.
    unsafe {
        let init: unsafe extern "C" fn(c_uint) -> R = std::mem::transmute(sym(h, "cuInit"));
        assert_eq!(init(0), 0);
        let retain: unsafe extern "C" fn(*mut *mut c_void, i32) -> R =
            std::mem::transmute(sym(h, "cuDevicePrimaryCtxRetain"));
        let set: unsafe extern "C" fn(*mut c_void) -> R =
            std::mem::transmute(sym(h, "cuCtxSetCurrent"));
        let mut ctx = std::ptr::null_mut();
        assert_eq!(retain(&mut ctx, 0), 0);
        assert_eq!(set(ctx), 0);
        let load: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> R =
            std::mem::transmute(sym(h, "cuModuleLoadData"));
        let getf: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const i8) -> R =
            std::mem::transmute(sym(h, "cuModuleGetFunction"));
        let mut module = std::ptr::null_mut();
        let image = b"noop image\0";
        assert_eq!(load(&mut module, image.as_ptr().cast()), 0);
        let mut f = std::ptr::null_mut();
        assert_eq!(getf(&mut f, module, c"noop".as_ptr().cast()), 0);
        type Launch = unsafe extern "C" fn(
            *mut c_void,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            *mut c_void,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> R;
        let launch: Launch = std::mem::transmute(sym(h, "cuLaunchKernel"));
        let sync: unsafe extern "C" fn(*mut c_void) -> R =
            std::mem::transmute(sym(h, "cuStreamSynchronize"));
        let alloc: unsafe extern "C" fn(*mut u64, usize) -> R =
            std::mem::transmute(sym(h, "cuMemAlloc_v2"));
        let free: unsafe extern "C" fn(u64) -> R = std::mem::transmute(sym(h, "cuMemFree_v2"));
        let info: unsafe extern "C" fn(*mut usize, *mut usize) -> R =
            std::mem::transmute(sym(h, "cuMemGetInfo_v2"));
        let null = std::ptr::null_mut();

        let mut v = Vec::with_capacity(n);
        for i in 0..n + 100 {
            let t = Instant::now();
            let mut r = 0;
            for _ in 0..BATCH {
                r |= launch(
                    f,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    null,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                );
            }
            let dt = t.elapsed().as_nanos() as u64 / BATCH as u64;
            assert_eq!(r, 0, "cuLaunchKernel");
            if i >= 100 {
                v.push(dt);
            }
            if i % 16 == 15 {
                assert_eq!(sync(null), 0);
            }
        }
        assert_eq!(sync(null), 0);
        print("launch", &v);
        print_calls(h, 4096, || {
            launch(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                null,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        });

        v.clear();
        for i in 0..n / 4 + 100 {
            let mut r = 0;
            let t = Instant::now();
            for _ in 0..BATCH {
                let mut p = 0u64;
                r |= alloc(&mut p, 1 << 20);
                r |= free(p);
            }
            let dt = t.elapsed().as_nanos() as u64 / BATCH as u64;
            assert_eq!(r, 0, "alloc/free");
            if i >= 100 {
                v.push(dt);
            }
        }
        print("alloc_free", &v);

        v.clear();
        for i in 0..n + 100 {
            let (mut fr, mut to) = (0usize, 0usize);
            let mut r = 0;
            let t = Instant::now();
            for _ in 0..BATCH {
                r |= info(&mut fr, &mut to);
            }
            let dt = t.elapsed().as_nanos() as u64 / BATCH as u64;
            assert_eq!(r, 0, "cuMemGetInfo");
            if i >= 100 {
                v.push(dt);
            }
        }
        print("mem_get_info", &v);
    }
}
