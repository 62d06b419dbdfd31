//! Return codes and in/out protocols of the C ABI, through dlopen/dlsym of the built library.

use std::ffi::{c_char, c_uint, c_void, CStr, CString};
use std::path::PathBuf;

fn lib_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("libnvidia_ml.so")
}

struct Lib(*mut c_void);

impl Lib {
    fn open() -> Lib {
        let p = CString::new(lib_path().to_string_lossy().into_owned()).expect("path");
        // SAFETY: valid C string; RTLD_NOW resolves everything up front.
        let h = unsafe { libc::dlopen(p.as_ptr(), libc::RTLD_NOW) };
        assert!(!h.is_null(), "dlopen {}", lib_path().display());
        Lib(h)
    }
    /// # Safety
    /// `T` must be the function pointer type of symbol `name`.
    unsafe fn sym<T: Copy>(&self, name: &str) -> T {
        let n = CString::new(name).expect("name");
        // SAFETY: live handle, valid C string.
        let p = unsafe { libc::dlsym(self.0, n.as_ptr()) };
        assert!(!p.is_null(), "missing export {name}");
        // SAFETY: caller guarantees T is a fn pointer of the right type (same size as a pointer).
        unsafe { std::mem::transmute_copy(&p) }
    }
}

type Dev = *const c_void;

#[repr(C)]
struct MemV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ProcInfo {
    pid: c_uint,
    used: u64,
    gi: c_uint,
    ci: c_uint,
}

#[test]
fn return_codes_and_protocols() {
    let state = std::env::temp_dir().join(format!(
        "gpuslice-sim-nvml-raw-{}.state",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&state);
    std::env::set_var("GPUSLICE_SIM_STATE", &state);
    std::env::set_var("GPUSLICE_SIM_DEVICES", "mem=8Gi");
    let lib = Lib::open();
    // SAFETY: every signature below is the nvml.h one.
    unsafe {
        let init: extern "C" fn() -> c_uint = lib.sym("nvmlInit_v2");
        let init_flags: extern "C" fn(c_uint) -> c_uint = lib.sym("nvmlInitWithFlags");
        let shutdown: extern "C" fn() -> c_uint = lib.sym("nvmlShutdown");
        let count: extern "C" fn(*mut c_uint) -> c_uint = lib.sym("nvmlDeviceGetCount_v2");
        let by_index: extern "C" fn(c_uint, *mut Dev) -> c_uint =
            lib.sym("nvmlDeviceGetHandleByIndex_v2");
        let name: extern "C" fn(Dev, *mut c_char, c_uint) -> c_uint = lib.sym("nvmlDeviceGetName");
        let mem2: extern "C" fn(Dev, *mut MemV2) -> c_uint = lib.sym("nvmlDeviceGetMemoryInfo_v2");
        let procs: extern "C" fn(Dev, *mut c_uint, *mut ProcInfo) -> c_uint =
            lib.sym("nvmlDeviceGetComputeRunningProcesses_v3");
        let errstr: extern "C" fn(c_uint) -> *const c_char = lib.sym("nvmlErrorString");

        let mut n: c_uint = 0;
        assert_eq!(
            count(&mut n),
            1,
            "uninitialised -> NVML_ERROR_UNINITIALIZED"
        );
        assert_eq!(init(), 0);
        assert_eq!(init_flags(0), 0);
        assert_eq!(count(&mut n), 0);
        assert_eq!(n, 1);
        assert_eq!(count(std::ptr::null_mut()), 2, "null -> INVALID_ARGUMENT");
        let mut d: Dev = std::ptr::null();
        assert_eq!(by_index(1, &mut d), 2, "index out of range");
        assert_eq!(by_index(0, &mut d), 0);
        let mut small = [0 as c_char; 4];
        assert_eq!(name(d, small.as_mut_ptr(), 4), 7, "INSUFFICIENT_SIZE");
        let mut buf = [0 as c_char; 96];
        assert_eq!(name(d, buf.as_mut_ptr(), 96), 0);
        assert_eq!(
            CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
            "NVIDIA H100 80GB HBM3"
        );
        let bogus = 0x1234usize as Dev;
        assert_eq!(
            name(bogus, buf.as_mut_ptr(), 96),
            2,
            "bad handle -> INVALID_ARGUMENT"
        );

        let mut m = MemV2 {
            version: 1,
            total: 0,
            reserved: 0,
            free: 0,
            used: 0,
        };
        assert_eq!(mem2(d, &mut m), 25, "ARGUMENT_VERSION_MISMATCH");
        m.version = std::mem::size_of::<MemV2>() as c_uint | (2 << 24);
        assert_eq!(mem2(d, &mut m), 0);
        assert_eq!(m.total, 8 << 30);
        assert_eq!(m.reserved, 0);
        assert_eq!(m.free + m.used, m.total);

        // the infoCount protocol: none -> SUCCESS with 0; some -> INSUFFICIENT_SIZE with count
        let mut c: c_uint = 0;
        assert_eq!(procs(d, &mut c, std::ptr::null_mut()), 0);
        assert_eq!(c, 0);
        let core =
            gpuslice_sim_core::Node::open(gpuslice_sim_core::SimConfig::from_env().expect("cfg"))
                .expect("node");
        core.mem_alloc(0, 1 << 20).expect("alloc");
        c = 0;
        assert_eq!(procs(d, &mut c, std::ptr::null_mut()), 7);
        assert_eq!(c, 1);
        let mut infos = [ProcInfo {
            pid: 0,
            used: 0,
            gi: 0,
            ci: 0,
        }; 4];
        c = 4;
        assert_eq!(procs(d, &mut c, infos.as_mut_ptr()), 0);
        assert_eq!(c, 1);
        assert_eq!(infos[0].pid, std::process::id());
        assert_eq!(infos[0].used, 1 << 20);
        assert_eq!(infos[0].gi, u32::MAX);

        assert_eq!(
            CStr::from_ptr(errstr(7)).to_str().unwrap(),
            "Insufficient Size"
        );
        // refcounted shutdown: two inits, two shutdowns, then UNINITIALIZED
        assert_eq!(shutdown(), 0);
        assert_eq!(count(&mut n), 0, "still initialised once");
        assert_eq!(shutdown(), 0);
        assert_eq!(count(&mut n), 1);
        assert_eq!(shutdown(), 1);
    }
}
