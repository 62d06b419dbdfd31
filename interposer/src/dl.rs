//! `dlsym` and `dlvsym` overrides. Lookups of a driver or NVML symbol that we wrap, made through
//! `RTLD_DEFAULT`, `RTLD_NEXT`, a handle of `libcuda.so.1` / `libnvidia-ml.so.1`, or the handle of
//! any other library whose lookup would resolve into one of them, return our wrapper; everything else goes to glibc by a *tail jump*, so glibc still sees the original
//! caller's return address and `RTLD_NEXT` keeps its meaning for every other library.

use std::ffi::{c_char, c_void, CStr};

/// Decides a lookup: our wrapper, or null for "let glibc answer".
extern "C" fn intercept(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    crate::real::init_dl();
    if name.is_null() || crate::guard::inside() {
        return std::ptr::null_mut();
    }
    // SAFETY: dlsym's contract: `name` is a NUL-terminated string.
    let n = unsafe { CStr::from_ptr(name) };
    let b = n.to_bytes();
    let is_cuda = b.starts_with(b"cu");
    let is_nvml = b.starts_with(b"nvml");
    if !is_cuda && !is_nvml {
        return std::ptr::null_mut();
    }
    let Some(ours) = crate::table::lookup(b) else {
        return std::ptr::null_mut();
    };
    // Opening is cached after the first time (and only ever finds an already loaded library
    // when the caller holds a handle of it).
    let (cuda, nvml) = match crate::real::known_handles() {
        (c, n)
            if !handle.is_null() && handle != libc::RTLD_NEXT && (c.is_null() || n.is_null()) =>
        {
            (
                if is_cuda {
                    crate::real::cuda_handle()
                } else {
                    c
                },
                if is_nvml {
                    crate::real::nvml_handle()
                } else {
                    n
                },
            )
        }
        k => k,
    };
    let special = handle.is_null() || handle == libc::RTLD_NEXT;
    let lib = if is_cuda {
        if special || handle == cuda {
            crate::real::cuda_handle()
        } else {
            return through_other(handle, n, cuda, ours);
        }
    } else if special || handle == nvml {
        crate::real::nvml_handle()
    } else {
        return through_other(handle, n, nvml, ours);
    };
    if handle.is_null() || handle == libc::RTLD_NEXT || handle == lib {
        // Only symbols the real library has: a missing function must stay missing.
        if !lib.is_null() && !crate::real::dlsym(lib, n).is_null() {
            return ours;
        }
    }
    std::ptr::null_mut()
}

/// A lookup through the handle of some other library (one that links the driver or NVML: glibc
/// searches the handle's whole dependency scope): our wrapper when glibc would answer with the
/// real library's function, else null (glibc answers).
fn through_other(
    handle: *mut std::ffi::c_void,
    name: &CStr,
    real_lib: *mut c_void,
    ours: *mut c_void,
) -> *mut c_void {
    let found = crate::real::dlsym(handle, name);
    if found.is_null() {
        return std::ptr::null_mut();
    }
    if !real_lib.is_null() && crate::real::dlsym(real_lib, name) == found {
        return ours;
    }
    // Another copy of the driver or NVML (loaded under another path): judged by the object
    // the symbol lies in.
    // SAFETY: Dl_info is plain data (pointers and integers): all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables; `info` is written on success.
    let found_obj = unsafe { libc::dladdr(found, &mut info) } != 0;
    if found_obj && !info.dli_fname.is_null() {
        // SAFETY: a NUL-terminated path owned by the loader.
        let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
        let base = path.rsplit(|&c| c == b'/').next().unwrap_or(path);
        let wanted: &[u8] = if name.to_bytes().starts_with(b"nvml") {
            b"libnvidia-ml.so"
        } else {
            b"libcuda.so"
        };
        if base.starts_with(wanted) {
            return ours;
        }
    }
    std::ptr::null_mut()
}

extern "C" fn intercept_v(
    handle: *mut c_void,
    name: *const c_char,
    _version: *const c_char,
) -> *mut c_void {
    intercept(handle, name)
}

/// `dlsym`: our wrapper for wrapped driver/NVML symbols, else a tail jump to glibc's.
///
/// # Safety
/// Same contract as glibc's `dlsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {check}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 2f",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        "ret",
        check = sym intercept,
        real = sym crate::real::REAL_DLSYM,
    )
}

/// `dlvsym`: as [`dlsym`], for versioned lookups.
///
/// # Safety
/// Same contract as glibc's `dlvsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "push rdx",
        "call {check}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 2f",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        "ret",
        check = sym intercept_v,
        real = sym crate::real::REAL_DLVSYM,
    )
}

/// `dlsym` (aarch64): see the x86-64 version.
///
/// # Safety
/// Same contract as glibc's `dlsym`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "stp x29, x30, [sp, #-32]!",
        "stp x0, x1, [sp, #16]",
        "bl {check}",
        "mov x9, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbnz x9, 2f",
        "adrp x10, {real}",
        "ldr x10, [x10, :lo12:{real}]",
        "cbz x10, 3f",
        "br x10",
        "2:",
        "mov x0, x9",
        "ret",
        "3:",
        "mov x0, #0",
        "ret",
        check = sym intercept,
        real = sym crate::real::REAL_DLSYM,
    )
}

/// `dlvsym` (aarch64).
///
/// # Safety
/// Same contract as glibc's `dlvsym`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    std::arch::naked_asm!(
        "stp x29, x30, [sp, #-48]!",
        "stp x0, x1, [sp, #16]",
        "str x2, [sp, #32]",
        "bl {check}",
        "mov x9, x0",
        "ldp x0, x1, [sp, #16]",
        "ldr x2, [sp, #32]",
        "ldp x29, x30, [sp], #48",
        "cbnz x9, 2f",
        "adrp x10, {real}",
        "ldr x10, [x10, :lo12:{real}]",
        "cbz x10, 3f",
        "br x10",
        "2:",
        "mov x0, x9",
        "ret",
        "3:",
        "mov x0, #0",
        "ret",
        check = sym intercept_v,
        real = sym crate::real::REAL_DLVSYM,
    )
}
