//! Device memory accounting (granularity rounding, totals, OOM exactly at capacity), pitch,
//! managed and host allocations, copies and memsets, address ranges, pointer attributes, arrays.

mod child_support;
#[allow(unused_imports)]
use child_support::*;

use std::ffi::{c_int, c_uint, c_void};

type Ctx = *mut u8;
type FnInit = unsafe extern "C" fn(u32) -> u32;
type FnCreate = unsafe extern "C" fn(*mut Ctx, c_uint, c_int) -> u32;
type FnInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> u32;
type FnAlloc = unsafe extern "C" fn(*mut u64, usize) -> u32;
type FnFree = unsafe extern "C" fn(u64) -> u32;

const DEV: &str = "name=Test GPU,mem=1Gi,sms=8,cc=9.0";
const ENV: &[(&str, &str)] = &[
    ("GPUSLICE_SIM_DEVICES", DEV),
    ("GPUSLICE_SIM_CTX_OVERHEAD", "0"),
];

struct Api {
    info: FnInfo,
    alloc: FnAlloc,
    free: FnFree,
}

fn setup(lib: &Lib) -> Api {
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let init: FnInit = lib.sym("cuInit");
        let create: FnCreate = lib.sym("cuCtxCreate_v2");
        assert_eq!(init(0), SUCCESS);
        let mut c: Ctx = std::ptr::null_mut();
        assert_eq!(create(&mut c, 0, 0), SUCCESS);
        Api {
            info: lib.sym("cuMemGetInfo_v2"),
            alloc: lib.sym("cuMemAlloc_v2"),
            free: lib.sym("cuMemFree_v2"),
        }
    }
}

fn free_bytes(a: &Api) -> u64 {
    let (mut f, mut t) = (0usize, 0usize);
    // SAFETY: live out-pointers.
    assert_eq!(unsafe { (a.info)(&mut f, &mut t) }, SUCCESS);
    f as u64
}

#[test]
fn totals_agree_and_allocations_round_to_granularity() {
    if in_child("totals_agree_and_allocations_round_to_granularity", ENV) {
        return;
    }
    let lib = Lib::open();
    let a = setup(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let total_fn: unsafe extern "C" fn(*mut usize, c_int) -> u32 =
            lib.sym("cuDeviceTotalMem_v2");
        let mut total = 0usize;
        assert_eq!(total_fn(&mut total, 0), SUCCESS);
        let (mut f, mut t) = (0usize, 0usize);
        assert_eq!((a.info)(&mut f, &mut t), SUCCESS);
        assert_eq!(t, total);
        assert_eq!(
            f, total,
            "nothing used yet (no context overhead configured)"
        );
        assert_eq!((a.info)(std::ptr::null_mut(), &mut t), INVALID_VALUE);
        let info32: unsafe extern "C" fn(*mut u32, *mut u32) -> u32 = lib.sym("cuMemGetInfo");
        let (mut f32, mut t32) = (0u32, 0u32);
        assert_eq!(info32(&mut f32, &mut t32), SUCCESS);
        assert_eq!(u64::from(t32), 1024 * MI);

        let (mut p1, mut p2) = (0u64, 0u64);
        assert_eq!((a.alloc)(&mut p1, 1), SUCCESS);
        assert_eq!(
            free_bytes(&a),
            1024 * MI - 2 * MI,
            "1 byte costs one 2 MiB granule"
        );
        assert_eq!((a.alloc)(&mut p2, (3 * MI) as usize), SUCCESS);
        assert_eq!(free_bytes(&a), 1024 * MI - 6 * MI);
        assert_ne!(p1, 0);
        assert_ne!(p1, p2);
        assert_eq!((a.alloc)(&mut p1, 0), INVALID_VALUE);
        assert_eq!((a.alloc)(std::ptr::null_mut(), 16), INVALID_VALUE);
        assert_eq!((a.free)(p2), SUCCESS);
        assert_eq!((a.free)(p2), INVALID_VALUE, "double free");
        assert_eq!((a.free)(p1 + 8), INVALID_VALUE, "not a base address");
        assert_eq!((a.free)(0), SUCCESS, "freeing null is a no-op");
        assert_eq!(free_bytes(&a), 1024 * MI - 2 * MI);

        // Legacy 32-bit entry points hand out 32-bit pointers.
        let alloc32: unsafe extern "C" fn(*mut u32, c_uint) -> u32 = lib.sym("cuMemAlloc");
        let free32: unsafe extern "C" fn(u32) -> u32 = lib.sym("cuMemFree");
        let mut p32 = 0u32;
        assert_eq!(alloc32(&mut p32, 4096), SUCCESS);
        assert_ne!(p32, 0);
        assert_eq!(free_bytes(&a), 1024 * MI - 4 * MI);
        assert_eq!(free32(p32), SUCCESS);

        // Pitch rounds to 512 bytes, managed memory counts on the device.
        let pitch_fn: unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, c_uint) -> u32 =
            lib.sym("cuMemAllocPitch_v2");
        let (mut pp, mut pitch) = (0u64, 0usize);
        assert_eq!(pitch_fn(&mut pp, &mut pitch, 1000, 10, 4), SUCCESS);
        assert_eq!(pitch, 1024);
        assert_eq!(pitch_fn(&mut pp, &mut pitch, 1000, 10, 3), INVALID_VALUE);
        let managed: unsafe extern "C" fn(*mut u64, usize, c_uint) -> u32 =
            lib.sym("cuMemAllocManaged");
        let before = free_bytes(&a);
        let mut pm = 0u64;
        assert_eq!(managed(&mut pm, (5 * MI) as usize, 1), SUCCESS);
        assert_eq!(free_bytes(&a), before - 6 * MI);
        assert_eq!(managed(&mut pm, 16, 7), INVALID_VALUE);

        // Address ranges and pointer attributes.
        let range: unsafe extern "C" fn(*mut u64, *mut usize, u64) -> u32 =
            lib.sym("cuMemGetAddressRange_v2");
        let (mut base, mut size) = (0u64, 0usize);
        assert_eq!(range(&mut base, &mut size, pp + 100), SUCCESS);
        assert_eq!((base, size), (pp, 10240));
        assert_eq!(
            range(&mut base, &mut size, 0x10),
            500,
            "CUDA_ERROR_NOT_FOUND"
        );
        let attr: unsafe extern "C" fn(*mut c_void, u32, u64) -> u32 =
            lib.sym("cuPointerGetAttribute");
        let mut mt: c_uint = 0;
        assert_eq!(attr((&mut mt as *mut c_uint).cast(), 2, pp), SUCCESS);
        assert_eq!(mt, 2, "CU_MEMORYTYPE_DEVICE");
        let mut managed_flag: c_uint = 9;
        assert_eq!(
            attr((&mut managed_flag as *mut c_uint).cast(), 8, pm),
            SUCCESS
        );
        assert_eq!(managed_flag, 1);
        let mut ordinal: c_int = -1;
        assert_eq!(attr((&mut ordinal as *mut c_int).cast(), 9, pp), SUCCESS);
        assert_eq!(ordinal, 0);
        assert_eq!(
            attr((&mut mt as *mut c_uint).cast(), 2, 0x10),
            INVALID_VALUE
        );
    }
}

#[test]
fn out_of_memory_exactly_at_capacity() {
    if in_child("out_of_memory_exactly_at_capacity", ENV) {
        return;
    }
    let lib = Lib::open();
    let a = setup(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let mut ptrs = Vec::new();
        loop {
            let mut p = 0u64;
            match (a.alloc)(&mut p, (2 * MI) as usize) {
                SUCCESS => ptrs.push(p),
                OUT_OF_MEMORY => break,
                other => panic!("unexpected result {other}"),
            }
            assert!(ptrs.len() <= 512, "allocated past capacity");
        }
        assert_eq!(ptrs.len(), 512, "1 GiB holds exactly 512 granules");
        assert_eq!(free_bytes(&a), 0);
        let mut p = 0u64;
        assert_eq!((a.alloc)(&mut p, 1), OUT_OF_MEMORY);
        assert_eq!((a.free)(ptrs[7]), SUCCESS);
        assert_eq!(
            (a.alloc)(&mut p, (2 * MI) as usize),
            SUCCESS,
            "freed space is reusable"
        );
        for (i, q) in ptrs.iter().enumerate() {
            if i != 7 {
                assert_eq!((a.free)(*q), SUCCESS);
            }
        }
        assert_eq!((a.free)(p), SUCCESS);
        assert_eq!(free_bytes(&a), 1024 * MI);
        assert_eq!((a.alloc)(&mut p, (1024 * MI + 1) as usize), OUT_OF_MEMORY);
        assert_eq!((a.alloc)(&mut p, (1024 * MI) as usize), SUCCESS);
    }
}

#[test]
fn host_memory_copies_and_memsets() {
    if in_child("host_memory_copies_and_memsets", ENV) {
        return;
    }
    let lib = Lib::open();
    let a = setup(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals; host buffers
    // outlive the calls that use them.
    unsafe {
        let host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> u32 =
            lib.sym("cuMemHostAlloc");
        let free_host: unsafe extern "C" fn(*mut c_void) -> u32 = lib.sym("cuMemFreeHost");
        let mut h: *mut c_void = std::ptr::null_mut();
        assert_eq!(host_alloc(&mut h, (4 * MI) as usize, 0), SUCCESS);
        assert!(!h.is_null());
        std::ptr::write_bytes(h.cast::<u8>(), 0xab, (4 * MI) as usize);
        assert_eq!(
            free_bytes(&a),
            1024 * MI,
            "host memory is not device memory"
        );
        let attr: unsafe extern "C" fn(*mut c_void, u32, u64) -> u32 =
            lib.sym("cuPointerGetAttribute");
        let mut mt: c_uint = 0;
        assert_eq!(
            attr((&mut mt as *mut c_uint).cast(), 2, h as u64 + 10),
            SUCCESS
        );
        assert_eq!(mt, 1, "CU_MEMORYTYPE_HOST");
        assert_eq!(host_alloc(&mut h, 16, 0x80), INVALID_VALUE);

        let mut d = 0u64;
        assert_eq!((a.alloc)(&mut d, 4096), SUCCESS);
        let htod: unsafe extern "C" fn(u64, *const c_void, usize) -> u32 =
            lib.sym("cuMemcpyHtoD_v2");
        let dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> u32 =
            lib.sym("cuMemcpyDtoH_v2_ptds");
        let buf = [0u8; 8192];
        assert_eq!(htod(d, buf.as_ptr().cast(), 4096), SUCCESS);
        assert_eq!(htod(d + 96, buf.as_ptr().cast(), 4000), SUCCESS);
        assert_eq!(
            htod(d, buf.as_ptr().cast(), 4097),
            INVALID_VALUE,
            "past the allocation"
        );
        assert_eq!(
            htod(0x1234, buf.as_ptr().cast(), 8),
            INVALID_VALUE,
            "not device memory"
        );
        assert_eq!(htod(d, std::ptr::null(), 8), INVALID_VALUE);
        let mut out = [0u8; 16];
        assert_eq!(dtoh(out.as_mut_ptr().cast(), d, 16), SUCCESS);
        let memset32: unsafe extern "C" fn(u64, u32, usize) -> u32 = lib.sym("cuMemsetD32_v2");
        assert_eq!(memset32(d, 7, 1024), SUCCESS);
        assert_eq!(memset32(d, 7, 1025), INVALID_VALUE);
        let memset_async: unsafe extern "C" fn(u64, u8, usize, *mut u8) -> u32 =
            lib.sym("cuMemsetD8Async");
        assert_eq!(memset_async(d, 1, 4096, std::ptr::null_mut()), SUCCESS);
        let htod_async: unsafe extern "C" fn(u64, *const c_void, usize, *mut u8) -> u32 =
            lib.sym("cuMemcpyHtoDAsync_v2");
        assert_eq!(
            htod_async(d, buf.as_ptr().cast(), 64, std::ptr::null_mut()),
            SUCCESS
        );
        assert_eq!(
            htod_async(d, buf.as_ptr().cast(), 64, 0xdead_0000 as *mut u8),
            INVALID_HANDLE
        );
        let sync: unsafe extern "C" fn() -> u32 = lib.sym("cuCtxSynchronize");
        assert_eq!(sync(), SUCCESS);

        assert_eq!(free_host(h), SUCCESS);
        assert_eq!(free_host(h), INVALID_VALUE, "double free of host memory");

        // Registering user memory.
        let register: unsafe extern "C" fn(*mut c_void, usize, c_uint) -> u32 =
            lib.sym("cuMemHostRegister_v2");
        let unregister: unsafe extern "C" fn(*mut c_void) -> u32 = lib.sym("cuMemHostUnregister");
        let mut user = vec![0u8; 8192];
        assert_eq!(register(user.as_mut_ptr().cast(), 8192, 0), SUCCESS);
        assert_eq!(
            register(user.as_mut_ptr().cast(), 8192, 0),
            712,
            "already registered"
        );
        assert_eq!(unregister(user.as_mut_ptr().cast()), SUCCESS);
        assert_eq!(unregister(user.as_mut_ptr().cast()), 713, "not registered");
    }
}

#[repr(C)]
#[derive(Default)]
struct Desc3d {
    width: usize,
    height: usize,
    depth: usize,
    format: u32,
    channels: u32,
    flags: u32,
}

#[test]
fn arrays_and_mipmapped_arrays_are_charged() {
    if in_child("arrays_and_mipmapped_arrays_are_charged", ENV) {
        return;
    }
    let lib = Lib::open();
    let a = setup(&lib);
    // SAFETY: symbols with their C signatures; descriptors and out-pointers are live locals.
    unsafe {
        let create3d: unsafe extern "C" fn(*mut *mut u8, *const Desc3d) -> u32 =
            lib.sym("cuArray3DCreate_v2");
        let get3d: unsafe extern "C" fn(*mut Desc3d, *mut u8) -> u32 =
            lib.sym("cuArray3DGetDescriptor_v2");
        let destroy: unsafe extern "C" fn(*mut u8) -> u32 = lib.sym("cuArrayDestroy");
        let d = Desc3d {
            width: 1024,
            height: 1024,
            format: 0x20,
            channels: 4,
            ..Default::default()
        };
        let mut arr: *mut u8 = std::ptr::null_mut();
        assert_eq!(create3d(&mut arr, &d), SUCCESS);
        assert_eq!(free_bytes(&a), 1024 * MI - 16 * MI, "1024x1024 float4");
        let mut back = Desc3d::default();
        assert_eq!(get3d(&mut back, arr), SUCCESS);
        assert_eq!(
            (back.width, back.height, back.format, back.channels),
            (1024, 1024, 0x20, 4)
        );
        let bad = Desc3d { channels: 3, ..d };
        let mut arr2: *mut u8 = std::ptr::null_mut();
        assert_eq!(create3d(&mut arr2, &bad), INVALID_VALUE);
        assert_eq!(destroy(arr), SUCCESS);
        assert_eq!(destroy(arr), INVALID_HANDLE);
        assert_eq!(free_bytes(&a), 1024 * MI);

        let mip_create: unsafe extern "C" fn(*mut *mut u8, *const Desc3d, c_uint) -> u32 =
            lib.sym("cuMipmappedArrayCreate");
        let mip_level: unsafe extern "C" fn(*mut *mut u8, *mut u8, c_uint) -> u32 =
            lib.sym("cuMipmappedArrayGetLevel");
        let mip_destroy: unsafe extern "C" fn(*mut u8) -> u32 = lib.sym("cuMipmappedArrayDestroy");
        let md = Desc3d {
            width: 1024,
            height: 1024,
            format: 0x20,
            channels: 1,
            ..Default::default()
        };
        let mut mip: *mut u8 = std::ptr::null_mut();
        assert_eq!(
            mip_create(&mut mip, &md, 12),
            INVALID_VALUE,
            "1024 has 11 levels"
        );
        assert_eq!(mip_create(&mut mip, &md, 11), SUCCESS);
        let bytes: u64 = (0..11).map(|l| (1024u64 >> l).max(1).pow(2) * 4).sum();
        let charged = bytes.div_ceil(2 * MI) * 2 * MI;
        assert_eq!(
            free_bytes(&a),
            1024 * MI - charged,
            "all levels are charged"
        );
        let mut level: *mut u8 = std::ptr::null_mut();
        assert_eq!(mip_level(&mut level, mip, 3), SUCCESS);
        let mut ld = Desc3d::default();
        assert_eq!(get3d(&mut ld, level), SUCCESS);
        assert_eq!((ld.width, ld.height), (128, 128));
        assert_eq!(mip_level(&mut level, mip, 11), INVALID_VALUE);
        assert_eq!(mip_destroy(mip), SUCCESS);
        assert_eq!(free_bytes(&a), 1024 * MI);
    }
}
