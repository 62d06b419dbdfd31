//! The execution engine: one per device, shared by every process of the machine.
//!
//! Two models of how a device is shared between processes (`GPUSLICE_SIM_ENGINE`), behind the
//! same interface: [`kernel`], non-preemptive, one whole kernel at a time with round robin
//! between processes at kernel boundaries; and [`timeslice`] (the default), preemptive time
//! slices between the contexts that have work, as a data-centre GPU without MPS does. Both keep
//! an exact timeline in the shared state: when a kernel runs follows from the submitted work
//! alone, never from how late a host thread wakes, so busy time never exceeds elapsed time. The
//! submitting thread blocks until its kernel's end. Threads of one process queue FIFO
//! in-process, so each process offers at most one kernel per device at a time.
//!
//! Busy time is accounted per device and per process and folded into 10 ms history buckets,
//! for utilisation over the last second.

use std::sync::atomic::Ordering;

use crate::clock::{now_ns, sleep_until};
use crate::config::EngineMode;
use crate::layout as L;
use crate::node::Node;
use crate::procs::self_identity;

mod kernel;
mod plan;
mod samples;
mod timeslice;

pub use samples::SAMPLE_PERIOD_NS;

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
        self.engine_execute_observed(dev, duration_ns, ready_ns, &|_| {})
    }

    /// Like [`Node::engine_execute_ready`], telling `on_end` when the kernel is expected to end
    /// each time the engine learns it (at its grant; on the time-sliced engine also each time a
    /// new contender moves it), before sleeping towards it: a host thread that waits for the
    /// kernel can then be running when it ends, as the driver's spin wait is (`sim-cuda`'s
    /// `wait`).
    pub fn engine_execute_observed(
        &self,
        dev: u32,
        duration_ns: u64,
        ready_ns: u64,
        on_end: &dyn Fn(u64),
    ) -> KernelTiming {
        let now = now_ns();
        let dur = duration_ns.min(MAX_KERNEL_NS);
        let (Ok(d), Ok(s)) = (self.check_dev(dev), self.my_slot()) else {
            // No device or no slot: nothing to contend for; still take the time.
            on_end(now + dur);
            sleep_until(now + dur);
            return KernelTiming {
                start_ns: now,
                end_ns: now + dur,
            };
        };
        let ready = ready_ns.clamp(1, now);
        self.queue_enter(d);
        let t = match self.cfg.engine {
            EngineMode::Kernel => self.kernel_execute(d, s, dur, ready, on_end),
            EngineMode::Timeslice => self.timeslice_execute(d, s, dur, ready, on_end),
        };
        self.queue_leave(d);
        if let Some(tr) = &self.trace {
            let pid = crate::procs::self_identity().0;
            if self.cfg.engine == EngineMode::Kernel {
                tr.run(pid, d, t.start_ns, t.end_ns);
            }
            tr.kernel(pid, d, ready, t.start_ns, t.end_ns);
        }
        t
    }

    /// Brings the accounting of `d` up to now (engine lock held) and returns the busy interval
    /// `(slot, start, end)` not yet in the buckets, if any: the current grant of the kernel
    /// engine (its counters include its future part); the time-sliced engine accounts
    /// everything up to now and has none.
    fn settle(&self, d: usize, now: u64) -> Option<(usize, u64, u64)> {
        match self.cfg.engine {
            EngineMode::Kernel => self.uncommitted(d),
            EngineMode::Timeslice => {
                self.timeslice_settle(d, now);
                None
            }
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

    /// Percent of the last second the engine of `dev` spent running kernels.
    pub fn utilization(&self, dev: u32) -> u32 {
        let Ok(d) = self.check_dev(dev) else { return 0 };
        let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
        let now = now_ns();
        let lo = now.saturating_sub(WINDOW_NS);
        let cur = self.settle(d, now);
        let mut busy = sum_buckets(self, L::dev(d, L::D_BUCKETS), lo, now);
        if let Some((_, s0, s1)) = cur {
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
        let cur = self.settle(d, now);
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
        self.settle(d, now);
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
            .settle(d, now)
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
