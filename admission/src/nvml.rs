//! The device inventory from NVML (`nvml-wrapper`), optionally from a named library file (the
//! config's `nvml_library` or `GPUSLICE_NVML_LIBRARY`, e.g. the simulated `libnvidia-ml.so.1`).

use std::path::Path;

use nvml_wrapper::Nvml;

use crate::inventory::{DeviceInfo, DeviceInventory, InventoryError};

/// Loads and initialises NVML from `library`, or the system's `libnvidia-ml.so.1`.
pub fn init(library: Option<&Path>) -> Result<Nvml, nvml_wrapper::error::NvmlError> {
    match library {
        Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
        None => Nvml::init(),
    }
}

/// NVML, initialised.
pub struct NvmlInventory {
    nvml: Nvml,
}

impl NvmlInventory {
    /// Loads and initialises NVML from `library`, or the system's `libnvidia-ml.so.1`.
    pub fn open(library: Option<&Path>) -> Result<Self, InventoryError> {
        let nvml = init(library).map_err(|e| {
            InventoryError(format!(
                "cannot initialise NVML from {}: {e}",
                library.map_or_else(
                    || "libnvidia-ml.so.1".to_string(),
                    |p| p.display().to_string()
                )
            ))
        })?;
        Ok(NvmlInventory { nvml })
    }
}

impl NvmlInventory {
    /// The driver version NVML reports (`580.159.04`), or `unknown`.
    pub fn driver_version(&self) -> String {
        self.nvml
            .sys_driver_version()
            .unwrap_or_else(|_| "unknown".into())
    }

    /// `(index, bytes)` for every device on which NVML lists process `pid` with its memory.
    pub fn memory_of(&self, pid: u32) -> Vec<(u32, u64)> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let count = self.nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|i| {
                let d = self.nvml.device_by_index(i).ok()?;
                let list = d.running_compute_processes().ok()?;
                let p = list.into_iter().find(|p| p.pid == pid)?;
                match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some((i, b)),
                    UsedGpuMemory::Unavailable => None,
                }
            })
            .collect()
    }
}

impl DeviceInventory for NvmlInventory {
    fn devices(&self) -> Result<Vec<DeviceInfo>, InventoryError> {
        let err = |what: &str, e: nvml_wrapper::error::NvmlError| {
            InventoryError(format!("NVML {what}: {e}"))
        };
        let count = self
            .nvml
            .device_count()
            .map_err(|e| err("device count", e))?;
        let mut out = Vec::with_capacity(count as usize);
        for index in 0..count {
            let d = self
                .nvml
                .device_by_index(index)
                .map_err(|e| err("device handle", e))?;
            out.push(DeviceInfo {
                index,
                uuid: d.uuid().map_err(|e| err("UUID", e))?,
                name: d.name().map_err(|e| err("name", e))?,
                memory_total: d.memory_info().map_err(|e| err("memory info", e))?.total,
            });
        }
        Ok(out)
    }
}
