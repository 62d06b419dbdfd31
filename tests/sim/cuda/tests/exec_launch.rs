//! Launches and modules: parameter passing (kernelParams and extra), dimension validation,
//! cuLaunchKernelEx attributes, cooperative limits, module / function errors.

mod exec_support;

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::time::Instant;

use exec_support::*;

const END: usize = 0;
const BUFFER_POINTER: usize = 1;
const BUFFER_SIZE: usize = 2;

#[test]
fn extra_buffer_parameters_and_spin_ns() {
    let _g = serial();
    init();
    let launch: LaunchFn = cuda().f("cuLaunchKernel");
    let f = spin_function();
    let s = stream(0);
    let mut buf = 15_000u64.to_ne_bytes();
    let mut size: usize = 8;
    let mut extra = [
        BUFFER_POINTER as *mut c_void,
        buf.as_mut_ptr().cast(),
        BUFFER_SIZE as *mut c_void,
        (&mut size as *mut usize).cast(),
        END as *mut c_void,
    ];
    let t = Instant::now();
    // SAFETY: `extra` is a well-formed CU_LAUNCH_PARAM list over a live 8-byte buffer.
    let r = unsafe {
        launch(
            f,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s,
            std::ptr::null_mut(),
            extra.as_mut_ptr(),
        )
    };
    assert_eq!(r, SUCCESS);
    assert_eq!(sync(s), SUCCESS);
    let ms = ms_since(t);
    assert!(
        (13.0..100.0).contains(&ms),
        "15 ms spin via extra took {ms:.1} ms"
    );

    // A too-small buffer and both forms at once are rejected.
    // SAFETY: `extra[3]` points at `size`, alive and not otherwise borrowed.
    unsafe { extra[3].cast::<usize>().write(4) };
    let mut arg = 1u64;
    let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
    // SAFETY: as above; the driver validates sizes.
    unsafe {
        assert_eq!(
            launch(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s,
                std::ptr::null_mut(),
                extra.as_mut_ptr()
            ),
            INVALID_VALUE
        );
        assert_eq!(
            launch(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s,
                params.as_mut_ptr(),
                extra.as_mut_ptr()
            ),
            INVALID_VALUE
        );
        assert_eq!(
            launch(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s,
                std::ptr::null_mut(),
                std::ptr::null_mut()
            ),
            INVALID_VALUE
        );
    }

    let g = function("spin_ns");
    let mut ns = 12_000_000u64;
    let mut p = [(&mut ns as *mut u64).cast::<c_void>()];
    let t = Instant::now();
    // SAFETY: one pointer to the u64 parameter.
    let r = unsafe {
        launch(
            g,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s,
            p.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, SUCCESS);
    assert_eq!(sync(s), SUCCESS);
    assert!(ms_since(t) >= 11.0);
    // noop needs no parameters.
    let n = function("noop");
    // SAFETY: no parameters.
    let r = unsafe {
        launch(
            n,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, SUCCESS);
    assert_eq!(sync(s), SUCCESS);
}

#[test]
fn dimension_and_shared_memory_validation() {
    let _g = serial();
    init();
    let c = cuda();
    let launch: LaunchFn = c.f("cuLaunchKernel");
    let set_attr: unsafe extern "C" fn(Handle, c_uint, c_int) -> CUresult =
        c.f("cuFuncSetAttribute");
    let get_attr: unsafe extern "C" fn(*mut c_int, c_uint, Handle) -> CUresult =
        c.f("cuFuncGetAttribute");
    let f = function("noop");
    let s = stream(0);
    let null = std::ptr::null_mut();
    // SAFETY: noop takes no parameters; the driver validates the shapes.
    unsafe {
        assert_eq!(launch(f, 0, 1, 1, 1, 1, 1, 0, s, null, null), INVALID_VALUE);
        assert_eq!(launch(f, 1, 1, 1, 0, 1, 1, 0, s, null, null), INVALID_VALUE);
        assert_eq!(
            launch(f, 1, 1, 1, 1025, 1, 1, 0, s, null, null),
            INVALID_VALUE
        );
        assert_eq!(
            launch(f, 1, 1, 1, 32, 32, 2, 0, s, null, null),
            INVALID_VALUE
        );
        assert_eq!(
            launch(f, 1, 65536, 1, 1, 1, 1, 0, s, null, null),
            INVALID_VALUE
        );
        assert_eq!(launch(f, 1, 1, 1, 32, 32, 1, 0, s, null, null), SUCCESS);
        assert_eq!(
            launch(f, 1, 1, 1, 1, 1, 1, 64 * 1024, s, null, null),
            INVALID_VALUE
        );
        assert_eq!(set_attr(f, 8, 100 * 1024), SUCCESS);
        let mut v = 0;
        assert_eq!(get_attr(&mut v, 8, f), SUCCESS);
        assert_eq!(v, 100 * 1024);
        assert_eq!(
            launch(f, 1, 1, 1, 1, 1, 1, 64 * 1024, s, null, null),
            SUCCESS
        );
        assert_eq!(set_attr(f, 8, 1 << 20), INVALID_VALUE);
        assert_eq!(
            set_attr(f, 0, 1),
            INVALID_VALUE,
            "MAX_THREADS_PER_BLOCK is read-only"
        );
        assert_eq!(get_attr(&mut v, 0, f), SUCCESS);
        assert_eq!(v, 1024);
        assert_eq!(get_attr(&mut v, 99, f), INVALID_VALUE);
        assert_eq!(
            launch(0x1234_usize as Handle, 1, 1, 1, 1, 1, 1, 0, s, null, null),
            INVALID_HANDLE
        );
    }
    assert_eq!(sync(s), SUCCESS);
}

#[repr(C)]
struct Attr {
    id: c_uint,
    pad: [u8; 4],
    value: [u8; 64],
}

#[repr(C)]
struct Config {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    smem: c_uint,
    stream: Handle,
    attrs: *mut Attr,
    num_attrs: c_uint,
}

#[test]
fn launch_kernel_ex_and_cooperative_limits() {
    let _g = serial();
    init();
    let c = cuda();
    let ex: unsafe extern "C" fn(
        *const Config,
        Handle,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CUresult = c.f("cuLaunchKernelEx");
    type CoopFn = unsafe extern "C" fn(
        Handle,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Handle,
        *mut *mut c_void,
    ) -> CUresult;
    let coop: CoopFn = c.f("cuLaunchCooperativeKernel");
    let f = spin_function();
    let s = stream(0);
    let mut arg = 5_000u64;
    let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
    let mut attrs = [
        Attr {
            id: 8,
            pad: [0; 4],
            value: [0; 64],
        },
        Attr {
            id: 2,
            pad: [0; 4],
            value: [0; 64],
        },
    ];
    attrs[0].value[..4].copy_from_slice(&(-3i32).to_ne_bytes());
    attrs[1].value[..4].copy_from_slice(&1i32.to_ne_bytes());
    let mut cfg = Config {
        grid: [132, 1, 1],
        block: [256, 1, 1],
        smem: 0,
        stream: s,
        attrs: attrs.as_mut_ptr(),
        num_attrs: 2,
    };
    let t = Instant::now();
    // SAFETY: valid config, attributes and parameters.
    unsafe {
        assert_eq!(
            ex(&cfg, f, params.as_mut_ptr(), std::ptr::null_mut()),
            SUCCESS
        );
        // Cooperative: 132 SMs × 8 blocks of 256 threads fit, one more block does not.
        cfg.grid = [132 * 8 + 1, 1, 1];
        assert_eq!(
            ex(&cfg, f, params.as_mut_ptr(), std::ptr::null_mut()),
            COOPERATIVE_LAUNCH_TOO_LARGE
        );
        assert_eq!(
            coop(f, 132 * 8, 1, 1, 256, 1, 1, 0, s, params.as_mut_ptr()),
            SUCCESS
        );
        assert_eq!(
            coop(f, 132 * 8 + 1, 1, 1, 256, 1, 1, 0, s, params.as_mut_ptr()),
            COOPERATIVE_LAUNCH_TOO_LARGE
        );
        cfg.num_attrs = 1;
        cfg.attrs = std::ptr::null_mut();
        assert_eq!(
            ex(&cfg, f, params.as_mut_ptr(), std::ptr::null_mut()),
            INVALID_VALUE
        );
        assert_eq!(
            ex(
                std::ptr::null(),
                f,
                params.as_mut_ptr(),
                std::ptr::null_mut()
            ),
            INVALID_VALUE
        );
    }
    assert_eq!(sync(s), SUCCESS);
    assert!(ms_since(t) >= 9.0, "two 5 ms kernels ran");
}

#[test]
fn module_errors() {
    let _g = serial();
    init();
    let c = cuda();
    let load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> CUresult =
        c.f("cuModuleLoadData");
    let load: unsafe extern "C" fn(*mut Handle, *const c_char) -> CUresult = c.f("cuModuleLoad");
    let get: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CUresult =
        c.f("cuModuleGetFunction");
    let unload: unsafe extern "C" fn(Handle) -> CUresult = c.f("cuModuleUnload");
    let mut m = std::ptr::null_mut();
    let mut f = std::ptr::null_mut();
    // SAFETY: driver calls with valid out-pointers and NUL-terminated strings.
    unsafe {
        assert_eq!(load_data(&mut m, std::ptr::null()), INVALID_VALUE);
        assert_eq!(
            load(&mut m, c"/nonexistent/k.cubin".as_ptr()),
            FILE_NOT_FOUND
        );
        assert_eq!(load_data(&mut m, c"image".as_ptr().cast()), SUCCESS);
        assert_eq!(get(&mut f, m, c"no_such_kernel".as_ptr()), NOT_FOUND);
        assert_eq!(get(&mut f, m, c"spin".as_ptr()), SUCCESS);
        let mut again = std::ptr::null_mut();
        assert_eq!(get(&mut again, m, c"spin".as_ptr()), SUCCESS);
        assert_eq!(f, again, "one handle per function");
        assert_eq!(unload(m), SUCCESS);
        assert_eq!(unload(m), INVALID_HANDLE);
        assert_eq!(get(&mut f, m, c"spin".as_ptr()), INVALID_HANDLE);
    }
    assert_eq!(
        launch_spin(f, std::ptr::null_mut(), 1),
        INVALID_HANDLE,
        "function of an unloaded module"
    );
}

#[test]
fn library_kernels() {
    let _g = serial();
    init();
    let c = cuda();
    type LoadFn = unsafe extern "C" fn(
        *mut Handle,
        *const c_void,
        *mut c_uint,
        *mut *mut c_void,
        c_uint,
        *mut c_uint,
        *mut *mut c_void,
        c_uint,
    ) -> CUresult;
    let load: LoadFn = c.f("cuLibraryLoadData");
    let get: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CUresult =
        c.f("cuLibraryGetKernel");
    let to_fn: unsafe extern "C" fn(*mut Handle, Handle) -> CUresult = c.f("cuKernelGetFunction");
    let (mut lib, mut k, mut f) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    let null: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointers; no options.
    unsafe {
        assert_eq!(
            load(
                &mut lib,
                c"img".as_ptr().cast(),
                null.cast(),
                null.cast(),
                0,
                null.cast(),
                null.cast(),
                0
            ),
            SUCCESS
        );
        assert_eq!(get(&mut k, lib, c"spin".as_ptr()), SUCCESS);
        assert_eq!(get(&mut k, lib, c"nope".as_ptr()), NOT_FOUND);
        assert_eq!(get(&mut k, lib, c"spin".as_ptr()), SUCCESS);
        assert_eq!(to_fn(&mut f, k), SUCCESS);
    }
    let s = stream(0);
    assert_eq!(launch_spin(f, s, 1000), SUCCESS);
    assert_eq!(
        launch_spin(k, s, 1000),
        SUCCESS,
        "a CUkernel launches as a CUfunction"
    );
    assert_eq!(sync(s), SUCCESS);
}

#[test]
fn no_current_context() {
    let _g = serial();
    init();
    let f = spin_function() as usize;
    let r = std::thread::spawn(move || {
        let create: unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult =
            cuda().f("cuStreamCreate");
        let mut s = std::ptr::null_mut();
        // SAFETY: valid out-pointer; this thread has no current context.
        let a = unsafe { create(&mut s, 0) };
        let b = launch_spin(f as Handle, std::ptr::null_mut(), 1);
        (a, b)
    })
    .join()
    .expect("thread");
    assert_eq!(r, (INVALID_CONTEXT, INVALID_CONTEXT));
}
