//! NVML process lists in the slice's view: `nvmlDeviceGetComputeRunningProcesses` (`_v2`,
//! `_v3`), `…GraphicsRunningProcesses` (`_v2`, `_v3`), `nvmlDeviceGetMPSComputeRunningProcesses_v3`
//! and `nvmlDeviceGetProcessUtilization` list only the slice's own processes: this process and
//! the live processes with a record in the slice's `usage` file. Other tenants' pids, memory use
//! and utilisation are not shown (`nvidia-smi` in a slice sees its own processes only).
//!
//! This is a courtesy to cooperating programs, not a security boundary: a tenant that bypasses
//! the interposer calls NVML directly and sees the whole device (`docs/threat-model.md`).
//!
//! The real list is fetched into our own buffer (retrying while it grows), filtered, then copied
//! out under NVML's count contract: too small a buffer gets `NVML_ERROR_INSUFFICIENT_SIZE` with
//! the filtered count.

#![allow(non_snake_case)]

use crate::guard;
use crate::state::memory_gate;
use gpuslice_cuda_abi::nvml::*;
use gpuslice_region::layout::{rec_unpack, REC_CLAIMING, REC_LIVE};
use gpuslice_region::protocol::Ledger;
use gpuslice_region::MAX_PROCS;
use std::collections::HashSet;
use std::ffi::c_uint;
use std::sync::atomic::Ordering;

pub use gpuslice_cuda_abi::nvml::{nvmlProcessInfo_v1_t, nvmlProcessUtilizationSample_t};

const _: () = assert!(std::mem::size_of::<nvmlProcessInfo_v1_t>() == 16);
const _: () = assert!(std::mem::size_of::<nvmlProcessInfo_t>() == 24);
const _: () = assert!(std::mem::size_of::<nvmlProcessUtilizationSample_t>() == 32);

/// Something with a pid.
trait HasPid: Copy + Default {
    fn pid(&self) -> u32;
    /// Caps the memory figure, where the entry has one, at `max`.
    fn clamp_used(&mut self, _max: u64) {}
}
impl HasPid for nvmlProcessInfo_v1_t {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn clamp_used(&mut self, max: u64) {
        self.usedGpuMemory = self.usedGpuMemory.min(max);
    }
}
impl HasPid for nvmlProcessInfo_t {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn clamp_used(&mut self, max: u64) {
        self.usedGpuMemory = self.usedGpuMemory.min(max);
    }
}
impl HasPid for nvmlProcessUtilizationSample_t {
    fn pid(&self) -> u32 {
        self.pid
    }
}

/// The slice's own pids (`None`: no slice, pass the list through).
pub(crate) fn own_pids() -> Option<HashSet<u32>> {
    let g = memory_gate()?;
    let mut set = HashSet::new();
    set.insert(std::process::id());
    let usage = &g.slice.usage;
    for rec in 0..MAX_PROCS {
        let (st, pid) = rec_unpack(usage.state(rec).load(Ordering::Acquire));
        if (st == REC_LIVE || st == REC_CLAIMING) && pid != 0 {
            set.insert(pid);
        }
    }
    Some(set)
}

/// How many extra entries to ask for beyond the count NVML last gave (processes come and go).
const SLACK: c_uint = 8;

/// The most entries fetched (a bound on the allocation a hostile count could ask for).
const MAX_LIST: c_uint = 1 << 16;

/// Fetches the whole real list with `fetch(count, buf)`, keeps the entries whose pid `keep`
/// accepts and copies them out to `count` / `out`. `empty` is what an empty result returns
/// (`NVML_SUCCESS` for process lists, `NVML_ERROR_NOT_FOUND` for utilisation samples).
///
/// # Safety
/// `count` and `out` follow NVML's contract (`out` holds `*count` elements when non-null).
unsafe fn filtered<T: HasPid>(
    count: *mut c_uint,
    out: *mut T,
    keep: &HashSet<u32>,
    max_used: Option<u64>,
    empty: nvmlReturn_t,
    fetch: impl Fn(*mut c_uint, *mut T) -> nvmlReturn_t,
) -> nvmlReturn_t {
    if count.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    let mut list: Vec<T> = Vec::new();
    let mut tries = 0;
    loop {
        let mut n: c_uint = 0;
        let r = fetch(&mut n, std::ptr::null_mut());
        if r == NVML_SUCCESS || r == NVML_ERROR_NOT_FOUND {
            break;
        }
        if r != NVML_ERROR_INSUFFICIENT_SIZE {
            return r;
        }
        let mut mc = n.saturating_add(SLACK).min(MAX_LIST);
        let m = mc as usize;
        list = vec![T::default(); m];
        let r = fetch(&mut mc, list.as_mut_ptr());
        if r == NVML_SUCCESS {
            list.truncate((mc as usize).min(m));
            break;
        }
        list.clear();
        if r == NVML_ERROR_NOT_FOUND {
            break;
        }
        tries += 1;
        if r != NVML_ERROR_INSUFFICIENT_SIZE || tries >= 4 {
            return r;
        }
    }
    list.retain(|e| keep.contains(&e.pid()));
    // A process never shows more than the slice's total (its context is on top of what the
    // slice may allocate on real GPUs, and tools print the two side by side).
    if let Some(max) = max_used {
        list.iter_mut().for_each(|e| e.clamp_used(max));
    }
    // SAFETY: non-null (checked); NVML contract: it holds the caller's capacity.
    let cap = unsafe { count.read() } as usize;
    // SAFETY: as above.
    // (At most `MAX_LIST` entries, so it fits; were it not to, `c_uint::MAX` exceeds any
    // capacity and the call below answers INSUFFICIENT_SIZE.)
    unsafe { count.write(c_uint::try_from(list.len()).unwrap_or(c_uint::MAX)) };
    if list.is_empty() {
        return empty;
    }
    if out.is_null() || cap < list.len() {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (k, e) in list.iter().enumerate() {
        // SAFETY: k < list.len() <= cap elements the caller provided.
        unsafe { out.add(k).write_unaligned(*e) };
    }
    NVML_SUCCESS
}

macro_rules! process_list {
    ($name:ident, $t:ty) => {
        /// The NVML function of the same name, listing only the slice's processes.
        ///
        /// # Safety
        /// NVML's contract for the function of this name.
        pub(crate) unsafe fn $name(
            device: nvmlDevice_t,
            count: *mut c_uint,
            infos: *mut $t,
        ) -> nvmlReturn_t {
            let Some(f) = crate::real!(nvml_sym $name)
            else {
                return NVML_ERROR_LIBRARY_NOT_FOUND;
            };
            let own = guard::enter().and_then(|_g| own_pids());
            match own {
                // SAFETY: forwarding the caller's arguments to the real function.
                None => unsafe { f(device, count, infos) },
                // SAFETY: the caller's count / infos under NVML's contract; `fetch` passes our
                // own buffer and its length to the real function.
                Some(own) => unsafe {
                    let max = crate::nvml::slice_total(device);
                    filtered(count, infos, &own, max, NVML_SUCCESS, |c, b| f(device, c, b))
                },
            }
        }
    };
}

process_list!(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t);
process_list!(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_t);
process_list!(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t);
process_list!(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t);
process_list!(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_t);
process_list!(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t);
process_list!(
    nvmlDeviceGetMPSComputeRunningProcesses_v3,
    nvmlProcessInfo_t
);

/// `nvmlDeviceGetProcessUtilization`, sampling only the slice's processes.
///
/// # Safety
/// NVML's contract for the function of this name.
pub(crate) unsafe fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    samples: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: u64,
) -> nvmlReturn_t {
    let Some(f) = crate::real!(nvml_sym nvmlDeviceGetProcessUtilization) else {
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    };
    let own = guard::enter().and_then(|_g| own_pids());
    match own {
        // SAFETY: forwarding the caller's arguments to the real function.
        None => unsafe { f(device, samples, count, last_seen) },
        // SAFETY: as for the process lists.
        Some(own) => unsafe {
            filtered(count, samples, &own, None, NVML_ERROR_NOT_FOUND, |c, b| {
                f(device, b, c, last_seen)
            })
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(
        all: Vec<nvmlProcessInfo_t>,
    ) -> impl Fn(*mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t {
        move |c, b| {
            // SAFETY: test-only fake following NVML's contract.
            let cap = unsafe { c.read() } as usize;
            // SAFETY: as above.
            unsafe { c.write(c_uint::try_from(all.len()).unwrap()) };
            if b.is_null() || cap < all.len() {
                return if all.is_empty() {
                    NVML_SUCCESS
                } else {
                    NVML_ERROR_INSUFFICIENT_SIZE
                };
            }
            for (k, e) in all.iter().enumerate() {
                // SAFETY: k < cap.
                unsafe { b.add(k).write(*e) };
            }
            NVML_SUCCESS
        }
    }

    fn p(pid: u32) -> nvmlProcessInfo_t {
        nvmlProcessInfo_t {
            pid,
            usedGpuMemory: u64::from(pid) << 20,
            ..Default::default()
        }
    }

    #[test]
    fn keeps_own_pids_and_honours_the_count_contract() {
        let keep: HashSet<u32> = [2, 4].into_iter().collect();
        let f = fake(vec![p(1), p(2), p(3), p(4)]);
        // Probe: count 0, null buffer → the filtered count.
        let mut n: c_uint = 0;
        // SAFETY: valid count, null buffer.
        let r = unsafe { filtered(&mut n, std::ptr::null_mut(), &keep, None, NVML_SUCCESS, &f) };
        assert_eq!((r, n), (NVML_ERROR_INSUFFICIENT_SIZE, 2));
        // A buffer of exactly the filtered size suffices (the real list has 4).
        let mut buf = [nvmlProcessInfo_t::default(); 2];
        let mut n: c_uint = 2;
        // SAFETY: buf holds n elements.
        let r = unsafe { filtered(&mut n, buf.as_mut_ptr(), &keep, None, NVML_SUCCESS, &f) };
        assert_eq!((r, n), (NVML_SUCCESS, 2));
        assert_eq!(buf, [p(2), p(4)]);
        // Nothing of ours: success with count 0.
        let none: HashSet<u32> = [9].into_iter().collect();
        let mut n: c_uint = 2;
        // SAFETY: as above.
        let r = unsafe { filtered(&mut n, buf.as_mut_ptr(), &none, None, NVML_SUCCESS, &f) };
        assert_eq!((r, n), (NVML_SUCCESS, 0));
    }

    #[test]
    fn memory_figures_are_capped_at_the_slice_total() {
        let f = fake(vec![
            nvmlProcessInfo_t {
                pid: 1,
                usedGpuMemory: 900,
                ..Default::default()
            },
            nvmlProcessInfo_t {
                pid: 2,
                usedGpuMemory: 100,
                ..Default::default()
            },
        ]);
        let keep: HashSet<u32> = [1, 2].into_iter().collect();
        let mut buf = [nvmlProcessInfo_t::default(); 4];
        let mut n: c_uint = 4;
        // SAFETY: `buf` holds `n` entries.
        let r = unsafe { filtered(&mut n, buf.as_mut_ptr(), &keep, Some(512), NVML_SUCCESS, &f) };
        assert_eq!(r, NVML_SUCCESS);
        assert_eq!((buf[0].usedGpuMemory, buf[1].usedGpuMemory), (512, 100));
    }

    #[test]
    fn errors_pass_through() {
        let keep: HashSet<u32> = [1].into_iter().collect();
        let mut n: c_uint = 0;
        // SAFETY: valid count; the fetch never touches the buffer.
        let r = unsafe {
            filtered::<nvmlProcessInfo_t>(
                &mut n,
                std::ptr::null_mut(),
                &keep,
                None,
                NVML_SUCCESS,
                |_, _| NVML_ERROR_INVALID_ARGUMENT,
            )
        };
        assert_eq!(r, NVML_ERROR_INVALID_ARGUMENT);
        // SAFETY: a null count is refused before any use.
        let r = unsafe {
            filtered::<nvmlProcessInfo_t>(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &keep,
                None,
                NVML_SUCCESS,
                |_, _| NVML_SUCCESS,
            )
        };
        assert_eq!(r, NVML_ERROR_INVALID_ARGUMENT);
    }
}
