//! Shared by the scheduler-loop tests that play a tenant's side of the launch gate without
//! CUDA: a leased slice directory to drive, and the raw futex call the gate uses.

use gpuslice_region::layout::LIMITS_FLAG_LEASED;
use gpuslice_region::{create_slice, DeviceSpec, SliceSpec};
use std::path::PathBuf;

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
