//! Real mmapped slice files: creation, validation, caps, reclaim of SIGKILLed processes and many
//! processes racing on one cap (the test binary re-executes itself for the child processes).

use gpuslice_region::layout::{UsageFile, MAX_PROCS, REC_LIVE};
use gpuslice_region::protocol::Ledger;
use gpuslice_region::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuslice-region-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

fn spec(cap: u64, ndev: usize) -> SliceSpec {
    SliceSpec {
        devices: (0..ndev)
            .map(|i| DeviceSpec {
                host_index: i as u32,
                uuid: format!("GPU-0000000{i}-1111-2222-3333-444444444444"),
                memory_cap: cap,
                device_total: 80 << 30,
                ..DeviceSpec::default()
            })
            .collect(),
        flags: 0,
    }
}

fn me() -> (u32, u64) {
    (
        std::process::id(),
        gpuslice_region::liveness::self_start_time().expect("start time"),
    )
}

#[test]
fn create_open_and_read_back() {
    let d = tmpdir("create");
    assert!(create_slice(&d, &spec(512 * MIB, 2), false).unwrap());
    // A second creation without replace leaves the first in place.
    assert!(!create_slice(&d, &spec(1, 2), false).unwrap());
    let s = Slice::open(&d).unwrap();
    assert_eq!(s.limits.device_count(), 2);
    assert_eq!(s.limits.memory_cap(0), 512 * MIB);
    assert_eq!(s.limits.memory_cap(5), UNCAPPED);
    let dev1 = s.limits.device(1).unwrap();
    assert_eq!(dev1.uuid, "GPU-00000001-1111-2222-3333-444444444444");
    assert_eq!(dev1.host_index, 1);
    let w = s.lease.word(0).unwrap().load();
    assert_eq!(w & layout::LEASE_UNGATED, layout::LEASE_UNGATED);
    // Live resize through the writer is visible at once.
    let lw = LimitsWriter::open(&d).unwrap();
    lw.set_memory_cap(0, 256 * MIB).unwrap();
    assert_eq!(s.limits.memory_cap(0), 256 * MIB);
    let mut d1 = dev1.clone();
    d1.compute_guarantee = 3000;
    lw.set_device(1, &d1).unwrap();
    assert_eq!(s.limits.device(1).unwrap().compute_guarantee, 3000);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn rejects_foreign_and_truncated_files() {
    let d = tmpdir("bad");
    std::fs::write(d.join("limits"), b"not a slice").unwrap();
    let e = Limits::open(&d).unwrap_err().to_string();
    assert!(e.contains("size"), "{e}");
    let size = std::mem::size_of::<layout::LimitsFile>();
    std::fs::write(d.join("limits"), vec![0u8; size]).unwrap();
    let e = Limits::open(&d).unwrap_err().to_string();
    assert!(e.contains("magic"), "{e}");
    assert!(Slice::open(&d.join("missing")).is_err());
    // A usage file opened as limits is refused by its kind.
    create_slice(&d.join(".."), &spec(1, 1), false).ok();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn cap_is_exact_and_release_returns() {
    let d = tmpdir("cap");
    create_slice(&d, &spec(10 * MIB, 1), false).unwrap();
    let s = Slice::open(&d).unwrap();
    let (pid, start) = me();
    let r = s.usage.claim(pid, start).unwrap();
    s.reserve(r, 0, 4 * MIB).unwrap();
    s.reserve(r, 0, 6 * MIB).unwrap();
    assert_eq!(s.usage.used(0), 10 * MIB);
    let e = s.reserve(r, 0, 1).unwrap_err();
    assert_eq!(
        e,
        ReserveError::OverCap {
            used: 10 * MIB,
            cap: 10 * MIB
        }
    );
    assert_eq!(s.usage.used(0), 10 * MIB);
    assert_eq!(s.usage.release(r, 0, 4 * MIB), 4 * MIB);
    // Releasing more than held is clamped.
    assert_eq!(s.usage.release(r, 0, 100 * MIB), 6 * MIB);
    assert_eq!(s.usage.used(0), 0);
    assert!(s.reserve(r, 1, 1).is_err(), "device beyond the slice");
    assert!(s.usage.unclaim(r, pid));
    assert_eq!(s.usage.reclaim(0).unwrap(), 1);
    let _ = std::fs::remove_dir_all(&d);
}

/// Child modes, run when the test binary is re-executed with GPUSLICE_REGION_CHILD set.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var("GPUSLICE_REGION_CHILD") else {
        return;
    };
    let dir = PathBuf::from(std::env::var("GPUSLICE_REGION_DIR").unwrap());
    let s = Slice::open(&dir).unwrap();
    let (pid, start) = me();
    let r = s.usage.claim(pid, start).unwrap();
    match mode.as_str() {
        "hold" => {
            let mib: u64 = std::env::var("GPUSLICE_REGION_MIB")
                .unwrap()
                .parse()
                .unwrap();
            s.reserve(r, 0, mib * MIB).unwrap();
            println!("HOLDING");
            std::thread::sleep(Duration::from_secs(60));
        }
        "race" => {
            let cap = s.limits.memory_cap(0);
            let mut held: Vec<u64> = Vec::new();
            let mut x: u64 = u64::from(pid) * 2654435761;
            let deadline = Instant::now() + Duration::from_millis(1500);
            let mut ok = 0u64;
            while Instant::now() < deadline {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if !x.is_multiple_of(3) || held.is_empty() {
                    let sz = (x % 7 + 1) * MIB;
                    if s.reserve(r, 0, sz).is_ok() {
                        held.push(sz);
                        ok += 1;
                    }
                } else {
                    let i = (x as usize / 3) % held.len();
                    let sz = held.swap_remove(i);
                    assert_eq!(s.usage.release(r, 0, sz), sz);
                }
                let u = s.usage.used(0);
                assert!(u <= cap, "total {u} over cap {cap}");
                if x.is_multiple_of(97) {
                    let _ = s.usage.reclaim(r);
                }
            }
            for sz in held {
                s.usage.release(r, 0, sz);
            }
            println!("\nRACE_OK={ok}");
        }
        _ => panic!("unknown mode"),
    }
}

fn child(dir: &Path, mode: &str, extra: &[(&str, String)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("GPUSLICE_REGION_CHILD", mode)
        .env("GPUSLICE_REGION_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        c.env(k, v);
    }
    c
}

fn wait_line(child: &mut std::process::Child, want: &str) {
    use std::io::{BufRead, BufReader};
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    for l in lines.by_ref() {
        if l.unwrap().contains(want) {
            // Keep draining in the background so the child never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return;
        }
    }
    panic!("child ended before printing {want}");
}

#[test]
fn sigkilled_processes_are_reclaimed() {
    let d = tmpdir("kill");
    create_slice(&d, &spec(100 * MIB, 1), false).unwrap();
    let s = Slice::open(&d).unwrap();
    let (pid, start) = me();
    let r = s.usage.claim(pid, start).unwrap();
    s.reserve(r, 0, 10 * MIB).unwrap();
    let mut kids: Vec<_> = (0..3)
        .map(|_| {
            let mut k = child(&d, "hold", &[("GPUSLICE_REGION_MIB", "20".into())])
                .spawn()
                .unwrap();
            wait_line(&mut k, "HOLDING");
            k
        })
        .collect();
    assert_eq!(s.usage.used(0), 70 * MIB);
    // Over the cap while the children hold memory.
    assert!(s.reserve(r, 0, 40 * MIB).is_err());
    for k in &mut kids[..2] {
        k.kill().unwrap();
        k.wait().unwrap();
    }
    // The next over-cap reservation reclaims the dead children's 40 MiB first.
    s.reserve(r, 0, 40 * MIB).unwrap();
    assert_eq!(s.usage.used(0), 70 * MIB);
    let snap = s.usage.snapshot(&[100 * MIB]);
    let mut held: Vec<u64> = snap.processes.iter().map(|p| p.reserved[0]).collect();
    held.sort();
    assert_eq!(held, vec![20 * MIB, 50 * MIB]);
    kids[2].kill().unwrap();
    kids[2].wait().unwrap();
    assert_eq!(s.usage.reclaim(r).unwrap(), 1);
    assert_eq!(s.usage.used(0), 50 * MIB);
    let _ = std::fs::remove_dir_all(&d);
}

/// The search for dead records stops at one past the highest record ever claimed (so a capped
/// `cuMemGetInfo`, which reclaims before it reports, does not read all 1 024 records), and a
/// tenant that writes garbage there cannot make it skip a record ever claimed: 0 or anything
/// too large means every record.
#[test]
fn the_dead_record_search_covers_every_claimed_record() {
    use std::os::unix::fs::FileExt;
    let d = tmpdir("in-use");
    create_slice(&d, &spec(100 * MIB, 1), false).unwrap();
    let s = Slice::open(&d).unwrap();
    assert_eq!(s.usage.in_use(), MAX_PROCS, "a new file keeps no mark");
    let (pid, start) = me();
    let r = s.usage.claim(pid, start).unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("usage"))
        .unwrap();
    // Offset 36 of the header: `records_in_use`.
    for garbage in [None, Some(0u32), Some(u32::MAX)] {
        let dead = s.usage.claim(gone_pid, 1).unwrap();
        s.reserve(dead, 0, 5 * MIB).unwrap();
        assert_eq!(s.usage.in_use(), r.max(dead) + 1);
        if let Some(g) = garbage {
            file.write_all_at(&g.to_le_bytes(), 36).unwrap();
            assert_eq!(s.usage.in_use(), MAX_PROCS, "garbage {g:#x}");
        }
        assert_eq!(s.usage.reclaim(r).unwrap(), 1, "garbage {garbage:?}");
        assert_eq!(s.usage.used(0), 0, "garbage {garbage:?}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn processes_racing_never_exceed_the_cap() {
    let d = tmpdir("race");
    create_slice(&d, &spec(64 * MIB, 1), false).unwrap();
    let kids: Vec<_> = (0..8)
        .map(|_| child(&d, "race", &[]).spawn().unwrap())
        .collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(out.status.success(), "child failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let ok: u64 = text
            .lines()
            .find_map(|l| l.split("RACE_OK=").nth(1))
            .and_then(|n| n.split_whitespace().next()?.parse().ok())
            .expect("child reports");
        assert!(ok > 0, "child made no allocation");
    }
    let s = Slice::open(&d).unwrap();
    assert_eq!(s.usage.used(0), 0);
    let _ = std::fs::remove_dir_all(&d);
}

/// A process killed in the middle of `reserve` (after raising the total, before its record):
/// simulated on the real file with the pid of an exited process.
#[test]
fn death_between_total_and_record_is_repaired() {
    let d = tmpdir("mid");
    create_slice(&d, &spec(100 * MIB, 1), false).unwrap();
    let s = Slice::open(&d).unwrap();
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let victim = s.usage.claim(dead_pid, 1).unwrap();
    // It had 5 MiB recorded, then died with 7 MiB added to the total but not to its record,
    // and one operation still "in flight".
    s.usage.inflight(victim, 0).fetch_add(1, SeqCst);
    s.usage.reserved(victim, 0).store(5 * MIB, SeqCst);
    s.usage.total(0).store(12 * MIB, SeqCst);
    let (pid, start) = me();
    let r = s.usage.claim(pid, start).unwrap();
    assert_eq!(s.usage.reclaim(r).unwrap(), 1);
    assert_eq!(s.usage.used(0), 0);
    s.reserve(r, 0, 100 * MIB).unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// Garbage in the tenant-writable file never panics, and snapshots are clamped.
#[test]
fn hostile_usage_contents_are_contained() {
    let d = tmpdir("hostile");
    create_slice(&d, &spec(100 * MIB, 2), false).unwrap();
    let s = Slice::open(&d).unwrap();
    let (pid, start) = me();
    let r = s.usage.claim(pid, start).unwrap();
    // Frozen by an out-of-range owner with huge bytes; records with absurd states.
    s.usage.total(0).store(u64::MAX, SeqCst);
    for rec in 0..MAX_PROCS {
        if rec != r {
            s.usage.state(rec).store(0xdead_beef_0000_00ff, SeqCst);
            s.usage.reserved(rec, 1).store(u64::MAX, SeqCst);
        }
    }
    s.usage
        .state(7.min(MAX_PROCS - 1))
        .store(layout::rec_state(REC_LIVE, pid), SeqCst);
    s.usage.start_time(7).store(start, SeqCst);
    s.usage.reserved(7, 1).store(u64::MAX, SeqCst);
    // The waiter takes the freeze over (its owner record is not live) and recomputes.
    s.reserve(r, 0, MIB).unwrap();
    assert_eq!(s.usage.used(0), MIB);
    let snap = s.usage.snapshot(&[100 * MIB, 100 * MIB]);
    assert!(snap.used.iter().all(|&u| u <= 100 * MIB));
    assert!(snap
        .processes
        .iter()
        .all(|p| p.reserved.iter().all(|&b| b <= 100 * MIB)));
    // Device 1's total recomputed from the one (forged) live record is clamped to 48 bits,
    // and the cap still holds.
    let env = gpuslice_region::liveness::ProcEnv::default();
    let t = gpuslice_region::protocol::recompute(&s.usage, &env, r, 1).unwrap();
    assert_eq!(t, layout::TOTAL_BYTES_MASK);
    assert!(s.reserve(r, 1, MIB).is_err());
    let _ = std::mem::size_of::<UsageFile>();
    let _ = std::fs::remove_dir_all(&d);
}
