//! Exports: initialisation, error strings, system queries, device enumeration and lookup.
//!
//! Safety contract of every export: the pointer arguments follow nvml.h (null or valid for the
//! documented writes / NUL-terminated reads); nulls are answered with an error code.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, CStr};

use crate::state::{code, device, handle, init, node, parse_bus_id, put, put_str, shutdown, R};
use crate::types::*;

#[no_mangle]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    code(init())
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    code(init())
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    code(init())
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    code(shutdown())
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let s: &'static CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        13 => c"Function Not Found",
        15 => c"GPU is lost",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        25 => c"Argument version mismatch",
        26 => c"Deprecated",
        27 => c"Not Ready",
        28 => c"GPU not found",
        29 => c"Invalid state",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    code((|| {
        let n = node()?;
        // SAFETY: nvml.h contract: `version` holds `length` bytes.
        unsafe { put_str(version, length, &n.config().nvml_driver_version) }
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    code((|| {
        let n = node()?;
        let v = format!("12.{}", n.config().nvml_driver_version);
        // SAFETY: nvml.h contract: `version` holds `length` bytes.
        unsafe { put_str(version, length, &v) }
    })())
}

fn cuda_version(out: *mut c_int) -> R {
    let n = node()?;
    // SAFETY: nvml.h contract: `out` is null or valid for an int.
    unsafe { put(out, n.config().driver_version) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> nvmlReturn_t {
    code(cuda_version(v))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> nvmlReturn_t {
    code(cuda_version(v))
}

fn count(out: *mut c_uint) -> R {
    let n = node()?;
    // SAFETY: nvml.h contract: `out` is null or valid for an unsigned int.
    unsafe { put(out, n.device_count()) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(c: *mut c_uint) -> nvmlReturn_t {
    code(count(c))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(c: *mut c_uint) -> nvmlReturn_t {
    code(count(c))
}

fn by_index(index: c_uint, out: *mut nvmlDevice_t) -> R {
    let n = node()?;
    if index >= n.device_count() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: nvml.h contract: `out` is null or valid for a handle.
    unsafe { put(out, handle(index)) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    i: c_uint,
    d: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    code(by_index(i, d))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    i: c_uint,
    d: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    code(by_index(i, d))
}

/// Reads a C string argument.
///
/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn arg_str<'a>(p: *const c_char) -> Result<&'a str, nvmlReturn_t> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| NVML_ERROR_INVALID_ARGUMENT)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    d: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    code((|| {
        let n = node()?;
        // SAFETY: nvml.h contract: `uuid` is a C string.
        let want = unsafe { arg_str(uuid) }?;
        if d.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let i = (0..n.device_count())
            .find(|&i| {
                n.device(i)
                    .is_ok_and(|s| s.uuid.eq_ignore_ascii_case(want.trim()))
            })
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        // SAFETY: `d` checked non-null; nvml.h contract: valid for a handle.
        unsafe { put(d, handle(i)) }
    })())
}

fn by_bus(bus: *const c_char, d: *mut nvmlDevice_t) -> R {
    let n = node()?;
    // SAFETY: nvml.h contract: `bus` is a C string.
    let want = parse_bus_id(unsafe { arg_str(bus) }?).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
    if d.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let i = (0..n.device_count())
        .find(|&i| {
            n.device(i)
                .ok()
                .and_then(|s| parse_bus_id(&s.pci_bus_id))
                .is_some_and(|have| have == want)
        })
        .ok_or(NVML_ERROR_NOT_FOUND)?;
    // SAFETY: `d` checked non-null; nvml.h contract: valid for a handle.
    unsafe { put(d, handle(i)) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    b: *const c_char,
    d: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    code(by_bus(b, d))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    b: *const c_char,
    d: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    code(by_bus(b, d))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(dev: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    code((|| {
        let (_, i) = device(dev)?;
        // SAFETY: nvml.h contract: `index` is null or valid.
        unsafe { put(index, i) }
    })())
}
