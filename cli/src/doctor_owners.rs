//! `gpuslice doctor`'s `gpu-owners` row: processes on a GPU that run without the interposer.
//! On a gpuslice node every CUDA process of a container that asked for a slice has
//! `libgpuslice.so` mapped; one that has not was started outside gpuslice — typically a Pod
//! given the whole GPU by NVIDIA's device plugin (`nvidia.com/gpu`) — and shares the device
//! with slices the arbiter placed there without being counted (docs/nvidia-toolkit.md, "One
//! GPU, one owner"). Reported, not acted on: the arbiter's backstop only judges slices'
//! processes.

use std::path::Path;

use crate::doctor::{Check, Level};

const NAME: &str = "gpu-owners";
const FIX: &str = "keep NVIDIA's device plugin off gpuslice's nodes (kubectl label node NODE nvidia.com/gpu.deploy.device-plugin=false; docs/nvidia-toolkit.md, \"One GPU, one owner\") and start CUDA work on this node only through gpuslice";

/// Whether `/proc/<pid>/maps` text `maps` maps the interposer (a file named `libgpuslice.so`).
pub fn maps_interposer(maps: &str) -> bool {
    maps.lines().any(|l| {
        l.split_whitespace()
            .nth(5)
            .and_then(|p| p.rsplit('/').next())
            .is_some_and(|n| n == "libgpuslice.so")
    })
}

/// One process outside any slice, as the row names it.
fn describe(pid: u32, used: Option<u64>, proc_root: &Path) -> String {
    let comm = std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    match used {
        Some(b) => format!("pid {pid} ({comm}, {} MiB)", b >> 20),
        None => format!("pid {pid} ({comm})"),
    }
}

/// The row, from NVML's running compute processes of every device; `None` when NVML does not
/// load (the `nvml` row says why). `proc_root` is `/proc`.
pub fn gpu_owners(nvml_library: Option<&Path>, proc_root: &Path) -> Option<Check> {
    let nvml = match nvml_library {
        Some(p) => nvml_wrapper::Nvml::builder().lib_path(p.as_os_str()).init(),
        None => nvml_wrapper::Nvml::init(),
    }
    .ok()?;
    let count = nvml.device_count().ok()?;
    let mut outside = Vec::new();
    let mut unread = Vec::new();
    for idx in 0..count {
        let Ok(dev) = nvml.device_by_index(idx) else {
            continue;
        };
        let Ok(procs) = dev.running_compute_processes() else {
            unread.push(format!("GPU {idx}: process list unreadable"));
            continue;
        };
        for p in procs {
            let maps = std::fs::read_to_string(proc_root.join(p.pid.to_string()).join("maps"));
            let used = match p.used_gpu_memory {
                nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
                nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
            };
            match maps {
                Ok(m) if maps_interposer(&m) => {}
                Ok(_) => outside.push(format!("GPU {idx}: {}", describe(p.pid, used, proc_root))),
                Err(e) => unread.push(format!("GPU {idx}: pid {} maps unreadable ({e})", p.pid)),
            }
        }
    }
    if outside.is_empty() && unread.is_empty() {
        return Some(Check::ok(
            NAME,
            format!("no CUDA process without the interposer on {count} GPU(s)"),
        ));
    }
    let mut detail = Vec::new();
    if !outside.is_empty() {
        detail.push(format!(
            "running without the interposer, beside any slice: {}",
            outside.join("; ")
        ));
    }
    if !unread.is_empty() {
        detail.push(format!("not checked: {}", unread.join("; ")));
    }
    Some(Check::bad(NAME, Level::Warn, detail.join(". "), FIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mapped_libgpuslice_counts() {
        let with = "7f00-7f10 r-xp 00000000 08:01 42 /opt/gpuslice/lib/gpuslice/libgpuslice.so\n";
        assert!(maps_interposer(with));
        let without = "7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/libcuda.so.1\n\
                       7f20-7f30 rw-p 00000000 00:00 0 \n";
        assert!(!maps_interposer(without));
        // A name that only contains it, or a path in another column, is not the interposer.
        assert!(!maps_interposer(
            "7f00-7f10 r-xp 00000000 08:01 42 /tmp/libgpuslice.so.evil\n"
        ));
        assert!(!maps_interposer(""));
    }
}
