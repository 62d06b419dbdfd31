//! Which containers get a slice, and what they ask for.
//!
//! * Kubernetes sandbox (pause) containers are never edited, whatever they carry: containerd
//!   marks them `io.kubernetes.cri.container-type: sandbox`, dockershim / cri-dockerd
//!   `io.kubernetes.docker.type: podsandbox`, CRI-O `io.kubernetes.cri-o.ContainerType: sandbox`.
//! * Pod annotations reach every container of the Pod. They apply to every non-sandbox container
//!   unless `gpuslice.io/containers: a,b` lists container names: then only the listed containers
//!   take the annotations. A container's own environment (`GPUSLICE_*`) always applies to it.
//! * The request itself is read by `SliceRequest::from_sources` (annotations win over env).

use gpuslice_api::request::provenance;
use std::collections::BTreeMap;

use gpuslice_api::{RequestError, SliceRequest};

/// The annotation listing the containers of a Pod that take the Pod's `gpuslice.io/*` keys.
pub const CONTAINERS: &str = "gpuslice.io/containers";

/// Annotation/value pairs that mark a sandbox (pause) container.
pub const SANDBOX_MARKERS: [(&str, &str); 3] = [
    ("io.kubernetes.cri.container-type", "sandbox"),
    ("io.kubernetes.docker.type", "podsandbox"),
    ("io.kubernetes.cri-o.ContainerType", "sandbox"),
];

/// Annotations carrying the Kubernetes container name (containerd, dockershim/CRI-O label, CRI-O).
pub const NAME_KEYS: [&str; 3] = [
    "io.kubernetes.cri.container-name",
    "io.kubernetes.container.name",
    "io.kubernetes.cri-o.ContainerName",
];

/// What to do with a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Nothing asked: leave the spec byte-for-byte unchanged.
    Nothing,
    /// A Kubernetes sandbox: never edited.
    Sandbox,
    /// Give it a slice. The string is where the request came from (`key="value"` pairs, see
    /// `gpuslice_api::request::provenance`), for messages that must name the key and value.
    Slice(SliceRequest, String),
}

/// Why the request cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// A request key has a bad value (the message names key, value and reason).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// `gpuslice.io/containers` is malformed or cannot be applied.
    #[error("{CONTAINERS}=\"{value}\": {reason}")]
    Containers {
        /// The annotation's value.
        value: String,
        /// Why.
        reason: String,
    },
}

/// Whether the annotations mark a Kubernetes sandbox container.
pub fn is_sandbox(annotations: &BTreeMap<String, String>) -> bool {
    SANDBOX_MARKERS
        .iter()
        .any(|(k, v)| annotations.get(*k).is_some_and(|x| x == v))
}

/// The Kubernetes container name, when the engine passed one.
pub fn container_name(annotations: &BTreeMap<String, String>) -> Option<&str> {
    NAME_KEYS
        .iter()
        .find_map(|k| annotations.get(*k).map(String::as_str))
}

/// Decides for one container from its spec's annotations and `process.env`.
pub fn select(
    annotations: &BTreeMap<String, String>,
    env: &[(String, String)],
) -> Result<Selection, SelectError> {
    if is_sandbox(annotations) {
        return Ok(Selection::Sandbox);
    }
    let mut ann = annotations.clone();
    let listed = ann.remove(CONTAINERS);
    let take_annotations = match &listed {
        None => true,
        Some(value) => {
            let names: Vec<&str> = value.split(',').map(str::trim).collect();
            if names.iter().any(|n| n.is_empty()) {
                return Err(SelectError::Containers {
                    value: value.clone(),
                    reason: "empty container name in the list".into(),
                });
            }
            let Some(me) = container_name(annotations) else {
                return Err(SelectError::Containers {
                    value: value.clone(),
                    reason: format!(
                        "the engine passed no container name ({}), so the list cannot be applied",
                        NAME_KEYS.join(", ")
                    ),
                });
            };
            names.contains(&me)
        }
    };
    if !take_annotations {
        ann.retain(|k, _| !k.starts_with(gpuslice_api::request::keys::PREFIX));
    }
    match SliceRequest::from_sources(&ann, env)? {
        Some(r) => Ok(Selection::Slice(r, provenance(&ann, env))),
        None => Ok(Selection::Nothing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn sandboxes_are_never_selected_even_with_requests() {
        for (k, v) in SANDBOX_MARKERS {
            let a = ann(&[(k, v), ("gpuslice.io/memory", "12Q")]);
            assert_eq!(select(&a, &[]).unwrap(), Selection::Sandbox);
        }
        // A container (not sandbox) marker does not count.
        let a = ann(&[
            ("io.kubernetes.cri.container-type", "container"),
            ("gpuslice.io/memory", "1Gi"),
        ]);
        assert!(matches!(select(&a, &[]).unwrap(), Selection::Slice(..)));
    }

    #[test]
    fn nothing_asked_is_nothing() {
        let a = ann(&[("org.example/x", "y")]);
        let env = vec![("PATH".to_string(), "/bin".to_string())];
        assert_eq!(select(&a, &env).unwrap(), Selection::Nothing);
    }

    #[test]
    fn containers_list_filters_pod_annotations_but_not_own_env() {
        let base = [
            ("gpuslice.io/memory", "1Gi"),
            ("gpuslice.io/containers", "train, eval"),
        ];
        let mut a = ann(&base);
        a.insert(NAME_KEYS[0].into(), "train".into());
        assert!(matches!(select(&a, &[]).unwrap(), Selection::Slice(..)));
        a.insert(NAME_KEYS[0].into(), "sidecar".into());
        assert_eq!(select(&a, &[]).unwrap(), Selection::Nothing);
        let env = vec![("GPUSLICE_MEMORY".to_string(), "2Gi".to_string())];
        match select(&a, &env).unwrap() {
            Selection::Slice(r, _) => assert_eq!(r.memory.unwrap().to_string(), "2Gi"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn containers_list_errors_name_the_key() {
        let a = ann(&[("gpuslice.io/memory", "1Gi"), (CONTAINERS, "a")]);
        let e = select(&a, &[]).unwrap_err().to_string();
        assert!(e.contains("gpuslice.io/containers=\"a\"") && e.contains("no container name"));
        let mut a = ann(&[(CONTAINERS, "a,,b")]);
        a.insert(NAME_KEYS[0].into(), "a".into());
        assert!(select(&a, &[]).unwrap_err().to_string().contains("empty"));
    }

    #[test]
    fn bad_values_name_key_value_reason() {
        let a = ann(&[("gpuslice.io/memory", "12Q")]);
        let e = select(&a, &[]).unwrap_err().to_string();
        assert!(
            e.starts_with("gpuslice.io/memory=\"12Q\": unknown unit"),
            "{e}"
        );
    }
}
