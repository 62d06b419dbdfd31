//! Which containers get a slice, and what they ask for.
//!
//! * Kubernetes sandbox (pause) containers are never edited, whatever they carry: containerd
//!   marks them `io.kubernetes.cri.container-type: sandbox`, dockershim / cri-dockerd
//!   `io.kubernetes.docker.type: podsandbox`, CRI-O `io.kubernetes.cri-o.ContainerType: sandbox`.
//! * Pod annotations reach every container of the Pod. They apply to every non-sandbox container
//!   unless `gpuslice.io/containers: a,b` lists container names: then only the listed containers
//!   take the annotations. A container's own environment (`GPUSLICE_*`) always applies to it.
//! * The request itself is read by `SliceRequest::from_sources` (annotations win over env).
//! * A container given units of `gpuslice.io/gpu-memory` by the device plugin carries
//!   [`DEVICE_PLUGIN_ENV`] (`<GPU uuid>:<bytes>`): that GPU and cap are what kubelet accounted,
//!   so every memory and devices key the container also sees (annotation or env) must say the
//!   same, or the container is refused ([`check_device_plugin`]) — never silently re-sized.

use gpuslice_api::request::provenance;
use std::collections::BTreeMap;

use gpuslice_api::quantity::format_bytes;
use gpuslice_api::request::{env as env_keys, keys};
use gpuslice_api::{DeviceRef, DeviceSelector, MemoryRequest, RequestError, SliceRequest};

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

/// Set in a container by `gpuslice-kubelet-plugin --mode device-plugin` (`Allocate`):
/// `<GPU uuid>:<cap in bytes>`, the GPU kubelet chose and the cap its units add up to.
pub const DEVICE_PLUGIN_ENV: &str = "GPUSLICE_DEVICE_PLUGIN";

/// The value of [`DEVICE_PLUGIN_ENV`] for `bytes` on GPU `uuid`.
pub fn device_plugin_value(uuid: &str, bytes: u64) -> String {
    format!("{uuid}:{bytes}")
}

fn parse_device_plugin(value: &str) -> Option<(&str, u64)> {
    let (uuid, bytes) = value.rsplit_once(':')?;
    let bytes: u64 = bytes.parse().ok()?;
    (!uuid.is_empty() && bytes > 0).then_some((uuid, bytes))
}

/// With [`DEVICE_PLUGIN_ENV`] in `env`: every memory key (`gpuslice.io/memory` among the
/// `annotations` this container takes, each `GPUSLICE_MEMORY` in `env`) must be exactly the
/// allocated bytes, and every devices key exactly the allocated GPU's UUID. Annotations win
/// over env, so a disagreeing annotation would otherwise re-size or move a slice the scheduler
/// accounted differently: it is refused, naming the key, its value and the allocation.
pub fn check_device_plugin(
    annotations: &BTreeMap<String, String>,
    env: &[(String, String)],
) -> Result<(), RequestError> {
    let marks: Vec<&str> = env
        .iter()
        .filter(|(k, _)| k == DEVICE_PLUGIN_ENV)
        .map(|(_, v)| v.as_str())
        .collect();
    let Some(first) = marks.first() else {
        return Ok(());
    };
    if let Some(other) = marks.iter().find(|v| *v != first) {
        return Err(RequestError::new(
            DEVICE_PLUGIN_ENV,
            other,
            format!("set twice with different values (also \"{first}\")"),
        ));
    }
    let Some((uuid, bytes)) = parse_device_plugin(first) else {
        return Err(RequestError::new(
            DEVICE_PLUGIN_ENV,
            first,
            "malformed: expected <GPU uuid>:<bytes>, as the device plugin sets it",
        ));
    };
    let alloc = format!(
        "the device plugin allocated gpuslice.io/gpu-memory worth {} ({bytes} bytes) on {uuid}",
        format_bytes(bytes)
    );
    let memory = annotations
        .get(keys::MEMORY)
        .map(|v| (keys::MEMORY, v.as_str()))
        .into_iter()
        .chain(
            env.iter()
                .filter(|(k, _)| k == env_keys::MEMORY)
                .map(|(_, v)| (env_keys::MEMORY, v.as_str())),
        );
    let mut seen_memory = false;
    for (k, v) in memory {
        seen_memory = true;
        if MemoryRequest::parse(v).ok() != Some(MemoryRequest::Bytes(bytes)) {
            return Err(RequestError::new(
                k,
                v,
                format!("disagrees with the allocation: {alloc}; the container's resources.limits set its cap, remove {k}"),
            ));
        }
    }
    if !seen_memory {
        return Err(RequestError::new(
            DEVICE_PLUGIN_ENV,
            first,
            format!(
                "{} is missing: {alloc}, and the cap must come with it",
                env_keys::MEMORY
            ),
        ));
    }
    let devices = annotations
        .get(keys::DEVICES)
        .map(|v| (keys::DEVICES, v.as_str()))
        .into_iter()
        .chain(
            env.iter()
                .filter(|(k, _)| k == env_keys::DEVICES)
                .map(|(_, v)| (env_keys::DEVICES, v.as_str())),
        );
    let want = DeviceSelector::List(vec![DeviceRef::Uuid(uuid.to_string())]);
    for (k, v) in devices {
        if DeviceSelector::parse(v).ok().as_ref() != Some(&want) {
            return Err(RequestError::new(
                k,
                v,
                format!(
                    "disagrees with the allocation: {alloc}; kubelet chose the GPU, remove {k}"
                ),
            ));
        }
    }
    Ok(())
}

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
    check_device_plugin(&ann, env)?;
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

    const UUID: &str = "GPU-10000000-aaaa-bbbb-cccc-dddddddddddd";

    fn plugin_env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let bytes = (30u64 << 30).to_string();
        let mut env = vec![
            (
                DEVICE_PLUGIN_ENV.to_string(),
                device_plugin_value(UUID, 30 << 30),
            ),
            ("GPUSLICE_MEMORY".to_string(), bytes),
            ("GPUSLICE_DEVICES".to_string(), UUID.to_string()),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    #[test]
    fn device_plugin_allocation_is_the_request_and_agreeing_keys_pass() {
        let a = ann(&[
            ("gpuslice.io/memory", "30Gi"),
            ("gpuslice.io/compute", "40"),
        ]);
        match select(&a, &plugin_env(&[])).unwrap() {
            Selection::Slice(r, _) => {
                assert_eq!(r.memory, Some(MemoryRequest::Bytes(30 << 30)));
                assert_eq!(
                    r.devices,
                    DeviceSelector::List(vec![DeviceRef::Uuid(UUID.into())])
                );
                assert_eq!(r.compute, Some(40));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn device_plugin_allocation_refuses_a_disagreeing_memory_or_devices_key() {
        let a = ann(&[("gpuslice.io/memory", "20Gi")]);
        let e = select(&a, &plugin_env(&[])).unwrap_err().to_string();
        assert!(
            e.starts_with("gpuslice.io/memory=\"20Gi\": disagrees with the allocation")
                && e.contains("30Gi (32212254720 bytes)")
                && e.contains(UUID),
            "{e}"
        );
        // A second GPUSLICE_MEMORY from the Pod spec is refused too, whatever order.
        let e = select(&ann(&[]), &plugin_env(&[("GPUSLICE_MEMORY", "50%")]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("GPUSLICE_MEMORY=\"50%\": disagrees"), "{e}");
        let e = select(&ann(&[("gpuslice.io/devices", "1")]), &plugin_env(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("gpuslice.io/devices=\"1\": disagrees"), "{e}");
        // Annotations the container does not take (gpuslice.io/containers) are not checked.
        let mut a = ann(&[("gpuslice.io/memory", "20Gi"), (CONTAINERS, "other")]);
        a.insert(NAME_KEYS[0].into(), "me".into());
        assert!(matches!(
            select(&a, &plugin_env(&[])).unwrap(),
            Selection::Slice(..)
        ));
    }

    #[test]
    fn device_plugin_marker_must_be_well_formed_and_come_with_its_cap() {
        let env = vec![(DEVICE_PLUGIN_ENV.to_string(), "nonsense".to_string())];
        let e = select(&ann(&[]), &env).unwrap_err().to_string();
        assert!(e.contains("malformed"), "{e}");
        let env = vec![(
            DEVICE_PLUGIN_ENV.to_string(),
            device_plugin_value(UUID, 1 << 30),
        )];
        let e = select(&ann(&[]), &env).unwrap_err().to_string();
        assert!(e.contains("GPUSLICE_MEMORY is missing"), "{e}");
    }
}
