//! The time-sliced engine (`GPUSLICE_SIM_ENGINE=timeslice`, the default) on the shared state.
//!
//! The schedule itself is [`super::plan`]: contexts with work share the device by preemptive
//! time slices, a context alone runs uninterrupted. This file keeps it in the state file:
//! per device the virtual time `t` up to which the schedule is decided and accounted, the held
//! context and its slice grid; per process slot its pending kernel's ready time and remaining
//! engine time. Everything after `t` is planned afresh from that state whenever someone needs
//! it, so a kernel's end is known exactly once no new contender arrives before it.
//!
//! A submitter records its kernel (ready no earlier than `t`: the decided past is never
//! rewritten), wakes the device's waiters, and waits: it plans (without writing) when its
//! kernel ends, sleeps until then (bounded futex waits, woken by every new arrival, which may
//! push the end later), and once its end has passed it commits the plan up to that end —
//! accounting busy time, switches and other kernels that completed before it. Committing only
//! up to its own end keeps the next kernel of a stream back to back: it arrives a wake-up later
//! with its predecessor's end as ready time, which nothing decided yet. Readers (utilisation,
//! busy time, NVML samples) commit up to now. A dead process's unfinished work vanishes when
//! anyone plans next (its slot's lock byte is gone: `Node::slot_alive`); the part it already
//! ran stays accounted.

use std::sync::atomic::Ordering;

use super::plan::{self, Clock, Params, Sink, Until, Work};
use super::{add_to_buckets, KernelTiming, HISTORY_NS, MAX_KERNEL_NS};
use crate::clock::{now_ns, sleep_until};
use crate::layout as L;
use crate::node::Node;
use crate::shm::{futex_wait, futex_wake_all};

/// Writes what a committed plan reports into the shared accounting.
struct Commit<'a> {
    node: &'a Node,
    d: usize,
}

impl Sink for Commit<'_> {
    fn ran(&mut self, slot: usize, s0: u64, s1: u64) {
        if s1 <= s0 {
            return;
        }
        let (n, d) = (self.node, self.d);
        if let Some(tr) = &n.trace {
            // The slot's tag is `(state << 32) | pid` (its owner's pid).
            let tag = n.shm.u64(L::slot(slot, L::S_TAG)).load(Ordering::Relaxed);
            tr.run((tag & 0xffff_ffff) as u32, d, s0, s1);
        }
        add_to_buckets(n, L::dev(d, L::D_BUCKETS), s0, s1);
        add_to_buckets(n, L::sdev(slot, d, L::SD_BUCKETS), s0, s1);
        self.bulk(slot, s1 - s0);
    }

    fn bulk(&mut self, slot: usize, ns: u64) {
        let (n, d) = (self.node, self.d);
        n.shm
            .u64(L::dev(d, L::D_BUSY))
            .fetch_add(ns, Ordering::Relaxed);
        n.shm
            .u64(L::sdev(slot, d, L::SD_BUSY))
            .fetch_add(ns, Ordering::Relaxed);
    }

    fn done(&mut self, slot: usize, start: u64, end: u64) {
        let (n, d) = (self.node, self.d);
        let sd = |f| n.shm.u64(L::sdev(slot, d, f));
        sd(L::SD_GRANT_START).store(start, Ordering::Relaxed);
        sd(L::SD_GRANT_END).store(end, Ordering::Relaxed);
        sd(L::SD_WANT_READY).store(0, Ordering::Relaxed);
        sd(L::SD_KERNELS).fetch_add(1, Ordering::Relaxed);
        n.shm
            .u64(L::dev(d, L::D_KERNELS))
            .fetch_add(1, Ordering::Relaxed);
        sd(L::SD_GRANT_SEQ).fetch_add(1, Ordering::Release);
    }

    fn switched(&mut self, k: u64) {
        self.node
            .shm
            .u64(L::dev(self.d, L::D_SWITCHES))
            .fetch_add(k, Ordering::Relaxed);
    }
}

/// Ignores what a plan reports (a look ahead).
struct Dry;

impl Sink for Dry {
    fn ran(&mut self, _: usize, _: u64, _: u64) {}
    fn bulk(&mut self, _: usize, _: u64) {}
    fn done(&mut self, _: usize, _: u64, _: u64) {}
    fn switched(&mut self, _: u64) {}
}

impl Node {
    fn slice_params(&self) -> Params {
        Params {
            slice_ns: self.cfg.timeslice_ns.max(1),
            switch_ns: self.cfg.ctx_switch_ns,
            keep_ns: HISTORY_NS,
        }
    }

    /// The decided state of `d` and its pending kernels. Engine lock held.
    fn slice_load(&self, d: usize) -> (Clock, Vec<Work>) {
        let dv = |f| self.shm.u64(L::dev(d, f)).load(Ordering::Acquire);
        let cur = dv(L::D_LAST_SLOT) as usize;
        let clock = Clock {
            t: dv(L::D_TS_T),
            cur: if cur > L::MAX_SLOTS { 0 } else { cur },
            slice_start: dv(L::D_TS_SLICE_START),
            run_from: dv(L::D_TS_RUN_FROM),
        };
        let work = (0..self.slot_hwm())
            .filter_map(|s| {
                let tag = self.shm.u64(L::slot(s, L::S_TAG)).load(Ordering::Acquire);
                let sd = |f| self.shm.u64(L::sdev(s, d, f)).load(Ordering::Acquire);
                let ready = sd(L::SD_WANT_READY);
                (tag >> 32 == L::SLOT_LIVE && ready != 0).then(|| Work {
                    slot: s,
                    ready,
                    rem: sd(L::SD_REM).min(MAX_KERNEL_NS),
                    started: sd(L::SD_STARTED),
                })
            })
            .collect();
        (clock, work)
    }

    /// Plans `d` until `until`; with `commit`, accounts it and stores the new state. Returns
    /// the end of the kernel `Until::Done` names. Engine lock held.
    fn slice_plan(&self, d: usize, until: Until, commit: bool) -> Option<u64> {
        let (mut c, mut work) = self.slice_load(d);
        let p = self.slice_params();
        if !commit {
            return plan::advance(&mut c, &mut work, &p, until, &mut Dry);
        }
        let end = plan::advance(&mut c, &mut work, &p, until, &mut Commit { node: self, d });
        for w in &work {
            let sd = |f| self.shm.u64(L::sdev(w.slot, d, f));
            sd(L::SD_REM).store(w.rem, Ordering::Relaxed);
            sd(L::SD_STARTED).store(w.started, Ordering::Relaxed);
        }
        let dv = |f| self.shm.u64(L::dev(d, f));
        dv(L::D_LAST_SLOT).store(c.cur as u64, Ordering::Relaxed);
        dv(L::D_TS_SLICE_START).store(c.slice_start, Ordering::Relaxed);
        dv(L::D_TS_RUN_FROM).store(c.run_from, Ordering::Relaxed);
        dv(L::D_TS_T).store(c.t, Ordering::Release);
        end
    }

    /// Drops the pending work of dead processes other than slot `me`; returns whether any was
    /// dropped (waiters must then re-plan). Engine lock held.
    fn slice_drop_dead(&self, d: usize, me: Option<usize>) -> bool {
        let mut dropped = false;
        for s in 0..self.slot_hwm() {
            let want = self.shm.u64(L::sdev(s, d, L::SD_WANT_READY));
            if Some(s) != me && want.load(Ordering::Acquire) != 0 && !self.slot_alive(s) {
                want.store(0, Ordering::Relaxed);
                dropped = true;
            }
        }
        if dropped {
            self.shm
                .u32(L::dev(d, L::D_WAKE))
                .fetch_add(1, Ordering::Release);
        }
        dropped
    }

    /// Accounts `d` up to `now` (a reader's view). Engine lock held.
    pub(super) fn timeslice_settle(&self, d: usize, now: u64) {
        self.slice_plan(d, Until::Time(now), true);
        if self.slice_drop_dead(d, None) {
            futex_wake_all(self.shm.u32(L::dev(d, L::D_WAKE)));
        }
    }

    /// Records slot `s`'s kernel as pending on `d`, ready at `ready` or when the decided past
    /// ends, whichever is later. Engine lock held.
    fn slice_offer(&self, d: usize, s: usize, dur: u64, ready: u64) {
        let t = self.shm.u64(L::dev(d, L::D_TS_T)).load(Ordering::Acquire);
        let sd = |f| self.shm.u64(L::sdev(s, d, f));
        sd(L::SD_WANT_DUR).store(dur, Ordering::Relaxed);
        sd(L::SD_REM).store(dur, Ordering::Relaxed);
        sd(L::SD_STARTED).store(0, Ordering::Relaxed);
        sd(L::SD_WANT_READY).store(ready.max(t).max(1), Ordering::Release);
        self.shm
            .u32(L::dev(d, L::D_WAKE))
            .fetch_add(1, Ordering::Release);
    }

    /// Runs the kernel of slot `s` on device `d` (the caller is its process's only submitter
    /// on `d`); blocks until it has run.
    pub(super) fn timeslice_execute(
        &self,
        d: usize,
        s: usize,
        dur: u64,
        ready: u64,
        on_end: &dyn Fn(u64),
    ) -> KernelTiming {
        let seq = self.shm.u64(L::sdev(s, d, L::SD_GRANT_SEQ));
        let wake = self.shm.u32(L::dev(d, L::D_WAKE));
        let seq0 = {
            let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
            self.slice_drop_dead(d, Some(s));
            self.slice_offer(d, s, dur, ready);
            seq.load(Ordering::Acquire)
        };
        futex_wake_all(wake);
        while seq.load(Ordering::Acquire) == seq0 {
            let w = wake.load(Ordering::Acquire);
            let (end, dropped) = {
                let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
                if seq.load(Ordering::Acquire) != seq0 {
                    break;
                }
                let dropped = self.slice_drop_dead(d, Some(s));
                let want = self.shm.u64(L::sdev(s, d, L::SD_WANT_READY));
                if want.load(Ordering::Acquire) == 0 {
                    // Our request vanished (wrongly reaped?): offer it again.
                    self.slice_offer(d, s, dur, ready);
                }
                let now = now_ns();
                // `None`: our slot is not live-tagged (overwritten?): retry in a while.
                let end = self
                    .slice_plan(d, Until::Done(s), false)
                    .unwrap_or(now + 1_000_000);
                if end <= now {
                    self.slice_plan(d, Until::Done(s), true);
                }
                (end, dropped)
            };
            if dropped {
                futex_wake_all(wake);
            }
            if seq.load(Ordering::Acquire) != seq0 {
                break;
            }
            on_end(end);
            let now = now_ns();
            if end > now + 200_000 {
                // Woken by every arrival (which may move our end); bounded all the same.
                futex_wait(wake, w, (end - now - 150_000).min(10_000_000));
            } else {
                sleep_until(end);
            }
        }
        let sd = |f| self.shm.u64(L::sdev(s, d, f)).load(Ordering::Acquire);
        let (start, end) = (sd(L::SD_GRANT_START), sd(L::SD_GRANT_END));
        on_end(end);
        sleep_until(end);
        KernelTiming {
            start_ns: start,
            end_ns: end,
        }
    }
}
