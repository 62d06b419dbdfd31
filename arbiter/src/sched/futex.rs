//! The scheduler loop's waits: on one word (the drain counter) and on many at once
//! (`futex_waitv`: the demand words of every slice of a device plus the loop's control word),
//! each with an absolute CLOCK_MONOTONIC deadline. The calls themselves are region's
//! (`gpuslice_region::futex`, shared with the launch gate); what is decided here is the
//! fallback: where the kernel lacks `futex_waitv` (before 5.16; gVisor) or fallbacks are forced
//! (`crate::syscalls`), [`wait_any`] waits on one word at a time and re-checks the others.

use gpuslice_region::futex::{self as rf, Waitv};
pub use gpuslice_region::futex::{now_ns, wake_private, wake_shared, WAITV_MAX};
use std::sync::atomic::{AtomicU32, Ordering::Acquire};
use std::time::Duration;

/// Waits while the shared word at `addr` equals `val`, at most `timeout`.
///
/// # Safety
/// `addr` must be the address of a live, aligned, mapped `u32` for the whole call.
pub unsafe fn wait_shared(addr: *const u32, val: u32, timeout: Duration) {
    // SAFETY: the caller's contract is region's.
    unsafe { rf::wait(addr, val, false, timeout) };
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

/// Waits until any of `words` changes or is woken, or until `deadline` (CLOCK_MONOTONIC ns;
/// `None` = no deadline). Only the first [`WAITV_MAX`] words are waited on. Without
/// `futex_waitv`, [`wait_any_fallback`]. Returns the index of the word a `FUTEX_WAKE` ended
/// the wait on (whether or not its value changed: the caller compares), `None` otherwise
/// (deadline, a word found changed, a signal).
pub fn wait_any(words: &[WaitWord], deadline: Option<u64>) -> Option<usize> {
    let words = &words[..words.len().min(WAITV_MAX)];
    if !crate::syscalls::use_futex_waitv() {
        return wait_any_fallback(words, deadline);
    }
    let v: Vec<Waitv> = words
        .iter()
        .map(|w| Waitv::new(w.addr, w.val, w.private))
        .collect();
    // SAFETY: every address is a live word the caller keeps mapped (this function's contract,
    // as for the fallback's loads).
    match unsafe { rf::waitv(&v, deadline) } {
        Ok(woken) => woken,
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            crate::syscalls::note_futex_waitv(Some(&e));
            wait_any_fallback(words, deadline)
        }
        Err(_) => None,
    }
}

/// The `futex_waitv` fallback: returns when any word differs from its value, when the first
/// word is woken, or at `deadline`. (A wake that changes nothing can be missed between two
/// slices; every waker here changes its word first.) Waits with `FUTEX_WAIT` on the first word (the loop's
/// control word, or the watcher's stop word) in slices of `syscalls::FALLBACK_SLICE`, re-reading
/// every other word between slices: a change of another word is seen within one slice.
/// Returns `Some(0)` when the first word was woken, else `None`.
pub fn wait_any_fallback(words: &[WaitWord], deadline: Option<u64>) -> Option<usize> {
    let Some(first) = words.first() else {
        if let Some(d) = deadline {
            std::thread::sleep(Duration::from_nanos(d.saturating_sub(now_ns())));
        }
        return None;
    };
    let slice = crate::convert::u128_to_u64(crate::syscalls::FALLBACK_SLICE.as_nanos());
    loop {
        // SAFETY: every address is a live, aligned u32 the caller keeps mapped (wait_any's
        // contract); an atomic load only reads it.
        let changed = words
            .iter()
            .any(|w| unsafe { (*(w.addr as *const AtomicU32)).load(Acquire) } != w.val);
        let now = now_ns();
        if changed || deadline.is_some_and(|d| now >= d) {
            return None;
        }
        let wait = deadline.map_or(slice, |d| (d - now).min(slice));
        let timeout = Duration::from_nanos(wait);
        // SAFETY: as above for `first.addr`.
        if unsafe { rf::wait(first.addr, first.val, first.private, timeout) } {
            // Woken (a wake without a change still ends the wait, as with futex_waitv).
            return Some(0);
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

    #[test]
    fn a_wake_that_changes_nothing_names_its_word() {
        let (a, b) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let stop = Arc::new(AtomicU32::new(0));
        let (b2, stop2) = (Arc::clone(&b), Arc::clone(&stop));
        let h = std::thread::spawn(move || {
            // Until the waiter is back: the first wake that finds it waiting ends its wait.
            while stop2.load(SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(5));
                wake_private(&b2);
            }
        });
        let woken = wait_any(
            &[word(&a, true), word(&b, true)],
            Some(now_ns() + 2_000_000_000),
        );
        stop.store(1, SeqCst);
        h.join().unwrap();
        assert_eq!(b.load(SeqCst), 0, "nothing changed");
        if crate::syscalls::use_futex_waitv() {
            assert_eq!(woken, Some(1), "the second word's wake");
        } else {
            // The fallback waits on the first word only: the deadline ends it.
            assert_eq!(woken, None);
        }
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
