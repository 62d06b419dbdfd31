//! The launch gate's half of the lease protocol (tenant side): what a process of the slice
//! writes to the shared words around a launch — waiting for the lease (`demand`), the
//! activity word (`seen`), registering its work under the grant (`pending`, `near`), counting
//! itself busy and quiet (`busy`), reporting its drain after a revoke, the one-launch pass
//! (`passed`, `demand`) and leaving at exit — with the per-process state ([`Proc`]) that
//! makes each of those happen once per grant. The interposer's `gate.rs` adds the driver
//! events, the futex waits and wakes ([`Gate`]'s methods say when a wake is due) and the
//! driver call that asks whether a stream captures; when to ask is this half's rule
//! ([`asks_capture`]), and a launch into a capturing stream never reaches the rest of it (it
//! does not run, so it is not registered, bounded or counted busy).

use super::{count, enter, held, leave, may_launch, Half};
use crate::atomics::{Word32, Word64};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// [`Proc::pass_wait`]: the process counts a thread in `demand` for the pass.
pub const PASS_CLAIMED: u64 = 1 << 32;

/// The gate half's state of one process on one device (process-local, not shared).
pub struct Proc<W32 = AtomicU32, W64 = AtomicU64> {
    /// Grant under which this process last registered pending work.
    pub registered: W32,
    /// Grant last drained (reported) by the gate thread.
    pub drained: W32,
    /// Grant for which this process last left `near` (down to its last kernel).
    pub neared: W32,
    /// Grant under which this process counts itself in the slice's `busy` word (0: quiet).
    pub busy: W32,
    /// Threads between the start of a bounded launch and its queue-bound event.
    pub launching: W32,
    /// Of those, threads counted in `demand` (waiting for the lease).
    pub lease_waiting: W32,
    /// The one-launch pass this process took and whose grant its gate thread has not seen
    /// yet (0: none), in the low half; [`PASS_CLAIMED`] once the process counts one thread in
    /// `demand` for it (until the gate thread sees the grant).
    pub pass_wait: W64,
    /// The grant id in force when that pass was taken: any other id means the slice was
    /// granted since.
    pub pass_prev: W32,
}

impl Proc<AtomicU32, AtomicU64> {
    /// A process that never launched.
    pub const fn new() -> Self {
        Proc {
            registered: AtomicU32::new(0),
            drained: AtomicU32::new(0),
            neared: AtomicU32::new(0),
            busy: AtomicU32::new(0),
            launching: AtomicU32::new(0),
            lease_waiting: AtomicU32::new(0),
            pass_wait: AtomicU64::new(0),
            pass_prev: AtomicU32::new(0),
        }
    }
}

impl Default for Proc<AtomicU32, AtomicU64> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W32: Word32, W64: Word64> Proc<W32, W64> {
    /// In a forked child: the parent's registrations, counts and pass are the parent's.
    pub fn reset(&self) {
        for w in [
            &self.registered,
            &self.drained,
            &self.neared,
            &self.busy,
            &self.launching,
            &self.lease_waiting,
        ] {
            w.put(0, Relaxed);
        }
        self.pass_wait.put(0, Relaxed);
    }
    /// A bounded launch begins (before its lease check): a drain report waits for it.
    pub fn launch_begins(&self) {
        self.launching.add(1, SeqCst);
    }
    /// That launch was queued (or failed).
    pub fn launch_ends(&self) {
        self.launching.sub(1, SeqCst);
    }
    /// Whether a thread is between the start of a bounded launch and its end.
    pub fn launching(&self) -> bool {
        self.launching.get(SeqCst) > 0
    }
    /// Whether a thread inside a bounded launch is neither waiting for the lease nor done:
    /// a drain report waits for it ([`Gate::drained`] must not overtake its launch).
    pub fn unsettled(&self) -> bool {
        self.launching.get(SeqCst) > self.lease_waiting.get(SeqCst)
    }
    /// Whether the process counts itself busy under `grant` (or `grant` is 0: nothing to
    /// count under).
    #[inline(always)]
    pub fn busy_under(&self, grant: u32) -> bool {
        grant == 0 || self.busy.get(SeqCst) == grant
    }
    /// The grant under which the process last registered work (0: none).
    pub fn registered(&self) -> u32 {
        self.registered.get(Acquire)
    }
}

/// The capture rule of the gate's half: whether a launch must first be asked if its stream
/// captures (a captured launch does not run, so it is never waited, bounded, paced, registered
/// or counted busy: it goes straight to the driver). Asked only when the gate would do more
/// than load the lease word — the queue is bounded (`max_queue`, the device is shared) or the
/// lease word `w` does not let the launch through — so the fast path makes no driver call.
#[inline(always)]
pub const fn asks_capture(max_queue: u32, w: u32) -> bool {
    max_queue > 0 || !may_launch(w)
}

/// What leaving at exit changed: the wakes due.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exit {
    /// The process left `busy`: wake its futex.
    pub busy: bool,
    /// The process reported its work drained: wake `pending`'s futex.
    pub pending: bool,
}

/// Marks [`Half`] as the gate's.
pub enum GateSide {}

/// The gate half over one device's words (the `lease` slot read only).
pub type Gate<'a, W32, W64> = Half<'a, W32, W64, GateSide>;

impl<W32: Word32, W64: Word64> Half<'_, W32, W64, GateSide> {
    /// The lease word. `SeqCst`, like the scheduler's revoke: a thread that counted itself
    /// launching ([`Proc::launch_begins`]) or registered and then still reads the word held is
    /// seen by the gate thread that reads the revoke (no cost on x86, a plain load).
    #[inline(always)]
    pub fn word(&self) -> u32 {
        self.slot.word.get(SeqCst)
    }
    /// The current grant id.
    pub fn grant(&self) -> u32 {
        self.slot.grant.get(Acquire)
    }
    /// The queue bound (0: none, the device is not shared).
    #[inline(always)]
    pub fn max_queue(&self) -> u32 {
        self.slot.max_queue.get(Relaxed)
    }
    /// The pace, µs (0: none).
    pub fn ahead_us(&self) -> u32 {
        self.slot.ahead_us.get(Relaxed)
    }

    /// The futex value of the slice's `busy` word (its low half), to sleep on until a launch
    /// of the process counts it busy.
    pub fn busy_low(&self) -> u32 {
        count(self.usage.busy.get(SeqCst))
    }

    /// A thread starts waiting for the lease (`counted`: inside a bounded launch). `true`:
    /// it is the first, wake the arbiter on `demand`.
    pub fn wait_begins(&self, p: &Proc<W32, W64>, counted: bool) -> bool {
        let first = self.usage.demand.add(1, AcqRel) == 0;
        // After `demand`: a gate thread about to report its drain waits for this.
        if counted {
            p.lease_waiting.add(1, SeqCst);
        }
        first
    }
    /// That thread stops waiting (granted, or gave up).
    pub fn wait_ends(&self, p: &Proc<W32, W64>, counted: bool) {
        if counted {
            p.lease_waiting.sub(1, SeqCst);
        }
        self.usage.demand.sub(1, AcqRel);
    }

    /// Once per lease word per thread: records the activity (`seen`, only while the word
    /// is held: a launch on a pass is recorded once granted) and registers the process's
    /// work under `grant` in `pending` and `near`, counting the process once per grant.
    /// Returns whether the launch may go: `false` when the lease, held in `w`, was revoked
    /// while the thread registered (the scheduler may have read `pending` before the
    /// registration and acknowledged the drain; the gate thread drains the registration and
    /// the launch waits for the next grant). A launch on a pass (`w` not held) always goes.
    pub fn register(&self, p: &Proc<W32, W64>, w: u32, grant: u32) -> bool {
        if held(w) && self.usage.seen.get(Relaxed) != w {
            self.usage.seen.put(w, Relaxed);
        }
        // Counted in first, then marked: a thread that finds the process already marked
        // under `grant` counts itself out again. Marked first, a second thread could launch
        // on the first one's mark before its count, and the scheduler acknowledge the drain
        // in between.
        enter(self.usage.near, grant);
        enter(self.usage.pending, grant);
        if p.registered.swap(grant, SeqCst) == grant {
            leave(self.usage.pending, grant);
            leave(self.usage.near, grant);
        }
        !held(w) || held(self.word())
    }

    /// Counts the process in `busy` under `grant` (once per quiet spell). `true`: it was not,
    /// wake the gate thread and the arbiter on `busy`. Counted in first, then marked (a
    /// thread that finds it marked already counts itself out again): marked first, a quiet
    /// report landing between the mark and the count would find nothing to count out, and
    /// the slice would read busy for the rest of the grant.
    pub fn enter_busy(&self, p: &Proc<W32, W64>, grant: u32) -> bool {
        enter(self.usage.busy, grant);
        if p.busy.swap(grant, SeqCst) == grant {
            leave(self.usage.busy, grant);
            return false;
        }
        true
    }

    /// The process went quiet under `grant`: leaves `busy` (`true`: wake its futex), unless
    /// a launch counted it busy under another grant meanwhile (`false`).
    pub fn go_quiet(&self, p: &Proc<W32, W64>, grant: u32) -> bool {
        if p.busy.cas(grant, 0, SeqCst).is_err() {
            return false;
        }
        leave(self.usage.busy, grant);
        true
    }

    /// The process is down to its last kernel of `grant` (or drained): leaves `near` once per
    /// grant. `true`: wake the arbiter on `pending`.
    pub fn near_done(&self, p: &Proc<W32, W64>, grant: u32) -> bool {
        if p.neared.swap(grant, AcqRel) == grant {
            return false;
        }
        leave(self.usage.near, grant);
        true
    }

    /// The grant whose work the gate thread must drain now, seeing lease word `w`: the
    /// lease is revoked, the process registered under that grant and has not reported it,
    /// and it is not the grant of a pass still waiting for its grant (see
    /// [`Gate::settle_pass`], which this runs).
    pub fn drain_due(&self, p: &Proc<W32, W64>, w: u32) -> Option<u32> {
        let grant = p.registered.get(Acquire);
        // Work launched on a pass is not drained before its grant came (and went).
        let unpassed = self.settle_pass(p) != grant;
        let due = !may_launch(w) && grant != 0 && p.drained.get(Acquire) != grant && unpassed;
        due.then_some(grant)
    }

    /// Reports the process's work under `grant` drained (after its last kernel completed and
    /// no launch is unsettled, [`Proc::unsettled`]): leaves `near` and `pending`, once per
    /// grant however many reports race (the gate thread's and the exit hook's: a second
    /// leave would count out another process of the slice). `true`: it reported now, wake
    /// the arbiter on `pending`.
    pub fn drained(&self, p: &Proc<W32, W64>, grant: u32) -> bool {
        if p.drained.swap(grant, AcqRel) == grant {
            return false;
        }
        self.near_done(p, grant);
        leave(self.usage.pending, grant);
        true
    }

    /// Takes the slice's one-launch pass (`LeaseSlot::pass`), if the arbiter armed one and no
    /// process of the slice took it yet (a compare-and-swap of `passed`): the process is
    /// marked waiting for that grant (a claim not settled yet carries over). Returns the
    /// pass's grant id; the launch is then registered under it.
    pub fn take_pass(&self, p: &Proc<W32, W64>) -> Option<u32> {
        let pass = self.slot.pass.get(Acquire);
        if pass == 0 {
            return None;
        }
        let cur = self.usage.passed.get(Acquire);
        if cur == pass || self.usage.passed.cas(cur, pass, AcqRel).is_err() {
            return None;
        }
        p.pass_prev.put(self.grant(), Release);
        let mut st = p.pass_wait.get(Acquire);
        loop {
            let new = u64::from(pass) | (st & PASS_CLAIMED);
            match p.pass_wait.cas(st, new, AcqRel) {
                Ok(_) => return Some(pass),
                Err(x) => st = x,
            }
        }
    }

    /// After the launch on `pass` was queued: the process counts one thread in `demand` (so
    /// the arbiter grants the slice, under that id) until its gate thread sees the grant
    /// ([`Gate::settle_pass`]); not if the gate thread already saw one. `demand` is raised
    /// before the claim is marked, so the gate thread never lowers it first. `true`: wake the
    /// arbiter on `demand`.
    pub fn announce_pass(&self, p: &Proc<W32, W64>, pass: u32) -> bool {
        let was = self.usage.demand.add(1, AcqRel);
        let marked = u64::from(pass);
        if p.pass_wait
            .cas(marked, marked | PASS_CLAIMED, AcqRel)
            .is_err()
        {
            self.usage.demand.sub(1, AcqRel);
            return false;
        }
        was == 0
    }

    /// The gate thread's part of a pass: once the slice holds the lease under the pass's id,
    /// the launch made on it is recorded as that grant's activity (`seen`) and the thread
    /// counted in `demand` for it leaves; so it does once the grant id moved on to another
    /// grant (the pass was withdrawn, or its grant came and went unseen). Returns the pass
    /// still waiting for its grant (0: none).
    pub fn settle_pass(&self, p: &Proc<W32, W64>) -> u32 {
        loop {
            let state = p.pass_wait.get(Acquire);
            let pass = count(state);
            if pass == 0 {
                return 0;
            }
            // The arbiter stores the grant id before the word: read in the other order, a
            // grant under the pass whose word is not held yet is still to come.
            let grant = self.grant();
            let w = self.word();
            if grant == pass {
                if !held(w) {
                    return pass;
                }
                self.usage.seen.put(w, Relaxed);
            } else if grant == p.pass_prev.get(Acquire) && !held(w) {
                return pass;
            }
            // The launching thread may add its claim, or take a newer pass: look again.
            if let Ok(s) = p.pass_wait.cas(state, 0, AcqRel) {
                if s & PASS_CLAIMED != 0 {
                    self.usage.demand.sub(1, AcqRel);
                }
                return 0;
            }
        }
    }

    /// At exit the process's work is over: it gives up a pass claim, leaves `busy`, `near`
    /// and `pending` (once: not if it already reported the grant), so the arbiter need not
    /// wait for a report that will never come.
    pub fn exit(&self, p: &Proc<W32, W64>) -> Exit {
        if p.pass_wait.swap(0, AcqRel) & PASS_CLAIMED != 0 {
            self.usage.demand.sub(1, AcqRel);
        }
        let grant = p.registered.get(Acquire);
        if grant == 0 || p.drained.get(Acquire) == grant {
            return Exit::default();
        }
        let busy = p.busy.swap(0, SeqCst);
        if busy != 0 {
            leave(self.usage.busy, busy);
        }
        let reported = self.drained(p, grant);
        Exit {
            busy: busy != 0,
            pending: reported,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::asks_capture;
    use crate::layout::{LEASE_GENERATION_ONE, LEASE_HELD, LEASE_UNGATED};

    #[test]
    fn capture_is_asked_only_off_the_fast_path() {
        let held = LEASE_GENERATION_ONE | LEASE_HELD;
        // Alone, held (or ungated): the fast path, no driver call.
        assert!(!asks_capture(0, held));
        assert!(!asks_capture(0, LEASE_UNGATED));
        // Shared (bounded), or not held (the launch would wait): asked.
        assert!(asks_capture(8, held));
        assert!(asks_capture(0, LEASE_GENERATION_ONE));
    }
}
