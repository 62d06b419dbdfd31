//! Memory gate end to end on the simulated GPU, through every allocation path: OOM exactly at the
//! cap with the simulator's ground truth equal to the slice's count, CUDA and NVML totals that
//! agree, refused driver calls that give their reservation back, per-device caps under
//! `CUDA_VISIBLE_DEVICES` re-indexing, a process and its children sharing a standalone cap, and
//! the race of 32 processes × 4 threads over every path for 10 s (`GPUSLICE_RACE_QUICK=1`: 8 × 4
//! for 3 s), with the simulator's ground truth sampled throughout and every refusal checked
//! against the slice usage it saw (`GPUSLICE_LOG=debug` lines of the children).
//!
//! Build the simulator first: `cargo build -p gpuslice-sim-cuda -p gpuslice-sim-nvml`.

#![allow(clippy::missing_transmute_annotations)]

#[macro_use]
mod support;

use gpuslice_cuda_abi::nvml::*;
use std::ffi::{c_uint, c_void};
use std::io::Read;
use std::time::{Duration, Instant};
use support::paths::{self, Path};
use support::{field, setup, uid, Driver, MIB};

// ---------------------------------------------------------------- child side

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The simulator's ground truth for host device `dev`, from inside a child.
fn truth(dev: u32) -> u64 {
    let cfg = gpuslice_sim_core::SimConfig::from_env().expect("sim config");
    gpuslice_sim_core::Node::open(cfg)
        .expect("sim node")
        .mem_used(dev)
}

/// NVML's view of host device `index`: (total, used, free) from `nvmlDeviceGetMemoryInfo` and
/// the same from `_v2`.
fn nvml_view(index: u32) -> ((u64, u64, u64), (u64, u64, u64)) {
    // SAFETY: loading the (simulated) NVML by soname.
    let h = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null());
    let sym = |n: &std::ffi::CStr| {
        // SAFETY: valid handle and name.
        let p = unsafe { libc::dlsym(h, n.as_ptr()) };
        assert!(!p.is_null(), "{n:?}");
        p
    };
    // SAFETY: NVML entry points with their nvml.h signatures.
    unsafe {
        let init: unsafe extern "C" fn() -> u32 = std::mem::transmute(sym(c"nvmlInit_v2"));
        assert_eq!(init(), 0);
        let get: unsafe extern "C" fn(c_uint, *mut nvmlDevice_t) -> u32 =
            std::mem::transmute(sym(c"nvmlDeviceGetHandleByIndex_v2"));
        let mut dev: nvmlDevice_t = std::mem::zeroed();
        assert_eq!(get(index, &mut dev), 0);
        let info: unsafe extern "C" fn(nvmlDevice_t, *mut nvmlMemory_t) -> u32 =
            std::mem::transmute(sym(c"nvmlDeviceGetMemoryInfo"));
        let mut m = nvmlMemory_t::default();
        assert_eq!(info(dev, &mut m), 0);
        let info2: unsafe extern "C" fn(nvmlDevice_t, *mut nvmlMemory_v2_t) -> u32 =
            std::mem::transmute(sym(c"nvmlDeviceGetMemoryInfo_v2"));
        let mut m2: nvmlMemory_v2_t = std::mem::zeroed();
        m2.version = nvmlMemory_v2;
        assert_eq!(info2(dev, &mut m2), 0);
        ((m.total, m.used, m.free), (m2.total, m2.used, m2.free))
    }
}

fn child_fill() {
    let path = Path::parse(&std::env::var("H6_PATH").unwrap_or("plain".into()));
    let mib = env_or("H6_MIB", 4);
    let dev = env_or("H6_DEV", 0) as i32;
    let host = env_or("H6_HOSTDEV", dev as u64) as u32;
    let d = Driver::open();
    d.context(dev);
    let c = paths::prepare(&d, dev);
    let truth0 = truth(host);
    let mut held = Vec::new();
    let refusal = loop {
        let (r, h) = paths::alloc(&d, &c, path, mib, dev);
        match h {
            Some(h) => held.push(h),
            None => break r,
        }
        if held.len() > 10_000 {
            break 0;
        }
    };
    let (free, total) = d.mem_info();
    let ((nt, nu, nf), (n2t, n2u, n2f)) = nvml_view(host);
    println!(
        "\nN={} REFUSAL={refusal} TRUTH={} FREE_FULL={free} TOTAL={total} \
         NVML_TOTAL={nt} NVML_USED={nu} NVML_FREE={nf} NVML2_TOTAL={n2t} NVML2_USED={n2u} NVML2_FREE={n2f}",
        held.len(),
        truth(host) - truth0
    );
    for h in held {
        paths::free(&d, &c, h);
    }
    d.sync();
    let (free, _) = d.mem_info();
    println!("\nFREE_AFTER={free} TRUTH_AFTER={}", truth(host) - truth0);
}

fn used(d: &Driver) -> u64 {
    let (f, t) = d.mem_info();
    t - f
}

fn child_refuse() {
    use gpuslice_cuda_abi::memory::*;
    let d = Driver::open();
    d.context(0);
    let c = paths::prepare(&d, 0);
    let (_, h) = paths::alloc(&d, &c, Path::Plain, 4, 0);
    let before = used(&d);
    let mut out = String::new();
    let mut report = |name: &str, r: u32, d: &Driver| {
        out.push_str(&format!(" {name}_R={r} {name}_USED={}", used(d)));
    };
    let (mut p, mut pitch) = (0u64, 0usize);
    let r = cu!(d, "cuMemAllocPitch_v2": fn(*mut u64, *mut usize, usize, usize, u32)
        (&mut p, &mut pitch, 4096, 1024, 3));
    report("PITCH", r, &d);
    let r = cu!(d, "cuMemAllocManaged": fn(*mut u64, usize, u32) (&mut p, 4 << 20, 0));
    report("MANAGED", r, &d);
    let cube = CUDA_ARRAY3D_DESCRIPTOR {
        Width: 512,
        Height: 256,
        Depth: 6,
        Format: CU_AD_FORMAT_FLOAT,
        NumChannels: 1,
        Flags: CUDA_ARRAY3D_CUBEMAP,
    };
    let mut a: *mut c_void = std::ptr::null_mut();
    let r = cu!(d, "cuArray3DCreate_v2": fn(*mut *mut c_void, *const CUDA_ARRAY3D_DESCRIPTOR) (&mut a, &cube));
    report("CUBE", r, &d);
    let prop = CUmemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        },
        ..Default::default()
    };
    let mut hv = 0u64;
    let r = cu!(d, "cuMemCreate": fn(*mut u64, usize, *const CUmemAllocationProp, u64) (&mut hv, 4 << 20, &prop, 1));
    report("VMM", r, &d);
    let bad_pool = 0xdead_0000usize as *mut c_void;
    let r = cu!(d, "cuMemAllocFromPoolAsync": fn(*mut u64, usize, *mut c_void, *mut c_void)
        (&mut p, 4 << 20, bad_pool, std::ptr::null_mut()));
    report("POOL", r, &d);
    println!("\nBEFORE={before}{out}");
    if let Some(h) = h {
        paths::free(&d, &c, h);
    }
}

fn child_hold() {
    let d = Driver::open();
    d.context(0);
    let c = paths::prepare(&d, 0);
    let (r, h) = paths::alloc(&d, &c, Path::Plain, env_or("H6_MIB", 16), 0);
    println!("\nHOLD={r}");
    std::thread::sleep(Duration::from_secs(120));
    let _ = h;
}

/// A top process with a standalone cap and a child it starts: they share the cap; the child is
/// SIGKILLed and its memory comes back.
fn child_family() {
    let d = Driver::open();
    d.context(0);
    let c = paths::prepare(&d, 0);
    let (r, own) = paths::alloc(&d, &c, Path::Plain, 16, 0);
    assert_eq!(r, 0);
    let id = std::env::var("GPUSLICE_STANDALONE_ID").unwrap_or_default();
    let mut kid = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("H6_CHILD", "hold")
        .env("H6_MIB", "32")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = kid.stdout.take().unwrap();
    let mut buf = String::new();
    let t0 = Instant::now();
    while !buf.contains("HOLD=") && t0.elapsed() < Duration::from_secs(60) {
        let mut b = [0u8; 256];
        let n = out.read(&mut b).unwrap();
        if n == 0 {
            break;
        }
        buf.push_str(&String::from_utf8_lossy(&b[..n]));
    }
    let fill = |d: &Driver| {
        let mut held = Vec::new();
        while let (0, Some(h)) = paths::alloc(d, &c, Path::Plain, 4, 0) {
            held.push(h);
        }
        let n = held.len();
        for h in held {
            paths::free(d, &c, h);
        }
        n
    };
    let shared = fill(&d);
    kid.kill().unwrap();
    kid.wait().unwrap();
    let after = fill(&d);
    println!(
        "\nID_SET={} KID={} SHARED={shared} AFTER_KILL={after}",
        u8::from(!id.is_empty()),
        u8::from(buf.contains("HOLD=0"))
    );
    let _ = own;
}

fn child_race() {
    let seconds: f64 = std::env::var("H6_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.0);
    let d = std::sync::Arc::new(Driver::open());
    d.context(0);
    let pool = paths::prepare(&d, 0).pool;
    let only: Vec<Path> = std::env::var("H6_PATHS")
        .map(|v| v.split(',').map(Path::parse).collect())
        .unwrap_or_else(|_| paths::ALL.to_vec());
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let d = d.clone();
            let only = only.clone();
            std::thread::spawn(move || {
                d.context(0);
                let c = paths::Ctx { pool };
                let mut x = (u64::from(std::process::id()) << 8 | t)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    | 1;
                let mut held = Vec::new();
                let (mut ok, mut oom) = (0u64, 0u64);
                while Instant::now() < deadline {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if x % 3 != 0 || held.is_empty() {
                        let path = only[(x >> 20) as usize % only.len()];
                        let mib = (x >> 8) % 6 + 1;
                        let (r, h) = paths::alloc(&d, &c, path, mib, 0);
                        assert!(r == 0 || r == 2, "{path:?}: unexpected {r}");
                        match h {
                            Some(h) => {
                                held.push(h);
                                ok += 1;
                            }
                            None => oom += 1,
                        }
                    } else {
                        let i = (x as usize >> 4) % held.len();
                        paths::free(&d, &c, held.swap_remove(i));
                        if x % 7 == 0 {
                            d.sync();
                        }
                    }
                }
                for h in held {
                    paths::free(&d, &c, h);
                }
                (ok, oom)
            })
        })
        .collect();
    let (mut ok, mut oom) = (0, 0);
    for t in threads {
        let (a, b) = t.join().unwrap();
        ok += a;
        oom += b;
    }
    println!("\nRACE_OK={ok} RACE_OOM={oom}");
}

#[test]
fn child_entry() {
    let Ok(mode) = std::env::var("H6_CHILD") else {
        return;
    };
    match mode.as_str() {
        "fill" => child_fill(),
        "refuse" => child_refuse(),
        "hold" => child_hold(),
        "family" => child_family(),
        "race" => child_race(),
        m => panic!("unknown child mode {m}"),
    }
}

// ---------------------------------------------------------------- parent side

#[test]
fn every_allocation_path_hits_oom_exactly_at_the_cap_and_totals_agree() {
    let e = setup("fill");
    let cap = 64 * MIB;
    for &path in paths::ALL {
        let name = format!("{path:?}");
        let (out, err) = e.run(
            "fill",
            &[("H6_PATH", name.as_str()), ("GPUSLICE_MEMORY", "64Mi")],
        );
        let unit = paths::charge(path, 4);
        let n = field(&out, "N");
        let ctx = format!("{name}\n{out}\n{err}");
        assert_eq!(n, cap / unit, "{ctx}: fills the cap exactly");
        assert_eq!(field(&out, "REFUSAL"), 2, "{ctx}: CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(
            field(&out, "TRUTH"),
            n * unit,
            "{ctx}: driver truth = count"
        );
        let free = field(&out, "FREE_FULL");
        assert_eq!(free, cap - n * unit, "{ctx}: cuMemGetInfo free at the cap");
        assert_eq!(field(&out, "TOTAL"), cap, "{ctx}");
        for p in ["NVML", "NVML2"] {
            assert_eq!(field(&out, &format!("{p}_TOTAL")), cap, "{ctx}: {p} total");
            assert_eq!(
                field(&out, &format!("{p}_USED")),
                cap - free,
                "{ctx}: {p} used"
            );
            assert_eq!(field(&out, &format!("{p}_FREE")), free, "{ctx}: {p} free");
        }
        assert_eq!(field(&out, "FREE_AFTER"), cap, "{ctx}: frees return it all");
        assert_eq!(field(&out, "TRUTH_AFTER"), 0, "{ctx}");
    }
}

#[test]
fn refused_driver_calls_return_their_reservation() {
    let e = setup("refuse");
    let (out, err) = e.run("refuse", &[("GPUSLICE_MEMORY", "64Mi")]);
    let before = field(&out, "BEFORE");
    assert_eq!(before, 4 * MIB, "{out}");
    for case in ["PITCH", "MANAGED", "CUBE", "VMM", "POOL"] {
        let r = field(&out, &format!("{case}_R"));
        assert!(
            r != 0 && r != 2,
            "{case}: the driver's own error, got {r}\n{out}\n{err}"
        );
        assert_eq!(
            field(&out, &format!("{case}_USED")),
            before,
            "{case}: usage unchanged\n{out}"
        );
    }
}

const TWO_DEVICES: &str = "mem=1Gi,uuid=GPU-11111111-1111-1111-1111-111111111111;\
                           mem=1Gi,uuid=GPU-22222222-2222-2222-2222-222222222222";

#[test]
fn caps_follow_devices_across_cuda_visible_devices() {
    let e = setup("cvd");
    let dir = e.dir.join("slice");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = gpuslice_region::SliceSpec {
        devices: vec![
            gpuslice_region::DeviceSpec {
                host_index: 0,
                uuid: "GPU-11111111-1111-1111-1111-111111111111".into(),
                memory_cap: 32 * MIB,
                ..Default::default()
            },
            gpuslice_region::DeviceSpec {
                host_index: 1,
                uuid: "GPU-22222222-2222-2222-2222-222222222222".into(),
                memory_cap: 64 * MIB,
                ..Default::default()
            },
        ],
        flags: 0,
    };
    gpuslice_region::create_slice(&dir, &spec, false).unwrap();
    let d = dir.to_string_lossy().into_owned();
    // (CUDA_VISIBLE_DEVICES, CUDA ordinal, host device, cap)
    for (cvd, ord, host, cap) in [
        ("0,1", "0", "0", 32),
        ("0,1", "1", "1", 64),
        ("1", "0", "1", 64),
        ("1,0", "0", "1", 64),
        ("1,0", "1", "0", 32),
    ] {
        let (out, err) = e.run(
            "fill",
            &[
                ("GPUSLICE_SLICE_DIR", d.as_str()),
                ("GPUSLICE_SIM_DEVICES", TWO_DEVICES),
                ("CUDA_VISIBLE_DEVICES", cvd),
                ("H6_DEV", ord),
                ("H6_HOSTDEV", host),
            ],
        );
        let ctx = format!("CUDA_VISIBLE_DEVICES={cvd} ordinal {ord}\n{out}\n{err}");
        assert_eq!(field(&out, "N"), cap / 4, "{ctx}");
        assert_eq!(field(&out, "TOTAL"), cap * MIB, "{ctx}");
        assert_eq!(field(&out, "NVML_TOTAL"), cap * MIB, "{ctx}");
        assert_eq!(field(&out, "TRUTH"), cap * MIB, "{ctx}");
    }
}

#[test]
fn a_process_and_its_children_share_the_standalone_cap() {
    let e = setup("family");
    let (out, err) = e.run("family", &[("GPUSLICE_MEMORY", "64Mi")]);
    let ctx = format!("{out}\n{err}");
    assert_eq!(field(&out, "ID_SET"), 1, "load-time id for children: {ctx}");
    assert_eq!(field(&out, "KID"), 1, "child allocated: {ctx}");
    // 16 MiB own + 32 MiB child: 16 MiB left = 4 × 4 MiB.
    assert_eq!(field(&out, "SHARED"), 4, "{ctx}");
    // The SIGKILLed child's 32 MiB came back.
    assert_eq!(field(&out, "AFTER_KILL"), 12, "{ctx}");
}

/// Parses the gate's refusal debug lines: (bytes, used, cap). Two forms: the slice's total
/// (`refused B B on device D: U of C B used`) and the process's own bound (`refused B B on
/// device D: this process alone holds U of C B`).
fn refusals(stderr: &str) -> Vec<(u64, u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.split("refused ").nth(1)?;
            let w: Vec<&str> = rest.split_whitespace().collect();
            let (used, cap) = if w.get(5) == Some(&"this") {
                (w.get(9)?, w.get(11)?)
            } else {
                (w.get(5)?, w.get(7)?)
            };
            Some((
                w.first()?.parse().ok()?,
                used.parse().ok()?,
                cap.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn both_refusal_forms_are_parsed() {
    let text = "gpuslice[1]: refused 4096 B on device 0: 1000 of 4096 B used\n\
                gpuslice[2]: refused 8 B on device 0: this process alone holds 4090 of 4096 B\n\
                gpuslice[3]: refused a context on device 0: OverCap (context 1 B)\n";
    assert_eq!(refusals(text), vec![(4096, 1000, 4096), (8, 4090, 4096)]);
}

#[test]
fn racing_processes_over_every_path_never_exceed_the_cap() {
    // The race: 32 processes × 4 threads for 10 s (about 12 s on 2 cores).
    // GPUSLICE_RACE_QUICK=1 runs 8 × 4 for 3 s while developing.
    let quick = std::env::var("GPUSLICE_RACE_QUICK").is_ok_and(|v| v == "1");
    let (procs, seconds) = if quick { (8, 3.0) } else { (32, 10.0) };
    let e = setup("race");
    let id = format!("h6race-{}", std::process::id());
    let cap = 256 * MIB;
    let secs = seconds.to_string();
    let envs = [
        ("H6_SECONDS", secs.as_str()),
        ("GPUSLICE_MEMORY", "256Mi"),
        ("GPUSLICE_STANDALONE_ID", id.as_str()),
        ("GPUSLICE_LOG", "debug"),
        ("GPUSLICE_SIM_DEVICES", "mem=16Gi"),
    ];
    let only = std::env::var("H6_PATHS").unwrap_or_default();
    let kids: Vec<_> = (0..procs)
        .map(|_| {
            let mut c = e.child("race", &envs);
            if !only.is_empty() {
                c.env("H6_PATHS", &only);
            }
            c.spawn().unwrap()
        })
        .collect();
    let t0 = Instant::now();
    let mut node = None;
    let mut max_seen = 0;
    let mut samples = 0u64;
    while t0.elapsed() < Duration::from_secs_f64(seconds + 0.5) {
        if node.is_none() {
            node = e.node(Some("mem=16Gi"));
        }
        if let Some(n) = &node {
            // The simulator releases what dead processes held lazily; the driver does it at
            // process exit.
            n.reap_dead();
            max_seen = max_seen.max(n.mem_used(0));
            samples += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (mut ok, mut oom, mut lines, mut busy) = (0, 0, Vec::new(), 0u64);
    for k in kids {
        let out = k.wait_with_output().unwrap();
        let so = String::from_utf8_lossy(&out.stdout);
        let se = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{so}\n{se}");
        ok += field(&so, "RACE_OK");
        oom += field(&so, "RACE_OOM");
        lines.extend(refusals(&se));
        // A reservation that waited 2 s on a total frozen by a live, descheduled process is
        // refused too (seen only with the 2 cores oversubscribed).
        busy += se.matches("slice usage stayed frozen; refusing").count() as u64;
        // A pool growth the gate could not charge would be an accounting deficit.
        assert!(!se.contains("beyond its reservation"), "{se}");
    }
    eprintln!(
        "race: {procs} processes x 4 threads, {seconds} s: {ok} allocations, {oom} OOM, \
         {} refusals ({busy} on a frozen total), ground truth max {max_seen} of {cap} \
         ({samples} samples)",
        lines.len()
    );
    assert!(
        node.is_some() && samples > 100,
        "could not watch the simulator"
    );
    assert!(
        max_seen <= cap,
        "ground truth {max_seen} exceeded the cap {cap}"
    );
    assert!(
        max_seen > cap / 2,
        "the race never came near the cap ({max_seen})"
    );
    assert!(ok > 100, "too few allocations: {ok}");
    assert!(oom > 0, "the cap was never reached");
    // Every OOM the apps saw is a refusal of the gate (the device itself has 16 GiB), and each
    // refusal happened when the slice's usage plus the rounded size did not fit.
    assert!(
        lines.len() as u64 + busy >= oom,
        "{} refusals + {busy} on a frozen total < {oom} OOMs",
        lines.len()
    );
    assert!(
        busy * 20 <= oom,
        "{busy} of {oom} OOMs came from a frozen total, not the cap"
    );
    for (bytes, used, c) in &lines {
        assert_eq!(*c, cap);
        assert!(
            used + bytes > cap,
            "refused {bytes} B with {used} of {cap} used"
        );
    }
    let _ = std::fs::remove_dir_all(format!("/dev/shm/gpuslice-{}-{id}", uid()));
}

/// `GPUSLICE_SLICE_DIR` naming a directory without slice files: with `GPUSLICE_MEMORY` the
/// environment's cap is enforced and the warning says so (the message once said "NOT enforced"
/// while enforcing); without any request the process, placed in a slice it cannot attach to,
/// fails closed: its context is refused with `CUDA_ERROR_NOT_PERMITTED` (800), with one message,
/// where it used to run uncapped.
#[test]
fn an_empty_slice_dir_says_what_is_enforced() {
    let e = setup("emptydir");
    let empty = e.dir.join("no-slice-here");
    std::fs::create_dir_all(&empty).unwrap();
    let d = empty.to_string_lossy().into_owned();
    let (out, err) = e.run(
        "fill",
        &[
            ("GPUSLICE_SLICE_DIR", d.as_str()),
            ("GPUSLICE_MEMORY", "64Mi"),
        ],
    );
    assert_eq!(field(&out, "TOTAL"), 64 * MIB, "{out}\n{err}");
    assert!(
        err.contains("enforcing the environment's request instead"),
        "{err}"
    );
    assert!(!err.contains("NOT enforced"), "{err}");
    let out = e
        .child("fill", &[("GPUSLICE_SLICE_DIR", d.as_str())])
        .output()
        .unwrap();
    let (so, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "it ran:\n{so}\n{err}");
    assert!(!so.contains("TOTAL="), "it allocated:\n{so}");
    assert!(
        err.contains("right: 0") && err.contains("left: 800"),
        "{err}"
    );
    assert_eq!(
        err.matches(
            "no slice files there and the environment asks for no cap; this process \
                     belongs to a slice it cannot attach to"
        )
        .count(),
        1,
        "{err}"
    );
}
