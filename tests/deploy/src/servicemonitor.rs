//! The Prometheus Operator's `ServiceMonitor` (`monitoring.coreos.com/v1`), for the strict check:
//! the fields of its CRD that the deployment may use, with the CRD's own constraints (field
//! names, the duration pattern, the `scheme` and relabel `action` enums). Not in `k8s-openapi`
//! (a CRD), so typed here; a field outside this subset is reported like any unknown field.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Deserializer, Serialize};

/// A ServiceMonitor object.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitor {
    /// `monitoring.coreos.com/v1`.
    pub api_version: String,
    /// `ServiceMonitor`.
    pub kind: String,
    /// Standard metadata.
    pub metadata: ObjectMeta,
    /// What to scrape.
    pub spec: Spec,
}

/// `spec`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// Namespaces the Services are looked for in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Services to scrape (by label).
    pub selector: LabelSelector,
    /// One entry per Service port to scrape.
    pub endpoints: Vec<Endpoint>,
    /// Service label whose value names the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_label: Option<String>,
}

/// `spec.namespaceSelector`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelector {
    /// Every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<bool>,
    /// These namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_names: Option<Vec<String>>,
}

/// `spec.endpoints[]`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// Name of the Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// HTTP path (default `/metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `http` or `https`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "scheme"
    )]
    pub scheme: Option<String>,
    /// Scrape interval (Prometheus duration).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "duration"
    )]
    pub interval: Option<String>,
    /// Scrape timeout (Prometheus duration).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "duration"
    )]
    pub scrape_timeout: Option<String>,
    /// Relabelings applied before scraping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relabelings: Option<Vec<Relabel>>,
    /// Relabelings applied to the scraped series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_relabelings: Option<Vec<Relabel>>,
}

/// One relabel rule.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Relabel {
    /// Source labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_labels: Option<Vec<String>>,
    /// Target label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_label: Option<String>,
    /// Regular expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// Replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// The CRD's enum (lower case).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "action"
    )]
    pub action: Option<String>,
}

fn one_of<'de, D: Deserializer<'de>>(
    d: D,
    what: &str,
    allowed: &[&str],
) -> Result<Option<String>, D::Error> {
    let v = String::deserialize(d)?;
    if allowed.contains(&v.as_str()) {
        Ok(Some(v))
    } else {
        Err(serde::de::Error::custom(format!(
            "{what} {v:?} is not one of {allowed:?}"
        )))
    }
}

fn scheme<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    one_of(d, "scheme", &["http", "https"])
}

fn action<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let allowed = [
        "replace",
        "keep",
        "drop",
        "hashmod",
        "labelmap",
        "labeldrop",
        "labelkeep",
        "lowercase",
        "uppercase",
        "keepequal",
        "dropequal",
    ];
    one_of(d, "action", &allowed)
}

/// The CRD's duration pattern: `((\d+)(y|w|d|h|m|s|ms))+` or `0`, units in that order.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = String::deserialize(d)?;
    if is_duration(&v) {
        Ok(Some(v))
    } else {
        Err(serde::de::Error::custom(format!(
            "{v:?} is not a Prometheus duration"
        )))
    }
}

fn is_duration(v: &str) -> bool {
    if v == "0" {
        return true;
    }
    const UNITS: [&str; 7] = ["y", "w", "d", "h", "m", "s", "ms"];
    let mut rest = v;
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        // "ms" before "m" and "s": the longest unit that matches.
        let Some(u) = (next_unit..UNITS.len())
            .filter(|&i| rest.starts_with(UNITS[i]))
            .max_by_key(|&i| UNITS[i].len())
        else {
            return false;
        };
        rest = &rest[UNITS[u].len()..];
        next_unit = u + 1;
    }
    !v.is_empty()
}

#[cfg(test)]
mod tests {
    use super::is_duration;

    #[test]
    fn durations_follow_the_crd_pattern() {
        for ok in ["30s", "1m30s", "0", "1h", "500ms", "1d2h"] {
            assert!(is_duration(ok), "{ok}");
        }
        for bad in ["", "30", "s", "30 s", "1s1m", "1.5s", "30sec"] {
            assert!(!is_duration(bad), "{bad}");
        }
    }
}
