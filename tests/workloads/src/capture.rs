//! The `capture` workload: a CUDA graph captured the way PyTorch's `torch.cuda.graph` does —
//! on a non-blocking stream, a side stream forked from it and joined back through events,
//! kernels on both, a memset, an allocation and free in the graph's pool — in each capture
//! mode, then replayed back to back. Prints `captured=<modes> graphs=<n> elapsed_s=… share=…`,
//! or fails naming the call the driver refused.

use crate::cli::keep_busy;
use crate::session::{Graph, Session, Stream};
use anyhow::{bail, Context, Result};
use gpuslice_cuda_abi::result::CUresult;
use gpuslice_cuda_abi::types::{CUdeviceptr, CUstream};
use std::ffi::{c_uint, c_void, CString};

const NON_BLOCKING: u32 = 1;
const DISABLE_TIMING: c_uint = 2;
const GRAPH_BYTES: usize = 1 << 20;

/// The capture entry points, beyond the session's table (`dlsym` of `libcuda.so.1`).
struct CaptureApi {
    begin: unsafe extern "C" fn(CUstream, c_uint) -> CUresult,
    end: unsafe extern "C" fn(CUstream, *mut *mut c_void) -> CUresult,
    wait_event: unsafe extern "C" fn(CUstream, *mut c_void, c_uint) -> CUresult,
    memset: unsafe extern "C" fn(CUdeviceptr, u32, usize, CUstream) -> CUresult,
    alloc_async: unsafe extern "C" fn(*mut CUdeviceptr, usize, CUstream) -> CUresult,
    free_async: unsafe extern "C" fn(CUdeviceptr, CUstream) -> CUresult,
    instantiate: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u64) -> CUresult,
}

/// `dlsym(h, name)` as the function-pointer type `F`.
///
/// # Safety
/// `F` must be the C signature of the driver function `name`.
unsafe fn sym<F: Copy>(h: *mut c_void, name: &str) -> Result<F> {
    let c = CString::new(name)?;
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    if p.is_null() {
        bail!("libcuda.so.1 has no {name}");
    }
    if std::mem::size_of::<F>() != std::mem::size_of::<*mut c_void>() {
        bail!("{name}: not a function pointer type");
    }
    // SAFETY: `F` is a function-pointer type of the pointer's size, the symbol's signature per
    // the caller.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

impl CaptureApi {
    fn load() -> Result<CaptureApi> {
        // SAFETY: a NUL-terminated soname; the library is already loaded by the session.
        let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
        if h.is_null() {
            bail!("dlopen(libcuda.so.1) failed");
        }
        // SAFETY: each name is the driver's entry point with the C signature of its field.
        unsafe {
            Ok(CaptureApi {
                begin: sym(h, "cuStreamBeginCapture_v2")?,
                end: sym(h, "cuStreamEndCapture")?,
                wait_event: sym(h, "cuStreamWaitEvent")?,
                memset: sym(h, "cuMemsetD32Async")?,
                alloc_async: sym(h, "cuMemAllocAsync")?,
                free_async: sym(h, "cuMemFreeAsync")?,
                instantiate: sym(h, "cuGraphInstantiateWithFlags")?,
            })
        }
    }
}

/// The capture modes `mode` names.
fn modes(mode: &str) -> Result<Vec<(&'static str, c_uint)>> {
    const ALL: [(&str, c_uint); 3] = [("global", 0), ("thread_local", 1), ("relaxed", 2)];
    if mode == "all" {
        return Ok(ALL.to_vec());
    }
    match ALL.iter().find(|m| m.0 == mode) {
        Some(m) => Ok(vec![*m]),
        None => bail!("unknown capture mode {mode:?}: global, thread_local, relaxed or all"),
    }
}

/// Captures one graph of `kernels` `spin(kernel_us)` in `mode` on `main`, forking `side`.
fn capture_one(
    s: &Session,
    api: &CaptureApi,
    (main, side): (Stream, Stream),
    mode: c_uint,
    kernels: usize,
    kernel_us: u64,
    buf: CUdeviceptr,
) -> Result<Graph> {
    let d = &s.drv;
    let (fork, join) = (event(s)?, event(s)?);
    s.sync(main)?;
    // SAFETY: live handles of this session and valid out-pointers; the graph allocation is
    // freed by the graph itself.
    unsafe {
        d.check("cuStreamBeginCapture_v2", (api.begin)(main.raw(), mode))?;
        d.check("cuMemsetD32Async", (api.memset)(buf, 0, 16, main.raw()))?;
        d.check("cuEventRecord(fork)", (d.event_record)(fork, main.raw()))?;
        d.check(
            "cuStreamWaitEvent(fork)",
            (api.wait_event)(side.raw(), fork, 0),
        )?;
        for i in 0..kernels {
            s.launch_spin(if i % 2 == 0 { main } else { side }, kernel_us)
                .with_context(|| format!("captured kernel {i}"))?;
        }
        let mut p: CUdeviceptr = 0;
        d.check(
            "cuMemAllocAsync",
            (api.alloc_async)(&mut p, GRAPH_BYTES, side.raw()),
        )?;
        d.check("cuMemFreeAsync", (api.free_async)(p, side.raw()))?;
        d.check("cuEventRecord(join)", (d.event_record)(join, side.raw()))?;
        d.check(
            "cuStreamWaitEvent(join)",
            (api.wait_event)(main.raw(), join, 0),
        )?;
        let mut g: *mut c_void = std::ptr::null_mut();
        d.check("cuStreamEndCapture", (api.end)(main.raw(), &mut g))?;
        let mut exec: *mut c_void = std::ptr::null_mut();
        d.check(
            "cuGraphInstantiateWithFlags",
            (api.instantiate)(&mut exec, g, 0),
        )?;
        Ok(Graph::from_raw(exec))
    }
}

fn event(s: &Session) -> Result<*mut c_void> {
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    s.drv.check("cuEventCreate", unsafe {
        (s.drv.event_create)(&mut e, DISABLE_TIMING)
    })?;
    Ok(e)
}

/// The `capture` command.
pub fn run(
    s: &Session,
    mode: &str,
    kernel_us: u64,
    kernels: usize,
    seconds: f64,
    depth: usize,
) -> Result<()> {
    let modes = modes(mode)?;
    if kernels == 0 {
        bail!("--kernels must be at least 1");
    }
    let api = CaptureApi::load()?;
    let (main, side) = (
        s.stream_with_flags(NON_BLOCKING)?,
        s.stream_with_flags(NON_BLOCKING)?,
    );
    let (r, buf) = s.try_alloc(64);
    s.drv.check("cuMemAlloc", r)?;
    let mut graphs = Vec::new();
    for (name, m) in &modes {
        let g = capture_one(s, &api, (main, side), *m, kernels, kernel_us, buf)
            .with_context(|| format!("capture in {name} mode"))?;
        graphs.push(g);
    }
    let mut next = 0;
    let per_graph = kernel_us * kernels as u64;
    let run = keep_busy(s, main, depth, seconds, per_graph, || {
        next = (next + 1) % graphs.len();
        s.launch_graph(graphs[next], main)
    })?;
    let names: Vec<&str> = modes.iter().map(|m| m.0).collect();
    println!(
        "captured={} graphs={} elapsed_s={:.3} share={:.4}",
        names.join(","),
        run.kernels,
        run.elapsed_s,
        run.share
    );
    Ok(())
}
