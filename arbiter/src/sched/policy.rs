//! The scheduling algorithm of one device, pure and clock-injected: which slice holds the lease,
//! when it must give it up, and what each slice is charged. The real loop (`device.rs`) feeds it
//! observations read from the slice files and carries out its decisions; the tests here drive it
//! with a fake clock and fake demand.
//!
//! * Weighted fair queuing on virtual time (start-time fair queuing / stride): a slice's virtual
//!   time advances by `charged ns / weight`; the waiting, eligible slice with the smallest virtual
//!   time gets the next lease. Weights are the guarantees; best-effort slices share the remainder
//!   (`10000 - Σ guarantees`, split evenly, at least 1 bp). A slice that becomes busy starts at the
//!   virtual time of the slice last served, so idle time is not banked: busy slices get the idle
//!   slices' time in proportion to their weights (work-conserving).
//! * Ceilings: a token bucket per slice refilled at `limit × wall time`, capped at two quanta;
//!   a capped slice becomes eligible with a full bucket (even on an otherwise idle device it
//!   waits for it) and a holder running out is revoked. Overruns drive the bucket negative and
//!   are paid back.
//! * `priority: high`: an eligible waiting high-priority slice revokes a normal holder at once and
//!   is picked before any other (bounded by its own ceiling), while it is below its guarantee
//!   over the last second or no other busy slice is below its own (`priority.rs`): priority
//!   orders latency, it does not take another tenant's guarantee.
//! * Lease length: a quantum, scaled by the holder's weight over the lightest waiting
//!   contender's (1–4×), so each contender gets about one lease per round.
//! * Charging: the loop charges the holder the wall time from grant to the moment its queued work
//!   has drained after the revoke (lease time plus overrun), so deep queues pay for themselves.

use super::window::ShareWindow;

mod anticipate;
mod handoff;
mod priority;

/// Basis points of a whole device.
pub const FULL: u32 = 10_000;

/// A slice's scheduling parameters (basis points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Guaranteed share (0 = best effort).
    pub guarantee: u32,
    /// Ceiling ([`FULL`] = none).
    pub limit: u32,
    /// `priority: high`.
    pub high: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            guarantee: 0,
            limit: FULL,
            high: false,
        }
    }
}

/// What the loop observed of one slice at a decision point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    /// Threads of the slice wait at the gate.
    pub waiting: bool,
    /// The slice launched since its lease was granted or last renewed (holder only).
    pub active: bool,
    /// Holder only: every process of the slice that launched under the current grant has had
    /// nothing queued and launched nothing for a short linger (the gate's `busy` word is 0
    /// for the grant). An idle holder: its lease is handed on at once when others wait.
    pub quiet: bool,
}

/// What the loop must do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The holder keeps the lease. `renew`: a quantum ended, bump the generation (no wake-up)
    /// so activity in the next quantum can be seen. Decide again at `wake_at` or on demand.
    Keep {
        /// Bump the lease generation (activity tracking).
        renew: bool,
        /// Next decision at the latest.
        wake_at: u64,
    },
    /// Revoke the holder's lease, wait for its queued work, then call [`Policy::revoked`].
    Revoke,
    /// A high-priority slice waits: revoke the holder and call [`Policy::revoked`] at once
    /// (the next grant follows without waiting for the drain, whose overrun is charged later
    /// with [`Policy::overrun`]; the queue bound keeps it to a kernel or so).
    Preempt,
    /// Grant the lease to slice `idx` and call [`Policy::granted`].
    Grant(usize),
    /// Nobody gets the lease; decide again on demand or at `wake_at`.
    Idle {
        /// Earliest moment a waiting slice regains tokens.
        wake_at: Option<u64>,
    },
}

/// Per-slice accounting.
#[derive(Clone, Debug)]
pub struct Acct {
    /// Slice id.
    pub id: String,
    /// Parameters.
    pub params: Params,
    vtime: f64,
    tokens: f64,
    tokens_at: u64,
    obs: Observation,
    idle_since: Option<u64>,
    /// Since when it has waited for the lease without holding it (`policy/priority.rs`:
    /// turns while a high-priority slice repays a lead).
    waiting_since: Option<u64>,
    /// Achieved-share history.
    pub window: ShareWindow,
    /// Grants received.
    pub grants: u64,
    /// ns waited at the gate without the lease.
    pub wait_ns: u64,
    /// ns charged.
    pub charged_ns: u64,
    /// Drains that timed out.
    pub drain_timeouts: u64,
    /// The latest drain times (revoke → queued work reported complete), ns, at most
    /// [`DRAIN_HISTORY`].
    pub drains: Vec<u64>,
    /// Moving average of the slice's last kernel after an early hand-off (`near` → drain
    /// reported), ns: early hand-offs are used only while it is short (see
    /// [`Policy::early_ok`]).
    pub last_kernel_ns: u64,
    /// Revokes since the last early hand-off (to re-measure a slice whose kernels were long).
    pub since_early: u32,
    /// Consecutive leases in which the slice claimed demand but launched nothing (its `seen`
    /// never matched the lease word): each one doubles [`Acct::backoff_until`].
    pub strikes: u32,
    /// Until then the slice's demand claims are ignored (see [`Policy::observe`]).
    pub backoff_until: u64,
    /// Consecutive drains that timed out: each one halves the next drain's bound
    /// ([`Policy::drain_bound`]); a drain reported in time resets it.
    pub timeout_streak: u32,
    /// Leases lost for showing no progress (status and tests).
    pub no_progress: u64,
    /// Times the free device was held for the slice after its lease ended
    /// (`policy/anticipate.rs`).
    pub holds: u64,
    /// Holds in a row the slice did not come back in.
    pub hold_misses: u32,
    /// Lease ends since the last hold (to retry a slice that missed one).
    pub since_hold: u32,
    /// ns charged for holds.
    pub held_ns: u64,
    /// Leases handed on because the slice was idle (every process of it quiet, `busy`) while
    /// others waited.
    pub quiet_revokes: u64,
}

/// Drain times kept per slice for the status's percentile.
pub const DRAIN_HISTORY: usize = 512;

impl Acct {
    /// The slice had work (waiting, or launching while holding) at the last observation.
    pub fn busy(&self) -> bool {
        self.obs.waiting || self.obs.active
    }
}

#[derive(Clone, Copy, Debug)]
struct Holder {
    idx: usize,
    /// Start of the current lease (grant, or extension when nobody else waits).
    lease_start: u64,
    /// Last activity check (grant or renewal).
    checked_at: u64,
    /// Charged up to here.
    charged_to: u64,
    /// Granted while the previous holder's queued work was still draining ([`Policy::preempted`]):
    /// the device is busy with that work, which the previous holder pays for, so this holder is
    /// charged only from the end of that drain ([`Policy::overrun`]).
    deferred: bool,
    /// The holder's `seen` matched its lease word at least once during this lease.
    progress: bool,
    /// A check found the holder claiming demand without progress once already (the one grace a
    /// slowly woken thread gets).
    graced: bool,
    /// A `priority: high` holder was first seen idle (quiet) here, and has been since
    /// ([`Policy::high_linger`]).
    quiet_since: Option<u64>,
}

/// Longest back-off of a slice that claims demand without launching: its demand is ignored
/// for at most this long between two (half-quantum) trial leases.
pub const MAX_BACKOFF_NS: u64 = 1_000_000_000;

/// A `demand` above this is no thread count any process could have (a process has far fewer
/// threads): the word was written by something else and is read as "not waiting".
pub const MAX_DEMAND: u32 = 1 << 20;

/// The scheduler of one device.
#[derive(Clone, Debug)]
pub struct Policy {
    quantum: u64,
    slices: Vec<Acct>,
    holder: Option<Holder>,
    vclock: f64,
    last_obs: u64,
    last_holder: Option<usize>,
    /// Drains of revoked holders still outstanding ([`Policy::preempted`]): while any is, the
    /// next grant is deferred (see `Holder`).
    overlap_open: u32,
    /// Grants to a slice other than the previous holder.
    pub handoffs: u64,
    /// The last [`Decision::Revoke`] was for an idle (quiet) holder ([`Policy::revoke_was_quiet`]).
    quiet_revoke: bool,
    /// Revokes of idle holders (status and tests).
    pub quiet_revokes: u64,
    /// The slice whose lease ended last, and when, while it may be held for.
    last_end: Option<(usize, u64)>,
    /// The free device is held for a slice ([`anticipate`]).
    hold: Option<anticipate::Hold>,
    /// Holds are made at all ([`Policy::set_holds`]).
    holds_on: bool,
    /// How long an idle `priority: high` holder keeps the lease ([`Policy::set_high_linger`]).
    high_linger: u64,
    /// Whether a high-priority slice that is not favoured gets turns while it repays
    /// ([`Policy::set_high_repay_turns`]).
    high_repay_turns: bool,
}

impl Policy {
    /// A device scheduler with lease quantum `quantum_ns`.
    pub fn new(quantum_ns: u64) -> Policy {
        Policy {
            quantum: quantum_ns.max(100_000),
            slices: Vec::new(),
            holder: None,
            vclock: 0.0,
            last_obs: 0,
            last_holder: None,
            overlap_open: 0,
            handoffs: 0,
            quiet_revoke: false,
            quiet_revokes: 0,
            last_end: None,
            hold: None,
            holds_on: true,
            high_linger: 0,
            high_repay_turns: false,
        }
    }

    /// Turns holding the free device for a slice whose thread is late ([`anticipate`]) on or
    /// off (on by default; off: a benchmark switch).
    pub fn set_holds(&mut self, on: bool) {
        self.holds_on = on;
    }

    /// The quantum, ns.
    pub fn quantum(&self) -> u64 {
        self.quantum
    }

    /// The slices, in index order.
    pub fn slices(&self) -> &[Acct] {
        &self.slices
    }

    /// Index of slice `id`.
    pub fn index(&self, id: &str) -> Option<usize> {
        self.slices.iter().position(|s| s.id == id)
    }

    /// A slice other than the holder waited at the last observation.
    pub fn anyone_waiting_but_holder(&self) -> bool {
        let h = self.holder();
        self.slices
            .iter()
            .enumerate()
            .any(|(i, s)| Some(i) != h && s.obs.waiting)
    }

    /// The holder's index.
    pub fn holder(&self) -> Option<usize> {
        self.holder.map(|h| h.idx)
    }

    /// Bucket size: two quanta of device time. A capped slice that lost the lease becomes
    /// eligible again only with a full bucket, so its leases are long enough (≥ 2 quanta /
    /// (1 − limit)) for hand-off costs not to eat its ceiling.
    fn burst(&self, _p: &Params) -> f64 {
        2.0 * self.quantum as f64
    }

    /// Adds slice `id` or changes its parameters (live resize: takes effect at this call; a
    /// lowered ceiling keeps the tokens already earned, clamped to the new burst).
    pub fn set_slice(&mut self, id: &str, params: Params, now: u64) -> usize {
        let params = Params {
            guarantee: params.guarantee.min(FULL),
            limit: params.limit.clamp(1, FULL),
            high: params.high,
        };
        if let Some(i) = self.index(id) {
            self.refill(i, now);
            self.slices[i].params = params;
            let b = self.burst(&params);
            let s = &mut self.slices[i];
            s.tokens = s.tokens.min(b);
            return i;
        }
        let tokens = self.burst(&params);
        self.slices.push(Acct {
            id: id.to_string(),
            params,
            vtime: self.vclock,
            tokens,
            tokens_at: now,
            obs: Observation::default(),
            idle_since: None,
            waiting_since: None,
            window: ShareWindow::default(),
            grants: 0,
            wait_ns: 0,
            charged_ns: 0,
            drain_timeouts: 0,
            drains: Vec::new(),
            last_kernel_ns: 0,
            since_early: 0,
            strikes: 0,
            backoff_until: 0,
            timeout_streak: 0,
            no_progress: 0,
            holds: 0,
            quiet_revokes: 0,
            hold_misses: 0,
            since_hold: 0,
            held_ns: 0,
        });
        self.slices.len() - 1
    }

    /// Removes slice `id`. The caller must have revoked it first if it held the lease.
    pub fn remove_slice(&mut self, id: &str) -> Option<Acct> {
        let i = self.index(id)?;
        if self.holder.is_some_and(|h| h.idx == i) {
            self.holder = None;
        }
        self.last_holder = match self.last_holder {
            Some(x) if x == i => None,
            Some(x) if x > i => Some(x - 1),
            o => o,
        };
        if let Some(h) = &mut self.holder {
            if h.idx > i {
                h.idx -= 1;
            }
        }
        self.hold_removed(i);
        Some(self.slices.remove(i))
    }

    fn weight(&self, i: usize) -> f64 {
        let g = self.slices[i].params.guarantee;
        if g > 0 {
            return f64::from(g);
        }
        let sum: u32 = self.slices.iter().map(|s| s.params.guarantee).sum();
        let be = crate::convert::usize_to_u32(
            self.slices
                .iter()
                .filter(|s| s.params.guarantee == 0)
                .count()
                .max(1),
        );
        (f64::from(FULL.saturating_sub(sum)) / f64::from(be)).max(1.0)
    }

    fn limited(&self, i: usize) -> bool {
        self.slices[i].params.limit < FULL
    }

    fn refill(&mut self, i: usize, now: u64) {
        let b = self.burst(&self.slices[i].params);
        let s = &mut self.slices[i];
        let dt = now.saturating_sub(s.tokens_at) as f64;
        s.tokens = (s.tokens + dt * f64::from(s.params.limit) / f64::from(FULL)).min(b);
        s.tokens_at = now.max(s.tokens_at);
    }

    fn eligible(&mut self, i: usize, now: u64) -> bool {
        if !self.limited(i) {
            return true;
        }
        self.refill(i, now);
        let s = &self.slices[i];
        if self.holder.is_some_and(|h| h.idx == i) {
            s.tokens > 0.0
        } else {
            s.tokens >= self.burst(&s.params) - 1.0
        }
    }

    /// Charges slice `i` for `[from, to)` of device time.
    fn charge(&mut self, i: usize, from: u64, to: u64) {
        if to > from {
            tracing::trace!(slice = %self.slices[i].id, from, to, "charged");
            self.charge_ns(i, to - from);
            self.slices[i].window.add(from, to);
        }
    }

    /// Charges slice `i` for `[from, to)` the device was held for it, idle
    /// ([`anticipate`]): virtual time and ceiling as for a lease, but not its achieved share
    /// (the status's windows say what ran).
    fn charge_held(&mut self, i: usize, from: u64, to: u64) {
        if to > from {
            self.charge_ns(i, to - from);
            self.slices[i].held_ns += to - from;
        }
    }

    /// Virtual time, tokens and the charged total of slice `i` for `ns`.
    fn charge_ns(&mut self, i: usize, ns: u64) {
        let w = self.weight(i);
        let s = &mut self.slices[i];
        s.vtime += ns as f64 / w;
        s.tokens -= ns as f64;
        s.charged_ns += ns;
    }

    /// Records what the loop saw of slice `i` at `now` (call for every slice before
    /// [`Policy::decide`]). A slice that starts waiting is brought up to the virtual clock.
    pub fn observe(&mut self, i: usize, obs: Observation, now: u64) {
        let dt = now.saturating_sub(self.last_obs);
        let holder = self.holder.map(|h| h.idx);
        let vclock = self.vclock;
        let quantum = self.quantum;
        let Some(s) = self.slices.get_mut(i) else {
            return;
        };
        // Demand claims of a slice that wasted its last lease are ignored until its back-off
        // ends (its `demand` word is tenant-writable; only launches prove work).
        let obs = Observation {
            waiting: obs.waiting && (holder == Some(i) || now >= s.backoff_until),
            active: obs.active,
            quiet: obs.quiet && holder == Some(i),
        };
        if s.obs.waiting && holder != Some(i) {
            s.wait_ns += dt;
        }
        if obs.waiting && holder != Some(i) {
            s.waiting_since.get_or_insert(now);
        } else {
            s.waiting_since = None;
        }
        // A slice that was idle (neither waiting nor holding) for a quantum or more and starts
        // waiting is brought up to the virtual clock: idle time is not banked. Shorter gaps
        // (a revoked holder synchronising before its next launch) keep their place.
        if obs.waiting || holder == Some(i) {
            if let Some(t) = s.idle_since.take() {
                if obs.waiting && now.saturating_sub(t) >= quantum {
                    s.vtime = s.vtime.max(vclock);
                }
            }
        } else if s.idle_since.is_none() {
            s.idle_since = Some(now);
        }
        s.obs = obs;
    }

    /// Ends an observation round at `now` (after every [`Policy::observe`]).
    pub fn observed(&mut self, now: u64) {
        self.last_obs = now;
    }

    fn waiting_eligible(&mut self, now: u64, except: Option<usize>) -> Vec<usize> {
        let waiting: Vec<usize> = (0..self.slices.len())
            .filter(|&i| Some(i) != except && self.slices[i].obs.waiting)
            .collect();
        waiting
            .into_iter()
            .filter(|&i| self.eligible(i, now))
            .collect()
    }

    /// The waiting, eligible slice with the smallest virtual time; a favoured `priority: high`
    /// one first ([`priority`]).
    fn pick(&mut self, now: u64) -> Option<usize> {
        let cands = self.waiting_eligible(now, None);
        let high: Vec<usize> = cands
            .iter()
            .copied()
            .filter(|&i| self.favoured(i) || self.repay_turn(i, now))
            .collect();
        let pool = if high.is_empty() { cands } else { high };
        pool.into_iter()
            .min_by(|&a, &b| self.slices[a].vtime.total_cmp(&self.slices[b].vtime))
    }

    /// Whether the last [`Decision::Revoke`] was for an idle holder (nothing queued, nothing
    /// launched for the gate's linger): the loop then grants the next slice without waiting
    /// for the drain report, as after a priority preemption ([`Policy::preempted`]). Reading it
    /// clears it.
    pub fn revoke_was_quiet(&mut self) -> bool {
        let q = std::mem::take(&mut self.quiet_revoke);
        if q {
            self.quiet_revokes += 1;
        }
        q
    }

    /// Moves the virtual clock up to the busy slice furthest behind (the holder `me` when
    /// alone), so a slice that starts waiting during a long hold starts level with it (no
    /// credit for having been idle). Not the holder's own virtual time: a light slice (best
    /// effort, weight 1 bp) charged one lease jumps far ahead, and slices coming back from idle
    /// must not be lifted up to it (they would then tie with it and lose their weights).
    fn follow_behind(&mut self, me: usize) {
        let behind = (0..self.slices.len())
            .filter(|&i| i == me || self.slices[i].obs.waiting)
            .map(|i| self.slices[i].vtime)
            .fold(f64::INFINITY, f64::min);
        self.vclock = self.vclock.max(behind);
    }

    /// The decision at `now`.
    pub fn decide(&mut self, now: u64) -> Decision {
        self.quiet_revoke = false;
        // The holder is read here and changed in place below (`self.holder.as_mut()`), never
        // through a copy: no return path has a copy to write back.
        let Some(&Holder {
            idx: me,
            deferred,
            charged_to,
            ..
        }) = self.holder.as_ref()
        else {
            return self.decide_free(now);
        };
        if !deferred {
            self.charge(me, charged_to, now);
            if let Some(h) = self.holder.as_mut() {
                h.charged_to = now.max(h.charged_to);
            }
        }
        self.follow_behind(me);
        let others = self.waiting_eligible(now, Some(me));
        // A capped slice waiting for its bucket: the loop must look again when it refills
        // (else a lone uncapped holder keeps the device to its next 100 ms check).
        let refill = self.refill_time(now, Some(me));
        let my = self.slices[me].params;
        if !my.high && others.iter().any(|&i| self.favoured(i)) {
            return Decision::Preempt;
        }
        // Granted while the previous holder's last kernels still run: its lease (and activity
        // checks) start when that drain is reported ([`Policy::overrun`]); a lease timed from
        // the grant could end before its first kernel ran.
        if deferred {
            return Decision::Keep {
                renew: false,
                wake_at: now + self.quantum / 2,
            };
        }
        let limited = self.limited(me);
        if limited && !self.eligible(me, now) {
            return Decision::Revoke;
        }
        let lease = self.lease_len(me, &others);
        let obs = self.slices[me].obs;
        // Activity is checked every quantum (a lone holder every 100 ms): a holder that launched
        // nothing since the last check gives the lease up at once; otherwise the generation is
        // renewed so the next quantum's launches can be seen.
        let check_every = self.check_every(others.is_empty(), limited);
        let quantum = self.quantum;
        // A favoured holder keeps the lease at its end: the slice it would go to is one that
        // favoured slice preempts at its next launch, which then waits for that slice's
        // running kernel (issue 36: a server decoding through a lease end got a 1.4 ms
        // trainer kernel in a step every lease, 2 % of its steps). Favour ends, and the lease
        // with it, once a contending slice falls below its guarantee (`policy/priority.rs`).
        let owed = (self.holder_owed(me, &others) || self.favoured(me))
            && !others.iter().any(|&i| self.repay_turn(i, now));
        let Some(h) = self.holder.as_mut() else {
            // Nothing above clears the holder.
            return self.decide_free(now);
        };
        let mut renew = false;
        if obs.active && !h.progress {
            h.progress = true;
            self.slices[me].strikes = 0;
        }
        // An idle holder (it launched, everything it queued has completed, and it launched
        // nothing since for the gate's linger) gives the lease up at once when others wait,
        // instead of at the next activity check (2.5–5 ms of idle device per lease with a
        // 5 ms quantum): the loop hands on without waiting for its (empty) drain.
        let linger_until = match h.quiet_since {
            _ if !(obs.quiet && my.high) => None,
            Some(t) => Some(t + self.high_linger),
            None => Some(*h.quiet_since.insert(now) + self.high_linger),
        };
        if !obs.quiet {
            h.quiet_since = None;
        }
        let lingering = linger_until.is_some_and(|t| now < t);
        if obs.quiet && h.progress && !obs.waiting && !others.is_empty() && !lingering {
            self.quiet_revoke = true;
            self.slices[me].quiet_revokes += 1;
            return Decision::Revoke;
        }
        if now.saturating_sub(h.checked_at) >= check_every {
            // Claimed demand counts as activity once per lease, before any progress, and only
            // for a slice without strikes: a thread woken by the grant may not have run yet on
            // a loaded host. A holder that shows no progress beyond that loses the lease and
            // backs off (`no_progress`).
            let grace = obs.waiting && !h.progress && !h.graced && self.slices[me].strikes == 0;
            if !(obs.active || grace) {
                if !h.progress {
                    self.no_progress(me, now);
                }
                return Decision::Revoke;
            }
            h.graced |= grace;
            renew = true;
            h.checked_at = now;
        }
        if now.saturating_sub(h.lease_start) >= lease {
            if !others.is_empty() && !owed {
                // What this call learned (progress, the check) is already in the holder: the
                // loop asks `holder_progressed` next to decide whether to wait for the drain.
                return Decision::Revoke;
            }
            // Alone, or still behind every waiting slice in virtual time, a new lease starts
            // (`policy/handoff.rs`); not while a capped slice refills, which takes the device
            // as soon as it is eligible (its share of spare time, up to its ceiling).
            if refill.is_none() {
                h.lease_start = now;
            }
        }
        let mut wake_at = (h.checked_at + check_every).min(if others.is_empty() {
            u64::MAX
        } else {
            h.lease_start + lease
        });
        if let Some(r) = refill {
            wake_at = wake_at.min(r);
        }
        if let Some(t) = linger_until.filter(|_| lingering) {
            wake_at = wake_at.min(t);
        }
        if limited {
            let s = &self.slices[me];
            let r = f64::from(s.params.limit) / f64::from(FULL);
            let left = (s.tokens / (1.0 - r).max(1e-6)).max(0.0);
            let left = left.max(quantum as f64 / 4.0);
            wake_at = wake_at.min(now + crate::convert::f64_to_u64(left));
        }
        Decision::Keep { renew, wake_at }
    }

    /// The decision when nobody holds the lease: grant the waiting, eligible slice with the
    /// smallest virtual time, or sleep until a capped slice refills or a back-off ends.
    fn decide_free(&mut self, now: u64) -> Decision {
        let pick = self.pick(now);
        if let Some(d) = self.anticipate(pick, now) {
            return d;
        }
        match pick {
            Some(i) => Decision::Grant(i),
            None => {
                let r = self.refill_time(now, None);
                let b = self.backoff_end(now);
                Decision::Idle {
                    wake_at: match (r, b) {
                        (Some(r), Some(b)) => Some(r.min(b)),
                        (r, b) => r.or(b),
                    },
                }
            }
        }
    }

    /// Slice `i` held a lease and launched nothing in it although it claimed demand: its demand
    /// claims are ignored for a back-off that doubles with every such lease in a row (one
    /// quantum, two, … at most [`MAX_BACKOFF_NS`]); a lease with a launch resets it.
    fn no_progress(&mut self, i: usize, now: u64) {
        let q = self.quantum;
        let s = &mut self.slices[i];
        s.no_progress += 1;
        let b = q.saturating_mul(1 << s.strikes.min(20)).min(MAX_BACKOFF_NS);
        s.strikes = s.strikes.saturating_add(1);
        s.backoff_until = now.saturating_add(b);
    }

    /// Whether the holder launched anything during its current lease. A holder that did not
    /// has nothing queued under that grant, so its drain need not be waited for (a hostile
    /// `pending` cannot hold the device).
    pub fn holder_progressed(&self) -> bool {
        self.holder.is_some_and(|h| h.progress)
    }

    /// How long the loop waits for slice `i`'s drain report after a revoke before charging it
    /// the whole wait and moving on: `base`, halved for every drain of the slice in a row that
    /// timed out, never below a quantum.
    pub fn drain_bound(&self, i: usize, base: u64) -> u64 {
        let streak = self.slices.get(i).map_or(0, |s| s.timeout_streak.min(16));
        (base >> streak)
            .max(self.quantum)
            .min(base.max(self.quantum))
    }

    /// Earliest end of a back-off of a slice that claims demand (the loop must look again then).
    fn backoff_end(&self, now: u64) -> Option<u64> {
        self.slices
            .iter()
            .filter(|s| s.backoff_until > now && s.strikes > 0)
            .map(|s| s.backoff_until)
            .min()
    }

    /// How often the holder's activity is checked: every half quantum while others wait (so
    /// an idle holder is noticed, and its time handed on, within one quantum), every quantum
    /// for a capped holder alone, every 100 ms for an uncapped one alone (ten wake-ups a
    /// second).
    fn check_every(&self, alone: bool, limited: bool) -> u64 {
        if !alone {
            (self.quantum / 2).max(100_000)
        } else if limited {
            self.quantum
        } else {
            self.quantum.max(100_000_000)
        }
    }

    /// Lease length of holder `me` against the waiting slices `others`: the quantum scaled by
    /// its weight relative to the lightest contender (at most 4 quanta), so every contender
    /// gets about one lease per round and hand-off costs fall on all of them alike instead of
    /// on the heavier ones, which would otherwise need more (equal) leases.
    fn lease_len(&self, me: usize, others: &[usize]) -> u64 {
        let w = self.weight(me);
        let lightest = others
            .iter()
            .map(|&i| self.weight(i))
            .fold(w, f64::min)
            .max(1.0);
        crate::convert::f64_to_u64(self.quantum as f64 * (w / lightest).clamp(1.0, 4.0))
    }

    /// Earliest moment a waiting capped slice other than `except`, not eligible now, is
    /// eligible again.
    fn refill_time(&mut self, now: u64, except: Option<usize>) -> Option<u64> {
        let mut best: Option<u64> = None;
        for i in 0..self.slices.len() {
            if Some(i) == except
                || !self.slices[i].obs.waiting
                || !self.limited(i)
                || self.eligible(i, now)
            {
                continue;
            }
            self.refill(i, now);
            let s = &self.slices[i];
            let r = f64::from(s.params.limit) / f64::from(FULL);
            // Eligible again with a full bucket.
            let need = self.burst(&s.params) - s.tokens;
            let t = now + crate::convert::f64_to_u64(need.max(0.0) / r) + 1;
            best = Some(best.map_or(t, |b| b.min(t)));
        }
        best
    }

    /// The loop granted the lease to `i` at `now`.
    pub fn granted(&mut self, i: usize, now: u64) {
        if i >= self.slices.len() {
            return;
        }
        if self.last_holder != Some(i) {
            self.handoffs += 1;
        }
        self.last_holder = Some(i);
        self.vclock = self.vclock.max(self.slices[i].vtime);
        self.slices[i].grants += 1;
        self.slices[i].waiting_since = None;
        self.holder = Some(Holder {
            idx: i,
            lease_start: now,
            checked_at: now,
            charged_to: now,
            deferred: self.overlap_open > 0,
            progress: false,
            graced: false,
            quiet_since: None,
        });
    }

    /// The loop revoked the holder and its queued work had drained at `drained_at` (or the wait
    /// timed out there: `timed_out`). The holder is charged up to `drained_at`.
    pub fn revoked(&mut self, drained_at: u64, timed_out: bool) {
        let Some(h) = self.holder.take() else {
            return;
        };
        self.charge(h.idx, h.charged_to, drained_at);
        self.drain_ended(h.idx, timed_out);
        self.lease_ended(h.idx, h.progress, drained_at);
    }

    /// Counts a drain of slice `i` that timed out (or resets the streak of one reported in
    /// time).
    pub fn drain_ended(&mut self, i: usize, timed_out: bool) {
        if let Some(s) = self.slices.get_mut(i) {
            if timed_out {
                s.drain_timeouts += 1;
                s.timeout_streak = s.timeout_streak.saturating_add(1);
            } else {
                s.timeout_streak = 0;
            }
        }
    }

    /// Whether holder `i` may hand the lease on early (when down to its last kernel). Only
    /// while its last kernels have been short (at most half a quantum): the next holder's
    /// lease waits behind that kernel, and with long kernels (20 ms) early hand-offs measured
    /// uneven leases (1 s windows off by up to 14 points). Every 16th revoke tries again, so a
    /// slice whose kernels got shorter gets early hand-offs back.
    pub fn early_ok(&mut self, i: usize) -> bool {
        let q = self.quantum;
        let Some(s) = self.slices.get_mut(i) else {
            return false;
        };
        s.since_early = s.since_early.saturating_add(1);
        if s.last_kernel_ns <= q / 2 || s.since_early >= 16 {
            s.since_early = 0;
            return true;
        }
        false
    }

    /// Records the last kernel of slice `i` after an early hand-off (`near` → drain reported).
    pub fn record_last_kernel(&mut self, i: usize, ns: u64) {
        if let Some(s) = self.slices.get_mut(i) {
            s.last_kernel_ns = if s.last_kernel_ns == 0 {
                ns
            } else {
                (s.last_kernel_ns * 3 + ns) / 4
            };
        }
    }

    /// Records that a drain of slice `i` took `ns` (revoke → completion reported).
    pub fn record_drain(&mut self, i: usize, ns: u64) {
        if let Some(s) = self.slices.get_mut(i) {
            if s.drains.len() >= DRAIN_HISTORY {
                s.drains.drain(..DRAIN_HISTORY / 2);
            }
            s.drains.push(ns);
        }
    }

    /// The loop revoked the holder and stopped waiting for its queued work at `at` (a
    /// high-priority slice waits, the holder is down to its last kernel, or its drain outlasted
    /// the bound): the holder is charged up to `at`; its overrun follows with
    /// [`Policy::overrun`], and the next holder's charging starts only then, so the overlap is
    /// charged once (to the slice whose work ran in it).
    ///
    /// A holder revoked while still deferred (granted behind an earlier drain, and preempted by
    /// a high-priority slice before that drain was reported) has been charged nothing: its
    /// charging had not started, and does not start now; its own drain is charged from the
    /// earlier drain's report on (the loop charges drains in the order they began).
    pub fn preempted(&mut self, at: u64) {
        if let Some(h) = self.holder.as_mut() {
            if h.deferred {
                h.charged_to = h.charged_to.max(at);
            }
            self.revoked(at, false);
            self.overlap_open = self.overlap_open.saturating_add(1);
        }
    }

    /// Whether a `priority: high` slice other than the holder waits and is eligible while the
    /// holder (if any) is not high: the loop stops waiting for a drain and lets it in.
    pub fn high_waits(&mut self, now: u64) -> bool {
        let me = self.holder.map(|h| h.idx);
        if me.is_some_and(|i| self.slices.get(i).is_some_and(|s| s.params.high)) {
            return false;
        }
        let high: Vec<usize> = (0..self.slices.len())
            .filter(|&i| Some(i) != me && self.slices[i].obs.waiting && self.favoured(i))
            .collect();
        high.into_iter().any(|i| self.eligible(i, now))
    }

    /// Whether slice `i` may hold a one-launch pass at `now` (`LeaseSlot::pass`): a
    /// `priority: high` slice that does not hold the lease, shares the device, is within its
    /// ceiling and is not backing off (its claims would be ignored, and the launch would run
    /// unscheduled). Such a slice preempts any other holder as soon as it waits, so letting
    /// its first launch go before the grant changes the order of nothing, only the time the
    /// host wake-ups of that grant take out of its latency.
    pub fn may_pass(&mut self, i: usize, now: u64) -> bool {
        let Some(s) = self.slices.get(i) else {
            return false;
        };
        self.favoured(i)
            && self.slices.len() > 1
            && self.holder.map(|h| h.idx) != Some(i)
            && (s.strikes == 0 || now >= s.backoff_until)
            && self.eligible(i, now)
    }

    /// Up to when the drain of slice `i`, handed on early at `near_at` (down to its last
    /// kernel), is charged to it at most: half a quantum later while its last kernels are
    /// known to be that short (early hand-offs are made for that, [`Policy::early_ok`]);
    /// `None` (all of it, up to the report) when they are not known or longer (a retry). A
    /// later report is then the next holder's work: on a device that runs whole kernels in
    /// turn, the next holder's first 50 ms kernel can run before that last kernel, and charging
    /// the wait for the report to the drained slice gave the next holder that kernel free
    /// (31.5 % for a 30 % slice).
    pub fn early_charge_cap(&self, i: usize, near_at: u64) -> Option<u64> {
        let s = self.slices.get(i)?;
        (s.last_kernel_ns > 0 && s.last_kernel_ns <= self.quantum / 2)
            .then(|| near_at.saturating_add(self.quantum / 2))
    }

    /// Charges slice `i` the overrun `[from, to)` of a drain that completed after the next grant
    /// (see [`Policy::preempted`]); the holder granted meanwhile is charged from `to` on, or,
    /// while other drains are outstanding, from the last of their reports.
    pub fn overrun(&mut self, i: usize, from: u64, to: u64, timed_out: bool) {
        if i < self.slices.len() {
            self.charge(i, from, to);
            self.drain_ended(i, timed_out);
        }
        self.overlap_open = self.overlap_open.saturating_sub(1);
        if self.overlap_open > 0 {
            return;
        }
        if let Some(h) = &mut self.holder {
            if h.deferred {
                h.deferred = false;
                h.charged_to = h.charged_to.max(to);
                h.lease_start = h.lease_start.max(to);
                h.checked_at = h.checked_at.max(to);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const MS: u64 = 1_000_000;

    /// A fake device: slices with demand functions of time; leases are carried out instantly,
    /// the holder's "kernel" granularity is `kernel` (a revoke lands at the next kernel end).
    pub(super) struct Fake {
        pub(super) p: Policy,
        pub(super) now: u64,
        kernel: u64,
        demand: Vec<Box<dyn Fn(u64) -> bool>>,
        /// Claims demand always but never launches (a hostile `demand` word).
        liar: Vec<bool>,
        busy: Vec<u64>,
        since: u64,
        /// Sleeps to each `Keep`'s `wake_at` like the loop does, instead of deciding again
        /// every kernel (at most 1 ms): shows what a wake-up the policy forgot costs.
        sleep_to_wake: bool,
    }

    impl Fake {
        pub(super) fn new(quantum: u64, kernel: u64) -> Fake {
            Fake {
                p: Policy::new(quantum),
                now: 0,
                kernel,
                demand: Vec::new(),
                liar: Vec::new(),
                busy: Vec::new(),
                since: 0,
                sleep_to_wake: false,
            }
        }
        pub(super) fn add(
            &mut self,
            id: &str,
            params: Params,
            demand: impl Fn(u64) -> bool + 'static,
        ) {
            self.p.set_slice(id, params, self.now);
            self.demand.push(Box::new(demand));
            self.liar.push(false);
            self.busy.push(0);
        }
        fn add_liar(&mut self, id: &str, params: Params) {
            self.add(id, params, |_| false);
            *self.liar.last_mut().expect("added") = true;
        }
        fn observe(&mut self) {
            let h = self.p.holder();
            for i in 0..self.demand.len() {
                let d = (self.demand[i])(self.now);
                let obs = if self.liar[i] {
                    Observation {
                        waiting: true,
                        active: false,
                        quiet: false,
                    }
                } else {
                    Observation {
                        waiting: d && h != Some(i),
                        active: d && h == Some(i),
                        quiet: false,
                    }
                };
                self.p.observe(i, obs, self.now);
            }
            self.p.observed(self.now);
        }
        /// Runs until `end`; each step advances to the next decision.
        pub(super) fn run(&mut self, end: u64) {
            while self.now < end {
                self.observe();
                match self.p.decide(self.now) {
                    Decision::Grant(i) => self.p.granted(i, self.now),
                    Decision::Revoke | Decision::Preempt => {
                        // The current kernel finishes (non-preemptive): round up.
                        let k = self.kernel;
                        let t = self.now.div_ceil(k) * k;
                        if let Some(h) = self.p.holder() {
                            if (self.demand[h])(self.now) {
                                self.busy[h] += t - self.now;
                            }
                        }
                        self.now = t;
                        self.p.revoked(self.now, false);
                    }
                    Decision::Keep { wake_at, .. } => {
                        let most = if self.sleep_to_wake { u64::MAX } else { MS };
                        let step = wake_at.saturating_sub(self.now).clamp(1000, most);
                        let h = self.p.holder().unwrap_or(0);
                        if (self.demand[h])(self.now) {
                            self.busy[h] += step;
                        }
                        self.now += step;
                    }
                    Decision::Idle { wake_at } => {
                        let step =
                            wake_at.map_or(MS, |w| w.saturating_sub(self.now).clamp(1000, MS));
                        self.now += step;
                    }
                }
            }
        }
        pub(super) fn shares(&mut self) -> Vec<f64> {
            let span = (self.now - self.since) as f64;
            let s = self.busy.iter().map(|&b| b as f64 / span).collect();
            self.busy.iter_mut().for_each(|b| *b = 0);
            self.since = self.now;
            s
        }
    }

    pub(super) fn g(pct: u32) -> Params {
        Params {
            guarantee: pct * 100,
            ..Params::default()
        }
    }

    #[test]
    fn thirty_seventy_holds_for_small_and_large_kernels() {
        for kernel in [50_000, MS, 20 * MS] {
            let mut f = Fake::new(5 * MS, kernel);
            f.add("a", g(30), |_| true);
            f.add("b", g(70), |_| true);
            for _ in 0..3 {
                f.run(f.now + 1000 * MS);
                let s = f.shares();
                assert!((s[0] - 0.30).abs() < 0.03, "kernel {kernel}: {s:?}");
                assert!((s[1] - 0.70).abs() < 0.03, "kernel {kernel}: {s:?}");
            }
        }
    }

    /// A slice whose `demand` word always claims waiting threads but which never launches
    /// (hostile bytes over its `usage`): its neighbours keep their 30/70 split and the device
    /// its throughput, whether the liar is best effort or holds a guarantee of its own (it may
    /// waste at most that; the rest goes to the honest slices).
    #[test]
    fn false_demand_does_not_move_neighbours_shares() {
        for (hg, ag, bg) in [(0, 30, 70), (30, 21, 49)] {
            let mut f = Fake::new(5 * MS, MS);
            f.add_liar("h", g(hg));
            f.add("a", g(ag), |_| true);
            f.add("b", g(bg), |_| true);
            f.run(200 * MS);
            f.shares();
            for _ in 0..3 {
                f.run(f.now + 1000 * MS);
                let s = f.shares();
                let ab = s[1] + s[2];
                assert!((s[1] / ab - 0.30).abs() < 0.03, "liar {hg}: {s:?}");
                assert!(ab > 0.97, "liar {hg}: device wasted: {s:?}");
            }
            assert!(f.p.slices()[0].no_progress > 0);
        }
    }

    /// The rules one by one: a holder claiming demand without launching gets one grace check
    /// (a slowly woken thread), then loses the lease; its demand is ignored for a back-off that
    /// doubles per wasted lease (no grace any more: revoked at the first check, half a quantum)
    /// up to [`MAX_BACKOFF_NS`]; one launch resets it.
    #[test]
    fn no_progress_holder_is_revoked_and_backs_off() {
        let q = 5 * MS;
        let mut p = Policy::new(q);
        let h = p.set_slice("h", g(50), 0);
        let a = p.set_slice("a", g(50), 0);
        let lie = Observation {
            waiting: true,
            active: false,
            quiet: false,
        };
        let look = |p: &mut Policy, h_obs: Observation, now: u64| {
            p.observe(h, h_obs, now);
            p.observe(a, lie, now);
            p.observed(now);
        };
        p.granted(h, 0);
        look(&mut p, lie, q / 2);
        assert!(matches!(
            p.decide(q / 2),
            Decision::Keep { renew: true, .. }
        ));
        look(&mut p, lie, q);
        assert_eq!(p.decide(q), Decision::Revoke);
        assert!(!p.holder_progressed());
        p.revoked(q, false);
        assert_eq!(p.slices()[h].strikes, 1);
        assert_eq!(p.slices()[h].backoff_until, 2 * q);
        // During the back-off only `a` is seen waiting.
        look(&mut p, lie, q + 1);
        assert_eq!(p.decide(q + 1), Decision::Grant(a));
        p.granted(a, q + 1);
        p.observe(
            a,
            Observation {
                waiting: false,
                active: true,
                quiet: false,
            },
            q + 2,
        );
        p.observe(h, lie, q + 2);
        p.observed(q + 2);
        assert!(!p.slices()[h].obs.waiting);
        p.revoked(q + 2, false);
        // After it, a second lease without progress ends at the first check, and the
        // back-off doubles; it never exceeds the maximum.
        let mut now = 3 * q;
        let mut last = q;
        for k in 2..16u32 {
            look(&mut p, lie, now);
            p.observe(a, Observation::default(), now);
            p.observed(now);
            assert_eq!(p.decide(now), Decision::Grant(h), "round {k}");
            p.granted(h, now);
            let t = now + q / 2;
            look(&mut p, lie, t);
            p.observe(a, Observation::default(), t);
            p.observed(t);
            // Alone it would be checked every 100 ms; `a` waits, so at half a quantum.
            p.observe(a, lie, t);
            p.observed(t);
            assert_eq!(p.decide(t), Decision::Revoke, "round {k}");
            p.revoked(t, false);
            let b = p.slices()[h].backoff_until - t;
            assert!(
                b == (last * 2).min(MAX_BACKOFF_NS),
                "round {k}: back-off {b}"
            );
            last = b;
            now = p.slices()[h].backoff_until;
        }
        assert_eq!(last, MAX_BACKOFF_NS);
        // One launch ends the strikes.
        look(&mut p, lie, now);
        p.observe(a, Observation::default(), now);
        p.observed(now);
        assert_eq!(p.decide(now), Decision::Grant(h));
        p.granted(h, now);
        p.observe(
            h,
            Observation {
                waiting: false,
                active: true,
                quiet: false,
            },
            now + 1,
        );
        p.observe(a, Observation::default(), now + 1);
        p.observed(now + 1);
        assert!(matches!(p.decide(now + 1), Decision::Keep { .. }));
        assert!(p.holder_progressed());
        assert_eq!(p.slices()[h].strikes, 0);
    }

    /// Drains that time out shorten the slice's next drain bound (halving, down to a quantum);
    /// one reported in time restores it.
    #[test]
    fn drain_bound_halves_with_timeouts_and_recovers() {
        let q = 5 * MS;
        let base = 250 * MS;
        let mut p = Policy::new(q);
        let h = p.set_slice("h", g(50), 0);
        assert_eq!(p.drain_bound(h, base), base);
        let mut want = base;
        for k in 0..8 {
            p.granted(h, k * MS);
            p.revoked(k * MS + 1, true);
            want = (want / 2).max(q);
            assert_eq!(p.drain_bound(h, base), want, "after {} timeouts", k + 1);
        }
        assert_eq!(want, q);
        assert_eq!(p.slices()[h].drain_timeouts, 8);
        // A background (preempted / early) drain counts the same way.
        p.overrun(h, 0, 1, false);
        assert_eq!(p.drain_bound(h, base), base);
        assert_eq!(p.drain_bound(usize::MAX, base), base);
    }

    /// A light slice (best effort beside 100 % of guarantees, weight 1 bp) charged one lease
    /// jumps far ahead in virtual time; a slice coming back from idle must not be lifted up to
    /// it (it would then tie with the light slice and lose its weight).
    #[test]
    fn light_holder_does_not_drag_the_virtual_clock() {
        let mut f = Fake::new(5 * MS, MS);
        f.add("be", Params::default(), |_| true);
        f.add("a", g(30), |t| t % (100 * MS) < 80 * MS);
        f.add("b", g(70), |_| true);
        f.run(200 * MS);
        f.shares();
        f.run(f.now + 2000 * MS);
        let s = f.shares();
        assert!(s[0] < 0.02, "best effort took {s:?}");
        assert!(s[1] > 0.15, "a lost its weight: {s:?}");
    }

    #[test]
    fn three_and_four_tenants() {
        let mut f = Fake::new(5 * MS, MS);
        f.add("a", g(20), |_| true);
        f.add("b", g(30), |_| true);
        f.add("c", g(50), |_| true);
        f.run(2000 * MS);
        let s = f.shares();
        for (got, want) in s.iter().zip([0.2, 0.3, 0.5]) {
            assert!((got - want).abs() < 0.02, "{s:?}");
        }
        let mut f = Fake::new(5 * MS, MS);
        for id in ["a", "b", "c", "d"] {
            f.add(id, g(25), |_| true);
        }
        f.run(2000 * MS);
        let s = f.shares();
        let sum: f64 = s.iter().sum();
        let sq: f64 = s.iter().map(|x| x * x).sum();
        assert!(sum * sum / (4.0 * sq) > 0.99, "{s:?}");
    }

    #[test]
    fn ceiling_holds_alone_and_best_effort_shares_the_rest() {
        let mut f = Fake::new(5 * MS, MS);
        f.add(
            "capped",
            Params {
                limit: 4000,
                ..Params::default()
            },
            |_| true,
        );
        f.run(3000 * MS);
        let s = f.shares();
        assert!(s[0] <= 0.42 && s[0] > 0.37, "{s:?}");
        f.add("be", Params::default(), |_| true);
        f.run(f.now + 3000 * MS);
        let s = f.shares();
        assert!(s[0] <= 0.42 && s[1] > 0.55, "{s:?}");
    }

    /// Spare time goes to busy slices by weight, a capped one included up to its ceiling: a
    /// capped slice waiting for its bucket to refill wakes the loop when it has, and takes the
    /// next lease, instead of waiting for an uncapped holder's next activity check.
    #[test]
    fn a_capped_slice_gets_its_part_of_spare_time_up_to_its_ceiling() {
        for (limit, want) in [(6000, 0.50), (4000, 0.40)] {
            let mut f = Fake::new(5 * MS, MS);
            f.sleep_to_wake = true;
            f.add(
                "batch",
                Params {
                    guarantee: 3000,
                    limit,
                    ..Params::default()
                },
                |_| true,
            );
            f.add("trainer", g(30), |_| true);
            f.run(500 * MS);
            f.shares();
            f.run(f.now + 3000 * MS);
            let s = f.shares();
            assert!((s[0] - want).abs() < 0.03, "limit {limit}: {s:?}");
            assert!(s[0] + s[1] > 0.97, "limit {limit}: device wasted: {s:?}");
        }
    }

    #[test]
    fn idle_time_flows_to_busy_slices_and_back() {
        let mut f = Fake::new(5 * MS, MS);
        f.add("a", g(30), |_| true);
        f.add("b", g(70), |t| !(2000 * MS..4000 * MS).contains(&t));
        f.run(2000 * MS);
        let s = f.shares();
        assert!((s[0] - 0.3).abs() < 0.03, "{s:?}");
        f.run(4000 * MS);
        let s = f.shares();
        assert!(s[0] > 0.97, "a gets b's idle time: {s:?}");
        // b comes back and is not starved nor favoured for its idle period.
        f.run(4200 * MS);
        let s = f.shares();
        assert!((s[1] - 0.7).abs() < 0.05, "{s:?}");
    }

    #[test]
    fn update_takes_effect_at_once() {
        let mut f = Fake::new(5 * MS, MS);
        f.add("a", g(30), |_| true);
        f.add("b", g(70), |_| true);
        f.run(1000 * MS);
        f.shares();
        f.p.set_slice("a", g(70), f.now);
        f.p.set_slice("b", g(30), f.now);
        f.run(f.now + 50 * MS);
        f.shares();
        f.run(f.now + 500 * MS);
        let s = f.shares();
        assert!((s[0] - 0.7).abs() < 0.04, "{s:?}");
    }

    /// A pass goes only to a high-priority slice that shares the device without holding it
    /// and is within its ceiling.
    #[test]
    fn a_pass_is_for_a_high_slice_beside_another_that_may_run() {
        let mut p = Policy::new(5 * MS);
        let hi = p.set_slice(
            "infer",
            Params {
                high: true,
                ..g(10)
            },
            0,
        );
        assert!(!p.may_pass(hi, 0), "alone on the device");
        let lo = p.set_slice("train", g(50), 0);
        assert!(p.may_pass(hi, 0));
        assert!(!p.may_pass(lo, 0), "not high");
        p.granted(hi, 0);
        assert!(!p.may_pass(hi, MS), "it holds the lease");
        p.revoked(2 * MS, false);
        assert!(p.may_pass(hi, 2 * MS));
        // Capped at 1 %: after its 2 ms lease its bucket is empty for a while.
        p.set_slice(
            "infer",
            Params {
                high: true,
                limit: 100,
                ..g(1)
            },
            2 * MS,
        );
        p.granted(hi, 2 * MS);
        p.revoked(200 * MS, false);
        assert!(!p.may_pass(hi, 200 * MS), "over its ceiling");
        assert!(p.may_pass(hi, 200 * MS + 100_000 * MS), "refilled");
    }

    #[test]
    fn high_priority_preempts_at_next_kernel_boundary() {
        let mut p = Policy::new(5 * MS);
        let lo = p.set_slice("train", g(50), 0);
        let hi = p.set_slice(
            "infer",
            Params {
                high: true,
                ..g(10)
            },
            0,
        );
        p.observe(
            lo,
            Observation {
                waiting: true,
                active: false,
                quiet: false,
            },
            0,
        );
        p.observed(0);
        assert_eq!(p.decide(0), Decision::Grant(lo));
        p.granted(lo, 0);
        p.observe(
            hi,
            Observation {
                waiting: true,
                active: false,
                quiet: false,
            },
            MS,
        );
        p.observed(MS);
        assert_eq!(
            p.decide(MS),
            Decision::Preempt,
            "revoked well before the quantum"
        );
        p.revoked(2 * MS, false);
        assert_eq!(p.decide(2 * MS), Decision::Grant(hi));
    }

    /// Regression: a high-priority grant made while the preempted holder's queue still drains
    /// was charged from its grant, and the drain's overrun was charged to the preempted holder
    /// too, so the overlap counted twice and the shares summed above 100 %.
    #[test]
    fn preemption_overlap_is_charged_once() {
        let mut p = Policy::new(5 * MS);
        let lo = p.set_slice("train", g(50), 0);
        // Guaranteed as much as the trainer: it is served less (8 ms a round against 10), so
        // it stays favoured (within its lead, `priority.rs`) and preempts every round.
        let hi = p.set_slice(
            "infer",
            Params {
                high: true,
                ..g(50)
            },
            0,
        );
        let waiting = Observation {
            waiting: true,
            active: false,
            quiet: false,
        };
        let busy = Observation {
            waiting: false,
            active: true,
            quiet: false,
        };
        let mut now = 0;
        let mut t = 0u64;
        // 1 s of rounds: train holds 9 ms, infer arrives and preempts it; train's queue drains
        // 1 ms into infer's lease; infer runs on and goes idle.
        while now < 1000 * MS {
            p.observe(lo, waiting, now);
            p.observe(hi, Observation::default(), now);
            p.observed(now);
            assert_eq!(p.decide(now), Decision::Grant(lo));
            p.granted(lo, now);
            now += 9 * MS;
            p.observe(lo, busy, now);
            p.observe(hi, waiting, now);
            p.observed(now);
            assert_eq!(p.decide(now), Decision::Preempt);
            p.preempted(now);
            let revoked_at = now;
            assert_eq!(p.decide(now), Decision::Grant(hi));
            p.granted(hi, now);
            // A decision while the neighbour still drains charges infer nothing yet.
            now += MS / 2;
            p.observe(lo, Observation::default(), now);
            p.observe(hi, busy, now);
            p.observed(now);
            assert!(matches!(p.decide(now), Decision::Keep { .. }));
            now += MS / 2;
            p.overrun(lo, revoked_at, now, false);
            now += 3 * MS;
            p.observe(lo, waiting, now);
            p.observe(hi, busy, now);
            p.observed(now);
            assert!(matches!(p.decide(now), Decision::Keep { .. }));
            // Idle at its next activity check: revoked.
            now += 5 * MS;
            p.observe(lo, waiting, now);
            p.observe(hi, Observation::default(), now);
            p.observed(now);
            assert_eq!(p.decide(now), Decision::Revoke);
            p.revoked(now, false);
            t = now;
        }
        let total: u64 = p.slices().iter().map(|s| s.charged_ns).sum();
        assert!(total <= t, "charged {total} ns in {t} ns of wall time");
        let sum: f64 = p
            .slices()
            .iter()
            .map(|s| s.window.share(t, 1000 * MS))
            .sum();
        assert!(sum <= 1.0 + 1e-9, "shares sum to {sum}");
        // train pays its 10 ms per round (lease + drain), infer only what ran after the drain.
        let rounds = p.slices()[lo].grants;
        assert_eq!(p.slices()[lo].charged_ns, rounds * 10 * MS);
        assert!(p.slices()[hi].charged_ns >= rounds * 3 * MS);
    }

    /// An idle holder (the gate reports it quiet: it launched, its work completed, nothing
    /// launched for the linger) is revoked at once when another slice waits — not at the next
    /// activity check — and the loop is told so; it keeps the lease while nobody waits, and a
    /// quiet word without any launch under the lease (a claim, not progress) does not count.
    /// Charging stays exact: the holder pays up to the revoke, then its (background) drain,
    /// and the next holder only from the drain report on.
    #[test]
    fn what_decide_learns_is_kept_when_it_revokes() {
        // Issue 16 item 2: `decide` once worked on a copy of the holder and lost what it had
        // learnt on a return path that forgot to write it back. Progress first seen in the
        // very call that ends the lease must reach `holder_progressed` (the loop waits for
        // the drain only then) and clear the strikes.
        let q = 5 * MS;
        let mut p = Policy::new(q);
        let a = p.set_slice("a", g(50), 0);
        let b = p.set_slice("b", g(50), 0);
        let obs = |waiting, active| Observation {
            waiting,
            active,
            quiet: false,
        };
        p.granted(a, 0);
        p.slices[a].strikes = 3;
        // First look at a's activity only at the lease's end, with b waiting: revoked, and
        // the launch it saw is kept.
        let end = 2 * q;
        p.observe(a, obs(false, true), end);
        p.observe(b, obs(true, false), end);
        p.observed(end);
        assert_eq!(p.decide(end), Decision::Revoke);
        assert!(p.holder_progressed());
        assert_eq!(p.slices[a].strikes, 0);
        assert_eq!(p.slices()[a].charged_ns, end, "charged up to the decision");
    }

    #[test]
    fn quiet_holder_is_revoked_at_once_when_others_wait() {
        let q = 5 * MS;
        let mut p = Policy::new(q);
        let s = p.set_slice("s", g(50), 0);
        let r = p.set_slice("r", g(20), 0);
        let obs = |waiting, active, quiet| Observation {
            waiting,
            active,
            quiet,
        };
        let look = |p: &mut Policy, ro: Observation, so: Observation, now: u64| {
            p.observe(r, ro, now);
            p.observe(s, so, now);
            p.observed(now);
        };
        p.granted(r, 0);
        // Quiet claimed before any launch under this lease: kept.
        look(
            &mut p,
            obs(false, false, true),
            obs(true, false, false),
            MS / 10,
        );
        assert!(matches!(p.decide(MS / 10), Decision::Keep { .. }));
        assert!(!p.revoke_was_quiet());
        // It launches (seen active), then goes quiet 1.2 ms in while s waits: revoked then,
        // long before the first activity check at half a quantum.
        look(&mut p, obs(false, true, false), obs(true, false, false), MS);
        assert!(matches!(p.decide(MS), Decision::Keep { .. }));
        let t = MS + MS / 5;
        look(&mut p, obs(false, true, true), obs(true, false, false), t);
        assert_eq!(p.decide(t), Decision::Revoke);
        assert!(p.revoke_was_quiet());
        assert!(!p.revoke_was_quiet(), "reading clears it");
        assert_eq!(p.quiet_revokes, 1);
        // The loop hands on at once; r's (empty) drain is reported 300 µs later.
        p.preempted(t);
        look(&mut p, obs(false, false, false), obs(true, false, false), t);
        assert_eq!(p.decide(t), Decision::Grant(s));
        p.granted(s, t);
        p.overrun(r, t, t + 300_000, false);
        assert_eq!(p.slices()[r].charged_ns, t + 300_000);
        let end = t + 3 * MS;
        look(
            &mut p,
            obs(false, false, false),
            obs(false, true, false),
            end,
        );
        p.decide(end);
        assert_eq!(p.slices()[s].charged_ns, end - (t + 300_000));
        // Quiet with nobody waiting: kept.
        let mut p = Policy::new(q);
        let s = p.set_slice("s", g(50), 0);
        let r = p.set_slice("r", g(20), 0);
        p.granted(r, 0);
        p.observe(r, obs(false, true, false), MS);
        p.observe(s, obs(false, false, false), MS);
        p.observed(MS);
        p.decide(MS);
        p.observe(r, obs(false, false, true), 2 * MS);
        p.observe(s, obs(false, false, false), 2 * MS);
        p.observed(2 * MS);
        assert!(matches!(p.decide(2 * MS), Decision::Keep { .. }));
        assert!(!p.revoke_was_quiet());
    }

    /// An idle holder's time goes to a waiting slice within one quantum: activity is checked
    /// every half quantum while others wait, and a holder that launched nothing since the last
    /// check is revoked. Worst case: it stops just after a check (the next check still sees
    /// that launch), so it is revoked at the check after that.
    #[test]
    fn idle_holder_is_revoked_within_one_quantum_when_others_wait() {
        for stop in [2_600_000u64, 4_900_000, 5_100_000, 7_000_000] {
            let mut p = Policy::new(5 * MS);
            let a = p.set_slice("a", g(30), 0);
            let b = p.set_slice("b", g(70), 0);
            p.granted(b, 0);
            let mut renewed_at = 0u64;
            let mut now = 0u64;
            let revoked_at = loop {
                now += MS / 10;
                assert!(now < 100 * MS, "never revoked (stop {stop})");
                // b launched since its last renewal while it was still running.
                let active = renewed_at < stop;
                p.observe(
                    b,
                    Observation {
                        waiting: false,
                        active: active && now > renewed_at,
                        quiet: false,
                    },
                    now,
                );
                p.observe(
                    a,
                    Observation {
                        waiting: true,
                        active: false,
                        quiet: false,
                    },
                    now,
                );
                p.observed(now);
                match p.decide(now) {
                    Decision::Revoke => break now,
                    Decision::Keep { renew: true, .. } => renewed_at = now,
                    Decision::Keep { .. } => {}
                    d => panic!("unexpected {d:?}"),
                }
            };
            assert!(
                revoked_at - stop <= 5 * MS,
                "idle at {stop} ns, revoked at {revoked_at} ns"
            );
        }
    }

    #[test]
    fn single_busy_slice_keeps_the_lease_and_idle_holder_is_revoked() {
        let mut p = Policy::new(5 * MS);
        let a = p.set_slice("a", Params::default(), 0);
        let busy = Observation {
            waiting: false,
            active: true,
            quiet: false,
        };
        p.observe(
            a,
            Observation {
                waiting: true,
                active: false,
                quiet: false,
            },
            0,
        );
        assert_eq!(p.decide(0), Decision::Grant(a));
        p.granted(a, 0);
        // Alone, it is checked every 100 ms (no per-quantum wake-ups) and renewed while busy.
        p.observe(a, busy, 5 * MS);
        assert!(matches!(
            p.decide(5 * MS),
            Decision::Keep {
                renew: false,
                wake_at: 100_000_000
            }
        ));
        for k in 1..10 {
            p.observe(a, busy, k * 100 * MS);
            assert!(matches!(
                p.decide(k * 100 * MS),
                Decision::Keep { renew: true, .. }
            ));
        }
        p.observe(a, Observation::default(), 1000 * MS);
        assert_eq!(p.decide(1000 * MS), Decision::Revoke);
        p.revoked(1000 * MS, false);
        assert!(matches!(
            p.decide(1000 * MS),
            Decision::Idle { wake_at: None }
        ));
        assert_eq!(p.handoffs, 1);
    }

    #[test]
    fn deep_queue_overrun_is_charged() {
        // "a" overruns by 60 ms after each revoke (a deep queue); charged from grant to drain,
        // it still gets 30 %.
        let mut p = Policy::new(5 * MS);
        let a = p.set_slice("a", g(30), 0);
        let b = p.set_slice("b", g(70), 0);
        let (mut now, mut got) = (0u64, [0u64; 2]);
        let w = Observation {
            waiting: true,
            active: true,
            quiet: false,
        };
        while now < 20_000 * MS {
            p.observe(a, w, now);
            p.observe(b, w, now);
            p.observed(now);
            match p.decide(now) {
                Decision::Grant(i) => p.granted(i, now),
                Decision::Keep { wake_at, .. } => {
                    got[p.holder().unwrap_or(0)] += wake_at - now;
                    now = wake_at;
                }
                Decision::Revoke | Decision::Preempt => {
                    let h = p.holder().unwrap_or(0);
                    let over = if h == a { 60 * MS } else { 0 };
                    got[h] += over;
                    now += over;
                    p.revoked(now, false);
                }
                Decision::Idle { .. } => now += MS,
            }
        }
        let share = got[0] as f64 / now as f64;
        assert!((share - 0.3).abs() < 0.02, "{share}");
    }

    /// A holder granted while its predecessor's last (long) kernel still runs keeps the lease
    /// until that drain is reported, and its lease is timed from then: timed from the grant, it
    /// would end before its own first kernel ran.
    #[test]
    fn deferred_lease_starts_when_the_previous_drain_is_reported() {
        let mut p = Policy::new(5 * MS);
        // b lighter than a, so that it is not owed more than its lease after a's long drain
        // (it would keep the lease: `policy/handoff.rs`).
        let a = p.set_slice("a", g(90), 0);
        let b = p.set_slice("b", g(10), 0);
        let w = Observation {
            waiting: true,
            active: false,
            quiet: false,
        };
        let act = Observation {
            waiting: false,
            active: true,
            quiet: false,
        };
        p.granted(a, 0);
        p.preempted(5 * MS);
        p.granted(b, 5 * MS);
        // a's last kernel runs 20 ms more; a waits again meanwhile.
        for t in (6..25).map(|k| k * MS) {
            p.observe(a, w, t);
            p.observe(b, act, t);
            p.observed(t);
            assert!(
                matches!(p.decide(t), Decision::Keep { renew: false, .. }),
                "b revoked at {t} before its lease began"
            );
        }
        p.overrun(a, 5 * MS, 25 * MS, false);
        assert_eq!(p.slices()[a].charged_ns, 25 * MS);
        // b's lease (5 ms) runs from 25 ms.
        p.observe(a, w, 28 * MS);
        p.observe(b, act, 28 * MS);
        p.observed(28 * MS);
        assert!(matches!(p.decide(28 * MS), Decision::Keep { .. }));
        p.observe(a, w, 30 * MS);
        p.observe(b, act, 30 * MS);
        p.observed(30 * MS);
        assert_eq!(p.decide(30 * MS), Decision::Revoke);
        assert_eq!(p.slices()[b].charged_ns, 5 * MS);
    }

    /// A slice handed on early (down to its last 1 ms kernel) whose drain reports only after
    /// the next holder's 50 ms kernel ran is charged half a quantum past the hand-off; the
    /// next holder from there, its lease starting then. Not while its last kernels are not
    /// known to be short.
    #[test]
    fn an_early_drain_reported_late_charges_the_next_holder_from_half_a_quantum() {
        let mut p = Policy::new(5 * MS);
        let a = p.set_slice("a", g(30), 0);
        let b = p.set_slice("b", g(70), 0);
        assert_eq!(
            p.early_charge_cap(b, 6 * MS),
            None,
            "last kernels not known yet"
        );
        p.record_last_kernel(b, 40 * MS);
        assert_eq!(p.early_charge_cap(b, 6 * MS), None, "last kernels long");
        for _ in 0..20 {
            p.record_last_kernel(b, MS);
        }
        p.granted(b, 0);
        p.preempted(6 * MS);
        p.granted(a, 6 * MS);
        let to = p.early_charge_cap(b, 6 * MS).expect("last kernels short");
        assert_eq!(to, 6 * MS + 5 * MS / 2);
        p.overrun(b, 6 * MS, to, false);
        assert_eq!(p.slices()[b].charged_ns, to);
        let w = Observation {
            waiting: true,
            active: true,
            quiet: false,
        };
        p.observe(a, w, 57 * MS);
        p.observe(b, w, 57 * MS);
        p.observed(57 * MS);
        // a's lease began at `to`: over by 57 ms, revoked; charged from `to`.
        assert_eq!(p.decide(57 * MS), Decision::Revoke);
        assert_eq!(p.slices()[a].charged_ns, 57 * MS - to);
    }

    #[test]
    fn a_high_slice_let_in_behind_two_drains_is_charged_from_the_last_report() {
        let mut p = Policy::new(5 * MS);
        let a = p.set_slice("a", g(30), 0);
        let b = p.set_slice("b", g(30), 0);
        let h = p.set_slice(
            "h",
            Params {
                guarantee: 500,
                high: true,
                ..Params::default()
            },
            0,
        );
        let w = Observation {
            waiting: true,
            active: false,
            quiet: false,
        };
        let idle = Observation::default();
        // a holds and is revoked with a 100 ms graph still running; b is granted behind it.
        p.granted(a, 0);
        p.preempted(5 * MS);
        p.granted(b, 5 * MS);
        p.observe(h, idle, 6 * MS);
        p.observed(6 * MS);
        assert!(!p.high_waits(6 * MS), "nobody high waits");
        // The high-priority slice starts waiting while b is still deferred behind a's drain.
        p.observe(h, w, 8 * MS);
        p.observed(8 * MS);
        assert!(p.high_waits(8 * MS));
        assert_eq!(p.decide(8 * MS), Decision::Preempt);
        // b is preempted before its charging began: it is charged nothing up to there.
        p.preempted(8 * MS);
        assert_eq!(p.slices()[b].charged_ns, 0);
        p.granted(h, 8 * MS);
        assert!(!p.high_waits(9 * MS), "the holder is the high slice");
        // b's drain reports first, a's later: a pays its span; b's drain began inside a's and
        // is charged from a's report on (nothing here); h only from the last report.
        p.overrun(a, 5 * MS, 105 * MS, false);
        assert_eq!(p.slices()[a].charged_ns, 105 * MS);
        p.observe(h, w, 110 * MS);
        p.observed(110 * MS);
        assert!(
            matches!(p.decide(110 * MS), Decision::Keep { renew: false, .. }),
            "h still deferred while b's drain is outstanding"
        );
        assert_eq!(p.slices()[h].charged_ns, 0);
        p.overrun(b, 105 * MS, 105 * MS, false);
        assert_eq!(p.slices()[b].charged_ns, 0);
        p.observe(h, w, 111 * MS);
        p.observed(111 * MS);
        let _ = p.decide(111 * MS);
        assert_eq!(p.slices()[h].charged_ns, 6 * MS, "charged from 105 ms on");
    }

    #[test]
    fn early_hand_off_only_while_last_kernels_are_short() {
        let mut p = Policy::new(5 * MS);
        let a = p.set_slice("a", g(30), 0);
        assert!(p.early_ok(a), "unknown kernels: early");
        p.record_last_kernel(a, MS);
        assert!(p.early_ok(a), "1 ms kernels: early");
        for _ in 0..8 {
            p.record_last_kernel(a, 20 * MS);
        }
        let tries: Vec<bool> = (0..32).map(|_| p.early_ok(a)).collect();
        let n = tries.iter().filter(|&&t| t).count();
        assert_eq!(n, 2, "20 ms kernels: one try in 16 ({tries:?})");
        for _ in 0..8 {
            p.record_last_kernel(a, MS / 2);
        }
        assert!(p.early_ok(a), "kernels got short again");
        assert!(!p.early_ok(7), "no such slice");
    }

    #[test]
    fn drain_history_is_bounded_and_keeps_the_latest() {
        let mut p = Policy::new(5 * MS);
        let a = p.set_slice("a", g(10), 0);
        for k in 0..(DRAIN_HISTORY as u64 * 3) {
            p.record_drain(a, k);
        }
        p.record_drain(7, 1); // no such slice: ignored
        let d = &p.slices()[a].drains;
        assert!(d.len() <= DRAIN_HISTORY && d.len() >= DRAIN_HISTORY / 2);
        assert_eq!(d.last(), Some(&(DRAIN_HISTORY as u64 * 3 - 1)));
    }

    #[test]
    fn remove_keeps_indices_consistent() {
        let mut p = Policy::new(5 * MS);
        p.set_slice("a", g(10), 0);
        let b = p.set_slice("b", g(10), 0);
        p.granted(b, 0);
        assert!(p.remove_slice("a").is_some());
        assert_eq!(p.holder(), Some(0));
        assert_eq!(p.slices()[0].id, "b");
    }
}
