//! Model test (loom) of the lease protocol's grant-tagged counters (`lease.rs`): every
//! interleaving (within a preemption bound) of processes counting themselves in and out of a
//! word while the grant moves on. Checked: a drain under a grant is never seen settled while a
//! process that counted in under it has not left; a process leaving under an old grant never
//! lowers the next grant's count; once every thread is done the word holds exactly the
//! processes still in under the newest grant.

use gpuslice_region::atomics::Word64;
use gpuslice_region::lease::{all_left, count, enter, leave, settled, tag, tagged};
use loom::sync::atomic::{AtomicBool, AtomicU64};
use loom::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

mod loom_words;
use loom_words::L64;

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b
}

/// Two processes of grant 1 drain while the scheduler watches `pending`: it never sees the
/// drain settled while one of them is still in (each says so before it leaves).
#[test]
fn a_drain_is_settled_only_once_every_process_left() {
    builder().check(|| {
        let w = Arc::new(L64(AtomicU64::new(0)));
        let gone = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        enter(&*w, 1);
        enter(&*w, 1);
        let procs: Vec<_> = (0..2)
            .map(|i| {
                let (w, gone) = (w.clone(), gone.clone());
                loom::thread::spawn(move || {
                    gone[i].store(true, SeqCst);
                    leave(&*w, 1);
                })
            })
            .collect();
        let sched = {
            let (w, gone) = (w.clone(), gone.clone());
            loom::thread::spawn(move || {
                let v = w.get(SeqCst);
                if settled(v, 1, 64) {
                    assert!(gone.iter().all(|g| g.load(SeqCst)), "settled early: {v:#x}");
                }
            })
        };
        for p in procs {
            p.join().unwrap();
        }
        sched.join().unwrap();
        assert!(all_left(w.get(SeqCst), 1));
    });
}

/// A process leaving under grant 1 while another enters under grant 2 (and a third enters and
/// leaves under 2): grant 1's leave never lowers grant 2's count; at the end the word counts
/// exactly the one process still in under grant 2.
#[test]
fn a_stale_leave_never_lowers_the_next_grant() {
    builder().check(|| {
        let w = Arc::new(L64(AtomicU64::new(0)));
        enter(&*w, 1);
        let old = {
            let w = w.clone();
            loom::thread::spawn(move || leave(&*w, 1))
        };
        let stays = {
            let w = w.clone();
            loom::thread::spawn(move || enter(&*w, 2))
        };
        let passes = {
            let w = w.clone();
            loom::thread::spawn(move || {
                enter(&*w, 2);
                leave(&*w, 2);
            })
        };
        for t in [old, stays, passes] {
            t.join().unwrap();
        }
        let v = w.get(SeqCst);
        assert_eq!(tag(v), 2, "{v:#x}");
        assert_eq!(count(v), 1, "{v:#x}");
        assert_eq!(v, tagged(2, 1));
    });
}
