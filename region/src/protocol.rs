//! The lock-free memory-reservation protocol of a slice, generic over where its words live
//! (mmapped `usage` file in production, `loom` atomics in the model test).
//!
//! Invariant (for every device `d`, whenever `total[d]` is not frozen and no operation is in
//! flight): `bytes(total[d]) == Σ reserved[r][d]` over records `r` whose process is alive.
//!
//! * `reserve`: `inflight += 1`; load `total`; if frozen back off; check the cap; CAS
//!   `total += bytes`; `reserved += bytes`; `inflight -= 1`. The CAS is the only point where the
//!   cap is checked, so concurrent reservers can never together exceed it.
//! * `release`: `inflight += 1`; load `total`; if frozen back off; `reserved -= bytes`; CAS
//!   `total -= bytes` (skipped if a freeze started meanwhile: the recomputation then already sees
//!   the lower `reserved`); `inflight -= 1`.
//! * `recompute` (reclaim of dead processes): freeze `total` by CAS (bit 63 plus the freezer's
//!   record index), wait until every live record has `inflight == 0`, set
//!   `total := Σ reserved` over live records, which also unfreezes. A process killed anywhere in
//!   `reserve`/`release` is thereby repaired exactly; a freezer killed while frozen is detected by
//!   the waiters (its record's process is dead) and one of them takes the freeze over.
//!
//! All operations on `inflight` and `total` are `SeqCst`: the freezer's "freeze, then read
//! inflight" and an operation's "raise inflight, then read total" form a Dekker pair, so either
//! the freezer waits for the operation or the operation sees the freeze.

use crate::atomics::{Word32, Word64};
use crate::layout::{
    rec_state, rec_unpack, MAX_DEVICES, REC_CLAIMING, REC_DEAD, REC_FREE, REC_LIVE,
    TOTAL_BYTES_MASK, TOTAL_FROZEN, TOTAL_OWNER_SHIFT,
};
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};

/// The words of a usage ledger.
pub trait Ledger {
    /// 64-bit word type.
    type W64: Word64;
    /// 32-bit word type.
    type W32: Word32;
    /// Number of devices (≤ [`MAX_DEVICES`]).
    fn devices(&self) -> usize;
    /// Number of process records.
    fn records(&self) -> usize;
    /// Records that may be in use: none at or beyond this was ever claimed (≤ `records()`).
    fn in_use(&self) -> usize {
        self.records()
    }
    /// Record `rec` is about to be claimed: [`Ledger::in_use`] must cover it from now on.
    fn note_claim(&self, rec: usize) {
        let _ = rec;
    }
    /// Per-device total word (`dev < devices()`).
    fn total(&self, dev: usize) -> &Self::W64;
    /// Record state word (`rec < records()`).
    fn state(&self, rec: usize) -> &Self::W64;
    /// Record start time.
    fn start_time(&self, rec: usize) -> &Self::W64;
    /// Bytes held by a record on a device.
    fn reserved(&self, rec: usize, dev: usize) -> &Self::W64;
    /// Operations of a record in flight on a device.
    fn inflight(&self, rec: usize, dev: usize) -> &Self::W32;
}

/// Whether a process exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It runs (or we cannot tell: treated as alive, which only ever leaks, never overshoots).
    Alive,
    /// It is gone (no such pid, a zombie, or a different process with the same pid).
    Dead,
}

/// What the protocol needs from its surroundings: process liveness and a way to wait.
pub trait Env {
    /// A backoff for one wait.
    type Waiter: Waiter;
    /// Liveness of `pid`; `start = None` when the start time is not yet known.
    fn liveness(&self, pid: u32, start: Option<u64>) -> Liveness;
    /// A fresh backoff.
    fn waiter(&self) -> Self::Waiter;
}

/// A backoff for one wait loop.
pub trait Waiter {
    /// Waits a little; `false` once the wait should be given up.
    fn pause(&mut self) -> bool;
    /// Whether it is time to check the liveness of whoever we wait for (rate-limits syscalls).
    fn check_owner(&self) -> bool;
}

/// Why a reservation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveError {
    /// `used + bytes > cap`; nothing changed.
    OverCap {
        /// Bytes the slice held on the device at the check.
        used: u64,
        /// The cap in force.
        cap: u64,
    },
    /// The total stayed frozen by a live process for longer than the wait limit.
    Busy,
}

/// Why a recomputation did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecomputeError {
    /// Another live process holds the freeze and did not finish in time.
    Busy,
    /// A live process kept an operation in flight for longer than the wait limit; the total was
    /// restored unchanged.
    GaveUp,
}

/// Bytes part of a total word.
pub const fn total_bytes(word: u64) -> u64 {
    word & TOTAL_BYTES_MASK
}

const fn frozen_by(owner: usize, bytes: u64) -> u64 {
    TOTAL_FROZEN | (((owner as u64) & 0x7fff) << TOTAL_OWNER_SHIFT) | (bytes & TOTAL_BYTES_MASK)
}

const fn frozen_owner(word: u64) -> usize {
    ((word >> TOTAL_OWNER_SHIFT) & 0x7fff) as usize
}

/// Liveness of the process owning record `rec` (free, dead or out-of-range records are dead).
pub fn record_liveness<L: Ledger, E: Env>(l: &L, e: &E, rec: usize) -> Liveness {
    if rec >= l.records() {
        return Liveness::Dead;
    }
    let (st, pid) = rec_unpack(l.state(rec).get(Acquire));
    match st {
        REC_LIVE => e.liveness(pid, Some(l.start_time(rec).get(Acquire))),
        REC_CLAIMING => e.liveness(pid, None),
        _ => Liveness::Dead,
    }
}

/// Claims a free record for (`pid`, `start`); `None` when every record is taken.
pub fn claim<L: Ledger>(l: &L, pid: u32, start: u64) -> Option<usize> {
    for rec in 0..l.records() {
        let st = l.state(rec);
        if st.get(Relaxed) != REC_FREE {
            continue;
        }
        // Before the claim, so a record that lives (and may die) is always searched.
        l.note_claim(rec);
        if st
            .cas(REC_FREE, rec_state(REC_CLAIMING, pid), SeqCst)
            .is_err()
        {
            continue;
        }
        for dev in 0..MAX_DEVICES.min(l.devices()) {
            l.reserved(rec, dev).put(0, SeqCst);
            l.inflight(rec, dev).put(0, SeqCst);
        }
        l.start_time(rec).put(start, SeqCst);
        st.put(rec_state(REC_LIVE, pid), SeqCst);
        return Some(rec);
    }
    None
}

/// Gives record `me` back (the caller's process releases everything first or lets the total be
/// repaired by the next reclaim). Returns whether it was ours.
pub fn unclaim<L: Ledger>(l: &L, me: usize, pid: u32) -> bool {
    if me >= l.records() {
        return false;
    }
    // Marking it dead (not free) keeps its bytes out of every future sum while a recompute makes
    // the totals exact again.
    l.state(me)
        .cas(rec_state(REC_LIVE, pid), rec_state(REC_DEAD, pid), SeqCst)
        .is_ok()
}

/// Waits until `total[dev]` is not frozen, taking over (and finishing) the freeze of a dead owner.
fn wait_unfrozen<L: Ledger, E: Env>(l: &L, e: &E, me: usize, dev: usize) -> Result<(), ()> {
    let mut w = e.waiter();
    loop {
        let t = l.total(dev).get(SeqCst);
        if t & TOTAL_FROZEN == 0 {
            return Ok(());
        }
        if w.check_owner() {
            let owner = frozen_owner(t);
            if owner != me && record_liveness(l, e, owner) == Liveness::Dead {
                let mine = frozen_by(me, total_bytes(t));
                if l.total(dev).cas(t, mine, SeqCst).is_ok() {
                    // Finishing or abandoning the recomputation both unfreeze.
                    let _ = recompute_frozen(l, e, dev, mine);
                    continue;
                }
            }
        }
        if !w.pause() {
            return Err(());
        }
    }
}

/// Reserves `bytes` on `dev` for record `me`, never letting the total exceed `cap`.
pub fn reserve<L: Ledger, E: Env>(
    l: &L,
    e: &E,
    me: usize,
    dev: usize,
    bytes: u64,
    cap: u64,
) -> Result<(), ReserveError> {
    let cap = cap.min(TOTAL_BYTES_MASK);
    let inflight = l.inflight(me, dev);
    loop {
        inflight.add(1, SeqCst);
        let t = l.total(dev).get(SeqCst);
        if t & TOTAL_FROZEN != 0 {
            inflight.sub(1, SeqCst);
            wait_unfrozen(l, e, me, dev).map_err(|()| ReserveError::Busy)?;
            continue;
        }
        let used = total_bytes(t);
        let new = match used.checked_add(bytes) {
            Some(n) if n <= cap => n,
            _ => {
                inflight.sub(1, SeqCst);
                return Err(ReserveError::OverCap { used, cap });
            }
        };
        if l.total(dev).cas(t, new, SeqCst).is_ok() {
            l.reserved(me, dev).add(bytes, SeqCst);
            inflight.sub(1, SeqCst);
            return Ok(());
        }
        inflight.sub(1, SeqCst);
    }
}

/// Returns `bytes` on `dev` held by record `me` (clamped to what the record holds). Returns the
/// bytes actually released.
pub fn release<L: Ledger, E: Env>(l: &L, e: &E, me: usize, dev: usize, bytes: u64) -> u64 {
    let inflight = l.inflight(me, dev);
    loop {
        inflight.add(1, SeqCst);
        let t = l.total(dev).get(SeqCst);
        if t & TOTAL_FROZEN != 0 {
            inflight.sub(1, SeqCst);
            if wait_unfrozen(l, e, me, dev).is_err() {
                // Keep the bytes charged (a leak, never an overshoot); a later reclaim repairs.
                return 0;
            }
            continue;
        }
        // Take the bytes out of our record first (saturating: never below zero).
        let rec = l.reserved(me, dev);
        let mut cur = rec.get(SeqCst);
        let take = loop {
            let take = bytes.min(cur);
            match rec.cas(cur, cur - take, SeqCst) {
                Ok(_) => break take,
                Err(now) => cur = now,
            }
        };
        let mut t = t;
        loop {
            if t & TOTAL_FROZEN != 0 {
                // The freezer waits for our inflight and then sums our lowered record.
                break;
            }
            let new = total_bytes(t).saturating_sub(take);
            match l.total(dev).cas(t, new, SeqCst) {
                Ok(_) => break,
                Err(now) => t = now,
            }
        }
        inflight.sub(1, SeqCst);
        return take;
    }
}

/// With `total[dev]` frozen by the caller (`frozen` is the word it stored): waits for in-flight
/// operations of live records, then stores the sum of live records (unfreezing). On a timeout
/// restores the bytes of `frozen` unchanged. Both stores are a CAS from `frozen`: a freezer whose
/// freeze was taken over meanwhile (its record looked dead, e.g. a process reclaiming at exit
/// after marking its own record dead) must not overwrite the total the new owner settled.
fn recompute_frozen<L: Ledger, E: Env>(
    l: &L,
    e: &E,
    dev: usize,
    frozen: u64,
) -> Result<u64, RecomputeError> {
    let orig = total_bytes(frozen);
    for rec in 0..l.records() {
        let (st, _) = rec_unpack(l.state(rec).get(SeqCst));
        if st != REC_LIVE && st != REC_CLAIMING {
            continue;
        }
        let mut w = e.waiter();
        while l.inflight(rec, dev).get(SeqCst) != 0 {
            if w.check_owner() && record_liveness(l, e, rec) == Liveness::Dead {
                break;
            }
            if !w.pause() {
                let _ = l.total(dev).cas(frozen, orig & TOTAL_BYTES_MASK, SeqCst);
                return Err(RecomputeError::GaveUp);
            }
        }
    }
    let mut sum: u64 = 0;
    for rec in 0..l.records() {
        let (st, _) = rec_unpack(l.state(rec).get(SeqCst));
        if st != REC_LIVE || record_liveness(l, e, rec) == Liveness::Dead {
            continue;
        }
        sum = sum.saturating_add(l.reserved(rec, dev).get(SeqCst).min(TOTAL_BYTES_MASK));
    }
    let sum = sum.min(TOTAL_BYTES_MASK);
    match l.total(dev).cas(frozen, sum, SeqCst) {
        Ok(_) => Ok(sum),
        // Taken over: the new owner settles the total from the same records.
        Err(now) => Ok(total_bytes(now)),
    }
}

/// Recomputes `total[dev]` from the live records (freezing it meanwhile). Returns the new total.
pub fn recompute<L: Ledger, E: Env>(
    l: &L,
    e: &E,
    me: usize,
    dev: usize,
) -> Result<u64, RecomputeError> {
    loop {
        let t = l.total(dev).get(SeqCst);
        if t & TOTAL_FROZEN != 0 {
            wait_unfrozen(l, e, me, dev).map_err(|()| RecomputeError::Busy)?;
            continue;
        }
        let frozen = frozen_by(me, t);
        if l.total(dev).cas(t, frozen, SeqCst).is_ok() {
            return recompute_frozen(l, e, dev, frozen);
        }
    }
}

/// Finds records of dead processes, excludes them from every device total and frees them.
/// Returns the number of records freed.
pub fn reclaim<L: Ledger, E: Env>(l: &L, e: &E, me: usize) -> Result<usize, RecomputeError> {
    let mut dead: Vec<(usize, u32)> = Vec::new();
    for rec in 0..l.in_use().min(l.records()) {
        let word = l.state(rec).get(SeqCst);
        let (st, pid) = rec_unpack(word);
        match st {
            // Claim a dead record exactly once (the CAS), then it is ours to free.
            REC_LIVE | REC_CLAIMING
                if rec != me
                    && record_liveness(l, e, rec) == Liveness::Dead
                    && l.state(rec)
                        .cas(word, rec_state(REC_DEAD, pid), SeqCst)
                        .is_ok() =>
            {
                dead.push((rec, pid));
            }
            REC_DEAD => dead.push((rec, pid)),
            _ => {}
        }
    }
    if dead.is_empty() {
        return Ok(0);
    }
    for dev in 0..l.devices() {
        recompute(l, e, me, dev)?;
    }
    let mut freed = 0;
    for (rec, pid) in dead {
        if l.state(rec)
            .cas(rec_state(REC_DEAD, pid), REC_FREE, SeqCst)
            .is_ok()
        {
            freed += 1;
        }
    }
    Ok(freed)
}

/// Bytes the slice holds on `dev` (the total word without its flags).
pub fn used<L: Ledger>(l: &L, dev: usize) -> u64 {
    total_bytes(l.total(dev).get(Acquire))
}
