//! Virtual memory management: physical allocations (`cuMemCreate` / `cuMemRelease`), address
//! reservations, mappings, access, granularity, and shareable-handle export / import.
//!
//! Accounting follows the real driver: `cuMemCreate` charges the physical size once; mapping it
//! (any number of times) charges nothing more; the memory is returned when the last handle
//! reference is released *and* the last mapping is gone. An exported allocation is a memfd whose
//! contents identify the exporter `(pid, start time)` and its allocation; an importer gets a
//! handle that charges nobody (the exporter owns the memory) and is refused once the exporter died.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_ulonglong, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use gpuslice_cuda_abi::memory::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;
use gpuslice_sim_core::procs;

use crate::device::{self, put, rc};
use crate::memory::{self, Kind, Range};

const HANDLE_BASE: u64 = 0x0a11_0000_0000;
const EXPORT_MAGIC: u64 = 0x4753_564d_4d45_5850; // "GSVMMEXP"

/// A property struct with its (Windows-only) pointer field cleared.
#[derive(Clone, Copy)]
struct Prop(CUmemAllocationProp);

// SAFETY: the only pointer inside, `win32HandleMetaData`, is always null (see `Prop::new`) and
// never dereferenced.
unsafe impl Send for Prop {}

impl Prop {
    fn new(mut p: CUmemAllocationProp) -> Prop {
        p.win32HandleMetaData = std::ptr::null_mut();
        Prop(p)
    }
}

struct Phys {
    size: u64,
    device: CUdevice,
    phys: u32,
    prop: Prop,
    /// Outstanding handle references (create / import / retain add one, release removes one).
    refs: u32,
    /// Live mappings.
    maps: u32,
    /// Bytes charged to the ground truth (0 for imported allocations).
    charged: u64,
    /// `(pid, start, id)` of the exporting allocation when imported.
    origin: (u32, u64, u64),
}

struct Mapping {
    size: u64,
    id: u64,
    access: HashMap<CUdevice, u32>,
}

#[derive(Default)]
struct Vmm {
    allocs: HashMap<u64, Phys>,
    /// Address reservations: base → size.
    reservations: BTreeMap<u64, u64>,
    /// Mappings: base → mapping.
    maps: BTreeMap<u64, Mapping>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn vmm() -> MutexGuard<'static, Vmm> {
    static V: OnceLock<Mutex<Vmm>> = OnceLock::new();
    V.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn id_of(h: CUmemGenericAllocationHandle) -> u64 {
    h.wrapping_sub(HANDLE_BASE)
}

fn handle_of(id: u64) -> CUmemGenericAllocationHandle {
    HANDLE_BASE + id
}

/// Shareable handle types allowed for the physical allocation `id` (pointer attributes).
pub(crate) fn handle_types_of(id: u64) -> u32 {
    vmm()
        .allocs
        .get(&id)
        .map_or(0, |p| p.prop.0.requestedHandleTypes)
}

fn check_prop(prop: *const CUmemAllocationProp) -> Result<CUmemAllocationProp, CUresult> {
    if prop.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a valid property struct.
    let p = unsafe { prop.read() };
    if p.type_ != CU_MEM_ALLOCATION_TYPE_PINNED || p.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    device::physical(p.location.id).map_err(|_| CUDA_ERROR_INVALID_DEVICE)?;
    let supported = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if p.requestedHandleTypes & !supported != 0 {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(p)
}

/// `cuMemGetAllocationGranularity`: minimum and recommended are both the simulator granularity.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const CUmemAllocationProp,
    option: CUmemAllocationGranularity_flags,
) -> CUresult {
    let r = (|| {
        device::node()?;
        if granularity.is_null()
            || !matches!(
                option,
                CU_MEM_ALLOC_GRANULARITY_MINIMUM | CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
            )
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        check_prop(prop)?;
        // SAFETY: null-checked above.
        unsafe { granularity.write(device::granularity() as usize) };
        Ok(())
    })();
    rc(r)
}

/// `cuMemCreate`.
#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: c_ulonglong,
) -> CUresult {
    let r = (|| {
        let node = device::node()?;
        if handle.is_null() || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let p = check_prop(prop)?;
        let size = size as u64;
        if size == 0 || !size.is_multiple_of(device::granularity()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let phys = device::physical(p.location.id)?;
        node.mem_alloc(phys, size)
            .map_err(|e| device::sim_err(&e))?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (pid, start) = procs::self_identity();
        vmm().allocs.insert(
            id,
            Phys {
                size,
                device: p.location.id,
                phys,
                prop: Prop::new(p),
                refs: 1,
                maps: 0,
                charged: size,
                origin: (pid, start, id),
            },
        );
        // SAFETY: null-checked above.
        unsafe { handle.write(handle_of(id)) };
        Ok(())
    })();
    rc(r)
}

/// Frees `id` if nothing references it any more. Called with the lock held.
fn maybe_free(v: &mut Vmm, id: u64) {
    let dead = v
        .allocs
        .get(&id)
        .is_some_and(|p| p.refs == 0 && p.maps == 0);
    if dead {
        if let Some(p) = v.allocs.remove(&id) {
            if p.charged > 0 {
                if let Ok(node) = device::node() {
                    node.mem_free(p.phys, p.charged);
                }
            }
        }
    }
}

/// `cuMemRelease`.
#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    let r = (|| {
        device::node()?;
        let id = id_of(handle);
        let mut v = vmm();
        let p = v.allocs.get_mut(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if p.refs == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        p.refs -= 1;
        maybe_free(&mut v, id);
        Ok(())
    })();
    rc(r)
}

/// `cuMemAddressReserve` (the address hint is ignored; addresses are never reused).
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    _addr: CUdeviceptr,
    flags: c_ulonglong,
) -> CUresult {
    let r = (|| {
        device::node()?;
        let g = device::granularity();
        let size = size as u64;
        let alignment = alignment as u64;
        if ptr.is_null()
            || flags != 0
            || size == 0
            || !size.is_multiple_of(g)
            || (alignment != 0 && !alignment.is_power_of_two())
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let base = memory::reserve_va(size, alignment.max(g))?;
        vmm().reservations.insert(base, size);
        // SAFETY: null-checked above.
        unsafe { ptr.write(base) };
        Ok(())
    })();
    rc(r)
}

/// `cuMemAddressFree`: the whole reservation, which must have no mappings left.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    let r = (|| {
        device::node()?;
        let mut v = vmm();
        match v.reservations.get(&ptr) {
            Some(s) if *s == size as u64 => {}
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
        let end = ptr + size as u64;
        if v.maps.range(ptr..end).next().is_some() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        v.reservations.remove(&ptr);
        Ok(())
    })();
    rc(r)
}

/// `cuMemMap`.
#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: c_ulonglong,
) -> CUresult {
    let r = (|| {
        device::node()?;
        let g = device::granularity();
        let (size, offset) = (size as u64, offset as u64);
        if flags != 0
            || size == 0
            || !size.is_multiple_of(g)
            || !offset.is_multiple_of(g)
            || !ptr.is_multiple_of(g)
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let end = ptr.checked_add(size).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let id = id_of(handle);
        let mut v = vmm();
        let inside = v
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(b, s)| end <= b + s);
        if !inside {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let overlaps = v
            .maps
            .range(..end)
            .next_back()
            .is_some_and(|(b, m)| b + m.size > ptr);
        if overlaps {
            return Err(CUDA_ERROR_ALREADY_MAPPED);
        }
        let p = v.allocs.get_mut(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if p.refs == 0 || offset + size > p.size {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        p.maps += 1;
        let (device, phys) = (p.device, p.phys);
        v.maps.insert(
            ptr,
            Mapping {
                size,
                id,
                access: HashMap::new(),
            },
        );
        drop(v);
        memory::register(Range {
            base: ptr,
            size,
            charged: 0,
            kind: Kind::Vmm(id),
            ctx_id: 0,
            device,
            phys,
            ctx_handle: 0,
            buffer_id: memory::next_buffer_id(),
        });
        Ok(())
    })();
    rc(r)
}

/// `cuMemUnmap`: every mapping in `[ptr, ptr + size)` (the range must cover whole mappings).
#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    let r = (|| {
        device::node()?;
        let end = ptr
            .checked_add(size as u64)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut v = vmm();
        let bases: Vec<u64> = v.maps.range(ptr..end).map(|(b, _)| *b).collect();
        if bases.is_empty() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if bases.iter().any(|b| b + v.maps[b].size > end) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for b in bases {
            if let Some(m) = v.maps.remove(&b) {
                memory::unregister(b);
                if let Some(p) = v.allocs.get_mut(&m.id) {
                    p.maps -= 1;
                }
                maybe_free(&mut v, m.id);
            }
        }
        Ok(())
    })();
    rc(r)
}

/// `cuMemSetAccess`.
#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    let r = (|| {
        device::node()?;
        if desc.is_null() || count == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let descs: Vec<CUmemAccessDesc> = (0..count)
            // SAFETY: the caller provides `count` descriptors.
            .map(|i| unsafe { desc.add(i).read() })
            .collect();
        for d in &descs {
            if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            device::physical(d.location.id).map_err(|_| CUDA_ERROR_INVALID_DEVICE)?;
        }
        let end = ptr
            .checked_add(size as u64)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut v = vmm();
        let bases: Vec<u64> = v.maps.range(ptr..end).map(|(b, _)| *b).collect();
        // The range must be fully mapped.
        let mut cursor = ptr;
        for b in &bases {
            if *b != cursor {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            cursor = b + v.maps[b].size;
        }
        if bases.is_empty() || cursor < end {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for b in bases {
            if let Some(m) = v.maps.get_mut(&b) {
                for d in &descs {
                    m.access.insert(d.location.id, d.flags);
                }
            }
        }
        Ok(())
    })();
    rc(r)
}

/// `cuMemGetAccess`.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAccess(
    flags: *mut c_ulonglong,
    location: *const CUmemLocation,
    ptr: CUdeviceptr,
) -> CUresult {
    let r = (|| {
        device::node()?;
        if flags.is_null() || location.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a valid location.
        let loc = unsafe { location.read() };
        let v = vmm();
        let (_, m) = v
            .maps
            .range(..=ptr)
            .next_back()
            .filter(|(b, m)| ptr < *b + m.size)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let f = m
            .access
            .get(&loc.id)
            .copied()
            .unwrap_or(CU_MEM_ACCESS_FLAGS_PROT_NONE);
        // SAFETY: null-checked above.
        unsafe { flags.write(u64::from(f)) };
        Ok(())
    })();
    rc(r)
}

/// `cuMemRetainAllocationHandle`: a new reference to the allocation mapped at `addr`.
#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut c_void,
) -> CUresult {
    let r = (|| {
        device::node()?;
        if handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let a = addr as u64;
        let mut v = vmm();
        let id = v
            .maps
            .range(..=a)
            .next_back()
            .filter(|(b, m)| a < *b + m.size)
            .map(|(_, m)| m.id)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let p = v.allocs.get_mut(&id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        p.refs += 1;
        // SAFETY: null-checked above.
        unsafe { handle.write(handle_of(id)) };
        Ok(())
    })();
    rc(r)
}

/// `cuMemGetAllocationPropertiesFromHandle`.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut CUmemAllocationProp,
    handle: CUmemGenericAllocationHandle,
) -> CUresult {
    let r = (|| {
        device::node()?;
        let v = vmm();
        let p = v
            .allocs
            .get(&id_of(handle))
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: `put` null-checks.
        match unsafe { put(prop, p.prop.0) } {
            CUDA_SUCCESS => Ok(()),
            e => Err(e),
        }
    })();
    rc(r)
}

/// The record an exported memfd carries.
#[repr(C)]
#[derive(Clone, Copy)]
struct ExportRecord {
    magic: u64,
    pid: u64,
    start: u64,
    id: u64,
    size: u64,
    device: i64,
    handle_types: u64,
}

impl ExportRecord {
    fn to_bytes(self) -> [u8; 56] {
        let mut out = [0u8; 56];
        for (i, v) in [
            self.magic,
            self.pid,
            self.start,
            self.id,
            self.size,
            self.device as u64,
            self.handle_types,
        ]
        .iter()
        .enumerate()
        {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    fn from_bytes(b: &[u8; 56]) -> ExportRecord {
        let w = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(a)
        };
        ExportRecord {
            magic: w(0),
            pid: w(1),
            start: w(2),
            id: w(3),
            size: w(4),
            device: w(5) as i64,
            handle_types: w(6),
        }
    }
}

/// `cuMemExportToShareableHandle` (POSIX file descriptor only: a memfd naming the allocation).
#[no_mangle]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shareable_handle: *mut c_void,
    handle: CUmemGenericAllocationHandle,
    handle_type: CUmemAllocationHandleType,
    flags: c_ulonglong,
) -> CUresult {
    let r = (|| {
        device::node()?;
        if shareable_handle.is_null() || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let rec = {
            let v = vmm();
            let p = v
                .allocs
                .get(&id_of(handle))
                .ok_or(CUDA_ERROR_INVALID_VALUE)?;
            if p.prop.0.requestedHandleTypes & handle_type == 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            ExportRecord {
                magic: EXPORT_MAGIC,
                pid: u64::from(p.origin.0),
                start: p.origin.1,
                id: p.origin.2,
                size: p.size,
                device: i64::from(p.device),
                handle_types: u64::from(p.prop.0.requestedHandleTypes),
            }
        };
        let bytes = rec.to_bytes();
        // The system call, not glibc's wrapper (2.27+): the simulator is built against glibc 2.17
        // like everything shipped (xtask/src/zig.rs).
        // SAFETY: a valid NUL-terminated name; memfd_create has no other preconditions.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_memfd_create,
                c"gpuslice-sim-vmm".as_ptr(),
                libc::MFD_CLOEXEC,
            )
        };
        let fd = libc::c_int::try_from(ret).unwrap_or(-1);
        if fd < 0 {
            return Err(CUDA_ERROR_OPERATING_SYSTEM);
        }
        // SAFETY: `fd` is ours; `bytes` is a live buffer of its length.
        let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), 0) };
        if n != bytes.len() as isize {
            // SAFETY: closing the fd we just opened.
            unsafe { libc::close(fd) };
            return Err(CUDA_ERROR_OPERATING_SYSTEM);
        }
        // SAFETY: for POSIX fds the shareable handle is an `int`; non-null checked above.
        unsafe { shareable_handle.cast::<c_int>().write(fd) };
        Ok(())
    })();
    rc(r)
}

/// `cuMemImportFromShareableHandle`: for POSIX fds, `os_handle` is the fd value itself.
#[no_mangle]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut CUmemGenericAllocationHandle,
    os_handle: *mut c_void,
    sh_handle_type: CUmemAllocationHandleType,
) -> CUresult {
    let r = (|| {
        device::node()?;
        if handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if sh_handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let fd = os_handle as usize as c_int;
        let mut buf = [0u8; 56];
        // SAFETY: `buf` is a live buffer of its length; a bad fd just fails.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n != buf.len() as isize {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let rec = ExportRecord::from_bytes(&buf);
        if rec.magic != EXPORT_MAGIC {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let pid = u32::try_from(rec.pid).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        let (me, my_start) = procs::self_identity();
        let own = pid == me && rec.start == my_start;
        if !own && !procs::alive(pid, rec.start) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let dev = i32::try_from(rec.device).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        let phys = device::physical(dev).map_err(|_| CUDA_ERROR_INVALID_DEVICE)?;
        let mut v = vmm();
        if own {
            // Importing our own export: another reference to the same allocation.
            let p = v.allocs.get_mut(&rec.id).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            p.refs += 1;
            // SAFETY: null-checked above.
            unsafe { handle.write(handle_of(rec.id)) };
            return Ok(());
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut prop = CUmemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: rec.handle_types as u32,
            ..Default::default()
        };
        prop.location.type_ = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        v.allocs.insert(
            id,
            Phys {
                size: rec.size,
                device: dev,
                phys,
                prop: Prop::new(prop),
                refs: 1,
                maps: 0,
                charged: 0,
                origin: (pid, rec.start, rec.id),
            },
        );
        // SAFETY: null-checked above.
        unsafe { handle.write(handle_of(id)) };
        Ok(())
    })();
    rc(r)
}
