//! The API server's validation of a ResourceSlice (resource.k8s.io/v1), the parts this driver's
//! slices touch: names (DNS subdomains and labels), the pool, at most 128 devices with unique
//! names, attributes (C identifiers, exactly one value, strings ≤ 64, versions semver), at most
//! 32 attributes and capacities per device, capacity quantities and request policies. Used by the
//! unit tests, and by the plugin on what it computed before it is ever sent.

use std::collections::BTreeSet;

use k8s_openapi::api::resource::v1::{CapacityRequestPolicy, Device, ResourceSlice};

use crate::dra::resourceslice::MAX_DEVICES_PER_SLICE;
use crate::quantity;

/// One violation: the field path and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Invalid {
    /// JSON path of the field (`spec.devices[3].name`).
    pub field: String,
    /// Why.
    pub reason: String,
}

/// A DNS-1123 label: 1–63 of `a-z 0-9 -`, starting and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

fn is_c_identifier(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=32).contains(&b.len())
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// `major.minor.patch` with optional pre-release / build, no leading zeros.
fn is_semver(s: &str) -> bool {
    let core = s.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes().all(|c| c.is_ascii_digit())
                && (p.len() == 1 || !p.starts_with('0'))
        })
}

/// Every violation in `slice` (empty = valid).
pub fn resource_slice(slice: &ResourceSlice) -> Vec<Invalid> {
    let mut out = Vec::new();
    let mut bad = |field: String, reason: &str| {
        out.push(Invalid {
            field,
            reason: reason.to_string(),
        })
    };
    match slice.metadata.name.as_deref() {
        Some(n) if is_dns_subdomain(n) => {}
        Some(_) => bad("metadata.name".into(), "not a DNS subdomain"),
        None if slice.metadata.generate_name.is_some() => {}
        None => bad("metadata.name".into(), "required"),
    }
    let spec = &slice.spec;
    if spec.driver.len() > 63 || !is_dns_subdomain(&spec.driver) {
        bad(
            "spec.driver".into(),
            "not a DNS subdomain of at most 63 characters",
        );
    }
    let pool = &spec.pool;
    if pool.name.is_empty() || pool.name.len() > 253 || !pool.name.split('/').all(is_dns_subdomain)
    {
        bad("spec.pool.name".into(), "not DNS subdomains separated by /");
    }
    if pool.generation < 0 {
        bad("spec.pool.generation".into(), "must not be negative");
    }
    if pool.resource_slice_count < 1 {
        bad("spec.pool.resourceSliceCount".into(), "must be at least 1");
    }
    let selectors = [
        spec.node_name.is_some(),
        spec.node_selector.is_some(),
        spec.all_nodes == Some(true),
        spec.per_device_node_selection == Some(true),
    ];
    if selectors.iter().filter(|s| **s).count() != 1 {
        bad(
            "spec".into(),
            "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection",
        );
    }
    let devices = spec.devices.as_deref().unwrap_or_default();
    if devices.len() > MAX_DEVICES_PER_SLICE {
        bad(
            "spec.devices".into(),
            &format!("{} devices, at most {MAX_DEVICES_PER_SLICE}", devices.len()),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, d) in devices.iter().enumerate() {
        if !seen.insert(d.name.as_str()) {
            bad(format!("spec.devices[{i}].name"), "duplicate");
        }
        for v in device(d) {
            bad(format!("spec.devices[{i}].{}", v.field), &v.reason);
        }
    }
    out
}

fn device(d: &Device) -> Vec<Invalid> {
    let mut out = Vec::new();
    let mut bad = |field: String, reason: String| out.push(Invalid { field, reason });
    if !is_dns_label(&d.name) {
        bad("name".into(), format!("\"{}\" is not a DNS label", d.name));
    }
    let attrs = d.attributes.as_ref();
    let caps = d.capacity.as_ref();
    let total = attrs.map_or(0, |a| a.len()) + caps.map_or(0, |c| c.len());
    if total > 32 {
        bad(
            "attributes".into(),
            format!("{total} attributes and capacities, at most 32"),
        );
    }
    for (name, a) in attrs.into_iter().flatten() {
        let f = format!("attributes[{name}]");
        if !is_c_identifier(name) {
            bad(f.clone(), "name is not a C identifier of at most 32".into());
        }
        let values = [
            a.bool.is_some(),
            a.int.is_some(),
            a.string.is_some(),
            a.version.is_some(),
            a.bools.is_some(),
            a.ints.is_some(),
            a.strings.is_some(),
            a.versions.is_some(),
        ];
        if values.iter().filter(|v| **v).count() != 1 {
            bad(f.clone(), "exactly one value".into());
        }
        if a.string.as_ref().is_some_and(|s| s.len() > 64) {
            bad(f.clone(), "string longer than 64".into());
        }
        if let Some(v) = &a.version {
            if v.len() > 64 || !is_semver(v) {
                bad(f.clone(), format!("\"{v}\" is not a semantic version"));
            }
        }
    }
    let multiple = d.allow_multiple_allocations == Some(true);
    for (name, c) in caps.into_iter().flatten() {
        let f = format!("capacity[{name}]");
        if !is_c_identifier(name) {
            bad(f.clone(), "name is not a C identifier of at most 32".into());
        }
        let value = match quantity::of(&c.value) {
            Ok(v) => v,
            Err(e) => {
                bad(format!("{f}.value"), e.to_string());
                continue;
            }
        };
        if let Some(p) = &c.request_policy {
            if !multiple {
                bad(
                    format!("{f}.requestPolicy"),
                    "only with allowMultipleAllocations".into(),
                );
            }
            if let Err(reason) = policy(p, value) {
                bad(format!("{f}.requestPolicy"), reason.to_string());
            }
        }
    }
    out
}

/// Why a capacity's request policy is invalid: its quantities, or the rule it breaks.
#[derive(Debug, thiserror::Error)]
enum PolicyError {
    /// A quantity that does not parse.
    #[error(transparent)]
    Quantity(#[from] quantity::QuantityError),
    /// The rule broken, as the API server says it.
    #[error("{0}")]
    Rule(&'static str),
}

fn policy(p: &CapacityRequestPolicy, value: u64) -> Result<(), PolicyError> {
    use PolicyError::Rule;
    let q = quantity::of;
    let default = p.default.as_ref().map(q).transpose()?;
    if default.is_some_and(|d| d > value) {
        return Err(Rule("default above the capacity"));
    }
    match (&p.valid_values, &p.valid_range) {
        (Some(_), Some(_)) => Err(Rule("both validValues and validRange")),
        (Some(values), None) => {
            let v: Vec<u64> = values.iter().map(q).collect::<Result<_, _>>()?;
            if v.is_empty() || v.len() > 10 {
                return Err(Rule("validValues: 1 to 10 entries"));
            }
            if v.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Rule("validValues: not strictly ascending"));
            }
            if v.iter().any(|x| *x > value) {
                return Err(Rule("validValues: above the capacity"));
            }
            match default {
                Some(d) if v.contains(&d) => Ok(()),
                _ => Err(Rule("validValues: default must be set and listed")),
            }
        }
        (None, Some(r)) => {
            let min = q(&r.min)?;
            if min > value {
                return Err(Rule("validRange.min above the capacity"));
            }
            let max = r.max.as_ref().map(q).transpose()?;
            if max.is_some_and(|m| m < min || m > value) {
                return Err(Rule("validRange.max outside min..capacity"));
            }
            let d = default.ok_or(Rule("validRange: default must be set"))?;
            if d < min || max.is_some_and(|m| d > m) {
                return Err(Rule("default outside validRange"));
            }
            if let Some(step) = r.step.as_ref().map(q).transpose()? {
                if step == 0 {
                    return Err(Rule("validRange.step must be positive"));
                }
                if (d - min) % step != 0 {
                    return Err(Rule("default − min is not a multiple of step"));
                }
                if max.is_some_and(|m| (m - min) % step != 0) {
                    return Err(Rule("max − min is not a multiple of step"));
                }
            }
            Ok(())
        }
        (None, None) => Ok(()),
    }
}
