//! The two atomic-integer traits the reservation protocol is written against, so that the same
//! code runs on mmapped `std` atomics and, in the model test, on `loom` atomics.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The operations the protocol needs on a 64-bit word.
pub trait Word64 {
    /// `load`.
    fn get(&self, o: Ordering) -> u64;
    /// `store`.
    fn put(&self, v: u64, o: Ordering);
    /// Strong `compare_exchange` with the same ordering on failure (relaxed-ified if `Release`).
    fn cas(&self, current: u64, new: u64, o: Ordering) -> Result<u64, u64>;
    /// `fetch_add`.
    fn add(&self, v: u64, o: Ordering) -> u64;
    /// `swap`.
    fn swap(&self, v: u64, o: Ordering) -> u64;
}

/// The operations the protocol needs on a 32-bit word.
pub trait Word32 {
    /// `load`.
    fn get(&self, o: Ordering) -> u32;
    /// `fetch_add`.
    fn add(&self, v: u32, o: Ordering) -> u32;
    /// `fetch_sub`.
    fn sub(&self, v: u32, o: Ordering) -> u32;
    /// `store`.
    fn put(&self, v: u32, o: Ordering);
    /// Strong `compare_exchange`, failure ordering as for [`Word64::cas`].
    fn cas(&self, current: u32, new: u32, o: Ordering) -> Result<u32, u32>;
    /// `swap`.
    fn swap(&self, v: u32, o: Ordering) -> u32;
}

/// Failure ordering allowed for a given success ordering.
pub fn failure_ordering(o: Ordering) -> Ordering {
    match o {
        Ordering::Release | Ordering::Relaxed => Ordering::Relaxed,
        Ordering::AcqRel => Ordering::Acquire,
        other => other,
    }
}

impl Word64 for AtomicU64 {
    fn get(&self, o: Ordering) -> u64 {
        self.load(o)
    }
    fn put(&self, v: u64, o: Ordering) {
        self.store(v, o)
    }
    fn cas(&self, current: u64, new: u64, o: Ordering) -> Result<u64, u64> {
        self.compare_exchange(current, new, o, failure_ordering(o))
    }
    fn add(&self, v: u64, o: Ordering) -> u64 {
        self.fetch_add(v, o)
    }
    fn swap(&self, v: u64, o: Ordering) -> u64 {
        AtomicU64::swap(self, v, o)
    }
}

impl Word32 for AtomicU32 {
    fn get(&self, o: Ordering) -> u32 {
        self.load(o)
    }
    fn add(&self, v: u32, o: Ordering) -> u32 {
        self.fetch_add(v, o)
    }
    fn sub(&self, v: u32, o: Ordering) -> u32 {
        self.fetch_sub(v, o)
    }
    fn put(&self, v: u32, o: Ordering) {
        self.store(v, o)
    }
    fn cas(&self, current: u32, new: u32, o: Ordering) -> Result<u32, u32> {
        self.compare_exchange(current, new, o, failure_ordering(o))
    }
    fn swap(&self, v: u32, o: Ordering) -> u32 {
        AtomicU32::swap(self, v, o)
    }
}
