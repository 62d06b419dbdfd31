//! `cuGetProcAddress` / `cuGetProcAddress_v2` and `cuGetExportTable`.
//!
//! The symbol and version rule is the shared table of `gpuslice_cuda_abi::procaddr`. The export
//! name it yields is turned into a pointer with `dlsym` on this library's own handle (found with
//! `dladdr` on one of its functions and `dlopen(RTLD_NOLOAD)`), which returns this library's
//! definition even when an interposer preloaded before it defines the same name: exactly like the
//! real driver, which hands out its internal pointers, a preloaded interposer is bypassed unless
//! it wraps `cuGetProcAddress` itself. A variant the table knows but the simulator does not
//! implement answers `CUDA_ERROR_NOT_FOUND` with `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
//!
//! `cuGetExportTable` (NVIDIA's private tables for the runtime) is not simulated:
//! `CUDA_ERROR_NOT_FOUND`, so clients must use the public API.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use gpuslice_cuda_abi::procaddr::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::CUuuid;

/// This library's own `dlopen` handle (as an integer so it can live in a static).
fn own_handle() -> Option<usize> {
    static H: OnceLock<Option<usize>> = OnceLock::new();
    *H.get_or_init(|| {
        let mut info = libc::Dl_info {
            dli_fname: std::ptr::null(),
            dli_fbase: std::ptr::null_mut(),
            dli_sname: std::ptr::null(),
            dli_saddr: std::ptr::null_mut(),
        };
        // A private function: the address of an exported one may resolve (through the GOT) to
        // an interposer's definition of the same name when one is preloaded.
        let me = own_handle as *const c_void;
        // SAFETY: `me` is an address inside this library; `info` is a valid out-struct.
        if unsafe { libc::dladdr(me, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: `dli_fname` is the NUL-terminated path of the already-loaded library;
        // RTLD_NOLOAD only returns a handle (with a reference) to it, never loads anything.
        let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        (!h.is_null()).then_some(h as usize)
    })
}

/// The address of this library's definition of `export`.
fn own_symbol(export: &str) -> Option<*mut c_void> {
    let h = own_handle()?;
    let name = CString::new(export).ok()?;
    // SAFETY: `h` is a live handle of this library; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(h as *mut c_void, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

fn lookup(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> Result<(), (CUresult, CUdriverProcAddressQueryResult)> {
    let invalid = (
        CUDA_ERROR_INVALID_VALUE,
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
    );
    if symbol.is_null() || pfn.is_null() {
        return Err(invalid);
    }
    // SAFETY: non-null; the caller provides a writable function-pointer slot.
    unsafe { pfn.write(std::ptr::null_mut()) };
    let all = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if flags & !all != 0 {
        return Err(invalid);
    }
    // SAFETY: non-null; the caller passes a NUL-terminated symbol name.
    let name = unsafe { CStr::from_ptr(symbol) };
    let not_found = (CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    let name = name.to_str().map_err(|_| not_found)?;
    let export = resolve(name, cuda_version, flags).map_err(|s| (s.result(), s.query_result()))?;
    let p = own_symbol(export).ok_or(not_found)?;
    // SAFETY: as above.
    unsafe { pfn.write(p) };
    Ok(())
}

/// `cuGetProcAddress` (CUDA 11.3 form, without the status out-parameter).
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    match lookup(symbol, pfn, cuda_version, flags) {
        Ok(()) => CUDA_SUCCESS,
        Err((r, _)) => r,
    }
}

/// `cuGetProcAddress_v2` (CUDA 12.0): also reports why a lookup failed through `symbolStatus`.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    let (r, st) = match lookup(symbol, pfn, cuda_version, flags) {
        Ok(()) => (CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS),
        Err(e) => e,
    };
    if !status.is_null() {
        // SAFETY: non-null; the caller provides a writable status.
        unsafe { status.write(st) };
    }
    r
}

/// `cuGetExportTable`: not simulated (`CUDA_ERROR_NOT_FOUND`).
#[no_mangle]
pub unsafe extern "C" fn cuGetExportTable(
    table: *mut *const c_void,
    id: *const CUuuid,
) -> CUresult {
    if table.is_null() || id.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null; the caller provides a writable pointer slot.
    unsafe { table.write(std::ptr::null()) };
    CUDA_ERROR_NOT_FOUND
}
