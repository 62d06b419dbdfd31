//! The time-sliced engine's schedule, computed exactly in virtual time (pure: no shared memory,
//! no clock), so that every kernel's start and end follow from the submitted work alone and
//! never from how late a host thread woke.
//!
//! The model: a device holds one context at a time. The held context runs while it has work;
//! alone it is never interrupted. When another context has work, the held one keeps the device
//! until its current time slice ends — slices are counted from when it got the device, every
//! `slice_ns`, as a hardware timeslice timer does — or until it runs out of work, whichever
//! comes first; then the device switches (`switch_ns` of engine time, not busy) to the next
//! context with work in round-robin slot order, which gets a fresh slice. A preempted kernel
//! keeps its remaining time and continues in the context's next slice.

/// One context's pending kernel (at most one per process and device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work {
    pub slot: usize,
    /// When it became ready (never earlier than the committed time it was submitted at).
    pub ready: u64,
    /// Engine time it still needs.
    pub rem: u64,
    /// When it first ran (0: not yet).
    pub started: u64,
}

/// The engine's position in virtual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Clock {
    /// Everything before `t` is decided.
    pub t: u64,
    /// Slot + 1 of the context the device holds (0: none yet).
    pub cur: usize,
    /// Start of the held context's first slice (its slice boundaries follow every `slice_ns`).
    pub slice_start: u64,
    /// End of the switch into the held context (the device runs it from then).
    pub run_from: u64,
}

/// Fixed parameters of a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    pub slice_ns: u64,
    pub switch_ns: u64,
    /// Rounds of full contention older than this before the planned range's end are credited
    /// in bulk ([`Sink::bulk`]) instead of slice by slice: only the recent past is bucketed.
    pub keep_ns: u64,
}

/// Where planning stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// At this virtual time.
    Time(u64),
    /// When this slot's kernel completes.
    Done(usize),
}

/// What the plan reports, in time order.
pub(crate) trait Sink {
    /// `slot` ran on the engine over `[s0, s1)`.
    fn ran(&mut self, slot: usize, s0: u64, s1: u64);
    /// `slot` ran `ns` in total in rounds too old to bucket.
    fn bulk(&mut self, slot: usize, ns: u64);
    /// `slot`'s kernel completed: it first ran at `start` and ended at `end`.
    fn done(&mut self, slot: usize, start: u64, end: u64);
    /// The device made `n` context switches.
    fn switched(&mut self, n: u64);
}

/// First slice boundary of a context holding the device since `slice_start` at or after `at`
/// (a context always gets at least one full slice).
fn boundary(slice_start: u64, slice_ns: u64, at: u64) -> u64 {
    if at <= slice_start {
        return slice_start + slice_ns;
    }
    let k = (at - slice_start).div_ceil(slice_ns).max(1);
    slice_start + k * slice_ns
}

/// The next context with work ready at `t` after `cur` in round-robin slot order.
fn next_ready(work: &[Work], cur: usize, t: u64) -> Option<usize> {
    work.iter()
        .filter(|w| w.ready <= t && w.slot + 1 != cur)
        .min_by_key(|w| (w.slot as u64).wrapping_sub(cur as u64) & 0xffff_ffff)
        .map(|w| w.slot)
}

fn switch_to(c: &mut Clock, slot: usize, t: u64, p: &Params, sink: &mut impl Sink) {
    let sw = if c.cur != 0 && c.cur != slot + 1 {
        sink.switched(1);
        p.switch_ns
    } else {
        0
    };
    c.cur = slot + 1;
    c.t = t;
    c.run_from = t + sw;
    c.slice_start = t + sw;
}

/// Full rounds of contention that can be skipped from `c.t` (the held context at the start of
/// a slice): every context with work is ready, has run, and outlasts them, and nothing new
/// arrives meanwhile. Returns (rounds, contexts per round).
fn skippable(c: &Clock, work: &[Work], p: &Params, limit: u64) -> (u64, u64) {
    let t = c.t;
    if t != c.slice_start || t != c.run_from || p.slice_ns == 0 {
        return (0, 0);
    }
    let ready: Vec<&Work> = work.iter().filter(|w| w.ready <= t).collect();
    let k = ready.len() as u64;
    if k < 2 || ready.iter().any(|w| w.started == 0) {
        return (0, 0);
    }
    let round = k * (p.slice_ns + p.switch_ns);
    let mut n = ready
        .iter()
        .map(|w| w.rem.saturating_sub(1) / p.slice_ns)
        .min()
        .unwrap_or(0);
    if let Some(a) = work.iter().filter(|w| w.ready > t).map(|w| w.ready).min() {
        n = n.min((a - t) / round);
    }
    if limit != u64::MAX {
        n = n.min((limit - t) / round);
    }
    let keep = p.keep_ns / round + 2;
    (n.saturating_sub(keep), k)
}

/// Plans the engine from `c.t` until `until`, updating `c` and `work` (completed kernels are
/// removed) and reporting to `sink`. Returns the end of the kernel `Until::Done` waits for, or
/// `None` when it is not pending (or planning stopped at `Until::Time`).
pub(crate) fn advance(
    c: &mut Clock,
    work: &mut Vec<Work>,
    p: &Params,
    until: Until,
    sink: &mut impl Sink,
) -> Option<u64> {
    let limit = match until {
        Until::Time(t) => t,
        Until::Done(s) if work.iter().any(|w| w.slot == s) => u64::MAX,
        Until::Done(_) => return None,
    };
    while c.t < limit {
        if c.t < c.run_from {
            // switching into the held context
            c.t = c.run_from.min(limit);
            continue;
        }
        let t = c.t;
        if let Some(i) = work
            .iter()
            .position(|w| w.slot + 1 == c.cur && w.ready <= t)
        {
            let (rounds, k) = skippable(c, work, p, limit);
            if rounds > 0 {
                for w in work.iter_mut().filter(|w| w.ready <= t) {
                    w.rem -= rounds * p.slice_ns;
                    sink.bulk(w.slot, rounds * p.slice_ns);
                }
                sink.switched(rounds * k);
                c.t = t + rounds * k * (p.slice_ns + p.switch_ns);
                c.slice_start = c.t;
                c.run_from = c.t;
                continue;
            }
            let contended = work
                .iter()
                .filter(|w| w.slot + 1 != c.cur)
                .map(|w| w.ready.max(t))
                .min();
            let preempt_at = contended.map(|a| boundary(c.slice_start, p.slice_ns, a));
            let w = &mut work[i];
            let end = t + w.rem;
            let next = end.min(limit).min(preempt_at.unwrap_or(u64::MAX));
            if w.started == 0 {
                w.started = t;
            }
            sink.ran(w.slot, t, next);
            w.rem -= next - t;
            c.t = next;
            if next == end {
                let w = work.remove(i);
                sink.done(w.slot, w.started, end);
                if until == Until::Done(w.slot) {
                    return Some(end);
                }
            } else if Some(next) == preempt_at {
                let to = next_ready(work, c.cur, next).expect("a contender is ready");
                switch_to(c, to, next, p, sink);
            }
            continue;
        }
        // The held context has no work: the next one with work ready, else wait for one.
        if let Some(to) = next_ready(work, c.cur, t) {
            switch_to(c, to, t, p, sink);
            continue;
        }
        match work.iter().map(|w| w.ready).min() {
            Some(a) if a > t => c.t = a.min(limit),
            _ => c.t = limit,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log {
        ran: Vec<(usize, u64, u64)>,
        bulk: Vec<(usize, u64)>,
        done: Vec<(usize, u64, u64)>,
        switches: u64,
    }

    impl Sink for Log {
        fn ran(&mut self, slot: usize, s0: u64, s1: u64) {
            if s1 > s0 {
                self.ran.push((slot, s0, s1));
            }
        }
        fn bulk(&mut self, slot: usize, ns: u64) {
            self.bulk.push((slot, ns));
        }
        fn done(&mut self, slot: usize, start: u64, end: u64) {
            self.done.push((slot, start, end));
        }
        fn switched(&mut self, n: u64) {
            self.switches += n;
        }
    }

    impl Log {
        fn busy(&self, slot: usize) -> u64 {
            self.ran
                .iter()
                .filter(|r| r.0 == slot)
                .map(|r| r.2 - r.1)
                .sum::<u64>()
                + self
                    .bulk
                    .iter()
                    .filter(|b| b.0 == slot)
                    .map(|b| b.1)
                    .sum::<u64>()
        }
    }

    const MS: u64 = 1_000_000;
    const P: Params = Params {
        slice_ns: 2 * MS,
        switch_ns: 25_000,
        keep_ns: 1_300 * MS,
    };

    fn work(slot: usize, ready: u64, rem: u64) -> Work {
        Work {
            slot,
            ready,
            rem,
            started: 0,
        }
    }

    fn clock(t: u64) -> Clock {
        Clock {
            t,
            ..Clock::default()
        }
    }

    #[test]
    fn a_lone_context_is_never_preempted() {
        let mut c = clock(MS);
        let mut w = vec![work(3, MS, 50 * MS)];
        let mut log = Log::default();
        let end = advance(&mut c, &mut w, &P, Until::Done(3), &mut log);
        assert_eq!(end, Some(51 * MS));
        assert_eq!(log.ran, vec![(3, MS, 51 * MS)], "one uninterrupted run");
        assert_eq!(log.switches, 0);
        // its next kernel, ready at the end of the first, continues back to back
        w.push(work(3, 51 * MS, 5 * MS));
        assert_eq!(
            advance(&mut c, &mut w, &P, Until::Done(3), &mut log),
            Some(56 * MS)
        );
        assert_eq!(log.switches, 0);
    }

    #[test]
    fn two_contexts_alternate_by_slices() {
        let mut c = clock(MS);
        let mut w = vec![work(0, MS, 50 * MS), work(1, MS, 50 * MS)];
        let mut log = Log::default();
        let e0 = advance(&mut c, &mut w, &P, Until::Done(0), &mut log).expect("ends");
        let e1 = advance(&mut c, &mut w, &P, Until::Done(1), &mut log).expect("ends");
        // 25 slices each, 49 switches after slot 0's first slice
        assert!(log.ran.windows(2).all(|p| p[0].0 != p[1].0), "alternation");
        assert!(log.ran.iter().all(|r| r.2 - r.1 == 2 * MS), "whole slices");
        assert_eq!(log.switches, 49);
        assert_eq!(e0, MS + 49 * 2 * MS + 48 * 25_000);
        assert_eq!(e1, e0 + 25_000 + 2 * MS);
        assert_eq!(log.done[0], (0, MS, e0));
        assert_eq!(log.done[1], (1, MS + 2 * MS + 25_000, e1));
        let busy: u64 = log.busy(0) + log.busy(1);
        assert_eq!(busy, 100 * MS);
        assert!(busy <= e1 - MS, "busy never exceeds elapsed");
    }

    #[test]
    fn a_contender_waits_at_most_one_slice() {
        // slot 0 holds the device since 0; slot 1 arrives at 7.5 ms: slot 0's slice ends at 8.
        let mut c = clock(1);
        let mut w = vec![work(0, 1, 100 * MS)];
        let mut log = Log::default();
        advance(&mut c, &mut w, &P, Until::Time(7 * MS), &mut log);
        w.push(work(1, 7 * MS + MS / 2, MS));
        let e1 = advance(&mut c, &mut w, &P, Until::Done(1), &mut log).expect("ends");
        assert_eq!(e1, 1 + 8 * MS + 25_000 + MS);
        assert_eq!(log.switches, 1);
        // the preempted kernel resumes and keeps its remaining time
        let e0 = advance(&mut c, &mut w, &P, Until::Done(0), &mut log).expect("ends");
        assert_eq!(e0, e1 + 25_000 + (100 * MS - 8 * MS));
    }

    #[test]
    fn a_context_that_runs_dry_hands_over_at_once() {
        let mut c = clock(1);
        let mut w = vec![work(0, 1, MS / 2), work(1, 1, 10 * MS)];
        let mut log = Log::default();
        let e0 = advance(&mut c, &mut w, &P, Until::Done(0), &mut log).expect("ends");
        assert_eq!(e0, 1 + MS / 2);
        let e1 = advance(&mut c, &mut w, &P, Until::Done(1), &mut log).expect("ends");
        assert_eq!(e1, e0 + 25_000 + 10 * MS, "alone again: uninterrupted");
    }

    #[test]
    fn planning_in_steps_equals_planning_at_once() {
        let mk = || {
            vec![
                work(0, 1, 37 * MS),
                work(1, 3 * MS, 11 * MS),
                work(2, 5, 20 * MS),
            ]
        };
        let (mut c1, mut w1, mut l1) = (clock(1), mk(), Log::default());
        let mut ends1 = Vec::new();
        for s in [0, 1, 2] {
            ends1.push(advance(&mut c1, &mut w1, &P, Until::Done(s), &mut l1));
        }
        let (mut c2, mut w2, mut l2) = (clock(1), mk(), Log::default());
        let mut t = 1;
        while !w2.is_empty() {
            t += 333_333;
            advance(&mut c2, &mut w2, &P, Until::Time(t), &mut l2);
        }
        let mut d2 = l2.done.clone();
        d2.sort();
        let mut d1 = l1.done.clone();
        d1.sort();
        assert_eq!(d1, d2);
        assert_eq!(l1.switches, l2.switches);
        for s in 0..3 {
            assert_eq!(l1.busy(s), l2.busy(s));
        }
        assert_eq!(d1.len(), 3);
        // slot 1 (11 ms) completes while the plan runs on to slot 0's end: nothing left for it
        assert_eq!(ends1[1], None);
        assert_eq!(ends1[0], Some(d1[0].2));
    }

    #[test]
    fn long_contention_is_skipped_in_bulk_exactly() {
        // two one-hour kernels: planned in O(1) rounds, same end as slice-by-slice arithmetic
        let hour = 3_600_000 * MS;
        let mut c = clock(1);
        let mut w = vec![work(0, 1, hour), work(1, 1, hour)];
        let mut log = Log::default();
        let e0 = advance(&mut c, &mut w, &P, Until::Done(0), &mut log).expect("ends");
        let slices = hour / (2 * MS);
        assert_eq!(
            e0,
            1 + (2 * slices - 1) * 2 * MS + (2 * slices - 2) * 25_000
        );
        assert!(
            log.ran.len() < 2000,
            "{} slices planned one by one",
            log.ran.len()
        );
        assert_eq!(log.busy(0), hour);
        assert_eq!(log.switches, 2 * slices - 2);
    }

    #[test]
    fn nothing_pending_plans_nothing() {
        let mut c = clock(5);
        let mut w = Vec::new();
        let mut log = Log::default();
        assert_eq!(advance(&mut c, &mut w, &P, Until::Done(1), &mut log), None);
        assert_eq!(advance(&mut c, &mut w, &P, Until::Time(50), &mut log), None);
        assert_eq!(c.t, 50);
        assert!(log.ran.is_empty());
    }
}
