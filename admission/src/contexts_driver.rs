//! The few CUDA driver calls the probe context needs, loaded with `dlopen` in the probe child
//! only (the arbiter itself never loads the driver): `cuInit`, `cuDeviceGetCount`,
//! `cuDeviceGet`, `cuDevicePrimaryCtxRetain`.

use std::ffi::{c_int, c_void, CString};

type Init = unsafe extern "C" fn(u32) -> c_int;
type Count = unsafe extern "C" fn(*mut c_int) -> c_int;
type Get = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type Retain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;

/// The loaded driver (never unloaded: the probe child exits instead).
pub struct Driver {
    handle: *mut c_void,
}

impl Driver {
    /// `dlopen`s `lib` (a soname or a path).
    pub fn open(lib: &str) -> Result<Driver, String> {
        let name = CString::new(lib).map_err(|_| format!("{lib:?}: not a library name"))?;
        // SAFETY: a NUL-terminated name; dlopen has no other precondition.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("cannot load {lib}"));
        }
        Ok(Driver { handle })
    }

    fn sym(&self, name: &str) -> Result<*mut c_void, String> {
        let n = CString::new(name).map_err(|_| "bad symbol name".to_string())?;
        // SAFETY: a live handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.handle, n.as_ptr()) };
        if p.is_null() {
            Err(format!("the driver has no {name}"))
        } else {
            Ok(p)
        }
    }

    /// `cuInit(0)`, then the primary context of every device retained (never released: the
    /// process holds them until it exits). Returns the device count.
    pub fn init_and_retain_all(&self) -> Result<usize, String> {
        // SAFETY: each symbol is the driver's function of that name, whose C signature is the
        // type it is cast to (cuda.h).
        let (init, count, get, retain) = unsafe {
            (
                std::mem::transmute::<*mut c_void, Init>(self.sym("cuInit")?),
                std::mem::transmute::<*mut c_void, Count>(self.sym("cuDeviceGetCount")?),
                std::mem::transmute::<*mut c_void, Get>(self.sym("cuDeviceGet")?),
                std::mem::transmute::<*mut c_void, Retain>(self.sym("cuDevicePrimaryCtxRetain")?),
            )
        };
        let check = |what: &str, r: c_int| match r {
            0 => Ok(()),
            e => Err(format!("{what} returned CUDA error {e}")),
        };
        // SAFETY: the driver's contract: flags 0; out-pointers are live locals.
        unsafe {
            check("cuInit", init(0))?;
            let mut n: c_int = 0;
            check("cuDeviceGetCount", count(&mut n))?;
            for ordinal in 0..n {
                let mut dev: c_int = 0;
                check("cuDeviceGet", get(&mut dev, ordinal))?;
                let mut ctx: *mut c_void = std::ptr::null_mut();
                check("cuDevicePrimaryCtxRetain", retain(&mut ctx, dev))?;
            }
            Ok(usize::try_from(n).unwrap_or(0))
        }
    }
}
