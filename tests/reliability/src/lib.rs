//! Harness of the reliability trials (`docs/reliability.md`): a simulated node with the real
//! `gpuslice-arbiter` (which can be SIGKILLed and restarted), tenants under the real
//! `libgpuslice.so` (`gpuslice-trial-tenant` and `gpuslice-workload`), and the ground truths the
//! trials compare: the slices' `usage` files and the simulator's own memory accounting.
//!
//! Test support only (never shipped), so errors are `anyhow` and failed expectations panic.

pub mod node;
pub mod tenant;

pub use node::Node;
pub use tenant::Tenant;

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every process of the machine).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `GPUSLICE_TRIALS_SCALE` (default 1): the fraction of the full counts and durations to run.
/// CI uses a reduced scale; the full counts are recorded in `docs/reliability.md`.
pub fn scale() -> f64 {
    std::env::var("GPUSLICE_TRIALS_SCALE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0 && *s <= 1.0)
        .unwrap_or(1.0)
}

/// `full` scaled by [`scale`], at least `min`.
pub fn scaled(full: u64, min: u64) -> u64 {
    ((full as f64 * scale()).round() as u64).max(min)
}

/// A small xorshift generator (reproducible from its seed; no dependency).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced by a constant).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The seed of a run: `GPUSLICE_TRIALS_SEED`, else the clock (printed so a run can be repeated).
pub fn seed() -> u64 {
    std::env::var("GPUSLICE_TRIALS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(mono_ns)
}

/// Extracts `key=value` from a line of tenant output.
pub fn field<T: std::str::FromStr>(text: &str, key: &str) -> Option<T> {
    let prefix = format!("{key}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}
