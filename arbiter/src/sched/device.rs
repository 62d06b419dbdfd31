//! The real scheduler loop of one device: one thread that reads the slices' demand from their
//! `usage` files, asks the [`Policy`] what to do and carries it out on the `lease` files —
//! grant (new grant id, `HELD`, wake), renew (generation only, no wake), revoke (clear `HELD`,
//! wake, then wait for the slice's processes to report their queued work drained, bounded).
//! It sleeps in `futex_waitv` on every slice's demand word and its control word, so an idle
//! device costs no CPU.

use super::futex::{self, WaitWord, WAITV_MAX};
use super::policy::{Decision, Observation, Params, Policy};
use super::status::{DeviceSched, SliceShare};
use gpuslice_region::layout::{LEASE_GENERATION_ONE, LEASE_HELD, LEASE_UNGATED};
use gpuslice_region::{LeaseWriter, Usage};
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
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
}

impl SliceRt {
    fn word(&self) -> &AtomicU32 {
        // `entry` was checked against MAX_DEVICES when the slice was added.
        self.lease.word(self.entry).unwrap_or(&ZERO)
    }
}

static ZERO: AtomicU32 = AtomicU32::new(0);

/// How long a revoked slice may take to report its queued work drained before it is charged the
/// whole wait and the lease moves on anyway.
pub fn drain_timeout(quantum: u64) -> u64 {
    (quantum * 50).clamp(100_000_000, 250_000_000)
}

/// Runs the loop for device `index` until [`Cmd::Stop`].
pub fn run(index: u32, quantum_ns: u64, ctl: Arc<Ctl>) {
    let mut lp = Loop {
        index,
        policy: Policy::new(quantum_ns),
        rt: Vec::new(),
        ctl,
        grant_seq: 1,
        handoff_ns: Vec::new(),
        free_since: None,
        last_publish: 0,
        high_present: false,
        active_until: 0,
    };
    lp.main();
}

struct Loop {
    index: u32,
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
}

impl Loop {
    fn main(&mut self) {
        loop {
            if !self.apply_cmds() {
                self.revoke_holder();
                return;
            }
            let now = futex::now_ns();
            self.observe(now);
            let decision = self.policy.decide(now);
            let wake_at = match decision {
                Decision::Grant(i) => {
                    self.grant(i, now);
                    continue;
                }
                Decision::Revoke => {
                    self.revoke_holder();
                    continue;
                }
                Decision::Keep { renew, wake_at } => {
                    if renew {
                        if let Some(h) = self.policy.holder() {
                            let w = self.rt[h].word();
                            w.store(w.load(Relaxed).wrapping_add(LEASE_GENERATION_ONE), Release);
                        }
                    }
                    Some(wake_at)
                }
                Decision::Idle { wake_at } => wake_at,
            };
            self.publish(now, false);
            if self.policy.holder().is_none() && self.last_publish < self.active_until {
                self.publish(now, now.saturating_sub(self.last_publish) >= 400_000_000);
            }
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
                        Ok((lease, usage)) if lease.word(entry).is_some() => {
                            if let Some(i) = self.policy.index(&id) {
                                self.policy.set_slice(&id, params, now);
                                self.rt[i] = SliceRt {
                                    lease,
                                    usage,
                                    entry,
                                };
                            } else {
                                self.policy.set_slice(&id, params, now);
                                // Not held, gated: the slice waits for its first grant.
                                if let Some(w) = lease.word(entry) {
                                    let v = w.load(Relaxed);
                                    w.store(
                                        v.wrapping_add(LEASE_GENERATION_ONE)
                                            & !(LEASE_HELD | LEASE_UNGATED),
                                        Release,
                                    );
                                }
                                self.rt.push(SliceRt {
                                    lease,
                                    usage,
                                    entry,
                                });
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
            self.set_queue_bounds();
            self.publish(futex::now_ns(), true);
        }
        true
    }

    /// While a high-priority slice shares the device, every other slice keeps at most two
    /// kernels per process queued, so a revoke drains quickly.
    fn set_queue_bounds(&mut self) {
        let slices = self.policy.slices();
        self.high_present = slices.iter().any(|s| s.params.high);
        for (s, rt) in slices.iter().zip(&self.rt) {
            let bound = if self.high_present && !s.params.high {
                2
            } else {
                0
            };
            if let Some(w) = rt.lease.max_queue(rt.entry) {
                w.store(bound, Release);
            }
        }
    }

    fn observe(&mut self, now: u64) {
        let holder = self.policy.holder();
        for i in 0..self.rt.len() {
            let rt = &self.rt[i];
            let s = rt.usage.sched_sample(rt.entry);
            let word = rt.word().load(Relaxed);
            let obs = Observation {
                waiting: s.demand > 0,
                active: holder == Some(i) && s.seen == word,
            };
            self.policy.observe(i, obs, now);
        }
        self.policy.observed(now);
        if holder.is_none() && self.free_since.is_none() {
            self.free_since = Some(now);
        }
    }

    fn grant(&mut self, i: usize, now: u64) {
        self.grant_seq = self.grant_seq.wrapping_add(1).max(1);
        let rt = &self.rt[i];
        if let Some(g) = rt.lease.grant(rt.entry) {
            g.store(self.grant_seq, Release);
        }
        let w = rt.word();
        let v = w.load(Relaxed);
        w.store(
            (v.wrapping_add(LEASE_GENERATION_ONE) | LEASE_HELD) & !LEASE_UNGATED,
            Release,
        );
        // SAFETY: `w` is a word of the lease mapping `rt` keeps alive.
        unsafe { futex::wake_shared(w.as_ptr()) };
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

    /// Clears `HELD`, wakes the slice's gate threads, waits (bounded) for its processes to
    /// report their queued work complete, and charges the holder up to that moment.
    fn revoke_holder(&mut self) {
        let Some(h) = self.policy.holder() else {
            return;
        };
        let rt = &self.rt[h];
        let w = rt.word();
        let v = w.load(Relaxed);
        w.store(
            v.wrapping_add(LEASE_GENERATION_ONE) & !(LEASE_HELD | LEASE_UNGATED),
            Release,
        );
        // SAFETY: `w` is a word of the lease mapping `rt` keeps alive.
        unsafe { futex::wake_shared(w.as_ptr()) };
        let grant = rt.lease.grant(rt.entry).map_or(0, |g| g.load(Relaxed));
        let start = futex::now_ns();
        let deadline = start + drain_timeout(self.policy.quantum());
        let pending_addr = rt.usage.sched_futexes(rt.entry).map(|(_, p)| p);
        let mut timed_out = false;
        loop {
            let p = rt.usage.sched_sample(rt.entry).pending;
            if (p >> 32) as u32 != grant || p as u32 == 0 {
                break;
            }
            let now = futex::now_ns();
            if now >= deadline {
                timed_out = true;
                break;
            }
            match pending_addr {
                // SAFETY: `a` points into the usage mapping `rt` keeps alive during the wait.
                Some(a) => unsafe {
                    futex::wait_shared(
                        a,
                        p as u32,
                        Duration::from_nanos((deadline - now).min(2_000_000)),
                    )
                },
                None => break,
            }
        }
        let end = futex::now_ns();
        self.policy.revoked(end, timed_out);
        self.free_since = Some(end);
    }

    fn sleep(&self, deadline: Option<u64>) {
        let mut words = Vec::with_capacity(self.rt.len().min(WAITV_MAX) + 1);
        words.push(WaitWord {
            addr: self.ctl.word.as_ptr(),
            val: self.ctl.word.load(Acquire),
            private: true,
        });
        let holder = self.policy.holder();
        for (i, rt) in self.rt.iter().enumerate() {
            if Some(i) == holder {
                continue;
            }
            if let Some((demand, _)) = rt.usage.sched_futexes(rt.entry) {
                // Already-waiting slices were observed; only a change matters now.
                let val = rt.usage.sched_sample(rt.entry).demand;
                words.push(WaitWord {
                    addr: demand,
                    val,
                    private: false,
                });
            }
        }
        // Past futex_waitv's limit the remaining slices are polled.
        let deadline = if words.len() > WAITV_MAX {
            let poll = futex::now_ns() + 2_000_000;
            Some(deadline.map_or(poll, |d| d.min(poll)))
        } else {
            deadline
        };
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
        futex::wait_any(&words, deadline);
    }

    fn publish(&mut self, now: u64, force: bool) {
        if !force && now.saturating_sub(self.last_publish) < 50_000_000 {
            return;
        }
        self.last_publish = now;
        let mut h = self.handoff_ns.clone();
        h.sort_unstable();
        let p99 = if h.is_empty() {
            0
        } else {
            h[((h.len() - 1) as f64 * 0.99).round() as usize]
        };
        let holder = self.policy.holder();
        let pct = |bp: u32| f64::from(bp) / 10_000.0;
        let st = DeviceSched {
            index: self.index,
            quantum_ns: self.policy.quantum(),
            handoffs: self.policy.handoffs,
            handoff_p99_ns: p99,
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
                    holding: holder == Some(i),
                    busy: false,
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
