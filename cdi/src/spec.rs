//! The CDI document gpuslice writes (kind `gpuslice.io/gpu`), its lowest sufficient
//! `cdiVersion`, validation with the `container-device-interface` crate, and rendering.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::CdiError;

/// The kind of every gpuslice CDI device.
pub const KIND: &str = "gpuslice.io/gpu";

/// A CDI spec document (the subset of the schema gpuslice uses).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    #[serde(rename = "cdiVersion")]
    pub cdi_version: String,
    pub kind: String,
    pub devices: Vec<Device>,
    #[serde(rename = "containerEdits", default)]
    pub container_edits: Edits,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Device {
    pub name: String,
    #[serde(rename = "containerEdits", default)]
    pub container_edits: Edits,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Edits {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(rename = "deviceNodes", default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeviceNode {
    pub path: String,
    #[serde(rename = "hostPath", default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub major: i64,
    pub minor: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Mount {
    #[serde(rename = "hostPath")]
    pub host_path: String,
    #[serde(rename = "containerPath")]
    pub container_path: String,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hook {
    #[serde(rename = "hookName")]
    pub hook_name: String,
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub timeout: i64,
}

/// Reads a spec this module wrote (YAML or JSON), e.g. the node's `gpuslice.yaml`.
pub fn parse(text: &str, origin: &Path) -> Result<Spec, CdiError> {
    serde_yaml_ng::from_str(text).map_err(|e| {
        CdiError::Invalid(format!(
            "{}: not a gpuslice CDI spec: {e}",
            origin.display()
        ))
    })
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// The file extension CDI expects for the format.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
        }
    }
}

fn to_raw(spec: &Spec) -> Result<container_device_interface::specs::config::Spec, CdiError> {
    let v = serde_json::to_value(spec).map_err(|e| CdiError::Invalid(e.to_string()))?;
    // deny_unknown_fields on the crate's types: a field we invented would fail here.
    serde_json::from_value(v).map_err(|e| CdiError::Invalid(format!("not a CDI spec: {e}")))
}

impl Spec {
    /// Sets `cdiVersion` to the lowest version whose schema allows every feature used
    /// (e.g. device names starting with a digit and `hostPath` on device nodes need 0.5.0).
    pub fn set_lowest_version(&mut self) -> Result<(), CdiError> {
        self.cdi_version = "0.3.0".into();
        let raw = to_raw(self)?;
        let v = container_device_interface::version::minimum_required_version(&raw)
            .map_err(|e| CdiError::Invalid(format!("{e:#}")))?;
        self.cdi_version = v.to_string();
        Ok(())
    }

    /// Validates with the `container-device-interface` crate: schema, version rules, names,
    /// edits. `path` is where it will be written (the crate checks the extension).
    pub fn validate(&self, path: &Path) -> Result<(), CdiError> {
        let raw = to_raw(self)?;
        container_device_interface::spec::new_spec(&raw, &PathBuf::from(path), 0)
            .map(|_| ())
            .map_err(|e| CdiError::Invalid(format!("{e:#}")))
    }

    /// The document as text.
    pub fn render(&self, format: Format) -> Result<String, CdiError> {
        match format {
            Format::Json => serde_json::to_string_pretty(self)
                .map(|s| s + "\n")
                .map_err(|e| CdiError::Invalid(e.to_string())),
            Format::Yaml => {
                serde_yaml_ng::to_string(self).map_err(|e| CdiError::Invalid(e.to_string()))
            }
        }
    }
}

/// Writes `text` to `path` atomically: a temporary file in the same directory, fsync, rename,
/// fsync of the directory. Mode 0644 (engines read it).
pub fn write_atomic(path: &Path, text: &str) -> Result<(), CdiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |what: &str, e: std::io::Error| CdiError::Io(format!("{what}: {e}"));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| io(&format!("create {}", dir.display()), e))?;
    let name = path
        .file_name()
        .ok_or_else(|| CdiError::Io(format!("{} names no file", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(|e| io(&format!("create {}", tmp.display()), e))?;
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| io(&format!("write {}", tmp.display()), e))?;
        std::fs::rename(&tmp, path).map_err(|e| io(&format!("rename to {}", path.display()), e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
