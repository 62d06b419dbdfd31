//! The real scheduler loop (`Scheduler` with its device thread, futexes and slice files) driven
//! by fake tenants: threads that follow the launch gate's protocol on the region files without
//! any CUDA — wait at the gate (`demand` + futex on the lease word), "run kernels" (1 ms sleeps)
//! while `HELD`, register in `pending` and report the drain after a revoke.

use gpuslice_arbiter::sched::{Params, Scheduler};
use gpuslice_region::layout::LEASE_HELD;
use gpuslice_region::{Lease, Usage};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod gate_words;
use gate_words::{gate, honest_gate, slice_dir, wake};
use gpuslice_region::lease::gate::Proc;

/// A fake tenant: adds the ns it "ran kernels" (1 ms sleeps) while holding the lease.
fn tenant(dir: &Path, stop: Arc<AtomicBool>, busy: Arc<AtomicU64>) {
    honest_gate(dir, &stop, || {
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        busy.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
    });
}

fn params(pct: u32) -> Params {
    Params {
        guarantee: pct * 100,
        ..Params::default()
    }
}

#[test]
fn loop_splits_30_70_and_applies_an_update() {
    let sched = Scheduler::new(Duration::from_millis(5));
    let (da, db) = (
        slice_dir("gpuslice-h7-loop", "a"),
        slice_dir("gpuslice-h7-loop", "b"),
    );
    sched.add(0, "a", &da, 0, params(30));
    sched.add(0, "b", &db, 0, params(70));
    let stop = Arc::new(AtomicBool::new(false));
    let (ba, bb) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let threads: Vec<_> = [(da.clone(), Arc::clone(&ba)), (db.clone(), Arc::clone(&bb))]
        .into_iter()
        .map(|(d, b)| {
            let s = Arc::clone(&stop);
            std::thread::spawn(move || tenant(&d, s, b))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let (a, b) = (ba.load(Relaxed) as f64, bb.load(Relaxed) as f64);
    let share = a / (a + b);
    assert!((share - 0.3).abs() < 0.08, "a's share {share:.3}");
    // Live update: swap the guarantees; the next 2 s follow the new split.
    sched.update("b", params(30));
    sched.update("a", params(70));
    std::thread::sleep(Duration::from_millis(200));
    let (a0, b0) = (ba.load(Relaxed), bb.load(Relaxed));
    std::thread::sleep(Duration::from_secs(2));
    let (a, b) = (
        (ba.load(Relaxed) - a0) as f64,
        (bb.load(Relaxed) - b0) as f64,
    );
    let share = a / (a + b);
    assert!(
        (share - 0.7).abs() < 0.08,
        "a's share after update {share:.3}"
    );
    let st = sched.status();
    let dev = &st.devices[0];
    assert!(dev.handoffs > 50, "hand-offs {}", dev.handoffs);
    assert!(st.slice(0, "a").is_some_and(|s| s.grants > 10));
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    sched.remove("a");
    sched.remove("b");
    let _ = std::fs::remove_dir_all(da);
    let _ = std::fs::remove_dir_all(db);
}

#[test]
fn lone_slice_keeps_the_lease_and_an_idle_device_costs_nothing() {
    let sched = Scheduler::new(Duration::from_millis(5));
    let d = slice_dir("gpuslice-h7-loop", "lone");
    sched.add(0, "lone", &d, 0, params(0));
    let stop = Arc::new(AtomicBool::new(false));
    let busy = Arc::new(AtomicU64::new(0));
    let (s, b, dd) = (Arc::clone(&stop), Arc::clone(&busy), d.clone());
    let t = std::thread::spawn(move || tenant(&dd, s, b));
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Relaxed);
    t.join().unwrap();
    let share = busy.load(Relaxed) as f64 / 1e9;
    assert!(share > 0.8, "a lone busy slice gets the device: {share:.3}");
    let st = sched.status();
    assert!(st.devices[0].handoffs <= 2, "{:?}", st.devices[0]);
    sched.remove("lone");
    let _ = std::fs::remove_dir_all(d);
}

/// Waits up to 2 s for `f` to hold.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(2), "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn queue_bound_and_pace_follow_who_shares_the_device() {
    let sched = Scheduler::new(Duration::from_millis(5));
    let (dn, dm, dh) = (
        slice_dir("gpuslice-h7-pace", "n"),
        slice_dir("gpuslice-h7-pace", "m"),
        slice_dir("gpuslice-h7-pace", "h"),
    );
    let words = |d: &Path| {
        let l = Lease::open(d).unwrap();
        (l.max_queue(0), l.ahead_us(0))
    };
    sched.add(0, "n", &dn, 0, params(30));
    eventually("a lone slice is not bounded", || words(&dn) == (0, 0));
    sched.add(0, "m", &dm, 0, params(30));
    eventually("two normal slices: a count bound, no pace", || {
        words(&dn) == (64, 0) && words(&dm) == (64, 0)
    });
    sched.add(
        0,
        "h",
        &dh,
        0,
        Params {
            high: true,
            ..params(10)
        },
    );
    eventually("beside a high slice the normal ones are paced", || {
        words(&dn) == (64, 500) && words(&dm) == (64, 500) && words(&dh) == (64, 0)
    });
    sched.remove("h");
    eventually("the pace ends with the high slice", || {
        words(&dn) == (64, 0) && words(&dm) == (64, 0)
    });
    sched.remove("m");
    eventually("alone again: unbounded", || words(&dn) == (0, 0));
    sched.remove("n");
    for d in [dn, dm, dh] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A `priority: high` slice that does not hold the lease on a shared device holds a one-launch
/// pass: the id of its next grant. A gate that takes it (`passed`, then `demand`) is granted
/// under that id; a fresh pass is armed once its lease ends; alone on the device it has none.
#[test]
fn a_high_slice_beside_a_holder_is_granted_under_the_pass_it_took() {
    let sched = Scheduler::new(Duration::from_millis(5));
    let (dn, dh) = (
        slice_dir("gpuslice-h14-pass", "n"),
        slice_dir("gpuslice-h14-pass", "h"),
    );
    let high = Params {
        high: true,
        ..params(20)
    };
    sched.add(0, "h", &dh, 0, high);
    let lh = Lease::open(&dh).unwrap();
    let uh = Usage::open(&dh, 1).unwrap();
    let gh = gate(&lh, &uh);
    let ph = Proc::new();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(lh.pass(0), 0, "alone on the device: no pass");

    sched.add(0, "n", &dn, 0, params(50));
    let stop = Arc::new(AtomicBool::new(false));
    let busy = Arc::new(AtomicU64::new(0));
    let t = {
        let (d, s, b) = (dn.clone(), Arc::clone(&stop), Arc::clone(&busy));
        std::thread::spawn(move || tenant(&d, s, b))
    };
    let ln = Lease::open(&dn).unwrap();
    eventually(
        "the neighbour holds the lease and the high slice a pass",
        || ln.word(0).unwrap().load() & LEASE_HELD != 0 && lh.pass(0) != 0,
    );
    let pass = lh.pass(0);
    assert_ne!(pass, ln.grant(0), "a pass is an id of its own");

    // The gate's side of taking it: one launch went, one thread counts in `demand`.
    assert_eq!(gh.take_pass(&ph), Some(pass));
    assert_eq!(gh.take_pass(&ph), None, "one launch per pass");
    if gh.announce_pass(&ph, pass) {
        wake(gh.usage.demand_addr());
    }
    eventually("the high slice is granted under its pass", || {
        lh.word(0).unwrap().load() & LEASE_HELD != 0 && lh.grant(0) == pass
    });
    assert_eq!(lh.pass(0), 0, "no pass while it holds the lease");

    // The gate thread's side once granted: the launch counts as the grant's, the demand it
    // claimed goes, and the launch completed and nothing followed (idle).
    assert_eq!(gh.settle_pass(&ph), 0, "the pass's grant came");
    assert_eq!(uh.lease_words(0).unwrap().demand.load(Relaxed), 0);
    gh.enter_busy(&ph, pass);
    assert!(gh.go_quiet(&ph, pass));
    wake(gh.usage.busy_addr());
    eventually(
        "the idle high slice hands back and holds a fresh pass",
        || lh.word(0).unwrap().load() & LEASE_HELD == 0 && lh.pass(0) != 0 && lh.pass(0) != pass,
    );

    stop.store(true, Relaxed);
    t.join().unwrap();
    sched.remove("n");
    eventually("alone again: the pass is withdrawn", || lh.pass(0) == 0);
    sched.remove("h");
    assert!(busy.load(Relaxed) > 0, "the neighbour ran");
    for d in [dn, dh] {
        let _ = std::fs::remove_dir_all(d);
    }
}
