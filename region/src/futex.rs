//! The futex calls on region words, in one place: the launch gate (interposer) and the
//! scheduler loop (arbiter) wait on and wake the same words of `lease` and `usage` — lease words,
//! `demand`, the low half of `pending` and `busy` — and the arbiter its own process-private
//! control words. Raw addresses, because a futex word may be the low half of a 64-bit field.
//! Nothing here allocates, logs or reads the environment (the gate calls it on launch paths).
//! What to do where `futex_waitv` is missing (before Linux 5.16, gVisor, a seccomp filter) is
//! the caller's policy: [`waitv`] says `ENOSYS`/`EPERM` and the caller falls back.

use std::io;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// `futex_waitv` accepts at most this many words.
pub const WAITV_MAX: usize = 128;
/// `SYS_futex_waitv` (the same number on every architecture that has it).
pub const SYS_FUTEX_WAITV: libc::c_long = 449;
const FUTEX2_SIZE_U32: u32 = 2;
const FUTEX2_PRIVATE: u32 = 128;

/// CLOCK_MONOTONIC now, ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// A timespec of `ns` nanoseconds (relative or absolute, as the call takes it).
fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: libc::time_t::try_from(ns / 1_000_000_000).unwrap_or(libc::time_t::MAX),
        // Below 10^9: fits every c_long.
        tv_nsec: libc::c_long::try_from(ns % 1_000_000_000).unwrap_or(0),
    }
}

fn saturating_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Wakes every waiter of the shared (cross-process) futex word at `addr`.
///
/// # Safety
/// `addr` must be the address of a live, aligned, mapped `u32`.
pub unsafe fn wake_shared(addr: *const u32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; the caller guarantees a live word.
    unsafe {
        libc::syscall(libc::SYS_futex, addr, libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Wakes the waiters of a process-private word.
pub fn wake_private(word: &AtomicU32) {
    // SAFETY: the address of a live atomic; FUTEX_WAKE only uses it as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

/// Waits while the word at `addr` equals `val`, at most `timeout`; `true` when woken (rather
/// than timed out, interrupted or finding the word changed).
///
/// # Safety
/// `addr` must be the address of a live, aligned, mapped `u32` for the whole call.
pub unsafe fn wait(addr: *const u32, val: u32, private: bool, timeout: Duration) -> bool {
    let ts = timespec(saturating_ns(timeout));
    let op = libc::FUTEX_WAIT | if private { libc::FUTEX_PRIVATE_FLAG } else { 0 };
    // SAFETY: `addr` is a live, aligned u32 (the caller keeps the mapping); the kernel only
    // reads it; `ts` is a valid relative timeout that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_futex, addr, op, val, &ts as *const libc::timespec) };
    rc == 0
}

/// One entry of a `futex_waitv` call (the kernel's `struct futex_waitv`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Waitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

impl Waitv {
    /// Waits while the word at `addr` (shared, or private to this process) equals `val`.
    pub fn new(addr: *const u32, val: u32, private: bool) -> Waitv {
        Waitv {
            val: u64::from(val),
            uaddr: addr as u64,
            flags: FUTEX2_SIZE_U32 | if private { FUTEX2_PRIVATE } else { 0 },
            reserved: 0,
        }
    }
}

/// `futex_waitv` on `words` (at most [`WAITV_MAX`]) until one is woken or differs from its
/// value, or until `deadline` (absolute CLOCK_MONOTONIC ns; `None`: no deadline).
/// `Ok(Some(i))`: entry `i` was woken (`FUTEX_WAKE`; its word may or may not have changed);
/// `Ok(None)`: a timeout, an interruption or a word already changed; `Err` with the kernel's
/// error otherwise — `ENOSYS` where the call does not exist, `EPERM` where a filter refuses it.
///
/// # Safety
/// Every entry must name a live, aligned, mapped `u32` for the whole call.
pub unsafe fn waitv(words: &[Waitv], deadline: Option<u64>) -> io::Result<Option<usize>> {
    let words = words.get(..words.len().min(WAITV_MAX)).unwrap_or(&[]);
    let n = libc::c_uint::try_from(words.len()).unwrap_or(0);
    let ts = deadline.map(timespec);
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `words` holds `n` valid entries naming live words (the caller's contract); the
    // kernel only reads them. `tsp` is null or an absolute CLOCK_MONOTONIC time that lives
    // across the call.
    let rc = unsafe {
        libc::syscall(
            SYS_FUTEX_WAITV,
            words.as_ptr(),
            n,
            0u32,
            tsp,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc >= 0 {
        return Ok(usize::try_from(rc).ok());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => Ok(None),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::Arc;

    #[test]
    fn wait_ends_on_a_wake_and_on_its_timeout() {
        let w = Arc::new(AtomicU32::new(0));
        let t0 = now_ns();
        // SAFETY: a live atomic.
        assert!(!unsafe { wait(w.as_ptr(), 0, true, Duration::from_millis(20)) });
        assert!(now_ns() - t0 >= 19_000_000, "timed out early");
        let w2 = Arc::clone(&w);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            wake_private(&w2);
        });
        let t0 = now_ns();
        // SAFETY: a live atomic.
        let woken = unsafe { wait(w.as_ptr(), 0, true, Duration::from_secs(5)) };
        t.join().unwrap();
        assert!(woken && now_ns() - t0 < 4_000_000_000);
        // A word that already differs: returns at once, not woken.
        w.store(1, SeqCst);
        // SAFETY: a live atomic.
        assert!(!unsafe { wait(w.as_ptr(), 0, true, Duration::from_secs(5)) });
    }

    #[test]
    fn waitv_sees_either_word_and_its_deadline() {
        let (a, b) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let v = [
            Waitv::new(a.as_ptr(), 0, true),
            Waitv::new(b.as_ptr(), 0, true),
        ];
        let t0 = now_ns();
        // SAFETY: live atomics.
        match unsafe { waitv(&v, Some(t0 + 20_000_000)) } {
            Ok(woken) => {
                assert_eq!(woken, None, "nobody woke either word");
                assert!(now_ns() - t0 >= 19_000_000, "deadline ended early");
            }
            // A kernel without futex_waitv: the caller's fallback applies.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS)),
        }
        let b2 = Arc::clone(&b);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            b2.store(1, SeqCst);
            wake_private(&b2);
        });
        let t0 = now_ns();
        // SAFETY: live atomics.
        let r = unsafe { waitv(&v, Some(t0 + 5_000_000_000)) };
        t.join().unwrap();
        if let Ok(woken) = r {
            assert!(
                now_ns() - t0 < 4_000_000_000,
                "the second word's wake was missed"
            );
            // Woken by index, or (the store came before the call) found changed at once.
            assert!(matches!(woken, Some(1) | None), "woken: {woken:?}");
        }
    }
}
