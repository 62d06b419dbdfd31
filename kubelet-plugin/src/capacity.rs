//! What one GPU offers the cluster, computed from the arbiter's own admission [`Policy`] so
//! that the scheduler's sums and the arbiter's cannot disagree.
//!
//! The arbiter commits `cap + reserve` per slice on a device (`Policy::commitment`: the cap plus
//! `context_reserve × processes_per_slice`). Consumable capacity has no per-allocation overhead,
//! so the driver publishes a third capacity, `slices` (value `slices_per_gpu`, every claim
//! consumes exactly 1), and sets aside the reserves of that many slices up front:
//!
//! ```text
//! memory = floor((memory_total − slices_per_gpu × reserve) / step) × step
//! ```
//!
//! Then any set of claims the scheduler allows on a device (Σ memory ≤ `memory`, count ≤
//! `slices`) commits Σ(cap + reserve) ≤ `memory_total` at the arbiter: it is admitted. The
//! plugin refuses at prepare whatever exceeds the published numbers (what the scheduler itself
//! would never allocate), so node and cluster refuse the same things. `compute` is the
//! arbiter's guarantee pool, 100 per device, exactly.

use gpuslice_arbiter::fit::Policy;
use gpuslice_arbiter::inventory::DeviceInfo;

/// Granularity of the `memory` capacity and of what a claim may consume: 1 MiB.
pub const MEMORY_STEP: u64 = 1 << 20;
/// The `compute` capacity of every device: percent of its time.
pub const COMPUTE: u64 = 100;
/// Default of `--slices-per-gpu`.
pub const DEFAULT_SLICES_PER_GPU: u32 = 8;

/// Names of the capacities in the ResourceSlice.
pub mod names {
    /// Bytes a device's slices may be promised (their caps).
    pub const MEMORY: &str = "memory";
    /// Percent of the device's time that may be guaranteed.
    pub const COMPUTE: &str = "compute";
    /// How many claims the device holds at most (each consumes 1).
    pub const SLICES: &str = "slices";
}

/// What the driver publishes per device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// `memory`, bytes, a multiple of [`MEMORY_STEP`].
    pub memory: u64,
    /// `compute`, percent.
    pub compute: u64,
    /// `slices`.
    pub slices: u32,
}

/// The driver's settings for what it publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishPolicy {
    /// Claims per GPU at most (`--slices-per-gpu`, ≥ 1).
    pub slices_per_gpu: u32,
}

impl Default for PublishPolicy {
    fn default() -> Self {
        PublishPolicy {
            slices_per_gpu: DEFAULT_SLICES_PER_GPU,
        }
    }
}

/// The offer of `device` under the arbiter's `policy`. With `overcommit_memory` the arbiter
/// checks no memory, and the whole device is offered.
pub fn offer(policy: &Policy, publish: &PublishPolicy, device: &DeviceInfo) -> Offer {
    let reserves = if policy.overcommit_memory {
        0
    } else {
        policy
            .reserve()
            .saturating_mul(u64::from(publish.slices_per_gpu))
    };
    let memory = device.memory_total.saturating_sub(reserves);
    Offer {
        memory: memory - memory % MEMORY_STEP,
        compute: COMPUTE,
        slices: publish.slices_per_gpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserves_of_every_slot_are_set_aside_and_the_rest_rounded_to_the_step() {
        let policy = Policy::default(); // 512 MiB × 1 process
        let dev = DeviceInfo {
            index: 0,
            uuid: "GPU-a".into(),
            name: "H100".into(),
            memory_total: (80 << 30) + 12345,
        };
        let o = offer(&policy, &PublishPolicy { slices_per_gpu: 4 }, &dev);
        assert_eq!(o.memory, (80 << 30) - 4 * (512 << 20));
        assert_eq!(o.compute, 100);
        assert_eq!(o.slices, 4);
        let over = Policy {
            overcommit_memory: true,
            ..Policy::default()
        };
        assert_eq!(
            offer(&over, &PublishPolicy::default(), &dev).memory,
            80 << 30
        );
    }
}
