//! The simulator advertising driver 13000 (`GPUSLICE_SIM_DRIVER_VERSION=13000`, set before the
//! first driver call of this test binary): CUDA 13.0's new variants resolve through
//! `cuGetProcAddress` and behave like the driver's (`cuCtxSynchronize_v2`, `cuCtxGetDevice_v2`,
//! `cuMem{Get,Set}MemPool`, `cuMemGetDefaultMemPool`).

mod exec_support;

use std::ffi::{c_char, c_int, c_void, CString};

use exec_support::*;

type V2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut u32) -> CUresult;

const INVALID_DEVICE: CUresult = 101;
const LOC_DEVICE: u32 = 1;
const LOC_HOST: u32 = 2;
const PINNED: u32 = 1;

#[repr(C)]
struct Location {
    type_: u32,
    id: c_int,
}

/// The library with the simulator set to driver 13000 (first call of the process wins).
fn cuda13() -> &'static Cuda {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("GPUSLICE_SIM_DRIVER_VERSION", "13000"));
    cuda()
}

fn export_at(sym: &str, version: c_int) -> (CUresult, *mut c_void, u32) {
    let f: V2 = cuda13().f("cuGetProcAddress_v2");
    let name = CString::new(sym).unwrap();
    let (mut p, mut st) = (std::ptr::null_mut(), 0);
    // SAFETY: valid strings and out-pointers.
    let r = unsafe { f(name.as_ptr(), &mut p, version, 0, &mut st) };
    (r, p, st)
}

#[test]
fn advertises_13000_and_resolves_13_variants() {
    let _g = serial();
    let c = cuda13();
    let get_version: unsafe extern "C" fn(*mut c_int) -> CUresult = c.f("cuDriverGetVersion");
    let mut v = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { get_version(&mut v) }, SUCCESS);
    assert_eq!(v, 13000);
    for (sym, old, new) in [
        (
            "cuCtxSynchronize",
            "cuCtxSynchronize",
            "cuCtxSynchronize_v2",
        ),
        ("cuCtxGetDevice", "cuCtxGetDevice", "cuCtxGetDevice_v2"),
    ] {
        for (ver, want) in [(12080, old), (12090, old), (13000, new)] {
            let (r, p, st) = export_at(sym, ver);
            assert_eq!((r, st), (SUCCESS, 0), "{sym} @ {ver}");
            assert_eq!(p, c.raw(want), "{sym} @ {ver} should be {want}");
        }
    }
    for sym in [
        "cuMemGetMemPool",
        "cuMemSetMemPool",
        "cuMemGetDefaultMemPool",
    ] {
        let (r, _, st) = export_at(sym, 12090);
        assert_eq!((r, st), (NOT_FOUND, 2), "{sym} is new in 13.0");
        let (r, p, _) = export_at(sym, 13000);
        assert_eq!((r, p), (SUCCESS, c.raw(sym)), "{sym} @ 13000");
    }
}

#[test]
fn every_implemented_variant_up_to_13000_is_reachable() {
    let _g = serial();
    cuda13();
    let all = every_variant_reachable(13000);
    let old = every_variant_reachable(12090);
    // The five CUDA 13.0 variants the simulator serves are among them.
    assert_eq!(
        all - old,
        5,
        "{all} variants up to 13000, {old} up to 12090"
    );
}

#[test]
fn ctx_v2_variants_take_a_context() {
    let _g = serial();
    let c = cuda13();
    let ctx = init();
    let sync2: unsafe extern "C" fn(Handle) -> CUresult = c.f("cuCtxSynchronize_v2");
    let dev2: unsafe extern "C" fn(*mut c_int, Handle) -> CUresult = c.f("cuCtxGetDevice_v2");
    let mut d = -1;
    // SAFETY: plain driver calls; the bogus handle is rejected, not dereferenced.
    unsafe {
        assert_eq!(sync2(ctx), SUCCESS);
        assert_eq!(
            sync2(std::ptr::null_mut()),
            SUCCESS,
            "null: the current context"
        );
        assert_eq!(sync2(0x1234 as Handle), INVALID_CONTEXT);
        assert_eq!(dev2(&mut d, ctx), SUCCESS);
        assert_eq!(d, 0);
        assert_eq!(dev2(std::ptr::null_mut(), ctx), INVALID_VALUE);
        assert_eq!(dev2(&mut d, 0x1234 as Handle), INVALID_CONTEXT);
    }
}

#[test]
fn mem_pool_by_location_matches_the_device_calls() {
    let _g = serial();
    let c = cuda13();
    init();
    type GetLoc = unsafe extern "C" fn(*mut Handle, *const Location, u32) -> CUresult;
    let get: GetLoc = c.f("cuMemGetMemPool");
    let get_default: GetLoc = c.f("cuMemGetDefaultMemPool");
    let set: unsafe extern "C" fn(*const Location, u32, Handle) -> CUresult =
        c.f("cuMemSetMemPool");
    let dev_get: unsafe extern "C" fn(*mut Handle, c_int) -> CUresult = c.f("cuDeviceGetMemPool");
    let dev_default: unsafe extern "C" fn(*mut Handle, c_int) -> CUresult =
        c.f("cuDeviceGetDefaultMemPool");
    let dev0 = Location {
        type_: LOC_DEVICE,
        id: 0,
    };
    let (mut a, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: plain driver calls with valid or deliberately invalid arguments.
    unsafe {
        assert_eq!(get_default(&mut a, &dev0, PINNED), SUCCESS);
        assert_eq!(dev_default(&mut b, 0), SUCCESS);
        assert_eq!(a, b, "default pool by location = by device");
        assert_eq!(get(&mut a, &dev0, PINNED), SUCCESS);
        assert_eq!(dev_get(&mut b, 0), SUCCESS);
        assert_eq!(a, b, "current pool by location = by device");
        // Setting the default pool as current again is accepted and visible both ways.
        assert_eq!(set(&dev0, PINNED, a), SUCCESS);
        assert_eq!(dev_get(&mut b, 0), SUCCESS);
        assert_eq!(a, b);
        // Errors: host locations (no host pools here), a bad type, a bad device, null.
        let host = Location {
            type_: LOC_HOST,
            id: 0,
        };
        assert_eq!(get(&mut a, &host, PINNED), INVALID_VALUE);
        assert_eq!(get(&mut a, &dev0, 0), INVALID_VALUE);
        assert_eq!(get(&mut a, std::ptr::null(), PINNED), INVALID_VALUE);
        assert_eq!(get(std::ptr::null_mut(), &dev0, PINNED), INVALID_VALUE);
        let bad = Location {
            type_: LOC_DEVICE,
            id: 99,
        };
        assert_eq!(get_default(&mut a, &bad, PINNED), INVALID_DEVICE);
        assert_eq!(set(&dev0, PINNED, 0x10 as Handle), INVALID_VALUE);
    }
}
