//! CUDA 13 callers: `cuGetProcAddress(_v2)` at `cudaVersion` 12080, 12090 and 13000, for every
//! entry point we wrap, against the simulator advertising driver 13000
//! (`GPUSLICE_SIM_DRIVER_VERSION`): each must give our wrapper of exactly the variant the CUDA 13
//! headers name for that version (the generated abi table), and entry points whose 13.0 variant
//! changed signature must never get a 12.x wrapper. Plus the CUDA 13.0 pool calls
//! (`cuMemGetMemPool` & co.) charging a pool on its own device.
//!
//! Build the simulator first: `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml`.

#![allow(clippy::missing_transmute_annotations)]

#[macro_use]
mod support;

use gpuslice_cuda_abi::procaddr::{resolve, symbols};
use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use support::{field, setup, Driver, MIB};

const VERSIONS: [c_int; 3] = [12080, 12090, 13000];
const PTDS: u64 = 2;

/// Every CUDA export we wrap, from the declaration the interposer's shells and table are
/// generated from (`gpuslice_cuda_abi::for_each_wrapped!`; `tests/exports.rs` checks the table
/// against it), so a wrapper added there is tested here without editing this file. Not
/// `gpuslice::table::WRAPPED`: linking the table into this binary would link its exported
/// shells too, beside the preloaded library's.
fn wrapped() -> BTreeSet<String> {
    gpuslice_cuda_abi::exports::WRAPPED
        .iter()
        .filter(|f| f.starts_with("cu"))
        .map(|f| f.to_string())
        .collect()
}

/// Whether `p` lies in libgpuslice.so.
fn in_interposer(p: *mut c_void) -> bool {
    // SAFETY: Dl_info is plain pointers; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid out-struct; dladdr only reads `p`.
    if p.is_null() || unsafe { libc::dladdr(p, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: NUL-terminated path of a loaded object.
    unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .ends_with("libgpuslice.so")
}

type Gpa2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> u32;
type Gpa1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> u32;

// ---------------------------------------------------------------- child side

/// For every symbol with a wrapped variant, at each version and flavour: our wrapper of the
/// variant the table names. Prints `CHECKED=`, `SYMBOLS=`, `BAD=` and one line per failure.
fn child_procaddr() {
    let d = Driver::open();
    // SAFETY: the driver's cuGetProcAddress(_v2) signatures.
    let (gpa2, gpa1): (Gpa2, Gpa1) = unsafe {
        (
            std::mem::transmute(d.sym("cuGetProcAddress_v2")),
            std::mem::transmute(d.sym("cuGetProcAddress")),
        )
    };
    let wrapped = wrapped();
    let (mut checked, mut missing, mut bad) = (0, 0, 0);
    let mut seen = BTreeSet::new();
    for symbol in symbols() {
        let has_wrapper = gpuslice_cuda_abi::procaddr::variants(symbol)
            .iter()
            .any(|e| wrapped.contains(e.export));
        for ver in VERSIONS {
            for flags in [0, PTDS] {
                let Ok(export) = resolve(symbol, ver, flags) else {
                    continue;
                };
                let n = CString::new(symbol).unwrap();
                let (mut p2, mut p1, mut st) = (std::ptr::null_mut(), std::ptr::null_mut(), -1);
                // SAFETY: valid strings and out-pointers.
                let (r2, r1) = unsafe {
                    (
                        gpa2(n.as_ptr(), &mut p2, ver, flags, &mut st),
                        gpa1(n.as_ptr(), &mut p1, ver, flags),
                    )
                };
                if !has_wrapper {
                    // Not ours: never substituted.
                    if in_interposer(p2) || in_interposer(p1) {
                        println!("\nBADVAR {symbol}@{ver}/{flags}: substituted, not wrapped");
                        bad += 1;
                    }
                    continue;
                }
                seen.insert(symbol);
                let e = CString::new(export).unwrap();
                // SAFETY: valid handle and name.
                if unsafe { libc::dlsym(d.handle(), e.as_ptr()) }.is_null() {
                    // A wrapper for a call the simulator lacks (real drivers have it): the
                    // lookup must fail as the driver's does, nothing substituted.
                    if r2 != 500 || st != 1 || !p2.is_null() {
                        println!("\nBADVAR {symbol}@{ver}/{flags}: {export} missing, r={r2}");
                        bad += 1;
                    }
                    missing += 1;
                    continue;
                }
                checked += 1;
                // SAFETY: RTLD_DEFAULT lookup; under the preload it yields our wrapper.
                let want = unsafe { libc::dlsym(libc::RTLD_DEFAULT, e.as_ptr()) };
                let good = r2 == 0
                    && r1 == 0
                    && st == 0
                    && wrapped.contains(export)
                    && in_interposer(want)
                    && p2 == want
                    && p1 == want;
                if !good {
                    println!(
                        "\nBADVAR {symbol}@{ver}/{flags} -> {export}: r={r2}/{r1} st={st} ours={}",
                        wrapped.contains(export)
                    );
                    bad += 1;
                }
            }
        }
    }
    // CUDA 13.0's changed signatures: the driver's own v2, never a 12.x wrapper.
    for (symbol, export) in [
        ("cuCtxSynchronize", "cuCtxSynchronize_v2"),
        ("cuCtxGetDevice", "cuCtxGetDevice_v2"),
    ] {
        let n = CString::new(symbol).unwrap();
        let (mut p, mut st) = (std::ptr::null_mut(), -1);
        // SAFETY: valid strings and out-pointers.
        let r = unsafe { gpa2(n.as_ptr(), &mut p, 13000, 0, &mut st) };
        if r != 0 || p != d.sym(export) || in_interposer(p) {
            println!("\nBADVAR {symbol}@13000: not the driver's {export}");
            bad += 1;
        }
    }
    // New in 13.0: not there for a 12.9 caller.
    let n = CString::new("cuMemGetMemPool").unwrap();
    let (mut p, mut st) = (std::ptr::null_mut(), -1);
    // SAFETY: as above.
    let r = unsafe { gpa2(n.as_ptr(), &mut p, 12090, 0, &mut st) };
    if r == 0 || st != 2 || !p.is_null() {
        println!("\nBADVAR cuMemGetMemPool@12090: r={r} st={st}");
        bad += 1;
    }
    println!(
        "\nCHECKED={checked} MISSING={missing} SYMBOLS={} BAD={bad}",
        seen.len()
    );
}

#[repr(C)]
struct Location {
    type_: u32,
    id: c_int,
}

/// Two devices, the context on device 0: 48 MiB from device 1's pool (found with CUDA 13.0's
/// `cuMemGetMemPool`) must be charged on device 1, so 48 MiB still fit on device 0 under a
/// 64 MiB cap per device. Prints `POOL1=` and `DEV0=` (0 = success) and `OVER=` (a second
/// 48 MiB from device 1's pool: refused).
fn child_pool13() {
    let d = Driver::open();
    d.context(0);
    let dev1 = Location { type_: 1, id: 1 };
    let mut pool: *mut c_void = std::ptr::null_mut();
    let r =
        cu!(d, "cuMemGetMemPool": fn(*mut *mut c_void, *const Location, u32) (&mut pool, &dev1, 1));
    assert_eq!(r, 0, "cuMemGetMemPool");
    let r = cu!(d, "cuMemSetMemPool": fn(*const Location, u32, *mut c_void) (&dev1, 1, pool));
    assert_eq!(r, 0, "cuMemSetMemPool");
    let (mut a, mut b, mut c) = (0u64, 0u64, 0u64);
    let size = (48 * MIB) as usize;
    let null = std::ptr::null_mut::<c_void>();
    let pool1 = cu!(d, "cuMemAllocFromPoolAsync": fn(*mut u64, usize, *mut c_void, *mut c_void) (&mut a, size, pool, null));
    d.sync();
    let dev0 = cu!(d, "cuMemAlloc_v2": fn(*mut u64, usize) (&mut b, size));
    let over = cu!(d, "cuMemAllocFromPoolAsync": fn(*mut u64, usize, *mut c_void, *mut c_void) (&mut c, size, pool, null));
    println!("\nPOOL1={pool1} DEV0={dev0} OVER={over}");
}

#[test]
fn child_entry() {
    let Ok(mode) = std::env::var("H6_CHILD") else {
        return;
    };
    match mode.as_str() {
        "procaddr" => child_procaddr(),
        "pool13" => child_pool13(),
        m => panic!("unknown child mode {m}"),
    }
}

// ---------------------------------------------------------------- parent side

#[test]
fn wrapped_list_is_read_from_the_table() {
    let w = wrapped();
    for name in ["cuMemAlloc_v2", "cuLaunchKernel_ptsz", "cuMemSetMemPool"] {
        assert!(w.contains(name), "{name} in {w:?}");
    }
    assert!(!w.iter().any(|n| n.starts_with("nvml")));
}

#[test]
fn every_wrapped_entry_point_resolves_to_the_cuda_13_variant() {
    let e = setup("cuda13-procaddr");
    let (out, err) = e.run(
        "procaddr",
        &[
            ("GPUSLICE_MEMORY", "64Mi"),
            ("GPUSLICE_SIM_DRIVER_VERSION", "13000"),
        ],
    );
    assert_eq!(field(&out, "BAD"), 0, "{out}\n{err}");
    let symbols = field(&out, "SYMBOLS");
    let want: BTreeSet<&str> = symbols_with_wrappers();
    assert_eq!(symbols as usize, want.len(), "{out}");
    // Each at 3 versions × 2 flavours where the table has a variant by then (the 13.0-only
    // cuMemGetMemPool / cuMemSetMemPool / cuMemGetDefaultMemPool: at 13000 only).
    let expected = want
        .iter()
        .flat_map(|s| VERSIONS.map(|v| resolve(s, v, 0).is_ok() as u64 * 2))
        .sum::<u64>();
    assert_eq!(expected, (want.len() as u64 - 3) * 6 + 3 * 2);
    let (checked, missing) = (field(&out, "CHECKED"), field(&out, "MISSING"));
    assert_eq!(checked + missing, expected, "{out}");
    // cuDeviceGraphMemTrim, cuGraphClone and cuGraphAddNode_v2 are wrapped for real drivers
    // but not simulated: at most those three entry points go unchecked.
    assert!(missing <= 3 * 6, "{out}");
}

/// The entry points that have a wrapped variant (each has one at 12080 and later).
fn symbols_with_wrappers() -> BTreeSet<&'static str> {
    let w = wrapped();
    symbols()
        .filter(|s| {
            gpuslice_cuda_abi::procaddr::variants(s)
                .iter()
                .any(|e| w.contains(e.export))
        })
        .collect()
}

#[test]
fn cuda_13_pools_are_charged_on_their_own_device() {
    let e = setup("cuda13-pool");
    let (out, err) = e.run(
        "pool13",
        &[
            ("GPUSLICE_MEMORY", "64Mi"),
            ("GPUSLICE_SIM_DRIVER_VERSION", "13000"),
            (
                "GPUSLICE_SIM_DEVICES",
                "name=NVIDIA H200,mem=1Gi,sms=132,cc=9.0;name=NVIDIA H200,mem=1Gi,sms=132,cc=9.0",
            ),
        ],
    );
    assert_eq!(field(&out, "POOL1"), 0, "{out}\n{err}");
    assert_eq!(
        field(&out, "DEV0"),
        0,
        "device 0 still has room: {out}\n{err}"
    );
    assert_eq!(
        field(&out, "OVER"),
        2,
        "device 1's cap is reached: {out}\n{err}"
    );
}
