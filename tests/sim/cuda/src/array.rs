//! CUDA arrays, 3D arrays and mipmapped arrays.
//!
//! An array is charged `width * max(height,1) * max(depth,1) * element size` bytes (element size =
//! format size times channels; cubemaps have 6 faces per layer), rounded up to the allocation
//! granularity; a mipmapped array is charged the sum of all its levels, rounded once. The level
//! arrays of a mipmapped array charge nothing themselves and die with it.

use std::collections::HashMap;
use std::ffi::c_uint;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;

use crate::context;
use crate::device::{self, rc, round_up};

const ARRAY_HANDLE_BASE: u64 = 0x0a7a_0000_0000;
const MIPMAP_HANDLE_BASE: u64 = 0x0a7b_0000_0000;

#[derive(Clone, Copy)]
struct Array {
    desc: CUDA_ARRAY3D_DESCRIPTOR,
    /// Bytes of the array's own extent (for copy validation).
    bytes: u64,
    /// Bytes charged to the ground truth (0 for mipmap levels).
    charged: u64,
    phys: u32,
    ctx_id: u64,
    /// Owning mipmapped array id (levels cannot be destroyed on their own).
    mipmap: Option<u64>,
}

struct Mipmap {
    levels: Vec<u64>,
    charged: u64,
    phys: u32,
    ctx_id: u64,
}

#[derive(Default)]
struct Arrays {
    arrays: HashMap<u64, Array>,
    mipmaps: HashMap<u64, Mipmap>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn arrays() -> MutexGuard<'static, Arrays> {
    static A: OnceLock<Mutex<Arrays>> = OnceLock::new();
    A.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn array_id(h: CUarray) -> u64 {
    ((h as u64).wrapping_sub(ARRAY_HANDLE_BASE)) / 0x100
}

fn array_handle(id: u64) -> CUarray {
    (ARRAY_HANDLE_BASE + id * 0x100) as usize as CUarray
}

fn mipmap_id(h: CUmipmappedArray) -> u64 {
    ((h as u64).wrapping_sub(MIPMAP_HANDLE_BASE)) / 0x100
}

fn mipmap_handle(id: u64) -> CUmipmappedArray {
    (MIPMAP_HANDLE_BASE + id * 0x100) as usize as CUmipmappedArray
}

/// Bytes of the array's extent, for copy validation (`None`: not a live array).
pub(crate) fn array_bytes(h: CUarray) -> Option<u64> {
    arrays().arrays.get(&array_id(h)).map(|a| a.bytes)
}

/// Bytes of one element of `desc`, `None` if the format or channel count is invalid.
fn element_bytes(format: CUarray_format, channels: u32) -> Option<u64> {
    let per = array_format_bytes(format)?;
    let basic = matches!(
        format,
        CU_AD_FORMAT_UNSIGNED_INT8
            | CU_AD_FORMAT_UNSIGNED_INT16
            | CU_AD_FORMAT_UNSIGNED_INT32
            | CU_AD_FORMAT_SIGNED_INT8
            | CU_AD_FORMAT_SIGNED_INT16
            | CU_AD_FORMAT_SIGNED_INT32
            | CU_AD_FORMAT_HALF
            | CU_AD_FORMAT_FLOAT
    );
    if basic {
        matches!(channels, 1 | 2 | 4).then_some(per * u64::from(channels))
    } else {
        Some(per)
    }
}

/// Bytes of an array described by `d` (one level).
fn extent_bytes(d: &CUDA_ARRAY3D_DESCRIPTOR) -> Result<u64, CUresult> {
    let elem = element_bytes(d.Format, d.NumChannels).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if d.Width == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let known = CUDA_ARRAY3D_LAYERED
        | CUDA_ARRAY3D_SURFACE_LDST
        | CUDA_ARRAY3D_CUBEMAP
        | CUDA_ARRAY3D_TEXTURE_GATHER
        | CUDA_ARRAY3D_DEPTH_TEXTURE
        | CUDA_ARRAY3D_COLOR_ATTACHMENT
        | CUDA_ARRAY3D_SPARSE
        | CUDA_ARRAY3D_DEFERRED_MAPPING;
    if d.Flags & !known != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if d.Flags & CUDA_ARRAY3D_CUBEMAP != 0 {
        let layered = d.Flags & CUDA_ARRAY3D_LAYERED != 0;
        let ok = d.Width == d.Height
            && (if layered {
                d.Depth.is_multiple_of(6) && d.Depth > 0
            } else {
                d.Depth == 6
            });
        if !ok {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    if d.Height == 0 && d.Depth > 0 && d.Flags & CUDA_ARRAY3D_LAYERED == 0 {
        // A 3D array needs a height.
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    [d.Width, d.Height.max(1), d.Depth.max(1)]
        .iter()
        .try_fold(elem, |acc, v| acc.checked_mul(*v as u64))
        .ok_or(CUDA_ERROR_INVALID_VALUE)
}

fn charge(phys: u32, bytes: u64) -> Result<(), CUresult> {
    device::node()?
        .mem_alloc(phys, bytes)
        .map_err(|e| device::sim_err(&e))
}

fn uncharge(phys: u32, bytes: u64) {
    if let Ok(n) = device::node() {
        n.mem_free(phys, bytes);
    }
}

fn create(out: *mut CUarray, d: CUDA_ARRAY3D_DESCRIPTOR) -> Result<(), CUresult> {
    let ctx = context::current()?;
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let bytes = extent_bytes(&d)?;
    let charged = round_up(bytes, device::granularity());
    charge(ctx.phys, charged)?;
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    arrays().arrays.insert(
        id,
        Array {
            desc: d,
            bytes,
            charged,
            phys: ctx.phys,
            ctx_id: ctx.id,
            mipmap: None,
        },
    );
    // SAFETY: null-checked above.
    unsafe { out.write(array_handle(id)) };
    Ok(())
}

fn desc_2d(w: usize, h: usize, format: CUarray_format, ch: u32) -> CUDA_ARRAY3D_DESCRIPTOR {
    CUDA_ARRAY3D_DESCRIPTOR {
        Width: w,
        Height: h,
        Depth: 0,
        Format: format,
        NumChannels: ch,
        Flags: 0,
    }
}

/// `cuArrayCreate_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate_v2(
    handle: *mut CUarray,
    desc: *const CUDA_ARRAY_DESCRIPTOR,
) -> CUresult {
    if desc.is_null() {
        return context::current().err().unwrap_or(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid descriptor.
    let d = unsafe { desc.read() };
    rc(create(
        handle,
        desc_2d(d.Width, d.Height, d.Format, d.NumChannels),
    ))
}

/// `cuArrayCreate` (legacy 32-bit descriptor).
#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate(
    handle: *mut CUarray,
    desc: *const CUDA_ARRAY_DESCRIPTOR_v1,
) -> CUresult {
    if desc.is_null() {
        return context::current().err().unwrap_or(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid descriptor.
    let d = unsafe { desc.read() };
    rc(create(
        handle,
        desc_2d(d.Width as usize, d.Height as usize, d.Format, d.NumChannels),
    ))
}

/// `cuArray3DCreate_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate_v2(
    handle: *mut CUarray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
) -> CUresult {
    if desc.is_null() {
        return context::current().err().unwrap_or(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid descriptor.
    rc(create(handle, unsafe { desc.read() }))
}

/// `cuArray3DCreate` (legacy 32-bit descriptor).
#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate(
    handle: *mut CUarray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR_v1,
) -> CUresult {
    if desc.is_null() {
        return context::current().err().unwrap_or(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid descriptor.
    let d = unsafe { desc.read() };
    rc(create(
        handle,
        CUDA_ARRAY3D_DESCRIPTOR {
            Width: d.Width as usize,
            Height: d.Height as usize,
            Depth: d.Depth as usize,
            Format: d.Format,
            NumChannels: d.NumChannels,
            Flags: d.Flags,
        },
    ))
}

/// `cuArrayDestroy`.
#[no_mangle]
pub unsafe extern "C" fn cuArrayDestroy(h: CUarray) -> CUresult {
    let r = (|| {
        context::current()?;
        let mut a = arrays();
        let id = array_id(h);
        match a.arrays.get(&id) {
            Some(arr) if arr.mipmap.is_none() => {}
            Some(_) => return Err(CUDA_ERROR_INVALID_VALUE),
            None => return Err(CUDA_ERROR_INVALID_HANDLE),
        }
        let arr = a.arrays.remove(&id).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        drop(a);
        uncharge(arr.phys, arr.charged);
        Ok(())
    })();
    rc(r)
}

fn descriptor(h: CUarray) -> Result<CUDA_ARRAY3D_DESCRIPTOR, CUresult> {
    context::current()?;
    arrays()
        .arrays
        .get(&array_id(h))
        .map(|a| a.desc)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

/// `cuArrayGetDescriptor_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuArrayGetDescriptor_v2(
    out: *mut CUDA_ARRAY_DESCRIPTOR,
    h: CUarray,
) -> CUresult {
    let r = descriptor(h).and_then(|d| {
        if out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: null-checked above.
        unsafe {
            out.write(CUDA_ARRAY_DESCRIPTOR {
                Width: d.Width,
                Height: d.Height,
                Format: d.Format,
                NumChannels: d.NumChannels,
            })
        };
        Ok(())
    });
    rc(r)
}

/// `cuArrayGetDescriptor` (legacy 32-bit).
#[no_mangle]
pub unsafe extern "C" fn cuArrayGetDescriptor(
    out: *mut CUDA_ARRAY_DESCRIPTOR_v1,
    h: CUarray,
) -> CUresult {
    let r = descriptor(h).and_then(|d| {
        if out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: null-checked above.
        unsafe {
            out.write(CUDA_ARRAY_DESCRIPTOR_v1 {
                Width: d.Width as u32,
                Height: d.Height as u32,
                Format: d.Format,
                NumChannels: d.NumChannels,
            })
        };
        Ok(())
    });
    rc(r)
}

/// `cuArray3DGetDescriptor_v2`.
#[no_mangle]
pub unsafe extern "C" fn cuArray3DGetDescriptor_v2(
    out: *mut CUDA_ARRAY3D_DESCRIPTOR,
    h: CUarray,
) -> CUresult {
    match descriptor(h) {
        // SAFETY: `put` null-checks.
        Ok(d) => unsafe { device::put(out, d) },
        Err(e) => e,
    }
}

/// `cuArray3DGetDescriptor` (legacy 32-bit).
#[no_mangle]
pub unsafe extern "C" fn cuArray3DGetDescriptor(
    out: *mut CUDA_ARRAY3D_DESCRIPTOR_v1,
    h: CUarray,
) -> CUresult {
    match descriptor(h) {
        Ok(d) => {
            let v1 = CUDA_ARRAY3D_DESCRIPTOR_v1 {
                Width: d.Width as u32,
                Height: d.Height as u32,
                Depth: d.Depth as u32,
                Format: d.Format,
                NumChannels: d.NumChannels,
                Flags: d.Flags,
            };
            // SAFETY: `put` null-checks.
            unsafe { device::put(out, v1) }
        }
        Err(e) => e,
    }
}

/// The descriptor of mip level `l` of `d`.
fn level_desc(d: &CUDA_ARRAY3D_DESCRIPTOR, l: u32) -> CUDA_ARRAY3D_DESCRIPTOR {
    let shrink = |v: usize| if v == 0 { 0 } else { (v >> l).max(1) };
    let layered = d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP) != 0;
    CUDA_ARRAY3D_DESCRIPTOR {
        Width: shrink(d.Width),
        Height: shrink(d.Height),
        Depth: if layered { d.Depth } else { shrink(d.Depth) },
        ..*d
    }
}

/// `cuMipmappedArrayCreate`.
#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayCreate(
    handle: *mut CUmipmappedArray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    num_levels: c_uint,
) -> CUresult {
    let r = (|| {
        let ctx = context::current()?;
        if handle.is_null() || desc.is_null() || num_levels == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a valid descriptor.
        let d = unsafe { desc.read() };
        let layered = d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP) != 0;
        let largest = d
            .Width
            .max(d.Height)
            .max(if layered { 0 } else { d.Depth })
            .max(1);
        let max_levels = usize::BITS - largest.leading_zeros();
        if num_levels > max_levels {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut total = 0u64;
        let mut levels = Vec::new();
        for l in 0..num_levels {
            let ld = level_desc(&d, l);
            let b = extent_bytes(&ld)?;
            total = total.checked_add(b).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            levels.push((ld, b));
        }
        let charged = round_up(total, device::granularity());
        charge(ctx.phys, charged)?;
        let mid = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut a = arrays();
        let mut ids = Vec::new();
        for (ld, b) in levels {
            let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
            a.arrays.insert(
                id,
                Array {
                    desc: ld,
                    bytes: b,
                    charged: 0,
                    phys: ctx.phys,
                    ctx_id: ctx.id,
                    mipmap: Some(mid),
                },
            );
            ids.push(id);
        }
        a.mipmaps.insert(
            mid,
            Mipmap {
                levels: ids,
                charged,
                phys: ctx.phys,
                ctx_id: ctx.id,
            },
        );
        // SAFETY: null-checked above.
        unsafe { handle.write(mipmap_handle(mid)) };
        Ok(())
    })();
    rc(r)
}

/// `cuMipmappedArrayGetLevel`.
#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayGetLevel(
    level_array: *mut CUarray,
    mipmap: CUmipmappedArray,
    level: c_uint,
) -> CUresult {
    let r = (|| {
        context::current()?;
        if level_array.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let a = arrays();
        let m = a
            .mipmaps
            .get(&mipmap_id(mipmap))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let id = *m
            .levels
            .get(level as usize)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: null-checked above.
        unsafe { level_array.write(array_handle(id)) };
        Ok(())
    })();
    rc(r)
}

fn destroy_mipmap(a: &mut Arrays, id: u64) -> Option<(u32, u64)> {
    let m = a.mipmaps.remove(&id)?;
    for l in &m.levels {
        a.arrays.remove(l);
    }
    Some((m.phys, m.charged))
}

/// `cuMipmappedArrayDestroy`.
#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayDestroy(mipmap: CUmipmappedArray) -> CUresult {
    let r = (|| {
        context::current()?;
        let freed = destroy_mipmap(&mut arrays(), mipmap_id(mipmap));
        let (phys, charged) = freed.ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        uncharge(phys, charged);
        Ok(())
    })();
    rc(r)
}

/// A context died: its arrays and mipmapped arrays are freed.
pub(crate) fn release_context(ctx_id: u64) {
    let mut freed = Vec::new();
    {
        let mut a = arrays();
        let mids: Vec<u64> = a
            .mipmaps
            .iter()
            .filter(|(_, m)| m.ctx_id == ctx_id)
            .map(|(k, _)| *k)
            .collect();
        for mid in mids {
            freed.extend(destroy_mipmap(&mut a, mid));
        }
        let ids: Vec<u64> = a
            .arrays
            .iter()
            .filter(|(_, x)| x.ctx_id == ctx_id && x.mipmap.is_none())
            .map(|(k, _)| *k)
            .collect();
        for id in ids {
            if let Some(x) = a.arrays.remove(&id) {
                freed.push((x.phys, x.charged));
            }
        }
    }
    for (phys, charged) in freed {
        uncharge(phys, charged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_sizes() {
        let d = CUDA_ARRAY3D_DESCRIPTOR {
            Width: 1024,
            Height: 1024,
            Depth: 0,
            Format: CU_AD_FORMAT_FLOAT,
            NumChannels: 4,
            Flags: 0,
        };
        assert_eq!(extent_bytes(&d), Ok(16 << 20));
        let bad = CUDA_ARRAY3D_DESCRIPTOR {
            NumChannels: 3,
            ..d
        };
        assert_eq!(extent_bytes(&bad), Err(CUDA_ERROR_INVALID_VALUE));
        let l1 = level_desc(&d, 1);
        assert_eq!((l1.Width, l1.Height, l1.Depth), (512, 512, 0));
        let cube = CUDA_ARRAY3D_DESCRIPTOR {
            Depth: 6,
            Flags: CUDA_ARRAY3D_CUBEMAP,
            ..d
        };
        assert_eq!(extent_bytes(&cube), Ok(6 * (16 << 20)));
    }
}
