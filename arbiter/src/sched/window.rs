//! Achieved-share windows: device time charged to a slice, kept in 100 ms buckets over the last
//! 10 s, so that the share over the last 1 s and 10 s can be read at any moment.

/// Bucket width, ns.
pub const BUCKET_NS: u64 = 100_000_000;
const BUCKETS: usize = 101;

/// A ring of 100 ms buckets of charged ns (10 s of history plus the current bucket).
#[derive(Clone, Debug)]
pub struct ShareWindow {
    epoch: [u64; BUCKETS],
    busy: [u64; BUCKETS],
}

impl Default for ShareWindow {
    fn default() -> Self {
        ShareWindow {
            epoch: [u64::MAX; BUCKETS],
            busy: [0; BUCKETS],
        }
    }
}

impl ShareWindow {
    /// Adds the interval `[start, end)` (ns on the scheduler's clock).
    pub fn add(&mut self, start: u64, end: u64) {
        let start = start.max(end.saturating_sub(BUCKET_NS * BUCKETS as u64));
        let mut e = start / BUCKET_NS;
        while e * BUCKET_NS < end {
            let lo = start.max(e * BUCKET_NS);
            let hi = end.min((e + 1) * BUCKET_NS);
            let i = usize::try_from(e % BUCKETS as u64).unwrap_or(0);
            if self.epoch[i] != e {
                self.epoch[i] = e;
                self.busy[i] = 0;
            }
            self.busy[i] += hi.saturating_sub(lo);
            e += 1;
        }
    }

    /// Charged ns within `[now - span, now]` divided by `span` (the oldest bucket pro rata).
    pub fn share(&self, now: u64, span: u64) -> f64 {
        if span == 0 {
            return 0.0;
        }
        let lo = now.saturating_sub(span);
        let mut total = 0u64;
        let last = now / BUCKET_NS;
        let first = (lo / BUCKET_NS).max(last.saturating_sub(BUCKETS as u64 - 1));
        for e in first..=last {
            let i = usize::try_from(e % BUCKETS as u64).unwrap_or(0);
            if self.epoch[i] != e {
                continue;
            }
            let b_lo = e * BUCKET_NS;
            let b = self.busy[i].min(BUCKET_NS);
            total += if b_lo < lo {
                b * (b_lo + BUCKET_NS).saturating_sub(lo) / BUCKET_NS
            } else {
                b
            };
        }
        (total as f64 / span as f64).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_busy_reads_half() {
        let mut w = ShareWindow::default();
        let s = 20 * BUCKET_NS;
        for k in 0..100u64 {
            // 10 ms busy out of every 20 ms
            w.add(s + k * 20_000_000, s + k * 20_000_000 + 10_000_000);
        }
        let now = s + 2_000_000_000;
        assert!((w.share(now, 1_000_000_000) - 0.5).abs() < 0.01);
        assert!((w.share(now, 2_000_000_000) - 0.5).abs() < 0.01);
        // Old history is forgotten.
        assert!(w.share(now + 20_000_000_000, 1_000_000_000) < 1e-9);
    }
}
