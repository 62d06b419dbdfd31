//! Export name → our wrapper, for `dlsym`/`dlvsym` and `cuGetProcAddress`.

use std::ffi::c_void;

macro_rules! table {
    ($($m:ident :: $f:ident),* $(,)?) => {
        /// Our wrapper for the exported symbol `name`, if we wrap it.
        pub fn lookup(name: &[u8]) -> Option<*mut c_void> {
            $(
                if name == stringify!($f).as_bytes() {
                    return Some(crate::$m::$f as *mut c_void);
                }
            )*
            None
        }
        /// Every symbol we wrap.
        pub const WRAPPED: &[&str] = &[$(stringify!($f)),*];
    };
}

table! {
    cuda::cuMemAlloc, cuda::cuMemAlloc_v2, cuda::cuMemAllocManaged,
    cuda::cuMemAllocPitch, cuda::cuMemAllocPitch_v2,
    cuda::cuMemFree, cuda::cuMemFree_v2,
    cuda::cuMemGetInfo, cuda::cuMemGetInfo_v2,
    cuda::cuDeviceTotalMem, cuda::cuDeviceTotalMem_v2,
    cuda::cuMemAllocAsync, cuda::cuMemAllocAsync_ptsz,
    cuda::cuMemAllocFromPoolAsync, cuda::cuMemAllocFromPoolAsync_ptsz,
    cuda::cuMemPoolTrimTo, cuda::cuMemPoolDestroy,
    cuda::cuMemCreate, cuda::cuMemRelease,
    cuda::cuLaunchKernel, cuda::cuLaunchKernel_ptsz,
    cuda::cuGetProcAddress, cuda::cuGetProcAddress_v2,
    nvml::nvmlDeviceGetMemoryInfo, nvml::nvmlDeviceGetMemoryInfo_v2,
}
