//! Choosing devices for a count request: bin-pack (the fullest device that still fits, so large
//! holes stay free for large requests) or spread (the emptiest).

use gpuslice_api::Placement;

use crate::fit::{Ask, Load, Policy};
use crate::inventory::DeviceInfo;

/// A device that fits, with what would be left on it after placing the slice.
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    /// Position in the admission's device list.
    pub pos: usize,
    /// Memory left uncommitted after placement (without overcommit; else total minus committed,
    /// possibly negative).
    pub memory_left: i128,
    /// Share left unguaranteed after placement.
    pub compute_left: i64,
    /// The device's NVML index (last tie-breaker).
    pub index: u32,
}

impl Candidate {
    /// Builds the candidate for placing `ask` on `device` with `load`.
    pub fn new(policy: &Policy, pos: usize, device: &DeviceInfo, load: Load, ask: Ask) -> Self {
        let commit = policy.commitment_on(device.index, ask.cap);
        Candidate {
            pos,
            memory_left: i128::from(device.memory_total)
                - i128::from(load.memory_committed)
                - i128::from(commit),
            compute_left: 100 - i64::from(load.compute_guaranteed) - i64::from(ask.compute),
            index: device.index,
        }
    }
}

/// Orders candidates best first for `placement` and returns the first `n` positions, sorted by
/// device index (the order the tenant sees them in).
///
/// Bin-pack: least memory left after placement (absolute bytes, so on an 80 GiB + 40 GiB node a
/// request that fits the 40 GiB device goes there and the 80 GiB hole stays whole), then least
/// compute left, then lowest index. Spread: the reverse of the first two keys.
pub fn choose(placement: Placement, mut candidates: Vec<Candidate>, n: usize) -> Vec<usize> {
    match placement {
        Placement::Binpack => candidates.sort_by_key(|c| (c.memory_left, c.compute_left, c.index)),
        Placement::Spread => candidates.sort_by_key(|c| {
            (
                std::cmp::Reverse(c.memory_left),
                std::cmp::Reverse(c.compute_left),
                c.index,
            )
        }),
    }
    let mut chosen: Vec<&Candidate> = candidates.iter().take(n).collect();
    chosen.sort_by_key(|c| c.index);
    chosen.into_iter().map(|c| c.pos).collect()
}
