//! The scheduler's half of the lease protocol (arbiter side): what the arbiter writes to a
//! slice's `lease` slot — grant, renew, revoke, a fresh gated slot, the one-launch pass, the
//! queue bound and pace — and how it reads the slice's `usage` words ([`Reading`]): who waits
//! (`demand`), whether the holder launched (`seen`), whether a drain is reported (`pending`),
//! down to its last kernels (`near`), or the holder is idle (`busy`). The arbiter's
//! `sched/device.rs` adds the policy, the futex waits and the wakes (after [`Sched::grant`]
//! and [`Sched::revoke`], on the lease word). Every `usage` value is tenant-written: a
//! reading only ever decides about that slice.

use super::{all_left, count, settled, Half};
use crate::atomics::{Word32, Word64};
use crate::layout::{LEASE_GENERATION_ONE, LEASE_HELD, LEASE_UNGATED};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// Marks [`Half`] as the scheduler's.
pub enum SchedSide {}

/// The scheduler half over one slice's words on one device (the `usage` entry read only;
/// hostile).
pub type Sched<'a, W32, W64> = Half<'a, W32, W64, SchedSide>;

/// A copy of the words the scheduler decides on, as read at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// The lease word.
    pub word: u32,
    /// The grant id.
    pub grant: u32,
    /// Threads waiting at the gate (claimed).
    pub demand: u32,
    /// Lease word of the last launch.
    pub seen: u32,
    /// `(grant << 32) | processes` with undrained work.
    pub pending: u64,
    /// `(grant << 32) | processes` with more than their last kernel queued.
    pub near: u64,
    /// `(grant << 32) | processes` busy.
    pub busy: u64,
}

impl Reading {
    /// Threads wait for the lease: a count above `max` is no thread count (written by
    /// something else) and reads as none.
    pub const fn waiting(&self, max: u32) -> bool {
        self.demand > 0 && self.demand <= max
    }
    /// The slice launched under the current lease word (since its grant or last renewal).
    pub const fn active(&self) -> bool {
        self.seen == self.word
    }
    /// Every process that launched under the current grant is quiet (another grant's tag,
    /// as an older gate leaves it, never reads as quiet).
    pub const fn quiet(&self) -> bool {
        self.grant != 0 && all_left(self.busy, self.grant)
    }
    /// The drain of `grant` is reported: every process registered under it left `pending`
    /// (or another grant retagged it; a count above `max` processes is no count).
    pub const fn drained(&self, grant: u32, max: u32) -> bool {
        settled(self.pending, grant, max)
    }
    /// Every process of `grant` is down to its last kernel (or drained). An older gate
    /// never writes `near`, and then a hand-off waits for the whole drain.
    pub const fn near(&self, grant: u32) -> bool {
        all_left(self.near, grant)
    }
    /// The futex value of `pending` (its low half).
    pub const fn pending_low(&self) -> u32 {
        count(self.pending)
    }
    /// The futex value of `busy` (its low half).
    pub const fn busy_low(&self) -> u32 {
        count(self.busy)
    }
}

impl<W32: Word32, W64: Word64> Half<'_, W32, W64, SchedSide> {
    /// The current grant id.
    pub fn grant_id(&self) -> u32 {
        self.slot.grant.get(Relaxed)
    }

    /// Grants the lease under `id`: the id first, then the word (held, gated, a new
    /// generation), so a gate that sees the word held reads the id. Wake the lease word.
    pub fn grant(&self, id: u32) {
        self.slot.grant.put(id, Release);
        let v = self.slot.word.get(Relaxed);
        self.slot.word.put(
            (v.wrapping_add(LEASE_GENERATION_ONE) | LEASE_HELD) & !LEASE_UNGATED,
            Release,
        );
    }

    /// Renews the held lease: a new generation only (no wake), so activity in the next
    /// quantum shows as a new `seen`.
    pub fn renew(&self) {
        let v = self.slot.word.get(Relaxed);
        self.slot
            .word
            .put(v.wrapping_add(LEASE_GENERATION_ONE), Release);
    }

    /// Revokes the lease (not held, gated, a new generation); returns the grant whose drain
    /// to wait for. Wake the lease word.
    pub fn revoke(&self) -> u32 {
        self.gate();
        self.grant_id()
    }

    /// A slot just taken over: no pass left by an earlier arbiter, not held, gated (the
    /// slice waits for its first grant).
    pub fn take_over(&self) {
        self.slot.pass.put(0, Release);
        self.gate();
    }

    /// Not held, gated. `SeqCst` (an `xchg` on x86, on the arbiter's side only): a gate
    /// that counted itself launching or registered and then reads the word still held is
    /// seen by whoever reads the revoke ([`super::gate::Gate::word`]).
    fn gate(&self) {
        let v = self.slot.word.get(Relaxed);
        self.slot.word.put(
            v.wrapping_add(LEASE_GENERATION_ONE) & !(LEASE_HELD | LEASE_UNGATED),
            SeqCst,
        );
    }

    /// Arms a one-launch pass: the id of the slice's next grant (0 withdraws it).
    pub fn arm_pass(&self, id: u32) {
        self.slot.pass.put(id, Release);
    }

    /// The queue bound and pace of every process of the slice (0: none).
    pub fn bound(&self, max_queue: u32, ahead_us: u32) {
        self.slot.max_queue.put(max_queue, Release);
        self.slot.ahead_us.put(ahead_us, Release);
    }

    /// Reads the words the scheduler decides on (`pending`, `near` and `busy` `SeqCst`,
    /// after a `SeqCst` revoke: see [`Sched::revoke`]; a plain load on x86).
    pub fn read(&self) -> Reading {
        Reading {
            word: self.slot.word.get(Relaxed),
            grant: self.grant_id(),
            demand: self.usage.demand.get(Acquire),
            seen: self.usage.seen.get(Acquire),
            pending: self.usage.pending.get(SeqCst),
            near: self.usage.near.get(SeqCst),
            busy: self.usage.busy.get(SeqCst),
        }
    }
}
