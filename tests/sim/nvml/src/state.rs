//! Library state: the init reference count, the device handle table, argument helpers.

use std::ffi::{c_char, c_uint};
use std::sync::atomic::{AtomicU32, Ordering};

use gpuslice_sim_core::{Node, MAX_DEVICES};

use crate::types::*;

/// `nvmlInit*` calls minus `nvmlShutdown` calls.
static REFS: AtomicU32 = AtomicU32::new(0);

const fn handle_table() -> [nvmlDevice_st; MAX_DEVICES] {
    let mut t = [const { nvmlDevice_st { index: 0 } }; MAX_DEVICES];
    let mut i = 0;
    while i < MAX_DEVICES {
        t[i].index = i as u32;
        i += 1;
    }
    t
}

/// Handles are pointers into this table.
static HANDLES: [nvmlDevice_st; MAX_DEVICES] = handle_table();

/// Result of an NVML call body; `Err` carries the return code.
pub type R = Result<(), nvmlReturn_t>;

/// Converts a call body's result to the C return code.
pub fn code(r: R) -> nvmlReturn_t {
    match r {
        Ok(()) => NVML_SUCCESS,
        Err(c) => c,
    }
}

/// Attaches the simulated node and takes a reference.
pub fn init() -> R {
    match Node::global() {
        Ok(_) => {
            REFS.fetch_add(1, Ordering::AcqRel);
            Ok(())
        }
        Err(e) => {
            eprintln!("libnvidia-ml (gpuslice simulator): {e}");
            Err(NVML_ERROR_DRIVER_NOT_LOADED)
        }
    }
}

/// Drops a reference; `NVML_ERROR_UNINITIALIZED` if there is none.
pub fn shutdown() -> R {
    REFS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1))
        .map(|_| ())
        .map_err(|_| NVML_ERROR_UNINITIALIZED)
}

/// The node, if the library is initialised.
pub fn node() -> Result<&'static Node, nvmlReturn_t> {
    if REFS.load(Ordering::Acquire) == 0 {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    Node::global().map_err(|_| NVML_ERROR_UNINITIALIZED)
}

/// The handle of device `index`.
pub fn handle(index: u32) -> nvmlDevice_t {
    &HANDLES[index as usize % MAX_DEVICES]
}

/// The node and device index behind `h`, validating that it points into the handle table.
pub fn device(h: nvmlDevice_t) -> Result<(&'static Node, u32), nvmlReturn_t> {
    let node = node()?;
    let base = HANDLES.as_ptr() as usize;
    let size = std::mem::size_of::<nvmlDevice_st>();
    let addr = h as usize;
    if addr < base || addr >= base + MAX_DEVICES * size || !(addr - base).is_multiple_of(size) {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let index = ((addr - base) / size) as u32;
    if index >= node.device_count() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok((node, index))
}

/// Stores `v` through `p`.
///
/// # Safety
/// `p` must be null or valid for writing a `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> R {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and the caller guarantees it is valid for a write of T.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Writes `va` to `a` and `vb` to `b`, or neither when either is null
/// (`NVML_ERROR_INVALID_ARGUMENT`): the (current, pending)-style out-parameter pairs.
///
/// # Safety
/// Each pointer must be null or valid for a write of `T`.
pub unsafe fn put_pair<T>(a: *mut T, va: T, b: *mut T, vb: T) -> R {
    if a.is_null() || b.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: both non-null; the caller guarantees they are valid for writes.
    unsafe {
        put(a, va)?;
        put(b, vb)
    }
}

/// Copies `s` NUL-terminated into `buf` of `len` bytes; `NVML_ERROR_INSUFFICIENT_SIZE` if it
/// does not fit.
///
/// # Safety
/// `buf` must be null or valid for writing `len` bytes.
pub unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> R {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if (len as usize) < bytes.len() + 1 {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` has room for len >= bytes.len() + 1 bytes (caller contract + check above);
    // the source is a distinct Rust string.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// Copies `s` NUL-terminated into a fixed array, truncating.
pub fn fill(dst: &mut [u8], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
    dst[n..].fill(0);
}

/// Parses `domain:bus:device.function` (hex; 4- or 8-digit domain) into its numbers.
pub fn parse_bus_id(s: &str) -> Option<(u32, u32, u32)> {
    let s = s.trim();
    let (dom, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let h = |x: &str| u32::from_str_radix(x, 16).ok();
    let _ = h(func)?;
    Some((h(dom)?, h(bus)?, h(dev)?))
}
