//! CUDA arrays: `cuArrayCreate(_v2)`, `cuArray3DCreate(_v2)`, `cuMipmappedArrayCreate` are charged
//! what the driver charges — element bytes (format size × channels; packed formats are one
//! element) × width × max(height, 1) × max(depth, 1), every mip level summed, rounded up to the
//! granularity once per array — before the driver is called; destroys return the charge.
//! A descriptor we cannot size (an unknown format) is left to the driver: it refuses it.

#![allow(non_snake_case)]

use crate::charge::{freed, gated};
use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use std::ffi::c_uint;

type R = CUresult;

/// Tag bits keeping array and mipmap handles apart from device addresses in the live table.
const ARRAY_TAG: u64 = 1 << 62;
const MIPMAP_TAG: u64 = 1 << 61;

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

/// Bytes of one level (`None`: a descriptor the driver will refuse or we cannot size).
pub fn extent_bytes(w: usize, h: usize, d: usize, format: CUarray_format, ch: u32) -> Option<u64> {
    let elem = element_bytes(format, ch)?;
    if w == 0 {
        return None;
    }
    [w, h.max(1), d.max(1)]
        .iter()
        .try_fold(elem, |acc, v| acc.checked_mul(*v as u64))
}

/// Bytes of a mipmapped array of `levels` levels (sum of every level).
pub fn mipmap_bytes(d: &CUDA_ARRAY3D_DESCRIPTOR, levels: u32) -> Option<u64> {
    let layered = d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP) != 0;
    let shrink = |v: usize, l: u32| if v == 0 { 0 } else { (v >> l).max(1) };
    (0..levels).try_fold(0u64, |acc, l| {
        let depth = if layered { d.Depth } else { shrink(d.Depth, l) };
        let b = extent_bytes(
            shrink(d.Width, l),
            shrink(d.Height, l),
            depth,
            d.Format,
            d.NumChannels,
        )?;
        acc.checked_add(b)
    })
}

/// Creates through `create` with `bytes` reserved first (unsized: pass-through).
fn create(bytes: Option<u64>, out: *mut usize, tag: u64, create: impl FnOnce() -> R) -> R {
    let Some(b) = bytes else {
        return create();
    };
    gated(b, || {
        let r = create();
        // SAFETY: on success the driver wrote the handle.
        let key = (r == CUDA_SUCCESS && !out.is_null()).then(|| unsafe { *out } as u64 | tag);
        (r, key)
    })
}

/// `cuArrayCreate_v2`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuArrayCreate_v2(h: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR) -> R {
    // SAFETY: null or the caller's descriptor.
    let bytes = unsafe { d.as_ref() }
        .and_then(|d| extent_bytes(d.Width, d.Height, 0, d.Format, d.NumChannels));
    create(bytes, h.cast(), ARRAY_TAG, || call!(cuArrayCreate_v2; h, d))
}

/// `cuArrayCreate` (32-bit descriptor).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuArrayCreate(h: *mut CUarray, d: *const CUDA_ARRAY_DESCRIPTOR_v1) -> R {
    // SAFETY: null or the caller's descriptor.
    let bytes = unsafe { d.as_ref() }.and_then(|d| {
        extent_bytes(
            d.Width as usize,
            d.Height as usize,
            0,
            d.Format,
            d.NumChannels,
        )
    });
    create(bytes, h.cast(), ARRAY_TAG, || call!(cuArrayCreate; h, d))
}

/// `cuArray3DCreate_v2` (cubemaps: depth holds the 6 faces per layer).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuArray3DCreate_v2(h: *mut CUarray, d: *const CUDA_ARRAY3D_DESCRIPTOR) -> R {
    // SAFETY: null or the caller's descriptor.
    let bytes = unsafe { d.as_ref() }
        .and_then(|d| extent_bytes(d.Width, d.Height, d.Depth, d.Format, d.NumChannels));
    create(
        bytes,
        h.cast(),
        ARRAY_TAG,
        || call!(cuArray3DCreate_v2; h, d),
    )
}

/// `cuArray3DCreate` (32-bit descriptor).
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuArray3DCreate(h: *mut CUarray, d: *const CUDA_ARRAY3D_DESCRIPTOR_v1) -> R {
    // SAFETY: null or the caller's descriptor.
    let bytes = unsafe { d.as_ref() }.and_then(|d| {
        extent_bytes(
            d.Width as usize,
            d.Height as usize,
            d.Depth as usize,
            d.Format,
            d.NumChannels,
        )
    });
    create(bytes, h.cast(), ARRAY_TAG, || call!(cuArray3DCreate; h, d))
}

/// `cuArrayDestroy`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuArrayDestroy(h: CUarray) -> R {
    freed(h as u64 | ARRAY_TAG, || call!(cuArrayDestroy; h))
}

/// `cuMipmappedArrayCreate`: every level is charged, rounded once.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMipmappedArrayCreate(
    h: *mut CUmipmappedArray,
    d: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: c_uint,
) -> R {
    // SAFETY: null or the caller's descriptor.
    let bytes = unsafe { d.as_ref() }.and_then(|d| mipmap_bytes(d, levels));
    create(
        bytes,
        h.cast(),
        MIPMAP_TAG,
        || call!(cuMipmappedArrayCreate; h, d, levels),
    )
}

/// `cuMipmappedArrayDestroy`.
///
/// # Safety
/// The driver's contract for the function of this name.
pub(crate) unsafe fn cuMipmappedArrayDestroy(h: CUmipmappedArray) -> R {
    freed(h as u64 | MIPMAP_TAG, || call!(cuMipmappedArrayDestroy; h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_the_driver_rule() {
        assert_eq!(
            extent_bytes(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 4),
            Some(16 << 20)
        );
        assert_eq!(extent_bytes(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 3), None);
        assert_eq!(extent_bytes(0, 4, 0, CU_AD_FORMAT_FLOAT, 1), None);
        let d = CUDA_ARRAY3D_DESCRIPTOR {
            Width: 1024,
            Height: 1024,
            Depth: 0,
            Format: CU_AD_FORMAT_UNSIGNED_INT8,
            NumChannels: 1,
            Flags: 0,
        };
        // 1 MiB + 256 KiB + 64 KiB
        assert_eq!(mipmap_bytes(&d, 3), Some((1 << 20) + (1 << 18) + (1 << 16)));
    }
}
