//! The simulator's `cuGetProcAddress` hands out its own definitions without calling `dlsym`:
//! a preloaded library overrides `dlsym` (as the interposer does) and answers NULL for every
//! `cuMem*` name; `cuGetProcAddress_v2("cuMemAlloc")` must still give the simulator's
//! `cuMemAlloc_v2` (checked with `dladdr`), which then allocates. Were the simulator to look
//! its symbols up through `dlsym`, a broken `cuGetProcAddress` wrapping in the interposer could
//! go unnoticed by every test. The override is built with the system C compiler.

mod child_support;
#[allow(unused_imports)]
use child_support::*;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::PathBuf;
use std::process::Command;

const OVERRIDE: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
/* dlsym as an interposer would define it, refusing every cuMem* name. */
void *dlsym(void *handle, const char *name) {
    static void *(*real)(void *, const char *);
    if (strncmp(name, "cuMem", 5) == 0) return NULL;
    if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return real ? real(handle, name) : NULL;
}
"#;

fn build_override() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gs-sim-nodlsym-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("override.c");
    let so = dir.join("liboverride.so");
    std::fs::write(&src, OVERRIDE).unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .output()
        .expect("cc (the system C compiler) runs");
    assert!(
        out.status.success(),
        "building the dlsym override: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

#[test]
fn get_proc_address_does_not_go_through_dlsym() {
    if std::env::var_os("H2_CHILD").is_none() {
        let so = build_override();
        in_child(
            "get_proc_address_does_not_go_through_dlsym",
            &[
                ("LD_PRELOAD", so.to_str().unwrap()),
                ("GPUSLICE_SIM_DEVICES", "name=Test GPU,mem=1Gi,sms=8,cc=9.0"),
            ],
        );
        let _ = std::fs::remove_dir_all(so.parent().unwrap());
        return;
    }
    let lib = Lib::open();
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let init: unsafe extern "C" fn(u32) -> u32 = lib.sym("cuInit");
        let create: unsafe extern "C" fn(*mut *mut u8, c_uint, c_int) -> u32 =
            lib.sym("cuCtxCreate_v2");
        let gpa: unsafe extern "C" fn(
            *const c_char,
            *mut *mut c_void,
            c_int,
            u64,
            *mut u32,
        ) -> u32 = lib.sym("cuGetProcAddress_v2");
        assert_eq!(init(0), SUCCESS);
        let mut c: *mut u8 = std::ptr::null_mut();
        assert_eq!(create(&mut c, 0, 0), SUCCESS);
        // The override is in effect: dlsym cannot find cuMemAlloc_v2.
        let name = CString::new("cuMemAlloc_v2").unwrap();
        assert!(libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()).is_null());

        let sym = CString::new("cuMemAlloc").unwrap();
        let mut p: *mut c_void = std::ptr::null_mut();
        let mut status = 99u32;
        assert_eq!(gpa(sym.as_ptr(), &mut p, 12000, 0, &mut status), SUCCESS);
        assert_eq!(status, 0);
        assert!(!p.is_null());
        let mut info: libc::Dl_info = std::mem::zeroed();
        assert_ne!(libc::dladdr(p, &mut info), 0);
        let file = CStr::from_ptr(info.dli_fname).to_string_lossy();
        let sname = CStr::from_ptr(info.dli_sname).to_string_lossy();
        assert!(file.ends_with("libcuda.so"), "{file}");
        assert_eq!(sname, "cuMemAlloc_v2");
        let alloc: unsafe extern "C" fn(*mut u64, usize) -> u32 = std::mem::transmute(p);
        let mut d = 0u64;
        assert_eq!(alloc(&mut d, (4 * MI) as usize), SUCCESS);
        assert_ne!(d, 0);
    }
}
