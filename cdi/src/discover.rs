//! What the node has: GPUs (from NVML, or given), device nodes under a dev root, driver
//! libraries (from the loader cache under a driver root) and driver binaries.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::ldcache;
use crate::CdiError;

/// One GPU as CDI needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// NVML index.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// Device minor number (`/dev/nvidia<minor>`); NVML's, else the index.
    pub minor: u32,
}

/// A character device found under the dev root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Path inside the container (`/dev/…`).
    pub path: String,
    /// Path on the host (dev root joined).
    pub host_path: PathBuf,
    pub major: u64,
    pub minor: u64,
}

/// Lists GPUs through NVML loaded from `library` (or the system's `libnvidia-ml.so.1`).
pub fn gpus_from_nvml(library: Option<&Path>) -> Result<Vec<Gpu>, CdiError> {
    use nvml_wrapper::Nvml;
    let name = library.map_or("libnvidia-ml.so.1".to_string(), |p| p.display().to_string());
    let nvml = match library {
        Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
        None => Nvml::init(),
    }
    .map_err(|e| CdiError::Nvml(format!("cannot initialise NVML from {name}: {e}")))?;
    let count = nvml
        .device_count()
        .map_err(|e| CdiError::Nvml(format!("device count: {e}")))?;
    (0..count)
        .map(|index| {
            let d = nvml
                .device_by_index(index)
                .map_err(|e| CdiError::Nvml(format!("device {index}: {e}")))?;
            let uuid = d
                .uuid()
                .map_err(|e| CdiError::Nvml(format!("device {index} UUID: {e}")))?;
            let minor = d.minor_number().unwrap_or(index);
            Ok(Gpu { index, uuid, minor })
        })
        .collect()
}

/// The character device at `<dev_root>/<rel>` (rel without the leading `/dev/`), if any.
pub fn char_node(dev_root: &Path, rel: &str) -> Option<Node> {
    let host = dev_root.join(rel);
    let md = std::fs::metadata(&host).ok()?;
    if !md.file_type().is_char_device() {
        return None;
    }
    let rdev = md.rdev();
    Some(Node {
        path: format!("/dev/{rel}"),
        host_path: host,
        major: libc::major(rdev) as u64,
        minor: libc::minor(rdev) as u64,
    })
}

/// Nodes every GPU container needs: `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`,
/// `nvidia-modeset`, and `nvidia-caps/*`, those present. `nvidiactl` is required.
pub fn control_nodes(dev_root: &Path) -> Result<Vec<Node>, CdiError> {
    let out = present_control_nodes(dev_root);
    if out.first().is_none_or(|n| n.path != "/dev/nvidiactl") {
        return Err(CdiError::Missing(format!(
            "{} is not a character device (is the NVIDIA driver loaded? --dev-root)",
            dev_root.join("nvidiactl").display()
        )));
    }
    Ok(out)
}

/// The control nodes present under `dev_root`, in this order: `nvidiactl`, `nvidia-uvm`,
/// `nvidia-uvm-tools`, `nvidia-modeset`, `nvidia-caps/*` (sorted). The one list both the CDI
/// specs and the runtime's injected devices (`gpuslice_oci::devices`) use.
pub fn present_control_nodes(dev_root: &Path) -> Vec<Node> {
    let mut out = Vec::new();
    for rel in [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ] {
        out.extend(char_node(dev_root, rel));
    }
    if let Ok(rd) = std::fs::read_dir(dev_root.join("nvidia-caps")) {
        let mut caps: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        caps.sort();
        for c in caps {
            out.extend(char_node(dev_root, &format!("nvidia-caps/{c}")));
        }
    }
    out
}

/// `/dev/nvidia<minor>` of one GPU (required).
pub fn gpu_node(dev_root: &Path, gpu: &Gpu) -> Result<Node, CdiError> {
    let rel = format!("nvidia{}", gpu.minor);
    char_node(dev_root, &rel).ok_or_else(|| {
        CdiError::Missing(format!(
            "GPU {} ({}): {} is not a character device",
            gpu.index,
            gpu.uuid,
            dev_root.join(&rel).display()
        ))
    })
}

/// Soname prefixes of the NVIDIA driver's user-space libraries (compute, NVML, video, GL
/// vendor libraries).
const LIB_PREFIXES: &[&str] = &[
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-",
    "libnvcuvid.so",
    "libnvoptix.so",
    "libGLX_nvidia.so",
    "libEGL_nvidia.so",
    "libGLESv2_nvidia.so",
    "libGLESv1_CM_nvidia.so",
];

/// Driver binaries looked for in the driver root.
const BINARIES: &[&str] = &[
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

/// A file to bind into the container at the same path it has under the driver root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFile {
    /// Path in the container (the path under the driver root).
    pub path: String,
    /// Path on the host.
    pub host_path: PathBuf,
}

fn under(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

/// The driver's native libraries from `<driver_root>/etc/ld.so.cache`, one per soname,
/// those whose file exists. At least `libcuda.so.1` must be there.
pub fn driver_libraries(driver_root: &Path) -> Result<Vec<HostFile>, CdiError> {
    let cache = driver_root.join("etc/ld.so.cache");
    let entries = ldcache::read(&cache).map_err(|e| CdiError::Missing(e.to_string()))?;
    let mut out: Vec<HostFile> = Vec::new();
    for e in entries.iter().filter(|e| e.native()) {
        if !LIB_PREFIXES.iter().any(|p| e.name.starts_with(p)) {
            continue;
        }
        if out.iter().any(|h| h.path == e.path) {
            continue;
        }
        let host = under(driver_root, &e.path);
        if host.exists() {
            out.push(HostFile {
                path: e.path.clone(),
                host_path: host,
            });
        }
    }
    if !out.iter().any(|h| h.path.ends_with("/libcuda.so.1")) {
        return Err(CdiError::Missing(format!(
            "no libcuda.so.1 in the loader cache {} (is the driver installed under --driver-root {}? run ldconfig)",
            cache.display(),
            driver_root.display()
        )));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Driver binaries under the driver root (`usr/bin`, `usr/sbin`, `bin`, `sbin`), the first of
/// each name found.
pub fn driver_binaries(driver_root: &Path) -> Vec<HostFile> {
    let mut out = Vec::new();
    for name in BINARIES {
        for dir in ["/usr/bin", "/usr/sbin", "/bin", "/sbin"] {
            let path = format!("{dir}/{name}");
            let host = under(driver_root, &path);
            if host.is_file() {
                out.push(HostFile {
                    path,
                    host_path: host,
                });
                break;
            }
        }
    }
    out
}
