//! The real scheduler loop of one device: one thread that reads the slices' demand from their
//! `usage` files, asks the [`Policy`] what to do and carries it out on the `lease` files —
//! grant (new grant id, `HELD`, wake), renew (generation only, no wake), revoke (clear `HELD`,
//! wake, then wait for the slice's processes to report their queued work drained, bounded).
//! It sleeps in `futex_waitv` on every slice's demand word and its control word, so an idle
//! device costs no CPU.

use super::futex::{self, WaitWord, WAITV_MAX};
use super::policy::{Decision, Observation, Params, Policy, MAX_DEMAND};
use super::status::{DeviceSched, SliceShare};
use super::wakes::WakeBudget;
use gpuslice_region::lease::sched::Reading;
use gpuslice_region::{LeaseWriter, Usage, MAX_PROCS};
use std::path::PathBuf;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A change for the loop.
pub enum Cmd {
    /// Schedule a slice on this device: its directory and its entry in the slice's files.
    Add {
        /// Slice id.
        id: String,
        /// Slice directory.
        dir: PathBuf,
        /// Entry index in the slice's files.
        entry: usize,
        /// Shares.
        params: Params,
    },
    /// New shares (live resize).
    Update {
        /// Slice id.
        id: String,
        /// Shares.
        params: Params,
    },
    /// Stop scheduling a slice; the ack is sent once it no longer holds the lease.
    Remove {
        /// Slice id.
        id: String,
        /// Acknowledgement.
        ack: Sender<()>,
    },
    /// End the loop.
    Stop,
}

/// Shared between the loop and the [`super::Scheduler`].
pub struct Ctl {
    /// Bumped (and woken) when commands are queued.
    pub word: AtomicU32,
    /// Pending commands.
    pub cmds: Mutex<Vec<Cmd>>,
    /// The last published status.
    pub status: Mutex<DeviceSched>,
}

impl Ctl {
    /// Queues a command and wakes the loop.
    pub fn send(&self, c: Cmd) {
        self.cmds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(c);
        self.word.fetch_add(1, Release);
        futex::wake_private(&self.word);
    }
}

struct SliceRt {
    lease: LeaseWriter,
    usage: Usage,
    entry: usize,
    /// The one-launch pass armed in the slice's lease slot (the id of its next grant; 0 =
    /// none).
    pass: u32,
    /// Its wakes of the loop ([`super::wakes`]).
    wakes: WakeBudget,
    /// Its words as the last decision saw them ([`Loop::observe`]): the loop sleeps until one
    /// differs from these, so a change made while it decided wakes it at once.
    seen: Reading,
}

/// The scheduler half of the lease protocol over one slice's words.
type Sched<'a> = gpuslice_region::lease::sched::Sched<'a, AtomicU32, AtomicU64>;

impl SliceRt {
    /// The scheduler half over this slice's words (`None` only for an entry beyond the
    /// files' slots, which [`Cmd::Add`] refuses).
    fn sched(&self) -> Option<Sched<'_>> {
        Some(Sched::new(
            self.lease.slot(self.entry)?,
            self.usage.lease_words(self.entry)?,
        ))
    }
    /// What the slice's words say now (all zero without them).
    fn read(&self) -> Reading {
        self.sched().map(|s| s.read()).unwrap_or_default()
    }
}

/// Launches each process may keep queued on a shared device at most (`LeaseSlot::max_queue`);
/// the gate keeps fewer: about 8 ms of device time by its measure of its launches' lengths
/// (at least one launch), so 1 ms kernels queue 8 and 50 µs kernels this many.
pub const SHARED_QUEUE: u32 = 64;

/// Launches a slice may keep queued beside a `priority: high` slice: as many as elsewhere; what
/// bounds them there is [`HIGH_NEIGHBOUR_AHEAD_US`].
pub const HIGH_NEIGHBOUR_QUEUE: u32 = SHARED_QUEUE;

/// Device time, µs, a launch of a slice beside a `priority: high` slice may have queued ahead
/// of it (`LeaseSlot::ahead_us`): its process keeps the next kernel back until the running one
/// is about to end, so a revoke leaves at most this plus one launch on the device. A
/// high-priority request then waits for at most that on either engine model: on a
/// time-slicing device the neighbour's context keeps its engine slice (2 ms) while it has
/// work, so an eagerly queued second 1 ms kernel cost the request up to a whole slice. Keeping
/// a queue of one instead idled the device for a host round trip per kernel (61–65 % for the
/// neighbour); keeping the next launch back costs nothing while the host wakes within this
/// margin. See docs/scheduling.md, "Queue bound".
pub const HIGH_NEIGHBOUR_AHEAD_US: u32 = 500;

/// How long a revoked slice may take to report its queued work drained before it is charged the
/// whole wait and the lease moves on anyway.
pub fn drain_timeout(quantum: u64) -> u64 {
    (quantum * 50).clamp(100_000_000, 250_000_000)
}

/// The `[scheduler]` settings a device loop's policy takes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tuning {
    /// [`Policy::set_high_linger`].
    pub high_linger_ns: u64,
    /// [`Policy::set_high_repay_turns`].
    pub high_repay_turns: bool,
}

/// Runs the loop for device `index` until [`Cmd::Stop`]; `realtime` is the `SCHED_FIFO`
/// priority the calling thread runs at (0 = none), for the status.
pub fn run(index: u32, quantum_ns: u64, realtime: u32, tuning: Tuning, ctl: Arc<Ctl>) {
    let mut lp = Loop {
        index,
        realtime,
        quick_wakes: std::cell::Cell::new(0),
        wakeups: 0,
        ctl_seen: 0,
        policy: {
            let mut p = Policy::new(quantum_ns);
            p.set_holds(holds());
            p.set_high_linger(tuning.high_linger_ns);
            p.set_high_repay_turns(tuning.high_repay_turns);
            p
        },
        rt: Vec::new(),
        ctl,
        // Grant ids start somewhere new after a restart, so stale `pending` tags left by the
        // previous arbiter never match a fresh grant.
        grant_seq: crate::convert::low_u32(futex::now_ns() >> 10) | 1,
        handoff_ns: Vec::new(),
        free_since: None,
        last_publish: 0,
        high_present: false,
        active_until: 0,
        draining: Vec::new(),
        reporting: Vec::new(),
        drain_floor: 0,
        watchers: Vec::new(),
    };
    lp.main();
    lp.stop_watchers();
}

/// A revoked slice whose queued work has not been reported complete yet.
struct Drain {
    id: String,
    grant: u32,
    start: u64,
    /// Charged to the slice up to here when it was left to the background; the rest, up to
    /// its report, when reported.
    charged_to: u64,
    deadline: u64,
    /// When the slice was down to its last kernel and the lease was handed on (early).
    near_at: Option<u64>,
    /// Charged up to here at most, reported or not ([`Policy::early_charge_cap`]).
    cap: Option<u64>,
    /// When the loop saw it reported (or timed out: the flag), before it was charged.
    over: Option<(u64, bool)>,
}

/// A helper thread that waits on the demand words the loop's own `futex_waitv` cannot hold
/// (beyond [`WAITV_MAX`] − 1) and bumps the loop's control word when one changes.
struct Watcher {
    stop: Arc<AtomicU32>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Demand words the loop waits on itself (the control word takes one slot).
const OWN_WORDS: usize = WAITV_MAX - 1;

/// Drain waits in a row that may return at once before the loop sleeps between checks.
const QUICK_WAKES_BEFORE_SLEEP: u32 = 16;

struct Loop {
    index: u32,
    /// `SCHED_FIFO` priority of this thread (0 = normal), published in the status.
    realtime: u32,
    /// Drain waits in a row that returned at once ([`Loop::wait_pending`]).
    quick_wakes: std::cell::Cell<u32>,
    /// Times the loop's sleep returned, ever (status).
    wakeups: u64,
    /// The control word as read before the queue was last taken (what the sleep waits on).
    ctl_seen: u32,
    policy: Policy,
    rt: Vec<SliceRt>,
    ctl: Arc<Ctl>,
    grant_seq: u32,
    handoff_ns: Vec<u64>,
    free_since: Option<u64>,
    last_publish: u64,
    high_present: bool,
    /// Keep republishing status until the 10 s window has forgotten the last lease.
    active_until: u64,
    /// Revoked slices' drains not charged yet, in the order they began. More than one only
    /// when a high-priority slice was let in while an earlier drain still ran.
    draining: Vec<Drain>,
    /// Drains charged up to their cap but not reported yet (watched for their times only).
    reporting: Vec<Drain>,
    /// Report of the last drain charged: a drain that began before it is charged from there.
    drain_floor: u64,
    watchers: Vec<Watcher>,
}

impl Loop {
    fn main(&mut self) {
        loop {
            // Read before taking the queue: a command queued after this changes the word, so
            // the sleep below returns at once instead of missing it.
            self.ctl_seen = self.ctl.word.load(Acquire);
            if !self.apply_cmds() {
                self.revoke_holder();
                return;
            }
            self.check_drain(false);
            let now = futex::now_ns();
            self.observe(now);
            let decision = self.policy.decide(now);
            if !matches!(decision, Decision::Keep { .. } | Decision::Idle { .. }) {
                tracing::trace!(
                    t = now,
                    ?decision,
                    quiet = self.policy.revoke_was_quiet(),
                    "decided"
                );
            }
            let wake_at = match decision {
                Decision::Grant(i) => {
                    self.grant(i, now);
                    continue;
                }
                Decision::Revoke => {
                    // Hand on early only when someone waits to be granted.
                    let others = self.policy.anyone_waiting_but_holder();
                    if self.policy.revoke_was_quiet() && others {
                        // An idle holder has nothing queued: the next slice is granted at
                        // once and this one's (empty) drain is reported in the background,
                        // charged to it up to the report (the next holder from there on).
                        self.hand_on_now();
                        continue;
                    }
                    if others && early_handoff() && self.policy.holder_shallow() {
                        // Its queue is about one short launch (`policy/handoff.rs`): the
                        // same, without waiting for its gate to say so first.
                        self.hand_on_now();
                        continue;
                    }
                    self.revoke_holder_early(others && early_handoff());
                    continue;
                }
                Decision::Preempt => {
                    // Let the high-priority slice in at once, without waiting for this
                    // holder's drain or an earlier one; each is charged when it reports.
                    self.hand_on_now();
                    continue;
                }
                Decision::Keep { renew, wake_at } => {
                    if renew {
                        if let Some(s) = self.policy.holder().and_then(|h| self.rt[h].sched()) {
                            s.renew();
                        }
                    }
                    Some(wake_at)
                }
                Decision::Idle { wake_at } => {
                    // Hand-off time is measured only from a revoke straight to the next grant.
                    self.free_since = None;
                    wake_at
                }
            };
            self.arm_passes(now);
            self.publish(now, false);
            if self.policy.holder().is_none() && self.last_publish < self.active_until {
                self.publish(now, now.saturating_sub(self.last_publish) >= 400_000_000);
            }
            let wake_at = if self.draining.is_empty() {
                wake_at
            } else {
                let p = futex::now_ns() + 2_000_000;
                Some(wake_at.map_or(p, |w| w.min(p)))
            };
            self.sleep(wake_at);
        }
    }

    /// Applies queued commands; `false` on Stop.
    fn apply_cmds(&mut self) -> bool {
        let cmds =
            std::mem::take(&mut *self.ctl.cmds.lock().unwrap_or_else(PoisonError::into_inner));
        let mut changed = false;
        for c in cmds {
            let now = futex::now_ns();
            match c {
                Cmd::Add {
                    id,
                    dir,
                    entry,
                    params,
                } => {
                    let opened = LeaseWriter::open(&dir).and_then(|lease| {
                        Usage::open_read_only(&dir, entry + 1).map(|usage| (lease, usage))
                    });
                    match opened {
                        Ok((lease, usage))
                            if lease.slot(entry).is_some()
                                && usage.lease_words(entry).is_some() =>
                        {
                            if let Some(i) = self.policy.index(&id) {
                                self.policy.set_slice(&id, params, now);
                                self.disarm(i);
                                let wakes = std::mem::take(&mut self.rt[i].wakes);
                                self.rt[i] = SliceRt {
                                    lease,
                                    usage,
                                    entry,
                                    pass: 0,
                                    wakes,
                                    seen: Reading::default(),
                                };
                            } else {
                                self.policy.set_slice(&id, params, now);
                                let rt = SliceRt {
                                    lease,
                                    usage,
                                    entry,
                                    pass: 0,
                                    wakes: WakeBudget::default(),
                                    seen: Reading::default(),
                                };
                                // Not held, gated: the slice waits for its first grant
                                // (no pass left by an earlier arbiter).
                                if let Some(s) = rt.sched() {
                                    s.take_over();
                                }
                                self.rt.push(rt);
                            }
                            changed = true;
                        }
                        Ok(_) => tracing::warn!("slice {id}: no device entry {entry}"),
                        Err(e) => tracing::warn!("slice {id}: cannot schedule: {e}"),
                    }
                }
                Cmd::Update { id, params } => {
                    if self.policy.index(&id).is_some() {
                        self.policy.set_slice(&id, params, now);
                        changed = true;
                    }
                }
                Cmd::Remove { id, ack } => {
                    if let Some(i) = self.policy.index(&id) {
                        if self.policy.holder() == Some(i) {
                            self.revoke_holder();
                        }
                        if self.draining.iter().any(|d| d.id == id) {
                            self.check_drain(true);
                        }
                        self.disarm(i);
                        self.stop_watchers();
                        self.policy.remove_slice(&id);
                        self.rt.remove(i);
                        changed = true;
                    }
                    let _ = ack.send(());
                }
                Cmd::Stop => return false,
            }
        }
        if changed {
            self.restart_watchers();
            self.set_queue_bounds();
            self.publish(futex::now_ns(), true);
        }
        true
    }

    /// On a shared device every process keeps at most [`SHARED_QUEUE`] kernels queued, so a
    /// revoke drains within a few kernels and lease lengths (hence 1 s shares) stay even; while
    /// a high-priority slice shares the device the others also keep at most
    /// [`HIGH_NEIGHBOUR_AHEAD_US`] queued ahead of each launch, so it waits for at most that
    /// plus one launch. A slice alone on its device is not bounded.
    fn set_queue_bounds(&mut self) {
        let slices = self.policy.slices();
        self.high_present = slices.iter().any(|s| s.params.high);
        let shared = slices.len() > 1;
        for (s, rt) in slices.iter().zip(&self.rt) {
            let (bound, ahead) = if !shared {
                (0, 0)
            } else if self.high_present && !s.params.high {
                (high_neighbour_queue(), high_neighbour_ahead_us())
            } else {
                (SHARED_QUEUE, 0)
            };
            if let Some(s) = rt.sched() {
                s.bound(bound, ahead);
            }
        }
    }

    fn observe(&mut self, now: u64) {
        let holder = self.policy.holder();
        for i in 0..self.rt.len() {
            let r = self.rt[i].read();
            self.rt[i].seen = r;
            let obs = Observation {
                // An absurd count is no thread count: written by something else, read as idle.
                waiting: r.waiting(MAX_DEMAND),
                active: holder == Some(i) && r.active(),
                // Every process of the holder that launched under this grant is idle.
                quiet: holder == Some(i) && r.quiet(),
            };
            self.policy.observe(i, obs, now);
        }
        self.policy.observed(now);
        if holder.is_none() && self.free_since.is_none() {
            self.free_since = Some(now);
        }
    }

    /// The next grant id (never 0).
    fn next_grant_id(&mut self) -> u32 {
        self.grant_seq = self.grant_seq.wrapping_add(1).max(1);
        self.grant_seq
    }

    /// Arms a one-launch pass for every slice that may hold one and has none
    /// ([`Policy::may_pass`]), and withdraws it from those that may no longer. The pass is the
    /// id of the slice's next grant: a gate that takes it registers its launch under that id,
    /// and [`Loop::grant`] grants under it, so the launch is drained and charged as the
    /// grant's. A withdrawn pass a gate took meanwhile only leaves that launch registered
    /// under an id never granted (its demand still brings the next grant).
    fn arm_passes(&mut self, now: u64) {
        if !passes() {
            return;
        }
        for i in 0..self.rt.len() {
            // Not while its own queued work of the last lease is still draining: a launch
            // registered under the pass would retag its `pending` and end that drain early.
            let id = &self.policy.slices()[i].id;
            let draining = self.draining.iter().any(|d| &d.id == id);
            let may = !draining && self.policy.may_pass(i, now);
            if may && self.rt[i].pass == 0 {
                let id = self.next_grant_id();
                let rt = &mut self.rt[i];
                if let Some(s) = rt.sched() {
                    s.arm_pass(id);
                    rt.pass = id;
                }
            } else if !may && self.rt[i].pass != 0 {
                // (Never the holder: its pass went with its grant.)
                self.disarm(i);
            }
        }
    }

    /// Withdraws slice `i`'s pass; returns the id it carried (0 = none).
    fn disarm(&mut self, i: usize) -> u32 {
        let Some(rt) = self.rt.get_mut(i) else {
            return 0;
        };
        if let Some(s) = rt.sched() {
            s.arm_pass(0);
        }
        std::mem::take(&mut rt.pass)
    }

    fn grant(&mut self, i: usize, now: u64) {
        // A slice holding a pass is granted under it (its gate may have launched on it).
        let id = match self.disarm(i) {
            0 => self.next_grant_id(),
            pass => pass,
        };
        tracing::trace!(t = now, slice = %self.policy.slices()[i].id, grant = id, "grant");
        if let Some(s) = self.rt[i].sched() {
            s.grant(id);
            // SAFETY: the lease word of the mapping `self.rt[i]` keeps alive.
            unsafe { futex::wake_shared(s.slot.word_addr()) };
        }
        let done = futex::now_ns();
        let from = self.free_since.take().unwrap_or(now);
        if self.policy.holder().is_none() {
            if self.handoff_ns.len() >= 4096 {
                self.handoff_ns.drain(..2048);
            }
            self.handoff_ns.push(done.saturating_sub(from));
        }
        self.policy.granted(i, now);
        self.active_until = now + 11_000_000_000;
    }

    /// Finishes any earlier drain (bounded; not while a high-priority slice waits), revokes
    /// the holder and lets the next slice be granted at once: the holder's drain goes on in
    /// the background and is charged to it up to its report, the next holder from there on
    /// ([`Policy::preempted`]).
    fn hand_on_now(&mut self) {
        self.check_drain(true);
        if let Some(d) = self.revoke_start() {
            self.background(d, None);
        }
    }

    /// Leaves drain `d` of the holder to finish in the background (charged when reported) so
    /// that the next slice can be granted now; `free_at`: when the device was handed on (the
    /// drain's start by default), for the hand-off latency.
    ///
    /// The holder is charged now for the drain up to `free_at` (its work alone ran on the
    /// device until then): the next pick compares it by a virtual time that includes it. Left
    /// to the report, a slice handed on early while down to the last node of a 100 ms graph was
    /// picked again at once, still ahead by its stale virtual time, and got a second graph out
    /// of turn (1 s windows 39/61 instead of 30/70).
    fn background(&mut self, mut d: Drain, free_at: Option<u64>) {
        let at = free_at.unwrap_or(d.start).max(d.start);
        self.policy.preempted(at);
        d.charged_to = at;
        self.free_since = Some(at);
        self.draining.push(d);
    }

    /// Whether a high-priority slice waits to be let in (observed afresh): a drain wait gives
    /// way to it. Before, the loop waited out a 100 ms graph or a 50 ms kernel of the revoked
    /// holder first and a bursty high-priority slice beside such tenants had a p99 of 90 ms.
    fn high_waits(&mut self) -> bool {
        let now = futex::now_ns();
        self.observe(now);
        self.policy.high_waits(now)
    }

    /// Clears the holder's `HELD`, wakes its gate threads; the drain to wait for.
    fn revoke_start(&mut self) -> Option<Drain> {
        let h = self.policy.holder()?;
        let s = self.rt[h].sched()?;
        let grant = s.revoke();
        // SAFETY: the lease word of the mapping `self.rt[h]` keeps alive.
        unsafe { futex::wake_shared(s.slot.word_addr()) };
        let start = futex::now_ns();
        tracing::trace!(t = start, slice = %self.policy.slices()[h].id, grant, "revoke");
        Some(Drain {
            id: self.policy.slices()[h].id.clone(),
            grant,
            start,
            charged_to: start,
            deadline: start
                + self
                    .policy
                    .drain_bound(h, drain_timeout(self.policy.quantum())),
            near_at: None,
            cap: None,
            over: None,
        })
    }

    /// Whether drain `d` is over: `Some(timed_out)`. Over when the slice's `pending` count
    /// for that grant is 0 (or another grant began: processes deregister at exit), or at the
    /// deadline (a process killed with work pending, or a hostile one).
    fn drain_over(&self, d: &Drain, now: u64) -> Option<bool> {
        let Some(i) = self.policy.index(&d.id) else {
            return Some(false);
        };
        // A count above the process records there can be is not a count: over.
        let max = u32::try_from(MAX_PROCS).unwrap_or(u32::MAX);
        if self.rt[i].read().drained(d.grant, max) {
            return Some(false);
        }
        if now >= d.deadline {
            return Some(true);
        }
        None
    }

    /// Whether every process of drain `d`'s slice is down to its last kernel (or drained):
    /// the gate lowered `near` to 0 under the same grant. An older gate never writes `near`
    /// (another grant's tag or 0 there), and then the hand-off waits for the whole drain.
    fn drain_near(&self, d: &Drain) -> bool {
        let Some(i) = self.policy.index(&d.id) else {
            return false;
        };
        self.rt[i].read().near(d.grant)
    }

    /// Charges the background drains reported so far, in the order they began, each up to its
    /// report from its start or the previous drain's report, whichever is later (a drain that
    /// began while an earlier one ran shared the device with it: the overlap is charged once,
    /// to the earlier one). A drain handed on early is charged at most up to its cap
    /// ([`Policy::early_charge_cap`]), reported or not: once the cap passes it is charged and
    /// only watched for its report (statistics), so the next holder's lease runs, and ends,
    /// on time instead of waiting, deferred, for a report its own first long kernel delays.
    /// With `wait`, waits (bounded) for all of them first, unless a high-priority slice waits
    /// to be let in.
    fn check_drain(&mut self, wait: bool) {
        loop {
            let now = futex::now_ns();
            self.check_reporting(now);
            for k in 0..self.draining.len() {
                if self.draining[k].over.is_none() {
                    self.draining[k].over =
                        self.drain_over(&self.draining[k], now).map(|t| (now, t));
                }
            }
            let capped = self
                .draining
                .first()
                .and_then(|d| d.cap.filter(|&c| d.over.is_none() && now >= c));
            if let Some(cap) = capped {
                let d = self.draining.remove(0);
                self.charge_drain(&d, cap, false);
                self.reporting.push(d);
            }
            while let Some((at, timed_out)) = self.draining.first().and_then(|d| d.over) {
                let d = self.draining.remove(0);
                tracing::trace!(t = at, slice = %d.id, timed_out, "drain reported");
                self.record_drain_times(&d, at);
                self.charge_drain(&d, d.cap.map_or(at, |c| at.min(c)), timed_out);
            }
            if self.draining.is_empty() || !wait || self.high_waits() {
                return;
            }
            if let Some(d) = self.draining.first() {
                self.wait_pending(d, now);
            }
        }
    }

    /// Charges drain `d` (its slice, or nobody if it was removed meanwhile; the deferred
    /// holder's charging starts at `to` either way).
    fn charge_drain(&mut self, d: &Drain, to: u64, timed_out: bool) {
        let i = self.policy.index(&d.id).unwrap_or(usize::MAX);
        let from = d.charged_to.max(self.drain_floor);
        let to = to.max(from);
        self.policy.overrun(i, from, to, timed_out);
        self.drain_floor = self.drain_floor.max(to);
    }

    /// Records how long drain `d`, reported at `at`, took, and its last kernel if handed on
    /// early.
    fn record_drain_times(&mut self, d: &Drain, at: u64) {
        let i = self.policy.index(&d.id).unwrap_or(usize::MAX);
        self.policy.record_drain(i, at.saturating_sub(d.start));
        if let Some(n) = d.near_at {
            self.policy.record_last_kernel(i, at.saturating_sub(n));
        }
    }

    /// Drains charged up to their cap, reported now: their times are recorded (a late report
    /// makes the slice's last kernels look long, and early hand-offs stop for it).
    fn check_reporting(&mut self, now: u64) {
        let mut k = 0;
        while k < self.reporting.len() {
            match self.drain_over(&self.reporting[k], now) {
                Some(timed_out) => {
                    let d = self.reporting.remove(k);
                    self.record_drain_times(&d, now);
                    if let Some(i) = self.policy.index(&d.id) {
                        self.policy.drain_ended(i, timed_out);
                    }
                }
                None => k += 1,
            }
        }
    }

    fn wait_pending(&self, d: &Drain, now: u64) {
        let Some(i) = self.policy.index(&d.id) else {
            return;
        };
        if let Some(sched) = self.rt[i].sched() {
            let mut words = vec![WaitWord {
                addr: sched.usage.pending_addr(),
                val: sched.read().pending_low(),
                private: false,
            }];
            // A high-priority slice starting to wait ends the wait too ([`Loop::high_waits`]).
            for (s, other) in self.policy.slices().iter().zip(&self.rt) {
                if s.params.high && s.id != d.id {
                    if let Some(o) = other.sched() {
                        words.push(WaitWord {
                            addr: o.usage.demand_addr(),
                            val: o.read().demand,
                            private: false,
                        });
                    }
                }
            }
            let deadline = now + d.deadline.saturating_sub(now).min(2_000_000);
            // The words live in usage mappings `self.rt` keeps alive during the wait.
            futex::wait_any(&words, Some(deadline));
        }
        // A tenant that keeps changing its (tenant-writable) `pending` word without finishing
        // its drain would make every wait return at once: the loop would spin until the drain's
        // deadline, and under SCHED_FIFO take a whole core from everyone else. After a few such
        // returns in a row it sleeps 50 µs between checks (an honest drain reports with one
        // change per process, so it is not slowed).
        if futex::now_ns().saturating_sub(now) < 10_000 {
            let n = self.quick_wakes.get().saturating_add(1);
            self.quick_wakes.set(n);
            if n > QUICK_WAKES_BEFORE_SLEEP {
                std::thread::sleep(Duration::from_micros(50));
            }
        } else {
            self.quick_wakes.set(0);
        }
    }

    /// Revokes the holder and waits (bounded) until its queued work is reported complete,
    /// charging it up to that moment. With `early`, the wait ends as soon as every process of
    /// the slice is down to its last kernel: the drain goes on in the background (charged to
    /// the slice when it is reported, see [`Policy::preempted`]) while the next holder is
    /// granted, so the wake-ups of a hand-off overlap that kernel instead of idling the device.
    fn revoke_holder_early(&mut self, early: bool) {
        self.check_drain(true);
        let early = early
            && self
                .policy
                .holder()
                .is_some_and(|h| self.policy.early_ok(h));
        // A holder that launched nothing under this grant has nothing queued under it: its
        // `pending` (tenant-writable) is not waited for.
        let progressed = self.policy.holder_progressed();
        let Some(mut d) = self.revoke_start() else {
            return;
        };
        if !self.draining.is_empty() {
            // An earlier drain is still outstanding (a high-priority slice waits and was not
            // kept waiting for it): this holder was granted behind it, and its own drain
            // follows it in the background.
            self.background(d, None);
            return;
        }
        if !progressed {
            d.deadline = d.start;
        }
        let (end, timed_out) = loop {
            let now = futex::now_ns();
            if let Some(t) = self.drain_over(&d, now) {
                if t && progressed {
                    // A deep queue (one built while the slice was alone, say) drains longer
                    // than the bound: the device is busy with this slice's work, so the next
                    // holder is granted, and this slice is charged up to its report, in the
                    // background (bounded at four times the wait; a slice that never reports
                    // is charged all of it and its bound halves as before).
                    d.deadline = d.start + 4 * d.deadline.saturating_sub(d.start);
                    if self.drain_over(&d, now).is_none() {
                        self.background(d, Some(now));
                        return;
                    }
                }
                break (now, t);
            }
            if early && self.drain_near(&d) {
                d.near_at = Some(now);
                if let Some(h) = self.policy.holder() {
                    d.cap = self.policy.early_charge_cap(h, now);
                }
                self.background(d, Some(now));
                return;
            }
            if progressed && self.high_waits() {
                // A high-priority slice is let in while this drain (a long launch, say)
                // finishes in the background, charged to this slice up to its report.
                self.background(d, Some(now));
                return;
            }
            self.wait_pending(&d, now);
        };
        tracing::trace!(t = end, slice = %d.id, timed_out, "drain reported");
        if let Some(h) = self.policy.holder() {
            self.policy.record_drain(h, end.saturating_sub(d.start));
        }
        self.policy.revoked(end, timed_out);
        self.free_since = Some(end);
    }

    /// Revokes the holder and waits (bounded) for its whole drain.
    fn revoke_holder(&mut self) {
        self.revoke_holder_early(false);
    }

    fn stop_watchers(&mut self) {
        for w in self.watchers.drain(..) {
            w.stop.store(1, Release);
            futex::wake_private(&w.stop);
            if let Some(t) = w.thread {
                let _ = t.join();
            }
        }
    }

    /// Restarts the helper threads for the demand words beyond the loop's own.
    fn restart_watchers(&mut self) {
        self.stop_watchers();
        let addrs: Vec<usize> = self
            .rt
            .iter()
            .skip(OWN_WORDS)
            .filter_map(|rt| rt.sched().map(|s| s.usage.demand_addr() as usize))
            .collect();
        for chunk in addrs.chunks(OWN_WORDS) {
            let chunk = chunk.to_vec();
            let stop = Arc::new(AtomicU32::new(0));
            let ctl = Arc::clone(&self.ctl);
            let st = Arc::clone(&stop);
            let thread = std::thread::Builder::new()
                .name(format!("sched-gpu{}-watch", self.index))
                .spawn(move || watch(chunk, st, ctl))
                .ok();
            self.watchers.push(Watcher { stop, thread });
        }
    }

    fn sleep(&mut self, deadline: Option<u64>) {
        let now = futex::now_ns();
        let mut words = Vec::with_capacity(self.rt.len().min(WAITV_MAX) + 1);
        // The slice each word belongs to (None: the control word).
        let mut owners = Vec::with_capacity(words.capacity());
        words.push(WaitWord {
            addr: self.ctl.word.as_ptr(),
            val: self.ctl_seen,
            private: true,
        });
        owners.push(None);
        // A slice muted for waking the loop too often ([`super::wakes`]) is left out until its
        // window ends; the loop wakes by then at the latest and sees whatever it changed.
        let muted_until = self.rt.iter().filter_map(|rt| rt.wakes.muted(now)).min();
        let heard = |rt: &SliceRt| rt.wakes.muted(now).is_none();
        let holder = self.policy.holder();
        for (i, rt) in self.rt.iter().enumerate() {
            if Some(i) == holder || !heard(rt) {
                continue;
            }
            if let Some(s) = rt.sched() {
                // Against the value the decision saw, not a fresh read: a gate that began
                // waiting while the loop decided (demand 0 → 1, its wake already sent) must
                // end this sleep at once. Waiting on the fresh 1 lost that wake until the
                // loop's next deadline — 100 ms beside a lone holder: a high-priority server's
                // launch blocked 50–97 ms at the gate on the simulator (issue 36).
                words.push(WaitWord {
                    addr: s.usage.demand_addr(),
                    val: rt.seen.demand,
                    private: false,
                });
                owners.push(Some(i));
            }
        }
        // A background drain's report wakes the loop at once (the next holder's charging
        // starts then).
        for d in self.draining.iter().filter(|d| d.over.is_none()) {
            let Some(i) = self.policy.index(&d.id) else {
                continue;
            };
            let rt = &self.rt[i];
            if !heard(rt) {
                continue;
            }
            if let Some(s) = rt.sched() {
                words.insert(
                    1,
                    WaitWord {
                        addr: s.usage.pending_addr(),
                        val: rt.seen.pending_low(),
                        private: false,
                    },
                );
                owners.insert(1, Some(i));
            }
        }
        // The holder's gate lowering `busy` to 0 (idle) wakes the loop, which hands the lease
        // on at once if others wait. Last, so that on a device with more slices than one wait
        // holds it is the word left out (the activity check then finds the idle holder).
        if let Some(h) = holder.filter(|&h| heard(&self.rt[h])) {
            let rt = &self.rt[h];
            if let Some(s) = rt.sched() {
                words.push(WaitWord {
                    addr: s.usage.busy_addr(),
                    val: rt.seen.busy_low(),
                    private: false,
                });
                owners.push(Some(h));
            }
        }
        // Slices beyond the first OWN_WORDS are watched by helper threads.
        words.truncate(WAITV_MAX);
        // Publish status every 100 ms while leases move, every 500 ms until the windows are
        // empty, then sleep without a deadline.
        let deadline = if self.policy.holder().is_some() {
            let p = self.last_publish + 100_000_000;
            Some(deadline.map_or(p, |d| d.min(p)))
        } else if self.last_publish < self.active_until {
            let p = self.last_publish + 500_000_000;
            Some(deadline.map_or(p, |d| d.min(p)))
        } else {
            deadline
        };
        let deadline = match (deadline, muted_until) {
            (Some(d), Some(m)) => Some(d.min(m)),
            (d, m) => d.or(m),
        };
        let woken = futex::wait_any(&words, deadline);
        self.wakeups += 1;
        // Every wake by a slice's word is counted against it, changed or not: a tenant can
        // change its word as often as it wakes it.
        if let Some(i) = woken.and_then(|k| *owners.get(k)?) {
            self.rt[i].wakes.woke(futex::now_ns());
        }
    }

    fn publish(&mut self, now: u64, force: bool) {
        if !force && now.saturating_sub(self.last_publish) < 50_000_000 {
            return;
        }
        self.last_publish = now;
        let handoff_p99 = p99(&self.handoff_ns);
        let holder = self.policy.holder();
        let pct = |bp: u32| f64::from(bp) / 10_000.0;
        let st = DeviceSched {
            index: self.index,
            quantum_ns: self.policy.quantum(),
            handoffs: self.policy.handoffs,
            handoff_p99_ns: handoff_p99,
            realtime_priority: self.realtime,
            wakeups: self.wakeups,
            slices: self
                .policy
                .slices()
                .iter()
                .enumerate()
                .map(|(i, s)| SliceShare {
                    slice_id: s.id.clone(),
                    guarantee: pct(s.params.guarantee),
                    limit: pct(s.params.limit),
                    high_priority: s.params.high,
                    achieved_1s: s.window.share(now, 1_000_000_000),
                    achieved_10s: s.window.share(now, 10_000_000_000),
                    grants: s.grants,
                    wait_ns: s.wait_ns,
                    charged_ns: s.charged_ns,
                    drain_timeouts: s.drain_timeouts,
                    drain_p99_ns: p99(&s.drains),
                    holding: holder == Some(i),
                    busy: s.busy(),
                    strikes: s.strikes,
                    strikes_total: s.no_progress,
                    backoff_remaining_ns: if s.strikes > 0 {
                        s.backoff_until.saturating_sub(now)
                    } else {
                        0
                    },
                    holds: s.holds,
                    held_ns: s.held_ns,
                    quiet_revokes: s.quiet_revokes,
                    loop_wakes: self.rt.get(i).map_or(0, |rt| rt.wakes.total),
                    loop_wakes_peak: self.rt.get(i).map_or(0, |rt| rt.wakes.peak),
                    wake_mutes: self.rt.get(i).map_or(0, |rt| rt.wakes.mutes_total),
                })
                .collect(),
        };
        *self
            .ctl
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = st;
    }
}

/// Early hand-offs are on unless `GPUSLICE_SCHED_EARLY_HANDOFF=0` (a benchmark switch, to
/// measure what they gain; see `docs/scheduling.md`).
fn early_handoff() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPUSLICE_SCHED_EARLY_HANDOFF").map_or(true, |v| v != "0"))
}

/// One-launch passes for high-priority slices are on unless `GPUSLICE_SCHED_PASS=0` (a
/// benchmark switch, as above).
fn passes() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPUSLICE_SCHED_PASS").map_or(true, |v| v != "0"))
}

/// Holds of the free device for a late slice (`policy/anticipate.rs`) are on unless
/// `GPUSLICE_SCHED_HOLD=0` (a benchmark switch, as above).
fn holds() -> bool {
    std::env::var("GPUSLICE_SCHED_HOLD").map_or(true, |v| v != "0")
}

/// The queue bound beside a high-priority slice: [`HIGH_NEIGHBOUR_QUEUE`] unless
/// `GPUSLICE_SCHED_HIGH_NEIGHBOUR_QUEUE=N` (1–64) in the arbiter's environment says otherwise (a
/// benchmark switch, to measure the latency/utilisation trade-off; see `docs/scheduling.md`).
fn high_neighbour_queue() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("GPUSLICE_SCHED_HIGH_NEIGHBOUR_QUEUE")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (1..=SHARED_QUEUE).contains(n))
            .unwrap_or(HIGH_NEIGHBOUR_QUEUE)
    })
}

/// The pace beside a high-priority slice: [`HIGH_NEIGHBOUR_AHEAD_US`] unless
/// `GPUSLICE_SCHED_HIGH_NEIGHBOUR_AHEAD_US=N` (0–100000; 0 turns it off) in the arbiter's
/// environment says otherwise (a benchmark switch, as above).
fn high_neighbour_ahead_us() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("GPUSLICE_SCHED_HIGH_NEIGHBOUR_AHEAD_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| *n <= 100_000)
            .unwrap_or(HIGH_NEIGHBOUR_AHEAD_US)
    })
}

/// 99th percentile of `v` (0 when empty).
fn p99(v: &[u64]) -> u64 {
    let mut h = v.to_vec();
    h.sort_unstable();
    h.get(crate::convert::f64_to_usize(
        ((h.len().max(1) - 1) as f64 * 0.99).round(),
    ))
    .copied()
    .unwrap_or(0)
}

/// Body of a [`Watcher`]: the words stay mapped while it runs (the loop stops and joins it
/// before dropping any slice).
fn watch(addrs: Vec<usize>, stop: Arc<AtomicU32>, ctl: Arc<Ctl>) {
    // SAFETY: every `a` is a demand word of a mapping the loop keeps alive while this runs.
    let load = |a: usize| unsafe { (*(a as *const AtomicU32)).load(Acquire) };
    // The values last passed on to the loop. Each wait is against them, not a fresh read: a
    // word that changed during the pause below ends the next wait at once instead of being
    // taken as the new normal (a lost wake until the loop's next deadline).
    let mut passed: Vec<u32> = addrs.iter().map(|&a| load(a)).collect();
    // What changed before the first read is passed on once.
    ctl.word.fetch_add(1, Release);
    futex::wake_private(&ctl.word);
    while stop.load(Acquire) == 0 {
        let mut words = vec![WaitWord {
            addr: stop.as_ptr(),
            val: 0,
            private: true,
        }];
        for (&a, &val) in addrs.iter().zip(&passed) {
            words.push(WaitWord {
                addr: a as *const u32,
                val,
                private: false,
            });
        }
        futex::wait_any(&words, None);
        let now: Vec<u32> = addrs.iter().map(|&a| load(a)).collect();
        // A wake that changed nothing (a tenant's `FUTEX_WAKE` by hand) is not passed on —
        // unless a word claims waiting threads: `demand` falls without a wake (a pass's claim
        // leaving at its grant), so 1 → 0 → 1 reads as no change here although its 0 → 1 woke
        // us (a server's next launch went unheard until the loop's 100 ms deadline). The
        // pause below bounds what a tenant waking us by hand costs, as it bounds one changing
        // its word.
        if now != passed || now.iter().any(|&v| v != 0) {
            passed = now;
            ctl.word.fetch_add(1, Release);
            futex::wake_private(&ctl.word);
        }
        // Let the loop act before watching again (a changing word would otherwise spin).
        std::thread::sleep(Duration::from_micros(200));
    }
}
