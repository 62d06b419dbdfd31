//! Process identity, and the robust cross-process spinlock.
//!
//! A process is `(pid, start time)` where the start time is field 22 of `/proc/<pid>/stat`,
//! so a recycled PID is never mistaken for the process that held it. [`alive`] judges through
//! the caller's own `/proc`, so it is only right for processes of the caller's pid namespace;
//! the node's process table judges by slot locks instead (`liveness`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::now_ns;

/// Start time (clock ticks since boot) and state letter of `pid`, if it exists.
pub fn stat_of(pid: u32) -> Option<(u64, u8)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields resume after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    // Fields after the state: ppid is #4, ..., starttime is #22 (the 19th after state).
    let start = fields.nth(18)?.parse().ok()?;
    Some((start, state))
}

/// Whether the process `(pid, start)` is still running (not gone, not a zombie).
pub fn alive(pid: u32, start: u64) -> bool {
    matches!(stat_of(pid), Some((s, st)) if s == start && st != b'Z' && st != b'X')
}

static SELF_ID: AtomicU64 = AtomicU64::new(0);
static SELF_START: AtomicU64 = AtomicU64::new(0);

/// `(pid, start time)` of the calling process (cached; recomputed after fork).
pub fn self_identity() -> (u32, u64) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    if SELF_ID.load(Ordering::Acquire) == u64::from(pid) {
        return (pid, SELF_START.load(Ordering::Relaxed));
    }
    let start = stat_of(pid).map(|(s, _)| s).unwrap_or(0);
    SELF_START.store(start, Ordering::Relaxed);
    SELF_ID.store(u64::from(pid), Ordering::Release);
    (pid, start)
}

/// A spinlock in shared memory that records its owner and is stolen when the owner is dead.
/// The owner word and the liveness judgement come from the caller (the node names owners by
/// process slot, see `liveness`). Holders must keep the protected state consistent at every step
/// (a steal may happen after any store of a killed holder).
pub struct RobustLock<'a> {
    word: &'a AtomicU64,
    me: u64,
}

impl<'a> RobustLock<'a> {
    /// Acquires the lock at `word` as owner `me` (non-zero). Waits with short sleeps; about
    /// every millisecond asks `owner_alive` about the current owner word and steals the lock
    /// when it says dead.
    pub fn acquire(
        word: &'a AtomicU64,
        me: u64,
        owner_alive: impl Fn(u64) -> bool,
    ) -> RobustLock<'a> {
        let mut spins = 0u32;
        let mut last_check = now_ns();
        loop {
            let cur = word.load(Ordering::Relaxed);
            if cur == 0 {
                if word
                    .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return RobustLock { word, me };
                }
                continue;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            if spins < 128 {
                std::thread::yield_now();
                continue;
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
            let now = now_ns();
            if now.saturating_sub(last_check) > 1_000_000 {
                last_check = now;
                if !owner_alive(cur)
                    && word
                        .compare_exchange(cur, me, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    return RobustLock { word, me };
                }
            }
        }
    }
}

impl Drop for RobustLock<'_> {
    fn drop(&mut self) {
        // Only release if still ours (it can have been stolen if we were wrongly deemed dead).
        let _ = self
            .word
            .compare_exchange(self.me, 0, Ordering::Release, Ordering::Relaxed);
    }
}
