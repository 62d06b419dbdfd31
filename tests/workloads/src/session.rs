//! A CUDA session on one device: init, primary context, the simulator's kernel module, and the
//! small operations workloads are built from (spin launches, events, allocations).

use crate::driver::{CUevent, Driver};
use anyhow::{bail, Result};
use gpuslice_cuda_abi::result::{CUresult, CUDA_ERROR_NOT_READY, CUDA_SUCCESS};
use gpuslice_cuda_abi::types::{CUcontext, CUdevice, CUdeviceptr, CUfunction, CUmodule, CUstream};
use std::ffi::{c_char, c_void, CStr};

/// An initialised driver with a current primary context on `device`.
pub struct Session {
    pub drv: Driver,
    pub device: CUdevice,
    ctx: CUcontext,
    spin: CUfunction,
}

// SAFETY: CUDA handles may be used from any thread once a context is made current on that thread;
// `Session::bind_thread` does exactly that before use on another thread.
unsafe impl Send for Session {}
// SAFETY: as above; the driver API is thread-safe.
unsafe impl Sync for Session {}

/// A stream created by a session (the handle stays inside so callers cannot pass a stray pointer).
#[derive(Clone, Copy)]
pub struct Stream(CUstream);

/// An executable graph created by a session.
#[derive(Clone, Copy)]
pub struct Graph(*mut c_void);

/// A timing event created by a session.
#[derive(Clone, Copy)]
pub struct Event(CUevent);

impl Stream {
    /// The driver's handle (for calls outside the session's table).
    pub fn raw(self) -> CUstream {
        self.0
    }
}

impl Event {
    /// The driver's handle (for calls outside the session's table).
    pub fn raw(self) -> CUevent {
        self.0
    }
}

impl Graph {
    /// An executable graph the driver returned outside the session's table.
    pub fn from_raw(exec: *mut c_void) -> Graph {
        Graph(exec)
    }
}

// SAFETY: driver handles are plain identifiers usable from any thread of the process.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Send for Event {}

/// A PTX-like image; the simulator accepts any image and exposes its built-in kernels.
const IMAGE: &CStr =
    c".version 8.0\n.target sm_90\n.visible .entry spin(.param .u64 us) { ret; }\n";

impl Session {
    /// cuInit, device `ordinal`, its primary context made current, and the `spin` kernel.
    pub fn open(drv: Driver, ordinal: i32) -> Result<Session> {
        // SAFETY: cuInit takes flags by value.
        drv.check("cuInit", unsafe { (drv.init)(0) })?;
        let mut device: CUdevice = 0;
        // SAFETY: valid out-pointer to a local.
        drv.check("cuDeviceGet", unsafe {
            (drv.device_get)(&mut device, ordinal)
        })?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer; `device` came from cuDeviceGet.
        let r = unsafe { (drv.primary_ctx_retain)(&mut ctx, device) };
        drv.check("cuDevicePrimaryCtxRetain", r)?;
        // SAFETY: `ctx` is the primary context just retained.
        drv.check("cuCtxSetCurrent", unsafe { (drv.ctx_set_current)(ctx) })?;
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: valid out-pointer; IMAGE is a NUL-terminated image that outlives the call.
        let r = unsafe { (drv.module_load_data)(&mut module, IMAGE.as_ptr().cast()) };
        drv.check("cuModuleLoadData", r)?;
        let mut spin: CUfunction = std::ptr::null_mut();
        // SAFETY: valid out-pointer, live module, NUL-terminated name.
        let r = unsafe { (drv.module_get_function)(&mut spin, module, c"spin".as_ptr()) };
        drv.check("cuModuleGetFunction(spin)", r)?;
        Ok(Session {
            drv,
            device,
            ctx,
            spin,
        })
    }

    /// Makes this session's context current on the calling thread.
    pub fn bind_thread(&self) -> Result<()> {
        // SAFETY: ctx is the retained primary context of this session.
        self.drv.check("cuCtxSetCurrent", unsafe {
            (self.drv.ctx_set_current)(self.ctx)
        })
    }

    /// Device name from cuDeviceGetName.
    pub fn device_name(&self) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: buffer and its length match.
        self.drv.check("cuDeviceGetName", unsafe {
            (self.drv.device_get_name)(buf.as_mut_ptr(), buf.len() as i32, self.device)
        })?;
        // SAFETY: the driver NUL-terminates within the buffer.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// cuDeviceTotalMem_v2.
    pub fn total_mem(&self) -> Result<u64> {
        let mut t = 0usize;
        // SAFETY: valid out-pointer.
        self.drv.check("cuDeviceTotalMem", unsafe {
            (self.drv.device_total_mem)(&mut t, self.device)
        })?;
        Ok(t as u64)
    }

    /// cuMemGetInfo_v2 → (free, total).
    pub fn mem_info(&self) -> Result<(u64, u64)> {
        let (mut f, mut t) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        self.drv.check("cuMemGetInfo", unsafe {
            (self.drv.mem_get_info)(&mut f, &mut t)
        })?;
        Ok((f as u64, t as u64))
    }

    /// cuMemAlloc_v2; returns the raw result so callers can tell OOM from other failures.
    pub fn try_alloc(&self, bytes: u64) -> (CUresult, CUdeviceptr) {
        let mut p: CUdeviceptr = 0;
        // SAFETY: valid out-pointer.
        let r = unsafe { (self.drv.mem_alloc)(&mut p, bytes as usize) };
        (r, p)
    }

    /// cuMemFree_v2.
    pub fn free(&self, p: CUdeviceptr) -> Result<()> {
        // SAFETY: `p` came from cuMemAlloc in this process.
        self.drv
            .check("cuMemFree", unsafe { (self.drv.mem_free)(p) })
    }

    /// A new stream (flags 0: blocking with respect to the legacy default stream).
    pub fn stream(&self) -> Result<Stream> {
        let mut s: CUstream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        self.drv.check("cuStreamCreate", unsafe {
            (self.drv.stream_create)(&mut s, 0)
        })?;
        Ok(Stream(s))
    }

    /// A new stream with `flags` (`CU_STREAM_NON_BLOCKING` = 1: PyTorch's side streams).
    pub fn stream_with_flags(&self, flags: u32) -> Result<Stream> {
        let mut s: CUstream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        self.drv.check("cuStreamCreate", unsafe {
            (self.drv.stream_create)(&mut s, flags)
        })?;
        Ok(Stream(s))
    }

    /// Enqueues `spin(us)` on `stream` (one block of one thread; the simulator times it).
    pub fn launch_spin(&self, stream: Stream, us: u64) -> Result<()> {
        let mut arg = us;
        let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
        // SAFETY: kernelParams is an array of pointers to each parameter, as the driver expects;
        // `arg` outlives the call (the driver copies parameters at launch).
        let r = unsafe {
            (self.drv.launch_kernel)(
                self.spin,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream.0,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.drv.check("cuLaunchKernel(spin)", r)
    }

    /// An executable graph of `nodes` `spin(us)` kernel nodes in a chain (one `cuGraphLaunch`
    /// runs them all, back to back).
    pub fn spin_graph(&self, nodes: usize, us: u64) -> Result<Graph> {
        let mut g: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0.
        self.drv.check("cuGraphCreate", unsafe {
            (self.drv.graph_create)(&mut g, 0)
        })?;
        let mut prev: *mut c_void = std::ptr::null_mut();
        for _ in 0..nodes {
            let mut arg = us;
            let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
            let p = gpuslice_cuda_abi::exec::CUDA_KERNEL_NODE_PARAMS_v2 {
                func: self.spin,
                grid_dim_x: 1,
                grid_dim_y: 1,
                grid_dim_z: 1,
                block_dim_x: 1,
                block_dim_y: 1,
                block_dim_z: 1,
                shared_mem_bytes: 0,
                kernel_params: params.as_mut_ptr(),
                extra: std::ptr::null_mut(),
                kern: std::ptr::null_mut(),
                ctx: std::ptr::null_mut(),
            };
            let mut node: *mut c_void = std::ptr::null_mut();
            let ndeps = usize::from(!prev.is_null());
            // SAFETY: valid out-pointer, live graph, `prev` (when non-null) a node of it; the
            // parameter struct (a v2 struct, of which v1 is a prefix) and `arg` outlive the call
            // (the driver copies parameters when the node is added).
            let r = unsafe {
                (self.drv.graph_add_kernel_node)(
                    &mut node,
                    g,
                    &prev,
                    ndeps,
                    (&p as *const gpuslice_cuda_abi::exec::CUDA_KERNEL_NODE_PARAMS_v2).cast(),
                )
            };
            self.drv.check("cuGraphAddKernelNode", r)?;
            prev = node;
        }
        let mut exec: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer, live graph, flags 0.
        self.drv.check("cuGraphInstantiateWithFlags", unsafe {
            (self.drv.graph_instantiate)(&mut exec, g, 0)
        })?;
        Ok(Graph(exec))
    }

    /// cuGraphLaunch.
    pub fn launch_graph(&self, g: Graph, stream: Stream) -> Result<()> {
        // SAFETY: live handles from this session.
        self.drv.check("cuGraphLaunch", unsafe {
            (self.drv.graph_launch)(g.0, stream.0)
        })
    }

    /// cuStreamQuery: Ok(true) when idle, Ok(false) when work is pending.
    pub fn stream_idle(&self, stream: Stream) -> Result<bool> {
        // SAFETY: stream is a live handle from this session.
        match unsafe { (self.drv.stream_query)(stream.0) } {
            CUDA_SUCCESS => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            r => {
                self.drv.check("cuStreamQuery", r)?;
                bail!("unreachable")
            }
        }
    }

    /// cuStreamSynchronize.
    pub fn sync(&self, stream: Stream) -> Result<()> {
        // SAFETY: stream is a live handle from this session.
        self.drv.check("cuStreamSynchronize", unsafe {
            (self.drv.stream_synchronize)(stream.0)
        })
    }

    /// A timing event.
    pub fn event(&self) -> Result<Event> {
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0 = default (timing enabled).
        self.drv.check("cuEventCreate", unsafe {
            (self.drv.event_create)(&mut e, 0)
        })?;
        Ok(Event(e))
    }

    /// cuEventRecord.
    pub fn record(&self, e: Event, stream: Stream) -> Result<()> {
        // SAFETY: live handles.
        self.drv.check("cuEventRecord", unsafe {
            (self.drv.event_record)(e.0, stream.0)
        })
    }

    /// cuEventSynchronize on `end`, then cuEventElapsedTime(start, end) in milliseconds.
    pub fn elapsed_ms(&self, start: Event, end: Event) -> Result<f32> {
        self.wait(end)?;
        let mut ms = 0f32;
        // SAFETY: live handles and a valid out-pointer.
        let r = unsafe { (self.drv.event_elapsed_time)(&mut ms, start.0, end.0) };
        self.drv.check("cuEventElapsedTime", r)?;
        Ok(ms)
    }

    /// cuEventSynchronize.
    pub fn wait(&self, e: Event) -> Result<()> {
        // SAFETY: live event handle from this session.
        self.drv.check("cuEventSynchronize", unsafe {
            (self.drv.event_synchronize)(e.0)
        })
    }
}
