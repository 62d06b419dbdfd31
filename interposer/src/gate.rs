//! Launch gate hooks called by every launch wrapper (`crate::launch`). These are pass-through
//! placeholders: the issue-4 lease gate replaces their bodies (a slice may launch only while it
//! holds the GPU's lease). The fast path must stay one atomic load with no allocation, lock,
//! syscall, `getenv` or logging.

use gpuslice_cuda_abi::result::CUresult;
use gpuslice_cuda_abi::types::CUstream;

/// Called before the real launch; `Err` is returned to the caller instead of launching.
#[inline(always)]
pub(crate) fn before_launch(_stream: CUstream) -> Result<(), CUresult> {
    Ok(())
}

/// Called after the real launch returned.
#[inline(always)]
pub(crate) fn after_launch(_stream: CUstream) {}
