//! Device enumeration, attributes, versions, error strings and error codes of the simulated
//! driver, through `dlopen` / `dlsym` like an outside client.

mod child_support;
#[allow(unused_imports)]
use child_support::*;

use std::ffi::{c_char, c_int, CStr};

type FnInit = unsafe extern "C" fn(u32) -> u32;
type FnIntOut = unsafe extern "C" fn(*mut c_int) -> u32;
type FnDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> u32;
type FnName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> u32;
type FnTotal = unsafe extern "C" fn(*mut usize, c_int) -> u32;
type FnAttr = unsafe extern "C" fn(*mut c_int, u32, c_int) -> u32;
type FnUuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> u32;
type FnByPci = unsafe extern "C" fn(*mut c_int, *const c_char) -> u32;
type FnPeer = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> u32;
type FnErr = unsafe extern "C" fn(u32, *mut *const c_char) -> u32;
type FnCtxGet = unsafe extern "C" fn(*mut *mut u8) -> u32;
type FnAlloc = unsafe extern "C" fn(*mut u64, usize) -> u32;

const TWO: &str = "name=Test GPU,mem=1Gi,sms=8,cc=9.0;name=Other GPU,mem=2Gi,sms=4,cc=8.6";

fn name_of(lib: &Lib, dev: c_int) -> String {
    let mut buf = [0 as c_char; 64];
    // SAFETY: cuDeviceGetName's signature; the buffer holds 64 bytes.
    unsafe {
        let f: FnName = lib.sym("cuDeviceGetName");
        assert_eq!(f(buf.as_mut_ptr(), 64, dev), SUCCESS);
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    }
}

#[test]
fn errors_before_init_and_bad_arguments() {
    if in_child(
        "errors_before_init_and_bad_arguments",
        &[("GPUSLICE_SIM_DEVICES", TWO)],
    ) {
        return;
    }
    let lib = Lib::open();
    // SAFETY: every symbol is looked up with its C signature; out-pointers are live locals.
    unsafe {
        let init: FnInit = lib.sym("cuInit");
        let count: FnIntOut = lib.sym("cuDeviceGetCount");
        let version: FnIntOut = lib.sym("cuDriverGetVersion");
        let get: FnDeviceGet = lib.sym("cuDeviceGet");
        let ctx_get: FnCtxGet = lib.sym("cuCtxGetCurrent");
        let alloc: FnAlloc = lib.sym("cuMemAlloc_v2");
        let mut n: c_int = -1;
        assert_eq!(count(&mut n), NOT_INITIALIZED);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(ctx_get(&mut ctx), NOT_INITIALIZED);
        let mut p = 0u64;
        assert_eq!(alloc(&mut p, 1), NOT_INITIALIZED);
        let mut v: c_int = 0;
        assert_eq!(version(&mut v), SUCCESS, "works before cuInit");
        assert!(v >= 1000);
        assert_eq!(version(std::ptr::null_mut()), INVALID_VALUE);
        assert_eq!(init(1), INVALID_VALUE);
        assert_eq!(init(0), SUCCESS);
        assert_eq!(count(std::ptr::null_mut()), INVALID_VALUE);
        assert_eq!(count(&mut n), SUCCESS);
        assert_eq!(n, 2);
        let mut d: c_int = -1;
        assert_eq!(get(&mut d, 1), SUCCESS);
        assert_eq!(d, 1);
        assert_eq!(get(&mut d, 2), INVALID_DEVICE);
        assert_eq!(get(&mut d, -1), INVALID_DEVICE);
        assert_eq!(get(std::ptr::null_mut(), 0), INVALID_VALUE);
        assert_eq!(alloc(&mut p, 1), INVALID_CONTEXT, "no current context");
    }
}

#[test]
fn names_totals_attributes_pci_uuid() {
    if in_child(
        "names_totals_attributes_pci_uuid",
        &[("GPUSLICE_SIM_DEVICES", TWO)],
    ) {
        return;
    }
    let lib = Lib::open();
    // SAFETY: every symbol is looked up with its C signature; out-pointers are live locals.
    unsafe {
        let init: FnInit = lib.sym("cuInit");
        assert_eq!(init(0), SUCCESS);
        assert_eq!(name_of(&lib, 0), "Test GPU");
        assert_eq!(name_of(&lib, 1), "Other GPU");
        let total: FnTotal = lib.sym("cuDeviceTotalMem_v2");
        let mut t = 0usize;
        assert_eq!(total(&mut t, 0), SUCCESS);
        assert_eq!(t as u64, 1024 * MI);
        assert_eq!(total(&mut t, 1), SUCCESS);
        assert_eq!(t as u64, 2048 * MI);
        assert_eq!(total(&mut t, 5), INVALID_DEVICE);
        let total32: unsafe extern "C" fn(*mut u32, c_int) -> u32 = lib.sym("cuDeviceTotalMem");
        let mut t32 = 0u32;
        assert_eq!(total32(&mut t32, 0), SUCCESS);
        assert_eq!(u64::from(t32), 1024 * MI);

        let attr: FnAttr = lib.sym("cuDeviceGetAttribute");
        let mut v: c_int = 0;
        for (a, dev, want) in [
            (75, 0, 9),
            (76, 0, 0),
            (16, 0, 8),
            (75, 1, 8),
            (76, 1, 6),
            (16, 1, 4),
        ] {
            assert_eq!(attr(&mut v, a, dev), SUCCESS);
            assert_eq!(v, want, "attribute {a} of device {dev}");
        }
        // Managed memory, VMM, memory pools, unified addressing, concurrent kernels.
        for a in [83, 102, 115, 41, 31] {
            assert_eq!(attr(&mut v, a, 0), SUCCESS);
            assert_eq!(v, 1, "attribute {a}");
        }
        assert_eq!(attr(&mut v, 14, 0), SUCCESS);
        assert_eq!(v, 512, "texture alignment");
        assert_eq!(attr(&mut v, 9999, 0), INVALID_VALUE);
        assert_eq!(attr(std::ptr::null_mut(), 16, 0), INVALID_VALUE);
        assert_eq!(attr(&mut v, 16, 7), INVALID_DEVICE);

        let pci: FnName = lib.sym("cuDeviceGetPCIBusId");
        let by_pci: FnByPci = lib.sym("cuDeviceGetByPCIBusId");
        for dev in 0..2 {
            let mut buf = [0 as c_char; 32];
            assert_eq!(pci(buf.as_mut_ptr(), 32, dev), SUCCESS);
            let s = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            assert_eq!(s.len(), 12, "DDDD:BB:DD.F, got {s}");
            let mut back: c_int = -1;
            assert_eq!(by_pci(&mut back, buf.as_ptr()), SUCCESS);
            assert_eq!(back, dev);
        }
        let mut back: c_int = -1;
        assert_eq!(by_pci(&mut back, c"0000:ff:1f.7".as_ptr()), INVALID_DEVICE);

        let uuid: FnUuid = lib.sym("cuDeviceGetUuid_v2");
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        assert_eq!(uuid(&mut a, 0), SUCCESS);
        assert_eq!(uuid(&mut b, 1), SUCCESS);
        assert_ne!(a, [0u8; 16]);
        assert_ne!(a, b);
        let uuid1: FnUuid = lib.sym("cuDeviceGetUuid");
        let mut c = [0u8; 16];
        assert_eq!(uuid1(&mut c, 0), SUCCESS);
        assert_eq!(a, c);

        let peer: FnPeer = lib.sym("cuDeviceCanAccessPeer");
        let mut can: c_int = -1;
        assert_eq!(peer(&mut can, 0, 1), SUCCESS);
        assert_eq!(can, 1);
        assert_eq!(peer(&mut can, 0, 0), SUCCESS);
        assert_eq!(can, 0);
    }
}

#[test]
fn error_names_and_strings() {
    if in_child("error_names_and_strings", &[]) {
        return;
    }
    let lib = Lib::open();
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let name: FnErr = lib.sym("cuGetErrorName");
        let string: FnErr = lib.sym("cuGetErrorString");
        let mut p: *const c_char = std::ptr::null();
        assert_eq!(name(OUT_OF_MEMORY, &mut p), SUCCESS);
        assert_eq!(CStr::from_ptr(p).to_str(), Ok("CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(string(OUT_OF_MEMORY, &mut p), SUCCESS);
        assert_eq!(CStr::from_ptr(p).to_str(), Ok("out of memory"));
        assert_eq!(name(709, &mut p), SUCCESS);
        assert_eq!(
            CStr::from_ptr(p).to_str(),
            Ok("CUDA_ERROR_CONTEXT_IS_DESTROYED")
        );
        assert_eq!(name(12345, &mut p), INVALID_VALUE);
        assert!(p.is_null());
        assert_eq!(name(0, std::ptr::null_mut()), INVALID_VALUE);
    }
}

#[test]
fn cuda_visible_devices_reorders() {
    if in_child(
        "cuda_visible_devices_reorders",
        &[("GPUSLICE_SIM_DEVICES", TWO), ("CUDA_VISIBLE_DEVICES", "1")],
    ) {
        return;
    }
    let lib = Lib::open();
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let init: FnInit = lib.sym("cuInit");
        let count: FnIntOut = lib.sym("cuDeviceGetCount");
        assert_eq!(init(0), SUCCESS);
        let mut n: c_int = 0;
        assert_eq!(count(&mut n), SUCCESS);
        assert_eq!(n, 1);
    }
    assert_eq!(name_of(&lib, 0), "Other GPU");
}
