//! Modules, libraries and functions.
//!
//! The simulator does not parse PTX or cubins: any non-null image loads (a null image is
//! `CUDA_ERROR_INVALID_VALUE`, a missing file for `cuModuleLoad` `CUDA_ERROR_FILE_NOT_FOUND`), and
//! every module exposes the same built-in kernels: `spin` (one u64 parameter: run time in µs),
//! `spin_ns` (one u64: run time in ns) and `noop` (no parameters; occupies the engine for 2 µs
//! like a real empty kernel). Other names are `CUDA_ERROR_NOT_FOUND`, and modules have no
//! globals (`cuModuleGetGlobal` is `CUDA_ERROR_NOT_FOUND`). `CUkernel` handles of libraries may
//! also be launched directly (in the current context), as CUDA 12 allows.
//!
//! **Lazy loading.** Since CUDA 12.2 the driver loads a module's code into a context when one of
//! its kernels is first used, not at `cuModuleLoad*`: the process grows on the device after its
//! context exists, outside any allocation call (measured on an H200: `docs/benchmarks.md`). The
//! first launch of a module's (or library's) kernel in a context charges the device's module
//! overhead (`GPUSLICE_SIM_MODULE_OVERHEAD`, per device `module=`) to the process
//! ([`load_on_first_launch`]); unloading the module or destroying the context returns it. A
//! lazy load that does not fit the device fails the launch with `CUDA_ERROR_OUT_OF_MEMORY`.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use gpuslice_cuda_abi::exec::*;
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::*;

use crate::context;
use crate::device::rc;

/// Engine time of the `noop` kernel.
pub(crate) const NOOP_NS: u64 = 2_000;
/// Default (and non-opt-in maximum) dynamic shared memory per block.
pub(crate) const DEFAULT_MAX_DYN_SMEM: c_int = 48 * 1024;
/// Opt-in maximum dynamic shared memory per block (Hopper: 227 KiB).
pub(crate) const OPTIN_MAX_DYN_SMEM: c_int = 227 * 1024;

/// The built-in kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelKind {
    /// `spin(u64 us)`.
    Spin,
    /// `spin_ns(u64 ns)`.
    SpinNs,
    /// `noop()`.
    Noop,
}

impl KernelKind {
    fn by_name(name: &[u8]) -> Option<(KernelKind, &'static str)> {
        match name {
            b"spin" => Some((KernelKind::Spin, "spin")),
            b"spin_ns" => Some((KernelKind::SpinNs, "spin_ns")),
            b"noop" => Some((KernelKind::Noop, "noop")),
            _ => None,
        }
    }

    /// Bytes of parameters the kernel takes.
    pub(crate) fn param_bytes(self) -> usize {
        match self {
            KernelKind::Spin | KernelKind::SpinNs => 8,
            KernelKind::Noop => 0,
        }
    }

    /// Engine time for the kernel given its (first) u64 parameter.
    pub(crate) fn duration_ns(self, param: u64) -> u64 {
        match self {
            KernelKind::Spin => param.saturating_mul(1000),
            KernelKind::SpinNs => param,
            KernelKind::Noop => NOOP_NS,
        }
    }
}

/// Settable function attributes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FuncAttrs {
    pub(crate) max_dyn_smem: c_int,
    pub(crate) carveout: c_int,
    pub(crate) cache: CUfunc_cache,
    pub(crate) cluster: [c_int; 3],
    pub(crate) non_portable_cluster: c_int,
    pub(crate) cluster_policy: c_int,
}

impl Default for FuncAttrs {
    fn default() -> Self {
        FuncAttrs {
            max_dyn_smem: DEFAULT_MAX_DYN_SMEM,
            carveout: -1,
            cache: CU_FUNC_CACHE_PREFER_NONE,
            cluster: [0; 3],
            non_portable_cluster: 0,
            cluster_policy: 0,
        }
    }
}

/// A launchable function (`CUfunction`) or context-independent kernel (`CUkernel`).
#[derive(Debug)]
pub(crate) struct Function {
    pub(crate) kind: KernelKind,
    pub(crate) name: &'static str,
    /// Context of a module function; `None` for a library kernel (runs in the current context).
    pub(crate) ctx_id: Option<u64>,
    /// Owning module or library handle.
    pub(crate) owner: usize,
    pub(crate) attrs: Mutex<FuncAttrs>,
    /// For library kernels: the per-context functions made by `cuKernelGetFunction`.
    per_ctx: Mutex<HashMap<u64, usize>>,
}

#[derive(Debug)]
struct Module {
    ctx_id: Option<u64>,
    functions: HashMap<&'static str, usize>,
    library: bool,
}

#[derive(Default)]
struct Registry {
    modules: HashMap<usize, Module>,
    functions: HashMap<usize, Arc<Function>>,
    /// Lazy loads done: (module or library handle, context id) → (device index, bytes charged).
    loaded: HashMap<(usize, u64), (u32, u64)>,
}

static REG: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);
static NEXT: AtomicU64 = AtomicU64::new(1);

const MODULE_BASE: usize = 0x0d0d_0000_0000;
const FUNCTION_BASE: usize = 0x0f0f_0000_0000;
const LIBRARY_BASE: usize = 0x0b1b_0000_0000;
const KERNEL_BASE: usize = 0x0ce1_0000_0000;

fn reg() -> MutexGuard<'static, Registry> {
    REG.lock().unwrap_or_else(|p| p.into_inner())
}

fn next(base: usize) -> usize {
    base + NEXT.fetch_add(1, Ordering::Relaxed) as usize * 0x40
}

/// The function behind a `CUfunction` (or a `CUkernel` used as one).
pub(crate) fn lookup_function(f: CUfunction) -> Result<Arc<Function>, CUresult> {
    crate::device::node()?;
    reg()
        .functions
        .get(&(f as usize))
        .cloned()
        .ok_or(CUDA_ERROR_INVALID_HANDLE)
}

fn load(pmod: *mut CUmodule, image: *const c_void, library: bool) -> Result<usize, CUresult> {
    let ctx_id = if library {
        crate::device::node()?;
        None
    } else {
        Some(context::current()?.id)
    };
    if pmod.is_null() || image.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let h = next(if library { LIBRARY_BASE } else { MODULE_BASE });
    reg().modules.insert(
        h,
        Module {
            ctx_id,
            functions: HashMap::new(),
            library,
        },
    );
    Ok(h)
}

fn load_module(pmod: *mut CUmodule, image: *const c_void) -> Result<(), CUresult> {
    let h = load(pmod, image, false)?;
    // SAFETY: `load` null-checked `pmod`; the caller provides a writable CUmodule.
    unsafe { pmod.write(h as CUmodule) };
    Ok(())
}

/// `cuModuleLoad`: the file must exist; its contents are not interpreted.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoad(pmod: *mut CUmodule, fname: *const c_char) -> CUresult {
    if let Err(e) = context::current() {
        return e;
    }
    if fname.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null; the caller passes a NUL-terminated path.
    let path = unsafe { CStr::from_ptr(fname) };
    let Ok(path) = path.to_str() else {
        return CUDA_ERROR_FILE_NOT_FOUND;
    };
    if !std::path::Path::new(path).is_file() {
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    rc(load_module(pmod, fname.cast()))
}

/// `cuModuleLoadData`.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(pmod: *mut CUmodule, image: *const c_void) -> CUresult {
    rc(load_module(pmod, image))
}

/// `cuModuleLoadDataEx` (JIT options are accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    pmod: *mut CUmodule,
    image: *const c_void,
    num_options: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CUresult {
    if num_options > 0 && (options.is_null() || values.is_null()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc(load_module(pmod, image))
}

/// `cuModuleLoadFatBinary`.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadFatBinary(
    pmod: *mut CUmodule,
    fat: *const c_void,
) -> CUresult {
    rc(load_module(pmod, fat))
}

fn unload(h: usize, library: bool) -> Result<(), CUresult> {
    crate::device::node()?;
    let mut r = reg();
    match r.modules.get(&h) {
        Some(m) if m.library == library => {}
        _ => return Err(CUDA_ERROR_INVALID_HANDLE),
    }
    let m = r.modules.remove(&h).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    let gone: Vec<(u32, u64)> = take_loads(&mut r, |(owner, _)| owner == h);
    release_loads(&gone);
    for f in m.functions.values() {
        if let Some(func) = r.functions.remove(f) {
            let per_ctx: Vec<usize> = lock(&func.per_ctx).values().copied().collect();
            for pf in per_ctx {
                r.functions.remove(&pf);
            }
        }
    }
    Ok(())
}

/// Charges the lazy load of `func`'s module into `ctx` on its first launch there (see the module
/// docs); later launches cost nothing.
pub(crate) fn load_on_first_launch(
    func: &Function,
    ctx: &context::Context,
) -> Result<(), CUresult> {
    let key = (func.owner, ctx.id);
    if reg().loaded.contains_key(&key) {
        return Ok(());
    }
    let node = crate::device::node()?;
    let bytes = node
        .module_load(ctx.phys)
        .map_err(|e| crate::device::sim_err(&e))?;
    let mut r = reg();
    // Another thread loaded it meanwhile, or the module went away: keep one charge only.
    if r.loaded.contains_key(&key) || !r.modules.contains_key(&func.owner) {
        drop(r);
        node.module_unload(ctx.phys, bytes);
        return Ok(());
    }
    r.loaded.insert(key, (ctx.phys, bytes));
    Ok(())
}

/// A context died: the modules loaded into it leave the device with it.
pub(crate) fn release_context(ctx_id: u64) {
    let gone = take_loads(&mut reg(), |(_, c)| c == ctx_id);
    release_loads(&gone);
}

fn take_loads(r: &mut Registry, pick: impl Fn((usize, u64)) -> bool) -> Vec<(u32, u64)> {
    let keys: Vec<(usize, u64)> = r.loaded.keys().copied().filter(|&k| pick(k)).collect();
    keys.iter().filter_map(|k| r.loaded.remove(k)).collect()
}

fn release_loads(loads: &[(u32, u64)]) {
    if let Ok(node) = crate::device::node() {
        for &(phys, bytes) in loads {
            node.module_unload(phys, bytes);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `cuModuleUnload`.
#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(hmod: CUmodule) -> CUresult {
    rc(unload(hmod as usize, false))
}

/// Finds or makes the function `name` of module / library `owner`.
fn get_function(owner: usize, name: *const c_char, library: bool) -> Result<usize, CUresult> {
    crate::device::node()?;
    if name.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    let mut r = reg();
    let m = match r.modules.get(&owner) {
        Some(m) if m.library == library => m,
        _ => return Err(CUDA_ERROR_INVALID_HANDLE),
    };
    let (kind, name) = KernelKind::by_name(name).ok_or(CUDA_ERROR_NOT_FOUND)?;
    if let Some(h) = m.functions.get(name) {
        return Ok(*h);
    }
    let ctx_id = m.ctx_id;
    let h = next(if library { KERNEL_BASE } else { FUNCTION_BASE });
    r.functions.insert(
        h,
        Arc::new(Function {
            kind,
            name,
            ctx_id,
            owner,
            attrs: Mutex::new(FuncAttrs::default()),
            per_ctx: Mutex::new(HashMap::new()),
        }),
    );
    if let Some(m) = r.modules.get_mut(&owner) {
        m.functions.insert(name, h);
    }
    Ok(h)
}

/// `cuModuleGetFunction`: `spin`, `spin_ns`, `noop`; other names `CUDA_ERROR_NOT_FOUND`.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    pf: *mut CUfunction,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    if pf.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match get_function(hmod as usize, name, false) {
        Ok(h) => {
            // SAFETY: null-checked above; the caller provides a writable CUfunction.
            unsafe { pf.write(h as CUfunction) };
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

fn get_global(hmod: usize, name: *const c_char) -> Result<(), CUresult> {
    crate::device::node()?;
    if name.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match reg().modules.get(&hmod) {
        Some(m) if !m.library => Err(CUDA_ERROR_NOT_FOUND),
        _ => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

/// `cuModuleGetGlobal_v2`: simulated modules have no globals (`CUDA_ERROR_NOT_FOUND`).
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    _dptr: *mut CUdeviceptr,
    _bytes: *mut usize,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    rc(get_global(hmod as usize, name))
}

/// `cuModuleGetGlobal` (legacy 32-bit export).
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal(
    _dptr: *mut CUdeviceptr_v1,
    _bytes: *mut c_uint,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    rc(get_global(hmod as usize, name))
}

// ---------------------------------------------------------------------------------------------
// Libraries and kernels (CUDA 12.0).

/// `cuLibraryLoadData` (options accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn cuLibraryLoadData(
    library: *mut CUlibrary,
    code: *const c_void,
    _jit_options: *mut CUjit_option,
    _jit_values: *mut *mut c_void,
    _num_jit: c_uint,
    _lib_options: *mut CUlibraryOption,
    _lib_values: *mut *mut c_void,
    _num_lib: c_uint,
) -> CUresult {
    match load(library.cast(), code, true) {
        Ok(h) => {
            // SAFETY: `load` null-checked it; the caller provides a writable CUlibrary.
            unsafe { library.write(h as CUlibrary) };
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

/// `cuLibraryUnload`.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryUnload(library: CUlibrary) -> CUresult {
    rc(unload(library as usize, true))
}

/// `cuLibraryGetKernel`.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetKernel(
    pkernel: *mut CUkernel,
    library: CUlibrary,
    name: *const c_char,
) -> CUresult {
    if pkernel.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match get_function(library as usize, name, true) {
        Ok(h) => {
            // SAFETY: null-checked above; the caller provides a writable CUkernel.
            unsafe { pkernel.write(h as CUkernel) };
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

fn kernel_get_function(kernel: usize) -> Result<usize, CUresult> {
    let ctx = context::current()?;
    let k = lookup_function(kernel as CUfunction)?;
    if k.ctx_id.is_some() {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    let mut per = lock(&k.per_ctx);
    if let Some(h) = per.get(&ctx.id) {
        return Ok(*h);
    }
    let h = next(FUNCTION_BASE);
    reg().functions.insert(
        h,
        Arc::new(Function {
            kind: k.kind,
            name: k.name,
            ctx_id: Some(ctx.id),
            owner: k.owner,
            attrs: Mutex::new(*lock(&k.attrs)),
            per_ctx: Mutex::new(HashMap::new()),
        }),
    );
    per.insert(ctx.id, h);
    Ok(h)
}

/// `cuKernelGetFunction`: the kernel's function in the current context.
#[no_mangle]
pub unsafe extern "C" fn cuKernelGetFunction(pf: *mut CUfunction, kernel: CUkernel) -> CUresult {
    if pf.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match kernel_get_function(kernel as usize) {
        Ok(h) => {
            // SAFETY: null-checked above; the caller provides a writable CUfunction.
            unsafe { pf.write(h as CUfunction) };
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------------------------
// Function attributes.

fn get_attr(pi: *mut c_int, attrib: CUfunction_attribute, f: CUfunction) -> Result<(), CUresult> {
    if pi.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let func = lookup_function(f)?;
    let a = *lock(&func.attrs);
    let v = match attrib {
        CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        | CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES
        | CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES => 0,
        CU_FUNC_ATTRIBUTE_NUM_REGS => 16,
        CU_FUNC_ATTRIBUTE_PTX_VERSION | CU_FUNC_ATTRIBUTE_BINARY_VERSION => 90,
        CU_FUNC_ATTRIBUTE_CACHE_MODE_CA => 0,
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => a.max_dyn_smem,
        CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT => a.carveout,
        CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET => 0,
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH => a.cluster[0],
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT => a.cluster[1],
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH => a.cluster[2],
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED => a.non_portable_cluster,
        CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE => a.cluster_policy,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    // SAFETY: null-checked above; the caller provides a writable int.
    unsafe { pi.write(v) };
    Ok(())
}

/// `cuFuncGetAttribute`.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    pi: *mut c_int,
    attrib: CUfunction_attribute,
    f: CUfunction,
) -> CUresult {
    rc(get_attr(pi, attrib, f))
}

fn set_attr(f: CUfunction, attrib: CUfunction_attribute, value: c_int) -> Result<(), CUresult> {
    let func = lookup_function(f)?;
    let mut a = lock(&func.attrs);
    match attrib {
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            if (0..=OPTIN_MAX_DYN_SMEM).contains(&value) =>
        {
            a.max_dyn_smem = value
        }
        CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT if (-1..=100).contains(&value) => {
            a.carveout = value
        }
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH if (0..=8).contains(&value) => {
            a.cluster[0] = value
        }
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT if (0..=8).contains(&value) => {
            a.cluster[1] = value
        }
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH if (0..=8).contains(&value) => {
            a.cluster[2] = value
        }
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED if (0..=1).contains(&value) => {
            a.non_portable_cluster = value
        }
        CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE if (0..=2).contains(&value) => {
            a.cluster_policy = value
        }
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    Ok(())
}

/// `cuFuncSetAttribute`: the settable attributes, with their valid ranges.
#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(
    f: CUfunction,
    attrib: CUfunction_attribute,
    value: c_int,
) -> CUresult {
    rc(set_attr(f, attrib, value))
}

/// `cuFuncSetCacheConfig`.
#[no_mangle]
pub unsafe extern "C" fn cuFuncSetCacheConfig(f: CUfunction, config: CUfunc_cache) -> CUresult {
    let func = match lookup_function(f) {
        Ok(func) => func,
        Err(e) => return e,
    };
    if config > CU_FUNC_CACHE_PREFER_EQUAL {
        return CUDA_ERROR_INVALID_VALUE;
    }
    lock(&func.attrs).cache = config;
    CUDA_SUCCESS
}

/// `cuFuncGetModule`.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetModule(hmod: *mut CUmodule, f: CUfunction) -> CUresult {
    let func = match lookup_function(f) {
        Ok(func) => func,
        Err(e) => return e,
    };
    if hmod.is_null() || func.ctx_id.is_none() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: null-checked above; the caller provides a writable CUmodule.
    unsafe { hmod.write(func.owner as CUmodule) };
    CUDA_SUCCESS
}
