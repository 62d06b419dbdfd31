//! What NVML says about the node, read through the real `nvml-wrapper` crate from whichever
//! `libnvidia-ml.so.1` the loader finds (the simulator's in tests, the driver's on a GPU node).

use anyhow::{Context, Result};
use nvml_wrapper::Nvml;

/// One device as NVML reports it.
#[derive(Debug, Clone)]
pub struct NvmlDevice {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub total: u64,
    pub used: u64,
    pub free: u64,
    pub utilization: u32,
    /// (host pid, bytes used) of every running compute process.
    pub processes: Vec<(u32, u64)>,
}

/// Opens NVML by soname through the dynamic loader's search path.
pub fn open() -> Result<Nvml> {
    Nvml::builder()
        .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
        .init()
        .context("initialising NVML from libnvidia-ml.so.1")
}

/// Every device with memory, utilisation and processes.
pub fn devices(nvml: &Nvml) -> Result<Vec<NvmlDevice>> {
    let n = nvml.device_count().context("nvmlDeviceGetCount")?;
    let mut out = Vec::new();
    for index in 0..n {
        let d = nvml
            .device_by_index(index)
            .context("nvmlDeviceGetHandleByIndex")?;
        let mem = d.memory_info().context("nvmlDeviceGetMemoryInfo")?;
        let util = d.utilization_rates().map(|u| u.gpu).unwrap_or(0);
        let processes = d
            .running_compute_processes()
            .context("nvmlDeviceGetComputeRunningProcesses")?
            .into_iter()
            .map(|p| {
                let used = match p.used_gpu_memory {
                    nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => b,
                    nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => 0,
                };
                (p.pid, used)
            })
            .collect();
        out.push(NvmlDevice {
            index,
            name: d.name().context("nvmlDeviceGetName")?,
            uuid: d.uuid().context("nvmlDeviceGetUUID")?,
            total: mem.total,
            used: mem.used,
            free: mem.free,
            utilization: util,
            processes,
        });
    }
    Ok(out)
}
