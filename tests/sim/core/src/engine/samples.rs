//! NVML's per-process utilisation as the real driver reports it (measured on an H200, driver
//! 580.159.04, `docs/benchmarks.md` § "NVML process samples"): the driver samples the device
//! every 200 ms and credits **each sample to one process**, the one resident on the engine when
//! the sample was taken, with (about) the whole device's busy percentage over that window. The
//! other processes get no sample for that window. Over many windows the count credited to a
//! process tracks its share; any single window credits it 0 % or nearly all of the device.
//!
//! Here a window is `[k·200 ms, (k+1)·200 ms)` of CLOCK_MONOTONIC, complete once its end has
//! passed; its value is the device's busy time in it (floored percent), and it is credited to
//! the process that ran most in the window's last 10 ms bucket (scanning back bucket by bucket
//! when the device was idle there; ties broken by a hash of the window and slot, the same for
//! every reader). A window in which nothing ran yields no sample. Only windows within the
//! bucket history (1.28 s) can be reported, as the driver's sample buffer is finite too.

use super::{overlap, sum_buckets, ProcessSample};
use crate::clock::now_ns;
use crate::layout as L;
use crate::node::Node;

/// NVML's process sample period on the measured driver.
pub const SAMPLE_PERIOD_NS: u64 = 200_000_000;
const BUCKETS_PER_WINDOW: u64 = SAMPLE_PERIOD_NS / L::BUCKET_NS;

/// A kernel grant not yet folded into the buckets: `(slot, start, end)`.
type Pending = Option<(usize, u64, u64)>;

impl Node {
    /// NVML-style process samples on `dev` for the complete 200 ms windows that ended after
    /// `since_ns` (CLOCK_MONOTONIC), oldest first: one sample per window, credited to one
    /// process (see the module docs). Processes the reader cannot see are left out.
    pub fn process_samples(&self, dev: u32, since_ns: u64) -> Vec<ProcessSample> {
        let Ok(d) = self.check_dev(dev) else {
            return Vec::new();
        };
        self.reap_dead();
        let _g = self.lock(L::dev(d, L::D_ENGINE_LOCK));
        let now = now_ns();
        let cur = self.settle(d, now);
        let visible = self.visible_slots();
        let oldest = now.saturating_sub((L::BUCKETS as u64 - 2) * L::BUCKET_NS);
        let last = now / SAMPLE_PERIOD_NS; // windows < last are complete
        let first = oldest.div_ceil(SAMPLE_PERIOD_NS);
        let mut out = Vec::new();
        for k in first..last {
            let (lo, hi) = (k * SAMPLE_PERIOD_NS, (k + 1) * SAMPLE_PERIOD_NS);
            if hi <= since_ns {
                continue;
            }
            let mut busy = sum_buckets(self, L::dev(d, L::D_BUCKETS), lo, hi - 1);
            if let Some((_, s0, s1)) = cur {
                busy += overlap(s0, s1, lo, hi);
            }
            if busy == 0 {
                continue;
            }
            let Some(slot) = self.resident_at(d, k, &visible, cur) else {
                continue;
            };
            let Some(&(_, pid)) = visible.iter().find(|&&(s, _)| s == slot) else {
                continue;
            };
            out.push(ProcessSample {
                pid,
                timestamp_ns: hi,
                sm_util: (busy.min(SAMPLE_PERIOD_NS) * 100 / SAMPLE_PERIOD_NS) as u32,
            });
        }
        out
    }

    /// The slot resident at the end of window `k`: most busy in the window's last bucket, else
    /// in the bucket before, and so on within the window.
    fn resident_at(&self, d: usize, k: u64, slots: &[(usize, u32)], cur: Pending) -> Option<usize> {
        let first = k * BUCKETS_PER_WINDOW;
        for e in (first..first + BUCKETS_PER_WINDOW).rev() {
            let (lo, hi) = (e * L::BUCKET_NS, (e + 1) * L::BUCKET_NS);
            let best = slots
                .iter()
                .map(|&(s, _)| {
                    let mut b = sum_buckets(self, L::sdev(s, d, L::SD_BUCKETS), lo, hi - 1);
                    if let Some((cs, s0, s1)) = cur {
                        if cs == s {
                            b += overlap(s0, s1, lo, hi);
                        }
                    }
                    (b, tie_break(k, s), s)
                })
                .filter(|&(b, _, _)| b > 0)
                .max();
            if let Some((_, _, s)) = best {
                return Some(s);
            }
        }
        None
    }
}

/// A deterministic order among slots equally busy in a bucket (every reader agrees).
fn tie_break(k: u64, s: usize) -> u64 {
    let mut x = k ^ ((s as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_whole_buckets() {
        assert_eq!(SAMPLE_PERIOD_NS % L::BUCKET_NS, 0);
        assert_eq!(BUCKETS_PER_WINDOW, 20);
    }

    #[test]
    fn ties_are_broken_differently_from_window_to_window() {
        let winners: std::collections::HashSet<bool> =
            (0..64).map(|k| tie_break(k, 1) > tie_break(k, 2)).collect();
        assert_eq!(winners.len(), 2);
    }
}
