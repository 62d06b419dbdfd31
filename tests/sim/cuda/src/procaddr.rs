//! `cuGetProcAddress` / `cuGetProcAddress_v2` and `cuGetExportTable`.
//!
//! The symbol and version rule is the shared table of `gpuslice_cuda_abi::procaddr`. The export
//! name it yields is turned into a pointer from this library's own dynamic symbol table (its
//! ELF file, found with `dladdr` on one of its private functions, read once; addresses are the
//! load base plus the symbol's value), never with `dlsym`: a preloaded interposer overrides
//! `dlsym`, and a simulator that went through it could hide a broken `cuGetProcAddress`
//! wrapping. Exactly like the real driver, which hands out its internal pointers, a preloaded
//! interposer is bypassed unless it wraps `cuGetProcAddress` itself. A variant the table knows
//! but the simulator does not implement answers `CUDA_ERROR_NOT_FOUND` with
//! `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
//!
//! `cudaVersion` is capped at the advertised driver version (`GPUSLICE_SIM_DRIVER_VERSION`): a
//! driver knows only its own variants.
//!
//! `cuGetExportTable` (NVIDIA's private tables for the runtime) is not simulated:
//! `CUDA_ERROR_NOT_FOUND`, so clients must use the public API.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use gpuslice_cuda_abi::procaddr::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::CUuuid;

/// This library's exported functions: name → address in this process, from its own ELF
/// dynamic symbol table (see the module comment). Empty if the file cannot be read.
fn own_exports() -> &'static HashMap<String, usize> {
    static T: OnceLock<HashMap<String, usize>> = OnceLock::new();
    T.get_or_init(|| read_own_exports().unwrap_or_default())
}

fn read_own_exports() -> Option<HashMap<String, usize>> {
    use object::{Object, ObjectSymbol};
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // A private function: the address of an exported one may resolve (through the GOT) to an
    // interposer's definition of the same name when one is preloaded.
    let me = read_own_exports as *const c_void;
    // SAFETY: `me` is an address inside this library; `info` is a valid out-struct.
    if unsafe { libc::dladdr(me, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: `dli_fname` is the NUL-terminated path of this loaded library.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_str().ok()?;
    let bytes = std::fs::read(path).ok()?;
    let file = object::File::parse(&*bytes).ok()?;
    let base = info.dli_fbase as usize;
    Some(
        file.dynamic_symbols()
            .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text)
            .filter_map(|s| Some((s.name().ok()?.to_string(), base + s.address() as usize)))
            .collect(),
    )
}

/// The address of this library's definition of `export`.
fn own_symbol(export: &str) -> Option<*mut c_void> {
    own_exports().get(export).map(|&a| a as *mut c_void)
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
    // A driver knows only its own variants: asked for a newer `cudaVersion` it answers with the
    // newest variant it has (a 12.8 driver gives `cuCtxSynchronize`, not 13.0's `_v2`).
    let version = cuda_version.min(crate::device::version());
    let export = resolve(name, version, flags).map_err(|s| (s.result(), s.query_result()))?;
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
