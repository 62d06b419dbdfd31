//! The launch gate: a kernel launch proceeds only while the slice holds the device's
//! lease (`lease` file, written by the arbiter's scheduler). See `docs/scheduling.md`.
//!
//! * Fast path (lease held, same lease word and stream as this thread's last launch): one
//!   `Acquire` load of the lease word plus a thread-local compare — no lock, syscall or
//!   allocation. `UNGATED` (standalone, no arbiter) returns at once.
//! * Once per lease renewal per thread (slow path, still no syscall): store the `seen` activity
//!   word, register the process's pending work under the grant id, note the stream for the drain.
//! * Not held: count the thread in `demand` (waking the arbiter on 0 → 1) and `futex`-wait on the
//!   lease word, re-checking; after 30 s without a grant (arbiter gone) the gate opens, logged.
//! * Drain: a gate thread per process and device sleeps on the lease word; when the lease is
//!   revoked it records an event on every stream the process launched on under that grant,
//!   waits for them (so the slice's queued work is measured to its end) and removes the process
//!   from `pending`, waking the arbiter, which charges the slice up to that moment.
//! * Queue bound: while the arbiter sets `max_queue` (the device is shared), each launch records
//!   an event and a launch waits for the event `max_queue` launches back, so a revoke leaves at
//!   most that many kernels to run. That wait comes *before* the lease check, so a revoke that
//!   lands while a thread waits for its queue stops the launch.
//! * Stream capture: a launch into a capturing stream passes untouched (it does not run; the
//!   graph's replays are gated), and every event wait of the gate is made in the `RELAXED`
//!   capture mode, never on a capturing stream or a whole context (`crate::capture`).
//! * Idle holder: while the slice holds a shared device, the gate thread waits for the newest
//!   queue-bound event; once everything the process queued has completed, no thread is inside
//!   a launch and none began for a linger (`crate::linger`: 200 µs, 20 µs for a process whose
//!   recent quiet spells were all idleness), it leaves the slice's `busy` word and the
//!   arbiter hands the lease on at once when others wait (docs/scheduling.md, "Idle holders").

use crate::linger::Linger;
use crate::log::Level;
use crate::state::memory_gate;
use gpuslice_cuda_abi::exec::{CU_EVENT_DISABLE_TIMING, CU_STREAM_LEGACY_HANDLE};
use gpuslice_cuda_abi::result::*;
use gpuslice_cuda_abi::types::{CUcontext, CUevent, CUstream};
use gpuslice_region::futex;
use gpuslice_region::layout::{LEASE_UNGATED, LIMITS_FLAG_LEASED, MAX_DEVICES};
use gpuslice_region::lease::gate::{asks_capture, Proc};
use gpuslice_region::lease::{held, may_launch};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Give up waiting for a grant after this long (the arbiter is gone): the gate opens.
const FAIL_OPEN: Duration = Duration::from_secs(30);
const CACHE: usize = 4;
/// Device time a process may keep queued on a shared device: the queue bound is this over the
/// typical device time of one of its launches (at least one launch, at most `max_queue`), so a
/// revoke leaves about this much work to drain — or one launch, when one launch is longer (a
/// 100-node graph, a 50 ms kernel). See docs/scheduling.md, "Queue bound".
const QUEUED_NS: u64 = 8_000_000;
/// Launches queued before their length is known (the first launches of a process): one, so a
/// process whose launches are long (a 100 ms graph) does not queue two of them in its first
/// lease and front-load 200 ms of work, paid back by a 1 s window at 10 %. Costs the
/// first three launches of a process a host round trip each.
const UNKNOWN_BOUND: usize = 1;
/// Rounds of [`pace`] at most (each retires a launch or sleeps half the margin).
const PACE_ROUNDS: usize = 96;
/// Intervals the launch length is the median of.
const TIMING_RING: usize = 9;
/// Once the ring is full, one completed launch in this many has its interval measured
/// (`cuEventElapsedTime`, a driver call on the launching thread): the median still follows a
/// change of launch length within 36 launches.
const TIMING_EVERY: u32 = 4;
/// Longest typical launch for which a revoked process says `near` (early hand-off) while its
/// last launch still runs; longer launches hand on when drained.
const NEAR_MAX_LAUNCH_NS: u64 = 2_000_000;
/// How long a gate thread that finished its drain waits, at most, for a thread of its process
/// that was woken by the same completion (it waited in the queue bound) to count itself in
/// `demand` before reporting the drain: otherwise the arbiter may see the revoked slice not
/// waiting and pass it over for a whole lease of the next holder.
const SETTLE_MAX: Duration = Duration::from_micros(500);

thread_local! {
    /// (lease word, entry) of this thread's last slow path and the streams seen under it.
    static LAST: Cell<(u32, usize)> = const { Cell::new((u32::MAX, usize::MAX)) };
    static STREAMS: Cell<[usize; CACHE]> = const { Cell::new([usize::MAX; CACHE]) };
    /// The pass this thread launched on, announced once the launch is queued (0: none).
    static PASSED: Cell<u32> = const { Cell::new(0) };
}

/// Per device entry, process-wide.
struct Entry {
    /// The lease protocol's per-process state (`gpuslice_region::lease::gate`).
    lease: Proc,
    /// Gate thread running (reset in a forked child).
    thread: AtomicBool,
    /// Launches begun (wrapping): the gate thread's quiet check sees whether one began.
    seq: AtomicU32,
    /// (grant, stream, context) launched on.
    streams: Mutex<Vec<(u32, usize, usize)>>,
    /// Queue-bound events, oldest first.
    events: Mutex<VecDeque<Queued>>,
    /// Completed queue-bound events, reused.
    spare: Mutex<Vec<usize>>,
    /// Device time between consecutive completed queue-bound events, and the last completed one.
    timing: Mutex<Timing>,
    /// Recent quiet spells: how long to linger before reporting the process quiet.
    linger: Linger,
}

/// What the queue bound learnt of this process's launches: the device time between
/// consecutive completed launches (from the events' timestamps, so host wake-up latency does
/// not enter), a launch being whatever one call queued — a kernel, a cooperative kernel, a
/// whole graph.
struct Timing {
    /// Recent intervals, ns (a ring).
    ring: [u64; TIMING_RING],
    /// Intervals in the ring.
    len: usize,
    /// Next ring slot.
    next: usize,
    /// The last completed queue-bound event and its grant (kept for the next interval).
    last: Option<(usize, u32)>,
    /// Completions since the last measured interval (once the ring is full, one in
    /// [`TIMING_EVERY`] is measured: each measure is a driver call on the launch path).
    unmeasured: u32,
}

/// A launch of this process whose queue-bound event may not have completed yet.
#[derive(Clone, Copy)]
struct Queued {
    /// The event recorded after it.
    ev: usize,
    /// The stream it was launched on (one wait covers the older launches of its stream).
    stream: usize,
    /// The grant it was recorded under.
    grant: u32,
    /// When it started on the device, as far as this process can tell: the later of its
    /// launch and the completion of the launch before it (once seen), host clock.
    start: Instant,
}

#[allow(clippy::declare_interior_mutable_const)]
const ENTRY: Entry = Entry {
    lease: Proc::new(),
    thread: AtomicBool::new(false),
    seq: AtomicU32::new(0),
    streams: Mutex::new(Vec::new()),
    events: Mutex::new(VecDeque::new()),
    spare: Mutex::new(Vec::new()),
    timing: Mutex::new(Timing {
        ring: [0; TIMING_RING],
        len: 0,
        next: 0,
        last: None,
        unmeasured: 0,
    }),
    linger: Linger::new(),
};
/// The gate half of the lease protocol on one device of this process's slice.
type Gate<'a> = gpuslice_region::lease::gate::Gate<'a, AtomicU32, AtomicU64>;
static ENTRIES: [Entry; MAX_DEVICES] = [ENTRY; MAX_DEVICES];
static FORK_HOOK: AtomicBool = AtomicBool::new(false);
static FAILED_OPEN: AtomicBool = AtomicBool::new(false);

/// The gate half of each entry, built once per process: the slice's mappings live as long.
static GATES: [OnceLock<Gate<'static>>; MAX_DEVICES] = [const { OnceLock::new() }; MAX_DEVICES];

/// The gate half of entry `e` (one atomic load once built; `None` beyond the files' slots).
#[inline(always)]
fn gate_of(g: &'static crate::state::MemoryGate, e: usize) -> Option<&'static Gate<'static>> {
    let cell = GATES.get(e)?;
    match cell.get() {
        Some(gate) => Some(gate),
        None => init_gate(g, e, cell),
    }
}

#[cold]
fn init_gate(
    g: &'static crate::state::MemoryGate,
    e: usize,
    cell: &'static OnceLock<Gate<'static>>,
) -> Option<&'static Gate<'static>> {
    let gate = g.slice.gate(e)?;
    Some(cell.get_or_init(|| gate))
}

/// The slice entry of the launching thread's device.
#[inline(always)]
fn entry_of(g: &crate::state::MemoryGate) -> Option<usize> {
    if g.slice.limits.device_count() <= 1 {
        return Some(0);
    }
    crate::driver::current_device().and_then(|d| g.entry(d))
}

/// Called before the real launch on `stream` (of a `_ptsz` entry point when `per_thread`);
/// `Err` is returned to the caller instead of launching. `Ok(Some(e))`: the launch is counted
/// in the quiet check of entry `e` and bounded (a queue-bound event follows it); whatever it
/// returns goes to [`after_launch`], which then need not look the entry up again (a driver
/// call on a slice of several devices). A launch into a capturing stream is never gated,
/// bounded, paced or tracked: it does not run (`crate::capture`); that costs one driver
/// call, made only when the gate would do more than load the lease word. The lease words
/// are read and written only through the region's gate half (`gpuslice_region::lease::gate`).
#[inline(always)]
pub(crate) fn before_launch(stream: CUstream, per_thread: bool) -> Result<Option<usize>, CUresult> {
    let Some(g) = memory_gate() else {
        return Ok(None);
    };
    // A slice the arbiter does not schedule (standalone) has every lease word `UNGATED` for
    // good (`limits` is read-only to the tenant): no entry to look up, which would cost a
    // driver call on a slice of several devices.
    if g.slice.limits.flags() & LIMITS_FLAG_LEASED == 0 {
        return Ok(None);
    }
    let Some(e) = entry_of(g) else {
        return Ok(None);
    };
    let Some(gate) = gate_of(g, e) else {
        return Ok(None);
    };
    // The queue bound may block for a kernel; it comes before the lease check so that a
    // revoke during that wait is seen (otherwise the launch would slip into the next holder's
    // lease, uncharged, after this slice's drain was reported). A thread waiting there is
    // about to launch: it counts as launching, so its process is not reported quiet.
    let mq = gate.max_queue();
    if asks_capture(mq, gate.word()) && crate::capture::capturing(stream, per_thread) {
        return Ok(None);
    }
    let counted = mq > 0;
    let ent = &ENTRIES[e];
    if counted {
        ent.lease.launch_begins();
        ent.seq.fetch_add(1, SeqCst);
        ent.linger.launch_begins();
        bound_queue(e, mq as usize);
        let ahead = gate.ahead_us();
        if ahead > 0 {
            pace(e, Duration::from_micros(u64::from(ahead)));
        }
    }
    let mut w = gate.word();
    if !may_launch(w) {
        if let Some(pass) = gate.take_pass(&ent.lease) {
            // Launched now, as the grant `pass` the slice is about to get: marked (by
            // `take_pass`), registered, then announced (the grant may follow at once, and the
            // gate thread then stores the grant's `seen`, which a later registration would
            // overwrite).
            // (A launch on a pass always goes: `w` is not held.)
            held_slow(gate, e, w, stream as usize, pass);
            if counted {
                mark_busy(gate, e, pass);
            }
            // Announced once the kernel is queued ([`after_launch`]): the announcement wakes
            // the real-time arbiter, which may take this thread's CPU, and on a busy host
            // the thread may then wait for a CFS slice before it launches.
            PASSED.set(pass);
            return Ok(counted.then_some(e));
        }
        w = wait_for_lease(gate, e, counted);
    }
    if w & LEASE_UNGATED != 0 {
        return Ok(counted.then_some(e));
    }
    let s = stream as usize;
    while LAST.get() != (w, e) || !STREAMS.get().contains(&s) {
        if held_slow(gate, e, w, s, gate.grant()) {
            break;
        }
        // Revoked while this thread registered: the gate thread drains that registration;
        // this launch waits for the next grant.
        w = wait_for_lease(gate, e, counted);
        if w & LEASE_UNGATED != 0 {
            return Ok(counted.then_some(e));
        }
    }
    if counted {
        mark_busy(gate, e, gate.grant());
    }
    Ok(counted.then_some(e))
}

/// Called after the real launch returned, with what [`before_launch`] returned.
#[inline(always)]
pub(crate) fn after_launch(stream: CUstream, counted: Option<usize>) {
    if let Some(e) = counted {
        record_bound_event(e, stream);
        ENTRIES[e].lease.launch_ends();
    }
    if PASSED.get() != 0 {
        after_pass(counted);
    }
}

/// The launch went on a pass: announce it (entry `counted`, else the thread's device's): the
/// process counts one thread in `demand` until its gate thread sees the pass's grant.
#[cold]
fn after_pass(counted: Option<usize>) {
    let pass = PASSED.replace(0);
    let Some(g) = memory_gate() else { return };
    let Some(e) = counted.or_else(|| entry_of(g)) else {
        return;
    };
    if let Some(gate) = gate_of(g, e) {
        if gate.announce_pass(&ENTRIES[e].lease, pass) {
            futex_wake(gate.usage.demand_addr());
        }
    }
}

/// Counts this process in the slice's `busy` word under the current grant, once per quiet
/// spell (the launch that ends it), and wakes a gate thread waiting on that word.
#[inline(always)]
fn mark_busy(gate: &Gate<'_>, e: usize, grant: u32) {
    // `seq` was raised (SeqCst) before this load: a gate thread that clears `busy` after it
    // sees the raise and marks the process busy again itself (see `watch_quiet`).
    if ENTRIES[e].lease.busy_under(grant) {
        return;
    }
    set_busy(gate, e, grant);
}

#[cold]
fn set_busy(gate: &Gate<'_>, e: usize, grant: u32) {
    if gate.enter_busy(&ENTRIES[e].lease, grant) {
        futex_wake(gate.usage.busy_addr());
    }
}

/// Once per lease word and stream per thread: activity, pending registration under `grant`,
/// stream set. `false`: the lease was revoked meanwhile, the launch must not go
/// (`Gate::register`).
#[cold]
fn held_slow(gate: &Gate<'_>, e: usize, w: u32, s: usize, grant: u32) -> bool {
    let ent = &ENTRIES[e];
    ensure_thread(e);
    if !gate.register(&ent.lease, w, grant) {
        return false;
    }
    let ctx = current_ctx();
    if let Ok(mut v) = ent.streams.lock() {
        if !v.iter().any(|&(gr, st, _)| gr == grant && st == s) {
            v.push((grant, s, ctx));
        }
    }
    if LAST.get() != (w, e) {
        LAST.set((w, e));
        STREAMS.set([usize::MAX; CACHE]);
    }
    let mut c = STREAMS.get();
    c.rotate_right(1);
    c[0] = s;
    STREAMS.set(c);
    true
}

/// Waits until the lease is held (or ungated); returns the word then.
#[cold]
fn wait_for_lease(gate: &Gate<'_>, e: usize, counted: bool) -> u32 {
    let p = &ENTRIES[e].lease;
    if gate.wait_begins(p, counted) {
        futex_wake(gate.usage.demand_addr());
    }
    let start = Instant::now();
    let mut w = gate.word();
    while !may_launch(w) {
        if start.elapsed() > FAIL_OPEN {
            if !FAILED_OPEN.swap(true, Relaxed) {
                crate::log!(
                    Level::Error,
                    "no lease granted for {FAIL_OPEN:?}: the arbiter seems gone; launching anyway"
                );
            }
            w = LEASE_UNGATED;
            break;
        }
        futex_wait(gate.slot.word_addr(), w, Duration::from_millis(200));
        w = gate.word();
    }
    gate.wait_ends(p, counted);
    w
}

/// Before a drain report: waits (at most [`SETTLE_MAX`]) until every thread of entry `e`
/// inside a bounded launch is counted in `demand` (or has launched). A thread that waited in
/// the queue bound for the process's last kernel wakes on the same completion as the drain;
/// reported first, the drain makes the arbiter decide while the revoked slice seems not to
/// wait, and a slice with one long launch per lease (20 ms kernels, 100 ms graphs) is passed
/// over for a whole lease of its neighbour (1 s windows 6 points short). Costs the revoked
/// slice, which is charged up to its report, that thread's wake-up, only when it has one.
fn settle(e: usize) {
    let p = &ENTRIES[e].lease;
    if !p.unsettled() {
        return;
    }
    let t0 = Instant::now();
    while p.unsettled() && t0.elapsed() < SETTLE_MAX {
        std::thread::yield_now();
    }
}

fn futex_wait(addr: *const u32, val: u32, timeout: Duration) {
    // SAFETY: `addr` is a word of a live shared mapping held by the process-wide gate state for
    // the life of the process.
    unsafe { futex::wait(addr, val, false, timeout) };
}

/// Waits until the word at `a` is no longer `va` or the one at `b` no longer `vb` (woken),
/// at most 1 s (`futex_waitv`; before Linux 5.16, a wait on `a` alone of at most 20 ms).
fn futex_wait2(a: *const u32, va: u32, b: *const u32, vb: u32) {
    static NO_WAITV: AtomicBool = AtomicBool::new(false);
    if !NO_WAITV.load(Relaxed) {
        let v = [
            futex::Waitv::new(a, va, false),
            futex::Waitv::new(b, vb, false),
        ];
        // SAFETY: both name live words of shared mappings the process-wide gate state holds.
        if unsafe { futex::waitv(&v, Some(futex::now_ns() + 1_000_000_000)) }.is_ok() {
            return;
        }
        // ENOSYS (before 5.16), or refused by a seccomp filter: one word, timed.
        NO_WAITV.store(true, Relaxed);
    }
    futex_wait(a, va, Duration::from_millis(20));
}

fn futex_wake(addr: *const u32) {
    // SAFETY: the address of a live mapped word (a key only).
    unsafe { futex::wake_shared(addr) };
}

/// Makes `ctx` (a context handle the driver returned to a launching thread) current on this
/// thread; a destroyed context makes the call fail, which is ignored.
fn set_ctx(ctx: usize) {
    if let Some(set) = crate::real!(cuda_sym cuCtxSetCurrent) {
        // SAFETY: a context handle or null; the driver checks it.
        unsafe { set(ctx as CUcontext) };
    }
}

fn current_ctx() -> usize {
    let Some(f) = crate::real!(cuda_sym cuCtxGetCurrent) else {
        return 0;
    };
    let mut c: CUcontext = std::ptr::null_mut();
    // SAFETY: the real cuCtxGetCurrent writes one handle to a valid pointer.
    unsafe { f(&mut c) };
    c as usize
}

extern "C" fn after_fork_child() {
    for ent in &ENTRIES {
        ent.thread.store(false, Relaxed);
        // The parent's registrations and pass, if any, are the parent's to settle.
        ent.lease.reset();
        ent.linger.reset();
        if let Ok(mut v) = ent.streams.try_lock() {
            v.clear();
        }
        if let Ok(mut v) = ent.events.try_lock() {
            v.clear();
        }
        if let Ok(mut v) = ent.spare.try_lock() {
            v.clear();
        }
        if let Ok(mut t) = ent.timing.try_lock() {
            t.len = 0;
            t.last = None;
        }
    }
}

/// At exit the process's work is over (the driver tears its contexts down): leave `pending`
/// so the arbiter need not wait for a drain report that will never come.
extern "C" fn at_exit() {
    let Some(g) = memory_gate() else { return };
    for (e, ent) in ENTRIES.iter().enumerate() {
        let Some(gate) = gate_of(g, e) else {
            continue;
        };
        let left = gate.exit(&ent.lease);
        if left.busy {
            futex_wake(gate.usage.busy_addr());
        }
        if left.pending {
            futex_wake(gate.usage.pending_addr());
        }
    }
}

/// Starts the gate thread of entry `e` once per process.
fn ensure_thread(e: usize) {
    let ent = &ENTRIES[e];
    if ent.thread.load(Acquire) || ent.thread.swap(true, AcqRel) {
        return;
    }
    if !FORK_HOOK.swap(true, AcqRel) {
        // SAFETY: registers plain extern "C" handlers that only touch atomics, try-locks and
        // futex wake-ups.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
            libc::atexit(at_exit);
        }
    }
    // The gate thread works in the launching thread's context from its start: the driver's
    // per-thread capture mode is set once a context is current.
    let ctx = current_ctx();
    let r = std::thread::Builder::new()
        .name(format!("gpuslice-gate{e}"))
        .spawn(move || gate_thread(e, ctx));
    if let Err(err) = r {
        crate::log!(Level::Error, "cannot start the launch-gate thread: {err}");
    }
}

/// Drains the process's work after each revoke of entry `e`'s lease (`ctx`: the context of
/// the thread that started it).
fn gate_thread(e: usize, ctx: usize) {
    // This thread's sleeps (the linger, its 50 µs re-checks) end within a µs of their time, not
    // the default 50 µs timer slack later: each is device time idling or a kernel held back.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // Its waits must never invalidate (or fail because of) an application's stream capture.
    set_ctx(ctx);
    if !crate::capture::relax_this_thread() {
        crate::log!(
            Level::Warn,
            "the launch gate's thread could not enter the relaxed stream-capture mode"
        );
    }
    let Some(gate) = memory_gate().and_then(|g| gate_of(g, e)) else {
        return;
    };
    let ent = &ENTRIES[e];
    loop {
        let w = gate.word();
        if let Some(grant) = gate.drain_due(&ent.lease, w) {
            // Early hand-off: once at most this process's last kernel is left, say so (the
            // arbiter grants the next slice while it runs, hiding the wake-ups of a hand-off).
            // Only while its launches are short: the last launch overlaps the next holder's
            // first ones and is charged to this slice up to its end, which is fair for a
            // kernel of a millisecond or two but not for a 100 ms graph or a 50 ms kernel (on
            // a time-slicing GPU it would run at half speed beside the next holder and be
            // charged twice its length): those hand on when drained.
            let early = launch_ns(e).is_some_and(|l| l <= NEAR_MAX_LAUNCH_NS);
            if early {
                if let Some(ev) = second_newest_event(e) {
                    if let Some(sync) = crate::real!(cuda_sym cuEventSynchronize) {
                        // SAFETY: `ev` is a live queue-bound event of this process (events
                        // are recycled, never destroyed once recorded).
                        unsafe { sync(ev as CUevent) };
                    }
                }
                leave_near(gate, e, grant);
            }
            let mine: Vec<(u32, usize, usize)> = match ent.streams.lock() {
                Ok(mut v) => {
                    let (take, keep) = v.drain(..).partition(|&(gr, _, _)| gr == grant);
                    *v = keep;
                    take
                }
                Err(_) => Vec::new(),
            };
            for (_, s, ctx) in mine {
                drain(s, ctx);
            }
            settle(e);
            // Reported once per grant (the exit hook may have reported it first).
            if gate.drained(&ent.lease, grant) {
                // The low half of `pending` is the arbiter's futex word.
                futex_wake(gate.usage.pending_addr());
            }
            continue;
        }
        if held(w) && gate.max_queue() > 0 {
            let grant = gate.grant();
            if grant != 0 && ent.lease.busy_under(grant) {
                watch_quiet(gate, e, grant);
                continue;
            }
            // Quiet: sleep until the next launch raises `busy` (and wakes it) or the lease
            // word changes (a revoke).
            let cur = gate.busy_low();
            if !ent.lease.busy_under(grant) {
                futex_wait2(gate.slot.word_addr(), w, gate.usage.busy_addr(), cur);
            }
            continue;
        }
        futex_wait(gate.slot.word_addr(), w, Duration::from_secs(1));
    }
}

/// While this process holds the lease (word `w`… under `grant`) and counts itself busy: waits
/// until everything it queued has completed and no thread of it is launching, then for its
/// linger (`crate::linger`) without a launch, and then leaves the slice's `busy` word (waking the
/// arbiter, which hands an idle lease on at once when others wait). Returns when the process
/// went quiet or the lease moved.
fn watch_quiet(gate: &Gate<'_>, e: usize, grant: u32) {
    let ent = &ENTRIES[e];
    let holding = || held(gate.word()) && gate.grant() == grant;
    let sync = crate::real!(cuda_sym cuEventSynchronize);
    let query = crate::real!(cuda_sym cuEventQuery);
    let mut snap: Vec<usize> = Vec::new();
    loop {
        if !holding() {
            return;
        }
        let s0 = ent.seq.load(SeqCst);
        snap.clear();
        if let Ok(q) = ent.events.lock() {
            snap.extend(q.iter().map(|x| x.ev));
        }
        // The newest first (one wait per queue's worth of work, not one per launch: with 64
        // queued 50 µs kernels this thread wakes every 3 ms, not every 50 µs), then the others
        // (other streams) without blocking unless one is still running.
        if let (Some(sync), Some(&newest)) = (sync, snap.last()) {
            // SAFETY: a queue-bound event of this process; events are only ever recycled
            // (re-recorded), never destroyed once recorded, so the handle stays valid (a
            // re-recorded one makes this wait for a later launch, which is harmless).
            unsafe { sync(newest as CUevent) };
            if ent.seq.load(SeqCst) != s0 {
                continue;
            }
            for &ev in &snap[..snap.len() - 1] {
                // SAFETY: as above.
                if query.is_some_and(|q| unsafe { q(ev as CUevent) } == CUDA_ERROR_NOT_READY) {
                    // SAFETY: as above.
                    unsafe { sync(ev as CUevent) };
                }
            }
        }
        if ent.seq.load(SeqCst) != s0 {
            continue;
        }
        if ent.lease.launching() {
            // A thread is between the gate and its queue-bound event (or the driver call).
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        std::thread::sleep(ent.linger.current());
        if ent.seq.load(SeqCst) != s0 {
            // A launch within the linger: a launch-and-synchronise loop, not idleness.
            ent.linger.short_spell();
            continue;
        }
        if ent.lease.launching() || !holding() {
            continue;
        }
        if any_running(e, query, &mut snap) {
            // A launch whose thread left `launching` after the snapshot above: its event was
            // not in it (issue 36: a thread woken by the grant together with this one launched
            // while this one looked, and a depth-1 tenant was taken for idle with its kernel
            // running, at one grant in five).
            continue;
        }
        // The quiet spell starts now; the launch that ends it says how long it was.
        ent.linger.going_quiet(futex::now_ns());
        if !gate.go_quiet(&ent.lease, grant) {
            ent.linger.stayed_busy();
            return;
        }
        futex_wake(gate.usage.busy_addr());
        // A launch that began after the last look may have seen `busy` still set and not
        // counted itself: count it back.
        if ent.seq.load(SeqCst) != s0 || ent.lease.launching() {
            ent.linger.stayed_busy();
            gate.enter_busy(&ent.lease, grant);
            continue;
        }
        return;
    }
}

/// Whether a queue-bound event of entry `e` is still running (no query: not known, `false`);
/// `snap` is scratch space.
fn any_running(
    e: usize,
    query: Option<gpuslice_cuda_abi::pfn::cuEventQuery>,
    snap: &mut Vec<usize>,
) -> bool {
    let Some(query) = query else {
        return false;
    };
    snap.clear();
    if let Ok(q) = ENTRIES[e].events.lock() {
        snap.extend(q.iter().map(|x| x.ev));
    }
    // SAFETY: queue-bound events of this process, recycled but never destroyed once recorded.
    snap.iter()
        .any(|&ev| unsafe { query(ev as CUevent) } == CUDA_ERROR_NOT_READY)
}

/// Leaves `near` for `grant` once per grant (the last kernel is running, or all is drained)
/// and wakes the arbiter, which waits on the low half of `pending`.
fn leave_near(gate: &Gate<'_>, e: usize, grant: u32) {
    if gate.near_done(&ENTRIES[e].lease, grant) {
        futex_wake(gate.usage.pending_addr());
    }
}

/// The queue-bound event recorded after this process's second-newest launch on entry `e`:
/// once it completes, at most the newest kernel is left.
fn second_newest_event(e: usize) -> Option<usize> {
    let q = ENTRIES[e].events.lock().ok()?;
    q.len().checked_sub(2).and_then(|i| q.get(i).map(|x| x.ev))
}

/// Waits for the work queued on `stream` (in context `ctx`) so far. The default streams (legacy,
/// or another thread's per-thread stream) are waited for through the legacy stream, which
/// waits for every blocking stream of the context (a context synchronisation is refused, and
/// invalidates the capture, while a stream of the context captures). A capturing stream is
/// not waited for: its launches since the capture began do not run, and recording on it would
/// add a node to the application's graph.
fn drain(stream: usize, ctx: usize) {
    set_ctx(ctx);
    crate::capture::relax_this_thread();
    let stream = if stream == 0 || stream == CU_STREAM_LEGACY_HANDLE || stream == 2 {
        CU_STREAM_LEGACY_HANDLE
    } else {
        stream
    };
    if crate::capture::capturing(stream as CUstream, false) {
        return;
    }
    let (Some(create), Some(record), Some(sync), Some(destroy)) = (
        crate::real!(cuda_sym cuEventCreate),
        crate::real!(cuda_sym cuEventRecord),
        crate::real!(cuda_sym cuEventSynchronize),
        crate::real!(cuda_sym cuEventDestroy_v2),
    ) else {
        return;
    };
    let mut ev: CUevent = std::ptr::null_mut();
    // SAFETY: valid out-pointer; flags are a documented value.
    if unsafe { create(&mut ev, CU_EVENT_DISABLE_TIMING) } != CUDA_SUCCESS {
        return;
    }
    // SAFETY: `ev` was just created; `stream` is a handle the application launched on (a
    // destroyed stream makes the record fail, and then nothing is waited for).
    if unsafe { record(ev, stream as CUstream) } == CUDA_SUCCESS {
        // SAFETY: `ev` is a live event.
        unsafe { sync(ev) };
    }
    // SAFETY: `ev` is a live event, destroyed once.
    unsafe { destroy(ev) };
}

/// Waits until fewer launches than the bound are queued: the bound is [`QUEUED_NS`] of device
/// time over the typical length of this process's launches, between 1 and `max` (the arbiter's
/// `max_queue`), [`UNKNOWN_BOUND`] while no length is known yet. Once the bound is reached it
/// waits the queue down to [`refill_from`] in one wait (one `cuEventSynchronize` and one
/// capture-mode exchange per half a bound of launches, not per launch), when the launches it
/// retires were all made on one stream (events of one stream complete in order); across
/// streams, one launch at a time.
fn bound_queue(e: usize, max: usize) {
    let bound = queue_bound(e, max);
    let keep = refill_from(bound);
    loop {
        let target = match ENTRIES[e].events.lock() {
            Ok(q) if q.len() >= bound => {
                let newest = q.len() - 1 - keep;
                let t = q.get(newest).map(|t| (t.ev, t.stream));
                t.map(|(ev, st)| {
                    let one_stream = q.iter().take(newest).all(|x| x.stream == st);
                    // Across streams: the oldest alone.
                    if one_stream {
                        ev
                    } else {
                        q.front().map_or(ev, |f| f.ev)
                    }
                })
            }
            _ => None,
        };
        let Some(ev) = target else { return };
        if let Some(sync) = crate::real!(cuda_sym cuEventSynchronize) {
            // SAFETY: `ev` is a live event this process created and recorded (never on a
            // capturing stream; recycled, never destroyed once recorded).
            crate::capture::relaxed(|| unsafe { sync(ev as CUevent) });
        }
        retire_through(e, ev);
    }
}

/// The launches a process keeps queued after a queue-bound wait: half the bound (all but one
/// below 3, as before the wait went down to half).
fn refill_from(bound: usize) -> usize {
    if bound <= 2 {
        bound.saturating_sub(1)
    } else {
        bound / 2
    }
}

/// Retires the queued launches up to the one whose event `ev` completed (the oldest first; not
/// if another thread retired it meanwhile): each is learnt from, and the oldest left started
/// by now.
fn retire_through(e: usize, ev: usize) {
    let Ok(mut q) = ENTRIES[e].events.lock() else {
        return;
    };
    let Some(n) = q.iter().position(|x| x.ev == ev) else {
        return;
    };
    for x in q.drain(..=n) {
        completed(e, x.ev, x.grant);
    }
    if let Some(f) = q.front_mut() {
        f.start = f.start.max(Instant::now());
    }
}

/// Keeps a launch back while more than `ahead` of this process's device time is queued ahead
/// of it (`LeaseSlot::ahead_us`, set beside a high-priority slice): the launch waits until the
/// launch running is expected to end within `ahead` — its start, as seen by this process,
/// plus the typical launch length — so the process has the next kernel on the device in time
/// without keeping a second one there all along. A revoke then leaves at most `ahead` plus one
/// launch to run. Costs device time only when this thread wakes more than `ahead` late.
fn pace(e: usize, ahead: Duration) {
    let Some(len) = launch_ns(e).map(Duration::from_nanos) else {
        return;
    };
    let (Some(sync), Some(query)) = (
        crate::real!(cuda_sym cuEventSynchronize),
        crate::real!(cuda_sym cuEventQuery),
    ) else {
        return;
    };
    // Its event queries and waits must not disturb a capture of this or another thread.
    crate::capture::relaxed(|| pace_rounds(e, ahead, len, sync, query));
}

/// [`pace`]'s rounds, given the launch length and the driver's event calls.
fn pace_rounds(
    e: usize,
    ahead: Duration,
    len: Duration,
    sync: gpuslice_cuda_abi::pfn::cuEventSynchronize,
    query: gpuslice_cuda_abi::pfn::cuEventQuery,
) {
    let ent = &ENTRIES[e];
    // Each round retires a launch or sleeps towards the front's expected end; bounded so a
    // clock or length that never converges cannot hold the launch for long.
    for _ in 0..PACE_ROUNDS {
        // Retire launches already complete; each ended by now, and by its expected end.
        loop {
            let Some(f) = ent.events.lock().ok().and_then(|q| q.front().copied()) else {
                return;
            };
            // SAFETY: a queue-bound event of this process (recycled, never destroyed once
            // recorded).
            if unsafe { query(f.ev as CUevent) } != CUDA_SUCCESS {
                break;
            }
            retire(e, f, Instant::now().min(f.start + len));
        }
        let Some((n, f)) = ent
            .events
            .lock()
            .ok()
            .and_then(|q| q.front().copied().map(|f| (q.len(), f)))
        else {
            return;
        };
        let queued = queued_ahead(f.start, len, n, Instant::now());
        if queued <= ahead {
            return;
        }
        if n >= 2 {
            // SAFETY: as above.
            unsafe { sync(f.ev as CUevent) };
            retire(e, f, Instant::now());
        } else {
            // In steps of half the margin: a launch that ends before its expected end (the
            // length is a median) is seen within that, and the next one goes at once.
            std::thread::sleep((queued - ahead).min(ahead / 2));
        }
    }
}

/// Device time still queued by `n` launches of `len` each, the oldest of which started at
/// `front_start`, at `now`: the rest of the oldest (none once it is past its expected end)
/// and the others whole.
fn queued_ahead(front_start: Instant, len: Duration, n: usize, now: Instant) -> Duration {
    if n == 0 {
        return Duration::ZERO;
    }
    let rest = (front_start + len).saturating_duration_since(now);
    rest + len.saturating_mul(u32::try_from(n - 1).unwrap_or(u32::MAX))
}

/// Retires the completed launch `f`, which ended by `ended_by`, if it is still the oldest
/// queued (another thread may have retired it): the next one started no later than that, and
/// the launch length is learnt from `f`'s event.
fn retire(e: usize, f: Queued, ended_by: Instant) {
    let retired = match ENTRIES[e].events.lock() {
        Ok(mut q) if q.front().is_some_and(|x| x.ev == f.ev) => {
            q.pop_front();
            if let Some(next) = q.front_mut() {
                next.start = next.start.max(ended_by);
            }
            true
        }
        _ => false,
    };
    if retired {
        completed(e, f.ev, f.grant);
    }
}

/// The typical device time of one launch of entry `e` (median of the recent intervals), ns;
/// `None` while fewer than two are known.
fn launch_ns(e: usize) -> Option<u64> {
    let t = ENTRIES[e].timing.lock().ok()?;
    if t.len < 2 {
        return None;
    }
    let mut v = t.ring;
    let v = &mut v[..t.len];
    v.sort_unstable();
    Some(v[v.len() / 2].max(1))
}

/// The queue bound of entry `e` now.
fn queue_bound(e: usize, max: usize) -> usize {
    match launch_ns(e) {
        Some(launch) => usize::try_from(QUEUED_NS / launch)
            .unwrap_or(usize::MAX)
            .clamp(1, max.max(1)),
        None => max.min(UNKNOWN_BOUND),
    }
}

/// Event `ev` (recorded under `grant`) completed: learn the device time since the previous
/// completed one and recycle the previous one. Launches of one lease follow each other on
/// the device while the queue is not empty, so the interval is one launch; across a gap (the
/// queue ran dry, or another slice's lease came between) it is longer, which only lowers the
/// bound, and the median keeps a few such intervals out. One launch per lease (a 100 ms graph
/// beside a 5 ms quantum) is learnt that way too.
fn completed(e: usize, ev: usize, grant: u32) {
    let ent = &ENTRIES[e];
    let prev = match ent.timing.lock() {
        Ok(mut t) => {
            let prev = t.last.replace((ev, grant));
            t.unmeasured += 1;
            let measure = t.len < TIMING_RING || t.unmeasured >= TIMING_EVERY;
            if let Some(ns) = prev
                .filter(|_| measure)
                .and_then(|(p, _)| elapsed_ns(p, ev))
            {
                t.unmeasured = 0;
                let i = t.next;
                t.ring[i] = ns;
                t.next = (i + 1) % TIMING_RING;
                t.len = (t.len + 1).min(TIMING_RING);
            }
            prev.map(|(p, _)| p)
        }
        Err(_) => Some(ev),
    };
    if let Some(p) = prev {
        if let Ok(mut v) = ent.spare.lock() {
            v.push(p);
        }
    }
}

/// Device time between two completed timing events, ns (`None`: not measurable, e.g. events
/// of different streams in the wrong order).
fn elapsed_ns(a: usize, b: usize) -> Option<u64> {
    let f = crate::real!(cuda_sym cuEventElapsedTime)?;
    let mut ms = 0f32;
    // SAFETY: both are live, completed events of this process; valid out-pointer.
    if unsafe { f(&mut ms, a as CUevent, b as CUevent) } != CUDA_SUCCESS
        || !ms.is_finite()
        || ms <= 0.0
    {
        return None;
    }
    Some(ms_to_ns(ms))
}

/// `ms` (finite, > 0) in whole nanoseconds. std has no checked float-to-integer conversion; a
/// float-to-integer `as` saturates (never wraps) and the caller has ruled out NaN, infinities
/// and negatives, so only the sub-nanosecond fraction is dropped.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn ms_to_ns(ms: f32) -> u64 {
    (f64::from(ms) * 1e6) as u64
}

/// A start time for launches that are not paced (read once per process): pace treats such a
/// launch as long started, which only lets one launch go at once if pacing begins later.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Records a queue-bound event after a launch on `stream`.
fn record_bound_event(e: usize, stream: CUstream) {
    let (Some(create), Some(record)) = (
        crate::real!(cuda_sym cuEventCreate),
        crate::real!(cuda_sym cuEventRecord),
    ) else {
        return;
    };
    let reuse = ENTRIES[e].spare.lock().ok().and_then(|mut v| v.pop());
    let mut ev: CUevent = reuse.map_or(std::ptr::null_mut(), |p| p as CUevent);
    // SAFETY: valid out-pointer; flags 0: a timing event (the bound learns launch lengths).
    if ev.is_null() && unsafe { create(&mut ev, 0) } != CUDA_SUCCESS {
        return;
    }
    // SAFETY: `ev` is live; `stream` is the stream the caller just launched on.
    if unsafe { record(ev, stream) } != CUDA_SUCCESS {
        if reuse.is_some() {
            // Recorded before: the gate thread may still wait on it, so it is kept, not
            // destroyed.
            if let Ok(mut v) = ENTRIES[e].spare.lock() {
                v.push(ev as usize);
            }
        } else if let Some(destroy) = crate::real!(cuda_sym cuEventDestroy_v2) {
            // SAFETY: `ev` was just created, never recorded nor seen by anyone; destroyed once.
            unsafe { destroy(ev) };
        }
        return;
    }
    let (grant, pacing) = memory_gate()
        .and_then(|g| gate_of(g, e))
        .map_or((0, false), |gate| (gate.grant(), gate.ahead_us() > 0));
    // The host clock only where [`pace`] uses it (beside a high-priority slice): a clock read
    // per launch otherwise.
    let start = if pacing { Instant::now() } else { epoch() };
    if let Ok(mut q) = ENTRIES[e].events.lock() {
        q.push_back(Queued {
            ev: ev as usize,
            stream: stream as usize,
            grant,
            start,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::queued_ahead;
    use std::time::{Duration, Instant};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn queued_ahead_counts_the_rest_of_the_running_launch_and_the_others_whole() {
        let t0 = Instant::now();
        assert_eq!(queued_ahead(t0, MS, 0, t0), Duration::ZERO);
        // One 1 ms launch that started 0.3 ms ago: 0.7 ms left.
        assert_eq!(queued_ahead(t0, MS, 1, t0 + MS * 3 / 10), MS * 7 / 10);
        // Two behind it.
        assert_eq!(queued_ahead(t0, MS, 3, t0 + MS * 3 / 10), MS * 27 / 10);
        // Past its expected end (it runs long): only the others count.
        assert_eq!(queued_ahead(t0, MS, 2, t0 + MS * 5), MS);
        // Not started yet (its start is the later of launch and predecessor's end).
        assert_eq!(queued_ahead(t0 + MS, MS, 1, t0), MS * 2);
    }
}
