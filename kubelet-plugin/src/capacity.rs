//! What one GPU offers the cluster, computed from the arbiter's own admission [`Policy`] so
//! that the scheduler's sums and the arbiter's cannot disagree.
//!
//! The arbiter commits `cap + reserve` per slice on a device (`Policy::commitment_on`: the cap
//! plus that device's context charge × `processes_per_slice`), where each device's per-process
//! charge follows the context footprint the arbiter measured on it at its start
//! (`gpuslice_admission::contexts`, kept in `<state-dir>/contexts.json`): the plugin builds its
//! [`Policy`] with [`node_policy`] from the same file, so both charge each device what was
//! measured there (the assumed H200 figure until the arbiter has run once), and a node with GPUs
//! of different kinds publishes each its own capacity. Consumable capacity has no per-allocation overhead,
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

pub use gpuslice_admission::contexts::node_policy;
use gpuslice_admission::fit::Policy;
use gpuslice_admission::inventory::DeviceInfo;

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
            .reserve_on(device.index)
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

    /// The published memory follows the context footprint the arbiter measured (its
    /// `contexts.json`): 518 MiB + the 256 MiB module allowance per slice set aside, and more
    /// when the arbiter measured more; the assumed H200 figure before it ever ran.
    #[test]
    fn the_measured_context_footprint_sets_the_reserves_aside() {
        use gpuslice_admission::contexts::{resolve, save};
        const MI: u64 = 1 << 20;
        let dir = std::env::temp_dir().join(format!("gs-cap-ctx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let dev = DeviceInfo {
            index: 0,
            uuid: "GPU-a".into(),
            name: "H200".into(),
            memory_total: 141 << 30,
        };
        let publish = PublishPolicy { slices_per_gpu: 4 };
        let config = gpuslice_api::config::AdmissionConfig::default();
        let offered = |dir: &std::path::Path| offer(&node_policy(&config, dir), &publish, &dev);
        assert_eq!(
            offered(&dir).memory,
            (141 << 30) - 4 * 904 * MI,
            "assumed 518 MiB with its margin"
        );
        let devs = [dev.clone()];
        let (list, _) = resolve(&devs, "580.159.04", Ok(vec![(0, 1252 * MI)]), None);
        save(&dir, &list).expect("contexts.json");
        assert_eq!(offered(&dir).memory, (141 << 30) - 4 * (1252 + 256) * MI);
        // The device plugin's units come from the same offer: (141 GiB − 4 × 1 508 MiB) / 1 GiB.
        let units = crate::deviceplugin::units::units_of(
            &crate::deviceplugin::units::UnitPolicy {
                unit: 1 << 30,
                policy: node_policy(&config, &dir),
                publish,
            },
            &crate::gpu::Gpu {
                info: dev.clone(),
                minor: 0,
                architecture: None,
                compute_capability: None,
                driver_version: None,
            },
        );
        assert_eq!(units.units, 135);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A node with two kinds of GPU: each device's `memory` and device-plugin units set aside
    /// its own contexts' charge (518 + 256 MiB on the H200, 300 + 256 MiB on the smaller one),
    /// not the node's largest.
    #[test]
    fn each_device_of_a_mixed_node_publishes_its_own_reserves() {
        use crate::deviceplugin::units::{units_of, UnitPolicy};
        use gpuslice_admission::contexts::{resolve, save};
        const MI: u64 = 1 << 20;
        let dir = std::env::temp_dir().join(format!("gs-cap-mixed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let dev = |index: u32, gib: u64| DeviceInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: "x".into(),
            memory_total: gib << 30,
        };
        let devs = [dev(0, 141), dev(1, 24)];
        let (list, _) = resolve(&devs, "580", Ok(vec![(0, 518 * MI), (1, 300 * MI)]), None);
        save(&dir, &list).expect("contexts.json");
        let config = gpuslice_api::config::AdmissionConfig::default();
        let policy = node_policy(&config, &dir);
        let publish = PublishPolicy { slices_per_gpu: 4 };
        let memory: Vec<u64> = devs
            .iter()
            .map(|d| offer(&policy, &publish, d).memory)
            .collect();
        assert_eq!(
            memory,
            [(141 << 30) - 4 * 774 * MI, (24 << 30) - 4 * 556 * MI]
        );
        let units: Vec<u32> = devs
            .iter()
            .map(|d| {
                let p = UnitPolicy {
                    unit: 1 << 30,
                    policy: policy.clone(),
                    publish,
                };
                let gpu = crate::gpu::Gpu {
                    info: d.clone(),
                    minor: d.index,
                    architecture: None,
                    compute_capability: None,
                    driver_version: None,
                };
                units_of(&p, &gpu).units
            })
            .collect();
        // floor((141 GiB − 3 096 MiB) / 1 GiB) and floor((24 GiB − 2 224 MiB) / 1 GiB).
        assert_eq!(units, [137, 21]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
