//! Device nodes of the assigned GPUs, for engines where gpuslice injects devices
//! (`runtime.inject_devices`): `/dev/nvidia<index>` of each assigned host index (required) plus
//! the control nodes `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools` when the host has them.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// One character device to expose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceNode {
    /// Path inside the container (same as on the host).
    pub path: String,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
}

/// A required node is missing.
#[derive(Debug, thiserror::Error)]
#[error("device node {path} for GPU {index} is missing on the host ({reason}); cannot inject it")]
pub struct DeviceError {
    /// The node.
    pub path: String,
    /// The GPU's host index.
    pub index: u32,
    /// Why.
    pub reason: String,
}

/// Control nodes added when present.
pub const CONTROL_NODES: [&str; 3] = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"];

fn char_node(dev_root: &Path, name: &str) -> Result<DeviceNode, String> {
    let m = std::fs::metadata(dev_root.join(name)).map_err(|e| e.to_string())?;
    if !m.file_type().is_char_device() {
        return Err("not a character device".into());
    }
    let rdev = m.rdev();
    Ok(DeviceNode {
        path: format!("/dev/{name}"),
        major: i64::from(libc::major(rdev)),
        minor: i64::from(libc::minor(rdev)),
    })
}

/// The nodes for the GPUs with these host indices, looked up under `dev_root` (`/dev`).
///
/// The GPU's node is `/dev/nvidia<index>`: on nodes where the NVML index and the device minor
/// differ this picks the wrong node (a known limitation, `docs/runtime.md`).
pub fn nodes_for(dev_root: &Path, indices: &[u32]) -> Result<Vec<DeviceNode>, DeviceError> {
    let mut out = Vec::new();
    for &i in indices {
        let name = format!("nvidia{i}");
        let node = char_node(dev_root, &name).map_err(|reason| DeviceError {
            path: dev_root.join(&name).display().to_string(),
            index: i,
            reason,
        })?;
        out.push(node);
    }
    for name in CONTROL_NODES {
        if let Ok(n) = char_node(dev_root, name) {
            out.push(n);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_assigned_and_control_nodes_only() {
        let root = std::env::temp_dir().join(format!("gs-h9-dev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        for n in ["nvidia0", "nvidia1", "nvidiactl"] {
            std::os::unix::fs::symlink("/dev/null", root.join(n)).unwrap();
        }
        std::fs::write(root.join("nvidia-uvm"), b"regular file").unwrap();
        let nodes = nodes_for(&root, &[1]).unwrap();
        let paths: Vec<&str> = nodes.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, ["/dev/nvidia1", "/dev/nvidiactl"]);
        assert_eq!((nodes[0].major, nodes[0].minor), (1, 3));
        let e = nodes_for(&root, &[2]).unwrap_err();
        assert_eq!(e.index, 2);
        assert!(e.to_string().contains("nvidia2"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
