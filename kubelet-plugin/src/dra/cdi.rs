//! One CDI spec per prepared claim: kind `gpuslice.io/claim`, one device named by the claim's
//! UID (`gpuslice.io/claim=<uid>`), in `<cdi dir>/gpuslice.io-claim_<uid>.yaml`. Its edits are
//! what `gpuslice cdi generate` builds for that one GPU ([`gpuslice_cdi::build`]: control and
//! GPU device nodes, driver libraries, interposer, `/etc/ld.so.preload`), without the
//! standalone hooks (the slice already exists: it belongs to the claim, not to a container),
//! plus the slice's own part, the CDI rendering of the one description of a slice's container
//! ([`gpuslice_cdi::container::SliceContainer`], which the runtime renders as OCI edits): the
//! slice directory read-only at `/run/gpuslice` with its `usage` file read-write on top,
//! `GPUSLICE_SLICE_DIR` and `CUDA_VISIBLE_DEVICES`.
//!
//! In a container (the DaemonSet) the plugin does not see the host's driver root, interposer or
//! hook at their host paths, so [`CdiDir::node_spec`] names the node's own spec instead (the
//! `/var/run/cdi/gpuslice.yaml` that `gpuslice cdi generate` wrote in the host's mount
//! namespace): its common edits and the GPU's device entry are taken as they are, with host
//! paths, and the plugin writes nothing outside the CDI directory.

use std::path::{Path, PathBuf};

use gpuslice_cdi::container::{SliceContainer, SliceGrant};
use gpuslice_cdi::spec::{self, Device, Edits, Spec};
use gpuslice_cdi::{CdiError, Format, Options};

use crate::gpu::Gpu;

/// Kind of the per-claim devices.
pub const KIND: &str = "gpuslice.io/claim";

/// The qualified CDI device name of a claim.
pub fn device_id(claim_uid: &str) -> String {
    format!("{KIND}={claim_uid}")
}

/// Writes and removes claims' CDI specs.
pub trait ClaimCdi: Send + Sync {
    /// Writes the spec of `claim_uid` (slice at `slice_dir` on `gpu`); returns its device ids.
    fn write(&self, claim_uid: &str, gpu: &Gpu, slice_dir: &Path) -> Result<Vec<String>, CdiError>;
    /// Removes it; a missing spec is success.
    fn remove(&self, claim_uid: &str) -> Result<(), CdiError>;
}

/// Specs in a CDI directory (`/var/run/cdi`), built with the `gpuslice-cdi` crate.
#[derive(Clone, Debug)]
pub struct CdiDir {
    /// The directory engines read.
    pub dir: PathBuf,
    /// What `gpuslice cdi generate` would be given (unused but for the state dir when
    /// `node_spec` is set).
    pub options: Options,
    /// The node's spec to derive claim specs from, instead of discovering the driver here.
    pub node_spec: Option<PathBuf>,
}

impl CdiDir {
    /// The spec file of `claim_uid`.
    pub fn path(&self, claim_uid: &str) -> PathBuf {
        self.dir.join(format!("gpuslice.io-claim_{claim_uid}.yaml"))
    }

    /// The spec of `claim_uid` (validated, lowest version).
    pub fn spec(&self, claim_uid: &str, gpu: &Gpu, slice_dir: &Path) -> Result<Spec, CdiError> {
        let cdi_gpu = gpuslice_cdi::Gpu {
            index: gpu.info.index,
            uuid: gpu.info.uuid.clone(),
            minor: gpu.minor,
        };
        let base = match &self.node_spec {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    CdiError::Io(format!("read the node's CDI spec {}: {e}", p.display()))
                })?;
                spec::parse(&text, p)?
            }
            None => gpuslice_cdi::build(&self.options, &[cdi_gpu])?,
        };
        let mut edits = base.container_edits;
        edits.hooks.clear();
        let by_uuid = base
            .devices
            .iter()
            .find(|d| d.name == gpu.info.uuid)
            .ok_or_else(|| {
                let from = match &self.node_spec {
                    Some(p) => format!(" in {}", p.display()),
                    None => String::new(),
                };
                CdiError::Missing(format!("no CDI device {}{from}", gpu.info.uuid))
            })?;
        edits
            .env
            .extend(by_uuid.container_edits.env.iter().cloned());
        edits
            .device_nodes
            .extend(by_uuid.container_edits.device_nodes.iter().cloned());
        // The interposer and preload mounts come with the node's edits above.
        let slice = SliceContainer::of(&SliceGrant {
            slice_dir: Some(slice_dir.to_path_buf()),
            device_uuids: vec![gpu.info.uuid.clone()],
            ..SliceGrant::default()
        })
        .cdi_edits();
        edits.mounts.extend(slice.mounts);
        edits.env.extend(slice.env);
        let mut s = Spec {
            cdi_version: String::new(),
            kind: KIND.into(),
            devices: vec![Device {
                name: claim_uid.to_string(),
                container_edits: edits,
            }],
            container_edits: Edits::default(),
        };
        s.set_lowest_version()?;
        s.validate(&self.path(claim_uid))?;
        Ok(s)
    }
}

impl ClaimCdi for CdiDir {
    fn write(&self, claim_uid: &str, gpu: &Gpu, slice_dir: &Path) -> Result<Vec<String>, CdiError> {
        let s = self.spec(claim_uid, gpu, slice_dir)?;
        // With the node's spec, its generator already wrote the preload file it mounts.
        let preload = gpuslice_cdi::preload_content();
        if self.node_spec.is_none()
            && std::fs::read_to_string(&self.options.preload_file).ok() != Some(preload.clone())
        {
            spec::write_atomic(&self.options.preload_file, &preload)?;
        }
        spec::write_atomic(&self.path(claim_uid), &s.render(Format::Yaml)?)?;
        Ok(vec![device_id(claim_uid)])
    }

    fn remove(&self, claim_uid: &str) -> Result<(), CdiError> {
        let p = self.path(claim_uid);
        match std::fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CdiError::Io(format!("remove {}: {e}", p.display()))),
        }
    }
}
