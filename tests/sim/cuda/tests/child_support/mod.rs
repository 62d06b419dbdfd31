//! Shared helpers of the device_* / context_* / memory_* suites: load the built `libcuda.so`
//! with `dlopen`, look symbols up, and run each test body in a child process with its own
//! simulated node (`GPUSLICE_SIM_STATE`) and environment.

#![allow(dead_code)]

use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::process::Command;

pub const SUCCESS: u32 = 0;
pub const INVALID_VALUE: u32 = 1;
pub const OUT_OF_MEMORY: u32 = 2;
pub const NOT_INITIALIZED: u32 = 3;
pub const INVALID_DEVICE: u32 = 101;
pub const INVALID_CONTEXT: u32 = 201;
pub const ALREADY_MAPPED: u32 = 208;
pub const INVALID_HANDLE: u32 = 400;
pub const CONTEXT_IS_DESTROYED: u32 = 709;
pub const MI: u64 = 1 << 20;

/// The simulated driver, opened with dlopen from the target directory.
pub struct Lib(*mut c_void);

impl Lib {
    pub fn open() -> Lib {
        let exe = std::env::current_exe().expect("current_exe");
        let dir: PathBuf = exe
            .parent()
            .and_then(|d| d.parent())
            .expect("target profile dir")
            .to_path_buf();
        let path = CString::new(dir.join("libcuda.so").to_string_lossy().as_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path; dlopen has no other preconditions.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {:?} failed", dir.join("libcuda.so"));
        Lib(h)
    }

    /// Looks `name` up and reinterprets it as the function pointer type `T`.
    ///
    /// # Safety
    /// `T` must be the exact C signature of the symbol.
    pub unsafe fn sym<T: Copy>(&self, name: &str) -> T {
        let c = CString::new(name).expect("name");
        // SAFETY: valid handle and NUL-terminated name.
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        assert!(!p.is_null(), "symbol {name} is not exported");
        assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: the caller guarantees `T` is the symbol's function pointer type.
        unsafe { std::mem::transmute_copy(&p) }
    }
}

/// Runs the named test in a child process with its own simulator state file and `env`.
/// Returns true in the parent (which then returns), false in the child (which runs the body).
pub fn in_child(test: &str, env: &[(&str, &str)]) -> bool {
    if std::env::var_os("H2_CHILD").is_some() {
        return false;
    }
    let dir = std::env::temp_dir().join(format!("gpuslice-h2-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("H2_CHILD", "1")
        .env("GPUSLICE_SIM_STATE", dir.join("state"))
        .env_remove("CUDA_VISIBLE_DEVICES")
        .envs(env.iter().copied())
        .output()
        .expect("spawn child test");
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child test {test} failed:\n{text}");
    assert!(text.contains("1 passed"), "child ran no test:\n{text}");
    true
}
