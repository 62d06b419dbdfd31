//! A JSON view of an OCI runtime spec (`config.json`) that reads the few fields gpuslice needs
//! and appends typed pieces built with `oci-spec` ([`Mount`], [`Hook`], [`LinuxDevice`]).
//!
//! The document stays a `serde_json::Value` on purpose: a round trip through
//! `oci_spec::runtime::Spec` would drop fields that crate does not know (newer spec versions,
//! engine extensions), and the low-level runtime must receive everything the engine wrote.

use std::collections::BTreeMap;
use std::path::PathBuf;

use oci_spec::runtime::{Hook, LinuxDevice, LinuxDeviceCgroup, Mount};
use serde::Serialize;
use serde_json::{Map, Value};

/// Why a document is not usable as a spec.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not JSON.
    #[error("config.json is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON, but a field has the wrong shape.
    #[error("config.json: {0}")]
    Shape(String),
}

/// The spec document.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecDoc(pub Value);

fn obj<'a>(v: &'a mut Value, key: &str) -> Result<&'a mut Map<String, Value>, SpecError> {
    let map = v
        .as_object_mut()
        .ok_or_else(|| SpecError::Shape("expected an object".into()))?;
    let e = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if e.is_null() {
        *e = Value::Object(Map::new());
    }
    e.as_object_mut()
        .ok_or_else(|| SpecError::Shape(format!("\"{key}\" is not an object")))
}

fn arr<'a>(map: &'a mut Map<String, Value>, key: &str) -> Result<&'a mut Vec<Value>, SpecError> {
    let e = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if e.is_null() {
        *e = Value::Array(Vec::new());
    }
    e.as_array_mut()
        .ok_or_else(|| SpecError::Shape(format!("\"{key}\" is not an array")))
}

fn to_value<T: Serialize>(t: &T) -> Result<Value, SpecError> {
    serde_json::to_value(t).map_err(SpecError::Json)
}

impl SpecDoc {
    /// Parses `config.json`; the top level must be an object.
    pub fn parse(bytes: &[u8]) -> Result<SpecDoc, SpecError> {
        let v: Value = serde_json::from_slice(bytes)?;
        if !v.is_object() {
            return Err(SpecError::Shape("the top level is not an object".into()));
        }
        Ok(SpecDoc(v))
    }

    /// Serialises the document (pretty, as runc's `spec` writes it).
    pub fn to_bytes(&self) -> Result<Vec<u8>, SpecError> {
        Ok(serde_json::to_vec_pretty(&self.0)?)
    }

    /// `annotations` (string values only).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.0
            .get("annotations")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `process.env` as (name, value) pairs, in order (an entry without `=` has an empty value).
    pub fn env(&self) -> Vec<(String, String)> {
        self.0
            .pointer("/process/env")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|e| match e.split_once('=') {
                        Some((k, v)) => (k.to_string(), v.to_string()),
                        None => (e.to_string(), String::new()),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `root.path` as written (relative to the bundle, or absolute).
    pub fn root_path(&self) -> Option<PathBuf> {
        self.0
            .pointer("/root/path")
            .and_then(Value::as_str)
            .map(PathBuf::from)
    }

    /// The source of the last mount targeting `destination` (the one on top).
    pub fn mount_source(&self, destination: &str) -> Option<PathBuf> {
        self.0
            .get("mounts")
            .and_then(Value::as_array)?
            .iter()
            .rev()
            .find(|m| m.get("destination").and_then(Value::as_str) == Some(destination))
            .and_then(|m| m.get("source").and_then(Value::as_str))
            .map(PathBuf::from)
    }

    /// Whether a mount already targets `destination`.
    pub fn has_mount(&self, destination: &str) -> bool {
        self.0
            .get("mounts")
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter()
                    .any(|m| m.get("destination").and_then(Value::as_str) == Some(destination))
            })
    }

    /// Appends a mount (after the engine's, so it lies on top of them).
    pub fn push_mount(&mut self, m: &Mount) -> Result<(), SpecError> {
        let v = to_value(m)?;
        let top = self
            .0
            .as_object_mut()
            .ok_or_else(|| SpecError::Shape("expected an object".into()))?;
        arr(top, "mounts")?.push(v);
        Ok(())
    }

    /// Sets `name=value` in `process.env`, replacing every earlier entry for `name`.
    pub fn set_env(&mut self, name: &str, value: &str) -> Result<(), SpecError> {
        let process = obj(&mut self.0, "process")?;
        let env = arr(process, "env")?;
        let prefix = format!("{name}=");
        env.retain(|e| {
            e.as_str()
                .is_none_or(|s| !s.starts_with(&prefix) && s != name)
        });
        env.push(Value::String(format!("{name}={value}")));
        Ok(())
    }

    /// Appends a hook to `hooks.<stage>` (`createRuntime`, `poststop`, …).
    pub fn push_hook(&mut self, stage: &str, h: &Hook) -> Result<(), SpecError> {
        let v = to_value(h)?;
        let hooks = obj(&mut self.0, "hooks")?;
        arr(hooks, stage)?.push(v);
        Ok(())
    }

    /// Whether `linux.devices` already has a node at `path`.
    pub fn has_device(&self, path: &str) -> bool {
        self.0
            .pointer("/linux/devices")
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter()
                    .any(|d| d.get("path").and_then(Value::as_str) == Some(path))
            })
    }

    /// Adds a device node and the cgroup rule that allows it.
    pub fn push_device(
        &mut self,
        dev: &LinuxDevice,
        rule: &LinuxDeviceCgroup,
    ) -> Result<(), SpecError> {
        let d = to_value(dev)?;
        let r = to_value(rule)?;
        let linux = obj(&mut self.0, "linux")?;
        arr(linux, "devices")?.push(d);
        let linux = obj(&mut self.0, "linux")?;
        let resources = linux
            .entry("resources".to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if resources.is_null() {
            *resources = Value::Object(Map::new());
        }
        let resources = resources
            .as_object_mut()
            .ok_or_else(|| SpecError::Shape("\"linux.resources\" is not an object".into()))?;
        arr(resources, "devices")?.push(r);
        Ok(())
    }
}
