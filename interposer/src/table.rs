//! Export name → our wrapper, for `dlsym`/`dlvsym` and `cuGetProcAddress`: the exported shells
//! and the table are generated (`crate::entry`) from the declaration in
//! `gpuslice_cuda_abi::for_each_wrapped!`; and the `cuGetProcAddress` implementations
//! themselves.

#![allow(non_snake_case)]

use gpuslice_cuda_abi::procaddr::{resolve, CUdriverProcAddressQueryResult};
use gpuslice_cuda_abi::result::*;
use std::ffi::{c_char, c_int, c_void, CStr};

type R = CUresult;

/// The implementation behind each exported shell, by its C name: each lives in the module that
/// owns its behaviour (the `cuGetProcAddress` pair here).
mod imp {
    pub(super) use super::{cuGetProcAddress, cuGetProcAddress_v2};
    pub(super) use crate::array::*;
    pub(super) use crate::context::*;
    pub(super) use crate::cuda::*;
    pub(super) use crate::graph::*;
    pub(super) use crate::launch::*;
    pub(super) use crate::nvml::*;
    pub(super) use crate::nvml_private::*;
    pub(super) use crate::nvml_procs::*;
    pub(super) use crate::pool::*;
}

// The shells (`export::*`), `lookup` and `WRAPPED`, from the one declaration in abi.
gpuslice_cuda_abi::for_each_wrapped!(wrappers);

// `cuGetProcAddress`: the driver answers, and for names we wrap the pointer is our wrapper.

/// Replaces `*pfn` by our wrapper when the export the driver's rule selects is one we wrap.
fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: cuGetProcAddress's contract: `symbol` is NUL-terminated.
    let Ok(name) = unsafe { CStr::from_ptr(symbol) }.to_str() else {
        return;
    };
    // The driver picks among its own variants only: a 12.x driver asked for `cudaVersion` 13000
    // hands out its 12.x variant, so our choice (the wrapper's signature) must be capped alike.
    let version = match driver_version() {
        Some(d) => version.min(d),
        None => version,
    };
    if let Ok(export) = resolve(name, version, flags) {
        if let Some(ours) = lookup(export.as_bytes()) {
            // SAFETY: valid out-pointer the driver just wrote.
            unsafe { *pfn = ours };
        }
    }
}

/// The real driver's `cuDriverGetVersion`, read once (it works before `cuInit`).
fn driver_version() -> Option<c_int> {
    static V: std::sync::OnceLock<Option<c_int>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let f = crate::real!(cuda_sym cuDriverGetVersion)?;
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        (unsafe { f(&mut v) } == CUDA_SUCCESS && v > 0).then_some(v)
    })
}

/// `cuGetProcAddress_v2`: the driver answers (status and errors unchanged); for symbols we wrap,
/// the pointer is our wrapper of the variant the driver chose by `cudaVersion` and `flags`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut CUdriverProcAddressQueryResult,
) -> R {
    let r = call!(cuGetProcAddress_v2;
        symbol, pfn, version, flags, status);
    if r == CUDA_SUCCESS {
        substitute(symbol, pfn, version, flags);
    }
    r
}

/// `cuGetProcAddress` (CUDA 11.3–11.8 signature).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> R {
    let r = call!(cuGetProcAddress; symbol, pfn, version, flags);
    if r == CUDA_SUCCESS {
        substitute(symbol, pfn, version, flags);
    }
    r
}
