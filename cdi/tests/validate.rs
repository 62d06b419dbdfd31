//! `Spec::validate` refuses what the CDI schema refuses, with the schema compiled offline (the
//! workspace's container-device-interface has no HTTP resolver), and what the crate's own rules
//! refuse (names). Needs no root: the spec is built by hand.

use std::path::Path;

use gpuslice_cdi::spec::{Device, DeviceNode, Edits, Hook};
use gpuslice_cdi::{Spec, KIND};

fn spec(timeout: i64) -> Spec {
    Spec {
        cdi_version: "0.5.0".into(),
        kind: KIND.into(),
        devices: vec![Device {
            name: "0".into(),
            container_edits: Edits {
                device_nodes: vec![DeviceNode {
                    path: "/dev/nvidia0".into(),
                    host_path: None,
                    kind: "c".into(),
                    major: 195,
                    minor: 0,
                }],
                hooks: vec![Hook {
                    hook_name: "createRuntime".into(),
                    path: "/usr/bin/gpuslice-hook".into(),
                    args: vec!["gpuslice-hook".into(), "create-runtime".into()],
                    timeout,
                }],
                ..Edits::default()
            },
        }],
        container_edits: Edits::default(),
    }
}

fn validate(s: &Spec) -> Result<(), String> {
    s.validate(Path::new("/var/run/cdi/gpuslice.yaml"))
        .map_err(|e| e.to_string())
}

#[test]
fn a_valid_spec_passes() {
    validate(&spec(10)).unwrap();
}

#[test]
fn a_spec_the_schema_refuses_is_refused() {
    // A hook timeout is a uint32 in the CDI schema (defs.json); the crate's typed spec holds an
    // i64 and no rule of its own checks the range, so only the JSON schema refuses these. (The
    // schema covers the devices' edits; the spec-wide `containerEdits` is not in schema.json.)
    for timeout in [-1, 1 << 32] {
        let e = validate(&spec(timeout)).unwrap_err();
        assert!(e.contains("schema validation failed"), "{timeout}: {e}");
        assert!(e.contains(&timeout.to_string()), "{timeout}: {e}");
    }
    validate(&spec(u32::MAX.into())).unwrap();
}

#[test]
fn a_device_name_the_spec_rules_refuse_is_refused() {
    let mut s = spec(10);
    s.devices[0].name = "gpu 0".into();
    let e = validate(&s).unwrap_err();
    assert!(e.contains("gpu 0"), "{e}");
}
