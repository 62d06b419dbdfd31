//! End-to-end tests of libgpuslice.so on the simulated GPU. The test binary re-executes itself
//! (env `H4_CHILD`) under `LD_PRELOAD=libgpuslice.so` with `LD_LIBRARY_PATH` pointing at the
//! simulated `libcuda.so.1` / `libnvidia-ml.so.1`. Build the simulator first:
//! `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml` (same profile and target dir).

#![allow(non_snake_case, clippy::missing_transmute_annotations)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

type R = u32;

fn target_dir() -> PathBuf {
    // <target>/<profile>/deps/e2e-xxxx → <target>/<profile>
    let exe = std::env::current_exe().expect("exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("profile dir")
        .to_path_buf()
}

/// A private directory with libcuda.so.1 / libnvidia-ml.so.1 links and a sim state path.
struct Env {
    dir: PathBuf,
    preload: PathBuf,
}

fn setup(name: &str) -> Env {
    let t = target_dir();
    let cuda = t.join("libcuda.so");
    let nvml = t.join("libnvidia_ml.so");
    let preload = t.join("libgpuslice.so");
    assert!(
        cuda.exists() && preload.exists(),
        "build the simulator first: cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml ({} missing)",
        cuda.display()
    );
    let dir = std::env::temp_dir().join(format!("gpuslice-e2e-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::os::unix::fs::symlink(&cuda, dir.join("lib/libcuda.so.1")).unwrap();
    if nvml.exists() {
        std::os::unix::fs::symlink(&nvml, dir.join("lib/libnvidia-ml.so.1")).unwrap();
    }
    Env { dir, preload }
}

impl Env {
    fn child(&self, mode: &str, preload: bool, envs: &[(&str, &str)]) -> Command {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env("H4_CHILD", mode)
            .env("LD_LIBRARY_PATH", self.dir.join("lib"))
            .env("GPUSLICE_SIM_STATE", self.dir.join("sim-state"))
            .env("GPUSLICE_SIM_CTX_OVERHEAD", "0")
            .env("GPUSLICE_SIM_MODULE_OVERHEAD", "0")
            .env_remove("GPUSLICE_MEMORY")
            .env_remove("GPUSLICE_SLICE_DIR")
            .env_remove("GPUSLICE_STANDALONE_ID")
            .env_remove("CUDA_DEVICE_MEMORY_LIMIT")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if preload {
            c.env("LD_PRELOAD", &self.preload);
        }
        for (k, v) in envs {
            c.env(k, v);
        }
        c
    }
    fn run(&self, mode: &str, preload: bool, envs: &[(&str, &str)]) -> (String, String) {
        let out = self.child(mode, preload, envs).output().unwrap();
        let so = String::from_utf8_lossy(&out.stdout).into_owned();
        let se = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "child {mode} failed:\n{so}\n{se}");
        (so, se)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn field(text: &str, key: &str) -> u64 {
    let pat = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&pat))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
}

// ---------------------------------------------------------------- child side

struct Api {
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> R,
    mem_free: unsafe extern "C" fn(u64) -> R,
    mem_info: unsafe extern "C" fn(*mut usize, *mut usize) -> R,
    total_mem: unsafe extern "C" fn(*mut usize, c_int) -> R,
}

fn sym(h: *mut c_void, name: &str, versioned: bool) -> *mut c_void {
    let n = CString::new(name).unwrap();
    // SAFETY: valid handle and NUL-terminated names.
    let p = unsafe {
        if versioned {
            libc::dlvsym(h, n.as_ptr(), c"libcuda.so.1".as_ptr())
        } else {
            libc::dlsym(h, n.as_ptr())
        }
    };
    assert!(!p.is_null(), "{name} not found");
    p
}

/// Loads the driver and sets up a context; returns the API reached the way `how` says.
fn open_api(how: &str) -> Api {
    // SAFETY: loading the (simulated) driver by soname.
    let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null(), "dlopen libcuda.so.1");
    let versioned = how == "dlvsym";
    let get = |name: &str| -> *mut c_void {
        if let Some(ver) = how.strip_prefix("procaddr:") {
            let ver: c_int = ver.parse().unwrap();
            type Gpa =
                unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> R;
            // SAFETY: the driver's cuGetProcAddress_v2 signature.
            let gpa: Gpa = unsafe { std::mem::transmute(sym(h, "cuGetProcAddress_v2", false)) };
            let n = CString::new(name).unwrap();
            let mut p = std::ptr::null_mut();
            let mut st = 0;
            // SAFETY: valid pointers.
            let r = unsafe { gpa(n.as_ptr(), &mut p, ver, 0, &mut st) };
            assert_eq!(r, 0, "cuGetProcAddress_v2({name}, {ver})");
            p
        } else {
            // Direct lookups name the exported (versioned) symbol, as cuda.h's macros do.
            let export = match name {
                "cuMemAlloc" | "cuMemFree" | "cuMemGetInfo" | "cuDeviceTotalMem" => {
                    format!("{name}_v2")
                }
                n => n.to_string(),
            };
            // dlvsym is used for the wrapped symbols (an unversioned driver answers dlvsym only
            // through the interposer); the context setup goes through dlsym.
            sym(h, &export, versioned && export != name)
        }
    };
    // SAFETY: transmutes of driver entry points to their C signatures from cuda.h.
    unsafe {
        let init: unsafe extern "C" fn(c_uint) -> R = std::mem::transmute(get("cuInit"));
        assert_eq!(init(0), 0);
        let retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> R =
            std::mem::transmute(get("cuDevicePrimaryCtxRetain"));
        let set: unsafe extern "C" fn(*mut c_void) -> R =
            std::mem::transmute(get("cuCtxSetCurrent"));
        let mut ctx = std::ptr::null_mut();
        assert_eq!(retain(&mut ctx, 0), 0);
        assert_eq!(set(ctx), 0);
        Api {
            mem_alloc: std::mem::transmute(get("cuMemAlloc")),
            mem_free: std::mem::transmute(get("cuMemFree")),
            mem_info: std::mem::transmute(get("cuMemGetInfo")),
            total_mem: std::mem::transmute(get("cuDeviceTotalMem")),
        }
    }
}

fn cuda_view(api: &Api) -> String {
    let (mut f, mut t, mut tt) = (0usize, 0usize, 0usize);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!((api.mem_info)(&mut f, &mut t), 0);
        assert_eq!((api.total_mem)(&mut tt, 0), 0);
    }
    format!("FREE={f} TOTAL={t} DEVTOTAL={tt}")
}

fn child_fill(how: &str, chunk: u64) {
    let api = open_api(how);
    let before = cuda_view(&api);
    let mut ptrs = Vec::new();
    let refusal = loop {
        let mut p = 0u64;
        // SAFETY: valid out-pointer.
        let r = unsafe { (api.mem_alloc)(&mut p, chunk as usize) };
        if r != 0 {
            break r;
        }
        ptrs.push(p);
        if ptrs.len() > 100_000 {
            break 0;
        }
    };
    let during = cuda_view(&api);
    for p in &ptrs {
        // SAFETY: pointers from cuMemAlloc.
        assert_eq!(unsafe { (api.mem_free)(*p) }, 0);
    }
    let after = cuda_view(&api);
    println!(
        "\nN={} REFUSAL={refusal} BEFORE {before} DURING {during} AFTER {after}",
        ptrs.len()
    );
}

fn child_hold(mib: u64) {
    let api = open_api("dlsym");
    let mut p = 0u64;
    // SAFETY: valid out-pointer.
    let r = unsafe { (api.mem_alloc)(&mut p, (mib * MIB) as usize) };
    println!("\nHOLD={r}");
    std::thread::sleep(Duration::from_secs(60));
}

/// Loads the (simulated) driver, `cuInit`, retains device 0's primary context: (driver handle,
/// the retain's answer, the context).
fn primary_context() -> (*mut c_void, R, *mut c_void) {
    // SAFETY: loading the driver by soname; entry points by their cuda.h types.
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null());
        let init: unsafe extern "C" fn(c_uint) -> R = std::mem::transmute(sym(h, "cuInit", false));
        assert_eq!(init(0), 0);
        let retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> R =
            std::mem::transmute(sym(h, "cuDevicePrimaryCtxRetain", false));
        let mut ctx = std::ptr::null_mut();
        let r = retain(&mut ctx, 0);
        (h, r, ctx)
    }
}

/// Creates the primary context (reporting the driver's answer as `CTX=`), then holds `mib` MiB.
fn child_ctx(mib: u64) {
    let (_, r, _) = primary_context();
    println!("\nCTX={r}");
    if r == 0 {
        child_hold(mib);
    }
}

/// Raises the stack limit to each of `list` (bytes per thread, comma-separated) in the primary
/// context, printing each result, then how much of the cap a 4 MiB fill still gets.
fn child_stack(list: &str) {
    let (h, r, ctx) = primary_context();
    assert_eq!(r, 0);
    // SAFETY: entry points by their cuda.h types; the context is live.
    unsafe {
        let set_current: unsafe extern "C" fn(*mut c_void) -> R =
            std::mem::transmute(sym(h, "cuCtxSetCurrent", false));
        let set_limit: unsafe extern "C" fn(u32, usize) -> R =
            std::mem::transmute(sym(h, "cuCtxSetLimit", false));
        assert_eq!(set_current(ctx), 0);
        for v in list.split(',') {
            let r = set_limit(0, v.parse().unwrap());
            println!("\nSTACK_{v}={r}");
        }
    }
    child_fill("dlsym", 4 * MIB);
}

/// Looks `cuMemAlloc_v2` up through the handle of another library (`arg`) that links the driver.
fn child_other_handle(lib: &str) {
    let l = CString::new(lib).unwrap();
    // SAFETY: loading a library by path; lookups with valid names.
    unsafe {
        let h = libc::dlopen(l.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "dlopen {lib}");
        let through = sym(h, "cuMemAlloc_v2", false);
        let ours = sym(libc::RTLD_DEFAULT, "cuMemAlloc_v2", false);
        let own = sym(h, "other_lib_marker", false);
        println!(
            "\nOURS={} OWN={}",
            u8::from(through == ours),
            u8::from(!own.is_null())
        );
    }
}

fn child_race(seconds: f64) {
    let api = std::sync::Arc::new(open_api("dlsym"));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let api = api.clone();
            std::thread::spawn(move || {
                // Each thread binds the primary context too.
                let mut x: u64 = (u64::from(std::process::id()) << 8 | t)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    | 1;
                let mut held: Vec<u64> = Vec::new();
                let mut ok = 0u64;
                open_api("dlsym");
                while Instant::now() < deadline {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if !x.is_multiple_of(3) || held.is_empty() {
                        let mut p = 0;
                        let sz = ((x >> 8) % 8 + 1) * MIB;
                        // SAFETY: valid out-pointer.
                        let r = unsafe { (api.mem_alloc)(&mut p, sz as usize) };
                        assert!(r == 0 || r == 2, "unexpected {r}");
                        if r == 0 {
                            held.push(p);
                            ok += 1;
                        }
                    } else {
                        let i = (x as usize >> 4) % held.len();
                        // SAFETY: pointer from cuMemAlloc.
                        assert_eq!(unsafe { (api.mem_free)(held.swap_remove(i)) }, 0);
                    }
                }
                for p in held {
                    // SAFETY: pointer from cuMemAlloc.
                    unsafe { (api.mem_free)(p) };
                }
                ok
            })
        })
        .collect();
    let ok: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!("\nRACE_OK={ok}");
}

/// `cuGetProcAddress(_v2)` for several (symbol, cudaVersion, flags): the pointer must be our
/// wrapper of the export the driver's rule picks (older variants included).
fn child_variants() {
    // SAFETY: loading the (simulated) driver by soname.
    let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null());
    type Gpa2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> R;
    type Gpa1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> R;
    // SAFETY: the driver's cuGetProcAddress(_v2) signatures.
    let (gpa2, gpa1): (Gpa2, Gpa1) = unsafe {
        (
            std::mem::transmute(sym(h, "cuGetProcAddress_v2", false)),
            std::mem::transmute(sym(h, "cuGetProcAddress", false)),
        )
    };
    const PTDS: u64 = 2;
    let cases: &[(&str, c_int, u64, &str)] = &[
        ("cuMemAlloc", 2000, 0, "cuMemAlloc"),
        ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
        ("cuMemAlloc", 12080, 0, "cuMemAlloc_v2"),
        ("cuMemGetInfo", 2000, 0, "cuMemGetInfo"),
        ("cuMemGetInfo", 11030, 0, "cuMemGetInfo_v2"),
        ("cuGraphInstantiate", 10000, 0, "cuGraphInstantiate"),
        ("cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"),
        (
            "cuGraphInstantiate",
            12000,
            0,
            "cuGraphInstantiateWithFlags",
        ),
        ("cuLaunchKernel", 12000, 0, "cuLaunchKernel"),
        ("cuLaunchKernel", 12000, PTDS, "cuLaunchKernel_ptsz"),
        ("cuMemAllocAsync", 11020, PTDS, "cuMemAllocAsync_ptsz"),
        ("cuMemAllocAsync", 12080, 0, "cuMemAllocAsync"),
    ];
    let mut ok = 0;
    for &(name, ver, flags, export) in cases {
        let n = CString::new(name).unwrap();
        let (mut p2, mut p1, mut st) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
        // SAFETY: valid pointers.
        let (r2, r1) = unsafe {
            (
                gpa2(n.as_ptr(), &mut p2, ver, flags, &mut st),
                gpa1(n.as_ptr(), &mut p1, ver, flags),
            )
        };
        let want = sym(libc::RTLD_DEFAULT, export, false);
        let good = r2 == 0 && r1 == 0 && p2 == want && p1 == want;
        println!(
            "\nVARIANT {name}@{ver}/{flags} -> {export}: {}",
            if good { "OK" } else { "BAD" }
        );
        ok += u64::from(good);
    }
    println!("\nVARIANTS_OK={ok} VARIANTS={}", cases.len());
}

#[test]
fn child_entry() {
    let Ok(mode) = std::env::var("H4_CHILD") else {
        return;
    };
    let arg = std::env::var("H4_ARG").unwrap_or_default();
    match mode.as_str() {
        "fill" => child_fill(
            &arg,
            std::env::var("H4_CHUNK").map_or(4 * MIB, |c| c.parse().unwrap()),
        ),
        "hold" => child_hold(arg.parse().unwrap()),
        "race" => child_race(arg.parse().unwrap()),
        "variants" => child_variants(),
        "ctx" => child_ctx(arg.parse().unwrap()),
        "stack" => child_stack(&arg),
        "other_handle" => child_other_handle(&arg),
        m => panic!("unknown child mode {m}"),
    }
}

// ---------------------------------------------------------------- parent side

/// A larger stack limit makes the driver reserve local memory for every resident thread at once,
/// outside any allocation (issue 32: 16.6 GiB for 64 KiB on an H200). The interposer charges the
/// growth under the cap first: on the simulated H100 (132 SMs × 2 048 threads) 1 024 bytes more
/// per thread is 264 MiB, refused in a 64 MiB slice; 64 more is 16.5 MiB, granted and no longer
/// available to allocations; setting it again, or lower, costs nothing more.
#[test]
fn a_larger_stack_is_charged_before_the_driver_reserves_it() {
    let e = setup("stack");
    let (out, err) = e.run(
        "stack",
        true,
        &[
            ("H4_ARG", "2048,1088,1088,512,1088"),
            ("GPUSLICE_MEMORY", "64Mi"),
        ],
    );
    assert_eq!(
        field(&out, "STACK_2048"),
        2,
        "refused: OUT_OF_MEMORY\n{out}\n{err}"
    );
    assert_eq!(field(&out, "STACK_1088"), 0, "{out}\n{err}");
    assert_eq!(field(&out, "STACK_512"), 0, "{out}\n{err}");
    // 64 × 270 336 B = 16.5 MiB, rounded to 18 MiB (2 MiB steps): 46 MiB left, 11 × 4 MiB.
    assert_eq!(field(&out, "N"), 11, "{out}\n{err}");
}

#[test]
fn cap_is_exact_through_every_entry_path() {
    let e = setup("paths");
    let paths = [
        "dlsym",
        "dlvsym",
        "procaddr:11030",
        "procaddr:12000",
        "procaddr:12080",
    ];
    for how in paths {
        let (out, err) = e.run(
            "fill",
            true,
            &[("H4_ARG", how), ("GPUSLICE_MEMORY", "64Mi")],
        );
        assert_eq!(
            field(&out, "N"),
            16,
            "{how}: 16 × 4 MiB fit in 64 MiB\n{out}\n{err}"
        );
        assert_eq!(
            field(&out, "REFUSAL"),
            2,
            "{how}: refused with CUDA_ERROR_OUT_OF_MEMORY"
        );
        assert_eq!(
            field(&out, "TOTAL"),
            64 * MIB,
            "{how}: cuMemGetInfo total is the cap"
        );
        assert_eq!(
            field(&out, "DEVTOTAL"),
            64 * MIB,
            "{how}: cuDeviceTotalMem is the cap"
        );
        let during = out.split("DURING").nth(1).unwrap();
        assert_eq!(field(during, "FREE"), 0, "{how}: nothing free at the cap");
        let after = out.split("AFTER").nth(1).unwrap();
        assert_eq!(
            field(after, "FREE"),
            64 * MIB,
            "{how}: frees return the memory"
        );
    }
}

#[test]
fn get_proc_address_maps_each_variant_to_its_wrapper() {
    let e = setup("variants");
    let (out, err) = e.run("variants", true, &[("GPUSLICE_MEMORY", "64Mi")]);
    assert_eq!(
        field(&out, "VARIANTS_OK"),
        field(&out, "VARIANTS"),
        "{out}\n{err}"
    );
}

#[test]
fn charges_round_up_to_the_granularity() {
    let e = setup("round");
    // 3 MiB allocations are charged 4 MiB each (2 MiB granularity): 16 fit in 64 MiB.
    let chunk = (3 * MIB).to_string();
    let (out, _) = e.run(
        "fill",
        true,
        &[
            ("H4_ARG", "dlsym"),
            ("H4_CHUNK", &chunk),
            ("CUDA_DEVICE_MEMORY_LIMIT", "64m"),
        ],
    );
    assert_eq!(field(&out, "N"), 16, "{out}");
}

#[test]
fn no_request_behaves_exactly_as_without_the_interposer() {
    let e = setup("same");
    let envs = [("H4_ARG", "dlsym"), ("H4_CHUNK", "8589934592")];
    let (with, err) = e.run("fill", true, &envs);
    let (without, _) = e.run("fill", false, &envs);
    let line = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("N="))
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(line(&with), line(&without));
    assert!(
        err.is_empty() || !err.contains("gpuslice"),
        "no message without a request: {err}"
    );
    assert!(field(&with, "N") > 0);
}

/// A slice directory whose `limits` is garbage: the process the runtime placed in that slice
/// gets no context (`CUDA_ERROR_NOT_PERMITTED`, 800) and one message naming the directory and
/// why — it used to run uncapped with a warning. Without the preload the same process runs.
#[test]
fn a_broken_slice_dir_fails_closed() {
    let e = setup("broken");
    let dir = e.dir.join("slice");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("limits"), b"garbage").unwrap();
    std::fs::write(dir.join("lease"), b"garbage").unwrap();
    let d = dir.to_string_lossy().into_owned();
    let envs = [("H4_ARG", "1"), ("GPUSLICE_SLICE_DIR", d.as_str())];
    let (out, err) = e.run("ctx", true, &envs);
    assert_eq!(field(&out, "CTX"), 800, "{out}\n{err}");
    assert!(!out.contains("HOLD="), "{out}");
    let msg = format!("GPUSLICE_SLICE_DIR={d}: the slice directory is unusable (");
    assert_eq!(err.matches(&msg).count(), 1, "{err}");
    assert!(err.contains("CUDA contexts are refused"), "{err}");
    assert!(!err.contains("NOT enforced"), "{err}");
    let (out, _) = e.run(
        "fill",
        false,
        &[
            ("H4_ARG", "dlsym"),
            ("H4_CHUNK", "8589934592"),
            ("GPUSLICE_SLICE_DIR", &d),
        ],
    );
    assert!(field(&out, "N") > 0, "{out}");
}

#[test]
fn slice_directory_caps_apply() {
    let e = setup("slice");
    let dir = e.dir.join("slice");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = gpuslice_region::SliceSpec {
        devices: vec![gpuslice_region::DeviceSpec {
            memory_cap: 32 * MIB,
            ..Default::default()
        }],
        flags: 0,
    };
    gpuslice_region::create_slice(&dir, &spec, false).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let (out, _) = e.run(
        "fill",
        true,
        &[("H4_ARG", "dlsym"), ("GPUSLICE_SLICE_DIR", &d)],
    );
    assert_eq!(field(&out, "N"), 8);
    assert_eq!(field(&out, "TOTAL"), 32 * MIB);
}

/// A slice directory with one device capped at 32 MiB.
fn capped_slice(e: &Env) -> std::path::PathBuf {
    let dir = e.dir.join("slice");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = gpuslice_region::SliceSpec {
        devices: vec![gpuslice_region::DeviceSpec {
            memory_cap: 32 * MIB,
            ..Default::default()
        }],
        flags: 0,
    };
    gpuslice_region::create_slice(&dir, &spec, false).unwrap();
    dir
}

/// A tenant that writes over its slice's writable `usage` header must not leave the processes
/// started afterwards with no cap (the hostile-writer trial, docs/reliability.md). The cap lives in
/// the read-only `limits`, so the process is now held to it through a private usage region.
#[test]
fn damaged_usage_file_still_caps_the_process() {
    let e = setup("damaged");
    let dir = capped_slice(&e);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("usage"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"NOTASLICE", 0).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let (out, err) = e.run(
        "fill",
        true,
        &[("H4_ARG", "dlsym"), ("GPUSLICE_SLICE_DIR", &d)],
    );
    assert_eq!(field(&out, "N"), 8, "{out}\n{err}");
    assert_eq!(err.matches("damaged usage file").count(), 1, "{err}");
    assert!(!err.contains("NOT enforced"), "{err}");
}

/// A tenant that keeps writing zeros over its slice's device totals ("nothing is in use") must
/// not let one process allocate past the cap (the hostile-writer trial). Each process's own
/// charges are now counted in its memory too, and never pass the cap.
#[test]
fn zeroed_usage_totals_cannot_lift_a_process_over_the_cap() {
    let e = setup("zeroed");
    let dir = capped_slice(&e);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("usage"))
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    // Device 0's total is the first word after the 64-byte header.
    let zeroer = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 8], 64).unwrap();
        }
    });
    let d = dir.to_string_lossy().into_owned();
    // Several processes one after another (the window between two allocations is short).
    let counts: Vec<u64> = (0..30)
        .map(|_| {
            let (out, _) = e.run(
                "fill",
                true,
                &[("H4_ARG", "dlsym"), ("GPUSLICE_SLICE_DIR", &d)],
            );
            field(&out, "N")
        })
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    zeroer.join().unwrap();
    // 4 MiB chunks: exactly 8 fit under the cap, every time.
    assert!(
        counts.iter().all(|&n| n == 8),
        "allocations per process: {counts:?}"
    );
}

#[test]
fn sigkilled_holders_are_reclaimed() {
    let e = setup("kill");
    // Children share the parent's standalone region through GPUSLICE_STANDALONE_ID.
    let id = format!("h4test-{}", std::process::id());
    let envs = |arg: &'static str| {
        vec![
            ("H4_ARG", arg),
            ("GPUSLICE_MEMORY", "64Mi"),
            ("GPUSLICE_STANDALONE_ID", id.as_str()),
        ]
    };
    let mut kids = Vec::new();
    for _ in 0..3 {
        let mut k = e.child("hold", true, &envs("16")).spawn().unwrap();
        let mut out = k.stdout.take().unwrap();
        let mut buf = String::new();
        let t0 = Instant::now();
        while !buf.contains("HOLD=") && t0.elapsed() < Duration::from_secs(30) {
            let mut b = [0u8; 256];
            let n = std::io::Read::read(&mut out, &mut b).unwrap();
            if n == 0 {
                break;
            }
            buf.push_str(&String::from_utf8_lossy(&b[..n]));
        }
        assert!(buf.contains("HOLD=0"), "holder did not allocate: {buf}");
        kids.push(k);
    }
    // 48 of 64 MiB are held: a filler gets 4 × 4 MiB.
    let (out, _) = e.run("fill", true, &envs("dlsym"));
    assert_eq!(field(&out, "N"), 4, "{out}");
    for k in &mut kids {
        k.kill().unwrap();
        k.wait().unwrap();
    }
    // The killed holders' 48 MiB come back.
    let (out, _) = e.run("fill", true, &envs("dlsym"));
    assert_eq!(field(&out, "N"), 16, "{out}");
    let _ = std::fs::remove_dir_all(format!("/dev/shm/gpuslice-{}-{id}", uid()));
}

#[test]
fn racing_processes_never_exceed_the_cap() {
    let e = setup("race");
    let id = format!("h4race-{}", std::process::id());
    let cap = 96 * MIB;
    let envs = [
        ("H4_ARG", "2.0"),
        ("GPUSLICE_MEMORY", "96Mi"),
        ("GPUSLICE_STANDALONE_ID", id.as_str()),
    ];
    let kids: Vec<_> = (0..6)
        .map(|_| e.child("race", true, &envs).spawn().unwrap())
        .collect();
    // Sample the simulator's ground truth while they race.
    let mut cfg = gpuslice_sim_core::SimConfig::from_env().unwrap();
    cfg.state_path = e.dir.join("sim-state");
    cfg.ctx_overhead = 0;
    cfg.module_overhead = 0;
    let t0 = Instant::now();
    let mut node = None;
    let mut max_seen = 0;
    while t0.elapsed() < Duration::from_millis(2500) {
        if node.is_none() && e.dir.join("sim-state").exists() {
            node = gpuslice_sim_core::Node::open(cfg.clone()).ok();
        }
        if let Some(n) = &node {
            max_seen = max_seen.max(n.mem_used(0));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut ok = 0;
    for k in kids {
        let out = k.wait_with_output().unwrap();
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{so}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Under load (other tests racing) one child may get nothing; together they must.
        ok += field(&so, "RACE_OK");
    }
    assert!(ok > 0, "no allocation succeeded");
    assert!(node.is_some(), "could not observe the simulator");
    assert!(
        max_seen <= cap,
        "ground truth {max_seen} exceeded the cap {cap}"
    );
    assert!(max_seen > 0, "no allocation observed");
    let _ = std::fs::remove_dir_all(format!("/dev/shm/gpuslice-{}-{id}", uid()));
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

#[allow(dead_code)]
fn unused(_: &CStr) {}

/// Spawns a `ctx` child holding `mib` MiB and waits for its `HOLD=` (or `CTX=` refusal) line.
fn ctx_child(e: &Env, mib: &str, envs: &[(&str, &str)]) -> (std::process::Child, String) {
    let mut all = vec![("H4_ARG", mib)];
    all.extend_from_slice(envs);
    let mut k = e.child("ctx", true, &all).spawn().unwrap();
    let mut out = k.stdout.take().unwrap();
    let mut buf = String::new();
    let t0 = Instant::now();
    while !(buf.contains("HOLD=") || buf.contains("CTX=2"))
        && t0.elapsed() < Duration::from_secs(30)
    {
        let mut b = [0u8; 256];
        let n = std::io::Read::read(&mut out, &mut b).unwrap();
        if n == 0 {
            break;
        }
        buf.push_str(&String::from_utf8_lossy(&b[..n]));
    }
    (k, buf)
}

/// A root-owned slice directory capped at `cap` MiB, charging `ctx` MiB per process context
/// against a `ctx` MiB context reserve (what the arbiter writes for one process per slice).
fn ctx_slice(e: &Env, cap: u64, ctx: u64) -> PathBuf {
    let dir = e.dir.join("slice");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = gpuslice_region::SliceSpec {
        devices: vec![gpuslice_region::DeviceSpec {
            memory_cap: cap * MIB,
            ..Default::default()
        }],
        flags: 0,
    };
    gpuslice_region::create_slice(&dir, &spec, false).unwrap();
    let w = gpuslice_region::LimitsWriter::open(&dir).unwrap();
    w.set_context(0, ctx * MIB, ctx * MIB).unwrap();
    dir
}

/// Issue 15, finding 1: contexts were free, so a slice that forked workers took memory promised
/// to its neighbours. Each process's context is now charged before it can hold memory: the
/// slice's processes together stay within cap + reserve, and a context that does not fit is
/// refused with `CUDA_ERROR_OUT_OF_MEMORY`.
#[test]
fn contexts_count_against_the_slice() {
    let e = setup("ctx");
    let dir = ctx_slice(&e, 64, 32);
    let d = dir.to_string_lossy().into_owned();
    let envs = [("GPUSLICE_SLICE_DIR", d.as_str())];
    // One process alone gets its whole cap: its context is what the reserve is for.
    let (out, _) = e.run("fill", true, &[("H4_ARG", "dlsym"), envs[0]]);
    assert_eq!(field(&out, "N"), 16, "{out}");
    // Two workers, each a context (32) and 8 MiB: 80 of the 96 MiB promised.
    let (mut a, ab) = ctx_child(&e, "8", &envs);
    let (mut b, bb) = ctx_child(&e, "8", &envs);
    assert!(ab.contains("HOLD=0") && bb.contains("HOLD=0"), "{ab}\n{bb}");
    // A third worker's context does not fit: refused before the driver makes it.
    let (mut c, cb) = ctx_child(&e, "8", &envs);
    assert!(
        cb.contains("CTX=2"),
        "a third context must be refused: {cb}"
    );
    let _ = c.kill();
    let _ = c.wait();
    // With one worker gone (SIGKILL), a new process gets what is left of the promise:
    // 96 − 40 (the survivor) − 32 (its own context) = 24 MiB, and says so before allocating.
    a.kill().unwrap();
    a.wait().unwrap();
    let (out, _) = e.run("fill", true, &[("H4_ARG", "dlsym"), envs[0]]);
    assert_eq!(field(&out, "N"), 6, "{out}");
    let before = out.split("BEFORE").nth(1).unwrap_or_default();
    assert_eq!(field(before, "FREE"), 24 * MIB, "{out}");
    assert_eq!(field(before, "TOTAL"), 64 * MIB, "{out}");
    b.kill().unwrap();
    b.wait().unwrap();
}

/// Issue 15, finding 8: after a holder was SIGKILLed, a fresh process's `cuMemGetInfo` showed
/// its memory as still used until a refusal triggered reclaim. Reclaim now runs before the
/// figures are reported.
#[test]
fn free_memory_is_reported_after_reclaim() {
    let e = setup("reclaim-view");
    let dir = capped_slice(&e);
    let d = dir.to_string_lossy().into_owned();
    let (mut k, buf) = ctx_child(&e, "16", &[("GPUSLICE_SLICE_DIR", &d)]);
    assert!(buf.contains("HOLD=0"), "{buf}");
    k.kill().unwrap();
    k.wait().unwrap();
    let (out, _) = e.run(
        "fill",
        true,
        &[("H4_ARG", "dlsym"), ("GPUSLICE_SLICE_DIR", &d)],
    );
    let before = out.split("BEFORE").nth(1).unwrap_or_default();
    assert_eq!(
        field(before, "FREE"),
        32 * MIB,
        "the dead holder's 16 MiB must be free before any refusal: {out}"
    );
}

/// Issue 15, finding 4: `dlsym(handle, "cuMemAlloc_v2")` through another library that links
/// the driver returned the real driver function (glibc searches the handle's dependencies).
#[test]
fn dlsym_through_a_library_that_links_the_driver_gives_our_wrapper() {
    let e = setup("other-handle");
    let src = e.dir.join("other.c");
    std::fs::write(&src, "int other_lib_marker(void) { return 1; }\n").unwrap();
    let lib = e.dir.join("libother.so");
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .arg("-Wl,--no-as-needed")
        .arg(e.dir.join("lib/libcuda.so.1"))
        .status()
        .expect("cc (a C compiler is needed to build the test library)");
    assert!(st.success());
    let l = lib.to_string_lossy().into_owned();
    let (out, err) = e.run(
        "other_handle",
        true,
        &[("H4_ARG", &l), ("GPUSLICE_MEMORY", "64Mi")],
    );
    assert_eq!(field(&out, "OWN"), 1, "{out}\n{err}");
    assert_eq!(
        field(&out, "OURS"),
        1,
        "the lookup must give our wrapper: {out}\n{err}"
    );
}

/// Issue 15, finding 4: a slice directory the tenant made (cap = u64::MAX) was obeyed. Limits
/// the tenant could have written are ignored, with one message, and the environment's request
/// (if any) applies instead; without one the process gets no context (fails closed).
#[test]
fn untrusted_slice_directories_are_ignored() {
    use std::os::unix::fs::PermissionsExt;
    if uid() != 0 {
        assert!(std::env::var_os("CI").is_none(), "needs root in CI");
        eprintln!("SKIPPED: needs root (to make a root-owned and another uid's directory)");
        return;
    }
    let e = setup("untrusted");
    let dir = capped_slice(&e);
    let d = dir.to_string_lossy().into_owned();
    let run = |envs: &[(&str, &str)]| {
        let mut all = vec![("H4_ARG", "dlsym"), ("GPUSLICE_SLICE_DIR", d.as_str())];
        all.extend_from_slice(envs);
        e.run("fill", true, &all)
    };
    // Root-owned, writable by nobody else: trusted.
    let (out, err) = run(&[]);
    assert_eq!(field(&out, "N"), 8, "{out}\n{err}");
    assert!(!err.contains("not trusted"), "{err}");
    // Writable by others: ignored; the environment's 16 MiB applies.
    std::fs::set_permissions(dir.join("limits"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let (out, err) = run(&[("GPUSLICE_MEMORY", "16Mi")]);
    assert_eq!(field(&out, "N"), 4, "{out}\n{err}");
    assert_eq!(err.matches("not trusted").count(), 1, "{err}");
    std::fs::set_permissions(dir.join("limits"), std::fs::Permissions::from_mode(0o644)).unwrap();
    // Owned by another uid (a directory the tenant made), nothing else asked for: its limits
    // are not obeyed, and the process, placed in a slice it cannot trust, gets no context.
    for p in [dir.clone(), dir.join("limits"), dir.join("lease")] {
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    }
    let (out, err) = e.run("ctx", true, &[("H4_ARG", "1"), ("GPUSLICE_SLICE_DIR", &d)]);
    assert_eq!(field(&out, "CTX"), 800, "{out}\n{err}");
    assert_eq!(err.matches("not trusted").count(), 1, "{err}");
    assert!(err.contains("owned by uid 65534"), "{err}");
    assert!(err.contains("CUDA contexts are refused"), "{err}");
}
