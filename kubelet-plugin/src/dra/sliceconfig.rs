//! The claim's opaque configuration for this driver: `apiVersion: gpuslice.io/v1`,
//! `kind: SliceConfig`, optional `priority` (`high` / `normal` / `low`) and `computeLimit`
//! (1–100). Anything else — another version or kind, an unknown field, a value of the wrong
//! type — is an error that names the field, never ignored.

use gpuslice_api::Priority;
use serde_json::Value;

/// `apiVersion` of the configuration.
pub const API_VERSION: &str = "gpuslice.io/v1";
/// `kind` of the configuration.
pub const KIND: &str = "SliceConfig";

/// A parsed `SliceConfig`; `None` = not given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SliceConfig {
    /// Scheduling priority.
    pub priority: Option<Priority>,
    /// Compute ceiling, percent.
    pub compute_limit: Option<u8>,
}

impl SliceConfig {
    /// `other`'s fields where it sets them, else ours (a later configuration wins).
    pub fn overlay(self, other: SliceConfig) -> SliceConfig {
        SliceConfig {
            priority: other.priority.or(self.priority),
            compute_limit: other.compute_limit.or(self.compute_limit),
        }
    }
}

/// A field that is wrong: its name inside the parameters and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    /// Field inside `parameters` (`computeLimit`), or `parameters` itself.
    pub field: String,
    /// Why.
    pub reason: String,
}

fn err(field: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// Parses the `parameters` of an opaque configuration for this driver.
pub fn parse(parameters: &Value) -> Result<SliceConfig, ConfigError> {
    let obj = parameters
        .as_object()
        .ok_or_else(|| err("parameters", "not an object"))?;
    let mut out = SliceConfig::default();
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(API_VERSION) => {}
        Some(v) => {
            return Err(err(
                "apiVersion",
                format!("\"{v}\": expected \"{API_VERSION}\""),
            ))
        }
        None => return Err(err("apiVersion", format!("required (\"{API_VERSION}\")"))),
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some(KIND) => {}
        Some(k) => return Err(err("kind", format!("\"{k}\": expected \"{KIND}\""))),
        None => return Err(err("kind", format!("required (\"{KIND}\")"))),
    }
    for (k, v) in obj {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "priority" => {
                let s = v
                    .as_str()
                    .ok_or_else(|| err("priority", format!("{v}: not a string")))?;
                out.priority = Some(Priority::parse(s).ok_or_else(|| {
                    err("priority", format!("\"{s}\": expected high, normal or low"))
                })?);
            }
            "computeLimit" => {
                let n = v
                    .as_u64()
                    .ok_or_else(|| err("computeLimit", format!("{v}: not a whole number")))?;
                if !(1..=100).contains(&n) {
                    return Err(err("computeLimit", format!("{n}: must be from 1 to 100")));
                }
                out.compute_limit = u8::try_from(n).ok();
            }
            other => {
                return Err(err(
                    other,
                    "unknown field (known: apiVersion, kind, priority, computeLimit)",
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_priority_and_limit() {
        let c = parse(
            &json!({"apiVersion": "gpuslice.io/v1", "kind": "SliceConfig",
            "priority": "high", "computeLimit": 60}),
        )
        .unwrap();
        assert_eq!(c.priority, Some(Priority::High));
        assert_eq!(c.compute_limit, Some(60));
    }

    #[test]
    fn names_the_bad_field() {
        let base = |extra: Value| {
            let mut v = json!({"apiVersion": "gpuslice.io/v1", "kind": "SliceConfig"});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            parse(&v).unwrap_err().field
        };
        assert_eq!(base(json!({"computeLimit": 0})), "computeLimit");
        assert_eq!(base(json!({"computeLimit": "50"})), "computeLimit");
        assert_eq!(base(json!({"priority": "urgent"})), "priority");
        assert_eq!(base(json!({"memory": "1Gi"})), "memory");
        assert_eq!(base(json!({"apiVersion": "gpuslice.io/v2"})), "apiVersion");
        assert_eq!(base(json!({"kind": "Other"})), "kind");
        assert_eq!(parse(&json!([1])).unwrap_err().field, "parameters");
    }
}
