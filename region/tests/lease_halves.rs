//! Model test (loom) of the lease protocol's two halves interleaved (`lease/gate.rs`, the
//! launch gate's; `lease/sched.rs`, the scheduler's), run on `loom` atomics: every
//! interleaving (within a preemption bound) of launching threads, a gate thread, an exiting
//! process and the scheduler. Checked:
//! * no launch after a revoke is acknowledged: a launch that passed the gate under a grant is
//!   queued before the scheduler sees that grant's drain reported (the gate thread's report
//!   waits for a launch in flight, `Proc::unsettled`; a thread that registered while the
//!   revoke landed does not launch);
//! * drain reports are never lost, and never early: the drain of a grant reads as reported
//!   exactly when every process registered under it reported (or left at exit), whichever of
//!   the gate thread and the exit hook gets there first;
//! * a grant is never double-counted: threads of one process registering, or counting the
//!   process busy, under one grant count it once; a quiet report racing a launch leaves the
//!   `busy` count equal to what the process believes;
//! * one launch per pass, and the `demand` a pass claims is given back exactly once.
//!
//! What the model leaves to the product (timing, not memory): the gate thread's wait for a
//! launch in flight is capped at 500 µs (`SETTLE_MAX` in the interposer), and the scheduler's
//! drain wait at its deadline; past those, a stalled thread's launch runs in the next lease.

use gpuslice_region::layout::{LEASE_GENERATION_ONE, LEASE_HELD};
use gpuslice_region::lease::gate::{Gate, Proc};
use gpuslice_region::lease::sched::Sched;
use gpuslice_region::lease::{count, held, tag, tagged, SlotWords, UsageWords};
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use loom::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

mod loom_words;
use loom_words::{L32, L64};

/// Every interleaving with at most `preemptions` preemptions (3 where the model is small; 2
/// for three threads with several steps each, which 3 takes minutes to explore).
fn builder(preemptions: usize) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b
}

/// A word holding `v`, stored `SeqCst` (loom treats a word's initial value as a non-`SeqCst`
/// store, which a `SeqCst` load may still return after a newer `SeqCst` store; the real
/// words were written long before any of this).
fn w32(v: u32) -> L32 {
    let w = AtomicU32::new(0);
    w.store(v, SeqCst);
    L32(w)
}
fn w64(v: u64) -> L64 {
    let w = AtomicU64::new(0);
    w.store(v, SeqCst);
    L64(w)
}

/// One device's shared words (a `lease` slot and a `usage` entry).
struct Words {
    word: L32,
    grant: L32,
    max_queue: L32,
    ahead_us: L32,
    pass: L32,
    demand: L32,
    seen: L32,
    pending: L64,
    near: L64,
    busy: L64,
    passed: L32,
}

impl Words {
    /// Held under `grant` (0: never granted, not held).
    fn new(grant: u32) -> Self {
        let word = if grant == 0 {
            LEASE_GENERATION_ONE
        } else {
            LEASE_GENERATION_ONE | LEASE_HELD
        };
        Words {
            word: w32(word),
            grant: w32(grant),
            max_queue: w32(64),
            ahead_us: w32(0),
            pass: w32(0),
            demand: w32(0),
            seen: w32(0),
            pending: w64(0),
            near: w64(0),
            busy: w64(0),
            passed: w32(0),
        }
    }
    fn slot(&self) -> SlotWords<'_, L32> {
        SlotWords {
            word: &self.word,
            grant: &self.grant,
            max_queue: &self.max_queue,
            ahead_us: &self.ahead_us,
            pass: &self.pass,
        }
    }
    fn usage(&self) -> UsageWords<'_, L32, L64> {
        UsageWords {
            demand: &self.demand,
            seen: &self.seen,
            pending: &self.pending,
            near: &self.near,
            busy: &self.busy,
            passed: &self.passed,
        }
    }
    fn gate(&self) -> Gate<'_, L32, L64> {
        Gate::new(self.slot(), self.usage())
    }
    fn sched(&self) -> Sched<'_, L32, L64> {
        Sched::new(self.slot(), self.usage())
    }
}

fn proc() -> Proc<L32, L64> {
    Proc {
        registered: w32(0),
        drained: w32(0),
        neared: w32(0),
        busy: w32(0),
        launching: w32(0),
        lease_waiting: w32(0),
        pass_wait: w64(0),
        pass_prev: w32(0),
    }
}

/// A bounded launch as the interposer's `before_launch` makes it: counted as launching, then
/// the lease check; held, it registers under the grant (once per lease word) and launches
/// unless the revoke landed meanwhile. Returns the grant it launched under; fails if it
/// launches once `acked` (the drain acknowledged, or reported).
fn launch(g: &Gate<'_, L32, L64>, p: &Proc<L32, L64>, acked: &AtomicBool) -> Option<u32> {
    p.launch_begins();
    let w = g.word();
    let mut launched = None;
    if held(w) {
        let grant = g.grant();
        if g.register(p, w, grant) {
            // The launch: queued now, so before the drain of `grant` is acknowledged.
            assert!(
                !acked.load(SeqCst),
                "a launch under {grant} after its drain was acked"
            );
            launched = Some(grant);
        }
    }
    p.launch_ends();
    launched
}

/// The scheduler revokes grant 1 and reads the drain while a process's first launch under
/// it registers: the launch is queued before the drain reads as reported, or not at all (the
/// registration then is drained by the gate thread, and the report is never lost).
#[test]
fn no_launch_after_a_revoke_is_acknowledged() {
    builder(3).check(|| {
        let words = Arc::new(Words::new(1));
        let p = Arc::new(proc());
        let acked = Arc::new(AtomicBool::new(false));
        let l = {
            let (words, p, acked) = (words.clone(), p.clone(), acked.clone());
            loom::thread::spawn(move || launch(&words.gate(), &p, &acked))
        };
        let s = words.sched();
        let grant = s.revoke();
        assert_eq!(grant, 1);
        if s.read().drained(grant, 64) {
            acked.store(true, SeqCst);
        }
        let launched = l.join().unwrap();
        // The gate thread, once the revoke is seen: drains what was registered, reports.
        let g = words.gate();
        if let Some(due) = g.drain_due(&p, g.word()) {
            assert!(g.drained(&p, due));
        }
        assert!(s.read().drained(1, 64), "the report was lost");
        if acked.load(SeqCst) {
            assert_eq!(launched, None);
        }
    });
}

/// A launch already registered under the grant (the fast path: no registration) racing the
/// revoke and the gate thread: the gate thread reports the drain only once no launch is in
/// flight, so a launch that passed the gate is queued before the report.
#[test]
fn a_launch_in_flight_is_queued_before_the_drain_report() {
    builder(3).check(|| {
        let words = Arc::new(Words::new(1));
        let p = Arc::new(proc());
        let g0 = words.gate();
        assert!(g0.register(&p, g0.word(), 1));
        let reported = Arc::new(AtomicBool::new(false));
        let l = {
            let (words, p, reported) = (words.clone(), p.clone(), reported.clone());
            loom::thread::spawn(move || launch(&words.gate(), &p, &reported))
        };
        let s = words.sched();
        assert_eq!(s.revoke(), 1);
        // The gate thread, woken by the revoke: reports unless a launch is in flight (it
        // would wait for it; here it leaves the report for after the launch).
        let due = g0.drain_due(&p, g0.word());
        assert_eq!(due, Some(1), "a revoke seen is a drain due");
        if !p.unsettled() {
            reported.store(true, SeqCst);
            assert!(g0.drained(&p, 1));
        }
        l.join().unwrap();
        g0.drained(&p, 1);
        assert!(s.read().drained(1, 64));
    });
}

/// Two processes registered under grant 1; one's gate thread reports its drain while the same
/// process exits: it leaves `pending` once, so the drain is not seen reported while the other
/// process is still in, and is once that one reported too.
#[test]
fn a_drain_is_reported_once_per_process_however_it_ends() {
    builder(2).check(|| {
        let words = Arc::new(Words::new(1));
        let (a, b) = (Arc::new(proc()), proc());
        let g0 = words.gate();
        g0.register(&a, g0.word(), 1);
        g0.register(&b, g0.word(), 1);
        assert_eq!(words.pending.0.load(SeqCst), tagged(1, 2));
        let s = words.sched();
        assert_eq!(s.revoke(), 1);
        let b_left = Arc::new(AtomicBool::new(false));
        let drain = {
            let (words, a) = (words.clone(), a.clone());
            loom::thread::spawn(move || {
                let g = words.gate();
                if let Some(grant) = g.drain_due(&a, g.word()) {
                    g.drained(&a, grant);
                }
            })
        };
        let exit = {
            let (words, a) = (words.clone(), a.clone());
            loom::thread::spawn(move || {
                words.gate().exit(&a);
            })
        };
        let watch = {
            let (words, b_left) = (words.clone(), b_left.clone());
            loom::thread::spawn(move || {
                if words.sched().read().drained(1, 64) {
                    assert!(b_left.load(SeqCst), "reported while b is in");
                }
            })
        };
        drain.join().unwrap();
        exit.join().unwrap();
        let v = words.pending.0.load(SeqCst);
        assert_eq!((tag(v), count(v)), (1, 1), "a left once: {v:#x}");
        b_left.store(true, SeqCst);
        g0.drained(&b, 1);
        watch.join().unwrap();
        assert!(s.read().drained(1, 64));
        assert!(s.read().near(1));
    });
}

/// Two threads of one process register and count it busy under one grant at once, while its
/// gate thread reports it quiet: `pending` and `near` count it once, and `busy` counts it
/// exactly when the process believes itself busy.
#[test]
fn a_grant_is_never_double_counted() {
    builder(2).check(|| {
        let words = Arc::new(Words::new(1));
        let p = Arc::new(proc());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (words, p) = (words.clone(), p.clone());
                loom::thread::spawn(move || {
                    let g = words.gate();
                    g.register(&p, g.word(), 1);
                    g.enter_busy(&p, 1);
                })
            })
            .collect();
        let quiet = {
            let (words, p) = (words.clone(), p.clone());
            loom::thread::spawn(move || {
                words.gate().go_quiet(&p, 1);
            })
        };
        for t in threads {
            t.join().unwrap();
        }
        quiet.join().unwrap();
        assert_eq!(words.pending.0.load(SeqCst), tagged(1, 1));
        assert_eq!(words.near.0.load(SeqCst), tagged(1, 1));
        let believed = u32::from(p.busy.0.load(SeqCst) == 1);
        assert_eq!(words.busy.0.load(SeqCst), tagged(1, believed));
        assert_eq!(words.sched().read().quiet(), believed == 0);
    });
}

/// Two processes race for the slice's pass while the scheduler withdraws it and grants under
/// it: at most one launch goes on the pass (none when the withdrawal came first); the taker's
/// claimed `demand` goes back exactly once, and its launch counts as the grant's.
#[test]
fn one_launch_per_pass_and_its_demand_given_back_once() {
    builder(3).check(|| {
        let words = Arc::new(Words::new(0));
        words.pass.0.store(7, SeqCst);
        let (a, b) = (Arc::new(proc()), Arc::new(proc()));
        let takers: Vec<_> = [a.clone(), b.clone()]
            .into_iter()
            .map(|p| {
                let words = words.clone();
                loom::thread::spawn(move || {
                    let g = words.gate();
                    let pass = g.take_pass(&p)?;
                    g.register(&p, g.word(), pass);
                    g.announce_pass(&p, pass);
                    Some(pass)
                })
            })
            .collect();
        let s = words.sched();
        s.arm_pass(0);
        s.grant(7);
        let taken: Vec<_> = takers.into_iter().map(|t| t.join().unwrap()).collect();
        let n = taken.iter().flatten().count();
        assert!(n <= 1, "{taken:?}");
        for p in [&a, &b] {
            assert_eq!(words.gate().settle_pass(p), 0, "the pass's grant came");
        }
        assert_eq!(words.demand.0.load(SeqCst), 0);
        let counted = u32::try_from(n).unwrap();
        assert_eq!(
            words.pending.0.load(SeqCst),
            tagged(if n == 1 { 7 } else { 0 }, counted)
        );
        assert_eq!(words.sched().read().active(), n == 1);
    });
}
