//! A stub `libcuda.so.1` for `cargo xtask bench interposer`: every entry point the bench client
//! and the interposer's fast paths use, answering at once (one device of 80 GiB, one context),
//! so that timing differences with and without `libgpuslice.so` are the interposer's own cost,
//! free of the simulator's variance. Not a driver: no state beyond a counter.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

type R = u32;
static NEXT: AtomicU64 = AtomicU64::new(0x7000_0000_0000);
const TOTAL: usize = 80 << 30;

#[no_mangle]
pub extern "C" fn cuInit(_f: c_uint) -> R {
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, _d: c_int) -> R {
    // SAFETY: caller's out-pointer.
    unsafe { *ctx = 0x1000 as *mut c_void };
    0
}
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(_c: *mut c_void) -> R {
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(d: *mut c_int) -> R {
    // SAFETY: caller's out-pointer.
    unsafe { *d = 0 };
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(u: *mut u8, _d: c_int) -> R {
    // SAFETY: 16-byte out-buffer.
    unsafe { std::ptr::write_bytes(u, 0x11, 16) };
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(b: *mut usize, _d: c_int) -> R {
    // SAFETY: caller's out-pointer.
    unsafe { *b = TOTAL };
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(m: *mut *mut c_void, _i: *const c_void) -> R {
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
    0
}
#[no_mangle]
pub extern "C" fn cuStreamSynchronize(_s: *mut c_void) -> R {
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(p: *mut u64, n: usize) -> R {
    let a = NEXT.fetch_add((n as u64).max(1).next_multiple_of(2 << 20), Relaxed);
    // SAFETY: caller's out-pointer.
    unsafe { *p = a };
    0
}
#[no_mangle]
pub extern "C" fn cuMemFree_v2(_p: u64) -> R {
    0
}
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(f: *mut usize, t: *mut usize) -> R {
    // SAFETY: caller's out-pointers.
    unsafe {
        *f = TOTAL;
        *t = TOTAL;
    }
    0
}
