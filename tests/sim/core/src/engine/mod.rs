//! The execution engine: one per device, shared by every process of the machine.
//!
//! Non-preemptive, one kernel at a time. Each process offers at most one kernel per device at a
//! time (threads of a process queue FIFO in-process); the engine picks round-robin among the
//! processes with a kernel waiting, charging `ctx_switch_ns` whenever it changes process.
//! The engine keeps an exact timeline: a granted kernel runs from
//! `max(ready, previous end) + switch` for exactly its duration, independent of how late the
//! host threads wake, so busy time never exceeds elapsed time. The thread that submitted the
//! kernel sleeps until the kernel's end. Whoever finds the engine free (the finishing thread or
//! any waiter, whose waits are bounded by the current kernel's end) dispatches the next kernel,
//! so a SIGKILLed participant cannot wedge the engine: its running kernel completes on time and
//! its waiting work is dropped.
//!
//! Busy time is credited per device and per process at grant time (reads subtract the part of
//! the current kernel that lies in the future) and folded into 10 ms history buckets once a
//! kernel is over, for utilisation over the last second.

use std::sync::atomic::Ordering;

use crate::clock::{now_ns, sleep_until};
use crate::layout as L;
use crate::node::Node;
use crate::procs::self_identity;
use crate::shm::{futex_wait, futex_wake_all};

/// When a simulated kernel ran on the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelTiming {
    /// CLOCK_MONOTONIC ns at which the kernel started.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns at which it finished.
    pub end_ns: u64,
}

/// One process's share of a device over a recent window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSample {
    /// Pid in the reader's pid namespace (processes the reader cannot see are not listed).
    pub pid: u32,
    /// CLOCK_MONOTONIC ns of the sample (end of the window).
    pub timestamp_ns: u64,
    /// Percent of the window the engine ran this process's kernels.
    pub sm_util: u32,
}

/// Longest kernel the engine accepts (larger durations are clamped): one hour.
const MAX_KERNEL_NS: u64 = 3_600_000_000_000;
/// Utilisation window.
const WINDOW_NS: u64 = 1_000_000_000;
/// History kept in buckets.
const HISTORY_NS: u64 = L::BUCKETS as u64 * L::BUCKET_NS;

/// Adds the interval `[start, end)` to a bucket ring at byte offset `base` (see layout).
fn add_to_buckets(node: &Node, base: usize, start: u64, end: u64) {
    let start = start.max(end.saturating_sub(HISTORY_NS));
    if end <= start {
        return;
    }
    let mut e = start / L::BUCKET_NS;
    while e * L::BUCKET_NS < end {
        let lo = start.max(e * L::BUCKET_NS);
        let hi = end.min((e + 1) * L::BUCKET_NS);
        let idx = (e % L::BUCKETS as u64) as usize;
        let epoch = node.shm.u64(base + idx * 16);
        let busy = node.shm.u64(base + idx * 16 + 8);
        if epoch.load(Ordering::Relaxed) != e + 1 {
            epoch.store(e + 1, Ordering::Relaxed);
            busy.store(0, Ordering::Relaxed);
        }
        busy.fetch_add(hi - lo, Ordering::Relaxed);
        e += 1;
    }
}

/// Busy ns recorded in a bucket ring within `[lo, now]` (the oldest bucket pro rata).
fn sum_buckets(node: &Node, base: usize, lo: u64, now: u64) -> u64 {
    let mut total = 0;
    let first = lo / L::BUCKET_NS;
    let last = now / L::BUCKET_NS;
    let first = first.max(last.saturating_sub(L::BUCKETS as u64 - 1));
    for e in first..=last {
        let idx = (e % L::BUCKETS as u64) as usize;
        if node.shm.u64(base + idx * 16).load(Ordering::Relaxed) != e + 1 {
            continue;
        }
        let busy = node
            .shm
            .u64(base + idx * 16 + 8)
            .load(Ordering::Relaxed)
            .min(L::BUCKET_NS);
        let b_lo = e * L::BUCKET_NS;
        total += if b_lo < lo {
            busy * ((b_lo + L::BUCKET_NS).saturating_sub(lo)) / L::BUCKET_NS
        } else {
            busy
        };
    }
    total
}

fn overlap(a0: u64, a1: u64, b0: u64, b1: u64) -> u64 {
    a1.min(b1).saturating_sub(a0.max(b0))
}

impl Node {
    /// Runs a kernel of `duration_ns` on device `dev`, ready now; blocks until it has run.
    pub fn engine_execute(&self, dev: u32, duration_ns: u64) -> KernelTiming {
        let now = now_ns();
        self.engine_execute_ready(dev, duration_ns, now)
    }

    /// Like [`Node::engine_execute`] for a kernel that became ready at `ready_ns` (e.g. when its
    /// stream predecessor finished, or when it was enqueued): a stream worker that passes the
    /// previous kernel's end gets back-to-back execution, as on hardware, despite its own wake-up
    /// latency. `ready_ns` is clamped to now.
    pub fn engine_execute_ready(&self, dev: u32, duration_ns: u64, ready_ns: u64) -> KernelTiming {
        let now = now_ns();
        let dur = duration_ns.min(MAX_KERNEL_NS);
        let (Ok(d), Ok(s)) = (self.check_dev(dev), self.my_slot()) else {
            // No device or no slot: nothing to contend for; still take the time.
            sleep_until(now + dur);
            return KernelTiming {
                start_ns: now,
                end_ns: now + dur,
            };
        };
        let ready = ready_ns.clamp(1, now);
        self.queue_enter(d);
        let seq = self.shm.u64(L::sdev(s, d, L::SD_GRANT_SEQ));
        let seq0;
        let dispatched;
        {
            let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
            seq0 = seq.load(Ordering::Acquire);
            self.shm
                .u64(L::sdev(s, d, L::SD_WANT_DUR))
                .store(dur, Ordering::Relaxed);
            self.shm
                .u64(L::sdev(s, d, L::SD_WANT_READY))
                .store(ready, Ordering::Release);
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
                        self.shm
                            .u64(L::sdev(s, d, L::SD_WANT_DUR))
                            .store(dur, Ordering::Relaxed);
                        self.shm
                            .u64(L::sdev(s, d, L::SD_WANT_READY))
                            .store(ready, Ordering::Release);
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
        sleep_until(end);
        let did = {
            let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
            self.dispatch(d)
        };
        if did {
            futex_wake_all(wake);
        }
        self.queue_leave(d);
        KernelTiming {
            start_ns: start,
            end_ns: end,
        }
    }

    fn queue_enter(&self, d: usize) {
        let (pid, _) = self_identity();
        let (m, cv) = &self.queues[d];
        let mut q = m.lock().unwrap_or_else(|p| p.into_inner());
        if q.pid != pid {
            // first use, or we are a forked child: the parent's queue is not ours
            q.pid = pid;
            q.next = 0;
            q.serving = 0;
        }
        let ticket = q.next;
        q.next += 1;
        while q.serving != ticket {
            q = cv.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn queue_leave(&self, d: usize) {
        let (m, cv) = &self.queues[d];
        let mut q = m.lock().unwrap_or_else(|p| p.into_inner());
        q.serving += 1;
        cv.notify_all();
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
    fn uncommitted(&self, d: usize) -> Option<(usize, u64, u64)> {
        let dv = |f| self.shm.u64(L::dev(d, f)).load(Ordering::Acquire);
        let cur = dv(L::D_CUR_SLOT) as usize;
        (dv(L::D_CUR_COMMITTED) == 0 && cur > 0 && cur <= L::MAX_SLOTS)
            .then(|| (cur - 1, dv(L::D_CUR_START), dv(L::D_FREE_AT)))
    }

    /// Percent of the last second the engine of `dev` spent running kernels.
    pub fn utilization(&self, dev: u32) -> u32 {
        let Ok(d) = self.check_dev(dev) else { return 0 };
        let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
        let now = now_ns();
        let lo = now.saturating_sub(WINDOW_NS);
        let mut busy = sum_buckets(self, L::dev(d, L::D_BUCKETS), lo, now);
        if let Some((_, s0, s1)) = self.uncommitted(d) {
            busy += overlap(s0, s1, lo, now);
        }
        ((busy * 100 + WINDOW_NS / 2) / WINDOW_NS).min(100) as u32
    }

    /// Per-process engine share of `dev` over `[max(since_ns, now - 1 s), now]`, for every live
    /// process with a context or memory on the device or kernels in that window.
    pub fn process_utilization(&self, dev: u32, since_ns: u64) -> Vec<ProcessSample> {
        let Ok(d) = self.check_dev(dev) else {
            return Vec::new();
        };
        self.reap_dead();
        let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
        let now = now_ns();
        let lo = since_ns.max(now.saturating_sub(WINDOW_NS));
        if lo >= now {
            return Vec::new();
        }
        let cur = self.uncommitted(d);
        let cur_id = self.shm.u64(L::dev(d, L::D_CUR_ID)).load(Ordering::Relaxed);
        let mut out = Vec::new();
        for (s, pid) in self.visible_slots() {
            let mut busy = sum_buckets(self, L::sdev(s, d, L::SD_BUCKETS), lo, now);
            if let Some((cs, s0, s1)) = cur {
                if cs == s && self.shm.u64(L::slot(s, L::S_START)).load(Ordering::Relaxed) == cur_id
                {
                    busy += overlap(s0, s1, lo, now);
                }
            }
            let used = self
                .shm
                .u64(L::sdev(s, d, L::SD_USED))
                .load(Ordering::Relaxed);
            let ctx = self
                .shm
                .u64(L::sdev(s, d, L::SD_CTX))
                .load(Ordering::Relaxed);
            if busy == 0 && used == 0 && ctx == 0 {
                continue;
            }
            let span = now - lo;
            out.push(ProcessSample {
                pid,
                timestamp_ns: now,
                sm_util: ((busy * 100 + span / 2) / span).min(100) as u32,
            });
        }
        out
    }

    /// Cumulative engine time of process `pid` (as the caller's namespace names it) on `dev`
    /// (0 if it has no live slot).
    pub fn process_busy_ns(&self, dev: u32, pid: u32) -> u64 {
        let Ok(d) = self.check_dev(dev) else { return 0 };
        let Some((s, _)) = self.visible_slots().into_iter().find(|&(_, p)| p == pid) else {
            return 0;
        };
        let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
        let now = now_ns();
        let sd = |f| self.shm.u64(L::sdev(s, d, f)).load(Ordering::Acquire);
        let (busy, g0, g1) = (sd(L::SD_BUSY), sd(L::SD_GRANT_START), sd(L::SD_GRANT_END));
        busy.saturating_sub(g1.saturating_sub(now.max(g0)))
    }

    /// Cumulative engine time of all processes on `dev` since the state file was created.
    pub fn device_busy_ns(&self, dev: u32) -> u64 {
        let Ok(d) = self.check_dev(dev) else { return 0 };
        let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
        let now = now_ns();
        let dv = |f| self.shm.u64(L::dev(d, f)).load(Ordering::Acquire);
        let future = self
            .uncommitted(d)
            .map(|(_, s0, s1)| s1.saturating_sub(now.max(s0)))
            .unwrap_or(0);
        let _ = dv(L::D_KERNELS);
        dv(L::D_BUSY).saturating_sub(future)
    }

    /// Number of context switches between processes the engine of `dev` has made.
    pub fn ctx_switches(&self, dev: u32) -> u64 {
        let Ok(d) = self.check_dev(dev) else { return 0 };
        self.shm
            .u64(L::dev(d, L::D_SWITCHES))
            .load(Ordering::Relaxed)
    }
}
