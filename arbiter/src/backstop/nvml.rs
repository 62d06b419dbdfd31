//! [`GpuSource`] from NVML (`nvml-wrapper`): the processes on each device with their memory,
//! and the device time each ran since the previous call.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::engine::{GpuProcess, GpuSource};

/// The span NVML's per-process utilisation percentages cover at most, µs.
const NVML_WINDOW_US: u64 = 1_000_000;

/// NVML through `nvml-wrapper`.
pub struct NvmlSource {
    nvml: nvml_wrapper::Nvml,
    last_seen: HashMap<u32, u64>,
}

impl NvmlSource {
    /// Initialises NVML from `library` (or the system's).
    pub fn open(library: Option<&Path>) -> Result<NvmlSource, String> {
        let nvml =
            crate::nvml::init(library).map_err(|e| format!("cannot initialise NVML: {e}"))?;
        Ok(NvmlSource {
            nvml,
            last_seen: HashMap::new(),
        })
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl GpuSource for NvmlSource {
    fn processes(&mut self, index: u32) -> Result<Vec<GpuProcess>, String> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let d = self
            .nvml
            .device_by_index(index)
            .map_err(|e| e.to_string())?;
        let list = d.running_compute_processes().map_err(|e| e.to_string())?;
        Ok(list
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect())
    }

    /// NVML's process samples since the last call. A sample's `sm_util` is the percentage of
    /// the span since the previous call that the process ran (the simulator's exact figure; on
    /// real devices several samples per process are averaged — an approximation).
    fn busy_since_last(&mut self, index: u32) -> Result<Vec<(u32, u64)>, String> {
        let now = now_us();
        let Some(&since) = self.last_seen.get(&index) else {
            self.last_seen.insert(index, now);
            return Ok(Vec::new());
        };
        let d = self
            .nvml
            .device_by_index(index)
            .map_err(|e| e.to_string())?;
        let samples = match d.process_utilization_stats(since) {
            Ok(s) => s,
            Err(nvml_wrapper::error::NvmlError::NotFound) => Vec::new(),
            Err(e) => return Err(e.to_string()),
        };
        let newest = samples.iter().map(|s| s.timestamp).max().unwrap_or(now);
        // A percentage is over at most NVML's sampling window (the simulator's and the
        // driver's buffers hold about a second): over a longer span since the last call (a
        // delayed tick) it says nothing about the time before, which must not be counted as
        // run at the same rate.
        let span_us = newest.saturating_sub(since.max(newest.saturating_sub(NVML_WINDOW_US)));
        self.last_seen.insert(index, newest.max(since));
        let mut per: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for s in samples {
            let e = per.entry(s.pid).or_default();
            e.0 += u64::from(s.sm_util.min(100));
            e.1 += 1;
        }
        Ok(per
            .into_iter()
            .map(|(pid, (sum, n))| (pid, sum * span_us * 1000 / (100 * n.max(1))))
            .collect())
    }
}
