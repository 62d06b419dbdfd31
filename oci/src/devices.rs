//! Device nodes of the assigned GPUs, for engines where gpuslice injects devices
//! (`runtime.inject_devices`): `/dev/nvidia<index>` of each assigned host index (required) plus
//! the control nodes the host has, the same list the CDI specs name
//! ([`gpuslice_cdi::discover::present_control_nodes`]: `nvidiactl`, `nvidia-uvm`,
//! `nvidia-uvm-tools`, `nvidia-modeset`, `nvidia-caps/*`).

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
    for n in gpuslice_cdi::discover::present_control_nodes(dev_root) {
        out.push(DeviceNode {
            path: n.path,
            // Device numbers are 32-bit (`libc::major`): the conversions cannot fail.
            major: i64::try_from(n.major).unwrap_or(i64::MAX),
            minor: i64::try_from(n.minor).unwrap_or(i64::MAX),
        });
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
        std::fs::create_dir_all(root.join("nvidia-caps")).unwrap();
        for n in [
            "nvidia0",
            "nvidia1",
            "nvidiactl",
            "nvidia-modeset",
            "nvidia-caps/nvidia-cap1",
        ] {
            std::os::unix::fs::symlink("/dev/null", root.join(n)).unwrap();
        }
        std::fs::write(root.join("nvidia-uvm"), b"regular file").unwrap();
        let nodes = nodes_for(&root, &[1]).unwrap();
        let paths: Vec<&str> = nodes.iter().map(|n| n.path.as_str()).collect();
        // The CDI specs' control nodes, those that are character devices.
        assert_eq!(
            paths,
            [
                "/dev/nvidia1",
                "/dev/nvidiactl",
                "/dev/nvidia-modeset",
                "/dev/nvidia-caps/nvidia-cap1"
            ]
        );
        assert_eq!((nodes[0].major, nodes[0].minor), (1, 3));
        let e = nodes_for(&root, &[2]).unwrap_err();
        assert_eq!(e.index, 2);
        assert!(e.to_string().contains("nvidia2"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
