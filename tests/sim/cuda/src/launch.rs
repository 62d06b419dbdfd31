//! Kernel launches: `cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel` (and their
//! `_ptsz` variants), with the driver's validation of grid and block dimensions, dynamic shared
//! memory and cooperative grid size, and kernel parameters read the way the driver reads them:
//! `kernelParams` is an array of pointers to each parameter, or `extra` carries one packed buffer
//! (`CU_LAUNCH_PARAM_BUFFER_POINTER` / `CU_LAUNCH_PARAM_BUFFER_SIZE` / `CU_LAUNCH_PARAM_END`).
//! The launch itself only enqueues; the stream's worker runs the kernel on the shared engine.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Arc;

use gpuslice_cuda_abi::exec::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;

use crate::context;
use crate::device::rc;
use crate::graph::{self, NodeOp};
use crate::module::{self, Function};
use crate::stream;

/// Most resident blocks per SM (Hopper).
const MAX_BLOCKS_PER_SM: u64 = 32;
/// Most resident threads per SM (Hopper).
const MAX_THREADS_PER_SM: u64 = 2048;

/// Grid and block shape of a launch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub(crate) grid: [c_uint; 3],
    pub(crate) block: [c_uint; 3],
    pub(crate) shared_mem: c_uint,
}

/// Validates `dims` for `f` (`CUDA_ERROR_INVALID_VALUE` like the driver).
pub(crate) fn validate(f: &Function, dims: &Dims) -> Result<(), CUresult> {
    let [gx, gy, gz] = dims.grid;
    let [bx, by, bz] = dims.block;
    if [gx, gy, gz, bx, by, bz].contains(&0) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if gx > i32::MAX as c_uint || gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if u64::from(bx) * u64::from(by) * u64::from(bz) > 1024 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let max_smem = f
        .attrs
        .lock()
        .map(|a| a.max_dyn_smem)
        .unwrap_or(module::DEFAULT_MAX_DYN_SMEM);
    if i64::from(dims.shared_mem) > i64::from(max_smem) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Checks a cooperative grid fits on the device at once.
fn validate_cooperative(device: CUdevice, dims: &Dims) -> Result<(), CUresult> {
    let sms = u64::from(crate::device::spec(device)?.sm_count);
    let threads = dims
        .block
        .iter()
        .map(|&d| u64::from(d))
        .product::<u64>()
        .max(1);
    let per_sm = MAX_BLOCKS_PER_SM.min(MAX_THREADS_PER_SM / threads).max(1);
    let blocks = dims.grid.iter().map(|&d| u64::from(d)).product::<u64>();
    if blocks > sms * per_sm {
        return Err(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    }
    Ok(())
}

/// Reads the kernel's u64 parameter (0 for kernels without parameters).
///
/// # Safety
/// `params` / `extra` must be what the application passed to the launch call.
pub(crate) unsafe fn read_param(
    f: &Function,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Result<u64, CUresult> {
    let need = f.kind.param_bytes();
    if !params.is_null() && !extra.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if need == 0 {
        return Ok(0);
    }
    if !params.is_null() {
        // SAFETY: the driver contract: `kernelParams` has one pointer per kernel parameter.
        let p0 = unsafe { *params };
        if p0.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the parameter is a u64 the application owns; it may be unaligned.
        return Ok(unsafe { p0.cast::<u64>().read_unaligned() });
    }
    if extra.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut buf: *const u8 = std::ptr::null();
    let mut size: Option<usize> = None;
    let mut i = 0usize;
    loop {
        // SAFETY: the `extra` list is terminated by NULL / CU_LAUNCH_PARAM_END per the contract.
        let tag = unsafe { *extra.add(i) } as usize;
        match tag {
            CU_LAUNCH_PARAM_END => break,
            CU_LAUNCH_PARAM_BUFFER_POINTER => {
                // SAFETY: a tag is followed by its value entry.
                buf = unsafe { *extra.add(i + 1) }.cast::<u8>();
            }
            CU_LAUNCH_PARAM_BUFFER_SIZE => {
                // SAFETY: a tag is followed by its value entry, here a pointer to a size_t.
                let p = unsafe { *extra.add(i + 1) }.cast::<usize>();
                if p.is_null() {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                // SAFETY: non-null pointer to the application's size_t.
                size = Some(unsafe { p.read_unaligned() });
            }
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        i += 2;
        if i > 64 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    match size {
        Some(n) if !buf.is_null() && n >= need => {
            // SAFETY: the buffer holds at least `n >= 8` bytes of packed parameters.
            Ok(unsafe { buf.cast::<u64>().read_unaligned() })
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// Options of one launch beyond shape and parameters.
#[derive(Default)]
struct Extra {
    cooperative: bool,
    priority: Option<c_int>,
    completion_event: Option<CUevent>,
}

#[allow(clippy::too_many_arguments)]
fn launch(
    f: CUfunction,
    dims: Dims,
    h: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    opts: Extra,
    ptds: bool,
) -> Result<(), CUresult> {
    let ctx = context::current()?;
    let func: Arc<Function> = module::lookup_function(f)?;
    if matches!(func.ctx_id, Some(id) if id != ctx.id) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    validate(&func, &dims)?;
    module::load_on_first_launch(&func, &ctx)?;
    if opts.cooperative {
        validate_cooperative(ctx.device, &dims)?;
    }
    // SAFETY: `params` / `extra` come straight from the application's launch call.
    let p = unsafe { read_param(&func, params, extra) }?;
    let s = stream::resolve(h, ptds)?;
    let completion = match opts.completion_event {
        Some(e) => Some(crate::event::lookup(e)?),
        None => None,
    };
    graph::launch_op(
        &s,
        NodeOp::Kernel {
            duration_ns: func.kind.duration_ns(p),
            priority: opts.priority,
        },
    )?;
    if let Some(e) = completion {
        graph::launch_op(&s, NodeOp::EventRecord(e))?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn dims(
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
) -> Dims {
    Dims {
        grid: [gx, gy, gz],
        block: [bx, by, bz],
        shared_mem: smem,
    }
}

/// `cuLaunchKernel`.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    h: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let d = dims(gx, gy, gz, bx, by, bz, smem);
    rc(launch(f, d, h, params, extra, Extra::default(), false))
}

/// `cuLaunchKernel_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel_ptsz(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    h: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let d = dims(gx, gy, gz, bx, by, bz, smem);
    rc(launch(f, d, h, params, extra, Extra::default(), true))
}

/// `cuLaunchCooperativeKernel`: the whole grid must be resident at once.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    h: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    let d = dims(gx, gy, gz, bx, by, bz, smem);
    let o = Extra {
        cooperative: true,
        ..Extra::default()
    };
    rc(launch(f, d, h, params, std::ptr::null_mut(), o, false))
}

/// `cuLaunchCooperativeKernel_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchCooperativeKernel_ptsz(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    h: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    let d = dims(gx, gy, gz, bx, by, bz, smem);
    let o = Extra {
        cooperative: true,
        ..Extra::default()
    };
    rc(launch(f, d, h, params, std::ptr::null_mut(), o, true))
}

fn launch_ex(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    ptds: bool,
) -> Result<(), CUresult> {
    if config.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid CUlaunchConfig.
    let c = unsafe { config.read() };
    if c.num_attrs > 0 && c.attrs.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut o = Extra::default();
    for i in 0..c.num_attrs as usize {
        // SAFETY: `attrs` has `num_attrs` entries per the contract.
        let a = unsafe { c.attrs.add(i).read() };
        match a.id {
            CU_LAUNCH_ATTRIBUTE_COOPERATIVE => {
                // SAFETY: the id names the member the application wrote; plain data.
                o.cooperative = unsafe { a.value.cooperative } != 0
            }
            CU_LAUNCH_ATTRIBUTE_PRIORITY => {
                // SAFETY: the id names the member the application wrote; plain data.
                o.priority = Some(unsafe { a.value.priority })
            }
            CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT => {
                // SAFETY: the id names the member the application wrote; plain data.
                o.completion_event = Some(unsafe { a.value.event.event })
            }
            CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION => {
                // SAFETY: the id names the member the application wrote; plain data.
                let cd = unsafe { a.value.cluster_dim };
                if cd.contains(&0)
                    || cd.iter().map(|&d| u64::from(d)).product::<u64>() > 16
                    || c.grid_dim_x % cd[0] != 0
                    || c.grid_dim_y % cd[1] != 0
                    || c.grid_dim_z % cd[2] != 0
                {
                    return Err(CUDA_ERROR_INVALID_CLUSTER_SIZE);
                }
            }
            0..=CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
    let d = dims(
        c.grid_dim_x,
        c.grid_dim_y,
        c.grid_dim_z,
        c.block_dim_x,
        c.block_dim_y,
        c.block_dim_z,
        c.shared_mem_bytes,
    );
    launch(f, d, c.h_stream, params, extra, o, ptds)
}

/// `cuLaunchKernelEx`: attributes honoured: cooperative, priority, launch-completion event,
/// cluster dimension (validated); the other known attributes are accepted.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    rc(launch_ex(config, f, params, extra, false))
}

/// `cuLaunchKernelEx_ptsz`.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx_ptsz(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    rc(launch_ex(config, f, params, extra, true))
}
