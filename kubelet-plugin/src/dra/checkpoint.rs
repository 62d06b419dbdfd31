//! The plugin's checkpoint: every claim it has begun to prepare and not yet unprepared, with
//! what it asked the arbiter for and the CDI devices it returned, in one JSON file written
//! atomically (`<plugin dir>/checkpoint.json`). An entry is written *before* the slice is
//! admitted, so a plugin that dies half-way leaves a record from which a retried prepare
//! completes and an unprepare cleans up; it is removed only after the slice and the CDI spec are
//! gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dra::plan::Plan;

/// Format version of the file.
pub const VERSION: u32 = 1;
/// The file's name in the plugin directory.
pub const FILE: &str = "checkpoint.json";

/// Where a claim is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Planned; the slice and the CDI spec may or may not exist yet.
    Preparing,
    /// Slice admitted, CDI spec written, devices returned to kubelet.
    Prepared,
}

/// One claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Namespace of the claim.
    pub namespace: String,
    /// Name of the claim.
    pub name: String,
    /// Where it is.
    pub stage: Stage,
    /// What it becomes.
    pub plan: Plan,
    /// The CDI device ids returned (empty until prepared).
    #[serde(default)]
    pub cdi_device_ids: Vec<String>,
}

/// The whole file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// [`VERSION`].
    pub version: u32,
    /// By claim UID.
    pub claims: BTreeMap<String, Entry>,
}

/// The checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint {path}: {reason}")]
pub struct CheckpointError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

impl Checkpoint {
    /// Reads `path`; a missing file is an empty checkpoint.
    pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
        let err = |reason: String| CheckpointError {
            path: path.to_path_buf(),
            reason,
        };
        match std::fs::read(path) {
            Ok(bytes) => {
                let c: Checkpoint =
                    serde_json::from_slice(&bytes).map_err(|e| err(e.to_string()))?;
                if c.version != VERSION {
                    return Err(err(format!(
                        "version {} (this plugin reads {VERSION})",
                        c.version
                    )));
                }
                Ok(c)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Checkpoint {
                version: VERSION,
                claims: BTreeMap::new(),
            }),
            Err(e) => Err(err(e.to_string())),
        }
    }

    /// Writes it to `path` atomically (temporary file, fsync, rename).
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| CheckpointError {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        gpuslice_cdi::spec::write_atomic(path, &(text + "\n")).map_err(|e| CheckpointError {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    }
}
