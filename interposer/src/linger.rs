//! How long a process of the lease holder lingers, once everything it queued has completed,
//! before its gate thread reports it quiet (docs/scheduling.md, "Idle holders").
//!
//! The linger tells a launch–synchronise–launch loop (the host gap between a synchronisation
//! returning and the next launch: tens of µs) from a tenant that went idle (a request loop
//! between requests). Every report of a bursty tenant's idleness waits out the whole linger
//! while the device idles, so the linger adapts to what the process did after its last quiet
//! spells: [`LOOP_LINGER`] while any of them ended within [`LONG_IDLE_NS`] (or too few are
//! known), [`IDLE_LINGER`] once the last [`SPELLS`] all lasted longer. A loop tenant whose
//! first launch after a short linger comes quickly loses one lease early (charged exactly) and
//! is back on the long linger for the next [`SPELLS`] spells.
//!
//! State is two atomics per device entry, shared by the gate thread (which ends a spell by
//! going quiet, or records a short one) and launching threads (whose launch ends a spell); the
//! launch side costs one `Relaxed` load while the process is not quiet.

use gpuslice_region::futex::now_ns;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

/// The linger while the process may be in a launch–synchronise–launch loop.
pub(crate) const LOOP_LINGER: Duration = Duration::from_micros(200);
/// The linger of a process whose last [`SPELLS`] quiet spells all lasted [`LONG_IDLE_NS`] or
/// more: long enough for a second kernel of the same request queued right after a completion.
pub(crate) const IDLE_LINGER: Duration = Duration::from_micros(20);
/// A quiet spell this long or longer was idleness, for which handing the lease on is right
/// (a hand-off costs a few host wake-ups: well under this even on a loaded 2-core host).
pub(crate) const LONG_IDLE_NS: u64 = 2_000_000;
/// Quiet spells remembered.
pub(crate) const SPELLS: u32 = 8;
const HISTORY: u32 = (1 << SPELLS) - 1;

/// One process's recent quiet spells on one device.
pub(crate) struct Linger {
    /// Bits 0..SPELLS: the last spells, newest lowest, 1 = long. Above: how many are known
    /// (saturating at SPELLS).
    spells: AtomicU32,
    /// When the process last went quiet (CLOCK_MONOTONIC ns); 0 while it is not quiet.
    quiet_since: AtomicU64,
}

impl Linger {
    pub(crate) const fn new() -> Self {
        Self {
            spells: AtomicU32::new(0),
            quiet_since: AtomicU64::new(0),
        }
    }

    /// The linger to wait before reporting the process quiet.
    pub(crate) fn current(&self) -> Duration {
        let s = self.spells.load(Relaxed);
        if s >> SPELLS >= SPELLS && s & HISTORY == HISTORY {
            IDLE_LINGER
        } else {
            LOOP_LINGER
        }
    }

    /// A launch began during the linger: the spell was short.
    pub(crate) fn short_spell(&self) {
        self.record(false);
    }

    /// The gate thread is about to report the process quiet, at `now` (ns).
    pub(crate) fn going_quiet(&self, now: u64) {
        self.quiet_since.store(now.max(1), Relaxed);
    }

    /// The report did not happen after all (a launch came in between): no spell began.
    pub(crate) fn stayed_busy(&self) {
        self.quiet_since.store(0, Relaxed);
    }

    /// Called as a counted launch begins: ends a quiet spell, if one is running.
    #[inline(always)]
    pub(crate) fn launch_begins(&self) {
        if self.quiet_since.load(Relaxed) != 0 {
            self.spell_ends(now_ns());
        }
    }

    /// The launch at `now` (ns) ends the current quiet spell, if there is one.
    #[cold]
    pub(crate) fn spell_ends(&self, now: u64) {
        let since = self.quiet_since.swap(0, AcqRel);
        if since != 0 {
            self.record(now.saturating_sub(since) >= LONG_IDLE_NS);
        }
    }

    /// Forgets everything (a forked child).
    pub(crate) fn reset(&self) {
        self.spells.store(0, Relaxed);
        self.quiet_since.store(0, Relaxed);
    }

    fn record(&self, long: bool) {
        // The closure always returns Some: the update cannot fail.
        let _ = self.spells.fetch_update(AcqRel, Relaxed, |s| {
            let known = ((s >> SPELLS) + 1).min(SPELLS);
            let bits = ((s << 1) | u32::from(long)) & HISTORY;
            Some(known << SPELLS | bits)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn spells(l: &Linger, gaps_ns: &[u64]) {
        for (i, &gap) in gaps_ns.iter().enumerate() {
            let t = 1_000 * MS * (i as u64 + 1);
            l.going_quiet(t);
            l.spell_ends(t + gap);
        }
    }

    #[test]
    fn a_process_starts_on_the_loop_linger_until_enough_spells_are_known() {
        let l = Linger::new();
        assert_eq!(l.current(), LOOP_LINGER);
        spells(&l, &[20 * MS; SPELLS as usize - 1]);
        assert_eq!(l.current(), LOOP_LINGER, "seven long spells are not enough");
        spells(&l, &[20 * MS]);
        assert_eq!(l.current(), IDLE_LINGER);
    }

    #[test]
    fn one_short_spell_brings_back_the_loop_linger_for_the_next_eight() {
        let l = Linger::new();
        spells(&l, &[19 * MS; 12]);
        assert_eq!(l.current(), IDLE_LINGER);
        // A launch 300 µs after the report: a loop tenant taken for idle once.
        spells(&l, &[300_000]);
        assert_eq!(l.current(), LOOP_LINGER);
        spells(&l, &[19 * MS; SPELLS as usize - 1]);
        assert_eq!(l.current(), LOOP_LINGER);
        spells(&l, &[19 * MS]);
        assert_eq!(l.current(), IDLE_LINGER);
        // A launch during the linger itself counts as short too.
        l.short_spell();
        assert_eq!(l.current(), LOOP_LINGER);
    }

    #[test]
    fn a_spell_is_long_from_the_threshold_on() {
        let l = Linger::new();
        spells(&l, &[LONG_IDLE_NS; SPELLS as usize]);
        assert_eq!(l.current(), IDLE_LINGER);
        spells(&l, &[LONG_IDLE_NS - 1]);
        assert_eq!(l.current(), LOOP_LINGER);
    }

    #[test]
    fn a_launch_outside_a_quiet_spell_records_nothing() {
        let l = Linger::new();
        spells(&l, &[5 * MS; SPELLS as usize]);
        // Launches while the process is busy, and a report that did not happen.
        l.spell_ends(1);
        l.launch_begins();
        l.going_quiet(7);
        l.stayed_busy();
        l.spell_ends(100 * MS);
        assert_eq!(l.current(), IDLE_LINGER);
        assert_eq!(l.quiet_since.load(Relaxed), 0);
    }

    #[test]
    fn reset_forgets_the_spells() {
        let l = Linger::new();
        spells(&l, &[5 * MS; SPELLS as usize]);
        l.going_quiet(3);
        l.reset();
        assert_eq!(l.current(), LOOP_LINGER);
        assert_eq!(l.quiet_since.load(Relaxed), 0);
    }
}
