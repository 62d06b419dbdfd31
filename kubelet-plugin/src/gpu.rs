//! The node's GPUs as the driver publishes them: the arbiter's own [`DeviceInfo`] (index, UUID,
//! name, total memory — the numbers admission uses) plus what only the ResourceSlice needs
//! (architecture, compute capability, driver version, device minor), behind [`GpuSource`] so the
//! logic runs without NVML in tests.

use gpuslice_admission::inventory::{DeviceInfo, InventoryError};

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// What the arbiter's admission sees.
    pub info: DeviceInfo,
    /// `/dev/nvidia<minor>`.
    pub minor: u32,
    /// NVML's architecture name (`Hopper`), when it has one.
    pub architecture: Option<String>,
    /// CUDA compute capability (major, minor), when NVML reports it.
    pub compute_capability: Option<(u32, u32)>,
    /// Kernel driver version as NVML reports it (`550.54.15`).
    pub driver_version: Option<String>,
}

impl Gpu {
    /// The ResourceSlice device name: `gpu-<index>`.
    pub fn device_name(&self) -> String {
        device_name(self.info.index)
    }
}

/// The device name of GPU `index`.
pub fn device_name(index: u32) -> String {
    format!("gpu-{index}")
}

/// The index in a device name `gpu-<index>`, if it is one.
pub fn index_of(device: &str) -> Option<u32> {
    let digits = device.strip_prefix("gpu-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    digits.parse().ok()
}

/// Lists the node's GPUs.
pub trait GpuSource: Send + Sync {
    /// Every GPU, in index order.
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError>;
}

/// A fixed list (tests, or a node described elsewhere).
#[derive(Clone, Debug, Default)]
pub struct StaticGpus(pub Vec<Gpu>);

impl GpuSource for StaticGpus {
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError> {
        Ok(self.0.clone())
    }
}

/// Turns a dotted version (`535.104.05`, `9.0`) into the semantic version ResourceSlice
/// `version` attributes need (`535.104.5`, `9.0.0`): leading zeros dropped, missing parts 0.
/// `None` when it is not dotted numbers.
pub fn semver(text: &str) -> Option<String> {
    let parts: Vec<&str> = text.trim().split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let mut nums = Vec::with_capacity(3);
    for p in parts {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        nums.push(p.parse::<u64>().ok()?);
    }
    nums.resize(3, 0);
    Some(format!("{}.{}.{}", nums[0], nums[1], nums[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_round_trip() {
        assert_eq!(device_name(3), "gpu-3");
        assert_eq!(index_of("gpu-3"), Some(3));
        for bad in ["gpu-", "gpu-03", "gpu-x", "GPU-3", "gpu-3a", "card-0"] {
            assert_eq!(index_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn versions_become_semver() {
        assert_eq!(semver("535.104.05").as_deref(), Some("535.104.5"));
        assert_eq!(semver("9.0").as_deref(), Some("9.0.0"));
        assert_eq!(semver("550").as_deref(), Some("550.0.0"));
        assert_eq!(semver("1.2.3.4"), None);
        assert_eq!(semver("r550"), None);
    }
}
