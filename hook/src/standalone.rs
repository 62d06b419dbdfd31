//! Standalone mode (`--standalone create-runtime`, or `prestart`): the hook does everything
//! `gpuslice-runtime` would have done, for engines that run no wrapper — a CDI device
//! (`gpuslice.io/gpu=…`, whose spec carries the interposer, `/etc/ld.so.preload` and these
//! hooks) or an OCI `hooks.d` entry (CRI-O, Podman):
//!
//! 1. read the container's `config.json` from the bundle named in the state;
//! 2. read the request (annotations, then `process.env`); nothing asked, a Kubernetes
//!    sandbox, or a container `gpuslice-runtime` already edited (a mount at `/run/gpuslice`)
//!    → nothing to do;
//! 3. devices: an explicit `gpuslice.io/devices` / `GPUSLICE_DEVICES` wins, else the GPUs the
//!    CDI devices injected (`GPUSLICE_CDI_GPU_<index>=<UUID>`), else the arbiter places one;
//! 4. refuse an image the interposer cannot be preloaded in (`gpuslice_oci::loadable`);
//! 5. admit with the arbiter (idempotent: a rerun finds the slice `existing`);
//! 6. mount the slice into the container's mount namespace ([`crate::nsmount`]);
//! 7. bind the container's pid and cgroup.
//!
//! A failure after admission releases the slice (only one this call created) and fails the
//! container. With `fail = "open"` and the arbiter unreachable, the container starts and the
//! interposer enforces `GPUSLICE_MEMORY` alone.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use gpuslice_api::client::{BindResult, Client, ClientError};
use gpuslice_api::request::{DeviceRef, DeviceSelector};
use gpuslice_api::Owner;
use gpuslice_oci::prepare::check_mounted_image;
use gpuslice_oci::select::{select, Selection};
use gpuslice_oci::spec::SpecDoc;
use gpuslice_oci::Settings;

/// Largest `config.json` read.
const MAX_CONFIG: u64 = 16 << 20;

/// Environment entries the CDI devices add: `GPUSLICE_CDI_GPU_<index>=<UUID>`.
pub const CDI_GPU_PREFIX: &str = "GPUSLICE_CDI_GPU_";

/// What the standalone hook did.
#[derive(Debug, PartialEq, Eq)]
pub enum Done {
    /// Nothing asked (or sandbox, or already edited by `gpuslice-runtime`).
    Nothing(&'static str),
    /// Admitted, mounted, bound.
    Slice { slice_id: String, existing: bool },
    /// Arbiter unreachable and `fail = "open"`.
    FailedOpen(String),
}

/// The GPUs the CDI devices injected, by index.
pub fn cdi_gpus(env: &[(String, String)]) -> Vec<String> {
    let mut v: Vec<(u32, String)> = env
        .iter()
        .filter_map(|(k, val)| {
            let i = k.strip_prefix(CDI_GPU_PREFIX)?.parse().ok()?;
            (!val.is_empty()).then(|| (i, val.clone()))
        })
        .collect();
    v.sort();
    v.dedup();
    v.into_iter().map(|(_, u)| u).collect()
}

pub(crate) fn read_config(bundle: &Path) -> Result<SpecDoc> {
    use std::io::Read;
    let p = bundle.join("config.json");
    let mut bytes = Vec::new();
    std::fs::File::open(&p)
        .and_then(|f| f.take(MAX_CONFIG).read_to_end(&mut bytes))
        .with_context(|| format!("reading {}", p.display()))?;
    SpecDoc::parse(&bytes).map_err(|e| anyhow!("{}: {e}", p.display()))
}

/// The standalone createRuntime / prestart stage.
pub fn create(
    settings: &Settings,
    id: &str,
    pid: Option<u32>,
    bundle: Option<&Path>,
    slice_id: &str,
    proc_root: &Path,
) -> Result<Done> {
    let bundle = bundle.ok_or_else(|| anyhow!("container {id}: the state has no \"bundle\""))?;
    let doc = read_config(bundle)?;
    if doc.has_mount(gpuslice_region::layout::CONTAINER_SLICE_DIR) {
        return Ok(Done::Nothing("already edited by gpuslice-runtime"));
    }
    let annotations = doc.annotations();
    let env = doc.env();
    let (mut request, provenance) = match select(&annotations, &env)? {
        Selection::Nothing => return Ok(Done::Nothing("no gpuslice request")),
        Selection::Sandbox => return Ok(Done::Nothing("Kubernetes sandbox")),
        Selection::Slice(r, p) => (r, p),
    };
    let explicit_devices = annotations.contains_key("gpuslice.io/devices")
        || env.iter().any(|(k, _)| k == "GPUSLICE_DEVICES");
    let injected = cdi_gpus(&env);
    if !explicit_devices && !injected.is_empty() {
        request.devices = DeviceSelector::List(injected.into_iter().map(DeviceRef::Uuid).collect());
    }
    let pid = pid.ok_or_else(|| anyhow!("container {id}: the state has no pid"))?;
    let rootfs = doc
        .root_path()
        .map(|r| if r.is_absolute() { r } else { bundle.join(r) })
        .ok_or_else(|| anyhow!("{}: no root.path", bundle.join("config.json").display()))?;
    // Fail closed before admission: an image the interposer cannot load in must not run.
    check_mounted_image(bundle, settings).map_err(|e| anyhow!("container {id}: {e}"))?;
    let mut client = match Client::connect(&settings.state_dir, settings.timeout) {
        Ok(c) => c,
        Err(e @ ClientError::Unreachable { .. }) if settings.fail_open() => {
            return Ok(Done::FailedOpen(e.to_string()));
        }
        Err(e) => return Err(e.into()),
    };
    let cgroup = crate::cgroup_of(proc_root, pid);
    let owner = Owner {
        container_id: Some(id.to_string()),
        pid: None,
        cgroup: None,
        pod: gpuslice_api::PodRef::from_annotations(&annotations),
    };
    let adm = client
        .admit(slice_id, request, owner)
        .map_err(|e| anyhow!("{provenance}: {e}"))?;
    let undo = |client: &mut Client, e: anyhow::Error| -> anyhow::Error {
        if adm.existing {
            return e;
        }
        match client.release(slice_id) {
            Ok(_) => e.context(format!("slice \"{slice_id}\" released")),
            Err(r) => e.context(format!("slice \"{slice_id}\" NOT released: {r}")),
        }
    };
    if let Err(e) =
        crate::nsmount::mount_slice_in_child(pid, &rootfs, &adm.slice_dir, settings.timeout)
    {
        return Err(undo(
            &mut client,
            e.context(format!("mounting slice \"{slice_id}\" into container {id}")),
        ));
    }
    match client.bind(slice_id, Some(pid), cgroup.as_deref()) {
        Ok(BindResult::Bound) => {}
        Ok(BindResult::Unsupported(m)) => eprintln!(
            "gpuslice-hook: warning: the arbiter does not support bind ({m}); slice \"{slice_id}\" is released at poststop only"
        ),
        Err(e) => {
            return Err(undo(
                &mut client,
                anyhow!("slice \"{slice_id}\": bind pid {pid}: {e}"),
            ))
        }
    }
    Ok(Done::Slice {
        slice_id: slice_id.to_string(),
        existing: adm.existing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdi_gpus_by_index() {
        let env = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(
            cdi_gpus(&env(&[
                ("GPUSLICE_CDI_GPU_1", "GPU-b"),
                ("PATH", "/bin"),
                ("GPUSLICE_CDI_GPU_0", "GPU-a"),
                ("GPUSLICE_CDI_GPU_0", "GPU-a"),
                ("GPUSLICE_CDI_GPU_x", "GPU-z"),
                ("GPUSLICE_CDI_GPU_2", ""),
            ])),
            ["GPU-a", "GPU-b"]
        );
        assert!(cdi_gpus(&[]).is_empty());
    }
}
