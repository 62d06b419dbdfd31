//! CUDA Graphs: explicit construction, instantiate / launch, stream capture, graph memory.

mod exec_support;

use std::ffi::{c_uint, c_void};
use std::sync::Mutex;
use std::time::Instant;

use exec_support::*;

#[repr(C)]
struct KernelParamsV2 {
    func: Handle,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    smem: c_uint,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    kern: Handle,
    ctx: Handle,
}

#[repr(C)]
struct HostParams {
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
}

type AddKernelFn = unsafe extern "C" fn(
    *mut Handle,
    Handle,
    *const Handle,
    usize,
    *const KernelParamsV2,
) -> CUresult;
type AddHostFn =
    unsafe extern "C" fn(*mut Handle, Handle, *const Handle, usize, *const HostParams) -> CUresult;
type InstFn = unsafe extern "C" fn(*mut Handle, Handle, u64) -> CUresult;
type LaunchGraphFn = unsafe extern "C" fn(Handle, Handle) -> CUresult;

static HITS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

unsafe extern "C" fn hit(data: *mut c_void) {
    HITS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(data as usize);
}

#[test]
fn explicit_graph_runs_its_kernels_each_launch() {
    let _g = serial();
    init();
    let c = cuda();
    let create: unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult = c.f("cuGraphCreate");
    let add_kernel: AddKernelFn = c.f("cuGraphAddKernelNode_v2");
    let add_host: AddHostFn = c.f("cuGraphAddHostNode");
    let add_empty: unsafe extern "C" fn(*mut Handle, Handle, *const Handle, usize) -> CUresult =
        c.f("cuGraphAddEmptyNode");
    let inst: InstFn = c.f("cuGraphInstantiateWithFlags");
    let launch: LaunchGraphFn = c.f("cuGraphLaunch");
    let exec_destroy: unsafe extern "C" fn(Handle) -> CUresult = c.f("cuGraphExecDestroy");
    let destroy: unsafe extern "C" fn(Handle) -> CUresult = c.f("cuGraphDestroy");
    let f = spin_function();
    let s = stream(0);
    HITS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let mut us = 10_000u64;
    let mut params = [(&mut us as *mut u64).cast::<c_void>()];
    let kp = KernelParamsV2 {
        func: f,
        grid: [1, 1, 1],
        block: [64, 1, 1],
        smem: 0,
        params: params.as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };
    let null = std::ptr::null_mut();
    let (mut g, mut k1, mut k2, mut k3, mut h, mut e, mut x) =
        (null, null, null, null, null, null, null);
    // SAFETY: valid out-pointers, parameter structs and dependency arrays.
    unsafe {
        assert_eq!(create(&mut g, 0), SUCCESS);
        assert_eq!(add_kernel(&mut k1, g, std::ptr::null(), 0, &kp), SUCCESS);
        assert_eq!(add_kernel(&mut k2, g, &k1, 1, &kp), SUCCESS);
        assert_eq!(add_kernel(&mut k3, g, &k1, 1, &kp), SUCCESS);
        let deps = [k2, k3];
        assert_eq!(add_empty(&mut e, g, deps.as_ptr(), 2), SUCCESS);
        let hp = HostParams {
            f: Some(hit),
            data: 42usize as *mut c_void,
        };
        assert_eq!(add_host(&mut h, g, &e, 1, &hp), SUCCESS);
        let bogus = 0x77usize as Handle;
        assert_eq!(add_empty(&mut e, g, &bogus, 1), INVALID_VALUE);
        assert_eq!(inst(&mut x, g, 0), SUCCESS);
    }
    // Params are copied at add time: changing the argument afterwards has no effect.
    // SAFETY: `params[0]` points at `us`, which is alive and not otherwise borrowed.
    unsafe { params[0].cast::<u64>().write(1) };
    for _ in 0..2 {
        let t = Instant::now();
        // SAFETY: valid exec and stream.
        assert_eq!(unsafe { launch(x, s) }, SUCCESS);
        assert!(ms_since(t) < 20.0, "graph launch must not block");
        assert_eq!(query(s), NOT_READY);
        assert_eq!(sync(s), SUCCESS);
        let ms = ms_since(t);
        assert!(
            (27.0..200.0).contains(&ms),
            "three 10 ms kernel nodes took {ms:.1} ms"
        );
    }
    assert_eq!(
        *HITS.lock().unwrap_or_else(|p| p.into_inner()),
        vec![42, 42]
    );
    // SAFETY: valid and then stale handles.
    unsafe {
        assert_eq!(exec_destroy(x), SUCCESS);
        assert_eq!(launch(x, s), INVALID_VALUE);
        assert_eq!(destroy(g), SUCCESS);
        assert_eq!(destroy(g), INVALID_VALUE);
    }
}

#[test]
fn stream_capture_records_instead_of_running() {
    let _g = serial();
    init();
    let c = cuda();
    let begin: unsafe extern "C" fn(Handle, c_uint) -> CUresult = c.f("cuStreamBeginCapture_v2");
    let end: unsafe extern "C" fn(Handle, *mut Handle) -> CUresult = c.f("cuStreamEndCapture");
    let is_cap: unsafe extern "C" fn(Handle, *mut c_uint) -> CUresult = c.f("cuStreamIsCapturing");
    let inst: InstFn = c.f("cuGraphInstantiateWithFlags");
    let launch: LaunchGraphFn = c.f("cuGraphLaunch");
    let host: unsafe extern "C" fn(
        Handle,
        Option<unsafe extern "C" fn(*mut c_void)>,
        *mut c_void,
    ) -> CUresult = c.f("cuLaunchHostFunc");
    let f = spin_function();
    let s = stream(1);
    HITS.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let (mut g, mut x) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mut st = 9;
    // SAFETY: valid handles and out-pointers.
    unsafe {
        assert_eq!(
            begin(1usize as Handle, 0),
            STREAM_CAPTURE_UNSUPPORTED,
            "legacy stream"
        );
        assert_eq!(end(s, &mut g), ILLEGAL_STATE);
        assert_eq!(begin(s, 0), SUCCESS);
        assert_eq!(begin(s, 0), ILLEGAL_STATE);
        assert_eq!(is_cap(s, &mut st), SUCCESS);
        assert_eq!(st, 1);
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(launch_spin(f, s, 10_000), SUCCESS);
        }
        assert_eq!(host(s, Some(hit), 7usize as *mut c_void), SUCCESS);
        assert!(ms_since(t) < 5.0);
        assert!(
            HITS.lock().unwrap_or_else(|p| p.into_inner()).is_empty(),
            "captured work must not run"
        );
        assert_eq!(end(s, &mut g), SUCCESS);
        assert!(!g.is_null());
        assert_eq!(is_cap(s, &mut st), SUCCESS);
        assert_eq!(st, 0);
        assert_eq!(inst(&mut x, g, 0), SUCCESS);
        let t = Instant::now();
        assert_eq!(launch(x, s), SUCCESS);
        assert_eq!(sync(s), SUCCESS);
        let ms = ms_since(t);
        assert!(
            (27.0..200.0).contains(&ms),
            "captured graph took {ms:.1} ms"
        );
        assert_eq!(*HITS.lock().unwrap_or_else(|p| p.into_inner()), vec![7]);

        // Synchronising a capturing stream is not allowed and invalidates the capture.
        assert_eq!(begin(s, 0), SUCCESS);
        assert_eq!(sync(s), STREAM_CAPTURE_UNSUPPORTED);
        assert_eq!(end(s, &mut g), STREAM_CAPTURE_INVALIDATED);
        assert!(g.is_null());
    }
}

#[repr(C)]
struct MemAllocParams {
    alloc_type: c_uint,
    handle_types: c_uint,
    loc_type: c_uint,
    loc_id: i32,
    win32: *mut c_void,
    max_size: usize,
    usage: u16,
    reserved: [u8; 54],
    access: *const c_void,
    access_count: usize,
    bytesize: usize,
    dptr: u64,
}

#[test]
fn graph_memory_is_charged_while_live() {
    let _g = serial();
    init();
    let c = cuda();
    let create: unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult = c.f("cuGraphCreate");
    let add_alloc: unsafe extern "C" fn(
        *mut Handle,
        Handle,
        *const Handle,
        usize,
        *mut MemAllocParams,
    ) -> CUresult = c.f("cuGraphAddMemAllocNode");
    let add_free: unsafe extern "C" fn(*mut Handle, Handle, *const Handle, usize, u64) -> CUresult =
        c.f("cuGraphAddMemFreeNode");
    let inst: InstFn = c.f("cuGraphInstantiateWithFlags");
    let launch: LaunchGraphFn = c.f("cuGraphLaunch");
    let info: unsafe extern "C" fn(*mut usize, *mut usize) -> CUresult = c.f("cuMemGetInfo_v2");
    assert_eq!(std::mem::size_of::<MemAllocParams>(), 120);
    let s = stream(0);
    let mut p = MemAllocParams {
        alloc_type: 1,
        handle_types: 0,
        loc_type: 1,
        loc_id: 0,
        win32: std::ptr::null_mut(),
        max_size: 0,
        usage: 0,
        reserved: [0; 54],
        access: std::ptr::null(),
        access_count: 0,
        bytesize: 1 << 30,
        dptr: 0,
    };
    let null = std::ptr::null_mut();
    let (mut g1, mut g2, mut a, mut fr, mut x1, mut x2) = (null, null, null, null, null, null);
    let (mut free0, mut free1, mut free2, mut total) = (0usize, 0usize, 0usize, 0usize);
    // SAFETY: valid out-pointers and parameter structs.
    unsafe {
        assert_eq!(create(&mut g1, 0), SUCCESS);
        assert_eq!(add_alloc(&mut a, g1, std::ptr::null(), 0, &mut p), SUCCESS);
        assert_ne!(p.dptr, 0, "address fixed at add time");
        assert_eq!(
            add_free(&mut fr, g1, std::ptr::null(), 0, 0x1234),
            INVALID_VALUE
        );
        assert_eq!(create(&mut g2, 0), SUCCESS);
        assert_eq!(add_free(&mut fr, g2, std::ptr::null(), 0, p.dptr), SUCCESS);
        assert_eq!(inst(&mut x1, g1, 0), SUCCESS);
        assert_eq!(inst(&mut x2, g2, 0), SUCCESS);
        assert_eq!(info(&mut free0, &mut total), SUCCESS);
        assert_eq!(launch(x1, s), SUCCESS);
        assert_eq!(sync(s), SUCCESS);
        assert_eq!(info(&mut free1, &mut total), SUCCESS);
        assert_eq!(launch(x1, s), INVALID_VALUE, "allocation still live");
        assert_eq!(launch(x2, s), SUCCESS);
        assert_eq!(sync(s), SUCCESS);
        assert_eq!(info(&mut free2, &mut total), SUCCESS);
    }
    assert!(
        free0 - free1 >= 1 << 30,
        "graph allocation charged: {free0} → {free1}"
    );
    assert_eq!(free2, free0, "graph free node returned it");
}
