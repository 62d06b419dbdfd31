//! Early hand-off through the real scheduler loop: a revoked slice whose processes report that
//! only their last kernel is left (`near` at 0) lets the next slice in while that kernel runs;
//! the revoked slice is still charged until its drain is reported, and the next one from then
//! on, so the overlap is charged once.

use gpuslice_arbiter::sched::{Params, Scheduler};
use gpuslice_region::layout::LEASE_HELD;
use gpuslice_region::{Lease, Usage};
use std::path::Path;
use std::sync::atomic::Ordering::AcqRel;
use std::time::{Duration, Instant};

mod gate_words;
use gate_words::{futex, slice_dir};

// The gate's half of the lease protocol, as the interposer runs it.
use gpuslice_region::lease::{enter as add, leave as sub};

/// Waits for the lease, registers under its grant, "launches" until revoked, then reports
/// `near` at once and the drain `last_kernel` later. Returns (first grant seen, drain reported).
fn one_lease(dir: &Path, last_kernel: Duration) -> (Instant, Instant) {
    let lease = Lease::open(dir).unwrap();
    let usage = Usage::open(dir, 1).unwrap();
    let w = lease.word(0).unwrap();
    let g = usage.gate_words(0).unwrap();
    let pending = g.pending.as_ptr().cast::<u32>();
    loop {
        let word = w.load();
        if word & LEASE_HELD != 0 {
            break;
        }
        if g.demand.fetch_add(1, AcqRel) == 0 {
            futex(g.demand.as_ptr(), libc::FUTEX_WAKE, i32::MAX as u32, 0);
        }
        futex(w.as_ptr(), libc::FUTEX_WAIT, word, 20);
        g.demand.fetch_sub(1, AcqRel);
    }
    let granted = Instant::now();
    let grant = lease.grant(0);
    add(g.near, grant);
    add(g.pending, grant);
    // Busy (launching) until revoked, for at most 200 ms (then idle: the arbiter takes the
    // lease back at its next activity check).
    loop {
        let word = w.load();
        if word & LEASE_HELD == 0 {
            break;
        }
        if granted.elapsed() < Duration::from_millis(200) {
            g.seen.store(word, std::sync::atomic::Ordering::Release);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    sub(g.near, grant);
    futex(pending, libc::FUTEX_WAKE, i32::MAX as u32, 0);
    std::thread::sleep(last_kernel);
    let reported = Instant::now();
    sub(g.pending, grant);
    futex(pending, libc::FUTEX_WAKE, i32::MAX as u32, 0);
    (granted, reported)
}

#[test]
fn next_slice_is_granted_while_the_last_kernel_runs_and_charged_after_it() {
    let sched = Scheduler::new(Duration::from_millis(5));
    let (da, db) = (
        slice_dir("gpuslice-early", "a"),
        slice_dir("gpuslice-early", "b"),
    );
    let p = Params {
        guarantee: 5000,
        ..Params::default()
    };
    sched.add(0, "a", &da, 0, p);
    sched.add(0, "b", &db, 0, p);
    let t0 = Instant::now();
    let a = {
        let d = da.clone();
        std::thread::spawn(move || one_lease(&d, Duration::from_millis(150)))
    };
    // b starts waiting once a holds the lease.
    std::thread::sleep(Duration::from_millis(100));
    let b = {
        let d = db.clone();
        std::thread::spawn(move || one_lease(&d, Duration::ZERO))
    };
    let (_, a_reported) = a.join().unwrap();
    let (b_granted, _) = b.join().unwrap();
    assert!(
        b_granted < a_reported,
        "b was granted {:?} after a's drain was reported: no early hand-off",
        b_granted.saturating_duration_since(a_reported)
    );
    // Let the loop charge and publish.
    std::thread::sleep(Duration::from_millis(300));
    let wall = t0.elapsed().as_nanos() as u64;
    let st = sched.status();
    let (ca, cb) = (
        st.slice(0, "a").unwrap().charged_ns,
        st.slice(0, "b").unwrap().charged_ns,
    );
    // a pays its 150 ms last kernel (under the 250 ms drain timeout); the overlap is not charged to b as well.
    assert!(ca >= 150_000_000, "a charged {ca} ns");
    assert!(ca + cb <= wall, "charged {ca} + {cb} ns in {wall} ns");
    sched.remove("a");
    sched.remove("b");
    let _ = std::fs::remove_dir_all(da);
    let _ = std::fs::remove_dir_all(db);
}
