//! [`GpuSource`] from NVML (`nvml-wrapper`): the processes on each device with their memory,
//! and the device time each ran since the previous call.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::engine::{GpuProcess, GpuSource, SAMPLE_PERIOD_NS};

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
        .map_or(0, |d| crate::convert::u128_to_u64(d.as_micros()))
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

    /// NVML's process samples since the last call, as device time: the driver samples every
    /// 200 ms and credits each sample to **one** process (the one resident when it was taken)
    /// with the whole device's busy percent over the window (measured on an H200, driver 580,
    /// `docs/contexts.md`), so each sample stands for `smUtil` % of one sample period of that
    /// process. Any one window is 0 % or nearly all for a given process; the lease check
    /// allows for that sampling error (`engine.rs`).
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
        let newest = samples.iter().map(|s| s.timestamp).max().unwrap_or(since);
        self.last_seen.insert(index, newest.max(since));
        let mut per: BTreeMap<u32, u64> = BTreeMap::new();
        for s in samples.iter().filter(|s| s.timestamp > since) {
            *per.entry(s.pid).or_default() +=
                u64::from(s.sm_util.min(100)) * SAMPLE_PERIOD_NS / 100;
        }
        Ok(per.into_iter().collect())
    }
}
