//! cuGetProcAddress / cuGetProcAddress_v2: versioned resolution, per-thread flavours, statuses.

mod exec_support;

use std::ffi::{c_char, c_int, c_void, CString};

use exec_support::*;

type V2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut u32) -> CUresult;
type V1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult;

const PER_THREAD: u64 = 2;
const LEGACY: u64 = 1;

fn get(sym: &str, version: c_int, flags: u64) -> (CUresult, *mut c_void, u32) {
    let f: V2 = cuda().f("cuGetProcAddress_v2");
    let name = CString::new(sym).expect("name");
    let mut p: *mut c_void = std::ptr::dangling_mut::<c_void>();
    let mut st = 99u32;
    // SAFETY: valid strings and out-pointers.
    let r = unsafe { f(name.as_ptr(), &mut p, version, flags, &mut st) };
    (r, p, st)
}

fn expect(sym: &str, version: c_int, flags: u64, export: &str) {
    let (r, p, st) = get(sym, version, flags);
    assert_eq!((r, st), (SUCCESS, 0), "{sym} @ {version}");
    assert_eq!(
        p,
        cuda().raw(export),
        "{sym} @ {version} flags {flags} should be {export}"
    );
}

#[test]
fn versions_select_the_variant() {
    let _g = serial();
    expect("cuMemAlloc", 3010, 0, "cuMemAlloc");
    expect("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
    expect("cuMemAlloc", 12090, 0, "cuMemAlloc_v2");
    expect("cuCtxCreate", 11040, 0, "cuCtxCreate_v3");
    expect("cuCtxCreate", 12050, 0, "cuCtxCreate_v4");
    expect("cuCtxCreate", 12000, 0, "cuCtxCreate_v3");
    expect("cuStreamBeginCapture", 10000, 0, "cuStreamBeginCapture");
    expect("cuStreamBeginCapture", 10010, 0, "cuStreamBeginCapture_v2");
    expect("cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2");
    expect(
        "cuGraphInstantiate",
        12000,
        0,
        "cuGraphInstantiateWithFlags",
    );
    expect("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    expect("cuEventDestroy", 4000, 0, "cuEventDestroy_v2");
    expect("cuLaunchKernel", 12000, LEGACY, "cuLaunchKernel");
}

#[test]
fn per_thread_flag_selects_ptsz_variants() {
    let _g = serial();
    expect("cuLaunchKernel", 12000, PER_THREAD, "cuLaunchKernel_ptsz");
    expect("cuLaunchKernel", 12000, 0, "cuLaunchKernel");
    expect(
        "cuStreamSynchronize",
        12000,
        PER_THREAD,
        "cuStreamSynchronize_ptsz",
    );
    expect(
        "cuStreamBeginCapture",
        12000,
        PER_THREAD,
        "cuStreamBeginCapture_v2_ptsz",
    );
    expect("cuEventRecord", 12000, PER_THREAD, "cuEventRecord_ptsz");
    // No per-thread variant before CUDA 7.0, none ever for cuStreamCreate: legacy answers.
    expect("cuLaunchKernel", 6050, PER_THREAD, "cuLaunchKernel");
    expect("cuStreamCreate", 12000, PER_THREAD, "cuStreamCreate");
    // Both flags: legacy.
    expect(
        "cuLaunchKernel",
        12000,
        PER_THREAD | LEGACY,
        "cuLaunchKernel",
    );
}

#[test]
fn failures_and_statuses() {
    let _g = serial();
    let (r, p, st) = get("cuDefinitelyNotAFunction", 12000, 0);
    assert_eq!((r, p.is_null(), st), (NOT_FOUND, true, 1));
    let (r, p, st) = get("cuMemAlloc_v2", 12000, 0);
    assert_eq!(
        (r, p.is_null(), st),
        (NOT_FOUND, true, 1),
        "suffixed names are not symbols"
    );
    let (r, p, st) = get("cuLaunchKernelEx", 11040, 0);
    assert_eq!(
        (r, p.is_null(), st),
        (NOT_FOUND, true, 2),
        "version too old"
    );
    let (r, _, _) = get("cuMemAlloc", 12000, 8);
    assert_eq!(r, INVALID_VALUE, "unknown flag bits");
    let f: V2 = cuda().f("cuGetProcAddress_v2");
    let mut p = std::ptr::null_mut();
    // SAFETY: null symbol is rejected by the driver; status may be null.
    unsafe {
        assert_eq!(
            f(std::ptr::null(), &mut p, 12000, 0, std::ptr::null_mut()),
            INVALID_VALUE
        );
        assert_eq!(
            f(
                c"cuInit".as_ptr(),
                std::ptr::null_mut(),
                12000,
                0,
                std::ptr::null_mut()
            ),
            INVALID_VALUE
        );
        assert_eq!(
            f(c"cuInit".as_ptr(), &mut p, 12000, 0, std::ptr::null_mut()),
            SUCCESS
        );
    }
    assert_eq!(p, cuda().raw("cuInit"));
}

#[test]
fn v1_entry_point_and_calling_through_the_pointer() {
    let _g = serial();
    init();
    let v1: V1 = cuda().f("cuGetProcAddress");
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid strings and out-pointers.
    let r = unsafe { v1(c"cuStreamQuery".as_ptr(), &mut p, 11030, 0) };
    assert_eq!(r, SUCCESS);
    assert!(!p.is_null());
    // SAFETY: cuStreamQuery's signature.
    let q: unsafe extern "C" fn(Handle) -> CUresult = unsafe { std::mem::transmute(p) };
    // SAFETY: the bogus handle is validated by the driver.
    assert_eq!(unsafe { q(0xbad0_usize as Handle) }, INVALID_HANDLE);
    // SAFETY: legacy default stream of the current context.
    assert_eq!(unsafe { q(std::ptr::null_mut()) }, SUCCESS);
    // SAFETY: as above.
    let r = unsafe { v1(c"cuNope".as_ptr(), &mut p, 12000, 0) };
    assert_eq!(r, NOT_FOUND);
    assert!(p.is_null());
}

#[test]
fn every_table_symbol_the_simulator_exports_resolves_to_itself() {
    let _g = serial();
    // For each export of a few core entry points, resolving at the variant's own version gives
    // the library's own definition of that export.
    for (sym, ver, export) in [
        ("cuStreamCreate", 2000, "cuStreamCreate"),
        ("cuStreamDestroy", 2000, "cuStreamDestroy"),
        ("cuStreamDestroy", 4000, "cuStreamDestroy_v2"),
        ("cuModuleGetGlobal", 3020, "cuModuleGetGlobal_v2"),
        ("cuGraphAddKernelNode", 10000, "cuGraphAddKernelNode"),
        ("cuGraphAddKernelNode", 12000, "cuGraphAddKernelNode_v2"),
        ("cuEventElapsedTime", 12080, "cuEventElapsedTime_v2"),
        ("cuLaunchKernelEx", 11060, "cuLaunchKernelEx"),
    ] {
        expect(sym, ver, 0, export);
    }
}

#[test]
fn export_table_is_not_simulated() {
    let _g = serial();
    let f: unsafe extern "C" fn(*mut *const c_void, *const [u8; 16]) -> CUresult =
        cuda().f("cuGetExportTable");
    let id = [0u8; 16];
    let mut t: *const c_void = std::ptr::dangling::<c_void>();
    // SAFETY: valid out-pointer and id.
    assert_eq!(unsafe { f(&mut t, &id) }, NOT_FOUND);
    assert!(t.is_null());
}

#[test]
fn every_implemented_variant_is_reachable_at_its_version() {
    let _g = serial();
    // The default simulator is a 12.8 driver: variants of later versions are out of its reach
    // (tests/cuda13.rs checks them on a 13.0 one).
    let implemented = every_variant_reachable(12080);
    assert!(
        implemented > 250,
        "only {implemented} table variants are exported"
    );
}

/// The default simulator is a 12.8 driver (`GPUSLICE_SIM_DRIVER_VERSION` unset): asked for
/// `cudaVersion` 13000 it answers with its own newest variants, as a real 12.8 driver does.
#[test]
fn a_12_8_driver_caps_cuda_version_at_its_own() {
    let _g = serial();
    expect("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize");
    expect("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice");
    expect("cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
    let (r, p, st) = get("cuMemGetMemPool", 13000, 0);
    assert_eq!((r, p, st), (NOT_FOUND, std::ptr::null_mut(), 2));
}
