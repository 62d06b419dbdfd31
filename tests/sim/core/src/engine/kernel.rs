//! The non-preemptive engine (`GPUSLICE_SIM_ENGINE=kernel`): one whole kernel at a time.
//!
//! Each process offers at most one kernel per device at a time; the engine picks round-robin
//! among the processes with a kernel waiting, charging `ctx_switch_ns` whenever it changes
//! process. A granted kernel runs from `max(ready, previous end) + switch` for exactly its
//! duration, independent of how late the host threads wake. Whoever finds the engine free (the
//! finishing thread or any waiter, whose waits are bounded by the current kernel's end)
//! dispatches the next kernel, so a SIGKILLed participant cannot wedge the engine: its running
//! kernel completes on time and its waiting work is dropped.
//!
//! Busy time is credited per device and per process at grant time (reads subtract the part of
//! the current kernel that lies in the future) and folded into the history buckets once a
//! kernel is over.

use std::sync::atomic::Ordering;

use super::{add_to_buckets, KernelTiming, MAX_KERNEL_NS};
use crate::clock::{now_ns, sleep_until};
use crate::layout as L;
use crate::node::Node;
use crate::shm::{futex_wait, futex_wake_all};

impl Node {
    /// Records slot `s`'s kernel as waiting on `d`. Engine lock held.
    fn kernel_offer(&self, d: usize, s: usize, dur: u64, ready: u64) {
        self.shm
            .u64(L::sdev(s, d, L::SD_WANT_DUR))
            .store(dur, Ordering::Relaxed);
        self.shm
            .u64(L::sdev(s, d, L::SD_WANT_READY))
            .store(ready, Ordering::Release);
    }

    /// Runs the kernel of slot `s` on device `d` (the caller is its process's only submitter
    /// on `d`); blocks until it has run.
    pub(super) fn kernel_execute(
        &self,
        d: usize,
        s: usize,
        dur: u64,
        ready: u64,
        on_end: &dyn Fn(u64),
    ) -> KernelTiming {
        let seq = self.shm.u64(L::sdev(s, d, L::SD_GRANT_SEQ));
        let seq0;
        let dispatched;
        {
            let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
            seq0 = seq.load(Ordering::Acquire);
            self.kernel_offer(d, s, dur, ready);
            dispatched = self.dispatch(d);
        }
        let wake = self.shm.u32(L::dev(d, L::D_WAKE));
        if dispatched {
            futex_wake_all(wake);
        }
        // Wait for our grant; every wait is bounded by the running kernel's end.
        loop {
            if seq.load(Ordering::Acquire) != seq0 {
                break;
            }
            let w = wake.load(Ordering::Acquire);
            if seq.load(Ordering::Acquire) != seq0 {
                break;
            }
            let now = now_ns();
            let free_at = self
                .shm
                .u64(L::dev(d, L::D_FREE_AT))
                .load(Ordering::Acquire);
            if now >= free_at {
                let did = {
                    let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
                    if self
                        .shm
                        .u64(L::sdev(s, d, L::SD_WANT_READY))
                        .load(Ordering::Acquire)
                        == 0
                        && seq.load(Ordering::Acquire) == seq0
                    {
                        // Our request vanished (wrongly reaped?): offer it again.
                        self.kernel_offer(d, s, dur, ready);
                    }
                    self.dispatch(d)
                };
                if did {
                    futex_wake_all(wake);
                }
                continue;
            }
            futex_wait(wake, w, (free_at - now + 30_000).min(10_000_000));
        }
        let start = self
            .shm
            .u64(L::sdev(s, d, L::SD_GRANT_START))
            .load(Ordering::Acquire);
        let end = self
            .shm
            .u64(L::sdev(s, d, L::SD_GRANT_END))
            .load(Ordering::Acquire);
        on_end(end);
        sleep_until(end);
        let did = {
            let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
            self.dispatch(d)
        };
        if did {
            futex_wake_all(wake);
        }
        KernelTiming {
            start_ns: start,
            end_ns: end,
        }
    }

    /// Folds the latest grant into the history buckets once it is over. Engine lock held.
    fn commit_current(&self, d: usize, now: u64) {
        let committed = self.shm.u64(L::dev(d, L::D_CUR_COMMITTED));
        let cur = self
            .shm
            .u64(L::dev(d, L::D_CUR_SLOT))
            .load(Ordering::Acquire) as usize;
        if committed.load(Ordering::Acquire) != 0 || cur == 0 || cur > L::MAX_SLOTS {
            return;
        }
        let start = self
            .shm
            .u64(L::dev(d, L::D_CUR_START))
            .load(Ordering::Relaxed);
        let end = self
            .shm
            .u64(L::dev(d, L::D_FREE_AT))
            .load(Ordering::Relaxed);
        if end > now || start > end {
            return;
        }
        add_to_buckets(self, L::dev(d, L::D_BUCKETS), start, end);
        let s = cur - 1;
        let id = self.shm.u64(L::dev(d, L::D_CUR_ID)).load(Ordering::Relaxed);
        if self.shm.u64(L::slot(s, L::S_TAG)).load(Ordering::Acquire) >> 32 == L::SLOT_LIVE
            && self.shm.u64(L::slot(s, L::S_START)).load(Ordering::Relaxed) == id
        {
            add_to_buckets(self, L::sdev(s, d, L::SD_BUCKETS), start, end);
        }
        committed.store(1, Ordering::Release);
    }

    /// If the engine is free, grants it to the next waiting process in round-robin order.
    /// Engine lock held. Returns whether a kernel was granted.
    fn dispatch(&self, d: usize) -> bool {
        let now = now_ns();
        let free_at = self
            .shm
            .u64(L::dev(d, L::D_FREE_AT))
            .load(Ordering::Acquire);
        if now < free_at {
            return false;
        }
        self.commit_current(d, now);
        let hwm = self.slot_hwm();
        if hwm == 0 {
            return false;
        }
        let last = self
            .shm
            .u64(L::dev(d, L::D_LAST_SLOT))
            .load(Ordering::Relaxed) as usize;
        let last = if last > L::MAX_SLOTS { 0 } else { last };
        // `last` is slot+1, so scanning from index `last` starts just after the last runner.
        for i in 0..hwm {
            let s = (last + i) % hwm;
            let tag = self.shm.u64(L::slot(s, L::S_TAG)).load(Ordering::Acquire);
            if tag >> 32 != L::SLOT_LIVE {
                continue;
            }
            let want = self.shm.u64(L::sdev(s, d, L::SD_WANT_READY));
            let ready = want.load(Ordering::Acquire);
            if ready == 0 {
                continue;
            }
            if s + 1 != last && !self.slot_alive(s) {
                // a dead process's waiting work vanishes
                want.store(0, Ordering::Relaxed);
                continue;
            }
            let dur = self
                .shm
                .u64(L::sdev(s, d, L::SD_WANT_DUR))
                .load(Ordering::Relaxed)
                .min(MAX_KERNEL_NS);
            let switch = if last != 0 && last != s + 1 {
                self.shm
                    .u64(L::dev(d, L::D_SWITCHES))
                    .fetch_add(1, Ordering::Relaxed);
                self.cfg.ctx_switch_ns
            } else {
                0
            };
            let start = ready.max(free_at) + switch;
            let end = start + dur;
            let sd = |f| self.shm.u64(L::sdev(s, d, f));
            sd(L::SD_GRANT_START).store(start, Ordering::Relaxed);
            sd(L::SD_GRANT_END).store(end, Ordering::Relaxed);
            sd(L::SD_BUSY).fetch_add(dur, Ordering::Relaxed);
            sd(L::SD_KERNELS).fetch_add(1, Ordering::Relaxed);
            want.store(0, Ordering::Relaxed);
            let dv = |f| self.shm.u64(L::dev(d, f));
            dv(L::D_CUR_COMMITTED).store(0, Ordering::Relaxed);
            dv(L::D_CUR_SLOT).store(s as u64 + 1, Ordering::Relaxed);
            dv(L::D_CUR_START).store(start, Ordering::Relaxed);
            dv(L::D_CUR_ID).store(
                self.shm.u64(L::slot(s, L::S_START)).load(Ordering::Relaxed),
                Ordering::Relaxed,
            );
            dv(L::D_LAST_SLOT).store(s as u64 + 1, Ordering::Relaxed);
            dv(L::D_BUSY).fetch_add(dur, Ordering::Relaxed);
            dv(L::D_KERNELS).fetch_add(1, Ordering::Relaxed);
            dv(L::D_FREE_AT).store(end, Ordering::Release);
            sd(L::SD_GRANT_SEQ).fetch_add(1, Ordering::Release);
            self.shm
                .u32(L::dev(d, L::D_WAKE))
                .fetch_add(1, Ordering::Release);
            return true;
        }
        false
    }

    /// The latest grant on `d` as `(slot, start, end)`, if it is not yet folded into the
    /// buckets. Engine lock held.
    pub(super) fn uncommitted(&self, d: usize) -> Option<(usize, u64, u64)> {
        let dv = |f| self.shm.u64(L::dev(d, f)).load(Ordering::Acquire);
        let cur = dv(L::D_CUR_SLOT) as usize;
        (dv(L::D_CUR_COMMITTED) == 0 && cur > 0 && cur <= L::MAX_SLOTS)
            .then(|| (cur - 1, dv(L::D_CUR_START), dv(L::D_FREE_AT)))
    }
}
