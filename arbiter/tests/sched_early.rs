//! Early hand-off through the real scheduler loop: a revoked slice whose processes report that
//! only their last kernel is left (`near` at 0) lets the next slice in while that kernel runs;
//! the revoked slice is still charged until its drain is reported, and the next one from then
//! on, so the overlap is charged once.

use gpuslice_arbiter::sched::{Params, Scheduler};
use gpuslice_region::lease::gate::Proc;
use gpuslice_region::lease::held;
use gpuslice_region::{Lease, Usage};
use std::path::Path;
use std::time::{Duration, Instant};

mod gate_words;
use gate_words::{futex, gate, slice_dir, wake};

/// Through the region's gate half, as the interposer runs it: waits for the lease, registers
/// under its grant, "launches" until revoked, then reports `near` at once and the drain
/// `last_kernel` later. Returns (first grant seen, drain reported).
fn one_lease(dir: &Path, last_kernel: Duration) -> (Instant, Instant) {
    let (lease, usage) = (Lease::open(dir).unwrap(), Usage::open(dir, 1).unwrap());
    let gate = gate(&lease, &usage);
    let p = Proc::new();
    let mut word = gate.word();
    if !held(word) {
        if gate.wait_begins(&p, false) {
            wake(gate.usage.demand_addr());
        }
        while !held(word) {
            futex(gate.slot.word_addr(), libc::FUTEX_WAIT, word, 20);
            word = gate.word();
        }
        gate.wait_ends(&p, false);
    }
    let granted = Instant::now();
    let grant = gate.grant();
    gate.register(&p, word, grant);
    // Busy (launching) until revoked, for at most 200 ms (then idle: the arbiter takes the
    // lease back at its next activity check).
    loop {
        let word = gate.word();
        if !held(word) {
            break;
        }
        if granted.elapsed() < Duration::from_millis(200) {
            gate.register(&p, word, grant);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if gate.near_done(&p, grant) {
        wake(gate.usage.pending_addr());
    }
    std::thread::sleep(last_kernel);
    let reported = Instant::now();
    gate.drained(&p, grant);
    wake(gate.usage.pending_addr());
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
