//! Memory bookkeeping in one step: a device's total in use (`D_USED`) and one slot's figure on
//! it (`SD_USED`) always change together, under the device's memory lock and through a journal,
//! so no reader ever sees one without the other, and a process killed between the two stores
//! leaves nothing half done.
//!
//! Before (issue 32, item 6) the two words changed one after the other without a lock: a reaper
//! descheduled between zeroing a dead slot and lowering the total made `mem_used` read one dead
//! process too high (the fork-wave trial under CPU load: 392 MiB over the sum of promises in one
//! sample), and a process SIGKILLed between raising the total and recording the bytes on its
//! slot (or a reaper killed between its two stores) leaked them for good (under two busy loops:
//! 124 MiB above the promises for the rest of a run).
//!
//! A transaction writes the new values of both words into the device's journal and marks it
//! valid, stores them, then clears the mark. Whoever takes the lock next and finds the mark set
//! (its holder died mid-step: the robust lock was stolen) stores the journal's values again:
//! absolute values, so redoing them is exact however far the dead holder got.

use std::sync::atomic::Ordering;

use crate::layout as L;
use crate::node::Node;
use crate::procs::RobustLock;

impl Node {
    /// Takes device `d`'s memory lock as `word` (the caller's own owner word when `None`) and
    /// finishes a transaction its previous holder died in.
    pub(crate) fn mem_lock(&self, d: usize, word: Option<u64>) -> RobustLock<'_> {
        let off = L::dev(d, L::D_MEM_LOCK);
        let g = match word {
            Some(w) => RobustLock::acquire(self.shm.u64(off), w, |o| self.word_owner_alive(o)),
            None => self.lock(off),
        };
        if self
            .shm
            .u64(L::dev(d, L::D_J_VALID))
            .load(Ordering::Acquire)
            != 0
        {
            self.apply_journal(d);
        }
        g
    }

    fn apply_journal(&self, d: usize) {
        let j = |f| self.shm.u64(L::dev(d, f)).load(Ordering::Acquire);
        let (slot, dev_used, slot_used) = (j(L::D_J_SLOT) as usize, j(L::D_J_DEV), j(L::D_J_SLOTV));
        self.shm
            .u64(L::dev(d, L::D_USED))
            .store(dev_used, Ordering::Release);
        if slot < L::MAX_SLOTS {
            self.shm
                .u64(L::sdev(slot, d, L::SD_USED))
                .store(slot_used, Ordering::Release);
        }
        self.shm
            .u64(L::dev(d, L::D_J_VALID))
            .store(0, Ordering::Release);
    }

    /// One step on device `d` and slot `s` under the memory lock (taken as `word`, see
    /// [`Node::mem_lock`]): `step(device total, slot figure)` returns their new values and a
    /// result, or an error that changes nothing.
    pub(crate) fn mem_txn<T, E>(
        &self,
        d: usize,
        s: usize,
        word: Option<u64>,
        step: impl FnOnce(u64, u64) -> Result<(u64, u64, T), E>,
    ) -> Result<T, E> {
        let _g = self.mem_lock(d, word);
        let dev = self.shm.u64(L::dev(d, L::D_USED));
        let slot = self.shm.u64(L::sdev(s, d, L::SD_USED));
        let (new_dev, new_slot, out) =
            step(dev.load(Ordering::Acquire), slot.load(Ordering::Acquire))?;
        let j = |f, v| self.shm.u64(L::dev(d, f)).store(v, Ordering::Release);
        j(L::D_J_SLOT, s as u64);
        j(L::D_J_DEV, new_dev);
        j(L::D_J_SLOTV, new_slot);
        j(L::D_J_VALID, 1);
        dev.store(new_dev, Ordering::Release);
        slot.store(new_slot, Ordering::Release);
        j(L::D_J_VALID, 0);
        Ok(out)
    }
}
