//! The edits themselves, as a pure function of the spec and a [`Plan`] (golden-tested): the
//! OCI rendering of the one description of a slice's container,
//! [`gpuslice_cdi::container::SliceContainer`] (the CDI rendering is beside it there):
//!
//! * the interposer, read-only, at `/usr/lib/gpuslice/libgpuslice.so`;
//! * the slice directory read-only at `/run/gpuslice`, with its `usage` file bound read-write on
//!   top (so `limits` and `lease` cannot be written by the tenant, and files the arbiter replaces
//!   by rename show through the directory mount);
//! * the merged `ld.so.preload` read-only at `/etc/ld.so.preload`, plus `LD_PRELOAD` (merged
//!   with the image's: only OCI edits can);
//! * `GPUSLICE_SLICE_DIR=/run/gpuslice` and `CUDA_VISIBLE_DEVICES` = the assigned UUIDs (and
//!   `NVIDIA_VISIBLE_DEVICES` when the spec already sets it, for the NVIDIA runtime);
//! * the assigned GPUs' device nodes when gpuslice injects devices (not those the spec has);
//! * hooks: `createRuntime` → `gpuslice-hook create-runtime`, `poststop` → `gpuslice-hook poststop`.

use std::path::PathBuf;

use gpuslice_api::AssignedDevice;
use gpuslice_cdi::container::{self, Bind, HookCall, SliceContainer, SliceGrant, HOOK_STAGES};
use oci_spec::runtime::{
    HookBuilder, LinuxDeviceBuilder, LinuxDeviceCgroupBuilder, LinuxDeviceType, MountBuilder,
};

use crate::devices::DeviceNode;
use crate::spec::{SpecDoc, SpecError};

pub use container::HOOK_TIMEOUT_S;
pub use gpuslice_region::layout::{CONTAINER_INTERPOSER, CONTAINER_PRELOAD, CONTAINER_SLICE_DIR};

/// The merged preload file's name in the slice directory on the host.
pub const PRELOAD_FILE: &str = "ld.so.preload";

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

impl Plan {
    /// The grant this plan describes.
    pub fn grant(&self) -> SliceGrant {
        SliceGrant {
            interposer: Some(self.interposer.clone()),
            preload_file: self.preload_file.clone(),
            slice_dir: self.slice_dir.clone(),
            device_uuids: self.devices.iter().map(|d| d.uuid.clone()).collect(),
            device_nodes: self
                .device_nodes
                .iter()
                .map(|n| container::Node {
                    path: n.path.clone(),
                    host_path: None,
                    major: n.major,
                    minor: n.minor,
                })
                .collect(),
            hook: self.hook.as_ref().map(|(path, args)| HookCall {
                path: path.clone(),
                args: args.clone(),
            }),
            extra_env: self.extra_env.clone(),
        }
    }
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

fn build_err(e: impl std::fmt::Display) -> EditError {
    EditError::Build(e.to_string())
}

fn mount(m: &Bind) -> Result<oci_spec::runtime::Mount, EditError> {
    MountBuilder::default()
        .destination(&m.container)
        .typ("bind")
        .source(&m.host)
        .options(m.options())
        .build()
        .map_err(build_err)
}

/// Applies `plan` to `doc`.
pub fn apply(doc: &mut SpecDoc, plan: &Plan) -> Result<(), EditError> {
    render(doc, &SliceContainer::of(&plan.grant()))
}

/// Writes `c` into `doc` as OCI edits.
pub fn render(doc: &mut SpecDoc, c: &SliceContainer) -> Result<(), EditError> {
    for m in &c.mounts {
        doc.push_mount(&mount(m)?)?;
    }
    let env = doc.env();
    for (k, v) in &c.env {
        doc.set_env(k, v)?;
        // The NVIDIA runtime reads its own variable: follow the assignment where it is set.
        if k == "CUDA_VISIBLE_DEVICES" && env.iter().any(|(k, _)| k == "NVIDIA_VISIBLE_DEVICES") {
            doc.set_env("NVIDIA_VISIBLE_DEVICES", v)?;
        }
    }
    if let Some(interposer) = c.ld_preload {
        let existing = env
            .iter()
            .rev()
            .find(|(k, _)| k == "LD_PRELOAD")
            .map(|(_, v)| v.clone());
        doc.set_env(
            "LD_PRELOAD",
            &crate::preload::merge_env(existing.as_deref(), interposer),
        )?;
    }
    for n in &c.device_nodes {
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
            .map_err(build_err)?;
        let rule = LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .typ(LinuxDeviceType::C)
            .major(n.major)
            .minor(n.minor)
            .access("rwm")
            .build()
            .map_err(build_err)?;
        doc.push_device(&dev, &rule)?;
    }
    if let Some(h) = &c.hook {
        for (name, stage) in HOOK_STAGES {
            let hook = HookBuilder::default()
                .path(&h.path)
                .args(h.argv(stage))
                .timeout(HOOK_TIMEOUT_S)
                .build()
                .map_err(build_err)?;
            doc.push_hook(name, &hook)?;
        }
    }
    Ok(())
}
