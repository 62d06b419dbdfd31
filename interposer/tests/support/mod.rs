//! Shared pieces of the interposer's end-to-end tests: a private directory with the simulated
//! `libcuda.so.1` / `libnvidia-ml.so.1`, children re-executed under `LD_PRELOAD`, and a small
//! driver binding (every symbol looked up with `dlsym`, so it lands in our wrappers).

#![allow(dead_code, non_snake_case, clippy::missing_transmute_annotations)]

use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const MIB: u64 = 1 << 20;

fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("profile dir")
        .to_path_buf()
}

/// A private directory with the simulated libraries and a sim state path.
pub struct Env {
    pub dir: PathBuf,
    pub preload: PathBuf,
}

pub fn setup(name: &str) -> Env {
    let t = target_dir();
    let cuda = t.join("libcuda.so");
    let nvml = t.join("libnvidia_ml.so");
    let preload = t.join("libgpuslice.so");
    assert!(
        cuda.exists() && nvml.exists() && preload.exists(),
        "build the simulator first: cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml"
    );
    let dir = std::env::temp_dir().join(format!("gpuslice-h6-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::os::unix::fs::symlink(&cuda, dir.join("lib/libcuda.so.1")).unwrap();
    std::os::unix::fs::symlink(&nvml, dir.join("lib/libnvidia-ml.so.1")).unwrap();
    Env { dir, preload }
}

impl Env {
    /// The test binary itself in child mode `mode`, under the interposer.
    pub fn child(&self, mode: &str, envs: &[(&str, &str)]) -> Command {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env("H6_CHILD", mode)
            .env("LD_LIBRARY_PATH", self.dir.join("lib"))
            .env("LD_PRELOAD", &self.preload)
            .env("GPUSLICE_SIM_STATE", self.dir.join("sim-state"))
            .env("GPUSLICE_SIM_CTX_OVERHEAD", "0")
            .env("GPUSLICE_SIM_MODULE_OVERHEAD", "0")
            .env_remove("GPUSLICE_MEMORY")
            .env_remove("GPUSLICE_SLICE_DIR")
            .env_remove("GPUSLICE_STANDALONE_ID")
            .env_remove("CUDA_DEVICE_MEMORY_LIMIT")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("GPUSLICE_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            c.env(k, v);
        }
        c
    }

    pub fn run(&self, mode: &str, envs: &[(&str, &str)]) -> (String, String) {
        let out = self.child(mode, envs).output().unwrap();
        let so = String::from_utf8_lossy(&out.stdout).into_owned();
        let se = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "child {mode} failed:\n{so}\n{se}");
        (so, se)
    }

    /// The simulator's ground truth, opened like the children open it.
    pub fn node(&self, devices: Option<&str>) -> Option<gpuslice_sim_core::Node> {
        let mut cfg = gpuslice_sim_core::SimConfig::from_env().ok()?;
        if let Some(d) = devices {
            cfg.devices = gpuslice_sim_core::config::parse_devices(d).ok()?;
        }
        cfg.state_path = self.dir.join("sim-state");
        cfg.ctx_overhead = 0;
        cfg.module_overhead = 0;
        if !cfg.state_path.exists() {
            return None;
        }
        gpuslice_sim_core::Node::open(cfg).ok()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `KEY=<u64>` from a child's output (the last occurrence).
pub fn field(text: &str, key: &str) -> u64 {
    let pat = format!("{key}=");
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix(&pat))
        .filter_map(|v| v.parse().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
}

pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The (simulated) driver reached through `dlopen` + `dlsym`.
pub struct Driver {
    h: *mut c_void,
}

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Driver {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for Driver {}

/// Calls driver function `$name` with C signature `fn($t…) -> CUresult`.
macro_rules! cu {
    ($d:expr, $name:literal : fn($($t:ty),*) ($($a:expr),*)) => {{
        let p = $d.sym($name);
        // SAFETY: the driver's export of this name has this C signature (cuda.h).
        unsafe {
            let f: unsafe extern "C" fn($($t),*) -> u32 = std::mem::transmute(p);
            f($($a),*)
        }
    }};
}

impl Driver {
    pub fn open() -> Driver {
        // SAFETY: loading the (simulated) driver by soname.
        let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
        assert!(!h.is_null(), "dlopen libcuda.so.1");
        Driver { h }
    }

    /// The `dlopen` handle (for lookups that may fail).
    pub fn handle(&self) -> *mut c_void {
        self.h
    }

    pub fn sym(&self, name: &str) -> *mut c_void {
        let n = CString::new(name).unwrap();
        // SAFETY: valid handle and NUL-terminated name.
        let p = unsafe { libc::dlsym(self.h, n.as_ptr()) };
        assert!(!p.is_null(), "{name} not found");
        p
    }

    /// `cuInit` and the primary context of `dev` made current on this thread.
    pub fn context(&self, dev: i32) {
        assert_eq!(cu!(self, "cuInit": fn(u32) (0)), 0);
        let mut ctx: *mut c_void = std::ptr::null_mut();
        assert_eq!(
            cu!(self, "cuDevicePrimaryCtxRetain": fn(*mut *mut c_void, i32) (&mut ctx, dev)),
            0
        );
        assert_eq!(cu!(self, "cuCtxSetCurrent": fn(*mut c_void) (ctx)), 0);
    }

    /// `cuMemGetInfo_v2` of the current device: (free, total).
    pub fn mem_info(&self) -> (u64, u64) {
        let (mut f, mut t) = (0usize, 0usize);
        assert_eq!(
            cu!(self, "cuMemGetInfo_v2": fn(*mut usize, *mut usize) (&mut f, &mut t)),
            0
        );
        (f as u64, t as u64)
    }

    pub fn sync(&self) {
        assert_eq!(cu!(self, "cuCtxSynchronize": fn() ()), 0);
    }
}

pub mod paths;
