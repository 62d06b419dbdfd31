//! The lease protocol: the words the launch gate (tenant side) and the scheduler (arbiter
//! side) share — the lease word, grant id, queue bound, pace and pass of a `lease` slot, and
//! `demand`, `seen`, `pending`, `near`, `busy` and `passed` of a `usage` device entry — and
//! both halves' state machines over them: [`gate`] (launch, wait, register, busy/quiet, drain
//! report, pass, exit) and [`sched`] (grant, renew, revoke, drain reading, pass, bounds).
//! Neither side touches these words except through this module; the interposer's `gate.rs`
//! and the arbiter's `sched/device.rs` only add what their side does around it (driver
//! events, futex waits, the policy). Generic over [`Word32`]/[`Word64`] so that
//! `tests/lease_model.rs` runs both halves interleaved on `loom` atomics.
//!
//! The `usage` words `pending`, `near` and `busy` each hold a grant id in their high half and
//! a count of processes in their low half: a process counts itself in under the grant it
//! launched under ([`enter`]) and out once its work is drained, down to its last kernel, or
//! quiet ([`leave`]); the scheduler reads the word against the grant it decides about
//! ([`settled`], [`all_left`]). A word tagged with another grant is restarted by the first
//! process of the new grant, so the counts of an old grant never leak into a new one, and a
//! process leaving under an old grant never lowers a new one's count. See `docs/region.md`
//! and `docs/scheduling.md`.

pub mod gate;
pub mod sched;

use crate::atomics::Word64;
use crate::layout::{LEASE_HELD, LEASE_UNGATED};
use std::marker::PhantomData;
use std::sync::atomic::Ordering::{Acquire, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// The word for `count` processes under `grant`.
pub const fn tagged(grant: u32, count: u32) -> u64 {
    ((grant as u64) << 32) | count as u64
}

/// The grant a word counts under.
pub const fn tag(v: u64) -> u32 {
    (v >> 32) as u32
}

/// The count of a word.
pub const fn count(v: u64) -> u32 {
    (v & 0xffff_ffff) as u32
}

/// Counts one more process in under `grant` (a word tagged with another grant restarts at
/// one under `grant`). `SeqCst`, as [`leave`]: the scheduler's revoke and its reading of the
/// word are `SeqCst` too, so a registration and a revoke are seen in one order by both sides.
pub fn enter<W: Word64>(w: &W, grant: u32) {
    let mut cur = w.get(Acquire);
    loop {
        let new = if tag(cur) == grant {
            tagged(grant, count(cur).wrapping_add(1))
        } else {
            tagged(grant, 1)
        };
        match w.cas(cur, new, SeqCst) {
            Ok(_) => return,
            Err(x) => cur = x,
        }
    }
}

/// Counts one process out under `grant`: nothing when the word counts under another grant or
/// is already 0 under this one.
pub fn leave<W: Word64>(w: &W, grant: u32) {
    let mut cur = w.get(Acquire);
    loop {
        if tag(cur) != grant || count(cur) == 0 {
            return;
        }
        match w.cas(cur, cur - 1, SeqCst) {
            Ok(_) => return,
            Err(x) => cur = x,
        }
    }
}

/// The scheduler's reading of `pending` for a drain of `grant`: everything counted in under it
/// has left — 0 under it, another grant's tag (processes leave at exit; a later registration
/// retags), or a count above `max` processes, which is no count (tenant-written bytes).
pub const fn settled(v: u64, grant: u32, max: u32) -> bool {
    tag(v) != grant || count(v) == 0 || count(v) > max
}

/// Whether every process counted in under `grant` has left (`near`: down to its last kernel;
/// `busy`: quiet). Another grant's tag — as an older gate leaves it — is not.
pub const fn all_left(v: u64, grant: u32) -> bool {
    tag(v) == grant && count(v) == 0
}

/// A lease word that says the slice holds the lease (not merely ungated).
#[inline(always)]
pub const fn held(w: u32) -> bool {
    w & LEASE_HELD != 0
}

/// A lease word that lets a launch through (held, or not time-sliced).
#[inline(always)]
pub const fn may_launch(w: u32) -> bool {
    w & (LEASE_HELD | LEASE_UNGATED) != 0
}

/// The words of one device's `lease` slot (`LeaseSlot`): written by the scheduler, read by
/// the gate (through a read-only mapping on the tenant's side).
pub struct SlotWords<'a, W32> {
    /// `LEASE_*` flags and generation: the gate's futex word.
    pub word: &'a W32,
    /// Grant id.
    pub grant: &'a W32,
    /// Queue bound (0 = none).
    pub max_queue: &'a W32,
    /// Pace, µs (0 = none).
    pub ahead_us: &'a W32,
    /// One-launch pass (0 = none).
    pub pass: &'a W32,
}

impl<W32> Clone for SlotWords<'_, W32> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W32> Copy for SlotWords<'_, W32> {}

/// The lease words of one device entry of `usage` (`DeviceUsage`): written by the tenant's
/// gates, read by the scheduler (hostile there: any value may be anything).
pub struct UsageWords<'a, W32, W64> {
    /// Threads waiting at the gate (futex word the arbiter waits on).
    pub demand: &'a W32,
    /// Lease word of the last launch.
    pub seen: &'a W32,
    /// `(grant << 32) | processes` with undrained work.
    pub pending: &'a W64,
    /// `(grant << 32) | processes` with more than their last kernel still queued.
    pub near: &'a W64,
    /// `(grant << 32) | processes` with work queued or a launch in progress.
    pub busy: &'a W64,
    /// The one-launch pass taken last.
    pub passed: &'a W32,
}

impl<W32, W64> Clone for UsageWords<'_, W32, W64> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W32, W64> Copy for UsageWords<'_, W32, W64> {}

/// One device's words as one half sees them (`S`: [`gate::GateSide`] or
/// [`sched::SchedSide`], whose methods it then has: [`gate::Gate`], [`sched::Sched`]).
pub struct Half<'a, W32, W64, S> {
    /// The `lease` slot.
    pub slot: SlotWords<'a, W32>,
    /// The `usage` entry.
    pub usage: UsageWords<'a, W32, W64>,
    side: PhantomData<S>,
}

impl<'a, W32, W64, S> Half<'a, W32, W64, S> {
    /// The half over these words.
    pub const fn new(slot: SlotWords<'a, W32>, usage: UsageWords<'a, W32, W64>) -> Self {
        Half {
            slot,
            usage,
            side: PhantomData,
        }
    }
}

impl<W32, W64, S> Clone for Half<'_, W32, W64, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W32, W64, S> Copy for Half<'_, W32, W64, S> {}

impl SlotWords<'_, AtomicU32> {
    /// Address of the lease word, for `futex` waits and wakes.
    pub fn word_addr(&self) -> *const u32 {
        self.word.as_ptr().cast_const()
    }
}

impl UsageWords<'_, AtomicU32, AtomicU64> {
    /// Address of `demand`, for `futex` waits and wakes.
    pub fn demand_addr(&self) -> *const u32 {
        self.demand.as_ptr().cast_const()
    }
    /// Address of the low (count) half of `pending` (little-endian: its first four bytes).
    pub fn pending_addr(&self) -> *const u32 {
        self.pending.as_ptr().cast::<u32>().cast_const()
    }
    /// Address of the low (count) half of `busy`.
    pub fn busy_addr(&self) -> *const u32 {
        self.busy.as_ptr().cast::<u32>().cast_const()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn counts_under_one_grant_and_restarts_under_the_next() {
        let w = AtomicU64::new(0);
        enter(&w, 7);
        enter(&w, 7);
        assert_eq!(w.get(Acquire), tagged(7, 2));
        leave(&w, 7);
        assert!(!all_left(w.get(Acquire), 7));
        assert!(!settled(w.get(Acquire), 7, 64));
        leave(&w, 7);
        assert!(all_left(w.get(Acquire), 7) && settled(w.get(Acquire), 7, 64));
        // Leaving again, or under a stale grant, changes nothing.
        leave(&w, 7);
        enter(&w, 8);
        leave(&w, 7);
        assert_eq!(w.get(Acquire), tagged(8, 1));
        // Grant 7's drain is over once another grant tagged the word; 8's is not.
        assert!(settled(w.get(Acquire), 7, 64));
        assert!(!settled(w.get(Acquire), 8, 64));
        assert!(!all_left(w.get(Acquire), 7));
        // A count no slice can have is not a count.
        assert!(settled(tagged(8, 65), 8, 64));
    }
}
