//! The Kubernetes Pod a container belongs to, read from the annotations the CRI runtime writes
//! into its OCI spec: containerd's CRI plugin sets `io.kubernetes.cri.sandbox-namespace`,
//! `io.kubernetes.cri.sandbox-name` and `io.kubernetes.cri.container-name`; CRI-O sets
//! `io.kubernetes.pod.namespace`, `io.kubernetes.pod.name` and `io.kubernetes.container.name`.
//! The arbiter labels a slice's metrics with it (`docs/metrics.md`); outside Kubernetes there is
//! none and the labels are empty.
//!
//! Values are names (Kubernetes DNS labels and subdomains): anything else — too long, or with
//! characters no Kubernetes name has, as a hand-written annotation outside Kubernetes could
//! carry — is left out rather than passed on into label values.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// containerd's (CRI plugin) keys: namespace, Pod name, container name.
pub const CONTAINERD_KEYS: [&str; 3] = [
    "io.kubernetes.cri.sandbox-namespace",
    "io.kubernetes.cri.sandbox-name",
    "io.kubernetes.cri.container-name",
];
/// CRI-O's keys: namespace, Pod name, container name.
pub const CRIO_KEYS: [&str; 3] = [
    "io.kubernetes.pod.namespace",
    "io.kubernetes.pod.name",
    "io.kubernetes.container.name",
];
/// Longest value kept (a DNS subdomain, Kubernetes' longest name).
const MAX_NAME: usize = 253;

/// The Pod and container of a slice's container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodRef {
    /// Namespace (empty: not known).
    #[serde(default)]
    pub namespace: String,
    /// Pod name.
    #[serde(default)]
    pub name: String,
    /// Container name.
    #[serde(default)]
    pub container: String,
}

impl PodRef {
    /// The Pod named by `annotations` (containerd's keys first, then CRI-O's); `None` when
    /// neither names a Pod.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Option<PodRef> {
        [CONTAINERD_KEYS, CRIO_KEYS].iter().find_map(|keys| {
            let get = |k: &str| {
                annotations
                    .get(k)
                    .filter(|v| is_name(v))
                    .cloned()
                    .unwrap_or_default()
            };
            let pod = PodRef {
                namespace: get(keys[0]),
                name: get(keys[1]),
                container: get(keys[2]),
            };
            (!pod.name.is_empty()).then_some(pod)
        })
    }
}

/// A Kubernetes name: 1–253 of lowercase letters, digits, `-` and `.` (uppercase and `_`
/// tolerated: some runtimes' container names).
fn is_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_NAME
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn containerd_then_crio_keys_name_the_pod() {
        let containerd = map(&[
            ("io.kubernetes.cri.sandbox-namespace", "ml"),
            ("io.kubernetes.cri.sandbox-name", "trainer-7f9c"),
            ("io.kubernetes.cri.container-name", "train"),
            ("io.kubernetes.cri.container-type", "container"),
        ]);
        let want = PodRef {
            namespace: "ml".into(),
            name: "trainer-7f9c".into(),
            container: "train".into(),
        };
        assert_eq!(PodRef::from_annotations(&containerd), Some(want.clone()));
        let crio = map(&[
            ("io.kubernetes.pod.namespace", "ml"),
            ("io.kubernetes.pod.name", "trainer-7f9c"),
            ("io.kubernetes.container.name", "train"),
        ]);
        assert_eq!(PodRef::from_annotations(&crio), Some(want));
        assert_eq!(PodRef::from_annotations(&map(&[])), None, "not Kubernetes");
    }

    #[test]
    fn values_that_are_no_kubernetes_name_are_left_out() {
        let odd = map(&[
            ("io.kubernetes.cri.sandbox-namespace", "a\"b\n"),
            ("io.kubernetes.cri.sandbox-name", "p"),
            ("io.kubernetes.cri.container-name", &"c".repeat(300)),
        ]);
        let got = PodRef::from_annotations(&odd).expect("a Pod");
        assert_eq!((got.namespace.as_str(), got.name.as_str()), ("", "p"));
        assert_eq!(got.container, "");
        // No Pod name: no Pod.
        let nameless = map(&[("io.kubernetes.cri.sandbox-name", "{}")]);
        assert_eq!(PodRef::from_annotations(&nameless), None);
    }
}
