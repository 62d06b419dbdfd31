//! SIGBUS guard for mappings of the tenant-writable `usage` file.
//!
//! A tenant can truncate its `usage` file (it is a writable bind mount). Every page of a
//! `MAP_SHARED` mapping past the new end of the file then raises SIGBUS when touched — in the
//! arbiter, that would kill the node daemon (found by reliability trial 1, `docs/reliability.md`).
//! A process that reads other slices' files calls [`install`] once; from then on a fault inside a
//! registered `usage` mapping is repaired by mapping a private zero page over the faulting page
//! (`MAP_FIXED`), and the access is retried: the reader sees zeros there (nothing reserved, no
//! live records), which only misstates the truncating slice itself. Faults anywhere else keep
//! the default action. Processes that never call [`install`] (tenants) are unaffected.
//!
//! The handler is async-signal-safe: it reads atomics and calls `mmap(2)` only.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

/// Mappings that can be guarded at once (slots are reused after unmapping).
const SLOTS: usize = 4096;

/// (start, length) of registered mappings; start 0 = free slot.
static STARTS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static LENS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static INSTALLED: AtomicBool = AtomicBool::new(false);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static REPAIRED: AtomicU64 = AtomicU64::new(0);

/// Installs the SIGBUS handler for this process (idempotent).
pub fn install() -> std::io::Result<()> {
    if INSTALLED.swap(true, AcqRel) {
        return Ok(());
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if let Ok(page) = usize::try_from(page) {
        if page > 0 {
            PAGE.store(page, Relaxed);
        }
    }
    // SAFETY: an all-zero sigaction is a valid starting value; we set the handler and flags.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
    // SAFETY: `sa.sa_mask` is a valid sigset_t to initialise; sigaction gets valid pointers.
    let r = unsafe {
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut())
    };
    if r != 0 {
        INSTALLED.store(false, Release);
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// How many faulting pages the handler has repaired in this process.
pub fn repaired() -> u64 {
    REPAIRED.load(Relaxed)
}

/// Registers `[start, start + len)`; returns its slot (`None` when every slot is taken: the
/// mapping is then unguarded).
pub(crate) fn register(start: usize, len: usize) -> Option<usize> {
    if start == 0 {
        return None;
    }
    for (i, (s, l)) in STARTS.iter().zip(LENS.iter()).enumerate() {
        if s.load(Relaxed) == 0 {
            l.store(len, Relaxed);
            if s.compare_exchange(0, start, AcqRel, Relaxed).is_ok() {
                return Some(i);
            }
        }
    }
    None
}

/// Forgets slot `i` (before the mapping is unmapped).
pub(crate) fn unregister(i: usize) {
    if let Some(s) = STARTS.get(i) {
        s.store(0, Release);
    }
}

extern "C" fn handler(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; for SIGBUS si_addr
    // is the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    for (s, l) in STARTS.iter().zip(LENS.iter()) {
        let start = s.load(Acquire);
        if start != 0 && addr >= start && addr < start + l.load(Relaxed) {
            let page = addr & !(PAGE.load(Relaxed) - 1);
            // SAFETY: `page` lies inside a mapping this process made and still owns (registered
            // until just before it is unmapped); replacing one page of it with private zeroed
            // memory keeps every address of the mapping valid for the atomics read through it.
            let p = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    PAGE.load(Relaxed),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                REPAIRED.fetch_add(1, Relaxed);
                return;
            }
            break;
        }
    }
    // Not ours (or not repairable): the default action, on the retried access.
    // SAFETY: resetting a signal disposition is async-signal-safe.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
}
