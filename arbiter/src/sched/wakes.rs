//! How often a slice may wake the device loop for nothing.
//!
//! The loop sleeps on words in the slice's tenant-writable `usage` file (`demand`, `busy`,
//! `pending`). A gate wakes the loop after changing one; a tenant can instead call
//! `FUTEX_WAKE` on it in a loop without changing it, and each call would make the loop
//! re-decide — CPU, and under `SCHED_FIFO` CPU taken from every normal thread of the node.
//! A wake whose word still holds the value the loop slept on is *spurious*. A slice that causes
//! more than [`SPURIOUS_PER_WINDOW`] of them in one [`WINDOW_NS`] has its words left out of the
//! loop's waits until that window ends: its own changes are then seen at the loop's next
//! wake-up for any other reason (its deadline included, which never lies past the window's
//! end), so only that slice's wake-up latency suffers, by at most one window. An honest gate
//! changes its word before every wake: it is spurious only when the word changed back before
//! the loop read it, a few times a second at most.

/// Length of a counting window, ns.
pub const WINDOW_NS: u64 = 100_000_000;

/// Spurious wakes a slice may cause in one window; one more mutes it for the rest of it.
pub const SPURIOUS_PER_WINDOW: u32 = 64;

/// One slice's count of spurious wakes.
#[derive(Debug, Default, Clone)]
pub struct WakeBudget {
    window_start: u64,
    in_window: u32,
    muted_until: u64,
    /// Spurious wakes, ever (status).
    pub spurious_total: u64,
    /// Windows in which the slice was muted, ever (status).
    pub mutes_total: u64,
}

impl WakeBudget {
    /// Counts one spurious wake at `now`.
    pub fn spurious(&mut self, now: u64) {
        self.spurious_total += 1;
        if now.saturating_sub(self.window_start) >= WINDOW_NS {
            self.window_start = now;
            self.in_window = 0;
        }
        self.in_window += 1;
        if self.in_window > SPURIOUS_PER_WINDOW && self.muted_until <= now {
            self.muted_until = self.window_start + WINDOW_NS;
            self.mutes_total += 1;
        }
    }

    /// Until when the slice's words stay out of the loop's waits, if they are out at `now`.
    pub fn muted(&self, now: u64) -> Option<u64> {
        (now < self.muted_until).then_some(self.muted_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_storm_is_muted_until_its_window_ends() {
        let mut b = WakeBudget::default();
        let t0 = 1_000_000_000;
        for k in 0..u64::from(SPURIOUS_PER_WINDOW) {
            b.spurious(t0 + k * 1_000);
            assert_eq!(
                b.muted(t0 + k * 1_000),
                None,
                "within the budget at wake {k}"
            );
        }
        b.spurious(t0 + 70_000);
        assert_eq!(b.muted(t0 + 70_000), Some(t0 + WINDOW_NS));
        assert_eq!(b.muted(t0 + WINDOW_NS - 1), Some(t0 + WINDOW_NS));
        assert_eq!(
            b.muted(t0 + WINDOW_NS),
            None,
            "heard again once the window ends"
        );
        assert_eq!((b.spurious_total, b.mutes_total), (65, 1));
        // More wakes in a muted window count but mute only once.
        b.spurious(t0 + 80_000);
        assert_eq!(b.mutes_total, 1);
        // A new window starts the count afresh.
        b.spurious(t0 + WINDOW_NS + 5);
        assert_eq!(b.muted(t0 + WINDOW_NS + 5), None);
    }

    #[test]
    fn an_honest_rate_is_never_muted() {
        // A spurious wake every 2 ms (far more than an honest gate's races) for 10 s.
        let mut b = WakeBudget::default();
        for k in 0..5_000u64 {
            let now = 1 + k * 2_000_000;
            b.spurious(now);
            assert_eq!(b.muted(now), None, "muted at {k} ms");
        }
        assert_eq!(b.mutes_total, 0);
    }
}
