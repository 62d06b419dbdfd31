//! The driver-API entry points the workloads use, as one table of function pointers, and the three
//! ways real programs fill such a table:
//! - `linked`: the program was linked against `libcuda.so.1` (see the `gpuslice-workload-linked` binary);
//! - `dlsym`: `dlopen("libcuda.so.1")` then `dlsym` of the versioned export names (`cuMemAlloc_v2`, …),
//!   as older runtimes and frameworks do;
//! - `procaddr`: `dlsym` of `cuGetProcAddress_v2` only, then every symbol by its base name with a
//!   `cudaVersion`, as the CUDA 12 runtime does.

use anyhow::{anyhow, bail, Result};
use gpuslice_cuda_abi::result::{CUresult, CUDA_SUCCESS};
use gpuslice_cuda_abi::types::{CUcontext, CUdevice, CUdeviceptr, CUfunction, CUmodule, CUstream};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// `CUevent` (kept opaque here).
pub type CUevent = *mut c_void;

macro_rules! driver_table {
    ($( $field:ident : $base:literal / $export:literal => fn($($arg:ty),*) ; )*) => {
        /// The entry points a workload calls, resolved once at start.
        #[derive(Clone, Copy)]
        pub struct Driver {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> CUresult, )*
        }

        /// (field, base name for cuGetProcAddress, versioned export name for dlsym)
        pub const SYMBOLS: &[(&str, &str, &str)] = &[ $( (stringify!($field), $base, $export), )* ];

        impl Driver {
            /// Builds the table from a resolver mapping (base name, export name) to an address.
            ///
            /// # Safety
            /// Every address the resolver returns must be the entry point of the named driver
            /// function with the C signature declared in this table.
            pub unsafe fn resolve(mut f: impl FnMut(&str, &str) -> Result<*mut c_void>) -> Result<Driver> {
                Ok(Driver {
                    $( $field: {
                        let p = f($base, $export)?;
                        if p.is_null() { bail!("{} resolved to NULL", $export); }
                        // SAFETY: the caller guarantees `p` is this function with this signature.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CUresult>(p) }
                    }, )*
                })
            }
        }
    };
}

driver_table! {
    init: "cuInit" / "cuInit" => fn(c_uint);
    driver_get_version: "cuDriverGetVersion" / "cuDriverGetVersion" => fn(*mut c_int);
    device_get_count: "cuDeviceGetCount" / "cuDeviceGetCount" => fn(*mut c_int);
    device_get: "cuDeviceGet" / "cuDeviceGet" => fn(*mut CUdevice, c_int);
    device_get_name: "cuDeviceGetName" / "cuDeviceGetName" => fn(*mut c_char, c_int, CUdevice);
    device_total_mem: "cuDeviceTotalMem" / "cuDeviceTotalMem_v2" => fn(*mut usize, CUdevice);
    primary_ctx_retain: "cuDevicePrimaryCtxRetain" / "cuDevicePrimaryCtxRetain" => fn(*mut CUcontext, CUdevice);
    primary_ctx_release: "cuDevicePrimaryCtxRelease" / "cuDevicePrimaryCtxRelease_v2" => fn(CUdevice);
    ctx_set_current: "cuCtxSetCurrent" / "cuCtxSetCurrent" => fn(CUcontext);
    ctx_synchronize: "cuCtxSynchronize" / "cuCtxSynchronize" => fn();
    mem_alloc: "cuMemAlloc" / "cuMemAlloc_v2" => fn(*mut CUdeviceptr, usize);
    mem_free: "cuMemFree" / "cuMemFree_v2" => fn(CUdeviceptr);
    mem_get_info: "cuMemGetInfo" / "cuMemGetInfo_v2" => fn(*mut usize, *mut usize);
    module_load_data: "cuModuleLoadData" / "cuModuleLoadData" => fn(*mut CUmodule, *const c_void);
    module_get_function: "cuModuleGetFunction" / "cuModuleGetFunction" => fn(*mut CUfunction, CUmodule, *const c_char);
    stream_create: "cuStreamCreate" / "cuStreamCreate" => fn(*mut CUstream, c_uint);
    stream_query: "cuStreamQuery" / "cuStreamQuery" => fn(CUstream);
    stream_synchronize: "cuStreamSynchronize" / "cuStreamSynchronize" => fn(CUstream);
    stream_destroy: "cuStreamDestroy" / "cuStreamDestroy_v2" => fn(CUstream);
    event_create: "cuEventCreate" / "cuEventCreate" => fn(*mut CUevent, c_uint);
    event_record: "cuEventRecord" / "cuEventRecord" => fn(CUevent, CUstream);
    event_synchronize: "cuEventSynchronize" / "cuEventSynchronize" => fn(CUevent);
    event_query: "cuEventQuery" / "cuEventQuery" => fn(CUevent);
    event_elapsed_time: "cuEventElapsedTime" / "cuEventElapsedTime" => fn(*mut f32, CUevent, CUevent);
    event_destroy: "cuEventDestroy" / "cuEventDestroy_v2" => fn(CUevent);
    launch_kernel: "cuLaunchKernel" / "cuLaunchKernel" => fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void);
    get_error_name: "cuGetErrorName" / "cuGetErrorName" => fn(CUresult, *mut *const c_char);
    graph_create: "cuGraphCreate" / "cuGraphCreate" => fn(*mut *mut c_void, c_uint);
    graph_add_kernel_node: "cuGraphAddKernelNode" / "cuGraphAddKernelNode_v2" => fn(*mut *mut c_void, *mut c_void, *const *mut c_void, usize, *const c_void);
    graph_instantiate: "cuGraphInstantiateWithFlags" / "cuGraphInstantiateWithFlags" => fn(*mut *mut c_void, *mut c_void, u64);
    graph_launch: "cuGraphLaunch" / "cuGraphLaunch" => fn(*mut c_void, CUstream);
}

/// How the table was filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Via {
    /// Linked against libcuda.so.1 at build time (the `gpuslice-workload-linked` binary only).
    Link,
    /// `dlopen` + `dlsym` of versioned export names.
    Dlsym,
    /// `dlopen` + `dlvsym`-free lookup of `cuGetProcAddress_v2`, then everything through it.
    Procaddr,
}

/// `CUdriverProcAddressQueryResult` values.
const CU_GET_PROC_ADDRESS_SUCCESS: c_int = 0;

type GetProcAddressV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

/// Opens `libcuda.so.1` the way the CUDA runtime does (by soname, through the loader's search path).
fn open_libcuda() -> Result<*mut c_void> {
    let name = c"libcuda.so.1";
    // SAFETY: `name` is a valid NUL-terminated string; dlopen has no other preconditions.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        bail!("dlopen(libcuda.so.1) failed: {}", dlerror());
    }
    Ok(h)
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a valid C string owned by the loader.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null pointers from dlerror are NUL-terminated strings.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn dlsym(handle: *mut c_void, name: &str) -> Result<*mut c_void> {
    let c = CString::new(name)?;
    // SAFETY: handle came from dlopen and `c` is NUL-terminated.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if p.is_null() {
        bail!("dlsym({name}) failed: {}", dlerror());
    }
    Ok(p)
}

/// Resolves the table through `dlsym` of versioned export names.
pub fn load_dlsym() -> Result<Driver> {
    let h = open_libcuda()?;
    // SAFETY: each export name is the driver's entry point with the signature in the table.
    unsafe { Driver::resolve(|_, export| dlsym(h, export)) }
}

/// Resolves the table through `cuGetProcAddress_v2` with the given `cudaVersion`.
pub fn load_procaddr(cuda_version: i32) -> Result<Driver> {
    let h = open_libcuda()?;
    let gpa = dlsym(h, "cuGetProcAddress_v2")?;
    // SAFETY: cuGetProcAddress_v2 has this signature in every driver that exports it (CUDA ≥ 12.0).
    let gpa: GetProcAddressV2 =
        unsafe { std::mem::transmute::<*mut c_void, GetProcAddressV2>(gpa) };
    let resolve = |base: &str, _export: &str| -> Result<*mut c_void> {
        let c = CString::new(base)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        let mut status: c_int = -1;
        // SAFETY: valid NUL-terminated name and valid out-pointers.
        let r = unsafe { gpa(c.as_ptr(), &mut p, cuda_version, 0, &mut status) };
        if r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS {
            bail!("cuGetProcAddress_v2({base}, {cuda_version}) = {r}, status {status}");
        }
        Ok(p)
    };
    // SAFETY: cuGetProcAddress_v2 returns the entry point of the requested symbol's matching version.
    unsafe { Driver::resolve(resolve) }
}

impl Driver {
    /// Turns a driver result into an error that names the call and the code.
    pub fn check(&self, what: &str, r: CUresult) -> Result<()> {
        if r == CUDA_SUCCESS {
            return Ok(());
        }
        Err(anyhow!("{what} failed: {} ({r})", self.error_name(r)))
    }

    /// `cuGetErrorName`, or the number when the driver does not know it.
    pub fn error_name(&self, r: CUresult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; the driver stores a static string or leaves NULL.
        let rc = unsafe { (self.get_error_name)(r, &mut p) };
        if rc != CUDA_SUCCESS || p.is_null() {
            return format!("CUresult {r}");
        }
        // SAFETY: cuGetErrorName returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}
