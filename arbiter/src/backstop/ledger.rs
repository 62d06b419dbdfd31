//! What the interposer counted for each process of a slice, read from the slice's `usage`
//! records (validated by the region crate), for the backstop's per-process footprint: NVML's
//! figure for a process less its allocations is its own context and modules
//! (`docs/contexts.md`). Tenant-written, so only ever shown or named in a message, never the
//! ground of a kill.

use std::path::Path;

use gpuslice_region::{Limits, Usage};

use super::engine::Counted;

/// The allocations of every live record of the slice in `dir` on its device at position
/// `dev`: each record's bytes less the context charge the interposer adds to it there.
/// `None` when the slice's files cannot be read or `dev` is not one of its devices.
pub fn allocations(dir: &Path, dev: usize) -> Option<Vec<Counted>> {
    let limits = Limits::open(dir).ok()?;
    let n = limits.device_count();
    if dev >= n {
        return None;
    }
    let usage = Usage::open_read_only(dir, n).ok()?;
    // Clamped to what the slice may hold there (cap plus reserve: a process at its cap holds
    // its cap plus its context charge), so a hostile record cannot show more.
    let bounds: Vec<u64> = (0..n).map(|d| limits.memory_limit(d)).collect();
    let (charge, _) = limits.context(dev);
    let snap = usage.snapshot_by(&bounds, &|_, _| true);
    Some(
        snap.processes
            .iter()
            .map(|p| Counted {
                pid: p.pid,
                start: p.start_time,
                bytes: p
                    .reserved
                    .get(dev)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(charge),
            })
            .collect(),
    )
}

/// The innermost pid of host process `pid` (`NSpid` of `<proc_root>/<pid>/status`).
pub fn ns_pid(proc_root: &Path, pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
    gpuslice_region::liveness::innermost_nspid(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuslice_region::{create_slice, DeviceSpec, LimitsWriter, SliceSpec};

    const MI: u64 = 1 << 20;

    #[test]
    fn a_record_less_its_context_charge_is_what_was_counted() {
        let dir = std::env::temp_dir().join(format!("gs-ledger-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dev = |i: u32| DeviceSpec {
            host_index: i,
            uuid: format!("GPU-{i}"),
            memory_cap: 1024 * MI,
            device_total: 1 << 40,
            compute_guarantee: 0,
            compute_limit: 10_000,
            priority: 1,
        };
        let spec = SliceSpec {
            devices: vec![dev(0), dev(1)],
            flags: 0,
        };
        create_slice(&dir, &spec, false).unwrap();
        LimitsWriter::open(&dir)
            .unwrap()
            .set_context(1, 774 * MI, 774 * MI)
            .unwrap();
        let usage = Usage::open(&dir, 2).unwrap();
        let rec = usage.claim(4121, 77).unwrap();
        // Its context charge and its whole 1 GiB cap on device 1.
        usage.reserve(rec, 1, 774 * MI, u64::MAX).unwrap();
        usage.reserve(rec, 1, 1024 * MI, u64::MAX).unwrap();
        let got = allocations(&dir, 1).unwrap();
        assert_eq!(
            got,
            vec![Counted {
                pid: 4121,
                start: 77,
                bytes: 1024 * MI
            }]
        );
        // Device 0 charges no context: nothing taken off, nothing held.
        assert_eq!(allocations(&dir, 0).unwrap()[0].bytes, 0);
        assert_eq!(allocations(&dir, 2), None, "not one of its devices");
        assert_eq!(allocations(&dir.join("gone"), 0), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn own_pid_outside_containers_is_the_pid() {
        let me = std::process::id();
        assert_eq!(ns_pid(Path::new("/proc"), me), Some(me));
        assert_eq!(ns_pid(Path::new("/proc"), u32::MAX - 1), None);
    }
}
