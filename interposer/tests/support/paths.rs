//! Every allocation path of the driver as one enum: allocate a unit, free it, and the bytes the
//! driver (and the interposer) charge for it.

use super::{Driver, MIB};
use gpuslice_cuda_abi::exec::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
use gpuslice_cuda_abi::memory::*;
use std::ffi::c_void;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Plain,
    Pitch,
    Managed,
    Async,
    Pool,
    Vmm,
    Array,
    Array3d,
    Mipmap,
    Graph,
}

pub const ALL: &[Path] = &[
    Path::Plain,
    Path::Pitch,
    Path::Managed,
    Path::Async,
    Path::Pool,
    Path::Vmm,
    Path::Array,
    Path::Array3d,
    Path::Mipmap,
    Path::Graph,
];

impl Path {
    pub fn parse(s: &str) -> Path {
        *ALL.iter()
            .find(|p| format!("{p:?}").eq_ignore_ascii_case(s))
            .unwrap_or_else(|| panic!("unknown path {s}"))
    }
}

/// A live allocation and how to free it.
#[derive(Debug)]
pub enum Held {
    Ptr(u64),
    Async(u64),
    Pool(u64),
    Vmm(u64),
    Array(usize),
    Mipmap(usize),
    /// Graph allocation: (address, exec that allocated it, graph).
    Graph(u64, usize, usize),
}

/// Per-process state some paths need (a created pool).
pub struct Ctx {
    pub pool: usize,
}

pub fn prepare(d: &Driver, dev: i32) -> Ctx {
    let props = CUmemPoolProps {
        allocType: CU_MEM_ALLOCATION_TYPE_PINNED,
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: dev,
        },
        ..Default::default()
    };
    let mut pool: *mut c_void = std::ptr::null_mut();
    let r =
        cu!(d, "cuMemPoolCreate": fn(*mut *mut c_void, *const CUmemPoolProps) (&mut pool, &props));
    assert_eq!(r, 0, "cuMemPoolCreate");
    Ctx {
        pool: pool as usize,
    }
}

/// Allocates about `mib` MiB through `path`; returns the result code and what to free.
pub fn alloc(d: &Driver, c: &Ctx, path: Path, mib: u64, dev: i32) -> (u32, Option<Held>) {
    let bytes = (mib * MIB) as usize;
    let null: *mut c_void = std::ptr::null_mut();
    match path {
        Path::Plain => {
            let mut p = 0u64;
            let r = cu!(d, "cuMemAlloc_v2": fn(*mut u64, usize) (&mut p, bytes));
            (r, (r == 0).then_some(Held::Ptr(p)))
        }
        Path::Pitch => {
            let (mut p, mut pitch) = (0u64, 0usize);
            // 4000-byte rows are padded to a 4096-byte pitch: mib × 256 rows of 4 KiB.
            let r = cu!(d, "cuMemAllocPitch_v2": fn(*mut u64, *mut usize, usize, usize, u32)
                (&mut p, &mut pitch, 4000, (mib * 256) as usize, 4));
            (r, (r == 0).then_some(Held::Ptr(p)))
        }
        Path::Managed => {
            let mut p = 0u64;
            let r = cu!(d, "cuMemAllocManaged": fn(*mut u64, usize, u32) (&mut p, bytes, CU_MEM_ATTACH_GLOBAL));
            (r, (r == 0).then_some(Held::Ptr(p)))
        }
        Path::Async => {
            let mut p = 0u64;
            let r =
                cu!(d, "cuMemAllocAsync": fn(*mut u64, usize, *mut c_void) (&mut p, bytes, null));
            (r, (r == 0).then_some(Held::Async(p)))
        }
        Path::Pool => {
            let mut p = 0u64;
            let r = cu!(d, "cuMemAllocFromPoolAsync": fn(*mut u64, usize, *mut c_void, *mut c_void)
                (&mut p, bytes, c.pool as *mut c_void, null));
            (r, (r == 0).then_some(Held::Pool(p)))
        }
        Path::Vmm => {
            let prop = CUmemAllocationProp {
                type_: CU_MEM_ALLOCATION_TYPE_PINNED,
                location: CUmemLocation {
                    type_: CU_MEM_LOCATION_TYPE_DEVICE,
                    id: dev,
                },
                ..Default::default()
            };
            let mut h = 0u64;
            let size = bytes.div_ceil(2 << 20) * (2 << 20);
            let r = cu!(d, "cuMemCreate": fn(*mut u64, usize, *const CUmemAllocationProp, u64) (&mut h, size, &prop, 0));
            (r, (r == 0).then_some(Held::Vmm(h)))
        }
        Path::Array => {
            // 1024 × (mib × 256) texels of 4 × u8 = mib MiB.
            let desc = CUDA_ARRAY_DESCRIPTOR {
                Width: 1024,
                Height: (mib * 256) as usize,
                Format: CU_AD_FORMAT_UNSIGNED_INT8,
                NumChannels: 4,
            };
            let mut a: *mut c_void = std::ptr::null_mut();
            let r = cu!(d, "cuArrayCreate_v2": fn(*mut *mut c_void, *const CUDA_ARRAY_DESCRIPTOR) (&mut a, &desc));
            (r, (r == 0).then_some(Held::Array(a as usize)))
        }
        Path::Array3d => {
            // 256 × 256 × (mib × 4) floats = mib MiB.
            let desc = CUDA_ARRAY3D_DESCRIPTOR {
                Width: 256,
                Height: 256,
                Depth: (mib * 4) as usize,
                Format: CU_AD_FORMAT_FLOAT,
                NumChannels: 1,
                Flags: 0,
            };
            let mut a: *mut c_void = std::ptr::null_mut();
            let r = cu!(d, "cuArray3DCreate_v2": fn(*mut *mut c_void, *const CUDA_ARRAY3D_DESCRIPTOR) (&mut a, &desc));
            (r, (r == 0).then_some(Held::Array(a as usize)))
        }
        Path::Mipmap => {
            // Level 0 of mib × 1 MiB (1024 × mib·1024 u8) and level 1 of a quarter of it:
            // mib × 1.25 MiB, rounded once to 2 MiB.
            let desc = CUDA_ARRAY3D_DESCRIPTOR {
                Width: 1024,
                Height: (mib * 1024) as usize,
                Depth: 0,
                Format: CU_AD_FORMAT_UNSIGNED_INT8,
                NumChannels: 1,
                Flags: 0,
            };
            let mut a: *mut c_void = std::ptr::null_mut();
            let r = cu!(d, "cuMipmappedArrayCreate": fn(*mut *mut c_void, *const CUDA_ARRAY3D_DESCRIPTOR, u32) (&mut a, &desc, 2));
            (r, (r == 0).then_some(Held::Mipmap(a as usize)))
        }
        Path::Graph => graph_alloc(d, bytes, dev),
    }
}

fn graph_alloc(d: &Driver, bytes: usize, dev: i32) -> (u32, Option<Held>) {
    let mut g: *mut c_void = std::ptr::null_mut();
    assert_eq!(
        cu!(d, "cuGraphCreate": fn(*mut *mut c_void, u32) (&mut g, 0)),
        0
    );
    let mut params = CUDA_MEM_ALLOC_NODE_PARAMS {
        poolProps: CUmemPoolProps {
            allocType: CU_MEM_ALLOCATION_TYPE_PINNED,
            location: CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: dev,
            },
            ..Default::default()
        },
        accessDescs: std::ptr::null(),
        accessDescCount: 0,
        bytesize: bytes,
        dptr: 0,
    };
    let mut node: *mut c_void = std::ptr::null_mut();
    let r = cu!(d, "cuGraphAddMemAllocNode": fn(*mut *mut c_void, *mut c_void, *const c_void, usize, *mut CUDA_MEM_ALLOC_NODE_PARAMS)
        (&mut node, g, std::ptr::null(), 0, &mut params));
    assert_eq!(r, 0, "cuGraphAddMemAllocNode");
    let mut exec: *mut c_void = std::ptr::null_mut();
    let r = cu!(d, "cuGraphInstantiateWithFlags": fn(*mut *mut c_void, *mut c_void, u64)
        (&mut exec, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    assert_eq!(r, 0, "cuGraphInstantiateWithFlags");
    let r = cu!(d, "cuGraphLaunch": fn(*mut c_void, *mut c_void) (exec, std::ptr::null_mut()));
    if r != 0 {
        cu!(d, "cuGraphExecDestroy": fn(*mut c_void) (exec));
        cu!(d, "cuGraphDestroy": fn(*mut c_void) (g));
        return (r, None);
    }
    (0, Some(Held::Graph(params.dptr, exec as usize, g as usize)))
}

/// Frees `h` (stream-ordered frees are ordered on the legacy stream).
pub fn free(d: &Driver, c: &Ctx, h: Held) {
    let null: *mut c_void = std::ptr::null_mut();
    let r = match h {
        Held::Ptr(p) => cu!(d, "cuMemFree_v2": fn(u64) (p)),
        Held::Async(p) | Held::Pool(p) => cu!(d, "cuMemFreeAsync": fn(u64, *mut c_void) (p, null)),
        Held::Vmm(h) => cu!(d, "cuMemRelease": fn(u64) (h)),
        Held::Array(a) => cu!(d, "cuArrayDestroy": fn(*mut c_void) (a as *mut c_void)),
        Held::Mipmap(a) => cu!(d, "cuMipmappedArrayDestroy": fn(*mut c_void) (a as *mut c_void)),
        Held::Graph(p, exec, g) => {
            let mut fg: *mut c_void = std::ptr::null_mut();
            assert_eq!(
                cu!(d, "cuGraphCreate": fn(*mut *mut c_void, u32) (&mut fg, 0)),
                0
            );
            let mut node: *mut c_void = std::ptr::null_mut();
            let r = cu!(d, "cuGraphAddMemFreeNode": fn(*mut *mut c_void, *mut c_void, *const c_void, usize, u64)
                (&mut node, fg, std::ptr::null(), 0, p));
            assert_eq!(r, 0, "cuGraphAddMemFreeNode");
            let mut fe: *mut c_void = std::ptr::null_mut();
            assert_eq!(
                cu!(d, "cuGraphInstantiateWithFlags": fn(*mut *mut c_void, *mut c_void, u64) (&mut fe, fg, 0)),
                0
            );
            let r = cu!(d, "cuGraphLaunch": fn(*mut c_void, *mut c_void) (fe, null));
            cu!(d, "cuGraphExecDestroy": fn(*mut c_void) (fe));
            cu!(d, "cuGraphDestroy": fn(*mut c_void) (fg));
            cu!(d, "cuGraphExecDestroy": fn(*mut c_void) (exec as *mut c_void));
            cu!(d, "cuGraphDestroy": fn(*mut c_void) (g as *mut c_void));
            r
        }
    };
    let _ = c;
    assert_eq!(r, 0, "free");
}

/// Bytes charged for one `alloc(path, mib)` (2 MiB granularity).
pub fn charge(path: Path, mib: u64) -> u64 {
    let round = |b: u64| b.div_ceil(2 * MIB) * 2 * MIB;
    match path {
        Path::Mipmap => round(mib * MIB + mib * MIB / 4),
        _ => round(mib * MIB),
    }
}
