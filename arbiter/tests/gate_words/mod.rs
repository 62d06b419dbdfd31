//! Shared by the scheduler-loop tests that play a tenant's side of the launch gate without
//! CUDA: a leased slice directory to drive, the raw futex call the gate uses, and an honest
//! gate made of the region's gate half (`gpuslice_region::lease::gate`), the same code the
//! interposer runs, so the tests never re-create the protocol by hand.

// Each test uses the helpers it needs.
#![allow(dead_code)]

use gpuslice_region::layout::LIMITS_FLAG_LEASED;
use gpuslice_region::lease::gate::{Gate, Proc};
use gpuslice_region::lease::held;
use gpuslice_region::{create_slice, DeviceSpec, Lease, SliceSpec, Usage};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

/// A fresh one-device slice directory with leases on, under the temp dir (`prefix`, `tag` and
/// the test process's pid name it).
pub fn slice_dir(prefix: &str, tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let spec = SliceSpec {
        devices: vec![DeviceSpec::default()],
        flags: LIMITS_FLAG_LEASED,
    };
    assert!(create_slice(&d, &spec, false).unwrap());
    d
}

/// `futex(addr, op, val, timeout_ms)`, result ignored (a wake-up or a timeout both just return).
pub fn futex(addr: *const u32, op: i32, val: u32, timeout_ms: u64) {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: (timeout_ms * 1_000_000) as libc::c_long,
    };
    // SAFETY: `addr` is a word of a live mapping held by the caller; `ts` outlives the call.
    unsafe { libc::syscall(libc::SYS_futex, addr, op, val, &ts as *const libc::timespec) };
}

/// Wakes every waiter on `addr`.
pub fn wake(addr: *const u32) {
    futex(addr, libc::FUTEX_WAKE, i32::MAX as u32, 0);
}

/// The region's gate half over device 0 of an opened slice directory.
pub fn gate<'a>(lease: &'a Lease, usage: &'a Usage) -> Gate<'a, AtomicU32, AtomicU64> {
    Gate::new(lease.slot(0).unwrap(), usage.gate_words(0).unwrap())
}

/// An honest tenant's gate without CUDA, through the region's gate half as the interposer
/// runs it: while `HELD` it registers under the grant and "launches" (`launch`); after a
/// revoke it reports its (empty) drain at once; while not held it waits with `demand` raised
/// (once for the whole wait) on the lease word; at the end it leaves as at exit.
pub fn honest_gate(dir: &Path, stop: &AtomicBool, mut launch: impl FnMut()) {
    let (lease, usage) = (Lease::open(dir).unwrap(), Usage::open(dir, 1).unwrap());
    let gate = gate(&lease, &usage);
    let p = Proc::new();
    while !stop.load(Relaxed) {
        let word = gate.word();
        if held(word) {
            gate.register(&p, word, gate.grant());
            launch();
            continue;
        }
        if let Some(grant) = gate.drain_due(&p, word) {
            gate.drained(&p, grant);
            wake(gate.usage.pending_addr());
        }
        if gate.wait_begins(&p, false) {
            wake(gate.usage.demand_addr());
        }
        let mut word = word;
        while !held(word) && !stop.load(Relaxed) {
            futex(gate.slot.word_addr(), libc::FUTEX_WAIT, word, 50);
            word = gate.word();
        }
        gate.wait_ends(&p, false);
    }
    if gate.exit(&p).pending {
        wake(gate.usage.pending_addr());
    }
}
