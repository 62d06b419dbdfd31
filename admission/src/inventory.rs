//! The node's devices as admission sees them, and the [`DeviceInventory`] trait that lists them
//! (NVML in the daemon, fixed lists in tests).

use serde::{Deserialize, Serialize};

/// One GPU on the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// NVML index.
    pub index: u32,
    /// NVML UUID (`GPU-…`).
    pub uuid: String,
    /// Product name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Total memory in bytes.
    pub memory_total: u64,
}

/// Why the inventory could not be read.
#[derive(Debug, thiserror::Error)]
#[error("device inventory: {0}")]
pub struct InventoryError(pub String);

/// Lists the node's devices.
pub trait DeviceInventory {
    /// Every device, in index order.
    fn devices(&self) -> Result<Vec<DeviceInfo>, InventoryError>;
}

/// A fixed list of devices (tests, or a node description read from elsewhere).
#[derive(Clone, Debug, Default)]
pub struct StaticInventory(pub Vec<DeviceInfo>);

impl DeviceInventory for StaticInventory {
    fn devices(&self) -> Result<Vec<DeviceInfo>, InventoryError> {
        Ok(self.0.clone())
    }
}

impl StaticInventory {
    /// Devices named `names[i]` with `memory[i]` bytes, UUIDs `GPU-fake-<i>`.
    pub fn fake(devices: &[(&str, u64)]) -> Self {
        StaticInventory(
            devices
                .iter()
                .zip(0u32..)
                .map(|((name, mem), i)| DeviceInfo {
                    index: i,
                    uuid: format!("GPU-fake-{i}"),
                    name: (*name).to_string(),
                    memory_total: *mem,
                })
                .collect(),
        )
    }
}
