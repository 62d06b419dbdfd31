//! What a container or bare process asks for: [`SliceRequest`], read from OCI annotations and the
//! environment (`gpuslice.io/*`, `GPUSLICE_*`, HAMi's `CUDA_DEVICE_*_LIMIT` for migration), with
//! validation errors that name the key, the value and the reason.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::quantity::{MemoryRequest, QuantityError};

/// Annotation keys (OCI spec annotations, Pod annotations, `docker --annotation`).
pub mod keys {
    /// Memory cap per device.
    pub const MEMORY: &str = "gpuslice.io/memory";
    /// Guaranteed compute share, percent.
    pub const COMPUTE: &str = "gpuslice.io/compute";
    /// Compute ceiling, percent.
    pub const COMPUTE_LIMIT: &str = "gpuslice.io/compute-limit";
    /// `high`, `normal`, `low`.
    pub const PRIORITY: &str = "gpuslice.io/priority";
    /// Device count or list of indices / UUIDs.
    pub const DEVICES: &str = "gpuslice.io/devices";
    /// Substring of the device name.
    pub const MODEL: &str = "gpuslice.io/model";
    /// The prefix every gpuslice annotation shares.
    pub const PREFIX: &str = "gpuslice.io/";
    /// Every request key, in documentation order.
    pub const ALL: [&str; 6] = [MEMORY, COMPUTE, COMPUTE_LIMIT, PRIORITY, DEVICES, MODEL];
}

/// Environment variable equivalents of [`keys`], plus HAMi's variables.
pub mod env {
    /// Memory cap per device.
    pub const MEMORY: &str = "GPUSLICE_MEMORY";
    /// Guaranteed compute share, percent.
    pub const COMPUTE: &str = "GPUSLICE_COMPUTE";
    /// Compute ceiling, percent.
    pub const COMPUTE_LIMIT: &str = "GPUSLICE_COMPUTE_LIMIT";
    /// `high`, `normal`, `low`.
    pub const PRIORITY: &str = "GPUSLICE_PRIORITY";
    /// Device count or list.
    pub const DEVICES: &str = "GPUSLICE_DEVICES";
    /// Substring of the device name.
    pub const MODEL: &str = "GPUSLICE_MODEL";
    /// Every request variable, in the same order as [`super::keys::ALL`].
    pub const ALL: [&str; 6] = [MEMORY, COMPUTE, COMPUTE_LIMIT, PRIORITY, DEVICES, MODEL];
    /// HAMi's memory limit (`1g`, `1024m`, `1048576k`, bytes); honoured only without gpuslice keys.
    pub const HAMI_MEMORY: &str = "CUDA_DEVICE_MEMORY_LIMIT";
    /// HAMi's SM utilisation limit in percent (`0` = unlimited); becomes the compute ceiling.
    pub const HAMI_SM: &str = "CUDA_DEVICE_SM_LIMIT";
}

/// Scheduling priority of a slice.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Gets the device at the next kernel boundary when it has work (bounded by its ceiling).
    High,
    /// The default.
    #[default]
    Normal,
    /// Yields to normal and high.
    Low,
}

impl Priority {
    /// Parses `high`, `normal`, `low` (any case).
    pub fn parse(text: &str) -> Option<Priority> {
        match text.trim().to_ascii_lowercase().as_str() {
            "high" => Some(Priority::High),
            "normal" => Some(Priority::Normal),
            "low" => Some(Priority::Low),
            _ => None,
        }
    }

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One device named in an explicit list.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceRef {
    /// NVML / CUDA ordinal on the node.
    Index(u32),
    /// `GPU-…` (or `MIG-…`) UUID as NVML reports it.
    Uuid(String),
}

impl fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRef::Index(i) => write!(f, "{i}"),
            DeviceRef::Uuid(u) => f.write_str(u),
        }
    }
}

/// Which devices a slice gets: a count placed by the arbiter, or an explicit list.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceSelector {
    /// This many devices (at least 1), chosen by the placement policy.
    Count(u32),
    /// Exactly these devices, or a refusal.
    List(Vec<DeviceRef>),
}

impl Default for DeviceSelector {
    fn default() -> Self {
        DeviceSelector::Count(1)
    }
}

impl DeviceSelector {
    /// How many devices the slice spans.
    pub fn count(&self) -> usize {
        match self {
            DeviceSelector::Count(n) => *n as usize,
            DeviceSelector::List(l) => l.len(),
        }
    }

    /// Parses the annotation syntax: a single number is a count (`1`, `2`); a comma-separated list
    /// of indices and/or UUIDs (`0,1`, `GPU-…`, `GPU-…,GPU-…`) names devices. A single number is
    /// always a count, so one device is pinned by its UUID.
    pub fn parse(text: &str) -> Result<DeviceSelector, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty value".into());
        }
        if !text.contains(',') && text.bytes().all(|b| b.is_ascii_digit()) {
            let n: u32 = text
                .parse()
                .map_err(|_| "device count is too large".to_string())?;
            if n == 0 {
                return Err("device count must be at least 1".into());
            }
            return Ok(DeviceSelector::Count(n));
        }
        let mut list = Vec::new();
        for item in text.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err("empty entry in device list".into());
            }
            let dev = if item.bytes().all(|b| b.is_ascii_digit()) {
                DeviceRef::Index(
                    item.parse()
                        .map_err(|_| format!("device index {item} is too large"))?,
                )
            } else if is_uuid(item) {
                DeviceRef::Uuid(item.to_string())
            } else {
                return Err(format!(
                    "\"{item}\" is neither a device index nor a UUID (GPU-…)"
                ));
            };
            if list.contains(&dev) {
                return Err(format!("device {item} is listed twice"));
            }
            list.push(dev);
        }
        Ok(DeviceSelector::List(list))
    }
}

fn is_uuid(s: &str) -> bool {
    let rest = s.strip_prefix("GPU-").or_else(|| s.strip_prefix("MIG-"));
    matches!(rest, Some(r) if !r.is_empty()
        && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'/'))
}

impl fmt::Display for DeviceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelector::Count(n) => write!(f, "{n}"),
            DeviceSelector::List(l) => {
                for (i, d) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{d}")?;
                }
                Ok(())
            }
        }
    }
}

/// A request for a slice of the node's GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceRequest {
    /// Memory cap per device; `None` = no cap (the device's memory, still counted by admission
    /// as the whole device unless overcommit is configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryRequest>,
    /// Guaranteed share of each device's time, 1–100; `None` = best effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<u8>,
    /// Ceiling on the share, 1–100; `None` = 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_limit: Option<u8>,
    /// Scheduling priority.
    #[serde(default)]
    pub priority: Priority,
    /// Devices: a count or an explicit list.
    #[serde(default)]
    pub devices: DeviceSelector,
    /// Placement constraint: substring of the device name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A request value that is malformed or inconsistent. `key` is the annotation key or environment
/// variable the value came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}=\"{value}\": {reason}")]
pub struct RequestError {
    /// Where the value came from (`gpuslice.io/memory`, `GPUSLICE_COMPUTE`, …).
    pub key: String,
    /// The value as given.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl RequestError {
    /// Builds an error for `key="value": reason`.
    pub fn new(key: &str, value: impl fmt::Display, reason: impl Into<String>) -> Self {
        RequestError {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Parses a percentage 1–100, with or without a trailing `%`.
fn parse_share(text: &str) -> Result<u8, String> {
    let t = text.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim_end();
    if t.is_empty() {
        return Err("empty value".into());
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a whole number (expected a percentage from 1 to 100)".into());
    }
    match t.parse::<u32>() {
        Ok(v) if (1..=100).contains(&v) => Ok(v as u8),
        Ok(0) => Err("must be at least 1 (omit the key for best effort)".into()),
        _ => Err("must be a percentage from 1 to 100".into()),
    }
}

fn quantity_err(key: &str, value: &str, e: QuantityError) -> RequestError {
    RequestError::new(key, value, e.to_string())
}

impl SliceRequest {
    /// The effective ceiling (100 when none was given).
    pub fn limit(&self) -> u8 {
        self.compute_limit.unwrap_or(100)
    }

    /// Reads a request from OCI annotations and the process environment.
    ///
    /// Per key, an annotation wins over its environment variable; for repeated environment
    /// entries the last one wins. HAMi's `CUDA_DEVICE_MEMORY_LIMIT` / `CUDA_DEVICE_SM_LIMIT` are
    /// honoured only when no gpuslice key is given at all. Returns `Ok(None)` when nothing is
    /// asked: such a container is left untouched. Unknown `gpuslice.io/` annotations are errors
    /// (a misspelt key must not silently mean "no cap").
    pub fn from_sources(
        annotations: &BTreeMap<String, String>,
        env: &[(String, String)],
    ) -> Result<Option<SliceRequest>, RequestError> {
        for (k, v) in annotations {
            if k.starts_with(keys::PREFIX) && !keys::ALL.contains(&k.as_str()) {
                return Err(RequestError::new(
                    k,
                    v,
                    format!(
                        "unknown gpuslice annotation (known: {})",
                        keys::ALL.join(", ")
                    ),
                ));
            }
        }
        let picked = pick(annotations, env);
        if picked.iter().all(Option::is_none) {
            return Self::from_hami(env_get(env, env::HAMI_MEMORY), env_get(env, env::HAMI_SM));
        }
        let [memory, compute, limit, priority, devices, model] = picked;
        let mut req = SliceRequest::default();
        if let Some((k, v)) = memory {
            req.memory = Some(MemoryRequest::parse(v).map_err(|e| quantity_err(k, v, e))?);
        }
        if let Some((k, v)) = compute {
            req.compute = Some(parse_share(v).map_err(|r| RequestError::new(k, v, r))?);
        }
        if let Some((k, v)) = limit {
            req.compute_limit = Some(parse_share(v).map_err(|r| RequestError::new(k, v, r))?);
        }
        if let Some((k, v)) = priority {
            req.priority = Priority::parse(v).ok_or_else(|| {
                RequestError::new(k, v, "unknown priority (use high, normal or low)")
            })?;
        }
        if let Some((k, v)) = devices {
            req.devices = DeviceSelector::parse(v).map_err(|r| RequestError::new(k, v, r))?;
        }
        if let Some((k, v)) = model {
            let m = v.trim();
            if m.is_empty() {
                return Err(RequestError::new(k, v, "empty value"));
            }
            req.model = Some(m.to_string());
        }
        if let (Some((ck, cv)), Some(g), Some(l)) = (compute, req.compute, req.compute_limit) {
            if l < g {
                let (lk, lv) = limit.unwrap_or((keys::COMPUTE_LIMIT, ""));
                return Err(RequestError::new(
                    lk,
                    lv,
                    format!("ceiling {l} is below the guaranteed share {g} ({ck}=\"{cv}\")"),
                ));
            }
        }
        Ok(Some(req))
    }

    fn from_hami(
        memory: Option<&str>,
        sm: Option<&str>,
    ) -> Result<Option<SliceRequest>, RequestError> {
        let mut req = SliceRequest::default();
        let mut asked = false;
        if let Some(v) = memory {
            req.memory = Some(
                MemoryRequest::parse_hami(v).map_err(|e| quantity_err(env::HAMI_MEMORY, v, e))?,
            );
            asked = true;
        }
        if let Some(v) = sm {
            let t = v.trim();
            match t.parse::<u32>() {
                // HAMi uses 0 (and 100) for "no limit".
                Ok(0) | Ok(100) => {}
                Ok(p) if p < 100 => {
                    req.compute_limit = Some(p as u8);
                    asked = true;
                }
                _ => {
                    return Err(RequestError::new(
                        env::HAMI_SM,
                        v,
                        "must be a percentage from 0 (unlimited) to 100",
                    ))
                }
            }
        }
        Ok(asked.then_some(req))
    }

    /// Checks a request that arrived already structured (over the control socket): shares in
    /// 1–100, ceiling not below the guarantee, a non-empty device selection and model.
    pub fn validate(&self) -> Result<(), RequestError> {
        if let Some(c) = self.compute {
            if !(1..=100).contains(&c) {
                return Err(RequestError::new(
                    keys::COMPUTE,
                    c,
                    "must be a percentage from 1 to 100",
                ));
            }
        }
        if let Some(l) = self.compute_limit {
            if !(1..=100).contains(&l) {
                return Err(RequestError::new(
                    keys::COMPUTE_LIMIT,
                    l,
                    "must be a percentage from 1 to 100",
                ));
            }
            if let Some(c) = self.compute {
                if l < c {
                    return Err(RequestError::new(
                        keys::COMPUTE_LIMIT,
                        l,
                        format!(
                            "ceiling {l} is below the guaranteed share {c} ({}=\"{c}\")",
                            keys::COMPUTE
                        ),
                    ));
                }
            }
        }
        if let Some(MemoryRequest::Bytes(0)) = self.memory {
            return Err(RequestError::new(
                keys::MEMORY,
                0,
                "must be greater than zero",
            ));
        }
        if let Some(MemoryRequest::Percent(p)) = self.memory {
            if !(1..=100).contains(&p) {
                return Err(RequestError::new(
                    keys::MEMORY,
                    format!("{p}%"),
                    "percentage must be a whole number from 1 to 100",
                ));
            }
        }
        match &self.devices {
            DeviceSelector::Count(0) => {
                return Err(RequestError::new(
                    keys::DEVICES,
                    0,
                    "device count must be at least 1",
                ))
            }
            DeviceSelector::List(l) if l.is_empty() => {
                return Err(RequestError::new(keys::DEVICES, "", "empty device list"))
            }
            DeviceSelector::List(l) => {
                for (i, d) in l.iter().enumerate() {
                    if l[..i].contains(d) {
                        return Err(RequestError::new(
                            keys::DEVICES,
                            &self.devices,
                            format!("device {d} is listed twice"),
                        ));
                    }
                    if let DeviceRef::Uuid(u) = d {
                        if !is_uuid(u) {
                            return Err(RequestError::new(
                                keys::DEVICES,
                                &self.devices,
                                format!("\"{u}\" is neither a device index nor a UUID (GPU-…)"),
                            ));
                        }
                    }
                }
            }
            DeviceSelector::Count(_) => {}
        }
        if let Some(m) = &self.model {
            if m.trim().is_empty() {
                return Err(RequestError::new(keys::MODEL, m, "empty value"));
            }
        }
        Ok(())
    }
}

/// The last value of variable `name` in `env` (later entries win, as in a process environment).
fn env_get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The (source key, value) each request field is read from: the annotation when present, else
/// the environment variable. Order: memory, compute, compute-limit, priority, devices, model.
fn pick<'a>(
    annotations: &'a BTreeMap<String, String>,
    env: &'a [(String, String)],
) -> [Option<(&'static str, &'a str)>; 6] {
    let mut picked: [Option<(&'static str, &'a str)>; 6] = [None; 6];
    for (i, slot) in picked.iter_mut().enumerate() {
        if let Some(v) = annotations.get(keys::ALL[i]) {
            *slot = Some((keys::ALL[i], v.as_str()));
        } else if let Some(v) = env_get(env, env::ALL[i]) {
            *slot = Some((env::ALL[i], v));
        }
    }
    picked
}

/// The `key="value"` pairs a request is read from, in the words the user wrote them (annotation
/// or environment variable; the HAMi variables when no gpuslice key is given). Callers put them
/// in front of a refusal so that the message names the key and the value, not only the reason.
pub fn provenance(annotations: &BTreeMap<String, String>, env: &[(String, String)]) -> String {
    let picked = pick(annotations, env);
    let mut pairs: Vec<(&str, &str)> = picked.iter().flatten().copied().collect();
    if pairs.is_empty() {
        for k in [env::HAMI_MEMORY, env::HAMI_SM] {
            if let Some(v) = env_get(env, k) {
                pairs.push((k, v));
            }
        }
    }
    pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect::<Vec<_>>()
        .join(" ")
}
