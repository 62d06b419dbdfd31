//! The edits themselves, as a pure function of the spec and a [`Plan`] (golden-tested):
//!
//! * the interposer, read-only, at `/usr/lib/gpuslice/libgpuslice.so`;
//! * the slice directory read-only at `/run/gpuslice`, with its `usage` file bound read-write on
//!   top (so `limits` and `lease` cannot be written by the tenant, and files the arbiter replaces
//!   by rename show through the directory mount);
//! * the merged `ld.so.preload` read-only at `/etc/ld.so.preload`, plus `LD_PRELOAD`;
//! * `GPUSLICE_SLICE_DIR=/run/gpuslice` and `CUDA_VISIBLE_DEVICES` = the assigned UUIDs (and
//!   `NVIDIA_VISIBLE_DEVICES` when the spec already sets it, for the NVIDIA runtime);
//! * the assigned GPUs' device nodes when gpuslice injects devices;
//! * hooks: `createRuntime` → `gpuslice-hook create-runtime`, `poststop` → `gpuslice-hook poststop`.

use std::path::{Path, PathBuf};

use gpuslice_api::AssignedDevice;
use gpuslice_region::layout::USAGE_FILE;
use oci_spec::runtime::{
    HookBuilder, LinuxDeviceBuilder, LinuxDeviceCgroupBuilder, LinuxDeviceType, MountBuilder,
};

use crate::devices::DeviceNode;
use crate::spec::{SpecDoc, SpecError};

/// The interposer inside the container.
pub const CONTAINER_INTERPOSER: &str = "/usr/lib/gpuslice/libgpuslice.so";
/// The slice directory inside the container.
pub const CONTAINER_SLICE_DIR: &str = "/run/gpuslice";
/// The preload file inside the container.
pub const CONTAINER_PRELOAD: &str = "/etc/ld.so.preload";
/// The merged preload file's name in the slice directory on the host.
pub const PRELOAD_FILE: &str = "ld.so.preload";
/// Hook timeout written into the spec, seconds.
pub const HOOK_TIMEOUT_S: i64 = 10;

/// What to add to a spec.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Host interposer.
    pub interposer: PathBuf,
    /// Host slice directory; `None` in fail-open mode (no slice).
    pub slice_dir: Option<PathBuf>,
    /// Host file to bind at `/etc/ld.so.preload`; `None` = `LD_PRELOAD` only.
    pub preload_file: Option<PathBuf>,
    /// Assigned devices (UUIDs for `CUDA_VISIBLE_DEVICES`).
    pub devices: Vec<AssignedDevice>,
    /// Device nodes to inject (empty unless gpuslice injects devices).
    pub device_nodes: Vec<DeviceNode>,
    /// The hook and the arguments after its stage name; `None` = no hooks.
    pub hook: Option<(PathBuf, Vec<String>)>,
    /// Further environment variables (fail-open: the memory request for the standalone cap).
    pub extra_env: Vec<(String, String)>,
}

/// An edit could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The spec has the wrong shape.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// oci-spec refused a value.
    #[error("building the spec edit: {0}")]
    Build(String),
}

fn bind(
    src: &Path,
    dst: &str,
    rw: bool,
    exec: bool,
) -> Result<oci_spec::runtime::Mount, EditError> {
    let mut opts = vec!["bind".to_string(), if rw { "rw" } else { "ro" }.to_string()];
    opts.extend(["nosuid".to_string(), "nodev".to_string()]);
    if !exec {
        opts.push("noexec".to_string());
    }
    MountBuilder::default()
        .destination(dst)
        .typ("bind")
        .source(src)
        .options(opts)
        .build()
        .map_err(|e| EditError::Build(e.to_string()))
}

/// Applies `plan` to `doc`.
pub fn apply(doc: &mut SpecDoc, plan: &Plan) -> Result<(), EditError> {
    doc.push_mount(&bind(&plan.interposer, CONTAINER_INTERPOSER, false, true)?)?;
    if let Some(dir) = &plan.slice_dir {
        doc.push_mount(&bind(dir, CONTAINER_SLICE_DIR, false, false)?)?;
        let usage = format!("{CONTAINER_SLICE_DIR}/{}", USAGE_FILE);
        doc.push_mount(&bind(&dir.join(USAGE_FILE), &usage, true, false)?)?;
        doc.set_env("GPUSLICE_SLICE_DIR", CONTAINER_SLICE_DIR)?;
    }
    if let Some(p) = &plan.preload_file {
        doc.push_mount(&bind(p, CONTAINER_PRELOAD, false, false)?)?;
    }
    let env = doc.env();
    let existing = env
        .iter()
        .rev()
        .find(|(k, _)| k == "LD_PRELOAD")
        .map(|(_, v)| v.clone());
    doc.set_env(
        "LD_PRELOAD",
        &crate::preload::merge_env(existing.as_deref(), CONTAINER_INTERPOSER),
    )?;
    if !plan.devices.is_empty() {
        let uuids: Vec<&str> = plan.devices.iter().map(|d| d.uuid.as_str()).collect();
        doc.set_env("CUDA_VISIBLE_DEVICES", &uuids.join(","))?;
        if env.iter().any(|(k, _)| k == "NVIDIA_VISIBLE_DEVICES") {
            doc.set_env("NVIDIA_VISIBLE_DEVICES", &uuids.join(","))?;
        }
    }
    for (k, v) in &plan.extra_env {
        doc.set_env(k, v)?;
    }
    for n in &plan.device_nodes {
        if doc.has_device(&n.path) {
            continue;
        }
        let dev = LinuxDeviceBuilder::default()
            .path(&n.path)
            .typ(LinuxDeviceType::C)
            .major(n.major)
            .minor(n.minor)
            .file_mode(0o666u32)
            .uid(0u32)
            .gid(0u32)
            .build()
            .map_err(|e| EditError::Build(e.to_string()))?;
        let rule = LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .typ(LinuxDeviceType::C)
            .major(n.major)
            .minor(n.minor)
            .access("rwm")
            .build()
            .map_err(|e| EditError::Build(e.to_string()))?;
        doc.push_device(&dev, &rule)?;
    }
    if let Some((path, tail)) = &plan.hook {
        for (stage, sub) in [
            ("createRuntime", "create-runtime"),
            ("poststop", "poststop"),
        ] {
            let mut args = vec!["gpuslice-hook".to_string()];
            args.extend(tail.iter().cloned());
            args.push(sub.to_string());
            let h = HookBuilder::default()
                .path(path)
                .args(args)
                .timeout(HOOK_TIMEOUT_S)
                .build()
                .map_err(|e| EditError::Build(e.to_string()))?;
            doc.push_hook(stage, &h)?;
        }
    }
    Ok(())
}
