//! Anticipation: a free device is held, for at most a quantum, for the slice whose lease just
//! ended when the only other slice waiting is one whose launches are long and that is ahead of
//! it in virtual time (as disk schedulers idle for a queue with a short think time: CFQ's
//! `slice_idle`, BFQ).
//!
//! A saturating slice launching 1 ms kernels is normally back at the gate before its drain is
//! reported; but when the host wakes its thread late, it is not, and granting the neighbour at
//! that moment gives the neighbour a whole 100 ms graph or 50 ms kernel out of turn, a tenth of
//! a second of the late slice's share (1 s windows measured 40/60 instead of 30/70). Holding the
//! device for it costs at most a quantum of idle device, and only:
//! * when the slice that would be granted instead is ahead in virtual time by at least a
//!   quantum of the late slice's service, and its drains (median of the last few) are at least
//!   two quanta, so what the hold avoids is far longer than what it costs;
//! * for a slice that came back within the hold last time: one that did not (a bursty tenant
//!   going idle) is held for again only every [`RETRY_EVERY`]th lease end.
//!
//! The slice held for is charged the held time (virtual time and ceiling, like a lease it
//! holds): a tenant that comes back just before each hold ends cannot idle the device at its
//! neighbours' expense, it pays for every hold. Priority slices are never held for, nor held
//! against (a high-priority slice is let in at once).

use super::{Decision, Policy};

/// A slice that did not come back within a hold is held for again only at every this many
/// lease ends (so one whose kernels came back quick again gets holds back).
pub const RETRY_EVERY: u32 = 16;

/// A hold in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hold {
    /// The slice held for.
    pub idx: usize,
    /// Its lease's end (its drain reported): charged from here.
    pub from: u64,
    /// The hold ends here at the latest.
    pub until: u64,
}

impl Policy {
    /// Whether the device is held for another slice rather than granted to `p` (the pick) at
    /// `now`: the decision to return instead of the grant. Settles a hold that ended: the
    /// slice held for is charged, and a hold it did not come back in counts against it.
    pub(super) fn anticipate(&mut self, p: Option<usize>, now: u64) -> Option<Decision> {
        if let Some(h) = self.hold {
            let back = match p {
                Some(p) if p == h.idx => Some(true),
                // Nobody else waits: the hold keeps nobody out; neither a miss nor a return.
                None => None,
                Some(_) if now >= h.until => Some(false),
                Some(_) => {
                    return Some(Decision::Idle {
                        wake_at: Some(h.until),
                    })
                }
            };
            self.settle_hold(h, back, now);
        }
        let p = p?;
        let (j, from) = self.last_end?;
        if j == p || j >= self.slices.len() || now >= from + self.quantum {
            return None;
        }
        if !self.worth_holding(j, p, now) {
            return None;
        }
        let until = from + self.quantum;
        self.last_end = None;
        self.hold = Some(Hold {
            idx: j,
            from,
            until,
        });
        self.slices[j].holds += 1;
        Some(Decision::Idle {
            wake_at: Some(until),
        })
    }

    /// The conditions of the module's doc for holding for slice `j` instead of granting `p`.
    fn worth_holding(&mut self, j: usize, p: usize, now: u64) -> bool {
        let (sj, sp) = (&self.slices[j], &self.slices[p]);
        if !self.holds_on || sj.params.high || sp.params.high || sj.obs.waiting || sj.strikes > 0 {
            return false;
        }
        if sj.hold_misses > 0 && sj.since_hold < RETRY_EVERY {
            return false;
        }
        let owed = (sp.vtime - sj.vtime) * self.weight(j);
        if owed < self.quantum as f64 {
            return false;
        }
        if self
            .recent_drain_median(p)
            .is_none_or(|m| m < 2 * self.quantum)
        {
            return false;
        }
        // A capped slice out of tokens could not be granted when it comes back (nobody holds
        // the lease here, so this is the non-holder's full-bucket rule).
        self.eligible(j, now)
    }

    /// Ends hold `h` at `now`, charging its slice: `Some(true)` when the slice came back (and
    /// is granted now), `Some(false)` when the hold ran out with another slice waiting.
    fn settle_hold(&mut self, h: Hold, back: Option<bool>, now: u64) {
        self.hold = None;
        if h.idx >= self.slices.len() {
            return;
        }
        self.charge_held(h.idx, h.from, now.min(h.until));
        let s = &mut self.slices[h.idx];
        s.since_hold = 0;
        match back {
            Some(true) => s.hold_misses = 0,
            Some(false) => s.hold_misses = s.hold_misses.saturating_add(1),
            None => {}
        }
    }

    /// Slice `i`'s lease ended at `at` (its drain reported, or handed on in the background):
    /// it may be held for if it launched in that lease and has no strikes.
    pub(super) fn lease_ended(&mut self, i: usize, progressed: bool, at: u64) {
        let Some(s) = self.slices.get_mut(i) else {
            return;
        };
        s.since_hold = s.since_hold.saturating_add(1);
        self.last_end = (progressed && s.strikes == 0).then_some((i, at));
    }

    /// Index bookkeeping when slice `i` is removed.
    pub(super) fn hold_removed(&mut self, i: usize) {
        let shift = |x: usize| (x != i).then(|| if x > i { x - 1 } else { x });
        self.last_end = self.last_end.and_then(|(x, at)| shift(x).map(|x| (x, at)));
        self.hold = self
            .hold
            .and_then(|h| shift(h.idx).map(|idx| Hold { idx, ..h }));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Observation, Params};
    use super::*;

    const MS: u64 = 1_000_000;
    const A: usize = 0;
    const B: usize = 1;

    /// A 30 % slice `a` whose drains are `a_drain` long, ahead of a 70 % slice `b` by `ahead`
    /// ns of `a`'s service; 5 ms quantum.
    fn policy(a_drain: u64, ahead: u64, a_high: bool) -> Policy {
        let mut p = Policy::new(5 * MS);
        let g = |pct: u32, high: bool| Params {
            guarantee: pct * 100,
            high,
            ..Params::default()
        };
        p.set_slice("a", g(30, a_high), 0);
        p.set_slice("b", g(70, false), 0);
        for _ in 0..8 {
            p.record_drain(A, a_drain);
        }
        p.slices[A].vtime = ahead as f64 / 3000.0;
        p
    }

    fn see(p: &mut Policy, now: u64, a: bool, b: bool) {
        let holder = p.holder();
        for (i, waiting) in [(A, a), (B, b)] {
            let held = holder == Some(i);
            let obs = Observation {
                waiting: waiting && !held,
                active: waiting && held,
                quiet: false,
            };
            p.observe(i, obs, now);
        }
        p.observed(now);
    }

    /// `b` is granted at `t`, launches, and its lease ends at `t + 6 ms` (drain reported).
    fn b_lease(p: &mut Policy, t: u64) -> u64 {
        see(p, t, true, true);
        assert_eq!(
            p.decide(t),
            Decision::Grant(B),
            "b is behind in virtual time"
        );
        p.granted(B, t);
        see(p, t + MS, true, true);
        assert!(matches!(p.decide(t + MS), Decision::Keep { .. }));
        p.revoked(t + 6 * MS, false);
        t + 6 * MS
    }

    #[test]
    fn a_late_slice_is_held_for_and_pays_for_the_hold() {
        let mut p = policy(100 * MS, 200 * MS, false);
        let end = b_lease(&mut p, 0);
        // b's thread is late: only a (long launches, ahead) waits. The device is held for b.
        see(&mut p, end, true, false);
        assert_eq!(
            p.decide(end),
            Decision::Idle {
                wake_at: Some(end + 5 * MS)
            }
        );
        see(&mut p, end + MS, true, false);
        assert!(matches!(p.decide(end + MS), Decision::Idle { .. }));
        let v = p.slices[B].vtime;
        // b comes back 2 ms after its lease ended: it gets the lease, charged the 2 ms.
        see(&mut p, end + 2 * MS, true, true);
        assert_eq!(p.decide(end + 2 * MS), Decision::Grant(B));
        let s = &p.slices[B];
        assert_eq!((s.holds, s.hold_misses, s.held_ns), (1, 0, 2 * MS));
        assert!((s.vtime - v - 2e6 / 7000.0).abs() < 1e-6);
    }

    #[test]
    fn a_slice_that_stays_away_is_held_for_again_only_every_sixteenth_lease() {
        let mut p = policy(100 * MS, 200 * MS, false);
        let mut t = 0;
        let mut holds = Vec::new();
        for lease in 0..40 {
            let end = b_lease(&mut p, t);
            see(&mut p, end, true, false);
            let d = p.decide(end);
            if d == Decision::Grant(A) {
                t = end;
            } else {
                assert_eq!(
                    d,
                    Decision::Idle {
                        wake_at: Some(end + 5 * MS)
                    }
                );
                holds.push(lease);
                // b stays away: a is granted when the hold runs out.
                see(&mut p, end + 5 * MS, true, false);
                assert_eq!(p.decide(end + 5 * MS), Decision::Grant(A));
                t = end + 5 * MS;
            }
            p.granted(A, t);
            p.revoked(t + MS, false);
            t += MS;
            // b stays behind (an absence of a quantum or more would otherwise bring it up to
            // the virtual clock, which a's grant moved to a's virtual time).
            p.slices[A].vtime = p.slices[B].vtime + 1e6;
            p.vclock = p.slices[B].vtime;
        }
        assert_eq!(
            holds,
            vec![0, RETRY_EVERY as usize, 2 * RETRY_EVERY as usize]
        );
        let s = &p.slices[B];
        assert_eq!((s.holds, s.hold_misses, s.held_ns), (3, 3, 15 * MS));
    }

    #[test]
    fn no_hold_beside_short_launches_a_slice_not_ahead_or_priority() {
        // (a's drains, how far a is ahead, a high-priority)
        for (drain, ahead, high) in [
            (9 * MS, 200 * MS, false),
            (100 * MS, 3 * MS, false),
            (100 * MS, 200 * MS, true),
        ] {
            let mut p = policy(drain, ahead, high);
            if high {
                // b is granted with a not waiting; a high-priority a is let in at once.
                see(&mut p, 0, false, true);
                assert_eq!(p.decide(0), Decision::Grant(B));
                p.granted(B, 0);
                see(&mut p, MS, false, true);
                assert!(matches!(p.decide(MS), Decision::Keep { .. }));
                p.revoked(6 * MS, false);
            } else {
                b_lease(&mut p, 0);
            }
            see(&mut p, 6 * MS, true, false);
            assert_eq!(
                p.decide(6 * MS),
                Decision::Grant(A),
                "{drain} {ahead} {high}"
            );
            assert_eq!(p.slices[B].holds, 0);
        }
    }

    #[test]
    fn removing_the_slice_held_for_ends_the_hold() {
        let mut p = policy(100 * MS, 200 * MS, false);
        let end = b_lease(&mut p, 0);
        see(&mut p, end, true, false);
        assert!(matches!(p.decide(end), Decision::Idle { .. }));
        assert!(p.remove_slice("b").is_some());
        see(&mut p, end + MS, true, false);
        assert_eq!(p.decide(end + MS), Decision::Grant(0));
    }

    #[test]
    fn a_hold_with_nobody_else_waiting_counts_neither_way() {
        let mut p = policy(100 * MS, 200 * MS, false);
        let end = b_lease(&mut p, 0);
        see(&mut p, end, true, false);
        assert!(matches!(p.decide(end), Decision::Idle { .. }));
        // a stops waiting too: the hold ends, b charged up to then, no miss.
        see(&mut p, end + MS, false, false);
        assert!(matches!(
            p.decide(end + MS),
            Decision::Idle { wake_at: None }
        ));
        let s = &p.slices[B];
        assert_eq!((s.holds, s.hold_misses, s.held_ns), (1, 0, MS));
    }
}
