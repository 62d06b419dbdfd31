//! How often one slice may wake the device loop.
//!
//! The loop sleeps on words in the slice's tenant-writable `usage` file (`demand`, the holder's
//! `busy`, a draining slice's `pending`). A gate wakes the loop after changing one; a tenant
//! can instead call `FUTEX_WAKE` on it in a loop, changing it or not, and each call would make
//! the loop wake and re-decide — CPU, and under `SCHED_FIFO` CPU taken from every normal thread
//! of the node. `futex_waitv` says which word ended the wait, so every wake is counted against
//! the slice whose word it was. A slice that wakes the loop more than [`WAKES_PER_WINDOW`]
//! times in one [`WINDOW_NS`] has its words left out of the loop's waits until that window
//! ends. What it changed meanwhile is seen at the loop's next wake-up for any other reason: a
//! draining slice's report within the loop's 2 ms drain poll, an idle holder at the next
//! activity check, a waiting slice's demand at the latest when the window ends (the loop's
//! deadline never lies past it). So only that slice waits longer, by at most one window.
//! Honest gates wake the loop a few times per lease and process: see
//! `docs/scheduling.md`, "Hostile usage words", for the rates measured.

/// Length of a counting window, ns.
pub const WINDOW_NS: u64 = 100_000_000;

/// Wakes a slice may cause in one window; one more mutes it for the rest of it.
pub const WAKES_PER_WINDOW: u32 = 256;

/// One slice's count of the loop's wake-ups by its words.
#[derive(Debug, Default, Clone)]
pub struct WakeBudget {
    window_start: u64,
    in_window: u32,
    muted_until: u64,
    /// Wakes, ever (status).
    pub total: u64,
    /// Most wakes in one window, ever (status: how close an honest slice comes).
    pub peak: u32,
    /// Windows in which the slice was muted, ever (status).
    pub mutes_total: u64,
}

impl WakeBudget {
    /// Counts one wake of the loop by the slice's words at `now`.
    pub fn woke(&mut self, now: u64) {
        self.total += 1;
        if now.saturating_sub(self.window_start) >= WINDOW_NS {
            self.window_start = now;
            self.in_window = 0;
        }
        self.in_window += 1;
        self.peak = self.peak.max(self.in_window);
        if self.in_window > WAKES_PER_WINDOW && self.muted_until <= now {
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
        for k in 0..u64::from(WAKES_PER_WINDOW) {
            b.woke(t0 + k * 100);
            assert_eq!(b.muted(t0 + k * 100), None, "within the budget at wake {k}");
        }
        b.woke(t0 + 70_000);
        assert_eq!(b.muted(t0 + 70_000), Some(t0 + WINDOW_NS));
        assert_eq!(b.muted(t0 + WINDOW_NS - 1), Some(t0 + WINDOW_NS));
        assert_eq!(
            b.muted(t0 + WINDOW_NS),
            None,
            "heard again once the window ends"
        );
        assert_eq!(b.total, u64::from(WAKES_PER_WINDOW) + 1);
        assert_eq!((b.peak, b.mutes_total), (WAKES_PER_WINDOW + 1, 1));
        // More wakes in a muted window count but mute only once.
        b.woke(t0 + 80_000);
        assert_eq!(b.mutes_total, 1);
        // A new window starts the count afresh.
        b.woke(t0 + WINDOW_NS + 5);
        assert_eq!(b.muted(t0 + WINDOW_NS + 5), None);
        assert_eq!(b.peak, WAKES_PER_WINDOW + 2);
    }

    #[test]
    fn a_steady_rate_within_the_budget_is_never_muted() {
        // Two wakes every millisecond for 10 s: 200 a window.
        let mut b = WakeBudget::default();
        for k in 0..20_000u64 {
            let now = 1 + k * 500_000;
            b.woke(now);
            assert_eq!(b.muted(now), None, "muted at {k}");
        }
        assert_eq!((b.mutes_total, b.peak), (0, 200));
    }
}
