//! [`GpuSource`] from NVML: the arbiter's [`NvmlInventory`] for what admission counts (so the
//! published memory is computed from the very numbers the arbiter uses), and a second NVML
//! handle for the attributes only the ResourceSlice carries. A GPU that NVML stops answering for
//! (by UUID, or its memory query) is left out — unhealthy — so the publisher withdraws it.

use std::path::Path;

use gpuslice_admission::inventory::{DeviceInventory, InventoryError};
use gpuslice_admission::nvml::NvmlInventory;
use nvml_wrapper::Nvml;

use crate::gpu::{Gpu, GpuSource};

/// NVML, initialised twice (NVML counts its initialisations).
pub struct NvmlGpus {
    inventory: NvmlInventory,
    nvml: Nvml,
}

impl NvmlGpus {
    /// Loads NVML from `library` (the config's `nvml_library`) or the system's.
    pub fn open(library: Option<&Path>) -> Result<Self, InventoryError> {
        let inventory = NvmlInventory::open(library)?;
        let nvml = match library {
            Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
            None => Nvml::init(),
        }
        .map_err(|e| InventoryError(format!("cannot initialise NVML: {e}")))?;
        Ok(NvmlGpus { inventory, nvml })
    }
}

impl GpuSource for NvmlGpus {
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError> {
        let driver_version = self.nvml.sys_driver_version().ok();
        let mut out = Vec::new();
        for info in self.inventory.devices()? {
            // A GPU NVML no longer answers for (fallen off the bus, lost, being reset) is not
            // offered: it leaves the published pool until it answers again.
            let d = match self.nvml.device_by_uuid(info.uuid.as_str()) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(uuid = %info.uuid, index = info.index, "NVML: {e}; not offering this GPU");
                    continue;
                }
            };
            if let Err(e) = d.memory_info() {
                tracing::warn!(uuid = %info.uuid, index = info.index, "NVML memory query: {e}; not offering this GPU");
                continue;
            }
            out.push(Gpu {
                minor: d.minor_number().unwrap_or(info.index),
                architecture: d.architecture().ok().map(|a| a.to_string()),
                compute_capability: d.cuda_compute_capability().ok().and_then(|c| {
                    Some((u32::try_from(c.major).ok()?, u32::try_from(c.minor).ok()?))
                }),
                driver_version: driver_version.clone(),
                info,
            });
        }
        Ok(out)
    }
}
