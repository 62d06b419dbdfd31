//! How a host thread waits for the device (`cuEventSynchronize`, `cuStreamSynchronize`,
//! `cuCtxSynchronize`, and a stream worker's wait for another stream's work).
//!
//! The driver's default (`CU_CTX_SCHED_AUTO` with no more contexts than cores, `SPIN`,
//! `YIELD`) waits actively: the synchronising thread is running when the kernel ends and
//! returns within microseconds, so a launch–synchronise loop keeps a real GPU ~99 % busy with
//! 1 ms kernels. Blocking on a condition variable instead puts a scheduler wake-up (tens of µs
//! on a loaded 2-core virtual machine, more with timer slack) between every kernel's end and
//! the next launch: the simulator's synchronous tenants left 8–10 % of the device idle that a
//! real one does not (issue 36).
//!
//! So each stream publishes when its running kernel is expected to end ([`Expect`], fed by the
//! engine), and a waiter in a spinning mode sleeps until shortly before that time and spins the
//! rest: the spin's latency without a core burnt per waiting thread for the whole kernel (the
//! real driver would burn it; that cost is not modelled). `CU_CTX_SCHED_BLOCKING_SYNC`
//! contexts and `CU_EVENT_BLOCKING_SYNC` events block, as on the driver.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use gpuslice_cuda_abi::types::*;
use gpuslice_sim_core::now_ns;
use gpuslice_sim_core::shm::{futex_wait, futex_wake_all};

/// How long before the expected end a spinning waiter is running again: covers a timed
/// sleep's wake-up on a loaded host (timer slack is set to 1 ns by `sim-core`'s waits).
const SPIN_AHEAD_NS: u64 = 30_000;
/// How long past the expected end it keeps spinning for the completion to be reported (the
/// stream worker's own bookkeeping) before it blocks again.
const SPIN_PAST_NS: u64 = 300_000;
/// Longest single block: completions wake waiters, this only bounds a lost wake-up.
const BLOCK_MAX_NS: u64 = 5_000_000;
/// Spins between yields of the processor (other threads of a 2-core host must run).
const SPINS_PER_YIELD: u32 = 64;

/// One stream's word for its waiters: when its running kernel ends, and a futex sequence
/// bumped on every new expectation and every completed item.
#[derive(Default)]
pub(crate) struct Expect {
    /// Expected end of the running kernel (CLOCK_MONOTONIC ns; 0: none yet).
    end: AtomicU64,
    /// Its item number in the stream (the stream's completed count once it has completed).
    item: AtomicU64,
    seq: AtomicU32,
}

impl Expect {
    /// The stream's kernel number `item` is expected to end at `end_ns` (stream worker, from
    /// the engine).
    pub(crate) fn publish(&self, item: u64, end_ns: u64) {
        self.item.store(item, Ordering::Release);
        if self.end.swap(end_ns, Ordering::AcqRel) != end_ns {
            self.bump();
        }
    }

    /// Something the waiters may be waiting for happened (stream worker, after an item).
    pub(crate) fn bump(&self) {
        self.seq.fetch_add(1, Ordering::Release);
        futex_wake_all(&self.seq);
    }

    /// Blocks until `done()`, which comes with the stream's item `target` (its completed
    /// count was `since` when the wait began), spinning from shortly before the expected end
    /// of a kernel between the two. `done` must become true only together with a
    /// [`Expect::bump`] of this stream.
    pub(crate) fn wait(&self, since: u64, target: u64, done: impl Fn() -> bool) {
        let mut spins = 0u32;
        loop {
            let seq = self.seq.load(Ordering::Acquire);
            if done() {
                return;
            }
            let item = self.item.load(Ordering::Acquire);
            let end = self.end.load(Ordering::Acquire);
            let now = now_ns();
            let ahead = item > since && item <= target;
            if ahead && now + SPIN_AHEAD_NS >= end && now <= end + SPIN_PAST_NS {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(SPINS_PER_YIELD) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let block = if ahead && end > now + SPIN_AHEAD_NS {
                end - now - SPIN_AHEAD_NS
            } else {
                BLOCK_MAX_NS
            };
            futex_wait(&self.seq, seq, block.min(BLOCK_MAX_NS));
        }
    }
}

/// Whether a context with `CU_CTX_*` flags `ctx_flags` waits actively (every mode but
/// `BLOCKING_SYNC`; `AUTO` spins when the process has no more contexts than cores, which the
/// simulator assumes).
pub(crate) fn spins(ctx_flags: u32) -> bool {
    ctx_flags & CU_CTX_SCHED_MASK != CU_CTX_SCHED_BLOCKING_SYNC
}
