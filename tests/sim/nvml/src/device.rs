//! Exports: per-device queries, answered from the simulated node's ground truth.
//!
//! Safety contract of every export: the pointer arguments follow nvml.h (null or valid for the
//! documented writes); nulls are answered with `NVML_ERROR_INVALID_ARGUMENT`.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint};

use gpuslice_sim_core::{now_ns, DeviceSpec, Node, ProcessUsage};

use crate::state::{code, device, fill, parse_bus_id, put, put_pair, put_str, R};
use crate::types::*;

/// Runs `f` with the node, index and spec behind a handle.
fn with<F>(dev: nvmlDevice_t, f: F) -> nvmlReturn_t
where
    F: FnOnce(&'static Node, u32, &'static DeviceSpec) -> R,
{
    code((|| {
        let (n, i) = device(dev)?;
        let spec = n.device(i).map_err(|_| NVML_ERROR_INVALID_ARGUMENT)?;
        f(n, i, spec)
    })())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    dev: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract: `name` holds `length` bytes.
    with(dev, |_, _, s| unsafe { put_str(name, length, &s.name) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    dev: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract: `uuid` holds `length` bytes.
    with(dev, |_, _, s| unsafe { put_str(uuid, length, &s.uuid) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    dev: nvmlDevice_t,
    serial: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    with(dev, |_, i, _| {
        let sn = format!("165432{:07}", 1000 + i);
        // SAFETY: nvml.h contract: `serial` holds `length` bytes.
        unsafe { put_str(serial, length, &sn) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVbiosVersion(
    dev: nvmlDevice_t,
    v: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract: `v` holds `length` bytes.
    with(dev, |_, _, _| unsafe {
        put_str(v, length, "96.00.99.00.01")
    })
}

/// `(domain, bus, device)` and the PCI device id (device << 16 | NVIDIA vendor id).
fn pci_of(s: &DeviceSpec) -> ((u32, u32, u32), u32) {
    let loc = parse_bus_id(&s.pci_bus_id).unwrap_or((0, 0, 0));
    let devid: u32 = if s.name.contains("A100") {
        if s.total_mem > (48 << 30) {
            0x20b2
        } else {
            0x20b0
        }
    } else if s.name.contains("L40") {
        0x26b5
    } else {
        0x2330
    };
    (loc, (devid << 16) | 0x10de)
}

fn pci_info(dev: nvmlDevice_t, out: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    with(dev, |_, _, s| {
        let ((dom, bus, d), id) = pci_of(s);
        let mut p = nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain: dom,
            bus,
            device: d,
            pciDeviceId: id,
            pciSubSystemId: 0x16c1_10de,
            busId: [0; 32],
        };
        fill(
            &mut p.busIdLegacy,
            &format!("{:04X}:{:02X}:{:02X}.0", dom, bus, d),
        );
        fill(
            &mut p.busId,
            &format!("{:08X}:{:02X}:{:02X}.0", dom, bus, d),
        );
        // SAFETY: nvml.h contract: `out` is null or valid for an nvmlPciInfo_t.
        unsafe { put(out, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(
    dev: nvmlDevice_t,
    out: *mut nvmlPciInfo_v1_t,
) -> nvmlReturn_t {
    with(dev, |_, _, s| {
        let ((dom, bus, d), id) = pci_of(s);
        let mut p = nvmlPciInfo_v1_t {
            busId: [0; 16],
            domain: dom,
            bus,
            device: d,
            pciDeviceId: id,
            pciSubSystemId: 0x16c1_10de,
            reserved: [0; 4],
        };
        fill(
            &mut p.busId,
            &format!("{:04X}:{:02X}:{:02X}.0", dom, bus, d),
        );
        // SAFETY: nvml.h contract (original layout): `out` is null or valid for 52 bytes.
        unsafe { put(out, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(
    dev: nvmlDevice_t,
    out: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    pci_info(dev, out)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    dev: nvmlDevice_t,
    out: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    pci_info(dev, out)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    dev: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract: `minor` is null or valid.
    with(dev, |_, _, s| unsafe { put(minor, s.minor) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    dev: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    with(dev, |_, _, s| {
        if major.is_null() || minor.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: both checked non-null; nvml.h contract: valid ints.
        unsafe {
            put(major, s.cc_major as c_int)?;
            put(minor, s.cc_minor as c_int)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    dev: nvmlDevice_t,
    mem: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    with(dev, |n, i, _| {
        let total = n.mem_total(i);
        let used = n.mem_used(i).min(total);
        // SAFETY: nvml.h contract: `mem` is null or valid for an nvmlMemory_t.
        unsafe {
            put(
                mem,
                nvmlMemory_t {
                    total,
                    free: total - used,
                    used,
                },
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    dev: nvmlDevice_t,
    mem: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    with(dev, |n, i, _| {
        if mem.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; nvml.h contract: valid for an nvmlMemory_v2_t whose first field is
        // the version word.
        let version = unsafe { mem.cast::<c_uint>().read_unaligned() };
        if version != NVML_MEMORY_V2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let total = n.mem_total(i);
        let used = n.mem_used(i).min(total);
        // SAFETY: as above.
        unsafe {
            put(
                mem,
                nvmlMemory_v2_t {
                    version,
                    total,
                    reserved: 0,
                    free: total - used,
                    used,
                },
            )
        }
    })
}

/// Memory-controller activity derived from engine activity (kernels touch memory ~40 % of the
/// time they run): a plausible figure, not a measurement.
fn mem_util(sm: u32) -> u32 {
    sm * 2 / 5
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    dev: nvmlDevice_t,
    u: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    with(dev, |n, i, _| {
        let gpu = n.utilization(i);
        // SAFETY: nvml.h contract: `u` is null or valid.
        unsafe {
            put(
                u,
                nvmlUtilization_t {
                    gpu,
                    memory: mem_util(gpu),
                },
            )
        }
    })
}

/// The `infoCount` in/out protocol shared by the running-process queries.
///
/// # Safety
/// `count` null or valid; `infos` null or valid for `*count` elements.
unsafe fn fill_list<T>(
    count: *mut c_uint,
    infos: *mut T,
    list: &[ProcessUsage],
    make: fn(&ProcessUsage) -> T,
) -> R {
    if count.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null; caller contract.
    let cap = unsafe { count.read() } as usize;
    // SAFETY: as above.
    unsafe { count.write(list.len() as c_uint) };
    if list.is_empty() {
        return Ok(());
    }
    if infos.is_null() || cap < list.len() {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (k, p) in list.iter().enumerate() {
        // SAFETY: k < list.len() <= cap, and `infos` holds `cap` elements (caller contract).
        unsafe { infos.add(k).write_unaligned(make(p)) };
    }
    Ok(())
}

fn info_v2(p: &ProcessUsage) -> nvmlProcessInfo_t {
    nvmlProcessInfo_t {
        pid: p.pid,
        usedGpuMemory: p.used_bytes,
        gpuInstanceId: NO_INSTANCE,
        computeInstanceId: NO_INSTANCE,
    }
}

fn info_v1(p: &ProcessUsage) -> nvmlProcessInfo_v1_t {
    nvmlProcessInfo_v1_t {
        pid: p.pid,
        usedGpuMemory: p.used_bytes,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    dev: nvmlDevice_t,
    c: *mut c_uint,
    infos: *mut nvmlProcessInfo_v1_t,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract for count / infos.
    with(dev, |n, i, _| unsafe {
        fill_list(c, infos, &n.processes(i), info_v1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    dev: nvmlDevice_t,
    c: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract for count / infos.
    with(dev, |n, i, _| unsafe {
        fill_list(c, infos, &n.processes(i), info_v2)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    dev: nvmlDevice_t,
    c: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract for count / infos.
    with(dev, |n, i, _| unsafe {
        fill_list(c, infos, &n.processes(i), info_v2)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses(
    dev: nvmlDevice_t,
    c: *mut c_uint,
    infos: *mut nvmlProcessInfo_v1_t,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract for count / infos.
    with(dev, |_, _, _| unsafe { fill_list(c, infos, &[], info_v1) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    dev: nvmlDevice_t,
    c: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract for count / infos.
    with(dev, |_, _, _| unsafe { fill_list(c, infos, &[], info_v2) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    dev: nvmlDevice_t,
    c: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract for count / infos.
    with(dev, |_, _, _| unsafe { fill_list(c, infos, &[], info_v2) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    dev: nvmlDevice_t,
    c: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: nvml.h contract for count / infos.
    with(dev, |_, _, _| unsafe { fill_list(c, infos, &[], info_v2) })
}

/// CLOCK_REALTIME in ns (NVML sample timestamps are wall-clock microseconds).
fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    dev: nvmlDevice_t,
    samples: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen_us: u64,
) -> nvmlReturn_t {
    with(dev, |n, i, _| {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // wall-clock µs -> monotonic ns
        let (real, mono) = (realtime_ns(), now_ns());
        let since = (last_seen_us.saturating_mul(1000)).saturating_sub(real.saturating_sub(mono));
        let since = if last_seen_us == 0 { 0 } else { since };
        let list = n.process_samples(i, since);
        // SAFETY: non-null; nvml.h contract.
        let cap = unsafe { count.read() } as usize;
        // SAFETY: as above.
        unsafe { count.write(list.len() as c_uint) };
        if list.is_empty() {
            return Err(NVML_ERROR_NOT_FOUND);
        }
        if samples.is_null() || cap < list.len() {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (k, p) in list.iter().enumerate() {
            let ts_us = (p.timestamp_ns + real.saturating_sub(mono)) / 1000;
            let s = nvmlProcessUtilizationSample_t {
                pid: p.pid,
                timeStamp: ts_us,
                smUtil: p.sm_util,
                memUtil: mem_util(p.sm_util),
                encUtil: 0,
                decUtil: 0,
            };
            // SAFETY: k < list.len() <= cap elements the caller provided.
            unsafe { samples.add(k).write_unaligned(s) };
        }
        Ok(())
    })
}

macro_rules! uint_query {
    ($name:ident, |$n:ident, $i:ident, $s:ident| $v:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dev: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
            #[allow(unused_variables)]
            // SAFETY: nvml.h contract: `out` is null or valid for an unsigned int.
            with(dev, |$n, $i, $s| unsafe { put(out, $v) })
        }
    };
}

uint_query!(nvmlDeviceGetMultiGpuBoard, |n, i, s| 0);
uint_query!(nvmlDeviceGetBrand, |n, i, s| NVML_BRAND_NVIDIA);
uint_query!(nvmlDeviceGetNumGpuCores, |n, i, s| s.sm_count
    * if s.cc_major == 8 && s.cc_minor == 0 {
        64
    } else {
        128
    });
uint_query!(
    nvmlDeviceGetArchitecture,
    |n, i, s| match (s.cc_major, s.cc_minor) {
        (7, 0..=2) => NVML_DEVICE_ARCH_VOLTA,
        (7, _) => NVML_DEVICE_ARCH_TURING,
        (8, 9) => NVML_DEVICE_ARCH_ADA,
        (8, _) => NVML_DEVICE_ARCH_AMPERE,
        (9, _) => NVML_DEVICE_ARCH_HOPPER,
        (10.., _) => NVML_DEVICE_ARCH_BLACKWELL,
        _ => 0xffff_ffff,
    }
);
uint_query!(nvmlDeviceGetBoardId, |n, i, s| 0x1800 + i);
uint_query!(nvmlDeviceGetPowerUsage, |n, i, s| 70_000
    + n.utilization(i) * 6_300);
uint_query!(nvmlDeviceGetEnforcedPowerLimit, |n, i, s| 700_000);
uint_query!(nvmlDeviceGetPowerManagementLimit, |n, i, s| 700_000);
uint_query!(nvmlDeviceGetPersistenceMode, |n, i, s| 1);
uint_query!(nvmlDeviceGetComputeMode, |n, i, s| 0);
uint_query!(nvmlDeviceGetPerformanceState, |n, i, s| 0);
uint_query!(nvmlDeviceGetDisplayMode, |n, i, s| 0);
uint_query!(nvmlDeviceGetDisplayActive, |n, i, s| 0);
uint_query!(nvmlDeviceGetCurrPcieLinkGeneration, |n, i, s| 5);
uint_query!(nvmlDeviceGetMaxPcieLinkGeneration, |n, i, s| 5);
uint_query!(nvmlDeviceGetCurrPcieLinkWidth, |n, i, s| 16);

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    dev: nvmlDevice_t,
    sensor: c_uint,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    with(dev, |n, i, _| {
        if sensor != NVML_TEMPERATURE_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: nvml.h contract: `temp` is null or valid.
        unsafe { put(temp, 33 + n.utilization(i) / 3) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    dev: nvmlDevice_t,
    mj: *mut u64,
) -> nvmlReturn_t {
    with(dev, |n, i, _| {
        // 70 W idle since the node's clock origin plus 630 W while busy, in millijoules
        let busy_ms = n.device_busy_ns(i) / 1_000_000;
        let up_ms = now_ns() / 1_000_000;
        // SAFETY: nvml.h contract: `mj` is null or valid.
        unsafe { put(mj, up_ms * 70 + busy_ms * 630) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    dev: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    with(dev, |_, _, _| {
        // SAFETY: nvml.h contract: each is null or valid.
        unsafe { put_pair(current, 0, pending, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    dev: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    with(dev, |_, _, _| {
        // SAFETY: nvml.h contract: each is null or valid.
        unsafe { put_pair(current, 1, pending, 1) }
    })
}

/// `nvmlDeviceGetClockInfo`: current clock in MHz, per `nvmlClockType_t` (graphics, SM, memory,
/// video). Graphics and SM clocks idle down when the engine has nothing to run, as on a GPU.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    dev: nvmlDevice_t,
    kind: c_uint,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    with(dev, |n, i, _| {
        let busy = n.utilization(i) > 0;
        let mhz = match kind {
            NVML_CLOCK_GRAPHICS | NVML_CLOCK_SM => {
                if busy {
                    1755
                } else {
                    345
                }
            }
            NVML_CLOCK_MEM => 2619,
            NVML_CLOCK_VIDEO => 1545,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        // SAFETY: nvml.h contract: `clock` is null or valid.
        unsafe { put(clock, mhz) }
    })
}

/// The video decoder's or encoder's utilisation: the simulator runs no video, so 0 % over
/// NVML's usual 167 ms sampling period.
fn codec_utilization(
    dev: nvmlDevice_t,
    utilization: *mut c_uint,
    period_us: *mut c_uint,
) -> nvmlReturn_t {
    with(dev, |_, _, _| {
        // SAFETY: nvml.h contract: each is null or valid.
        unsafe { put_pair(utilization, 0, period_us, 167_000) }
    })
}

/// `nvmlDeviceGetDecoderUtilization`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    dev: nvmlDevice_t,
    utilization: *mut c_uint,
    period_us: *mut c_uint,
) -> nvmlReturn_t {
    codec_utilization(dev, utilization, period_us)
}

/// `nvmlDeviceGetEncoderUtilization`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    dev: nvmlDevice_t,
    utilization: *mut c_uint,
    period_us: *mut c_uint,
) -> nvmlReturn_t {
    codec_utilization(dev, utilization, period_us)
}

/// `nvmlDeviceGetDriverModel`: Windows only (WDDM / TCC); on Linux the driver answers
/// `NVML_ERROR_NOT_SUPPORTED` for a valid device.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel(
    dev: nvmlDevice_t,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> nvmlReturn_t {
    with(dev, |_, _, _| Err(NVML_ERROR_NOT_SUPPORTED))
}

/// `nvmlDeviceGetFanSpeed`: data-centre GPUs are passively cooled and have no fan to report
/// (`nvidia-smi` shows `N/A`): `NVML_ERROR_NOT_SUPPORTED` for a valid device.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(
    dev: nvmlDevice_t,
    _speed: *mut c_uint,
) -> nvmlReturn_t {
    with(dev, |_, _, _| Err(NVML_ERROR_NOT_SUPPORTED))
}

/// `nvmlDeviceGetTotalEccErrors`: ECC is on (`nvmlDeviceGetEccMode`) and the simulated memory
/// never errs: 0 for corrected / uncorrected, volatile / aggregate counters.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    dev: nvmlDevice_t,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut u64,
) -> nvmlReturn_t {
    with(dev, |_, _, _| {
        if error_type > NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            || counter_type > NVML_AGGREGATE_ECC
            || count.is_null()
        {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; nvml.h contract.
        unsafe { put(count, 0u64) }
    })
}

/// `nvmlDeviceGetFanSpeed_v2` (one fan by index): not supported either, for the same reason.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    dev: nvmlDevice_t,
    _fan: c_uint,
    _speed: *mut c_uint,
) -> nvmlReturn_t {
    with(dev, |_, _, _| Err(NVML_ERROR_NOT_SUPPORTED))
}
