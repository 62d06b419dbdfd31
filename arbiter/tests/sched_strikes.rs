//! The scheduler's hostile-usage counters reach the outside: a slice that claims demand at the
//! gate but never launches (its `seen` never matches the lease word) is struck and backed off by
//! the real device loop, and the strikes show in the scheduler status, in the control socket's
//! `status` reply (`fill_shares`) and in a metrics scrape; an honest slice beside it shows none.

use gpuslice_api::{DeviceStatus, NodeStatus};
use gpuslice_arbiter::metrics::{self, Sources};
use gpuslice_arbiter::sched::{fill_shares, Params, Scheduler, SchedulerStatus, SliceShare};
use gpuslice_arbiter::server::State;
use gpuslice_arbiter::store::Store;
use gpuslice_arbiter::{DeviceInventory, Policy, StaticInventory};
use gpuslice_region::Usage;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod gate_words;
use gate_words::{futex, honest_gate, slice_dir};

/// An honest gate (the region's gate half): waits with `demand` raised while not `HELD`, and
/// while `HELD` "launches" (records the lease word in `seen`) every millisecond.
fn honest(dir: &Path, stop: Arc<AtomicBool>, launches: Arc<AtomicU64>) {
    honest_gate(dir, &stop, || {
        launches.fetch_add(1, Relaxed);
        std::thread::sleep(Duration::from_millis(1));
    });
}

/// A hostile gate (written by hand on purpose: it breaks the protocol): claims one waiting
/// thread for ever and never launches.
fn liar(dir: &Path, stop: Arc<AtomicBool>) {
    let usage = Usage::open(dir, 1).unwrap();
    let g = usage.gate_words(0).unwrap();
    g.demand.store(1, Relaxed);
    futex(g.demand.as_ptr(), libc::FUTEX_WAKE, i32::MAX as u32, 0);
    while !stop.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    g.demand.store(0, Relaxed);
}

fn share<'a>(st: &'a SchedulerStatus, id: &str) -> &'a SliceShare {
    st.slice(0, id)
        .unwrap_or_else(|| panic!("no status for {id}: {st:?}"))
}

/// `name{labels} value` → value, for one exact series.
fn series(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
}

/// A scheduler of `quantum` with slices `a` and `b` at 50 % each on device 0, and their
/// directories (named after `prefix`).
fn two_halves(
    quantum: Duration,
    prefix: &str,
    a: &str,
    b: &str,
) -> (Arc<Scheduler>, PathBuf, PathBuf) {
    let sched = Arc::new(Scheduler::new(quantum));
    let (da, db) = (slice_dir(prefix, a), slice_dir(prefix, b));
    let p = Params {
        guarantee: 5_000,
        ..Params::default()
    };
    sched.add(0, a, &da, 0, p);
    sched.add(0, b, &db, 0, p);
    (sched, da, db)
}

#[test]
fn a_liar_is_struck_and_backed_off_and_an_honest_slice_is_not() {
    // A long quantum: an honest thread may be woken late on a loaded two-core host, and must
    // not be struck for that (it has half a quantum plus one grace check).
    let (sched, dl, dh) = two_halves(
        Duration::from_millis(250),
        "gpuslice-strikes",
        "liar",
        "honest",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let launches = Arc::new(AtomicU64::new(0));
    let threads = [
        {
            let (s, d) = (Arc::clone(&stop), dl.clone());
            std::thread::spawn(move || liar(&d, s))
        },
        {
            let (s, d, n) = (Arc::clone(&stop), dh.clone(), Arc::clone(&launches));
            std::thread::spawn(move || honest(&d, s, n))
        },
    ];
    // Wait (generously) for a status showing the liar struck twice and backed off right now.
    let t0 = Instant::now();
    let st = loop {
        let st = sched.status();
        if st
            .slice(0, "liar")
            .is_some_and(|s| s.strikes_total >= 2 && s.backoff_remaining_ns > 0)
        {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the liar was never struck twice and backed off: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let (l, h) = (share(&st, "liar"), share(&st, "honest"));
    assert!(l.strikes >= 1, "consecutive strikes {}", l.strikes);
    assert!(l.strikes_total >= u64::from(l.strikes));
    assert_eq!(
        (h.strikes, h.strikes_total, h.backoff_remaining_ns),
        (0, 0, 0),
        "the honest slice was struck: {h:?}"
    );
    assert!(h.grants > 0 && launches.load(Relaxed) > 0);

    // The control socket's `status` reply.
    let mut node = NodeStatus {
        devices: vec![DeviceStatus {
            index: 0,
            uuid: "GPU-x".into(),
            name: "sim".into(),
            memory_total: 1 << 30,
            memory_committed: 0,
            compute_guaranteed: 100,
            slices: vec!["liar".into(), "honest".into()],
            shares: Vec::new(),
            context: None,
        }],
        ..NodeStatus::default()
    };
    fill_shares(&mut node, &st);
    let by_id = |id: &str| {
        node.devices[0]
            .shares
            .iter()
            .find(|s| s.slice_id == id)
            .cloned()
            .unwrap()
    };
    let (l2, h2) = (by_id("liar"), by_id("honest"));
    assert_eq!((l2.strikes, l2.strikes_total), (l.strikes, l.strikes_total));
    assert!(l2.backed_off);
    assert_eq!((h2.strikes, h2.strikes_total, h2.backed_off), (0, 0, false));
    // The JSON line an older client reads: the honest slice's entry has no new keys.
    let j = serde_json::to_value(&h2).unwrap();
    assert!(
        j.get("strikes").is_none() && j.get("backed_off").is_none(),
        "{j}"
    );

    // A metrics scrape (the snapshot above as the scheduler source).
    let tmp = std::env::temp_dir().join(format!("gpuslice-strikes-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let devs = StaticInventory::fake(&[("NVIDIA H100 80GB", 80 << 30)])
        .devices()
        .unwrap();
    let (state, _) = State::open(devs, Policy::default(), Store::open(&tmp).unwrap()).unwrap();
    let snap = st.clone();
    let src = Sources {
        state: Arc::new(Mutex::new(state)),
        state_dir: tmp.clone(),
        sched: Some(Arc::new(move || snap.clone())),
    };
    let text = metrics::render(&src);
    let m = |name: &str, id: &str| {
        // Slices outside Kubernetes: empty Pod labels (docs/metrics.md).
        let pod = "namespace=\"\",pod=\"\",container=\"\"";
        series(
            &text,
            &format!("{name}{{slice=\"{id}\",device=\"0\",{pod}}}"),
        )
        .unwrap_or_else(|| panic!("no {name} for {id} in\n{text}"))
    };
    assert_eq!(
        m("gpuslice_slice_lease_strikes_total", "liar"),
        l.strikes_total as f64
    );
    assert!(m("gpuslice_slice_lease_strikes_total", "liar") > 0.0);
    assert_eq!(m("gpuslice_slice_lease_backed_off", "liar"), 1.0);
    assert!(m("gpuslice_slice_lease_strikes_consecutive", "liar") >= 1.0);
    assert_eq!(m("gpuslice_slice_lease_strikes_total", "honest"), 0.0);
    assert_eq!(m("gpuslice_slice_lease_backed_off", "honest"), 0.0);
    assert_eq!(m("gpuslice_slice_lease_strikes_consecutive", "honest"), 0.0);
    assert_eq!(
        m("gpuslice_slice_scheduler_wakes_total", "honest"),
        h.loop_wakes as f64
    );

    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    sched.remove("liar");
    sched.remove("honest");
    for d in [dl, dh, tmp] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// `FUTEX_WAKE` on `addr` (shared), returning how many waiters it woke.
fn wake(addr: *const u32) -> i64 {
    // SAFETY: `addr` is a word of a live mapping held by the caller; FUTEX_WAKE reads nothing.
    unsafe { libc::syscall(libc::SYS_futex, addr, libc::FUTEX_WAKE, i32::MAX, 0usize) }
}

/// Starts an honest gate on `dir` until `stop` and waits (at most 10 s, else `never`) for its
/// first launch; its thread and launch count.
fn gate_until_launched(
    dir: &Path,
    stop: &Arc<AtomicBool>,
    never: &str,
) -> (std::thread::JoinHandle<()>, Arc<AtomicU64>) {
    let launches = Arc::new(AtomicU64::new(0));
    let gate = {
        let (s, d, n) = (Arc::clone(stop), dir.to_path_buf(), Arc::clone(&launches));
        std::thread::spawn(move || honest(&d, s, n))
    };
    let t0 = Instant::now();
    while launches.load(Relaxed) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "{never}");
        std::thread::sleep(Duration::from_millis(10));
    }
    (gate, launches)
}

#[test]
fn a_wake_storm_is_muted_and_its_slice_is_still_heard() {
    use gpuslice_arbiter::sched::wakes::{WAKES_PER_WINDOW, WINDOW_NS};
    let (sched, ds, dh) = two_halves(
        Duration::from_millis(5),
        "gpuslice-wakes",
        "storm",
        "honest",
    );
    let stop = Arc::new(AtomicBool::new(false));
    // Let the loop settle with the honest slice holding the lease.
    let (honest_gate, launches) = gate_until_launched(&dh, &stop, "the honest slice never ran");
    std::thread::sleep(Duration::from_millis(300));
    let before = sched.status();
    let launches_before = launches.load(Relaxed);

    // The storm: FUTEX_WAKE on the storm slice's demand word, which stays 0, for 2 s.
    let storm = 2u64;
    let usage = Usage::open(&ds, 1).unwrap();
    let g = usage.gate_words(0).unwrap();
    let (mut calls, mut woke) = (0u64, 0u64);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(storm) {
        calls += 1;
        if wake(g.demand.as_ptr()) > 0 {
            woke += 1;
        }
    }
    // Past the last window, so that the status below was published after it.
    std::thread::sleep(Duration::from_nanos(WINDOW_NS) + Duration::from_millis(150));
    let after = sched.status();
    let (s0, s1) = (share(&before, "storm"), share(&after, "storm"));
    let d0 = before.devices.iter().find(|d| d.index == 0).unwrap();
    let d1 = after.devices.iter().find(|d| d.index == 0).unwrap();
    let wakeups = d1.wakeups - d0.wakeups;
    let windows = storm * 1_000_000_000 / WINDOW_NS + 3;
    let (wakes, mutes) = (s1.loop_wakes - s0.loop_wakes, s1.wake_mutes - s0.wake_mutes);
    eprintln!(
        "storm: {calls} FUTEX_WAKE calls in {storm} s, {woke} woke the loop; loop wake-ups \
         {wakeups}, {wakes} by the storm's words; {mutes} mutes"
    );
    assert!(mutes > 0, "the storm was never muted: {s1:?}");
    assert!(wakes > u64::from(WAKES_PER_WINDOW), "{wakes} wakes counted");
    // Each window hears at most the budget plus one from the storm; the honest holder's
    // renewals, checks and status publishing add a few hundred a second at most.
    let bound = windows * u64::from(WAKES_PER_WINDOW + 1) + storm * 500;
    assert!(
        woke <= bound && wakeups <= bound,
        "{woke} wakes reached the loop, {wakeups} loop wake-ups (bound {bound})"
    );
    let h1 = share(&after, "honest");
    assert_eq!(h1.wake_mutes, 0, "the honest slice was muted: {h1:?}");
    assert!(
        launches.load(Relaxed) > launches_before,
        "the honest slice stopped launching during the storm"
    );

    // The muted slice is still heard: its demand, once it really waits, gets it the lease.
    let (storm_gate, _) = gate_until_launched(
        &ds,
        &stop,
        "the stormy slice was never granted once it waited",
    );
    stop.store(true, Relaxed);
    honest_gate.join().unwrap();
    storm_gate.join().unwrap();
    sched.remove("storm");
    sched.remove("honest");
    for d in [ds, dh] {
        let _ = std::fs::remove_dir_all(d);
    }
}
