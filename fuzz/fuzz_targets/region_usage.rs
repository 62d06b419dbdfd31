//! Fuzz target `region_usage`: arbitrary bytes as a slice's tenant-writable `usage` file, read
//! the way the arbiter and `gpuslice status` read it (`Usage::open_read_only`, `snapshot`,
//! `used`, `held`, `sched_sample`).
//!
//! Input: the first byte picks the mode. Mode 0: the rest is the whole file (almost always
//! refused at open: size and header are checked). Otherwise: the rest is a list of
//! `(offset: u32 LE, value: u64 LE)` patches over a valid usage file written by the region
//! crate (`create_slice`), i.e. any word a tenant can store after the header check passes;
//! the patches may also hit the header. The byte after the mode picks the caps. A record whose
//! pid is `u32::MAX` is given this process's pid and start time (a live process).
//!
//! Invariants: no panic, no hang; a snapshot reports exactly the slice's device count, never a
//! per-device total or per-process figure above that device's cap, only records in state LIVE
//! with a pid in 1..=2^22, at most `MAX_PROCS` of them, each with one figure per device.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use std::mem::size_of;

use gpuslice_region::layout::{DeviceUsage, FileHeader, ProcRecord, UNCAPPED, USAGE_FILE};
use gpuslice_region::{create_slice, DeviceSpec, SliceSpec, Usage, MAX_DEVICES, MAX_PROCS};
use libfuzzer_sys::fuzz_target;

/// A directory on tmpfs when there is one (the file is rewritten on every run).
fn scratch() -> &'static (PathBuf, Vec<u8>) {
    static DIR: OnceLock<(PathBuf, Vec<u8>)> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("gpuslice-fuzz-usage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let spec = SliceSpec {
            devices: (0..2)
                .map(|i| DeviceSpec {
                    host_index: i,
                    uuid: format!("GPU-fuzz-{i}"),
                    memory_cap: 1 << 30,
                    ..DeviceSpec::default()
                })
                .collect(),
            flags: 0,
        };
        create_slice(&dir, &spec, true).expect("create slice");
        let valid = std::fs::read(dir.join(USAGE_FILE)).expect("read usage");
        (dir, valid)
    })
}

/// Offset of the first process record (header + device table).
const RECORDS_AT: usize = size_of::<FileHeader>() + size_of::<DeviceUsage>() * MAX_DEVICES;
/// Size of one process record.
const RECORD_SIZE: usize = size_of::<ProcRecord>();

/// Records whose pid is `u32::MAX` become this process, with its real start time: a tenant
/// can name its own live processes, which a fuzzer cannot guess.
fn adopt_self(img: &mut [u8]) {
    static ME: OnceLock<(u32, u64)> = OnceLock::new();
    let (pid, start) = *ME.get_or_init(|| {
        let start = gpuslice_region::liveness::self_start_time().unwrap_or(0);
        (std::process::id(), start)
    });
    for rec in 0..MAX_PROCS {
        let at = RECORDS_AT + rec * RECORD_SIZE;
        let Some(word) = img.get(at..at + 16) else {
            return;
        };
        let state = u64::from_le_bytes(word[..8].try_into().unwrap());
        if (state >> 32) as u32 == u32::MAX {
            let state = (state & 0xffff_ffff) | (u64::from(pid) << 32);
            img[at..at + 8].copy_from_slice(&state.to_le_bytes());
            img[at + 8..at + 16].copy_from_slice(&start.to_le_bytes());
        }
    }
}

/// Cap sets: one device capped, several capped and uncapped, tiny caps, zero caps, all devices.
fn caps(pick: u8) -> (usize, Vec<u64>) {
    match pick % 6 {
        0 => (1, vec![1 << 30]),
        1 => (2, vec![1 << 30, UNCAPPED]),
        2 => (3, vec![0, 1, 4096]),
        3 => (MAX_DEVICES, vec![7; MAX_DEVICES]),
        // Fewer caps than devices: the rest are uncapped.
        4 => (4, vec![100]),
        _ => (0, vec![]),
    }
}

fuzz_target!(|data: &[u8]| {
    let (dir, valid) = scratch();
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (pick, rest) = rest.split_first().map_or((0, rest), |(p, r)| (*p, r));
    let image = if mode == 0 {
        rest.to_vec()
    } else {
        let mut img = valid.clone();
        for patch in rest.chunks_exact(12) {
            let off = u32::from_le_bytes(patch[..4].try_into().unwrap()) as usize;
            let off = (off % img.len()) & !7;
            let end = (off + 8).min(img.len());
            img[off..end].copy_from_slice(&patch[4..4 + (end - off)]);
        }
        adopt_self(&mut img);
        img
    };
    let path = dir.join(USAGE_FILE);
    std::fs::write(&path, &image).expect("write usage");
    let (devices, caps) = caps(pick);
    let Ok(usage) = Usage::open_read_only(dir, devices) else {
        return;
    };
    let cap = |d: usize| caps.get(d).copied().unwrap_or(UNCAPPED);
    let snap = usage.snapshot(&caps);
    assert_eq!(snap.used.len(), devices);
    for (d, u) in snap.used.iter().enumerate() {
        assert!(*u <= cap(d), "device {d}: used {u} over cap {}", cap(d));
    }
    assert!(snap.processes.len() <= MAX_PROCS);
    for p in &snap.processes {
        assert!(p.record < MAX_PROCS);
        assert!(p.pid >= 1 && p.pid <= 1 << 22, "pid {}", p.pid);
        assert_eq!(p.reserved.len(), devices);
        for (d, r) in p.reserved.iter().enumerate() {
            assert!(*r <= cap(d), "record {} device {d}: {r} over cap", p.record);
        }
    }
    for d in 0..MAX_DEVICES + 2 {
        let u = usage.used(d);
        if d >= devices {
            assert_eq!(u, 0, "device {d} beyond the slice reports use");
        }
        // Raw totals carry at most the 48 bytes bits: a frozen word never leaks its flag bits.
        assert!(u < 1 << 48);
        let _ = usage.sched_sample(d);
        let _ = usage.held(MAX_PROCS, d);
        let _ = usage.held(0, d);
    }
});
