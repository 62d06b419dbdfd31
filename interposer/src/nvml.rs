//! NVML memory queries in the slice's view: `nvmlDeviceGetMemoryInfo` and `_v2` report
//! total = cap, used = the slice's usage, free = min(cap − used, real free), saturating.

#![allow(non_snake_case)]

use crate::guard;
use crate::state::memory_gate;
use gpuslice_cuda_abi::nvml::*;
use gpuslice_region::UNCAPPED;
use std::ffi::{c_char, c_uint, CStr};

/// The slice's (total, used, free) for `device`, given the real total and free.
fn view(device: nvmlDevice_t, real_total: u64, real_free: u64) -> Option<(u64, u64, u64)> {
    let _g = guard::enter()?;
    let g = memory_gate()?;
    let (ordinal, entry) = if g.is_standalone() {
        let f = crate::real!(nvml_sym nvmlDeviceGetIndex)?;
        let mut i: c_uint = 0;
        // SAFETY: writes one unsigned int.
        if unsafe { f(device, &mut i) } != NVML_SUCCESS {
            return None;
        }
        (i32::try_from(i).ok()?, usize::try_from(i).ok()?)
    } else {
        let f = crate::real!(nvml_sym nvmlDeviceGetUUID)?;
        let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        // SAFETY: writes at most `len` bytes including the NUL.
        if unsafe { f(device, buf.as_mut_ptr(), c_uint::try_from(buf.len()).ok()?) } != NVML_SUCCESS
        {
            return None;
        }
        if let Some(last) = buf.last_mut() {
            *last = 0;
        }
        // SAFETY: NUL-terminated (forced above).
        let uuid = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let e = g.entry_by_uuid(&uuid)?;
        (i32::try_from(e).ok()?, e)
    };
    let cap = g.cap_with(ordinal, entry, Some(real_total));
    if cap == UNCAPPED {
        return None;
    }
    g.refresh();
    let total = cap.min(real_total);
    let free = g.free_view(cap, entry).min(total).min(real_free);
    let used = g.used_view(entry).min(total);
    Some((total, used, free))
}

/// The slice's memory total on `device` (its cap there), `None` outside a slice or uncapped.
pub(crate) fn slice_total(device: nvmlDevice_t) -> Option<u64> {
    let f = crate::real!(nvml_sym nvmlDeviceGetMemoryInfo)?;
    let mut m = nvmlMemory_t::default();
    // SAFETY: `m` is a valid out-parameter.
    if unsafe { f(device, &mut m) } != NVML_SUCCESS {
        return None;
    }
    view(device, m.total, m.free).map(|(total, _, _)| total)
}

/// `nvmlDeviceGetMemoryInfo`.
///
/// # Safety
/// NVML's contract for the function of this name.
pub(crate) unsafe fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    let Some(f) = crate::real!(nvml_sym nvmlDeviceGetMemoryInfo) else {
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    };
    // SAFETY: forwarding the caller's arguments to the real function.
    let r = unsafe { f(device, memory) };
    if r == NVML_SUCCESS && !memory.is_null() {
        // SAFETY: written by NVML on success.
        let m = unsafe { &mut *memory };
        if let Some((t, u, fr)) = view(device, m.total, m.free) {
            m.total = t;
            m.used = u;
            m.free = fr;
        }
    }
    r
}

/// `nvmlDeviceGetMemoryInfo_v2`.
///
/// # Safety
/// NVML's contract for the function of this name.
pub(crate) unsafe fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    let Some(f) = crate::real!(nvml_sym nvmlDeviceGetMemoryInfo_v2) else {
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    };
    // SAFETY: forwarding the caller's arguments to the real function.
    let r = unsafe { f(device, memory) };
    if r == NVML_SUCCESS && !memory.is_null() {
        // SAFETY: written by NVML on success.
        let m = unsafe { &mut *memory };
        if let Some((t, u, fr)) = view(device, m.total, m.free) {
            m.total = t;
            m.used = u;
            m.free = fr;
            m.reserved = m.reserved.min(t.saturating_sub(u));
        }
    }
    r
}
