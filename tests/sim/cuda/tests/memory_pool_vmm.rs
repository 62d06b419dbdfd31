//! Stream-ordered pools (reserved vs used, release threshold, trim, limits) and virtual memory
//! management (create charges once, mapping does not charge, release + unmap returns memory).

mod child_support;
#[allow(unused_imports)]
use child_support::*;

use std::ffi::{c_int, c_uint, c_void};

type Ctx = *mut u8;
type Pool = *mut u8;
type FnInit = unsafe extern "C" fn(u32) -> u32;
type FnCreate = unsafe extern "C" fn(*mut Ctx, c_uint, c_int) -> u32;
type FnInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> u32;

const DEV: &str = "name=Test GPU,mem=1Gi,sms=8,cc=9.0";
const ENV: &[(&str, &str)] = &[
    ("GPUSLICE_SIM_DEVICES", DEV),
    ("GPUSLICE_SIM_CTX_OVERHEAD", "0"),
];

const RELEASE_THRESHOLD: u32 = 4;
const RESERVED_CURRENT: u32 = 5;
const RESERVED_HIGH: u32 = 6;
const USED_CURRENT: u32 = 7;
const USED_HIGH: u32 = 8;

fn setup(lib: &Lib) -> FnInfo {
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let init: FnInit = lib.sym("cuInit");
        let create: FnCreate = lib.sym("cuCtxCreate_v2");
        assert_eq!(init(0), SUCCESS);
        let mut c: Ctx = std::ptr::null_mut();
        assert_eq!(create(&mut c, 0, 0), SUCCESS);
        lib.sym("cuMemGetInfo_v2")
    }
}

fn used(info: FnInfo) -> u64 {
    let (mut f, mut t) = (0usize, 0usize);
    // SAFETY: live out-pointers.
    assert_eq!(unsafe { info(&mut f, &mut t) }, SUCCESS);
    (t - f) as u64
}

#[test]
fn pools_reserve_release_and_trim() {
    if in_child("pools_reserve_release_and_trim", ENV) {
        return;
    }
    let lib = Lib::open();
    let info = setup(&lib);
    // SAFETY: symbols with their C signatures; out-pointers and attribute values are live locals.
    unsafe {
        let get_pool: unsafe extern "C" fn(*mut Pool, c_int) -> u32 =
            lib.sym("cuDeviceGetDefaultMemPool");
        let cur_pool: unsafe extern "C" fn(*mut Pool, c_int) -> u32 = lib.sym("cuDeviceGetMemPool");
        let alloc: unsafe extern "C" fn(*mut u64, usize, *mut u8) -> u32 =
            lib.sym("cuMemAllocAsync");
        let free: unsafe extern "C" fn(u64, *mut u8) -> u32 = lib.sym("cuMemFreeAsync");
        let get_attr: unsafe extern "C" fn(Pool, u32, *mut c_void) -> u32 =
            lib.sym("cuMemPoolGetAttribute");
        let set_attr: unsafe extern "C" fn(Pool, u32, *mut c_void) -> u32 =
            lib.sym("cuMemPoolSetAttribute");
        let trim: unsafe extern "C" fn(Pool, usize) -> u32 = lib.sym("cuMemPoolTrimTo");
        let sync: unsafe extern "C" fn() -> u32 = lib.sym("cuCtxSynchronize");
        let destroy: unsafe extern "C" fn(Pool) -> u32 = lib.sym("cuMemPoolDestroy");
        let attr = |pool: Pool, a: u32| {
            let mut v = 0u64;
            assert_eq!(get_attr(pool, a, (&mut v as *mut u64).cast()), SUCCESS);
            v
        };

        let (mut pool, mut pool2): (Pool, Pool) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(get_pool(&mut pool, 0), SUCCESS);
        assert_eq!(cur_pool(&mut pool2, 0), SUCCESS);
        assert_eq!(pool, pool2, "the default pool is current");
        assert_eq!(attr(pool, RESERVED_CURRENT), 0);

        let mut p = 0u64;
        assert_eq!(alloc(&mut p, (MI) as usize, std::ptr::null_mut()), SUCCESS);
        assert_eq!(attr(pool, USED_CURRENT), MI);
        assert_eq!(attr(pool, RESERVED_CURRENT), 2 * MI);
        assert_eq!(used(info), 2 * MI, "the device sees the reserved memory");
        assert_eq!(free(p, std::ptr::null_mut()), SUCCESS);
        assert_eq!(free(p, std::ptr::null_mut()), INVALID_VALUE, "double free");
        assert_eq!(sync(), SUCCESS);
        assert_eq!(attr(pool, USED_CURRENT), 0);
        assert_eq!(
            attr(pool, RESERVED_CURRENT),
            0,
            "threshold 0: released at synchronize"
        );
        assert_eq!(used(info), 0);
        assert_eq!(attr(pool, RESERVED_HIGH), 2 * MI);
        assert_eq!(attr(pool, USED_HIGH), MI);

        // A release threshold keeps freed memory reserved until trimmed.
        let mut threshold = 64 * MI;
        assert_eq!(
            set_attr(pool, RELEASE_THRESHOLD, (&mut threshold as *mut u64).cast()),
            SUCCESS
        );
        assert_eq!(attr(pool, RELEASE_THRESHOLD), 64 * MI);
        assert_eq!(
            alloc(&mut p, (10 * MI) as usize, std::ptr::null_mut()),
            SUCCESS
        );
        assert_eq!(used(info), 10 * MI);
        assert_eq!(free(p, std::ptr::null_mut()), SUCCESS);
        assert_eq!(sync(), SUCCESS);
        assert_eq!(attr(pool, USED_CURRENT), 0);
        assert_eq!(attr(pool, RESERVED_CURRENT), 10 * MI);
        assert_eq!(used(info), 10 * MI, "kept below the threshold");
        let mut q = 0u64;
        assert_eq!(
            alloc(&mut q, (8 * MI) as usize, std::ptr::null_mut()),
            SUCCESS
        );
        assert_eq!(
            attr(pool, RESERVED_CURRENT),
            10 * MI,
            "reused without growing"
        );
        assert_eq!(trim(pool, 0), SUCCESS);
        assert_eq!(
            attr(pool, RESERVED_CURRENT),
            8 * MI,
            "trim keeps what is in use"
        );
        assert_eq!(free(q, std::ptr::null_mut()), SUCCESS);
        assert_eq!(sync(), SUCCESS);
        assert_eq!(trim(pool, 0), SUCCESS);
        assert_eq!(attr(pool, RESERVED_CURRENT), 0);
        assert_eq!(used(info), 0);
        let mut five = 5u64;
        assert_eq!(
            set_attr(pool, RESERVED_HIGH, (&mut five as *mut u64).cast()),
            INVALID_VALUE
        );
        let mut zero = 0u64;
        assert_eq!(
            set_attr(pool, RESERVED_HIGH, (&mut zero as *mut u64).cast()),
            SUCCESS
        );
        assert_eq!(attr(pool, RESERVED_HIGH), 0);
        assert_eq!(
            destroy(pool),
            INVALID_VALUE,
            "the default pool cannot be destroyed"
        );

        // An explicit pool with a maximum size.
        #[repr(C)]
        struct Props {
            alloc_type: u32,
            handle_types: u32,
            loc_type: u32,
            loc_id: c_int,
            win32: *mut c_void,
            max_size: usize,
            usage: u16,
            reserved: [u8; 54],
        }
        let props = Props {
            alloc_type: 1,
            handle_types: 0,
            loc_type: 1,
            loc_id: 0,
            win32: std::ptr::null_mut(),
            max_size: (4 * MI) as usize,
            usage: 0,
            reserved: [0; 54],
        };
        let create: unsafe extern "C" fn(*mut Pool, *const Props) -> u32 =
            lib.sym("cuMemPoolCreate");
        let from_pool: unsafe extern "C" fn(*mut u64, usize, Pool, *mut u8) -> u32 =
            lib.sym("cuMemAllocFromPoolAsync");
        let mut mine: Pool = std::ptr::null_mut();
        assert_eq!(create(&mut mine, &props), SUCCESS);
        assert_ne!(mine, pool);
        assert_eq!(
            from_pool(&mut p, (3 * MI) as usize, mine, std::ptr::null_mut()),
            SUCCESS
        );
        assert_eq!(
            from_pool(&mut q, (3 * MI) as usize, mine, std::ptr::null_mut()),
            OUT_OF_MEMORY
        );
        assert_eq!(used(info), 4 * MI);
        assert_eq!(destroy(mine), SUCCESS);
        assert_eq!(used(info), 0, "destroying the pool returns its memory");
        let bad = Props { loc_id: 3, ..props };
        assert_eq!(create(&mut mine, &bad), INVALID_VALUE);
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Prop {
    alloc_type: u32,
    handle_types: u32,
    loc_type: u32,
    loc_id: c_int,
    win32: *mut c_void,
    comp: u8,
    rdma: u8,
    usage: u16,
    reserved: [u8; 4],
}

#[repr(C)]
struct Access {
    loc_type: u32,
    loc_id: c_int,
    flags: u32,
}

fn prop(handle_types: u32) -> Prop {
    Prop {
        alloc_type: 1,
        handle_types,
        loc_type: 1,
        loc_id: 0,
        win32: std::ptr::null_mut(),
        comp: 0,
        rdma: 0,
        usage: 0,
        reserved: [0; 4],
    }
}

#[test]
fn vmm_charges_physical_memory_once() {
    if in_child("vmm_charges_physical_memory_once", ENV) {
        return;
    }
    let lib = Lib::open();
    let info = setup(&lib);
    // SAFETY: symbols with their C signatures; property structs and out-pointers are live locals.
    unsafe {
        let gran: unsafe extern "C" fn(*mut usize, *const Prop, u32) -> u32 =
            lib.sym("cuMemGetAllocationGranularity");
        let create: unsafe extern "C" fn(*mut u64, usize, *const Prop, u64) -> u32 =
            lib.sym("cuMemCreate");
        let release: unsafe extern "C" fn(u64) -> u32 = lib.sym("cuMemRelease");
        let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> u32 =
            lib.sym("cuMemAddressReserve");
        let addr_free: unsafe extern "C" fn(u64, usize) -> u32 = lib.sym("cuMemAddressFree");
        let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> u32 = lib.sym("cuMemMap");
        let unmap: unsafe extern "C" fn(u64, usize) -> u32 = lib.sym("cuMemUnmap");
        let set_access: unsafe extern "C" fn(u64, usize, *const Access, usize) -> u32 =
            lib.sym("cuMemSetAccess");
        let get_access: unsafe extern "C" fn(*mut u64, *const [u32; 2], u64) -> u32 =
            lib.sym("cuMemGetAccess");
        let retain: unsafe extern "C" fn(*mut u64, *mut c_void) -> u32 =
            lib.sym("cuMemRetainAllocationHandle");
        let export: unsafe extern "C" fn(*mut c_void, u64, u32, u64) -> u32 =
            lib.sym("cuMemExportToShareableHandle");
        let import: unsafe extern "C" fn(*mut u64, *mut c_void, u32) -> u32 =
            lib.sym("cuMemImportFromShareableHandle");

        let p = prop(1);
        let (mut min, mut rec) = (0usize, 0usize);
        assert_eq!(gran(&mut min, &p, 0), SUCCESS);
        assert_eq!(gran(&mut rec, &p, 1), SUCCESS);
        assert_eq!((min as u64, rec as u64), (2 * MI, 2 * MI));
        let bad = Prop { loc_id: 9, ..p };
        assert_eq!(gran(&mut min, &bad, 0), INVALID_DEVICE);

        let mut h = 0u64;
        assert_eq!(
            create(&mut h, (3 * MI) as usize, &p, 0),
            INVALID_VALUE,
            "not a granularity multiple"
        );
        assert_eq!(used(info), 0);
        assert_eq!(create(&mut h, (4 * MI) as usize, &p, 0), SUCCESS);
        assert_eq!(used(info), 4 * MI);

        let mut va = 0u64;
        assert_eq!(reserve(&mut va, (3 * MI) as usize, 0, 0, 0), INVALID_VALUE);
        assert_eq!(reserve(&mut va, (8 * MI) as usize, 0, 0, 0), SUCCESS);
        assert_eq!(map(va, (4 * MI) as usize, 0, h, 0), SUCCESS);
        assert_eq!(map(va, (2 * MI) as usize, 0, h, 0), ALREADY_MAPPED);
        assert_eq!(
            map(va + 4 * MI, (4 * MI) as usize, 0, h, 0),
            SUCCESS,
            "the same memory twice"
        );
        assert_eq!(
            map(va + 8 * MI, (2 * MI) as usize, 0, h, 0),
            INVALID_VALUE,
            "outside the reservation"
        );
        assert_eq!(used(info), 4 * MI, "mapping charges nothing");

        let acc = Access {
            loc_type: 1,
            loc_id: 0,
            flags: 3,
        };
        assert_eq!(set_access(va, (8 * MI) as usize, &acc, 1), SUCCESS);
        let mut flags = 0u64;
        assert_eq!(get_access(&mut flags, &[1, 0], va + 100), SUCCESS);
        assert_eq!(flags, 3);

        let mut h2 = 0u64;
        assert_eq!(retain(&mut h2, (va + 5 * MI) as *mut c_void), SUCCESS);
        assert_eq!(h2, h);
        assert_eq!(release(h2), SUCCESS);

        // Export to a file descriptor; importing it in the exporting process is another
        // reference to the same memory and charges nothing.
        let mut fd: c_int = -1;
        assert_eq!(export((&mut fd as *mut c_int).cast(), h, 1, 0), SUCCESS);
        assert!(fd >= 0);
        let mut imported = 0u64;
        assert_eq!(
            import(&mut imported, fd as usize as *mut c_void, 1),
            SUCCESS
        );
        assert_eq!(used(info), 4 * MI);
        assert_eq!(release(imported), SUCCESS);
        libc::close(fd);

        assert_eq!(release(h), SUCCESS);
        assert_eq!(used(info), 4 * MI, "still mapped: not freed yet");
        assert_eq!(map(va, (2 * MI) as usize, 0, h, 0), ALREADY_MAPPED);
        assert_eq!(unmap(va, (4 * MI) as usize), SUCCESS);
        assert_eq!(used(info), 4 * MI, "one mapping left");
        assert_eq!(
            addr_free(va, (8 * MI) as usize),
            INVALID_VALUE,
            "still mapped"
        );
        assert_eq!(unmap(va + 4 * MI, (4 * MI) as usize), SUCCESS);
        assert_eq!(used(info), 0, "released and unmapped: freed");
        assert_eq!(
            map(va, (2 * MI) as usize, 0, h, 0),
            INVALID_VALUE,
            "handle is gone"
        );
        assert_eq!(addr_free(va, (8 * MI) as usize), SUCCESS);

        // A handle without an exportable type cannot be exported.
        let np = prop(0);
        assert_eq!(create(&mut h, (2 * MI) as usize, &np, 0), SUCCESS);
        assert_eq!(
            export((&mut fd as *mut c_int).cast(), h, 1, 0),
            INVALID_VALUE
        );
        assert_eq!(release(h), SUCCESS);
        assert_eq!(used(info), 0);
    }
}

/// Every synchronization point releases what a pool holds above its threshold, as the real
/// driver does: `cuStreamSynchronize` and `cuEventSynchronize`, not only `cuCtxSynchronize`.
#[test]
fn stream_and_event_synchronize_release_pool_memory() {
    if in_child("stream_and_event_synchronize_release_pool_memory", ENV) {
        return;
    }
    let lib = Lib::open();
    let info = setup(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals; the stream and
    // event are created here and used only while alive.
    unsafe {
        let alloc: unsafe extern "C" fn(*mut u64, usize, *mut u8) -> u32 =
            lib.sym("cuMemAllocAsync");
        let free: unsafe extern "C" fn(u64, *mut u8) -> u32 = lib.sym("cuMemFreeAsync");
        let stream_create: unsafe extern "C" fn(*mut *mut u8, c_uint) -> u32 =
            lib.sym("cuStreamCreate");
        let stream_sync: unsafe extern "C" fn(*mut u8) -> u32 = lib.sym("cuStreamSynchronize");
        let event_create: unsafe extern "C" fn(*mut *mut u8, c_uint) -> u32 =
            lib.sym("cuEventCreate");
        let event_record: unsafe extern "C" fn(*mut u8, *mut u8) -> u32 = lib.sym("cuEventRecord");
        let event_sync: unsafe extern "C" fn(*mut u8) -> u32 = lib.sym("cuEventSynchronize");
        let mut s: *mut u8 = std::ptr::null_mut();
        assert_eq!(stream_create(&mut s, 0), SUCCESS);

        let mut p = 0u64;
        assert_eq!(alloc(&mut p, (8 * MI) as usize, s), SUCCESS);
        assert!(used(info) >= 8 * MI);
        assert_eq!(free(p, s), SUCCESS);
        assert_eq!(stream_sync(s), SUCCESS);
        assert_eq!(
            used(info),
            0,
            "cuStreamSynchronize releases the pool's memory"
        );

        let mut e: *mut u8 = std::ptr::null_mut();
        assert_eq!(event_create(&mut e, 0), SUCCESS);
        assert_eq!(alloc(&mut p, (8 * MI) as usize, s), SUCCESS);
        assert!(used(info) >= 8 * MI);
        assert_eq!(free(p, s), SUCCESS);
        assert_eq!(event_record(e, s), SUCCESS);
        assert_eq!(event_sync(e), SUCCESS);
        assert_eq!(
            used(info),
            0,
            "cuEventSynchronize releases the pool's memory"
        );
    }
}
