//! `gpuslice doctor`'s `gpu-owners` row: processes on a GPU that run without the interposer.
//! On a gpuslice node every CUDA process of a container that asked for a slice has
//! `libgpuslice.so` mapped; one that has not was started outside gpuslice — typically a Pod
//! given the whole GPU by NVIDIA's device plugin (`nvidia.com/gpu`) — and shares the device
//! with slices placed there before it came (docs/nvidia-toolkit.md, "One GPU, one owner"). The
//! arbiter sees the same processes and places no new slice on their devices (foreign-owned);
//! the row says which devices the arbiter has marked, so a process it has not (yet) seen shows.

use std::path::Path;

use super::check::{Check, Level};

const NAME: &str = "gpu-owners";
const FIX: &str = "keep NVIDIA's device plugin off gpuslice's nodes (kubectl label node NODE nvidia.com/gpu.deploy.device-plugin=false; docs/nvidia-toolkit.md, \"One GPU, one owner\") and start CUDA work on this node only through gpuslice";

use gpuslice_api::interposer::maps_interposer;
use gpuslice_api::ForeignProcess;

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

/// What the arbiter says of the devices of `outside` (`GPU n: …` entries): which it treats as
/// foreign-owned. `marked`: the arbiter's `foreign` list (`None`: it did not answer).
fn arbiter_view(outside: &[(u32, String)], marked: Option<&[ForeignProcess]>) -> String {
    let Some(marked) = marked else {
        return "the arbiter did not answer: whether it keeps slices off these GPUs is unknown"
            .into();
    };
    let mut devs: Vec<u32> = outside.iter().map(|(d, _)| *d).collect();
    devs.dedup();
    let (on, off): (Vec<u32>, Vec<u32>) = devs
        .iter()
        .partition(|d| marked.iter().any(|f| f.device == **d));
    let list = |v: &[u32]| {
        v.iter()
            .map(|d| format!("GPU {d}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = Vec::new();
    if !on.is_empty() {
        out.push(format!(
            "the arbiter treats {} as foreign-owned (no new slice placed there)",
            list(&on)
        ));
    }
    if !off.is_empty() {
        out.push(format!(
            "the arbiter has not marked {} (yet: it needs two backstop checks)",
            list(&off)
        ));
    }
    out.join("; ")
}

/// The row, from NVML's running compute processes of every device; `None` when NVML does not
/// load (the `nvml` row says why). `proc_root` is `/proc`; `marked` the arbiter's list of
/// foreign processes (`None`: it did not answer).
pub fn gpu_owners(
    nvml_library: Option<&Path>,
    proc_root: &Path,
    marked: Option<&[ForeignProcess]>,
) -> Option<Check> {
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
                Ok(_) => outside.push((idx, describe(p.pid, used, proc_root))),
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
        let named: Vec<String> = outside
            .iter()
            .map(|(d, who)| format!("GPU {d}: {who}"))
            .collect();
        detail.push(format!(
            "running without the interposer: {}; {}",
            named.join("; "),
            arbiter_view(&outside, marked)
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
    fn the_arbiters_marks_are_named_per_gpu() {
        let outside = [
            (0, "pid 7 (python3)".to_string()),
            (1, "pid 8 (x)".to_string()),
        ];
        let marked = [ForeignProcess {
            device: 0,
            pid: 7,
            ..ForeignProcess::default()
        }];
        assert_eq!(
            arbiter_view(&outside, Some(&marked)),
            "the arbiter treats GPU 0 as foreign-owned (no new slice placed there); the \
             arbiter has not marked GPU 1 (yet: it needs two backstop checks)"
        );
        assert!(arbiter_view(&outside, None).contains("did not answer"));
    }
}
