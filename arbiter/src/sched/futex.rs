//! The futex calls of the scheduler loop: wake the waiters of a lease word, wait on one word
//! (the drain counter) and wait on many at once (`futex_waitv`: the demand words of every slice
//! of a device plus the loop's control word), each with an absolute CLOCK_MONOTONIC deadline.
//! Where the kernel lacks `futex_waitv` (before 5.16; gVisor) or fallbacks are forced
//! (`crate::syscalls`), [`wait_any`] waits on one word at a time and re-checks the others.

use std::sync::atomic::{AtomicU32, Ordering::Acquire};
use std::time::Duration;

/// `futex_waitv` accepts at most this many words.
pub const WAITV_MAX: usize = 128;
/// `SYS_futex_waitv` (the same number on every architecture that has it).
pub(crate) const SYS_FUTEX_WAITV: libc::c_long = 449;
const FUTEX_32: u32 = 2;
const FUTEX_PRIVATE: u32 = 128;

/// CLOCK_MONOTONIC now, ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
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

/// Waits while the shared word at `addr` equals `val`, at most `timeout`.
///
/// # Safety
/// `addr` must be the address of a live, aligned, mapped `u32` for the whole call.
pub unsafe fn wait_shared(addr: *const u32, val: u32, timeout: Duration) {
    let ts = timespec(timeout.as_nanos().min(u128::from(u64::MAX)) as u64);
    // SAFETY: `addr` is a live, aligned mapped u32 (the caller keeps the mapping); the kernel
    // only reads it; `ts` is a valid relative timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr,
            libc::FUTEX_WAIT,
            val,
            &ts as *const libc::timespec,
        );
    }
}

/// One word to wait on: address, expected value, private (this process) or shared.
#[derive(Clone, Copy, Debug)]
pub struct WaitWord {
    /// Address of the word.
    pub addr: *const u32,
    /// Value seen; the wait ends as soon as the word differs.
    pub val: u32,
    /// Process-private word (the loop's control word) rather than a mapped file.
    pub private: bool,
}

#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// Waits until any of `words` changes or is woken, or until `deadline` (CLOCK_MONOTONIC ns;
/// `None` = no deadline). Only the first [`WAITV_MAX`] words are waited on. Without
/// `futex_waitv`, [`wait_any_fallback`].
pub fn wait_any(words: &[WaitWord], deadline: Option<u64>) {
    let words = &words[..words.len().min(WAITV_MAX)];
    if !crate::syscalls::use_futex_waitv() {
        return wait_any_fallback(words, deadline);
    }
    let v: Vec<FutexWaitv> = words
        .iter()
        .map(|w| FutexWaitv {
            val: u64::from(w.val),
            uaddr: w.addr as u64,
            flags: FUTEX_32 | if w.private { FUTEX_PRIVATE } else { 0 },
            reserved: 0,
        })
        .collect();
    let ts = deadline.map(timespec);
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `v` holds `v.len()` valid futex_waitv entries whose addresses are live words the
    // caller keeps mapped; the kernel only reads them. `tsp` is null or an absolute
    // CLOCK_MONOTONIC timespec that lives across the call.
    let rc = unsafe {
        libc::syscall(
            SYS_FUTEX_WAITV,
            v.as_ptr(),
            v.len() as libc::c_uint,
            0u32,
            tsp,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            crate::syscalls::note_futex_waitv(Some(&e));
            wait_any_fallback(words, deadline);
        }
    }
}

/// The `futex_waitv` fallback: returns when any word differs from its value, when the first
/// word is woken, or at `deadline`. (A wake that changes nothing can be missed between two
/// slices; every waker here changes its word first.) Waits with `FUTEX_WAIT` on the first word (the loop's
/// control word, or the watcher's stop word) in slices of `syscalls::FALLBACK_SLICE`, re-reading
/// every other word between slices: a change of another word is seen within one slice.
pub fn wait_any_fallback(words: &[WaitWord], deadline: Option<u64>) {
    let Some(first) = words.first() else {
        if let Some(d) = deadline {
            std::thread::sleep(Duration::from_nanos(d.saturating_sub(now_ns())));
        }
        return;
    };
    let slice = crate::syscalls::FALLBACK_SLICE.as_nanos() as u64;
    loop {
        // SAFETY: every address is a live, aligned u32 the caller keeps mapped (wait_any's
        // contract); an atomic load only reads it.
        let changed = words
            .iter()
            .any(|w| unsafe { (*(w.addr as *const AtomicU32)).load(Acquire) } != w.val);
        let now = now_ns();
        if changed || deadline.is_some_and(|d| now >= d) {
            return;
        }
        let wait = deadline.map_or(slice, |d| (d - now).min(slice));
        let ts = timespec(wait);
        let op = libc::FUTEX_WAIT
            | if first.private {
                libc::FUTEX_PRIVATE_FLAG
            } else {
                0
            };
        // SAFETY: as above for `first.addr`; `ts` is a valid relative timeout.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                first.addr,
                op,
                first.val,
                &ts as *const libc::timespec,
            )
        };
        if rc == 0 {
            // Woken (a wake without a change still ends the wait, as with futex_waitv).
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::Arc;

    #[test]
    fn waitv_returns_on_wake_and_on_deadline() {
        let w = Arc::new(AtomicU32::new(0));
        let t0 = now_ns();
        wait_any(
            &[WaitWord {
                addr: w.as_ptr(),
                val: 0,
                private: true,
            }],
            Some(t0 + 20_000_000),
        );
        assert!(now_ns() - t0 >= 15_000_000, "deadline respected");
        let w2 = Arc::clone(&w);
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w2.store(1, SeqCst);
            wake_private(&w2);
        });
        let t0 = now_ns();
        wait_any(
            &[WaitWord {
                addr: w.as_ptr(),
                val: 0,
                private: true,
            }],
            Some(t0 + 5_000_000_000),
        );
        assert!(now_ns() - t0 < 4_000_000_000, "woken early");
        h.join().unwrap();
    }

    fn word(w: &AtomicU32, private: bool) -> WaitWord {
        WaitWord {
            addr: w.as_ptr(),
            val: w.load(SeqCst),
            private,
        }
    }

    #[test]
    fn fallback_sees_a_change_of_any_word_and_the_deadline() {
        let (ctl, other) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(7)));
        // The deadline.
        let t0 = now_ns();
        wait_any_fallback(
            &[word(&ctl, true), word(&other, false)],
            Some(t0 + 20_000_000),
        );
        let waited = now_ns() - t0;
        assert!((15_000_000..1_000_000_000).contains(&waited), "{waited} ns");
        // A change of the second word (no wake on it): seen within a few slices.
        let o2 = Arc::clone(&other);
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            o2.store(8, SeqCst);
            now_ns()
        });
        wait_any_fallback(
            &[
                word(&ctl, true),
                WaitWord {
                    val: 7,
                    ..word(&other, false)
                },
            ],
            None,
        );
        let seen = now_ns();
        let changed = h.join().unwrap();
        assert!(seen >= changed, "returned only after the change");
        assert!(
            seen - changed < 50_000_000,
            "seen {} µs late",
            (seen - changed) / 1000
        );
        // A change and wake of the first word ends the wait at once.
        let c2 = Arc::clone(&ctl);
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            c2.fetch_add(1, SeqCst);
            wake_private(&c2);
        });
        let t0 = now_ns();
        wait_any_fallback(&[word(&ctl, true)], Some(t0 + 5_000_000_000));
        assert!(now_ns() - t0 < 4_000_000_000, "woken");
        h.join().unwrap();
        // No words: just the deadline.
        let t0 = now_ns();
        wait_any_fallback(&[], Some(t0 + 5_000_000));
        assert!(now_ns() - t0 >= 4_000_000);
    }
}
