//! The one audited accessor for raw shared memory.
//!
//! Every byte of the state file is touched only through [`Shm::u64`] / [`Shm::u32`], which
//! bounds- and alignment-check the offset and hand out atomics. The contents are written by other
//! processes and may be garbage; callers treat every value as untrusted (indices are re-checked,
//! sizes clamped). Futex waits and wakes on a shared word also live here.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// A `MAP_SHARED` mapping of the whole state file, unmapped on drop.
pub struct Shm {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomics, so sharing it between threads is sound.
unsafe impl Send for Shm {}
// SAFETY: as above: all access goes through `&AtomicU64` / `&AtomicU32`.
unsafe impl Sync for Shm {}

/// A reference to a constant zero, returned for out-of-range offsets so callers never fault.
static DUMMY64: AtomicU64 = AtomicU64::new(0);
static DUMMY32: AtomicU32 = AtomicU32::new(0);

impl Shm {
    /// Maps `len` bytes of `fd` read-write and shared.
    pub fn map(fd: libc::c_int, len: usize) -> std::io::Result<Shm> {
        // SAFETY: a fresh mapping at a kernel-chosen address; arguments are plain values and the
        // result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Shm {
            base: p.cast(),
            len,
        })
    }

    /// Size of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, in practice).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The 64-bit atomic at byte offset `off`. Out of range or misaligned offsets are a bug in
    /// the layout code: they trip a debug assertion and otherwise yield a detached dummy.
    pub fn u64(&self, off: usize) -> &AtomicU64 {
        let ok = off & 7 == 0 && off.checked_add(8).is_some_and(|e| e <= self.len);
        debug_assert!(ok, "shared offset {off} out of range");
        if !ok {
            return &DUMMY64;
        }
        // SAFETY: `off..off+8` lies inside the live mapping (checked above) and is 8-aligned
        // (the mapping is page-aligned); AtomicU64 has the layout of u64, and every process only
        // accesses this memory atomically, so no data race is possible. The reference cannot
        // outlive `self`, which keeps the mapping alive.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// The 32-bit atomic at byte offset `off` (futex words).
    pub fn u32(&self, off: usize) -> &AtomicU32 {
        let ok = off & 3 == 0 && off.checked_add(4).is_some_and(|e| e <= self.len);
        debug_assert!(ok, "shared offset {off} out of range");
        if !ok {
            return &DUMMY32;
        }
        // SAFETY: as in `u64`: in bounds, 4-aligned, accessed only atomically, bounded by `self`.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` describe the mapping created in `map`; no references into it can
        // outlive `self`.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// Waits on a shared (non-private) futex while `*word == expected`, for at most `timeout_ns`.
/// Spurious returns are fine: every caller re-checks its condition.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    crate::clock::precise_timers();
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` points to a live, 4-aligned u32 (in a shared mapping or a static); FUTEX_WAIT
    // without FUTEX_PRIVATE_FLAG so waiters in other processes mapping the same file match; the
    // relative timeout is a valid timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every waiter of a shared futex word.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: `word` points to a live, 4-aligned u32; FUTEX_WAKE only reads the address.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}
