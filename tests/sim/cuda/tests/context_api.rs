//! Primary and created contexts, the per-thread context stack, and the context overhead charged
//! to the ground truth.

mod child_support;
#[allow(unused_imports)]
use child_support::*;

use std::ffi::{c_int, c_uint};

type Ctx = *mut u8;
type FnInit = unsafe extern "C" fn(u32) -> u32;
type FnCreate = unsafe extern "C" fn(*mut Ctx, c_uint, c_int) -> u32;
type FnCtx = unsafe extern "C" fn(Ctx) -> u32;
type FnCtxOut = unsafe extern "C" fn(*mut Ctx) -> u32;
type FnDevOut = unsafe extern "C" fn(*mut c_int) -> u32;
type FnInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> u32;
type FnRetain = unsafe extern "C" fn(*mut Ctx, c_int) -> u32;
type FnDev = unsafe extern "C" fn(c_int) -> u32;
type FnState = unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> u32;
type FnAlloc = unsafe extern "C" fn(*mut u64, usize) -> u32;
type FnVoid = unsafe extern "C" fn() -> u32;

const DEV: &str = "name=Test GPU,mem=1Gi,sms=8,cc=9.0";

struct Api {
    init: FnInit,
    create: FnCreate,
    destroy: FnCtx,
    push: FnCtx,
    pop: FnCtxOut,
    set: FnCtx,
    get: FnCtxOut,
    device: FnDevOut,
    info: FnInfo,
    retain: FnRetain,
    release: FnDev,
    reset: FnDev,
    state: FnState,
    alloc: FnAlloc,
    sync: FnVoid,
}

fn api(lib: &Lib) -> Api {
    // SAFETY: every symbol is looked up with its C signature.
    unsafe {
        Api {
            init: lib.sym("cuInit"),
            create: lib.sym("cuCtxCreate_v2"),
            destroy: lib.sym("cuCtxDestroy_v2"),
            push: lib.sym("cuCtxPushCurrent_v2"),
            pop: lib.sym("cuCtxPopCurrent_v2"),
            set: lib.sym("cuCtxSetCurrent"),
            get: lib.sym("cuCtxGetCurrent"),
            device: lib.sym("cuCtxGetDevice"),
            info: lib.sym("cuMemGetInfo_v2"),
            retain: lib.sym("cuDevicePrimaryCtxRetain"),
            release: lib.sym("cuDevicePrimaryCtxRelease_v2"),
            reset: lib.sym("cuDevicePrimaryCtxReset_v2"),
            state: lib.sym("cuDevicePrimaryCtxGetState"),
            alloc: lib.sym("cuMemAlloc_v2"),
            sync: lib.sym("cuCtxSynchronize"),
        }
    }
}

/// Free bytes seen from the current context.
fn free(a: &Api) -> u64 {
    let (mut f, mut t) = (0usize, 0usize);
    // SAFETY: live out-pointers.
    assert_eq!(unsafe { (a.info)(&mut f, &mut t) }, SUCCESS);
    assert_eq!(t as u64, 1024 * MI);
    f as u64
}

#[test]
fn created_contexts_and_the_stack() {
    if in_child(
        "created_contexts_and_the_stack",
        &[
            ("GPUSLICE_SIM_DEVICES", DEV),
            ("GPUSLICE_SIM_CTX_OVERHEAD", "64Mi"),
        ],
    ) {
        return;
    }
    let lib = Lib::open();
    let a = api(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        assert_eq!((a.init)(0), SUCCESS);
        let mut cur: Ctx = std::ptr::null_mut();
        assert_eq!((a.get)(&mut cur), SUCCESS);
        assert!(cur.is_null());
        let mut d: c_int = -1;
        assert_eq!((a.device)(&mut d), INVALID_CONTEXT);
        assert_eq!((a.sync)(), INVALID_CONTEXT);
        let mut c1: Ctx = std::ptr::null_mut();
        assert_eq!((a.create)(&mut c1, 0x100, 0), INVALID_VALUE, "unknown flag");
        assert_eq!((a.create)(&mut c1, 0, 3), INVALID_DEVICE);
        assert_eq!((a.create)(std::ptr::null_mut(), 0, 0), INVALID_VALUE);
        assert_eq!((a.create)(&mut c1, 0, 0), SUCCESS);
        assert_eq!((a.get)(&mut cur), SUCCESS);
        assert_eq!(cur, c1, "a created context becomes current");
        assert_eq!((a.device)(&mut d), SUCCESS);
        assert_eq!(d, 0);
        assert_eq!(free(&a), 1024 * MI - 64 * MI, "context overhead charged");
        assert_eq!((a.sync)(), SUCCESS);

        let mut c2: Ctx = std::ptr::null_mut();
        assert_eq!((a.create)(&mut c2, 0, 0), SUCCESS);
        assert_ne!(c1, c2);
        assert_eq!(free(&a), 1024 * MI - 128 * MI);
        let mut popped: Ctx = std::ptr::null_mut();
        assert_eq!((a.pop)(&mut popped), SUCCESS);
        assert_eq!(popped, c2);
        assert_eq!((a.get)(&mut cur), SUCCESS);
        assert_eq!(cur, c1);
        assert_eq!((a.push)(c2), SUCCESS);
        assert_eq!((a.get)(&mut cur), SUCCESS);
        assert_eq!(cur, c2);

        // Destroying the current context pops it and returns its overhead and allocations.
        let mut p = 0u64;
        assert_eq!((a.alloc)(&mut p, (100 * MI) as usize), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 128 * MI - 100 * MI);
        assert_eq!((a.destroy)(c2), SUCCESS);
        assert_eq!((a.get)(&mut cur), SUCCESS);
        assert_eq!(cur, c1);
        assert_eq!(free(&a), 1024 * MI - 64 * MI);
        assert_eq!((a.destroy)(c2), INVALID_CONTEXT, "already destroyed");
        let pushed = (a.push)(c2);
        assert!(pushed == INVALID_CONTEXT || pushed == CONTEXT_IS_DESTROYED);

        // A destroyed context still current on another thread reports CONTEXT_IS_DESTROYED.
        let c1_addr = c1 as usize;
        let dev_fn = a.device;
        let set_fn = a.set;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tx2, rx2) = std::sync::mpsc::channel::<u32>();
        let t = std::thread::spawn(move || {
            assert_eq!(set_fn(c1_addr as Ctx), SUCCESS);
            let _ = rx.recv();
            let mut d: c_int = -1;
            let _ = tx2.send(dev_fn(&mut d));
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!((a.destroy)(c1), SUCCESS);
        let _ = tx.send(());
        assert_eq!(rx2.recv().ok(), Some(CONTEXT_IS_DESTROYED));
        assert!(t.join().is_ok());
        let mut popped: Ctx = std::ptr::null_mut();
        assert_eq!((a.pop)(&mut popped), INVALID_CONTEXT, "stack is empty");
    }
}

#[test]
fn primary_context_retain_release_reset() {
    if in_child(
        "primary_context_retain_release_reset",
        &[
            ("GPUSLICE_SIM_DEVICES", DEV),
            ("GPUSLICE_SIM_CTX_OVERHEAD", "64Mi"),
        ],
    ) {
        return;
    }
    let lib = Lib::open();
    let a = api(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        assert_eq!((a.init)(0), SUCCESS);
        let (mut flags, mut active) = (0u32, -1);
        assert_eq!((a.state)(0, &mut flags, &mut active), SUCCESS);
        assert_eq!(active, 0);
        assert_eq!((a.release)(0), INVALID_CONTEXT, "not retained");
        let (mut p1, mut p2): (Ctx, Ctx) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!((a.retain)(&mut p1, 0), SUCCESS);
        assert_eq!((a.retain)(&mut p2, 0), SUCCESS);
        assert_eq!(p1, p2, "one primary context per device");
        assert_eq!((a.retain)(&mut p2, 4), INVALID_DEVICE);
        assert_eq!((a.state)(0, &mut flags, &mut active), SUCCESS);
        assert_eq!(active, 1);
        assert_eq!((a.set)(p1), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 64 * MI, "overhead charged once");
        assert_eq!((a.release)(0), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 64 * MI, "still retained once");
        let mut p = 0u64;
        assert_eq!((a.alloc)(&mut p, (10 * MI) as usize), SUCCESS);
        assert_eq!((a.release)(0), SUCCESS);
        assert_eq!((a.state)(0, &mut flags, &mut active), SUCCESS);
        assert_eq!(active, 0);
        let mut d: c_int = -1;
        assert_eq!((a.device)(&mut d), CONTEXT_IS_DESTROYED);
        // Retaining again revives the same handle, and the thread's binding follows it; the
        // previous incarnation's memory and overhead were returned.
        assert_eq!((a.retain)(&mut p2, 0), SUCCESS);
        assert_eq!(p1, p2);
        assert_eq!((a.device)(&mut d), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 64 * MI);
        assert_eq!((a.alloc)(&mut p, (10 * MI) as usize), SUCCESS);
        assert_eq!((a.reset)(0), SUCCESS);
        assert_eq!((a.state)(0, &mut flags, &mut active), SUCCESS);
        assert_eq!(active, 0);
        assert_eq!((a.retain)(&mut p2, 0), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 64 * MI, "reset freed everything");
        assert_eq!(
            (a.destroy)(p2),
            INVALID_CONTEXT,
            "primary cannot be destroyed"
        );
    }
}

type FnLoad = unsafe extern "C" fn(*mut *mut u8, *const u8) -> u32;
type FnGetFn = unsafe extern "C" fn(*mut *mut u8, *mut u8, *const std::ffi::c_char) -> u32;
type FnUnload = unsafe extern "C" fn(*mut u8) -> u32;
type U = c_uint;
type Args = *mut *mut std::ffi::c_void;
/// `cuLaunchKernel`: function, grid, block, shared bytes, stream, parameters, extra.
type FnLaunch = unsafe extern "C" fn(*mut u8, U, U, U, U, U, U, U, *mut u8, Args, Args) -> u32;

/// Lazy module loading as the real driver does it (issue 32): the context grows when a module's
/// kernel is first launched, outside any allocation; later launches cost nothing; unloading the
/// module (or destroying the context) gives it back; a load that does not fit fails the launch.
#[test]
fn first_launch_of_a_module_grows_the_context() {
    if in_child(
        "first_launch_of_a_module_grows_the_context",
        &[
            ("GPUSLICE_SIM_DEVICES", DEV),
            ("GPUSLICE_SIM_CTX_OVERHEAD", "100Mi"),
            ("GPUSLICE_SIM_MODULE_OVERHEAD", "40Mi"),
        ],
    ) {
        return;
    }
    let lib = Lib::open();
    let a = api(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals; the image is a
    // non-null byte string (the simulator does not parse images).
    unsafe {
        let load: FnLoad = lib.sym("cuModuleLoadData");
        let get_fn: FnGetFn = lib.sym("cuModuleGetFunction");
        let unload: FnUnload = lib.sym("cuModuleUnload");
        let launch: FnLaunch = lib.sym("cuLaunchKernel");
        assert_eq!((a.init)(0), SUCCESS);
        let mut c: Ctx = std::ptr::null_mut();
        assert_eq!((a.create)(&mut c, 0, 0), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 100 * MI);
        let run = |m: *mut u8| {
            let mut f: *mut u8 = std::ptr::null_mut();
            assert_eq!(get_fn(&mut f, m, c"noop".as_ptr()), SUCCESS);
            let null = std::ptr::null_mut();
            let r = launch(f, 1, 1, 1, 1, 1, 1, 0, null, null.cast(), null.cast());
            (r, (a.sync)())
        };
        let mut m1: *mut u8 = std::ptr::null_mut();
        assert_eq!(load(&mut m1, c"image".as_ptr().cast()), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 100 * MI, "loading is lazy");
        assert_eq!(run(m1), (SUCCESS, SUCCESS));
        assert_eq!(free(&a), 1024 * MI - 140 * MI, "the first launch loads it");
        assert_eq!(run(m1), (SUCCESS, SUCCESS));
        assert_eq!(free(&a), 1024 * MI - 140 * MI, "once");
        let mut m2: *mut u8 = std::ptr::null_mut();
        assert_eq!(load(&mut m2, c"image".as_ptr().cast()), SUCCESS);
        assert_eq!(run(m2), (SUCCESS, SUCCESS));
        assert_eq!(free(&a), 1024 * MI - 180 * MI, "each module once");
        assert_eq!(unload(m1), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 140 * MI, "unloading gives it back");
        // Fill the device but 20 MiB: a new module's lazy load no longer fits.
        let mut p = 0u64;
        let rest = free(&a) - 20 * MI;
        assert_eq!((a.alloc)(&mut p, rest as usize), SUCCESS);
        let mut m3: *mut u8 = std::ptr::null_mut();
        assert_eq!(load(&mut m3, c"image".as_ptr().cast()), SUCCESS);
        assert_eq!(run(m3).0, OUT_OF_MEMORY);
        assert_eq!(free(&a), 20 * MI, "a failed load holds nothing");
        assert_eq!((a.destroy)(c), SUCCESS);
        let mut c2: Ctx = std::ptr::null_mut();
        assert_eq!((a.create)(&mut c2, 0, 0), SUCCESS);
        assert_eq!(
            free(&a),
            1024 * MI - 100 * MI,
            "a destroyed context's modules are gone"
        );
    }
}

type FnSetLimit = unsafe extern "C" fn(u32, usize) -> u32;
type FnGetLimit = unsafe extern "C" fn(*mut usize, u32) -> u32;

/// A larger stack limit reserves local memory for every resident thread at once, as the real
/// driver does (issue 32's probe: 64 KiB of stack grew an H200 process by 16.6 GiB): here
/// 8 SMs × 2 048 threads × the growth; a lower limit keeps it, destroying the context returns it.
#[test]
fn a_larger_stack_grows_the_context() {
    if in_child(
        "a_larger_stack_grows_the_context",
        &[
            ("GPUSLICE_SIM_DEVICES", DEV),
            ("GPUSLICE_SIM_CTX_OVERHEAD", "0"),
            ("GPUSLICE_SIM_MODULE_OVERHEAD", "0"),
        ],
    ) {
        return;
    }
    let lib = Lib::open();
    let a = api(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let set: FnSetLimit = lib.sym("cuCtxSetLimit");
        let get: FnGetLimit = lib.sym("cuCtxGetLimit");
        assert_eq!((a.init)(0), SUCCESS);
        let mut c: Ctx = std::ptr::null_mut();
        assert_eq!((a.create)(&mut c, 0, 0), SUCCESS);
        let mut v = 0usize;
        assert_eq!(get(&mut v, 0), SUCCESS);
        assert_eq!(v, 1024, "the driver's default stack");
        assert_eq!(set(0, 2048), SUCCESS);
        assert_eq!(free(&a), 1024 * MI - 16 * MI, "1 KiB more × 16 384 threads");
        assert_eq!(get(&mut v, 0), SUCCESS);
        assert_eq!(v, 2048);
        assert_eq!(set(0, 1024), SUCCESS);
        assert_eq!(set(0, 2048), SUCCESS);
        assert_eq!(
            free(&a),
            1024 * MI - 16 * MI,
            "lower then back: nothing more"
        );
        assert_eq!(
            set(0, 1 << 20),
            OUT_OF_MEMORY,
            "16 GiB of stack on a 1 GiB device"
        );
        assert_eq!(free(&a), 1024 * MI - 16 * MI);
        assert_eq!((a.destroy)(c), SUCCESS);
        assert_eq!((a.create)(&mut c, 0, 0), SUCCESS);
        assert_eq!(free(&a), 1024 * MI, "the stack went with its context");
    }
}
