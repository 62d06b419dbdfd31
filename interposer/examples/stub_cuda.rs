//! A stub `libcuda.so.1` for `cargo xtask bench interposer`: every entry point the bench client
//! and the interposer's launch paths use, answering at once (one device of 80 GiB, one context,
//! events that are always complete), so that timing differences with and without
//! `libgpuslice.so` are the interposer's own cost, free of the simulator's variance. Not a
//! driver: no state beyond counters. It counts every call, per entry point, for the whole
//! process and for the calling thread (`gpuslice_stub_calls`): on a real driver a call costs
//! 8 ns to over a microsecond (docs/benchmarks.md), which nanoseconds on a stub hide.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

type R = u32;
static NEXT: AtomicU64 = AtomicU64::new(0x7000_0000_0000);
const TOTAL: usize = 80 << 30;

/// The counted entry points, in the order of the counters.
const NAMES: [&str; 24] = [
    "cuInit",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuCtxGetDevice",
    "cuDeviceGetUuid_v2",
    "cuDeviceTotalMem_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuLaunchKernel",
    "cuStreamSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemGetInfo_v2",
    "cuCtxGetCurrent",
    "cuCtxSynchronize",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuStreamIsCapturing",
    "cuStreamIsCapturing_ptsz",
    "cuThreadExchangeStreamCaptureMode",
];
const N: usize = NAMES.len();

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
static CALLS: [AtomicU64; N] = [ZERO; N];
thread_local! {
    static MINE: [Cell<u64>; N] = const { [const { Cell::new(0) }; N] };
}

/// Counts a call of `NAMES[i]`.
fn hit(i: usize) {
    CALLS[i].fetch_add(1, Relaxed);
    let _ = MINE.try_with(|m| m[i].set(m[i].get() + 1));
}

fn idx(name: &str) -> usize {
    NAMES.iter().position(|n| *n == name).unwrap_or(0)
}

/// Calls so far per entry point (`thread` nonzero: the calling thread's only) into `out`
/// (`n` counters at most); returns how many entry points are counted.
#[no_mangle]
pub unsafe extern "C" fn gpuslice_stub_calls(thread: c_int, out: *mut u64, n: usize) -> usize {
    for i in 0..N.min(n) {
        let v = if thread != 0 {
            MINE.try_with(|m| m[i].get()).unwrap_or(0)
        } else {
            CALLS[i].load(Relaxed)
        };
        // SAFETY: `out` holds `n` counters.
        unsafe { *out.add(i) = v };
    }
    N
}

/// The name of counter `i` (NUL-terminated, static), or null.
#[no_mangle]
pub extern "C" fn gpuslice_stub_call_name(i: usize) -> *const c_char {
    static C: std::sync::OnceLock<Vec<std::ffi::CString>> = std::sync::OnceLock::new();
    let v = C.get_or_init(|| {
        NAMES
            .iter()
            .map(|n| std::ffi::CString::new(*n).unwrap_or_default())
            .collect()
    });
    v.get(i).map_or(std::ptr::null(), |c| c.as_ptr())
}

/// `$body` after counting a call of the function it is in.
macro_rules! counted {
    ($name:literal, $body:expr) => {{
        hit(idx($name));
        $body
    }};
}

#[no_mangle]
pub extern "C" fn cuInit(_f: c_uint) -> R {
    hit(idx("cuInit"));
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, _d: c_int) -> R {
    hit(idx("cuDevicePrimaryCtxRetain"));
    // SAFETY: caller's out-pointer.
    unsafe { *ctx = 0x1000 as *mut c_void };
    0
}
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(_c: *mut c_void) -> R {
    hit(idx("cuCtxSetCurrent"));
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(d: *mut c_int) -> R {
    hit(idx("cuCtxGetDevice"));
    // SAFETY: caller's out-pointer.
    unsafe { *d = 0 };
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(u: *mut u8, _d: c_int) -> R {
    hit(idx("cuDeviceGetUuid_v2"));
    // SAFETY: 16-byte out-buffer.
    unsafe { std::ptr::write_bytes(u, 0x11, 16) };
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(b: *mut usize, _d: c_int) -> R {
    hit(idx("cuDeviceTotalMem_v2"));
    // SAFETY: caller's out-pointer.
    unsafe { *b = TOTAL };
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(m: *mut *mut c_void, _i: *const c_void) -> R {
    hit(idx("cuModuleLoadData"));
    // SAFETY: caller's out-pointer.
    unsafe { *m = 0x2000 as *mut c_void };
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    f: *mut *mut c_void,
    _m: *mut c_void,
    _n: *const c_char,
) -> R {
    hit(idx("cuModuleGetFunction"));
    // SAFETY: caller's out-pointer.
    unsafe { *f = 0x3000 as *mut c_void };
    0
}
#[no_mangle]
pub extern "C" fn cuLaunchKernel(
    _f: *mut c_void,
    _gx: c_uint,
    _gy: c_uint,
    _gz: c_uint,
    _bx: c_uint,
    _by: c_uint,
    _bz: c_uint,
    _s: c_uint,
    _st: *mut c_void,
    _p: *mut *mut c_void,
    _e: *mut *mut c_void,
) -> R {
    hit(idx("cuLaunchKernel"));
    0
}
#[no_mangle]
pub extern "C" fn cuStreamSynchronize(_s: *mut c_void) -> R {
    hit(idx("cuStreamSynchronize"));
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(p: *mut u64, n: usize) -> R {
    hit(idx("cuMemAlloc_v2"));
    let a = NEXT.fetch_add((n as u64).max(1).next_multiple_of(2 << 20), Relaxed);
    // SAFETY: caller's out-pointer.
    unsafe { *p = a };
    0
}
#[no_mangle]
pub extern "C" fn cuMemFree_v2(_p: u64) -> R {
    hit(idx("cuMemFree_v2"));
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(f: *mut usize, t: *mut usize) -> R {
    hit(idx("cuMemGetInfo_v2"));
    // SAFETY: caller's out-pointers.
    unsafe {
        *f = TOTAL;
        *t = TOTAL;
    }
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(c: *mut *mut c_void) -> R {
    // SAFETY: caller's out-pointer.
    counted!("cuCtxGetCurrent", unsafe { *c = 0x1000 as *mut c_void });
    0
}
#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> R {
    counted!("cuCtxSynchronize", 0)
}
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(e: *mut *mut c_void, _flags: c_uint) -> R {
    let a = NEXT.fetch_add(64, Relaxed);
    // SAFETY: caller's out-pointer.
    counted!("cuEventCreate", unsafe { *e = a as *mut c_void });
    0
}
#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(_e: *mut c_void) -> R {
    counted!("cuEventDestroy_v2", 0)
}
#[no_mangle]
pub extern "C" fn cuEventRecord(_e: *mut c_void, _s: *mut c_void) -> R {
    counted!("cuEventRecord", 0)
}
#[no_mangle]
pub extern "C" fn cuEventQuery(_e: *mut c_void) -> R {
    counted!("cuEventQuery", 0)
}
#[no_mangle]
pub extern "C" fn cuEventSynchronize(_e: *mut c_void) -> R {
    counted!("cuEventSynchronize", 0)
}
/// Every interval between two events is 5 µs (a short kernel): the queue bound is then the
/// arbiter's `max_queue`.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, _a: *mut c_void, _b: *mut c_void) -> R {
    // SAFETY: caller's out-pointer.
    counted!("cuEventElapsedTime", unsafe { *ms = 0.005 });
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(_s: *mut c_void, st: *mut c_uint) -> R {
    // SAFETY: caller's out-pointer.
    counted!("cuStreamIsCapturing", unsafe { *st = 0 });
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing_ptsz(_s: *mut c_void, st: *mut c_uint) -> R {
    // SAFETY: caller's out-pointer.
    counted!("cuStreamIsCapturing_ptsz", unsafe { *st = 0 });
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(m: *mut c_uint) -> R {
    thread_local! {
        static MODE: Cell<c_uint> = const { Cell::new(0) };
    }
    // SAFETY: caller's in/out pointer.
    counted!("cuThreadExchangeStreamCaptureMode", unsafe {
        *m = MODE.with(|x| x.replace(*m));
    });
    0
}
