//! What the scheduler tells the outside (`gpuslice status`, metrics): per device and per slice
//! the configured shares, the achieved share over the last 1 s and 10 s, lease hand-offs and
//! time spent waiting for the lease. A plain data snapshot, cheap to clone.

use serde::{Deserialize, Serialize};

/// One slice on one device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SliceShare {
    /// The slice id.
    pub slice_id: String,
    /// Guaranteed share, fraction of the device (0.30 = 30 %); 0 = best effort.
    pub guarantee: f64,
    /// Ceiling, fraction of the device (1.0 = none).
    pub limit: f64,
    /// `true` for `priority: high`.
    pub high_priority: bool,
    /// Device time charged to the slice over the last second / wall time.
    pub achieved_1s: f64,
    /// The same over the last 10 s.
    pub achieved_10s: f64,
    /// Times the slice was granted the lease.
    pub grants: u64,
    /// Total ns the slice had threads waiting at the gate without the lease.
    pub wait_ns: u64,
    /// Total ns charged (lease time plus the overrun of its queued work).
    pub charged_ns: u64,
    /// Drains that did not report completion in time (charged the whole wait).
    pub drain_timeouts: u64,
    /// 99th percentile of the slice's recent drains (revoke → its queued work reported
    /// complete: the queue's remaining kernels plus the gate thread's and the arbiter's
    /// wake-ups), ns.
    #[serde(default)]
    pub drain_p99_ns: u64,
    /// The slice holds the lease now.
    pub holding: bool,
    /// The slice had work (waiting or launching) at the last decision.
    pub busy: bool,
    /// Consecutive leases in which the slice claimed demand but launched nothing (a hostile or
    /// broken gate); 0 once it launches again. Each one doubles its back-off.
    #[serde(default)]
    pub strikes: u32,
    /// Leases the slice lost that way, ever (monotonic; the metrics counter).
    #[serde(default)]
    pub strikes_total: u64,
    /// ns left of the slice's back-off (its demand claims ignored) when this was published;
    /// 0 = not backed off.
    #[serde(default)]
    pub backoff_remaining_ns: u64,
    /// Times the free device was held (at most a quantum) for the slice after its lease ended,
    /// its thread late back at the gate (`docs/scheduling.md`, anticipation).
    #[serde(default)]
    pub holds: u64,
    /// ns of those holds, charged to the slice (within `charged_ns`).
    #[serde(default)]
    pub held_ns: u64,
    /// Leases handed on because every process of the slice was idle while others waited
    /// (`docs/scheduling.md`, "Idle holders").
    #[serde(default)]
    pub quiet_revokes: u64,
    /// Times a word of the slice (`demand`, `busy`, `pending`) woke the device loop, ever
    /// (`docs/scheduling.md`, "Hostile usage words").
    #[serde(default)]
    pub loop_wakes: u64,
    /// Most of those in one 100 ms window, ever.
    #[serde(default)]
    pub loop_wakes_peak: u32,
    /// Windows in which those wakes went over the budget and the loop stopped listening to
    /// the slice's words until the window ended, ever.
    #[serde(default)]
    pub wake_mutes: u64,
}

/// One device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceSched {
    /// NVML index.
    pub index: u32,
    /// Lease quantum, ns.
    pub quantum_ns: u64,
    /// Lease hand-offs (grants to a different slice than the previous holder).
    pub handoffs: u64,
    /// 99th percentile of the arbiter's hand-off time (device free → next holder woken), ns,
    /// over the recent hand-offs.
    pub handoff_p99_ns: u64,
    /// `SCHED_FIFO` priority the device's scheduler thread runs at; 0 = normal scheduling
    /// (off, or refused: see the arbiter's log).
    #[serde(default)]
    pub realtime_priority: u32,
    /// Times the device loop woke (a deadline, a command, a slice's word), ever.
    #[serde(default)]
    pub wakeups: u64,
    /// Slices placed on the device.
    pub slices: Vec<SliceShare>,
}

/// Every device's scheduler state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulerStatus {
    /// Per device, by index.
    pub devices: Vec<DeviceSched>,
}

impl SchedulerStatus {
    /// The entry of `slice_id` on device `index`.
    pub fn slice(&self, index: u32, slice_id: &str) -> Option<&SliceShare> {
        self.devices
            .iter()
            .find(|d| d.index == index)?
            .slices
            .iter()
            .find(|s| s.slice_id == slice_id)
    }
}

/// Copies the scheduler's per-slice achieved shares into the node status the control socket
/// returns (`gpuslice status`). Fractions become basis points, clamped to 0..=10000.
pub fn fill_shares(node: &mut gpuslice_api::NodeStatus, sched: &SchedulerStatus) {
    let bp = |f: f64| crate::convert::f64_to_u32((f.clamp(0.0, 1.0) * 10_000.0).round());
    for dev in &mut node.devices {
        let Some(d) = sched.devices.iter().find(|d| d.index == dev.index) else {
            continue;
        };
        dev.shares = d
            .slices
            .iter()
            .map(|s| gpuslice_api::ShareStatus {
                slice_id: s.slice_id.clone(),
                achieved_1s_bp: bp(s.achieved_1s),
                achieved_10s_bp: bp(s.achieved_10s),
                grants: s.grants,
                wait_ns: s.wait_ns,
                holding: s.holding,
                strikes: s.strikes,
                strikes_total: s.strikes_total,
                backed_off: s.backoff_remaining_ns > 0,
            })
            .collect();
    }
}
