//! The protocol word traits on `loom` atomics, for the model tests.

#![allow(dead_code)]

use gpuslice_region::atomics::{failure_ordering, Word32, Word64};
use loom::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::atomic::Ordering;

pub struct L64(pub AtomicU64);
pub struct L32(pub AtomicU32);

impl Word64 for L64 {
    fn get(&self, o: Ordering) -> u64 {
        self.0.load(o)
    }
    fn put(&self, v: u64, o: Ordering) {
        self.0.store(v, o)
    }
    fn cas(&self, c: u64, n: u64, o: Ordering) -> Result<u64, u64> {
        self.0.compare_exchange(c, n, o, failure_ordering(o))
    }
    fn add(&self, v: u64, o: Ordering) -> u64 {
        self.0.fetch_add(v, o)
    }
    fn swap(&self, v: u64, o: Ordering) -> u64 {
        self.0.swap(v, o)
    }
}
impl Word32 for L32 {
    fn get(&self, o: Ordering) -> u32 {
        self.0.load(o)
    }
    fn add(&self, v: u32, o: Ordering) -> u32 {
        self.0.fetch_add(v, o)
    }
    fn sub(&self, v: u32, o: Ordering) -> u32 {
        self.0.fetch_sub(v, o)
    }
    fn put(&self, v: u32, o: Ordering) {
        self.0.store(v, o)
    }
    fn cas(&self, c: u32, n: u32, o: Ordering) -> Result<u32, u32> {
        self.0.compare_exchange(c, n, o, failure_ordering(o))
    }
    fn swap(&self, v: u32, o: Ordering) -> u32 {
        self.0.swap(v, o)
    }
}
