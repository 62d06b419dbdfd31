//! NVML device figures inside a slice that would show the neighbours' load: utilisation is the
//! slice's own, and what only says how hard the whole device works (power, energy, temperature,
//! fan, current clocks, P-state, encoder/decoder use) is hidden as `NVML_ERROR_NOT_SUPPORTED`,
//! which monitoring tools (`nvidia-smi`, nvitop, gpustat) show as N/A. Outside a slice every call
//! goes to the real library unchanged.
//!
//! Like the process lists (`nvml_procs`), a courtesy to cooperating programs: a tenant that
//! bypasses the interposer reads NVML directly (`docs/threat-model.md`).

#![allow(non_snake_case)]

use crate::guard;
use crate::nvml_procs::{nvmlProcessUtilizationSample_t, own_pids};
use crate::state::memory_gate;
use gpuslice_cuda_abi::nvml::*;
use std::ffi::c_uint;

/// Whether the calling process is in a slice (the figures are then the slice's view).
fn in_slice() -> bool {
    guard::enter().is_some_and(|_g| memory_gate().is_some())
}

/// Samples asked for at once: more processes than one slice has in practice; beyond it the
/// slice's figure only counts the first ones NVML lists.
const SAMPLES: c_uint = 256;

/// The slice's own `(sm, memory)` utilisation of `device` over the last second: the sum of its
/// processes' samples, at most 100. `None` when NVML has no process samples here (the caller
/// then hides the figure rather than show the device's).
fn own_utilization(device: nvmlDevice_t) -> Option<(u32, u32)> {
    let _g = guard::enter()?;
    let own = own_pids()?;
    let f = crate::real!(nvml_sym nvmlDeviceGetProcessUtilization)?;
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let mut buf = [nvmlProcessUtilizationSample_t::default(); SAMPLES as usize];
    let mut n = SAMPLES;
    // SAFETY: `buf` holds `n` samples; NVML writes at most `n` and sets `n` to how many.
    let rc = unsafe {
        f(
            device,
            buf.as_mut_ptr(),
            &mut n,
            now_us.saturating_sub(1_000_000),
        )
    };
    let samples = match rc {
        NVML_SUCCESS | NVML_ERROR_INSUFFICIENT_SIZE => {
            buf.get(..n.min(SAMPLES) as usize).unwrap_or_default()
        }
        // No sample in the window: nothing ran.
        NVML_ERROR_NOT_FOUND => &[][..],
        _ => return None,
    };
    let (mut sm, mut mem) = (0u32, 0u32);
    for s in samples.iter().filter(|s| own.contains(&s.pid)) {
        sm = sm.saturating_add(s.smUtil);
        mem = mem.saturating_add(s.memUtil);
    }
    Some((sm.min(100), mem.min(100)))
}

/// `nvmlDeviceGetUtilizationRates`: the slice's own utilisation inside a slice.
///
/// # Safety
/// NVML's contract for the function of this name.
pub(crate) unsafe fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    let Some(f) = crate::real!(nvml_sym nvmlDeviceGetUtilizationRates) else {
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    };
    if !in_slice() {
        // SAFETY: forwarding the caller's arguments to the real function.
        return unsafe { f(device, utilization) };
    }
    if utilization.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // The real call first: an invalid handle gets the real error.
    let mut whole = nvmlUtilization_t::default();
    // SAFETY: `whole` is a valid out-parameter.
    let rc = unsafe { f(device, &mut whole) };
    if rc != NVML_SUCCESS {
        return rc;
    }
    match own_utilization(device) {
        Some((gpu, memory)) => {
            // SAFETY: non-null (checked), the caller's out-parameter.
            unsafe { utilization.write(nvmlUtilization_t { gpu, memory }) };
            NVML_SUCCESS
        }
        None => NVML_ERROR_NOT_SUPPORTED,
    }
}

/// NVML functions whose answer inside a slice is `NVML_ERROR_NOT_SUPPORTED`: each says how hard
/// the whole device works, so the neighbours' load. Declared once: name and C parameters.
macro_rules! hidden_in_slice {
    ($($name:ident($($arg:ident: $t:ty),*);)*) => {$(
        /// The NVML function of the same name; `NVML_ERROR_NOT_SUPPORTED` inside a slice.
        ///
        /// # Safety
        /// NVML's contract for the function of this name.
        pub(crate) unsafe fn $name($($arg: $t),*) -> nvmlReturn_t {
            let Some(f) = crate::real!(nvml_sym $name) else {
                return NVML_ERROR_FUNCTION_NOT_FOUND;
            };
            if in_slice() {
                return NVML_ERROR_NOT_SUPPORTED;
            }
            // SAFETY: forwarding the caller's arguments to the real function.
            unsafe { f($($arg),*) }
        }
    )*};
}

hidden_in_slice! {
    nvmlDeviceGetPowerUsage(device: nvmlDevice_t, milliwatts: *mut c_uint);
    nvmlDeviceGetTotalEnergyConsumption(device: nvmlDevice_t, millijoules: *mut u64);
    nvmlDeviceGetTemperature(device: nvmlDevice_t, sensor: c_uint, celsius: *mut c_uint);
    nvmlDeviceGetFanSpeed(device: nvmlDevice_t, percent: *mut c_uint);
    nvmlDeviceGetFanSpeed_v2(device: nvmlDevice_t, fan: c_uint, percent: *mut c_uint);
    nvmlDeviceGetClockInfo(device: nvmlDevice_t, clock: c_uint, mhz: *mut c_uint);
    nvmlDeviceGetClock(device: nvmlDevice_t, clock: c_uint, id: c_uint, mhz: *mut c_uint);
    nvmlDeviceGetPerformanceState(device: nvmlDevice_t, pstate: *mut c_uint);
    nvmlDeviceGetEncoderUtilization(device: nvmlDevice_t, percent: *mut c_uint, period_us: *mut c_uint);
    nvmlDeviceGetDecoderUtilization(device: nvmlDevice_t, percent: *mut c_uint, period_us: *mut c_uint);
}
