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

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
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
