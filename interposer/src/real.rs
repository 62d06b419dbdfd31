//! The real functions behind our wrappers, found without recursion: glibc's `dlsym` from its own
//! symbol table (`elf`), the driver through `dlopen("libcuda.so.1", RTLD_NOLOAD)` (then a normal
//! `dlopen`) and NVML likewise. Lookups through a library handle search only that library and its
//! dependencies, never the preloaded interposer, so wherever the driver is installed, we get it.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering::Acquire, Ordering::Release};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// glibc's `dlsym` (used by the trampoline's tail jump).
pub static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
/// glibc's `dlvsym`.
pub static REAL_DLVSYM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static CUDA: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static NVML: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Resolves glibc's `dlsym` and `dlvsym` once (idempotent, lock-free).
pub fn init_dl() {
    if REAL_DLSYM.load(Acquire).is_null() {
        REAL_DLSYM.store(crate::elf::glibc_symbol(b"dlsym"), Release);
    }
    if REAL_DLVSYM.load(Acquire).is_null() {
        REAL_DLVSYM.store(crate::elf::glibc_symbol(b"dlvsym"), Release);
    }
}

/// glibc's `dlsym(handle, name)`; null if glibc's could not be found. `handle` must be a
/// handle from `dlopen` or a pseudo-handle (as for dlsym itself).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn dlsym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    init_dl();
    let p = REAL_DLSYM.load(Acquire);
    if p.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: p is glibc's dlsym (found by name in libc's symbol table), signature per dlfcn.h.
    unsafe {
        let f: DlsymFn = std::mem::transmute::<*mut c_void, DlsymFn>(p);
        f(handle, name.as_ptr())
    }
}

/// glibc's `dlvsym`.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn dlvsym(handle: *mut c_void, name: &CStr, version: &CStr) -> *mut c_void {
    init_dl();
    let p = REAL_DLVSYM.load(Acquire);
    if p.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: p is glibc's dlvsym, signature per dlfcn.h.
    unsafe {
        let f: DlvsymFn = std::mem::transmute::<*mut c_void, DlvsymFn>(p);
        f(handle, name.as_ptr(), version.as_ptr())
    }
}

fn open(cache: &AtomicPtr<c_void>, soname: &CStr) -> *mut c_void {
    let h = cache.load(Acquire);
    if !h.is_null() {
        return h;
    }
    // SAFETY: dlopen with a valid NUL-terminated name; RTLD_NOLOAD only returns an already
    // loaded library. The reference taken is kept for the life of the process.
    let mut h = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        // SAFETY: as above, now loading it.
        h = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_LAZY) };
    }
    if !h.is_null() {
        cache.store(h, Release);
    }
    h
}

/// Handle of the real `libcuda.so.1` (null when absent).
pub fn cuda_handle() -> *mut c_void {
    open(&CUDA, c"libcuda.so.1")
}

/// Handle of the real `libnvidia-ml.so.1` (null when absent).
pub fn nvml_handle() -> *mut c_void {
    open(&NVML, c"libnvidia-ml.so.1")
}

/// Handles already opened (no loading), for comparing a caller's handle.
pub fn known_handles() -> (*mut c_void, *mut c_void) {
    (CUDA.load(Acquire), NVML.load(Acquire))
}

/// The real driver function `name`, or null.
pub fn cuda_sym(name: &CStr) -> *mut c_void {
    let h = cuda_handle();
    if h.is_null() {
        return std::ptr::null_mut();
    }
    dlsym(h, name)
}

/// The real NVML function `name`, or null.
pub fn nvml_sym(name: &CStr) -> *mut c_void {
    let h = nvml_handle();
    if h.is_null() {
        return std::ptr::null_mut();
    }
    dlsym(h, name)
}

/// `real!(cuda_sym cuMemAlloc_v2)`: the cached real function as
/// `Option<gpuslice_cuda_abi::pfn::cuMemAlloc_v2>`, typed by the signature declared once there
/// (a function not declared there cannot be called).
#[macro_export]
macro_rules! real {
    ($lib:ident $name:ident) => {
        $crate::real!(@typed $lib $name, gpuslice_cuda_abi::pfn::$name)
    };
    (@typed $lib:ident $name:ident, $t:ty) => {{
        static P: std::sync::atomic::AtomicPtr<std::ffi::c_void> =
            std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
        let mut p = P.load(std::sync::atomic::Ordering::Acquire);
        if p.is_null() {
            let n = concat!(stringify!($name), "\0");
            let c = std::ffi::CStr::from_bytes_with_nul(n.as_bytes()).unwrap_or(c"");
            p = $crate::real::$lib(c);
            P.store(p, std::sync::atomic::Ordering::Release);
        }
        if p.is_null() {
            None
        } else {
            // SAFETY: `p` is the library's own export of this name, whose C signature is the
            // one declared for it in `gpuslice_cuda_abi::pfn` (from cuda.h / nvml.h).
            Some(unsafe {
                std::mem::transmute::<*mut std::ffi::c_void, $t>(p)
            })
        }
    }};
}

/// `call!(cuMemFree_v2; dptr)`: calls the real driver function of that name, typed by its
/// declaration in `gpuslice_cuda_abi::pfn`, with the caller's arguments
/// (`CUDA_ERROR_NOT_INITIALIZED` when the driver lacks it).
macro_rules! call {
    ($name:ident; $($arg:expr),*) => {
        match $crate::real!(cuda_sym $name) {
            // SAFETY: forwarding the caller's arguments unchanged to the real entry point of
            // the same name and C signature.
            Some(f) => unsafe { f($($arg),*) },
            None => gpuslice_cuda_abi::result::CUDA_ERROR_NOT_INITIALIZED,
        }
    };
}
