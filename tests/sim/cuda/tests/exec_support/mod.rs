//! Shared helpers of the exec_* / procaddr_* suites: load the built `libcuda.so` with `dlopen`
//! (from `target/<profile>/`, next to the test binary's `deps/` directory), give this test
//! process its own simulated node (`GPUSLICE_SIM_STATE` in a private temp dir, set before the
//! first driver call), look symbols up, and serialise the tests of one binary (they share one
//! device engine, and timing assertions must not see each other's kernels).

#![allow(dead_code)]

use std::ffi::{c_int, c_uint, c_void, CString};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

pub type CUresult = u32;
pub type Handle = *mut c_void;

pub const SUCCESS: CUresult = 0;
pub const INVALID_VALUE: CUresult = 1;
pub const INVALID_CONTEXT: CUresult = 201;
pub const FILE_NOT_FOUND: CUresult = 301;
pub const INVALID_HANDLE: CUresult = 400;
pub const ILLEGAL_STATE: CUresult = 401;
pub const NOT_FOUND: CUresult = 500;
pub const NOT_READY: CUresult = 600;
pub const COOPERATIVE_LAUNCH_TOO_LARGE: CUresult = 720;
pub const STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
pub const STREAM_CAPTURE_INVALIDATED: CUresult = 901;
pub const CAPTURED_EVENT: CUresult = 907;

/// The loaded library (the handle is process-global and never closed).
pub struct Cuda {
    handle: usize,
}

fn library_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> → target/<profile>/libcuda.so
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    profile_dir.join("libcuda.so")
}

/// The library, loaded once per process after pointing the simulator at a private state file.
pub fn cuda() -> &'static Cuda {
    static C: OnceLock<Cuda> = OnceLock::new();
    C.get_or_init(|| {
        // Under cargo's per-target scratch directory, so `cargo clean` removes it and /tmp does not
        // collect one directory per test process.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("gpuslice-sim-exec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::env::set_var("GPUSLICE_SIM_STATE", dir.join("state"));
        let path = library_path();
        let c = CString::new(path.to_str().expect("utf-8 path")).expect("path");
        // SAFETY: dlopen of the freshly built simulator library; it has no constructors that
        // need more than the environment set above.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(
            !h.is_null(),
            "dlopen {} failed: build it first (cargo build -p gpuslice-sim-cuda; cargo xtask test sim does)",
            path.display()
        );
        Cuda { handle: h as usize }
    })
}

impl Cuda {
    /// The raw address of an exported symbol, or null.
    pub fn raw(&self, name: &str) -> *mut c_void {
        let c = CString::new(name).expect("name");
        // SAFETY: live handle, NUL-terminated name.
        unsafe { libc::dlsym(self.handle as *mut c_void, c.as_ptr()) }
    }

    /// An exported function as `F` (a function-pointer type matching its C signature).
    pub fn f<F: Copy>(&self, name: &str) -> F {
        let p = self.raw(name);
        assert!(!p.is_null(), "symbol {name} missing");
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: `F` is a function-pointer type of the same size; the caller names the
        // symbol's real signature.
        unsafe { std::mem::transmute_copy(&p) }
    }
}

/// Serialises the tests of this binary.
pub fn serial() -> MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|p| p.into_inner())
}

/// Initialises the driver and makes the primary context of device 0 current on this thread.
pub fn init() -> Handle {
    let c = cuda();
    let cu_init: unsafe extern "C" fn(c_uint) -> CUresult = c.f("cuInit");
    let retain: unsafe extern "C" fn(*mut Handle, c_int) -> CUresult =
        c.f("cuDevicePrimaryCtxRetain");
    let set: unsafe extern "C" fn(Handle) -> CUresult = c.f("cuCtxSetCurrent");
    let mut ctx: Handle = std::ptr::null_mut();
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        assert_eq!(cu_init(0), SUCCESS);
        assert_eq!(retain(&mut ctx, 0), SUCCESS);
        assert_eq!(set(ctx), SUCCESS);
    }
    ctx
}

/// A module with the built-in kernels, and its `spin` function.
pub fn spin_function() -> Handle {
    function("spin")
}

/// Function `name` of a freshly loaded module.
pub fn function(name: &str) -> Handle {
    let c = cuda();
    let load: unsafe extern "C" fn(*mut Handle, *const c_void) -> CUresult =
        c.f("cuModuleLoadData");
    let get: unsafe extern "C" fn(*mut Handle, Handle, *const std::ffi::c_char) -> CUresult =
        c.f("cuModuleGetFunction");
    let image = b"// simulated image\0";
    let mut m: Handle = std::ptr::null_mut();
    let mut f: Handle = std::ptr::null_mut();
    let n = CString::new(name).expect("name");
    // SAFETY: valid out-pointers and NUL-terminated strings.
    unsafe {
        assert_eq!(load(&mut m, image.as_ptr().cast()), SUCCESS);
        assert_eq!(get(&mut f, m, n.as_ptr()), SUCCESS);
    }
    f
}

pub type LaunchFn = unsafe extern "C" fn(
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
    *mut *mut c_void,
) -> CUresult;

/// Launches `spin(us)` on `stream` with a 1×1 grid.
pub fn launch_spin(f: Handle, stream: Handle, us: u64) -> CUresult {
    let launch: LaunchFn = cuda().f("cuLaunchKernel");
    let mut arg = us;
    let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
    // SAFETY: kernelParams is an array of one pointer to the u64 parameter, alive for the call.
    unsafe {
        launch(
            f,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

/// Creates a stream with `flags`.
pub fn stream(flags: c_uint) -> Handle {
    let create: unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult = cuda().f("cuStreamCreate");
    let mut s: Handle = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { create(&mut s, flags) }, SUCCESS);
    s
}

/// `cuStreamSynchronize`.
pub fn sync(s: Handle) -> CUresult {
    let f: unsafe extern "C" fn(Handle) -> CUresult = cuda().f("cuStreamSynchronize");
    // SAFETY: plain driver call.
    unsafe { f(s) }
}

/// `cuStreamQuery`.
pub fn query(s: Handle) -> CUresult {
    let f: unsafe extern "C" fn(Handle) -> CUresult = cuda().f("cuStreamQuery");
    // SAFETY: plain driver call.
    unsafe { f(s) }
}

/// Milliseconds since `t`.
pub fn ms_since(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// `cuLaunchHostFunc(s, f, data)`.
pub fn host_fn(s: Handle, f: unsafe extern "C" fn(*mut c_void), data: *mut c_void) -> CUresult {
    type HostFn = unsafe extern "C" fn(
        Handle,
        Option<unsafe extern "C" fn(*mut c_void)>,
        *mut c_void,
    ) -> CUresult;
    let host: HostFn = cuda().f("cuLaunchHostFunc");
    // SAFETY: `f` is a valid host function; the simulator passes `data` through untouched.
    unsafe { host(s, Some(f), data) }
}

/// Every table variant up to `driver` (the advertised driver version) that the simulator
/// exports resolves to itself through `cuGetProcAddress_v2` at its own version and flavour.
/// Returns how many were checked.
pub fn every_variant_reachable(driver: u32) -> usize {
    use gpuslice_cuda_abi::procaddr::{Flavour, PROC_ADDR_TABLE};
    type V2 = unsafe extern "C" fn(
        *const std::ffi::c_char,
        *mut Handle,
        c_int,
        u64,
        *mut u32,
    ) -> CUresult;
    let gpa: V2 = cuda().f("cuGetProcAddress_v2");
    let mut checked = 0;
    for e in PROC_ADDR_TABLE.iter().filter(|e| e.version <= driver) {
        let want = cuda().raw(e.export);
        if want.is_null() {
            continue;
        }
        checked += 1;
        let flags = match e.flavour {
            Flavour::Legacy => 0,
            Flavour::PerThread => 2,
        };
        let name = CString::new(e.symbol).unwrap();
        let (mut p, mut st) = (std::ptr::null_mut(), 0);
        // SAFETY: valid strings and out-pointers.
        let r = unsafe { gpa(name.as_ptr(), &mut p, e.version as c_int, flags, &mut st) };
        assert_eq!(
            (r, st, p),
            (SUCCESS, 0, want),
            "{} @ {} → {}",
            e.symbol,
            e.version,
            e.export
        );
    }
    checked
}
