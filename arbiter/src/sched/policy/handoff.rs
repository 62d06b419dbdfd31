//! Handing on at once from a holder whose queue is shallow.
//!
//! At a lease's end the loop normally waits for the holder's gate threads to say they are down
//! to their last launch (`near`) before granting the next slice: one wake-up of the holder's
//! gate thread and one of the loop, before the next holder's own thread is woken. A tenant
//! that waits for each kernel before launching the next (queue depth 1) is always down to its
//! last launch, and on a loaded host that chain outlasted the rest of its running kernel: two
//! synchronous tenants guaranteed 30 / 70 left the simulated device idle 5–6 points more than
//! one alone (`arbiter/tests/share_guarantees.rs`). So a holder whose recent drains were short
//! ([`Policy::shallow`]) is handed on at once, as after a priority preemption: the next
//! holder is granted while the holder's last launch runs, and its charging starts at the
//! holder's drain report (the holder pays for its drain up to it), so a queue that turned out
//! deeper costs its owner, not the next holder.

use super::Policy;

/// Drains of a slice considered for their median.
pub(super) const RECENT_DRAINS: usize = 8;

impl Policy {
    /// Median of slice `i`'s last [`RECENT_DRAINS`] drain times (revoke → reported), once at
    /// least half that many are known.
    pub(super) fn recent_drain_median(&self, i: usize) -> Option<u64> {
        let s = self.slices.get(i)?;
        let mut recent: Vec<u64> = s.drains.iter().rev().take(RECENT_DRAINS).copied().collect();
        if recent.len() < RECENT_DRAINS / 2 {
            return None;
        }
        recent.sort_unstable();
        Some(recent[recent.len() / 2])
    }

    /// Whether holder `me` is still owed the device at its lease's end: its virtual time is
    /// below every waiting slice's in `others` (nobody waiting: not owed, the caller extends
    /// anyway). Revoking it then would hand the device to a slice ahead of it, and a
    /// synchronous tenant whose thread is in its own host gap at that moment (not waiting)
    /// would get the next lease only by turn, not by what it is owed: two depth-1 tenants
    /// alternated strictly, lease for lease, and their shares were their lease lengths plus
    /// one drain each (33.8 / 66.2 charged for 30 / 70) whatever their virtual times said.
    pub(super) fn holder_owed(&self, me: usize, others: &[usize]) -> bool {
        let v = self.slices[me].vtime;
        !others.is_empty() && others.iter().all(|&j| self.slices[j].vtime > v)
    }

    /// Sets how long a `priority: high` holder that is idle (every process quiet: its work
    /// done, nothing launched for the gate's linger) keeps the lease while others wait, ns
    /// (`scheduler.high_linger`; 0: handed on at once like any idle holder). A server's host
    /// work between two decode steps (a Python server's sampling and bookkeeping, 50–100 µs,
    /// more on a busy host) outlasts the gate's linger once that has adapted to its idle spells
    /// between requests; handing on then let the neighbour's 1.4 ms kernel in before the next
    /// step.
    pub fn set_high_linger(&mut self, ns: u64) {
        self.high_linger = ns;
    }

    /// How long an idle `priority: high` holder keeps the lease, ns.
    pub fn high_linger(&self) -> u64 {
        self.high_linger
    }

    /// Whether the holder may be handed on at once at a revoke: it launched under this lease
    /// and its recent drains took at most half a quantum (a queue of about one short launch
    /// plus a wake-up; 1 ms kernels queued 8 deep drain in ~8 ms and are not).
    pub fn holder_shallow(&self) -> bool {
        let Some(h) = self.holder else {
            return false;
        };
        h.progress
            && self
                .recent_drain_median(h.idx)
                .is_some_and(|m| m <= self.quantum / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{g, MS};
    use super::super::{Decision, Observation, Params, Policy};

    /// An idle (quiet) high-priority holder keeps the lease for the linger while a neighbour
    /// waits, is revoked after it, and a launch in between starts it afresh; without a linger,
    /// and for a normal holder, the lease is handed on at once.
    #[test]
    fn an_idle_high_holder_keeps_the_lease_for_the_linger() {
        for (high, linger) in [(true, 500_000), (true, 0), (false, 500_000)] {
            let mut p = Policy::new(5 * MS);
            p.set_high_linger(linger);
            let params = Params { high, ..g(20) };
            let srv = p.set_slice("server", params, 0);
            let tr = p.set_slice("train", g(50), 0);
            p.granted(srv, 0);
            let see = |p: &mut Policy, t: u64, quiet: bool| {
                let o = Observation {
                    active: true,
                    quiet,
                    waiting: false,
                };
                p.observe(srv, o, t);
                let w = Observation {
                    waiting: true,
                    ..Observation::default()
                };
                p.observe(tr, w, t);
                p.observed(t);
                p.decide(t)
            };
            assert!(matches!(see(&mut p, 100_000, false), Decision::Keep { .. }));
            let d = see(&mut p, 200_000, true);
            if !(high && linger > 0) {
                assert_eq!(d, Decision::Revoke, "high {high}, linger {linger}");
                continue;
            }
            let Decision::Keep { wake_at, .. } = d else {
                panic!("revoked at once: {d:?}");
            };
            assert_eq!(wake_at, 700_000, "woken when the linger ends");
            // It launches again within the linger: the next quiet spell lingers afresh.
            assert!(matches!(see(&mut p, 400_000, false), Decision::Keep { .. }));
            assert!(matches!(see(&mut p, 500_000, true), Decision::Keep { .. }));
            assert!(matches!(see(&mut p, 900_000, true), Decision::Keep { .. }));
            assert_eq!(
                see(&mut p, 1_000_000, true),
                Decision::Revoke,
                "linger over"
            );
        }
    }

    #[test]
    fn only_a_holder_with_short_drains_that_launched_is_shallow() {
        let mut p = Policy::new(5 * MS);
        let a = p.set_slice("a", g(30), 0);
        let b = p.set_slice("b", g(70), 0);
        p.granted(a, 0);
        let active = Observation {
            active: true,
            ..Observation::default()
        };
        p.observe(a, active, MS);
        p.observed(MS);
        p.decide(MS);
        assert!(!p.holder_shallow(), "no drains known yet");
        for _ in 0..4 {
            p.record_drain(a, 1_200_000);
        }
        assert!(p.holder_shallow(), "1.2 ms drains");
        for _ in 0..8 {
            p.record_drain(a, 8 * MS);
        }
        assert!(!p.holder_shallow(), "8 ms drains: a deep queue");
        for _ in 0..8 {
            p.record_drain(b, MS);
        }
        p.revoked(2 * MS, false);
        p.granted(b, 2 * MS);
        assert!(!p.holder_shallow(), "launched nothing under this lease yet");
    }
}
