//! Golden test of the pure spec edit: `tests/golden/input.json` + a fixed plan must give
//! `tests/golden/output.json` exactly (as JSON values). Regenerate deliberately with
//! `GPUSLICE_BLESS=1 cargo test -p gpuslice-oci --test edit_golden` and review the diff.

use std::path::PathBuf;

use gpuslice_api::AssignedDevice;
use gpuslice_oci::devices::DeviceNode;
use gpuslice_oci::edit::{apply, Plan};
use gpuslice_oci::spec::SpecDoc;

fn plan() -> Plan {
    Plan {
        interposer: PathBuf::from("/opt/gs/lib/gpuslice/libgpuslice.so"),
        slice_dir: Some(PathBuf::from("/run/gpuslice/c1")),
        preload_file: Some(PathBuf::from("/run/gpuslice/c1/ld.so.preload")),
        devices: vec![AssignedDevice {
            index: 1,
            uuid: "GPU-1111".into(),
            name: "NVIDIA H100".into(),
            memory_total: 80 << 30,
            memory_cap: Some(1 << 30),
            memory_best_effort: None,
        }],
        device_nodes: vec![
            DeviceNode {
                path: "/dev/nvidia1".into(),
                major: 195,
                minor: 1,
            },
            DeviceNode {
                path: "/dev/nvidiactl".into(),
                major: 195,
                minor: 255,
            },
        ],
        hook: Some((
            PathBuf::from("/opt/gs/bin/gpuslice-hook"),
            vec![
                "--state-dir".into(),
                "/run/gpuslice".into(),
                "--slice-id".into(),
                "c1".into(),
            ],
        )),
        extra_env: Vec::new(),
    }
}

#[test]
fn edit_matches_golden_output() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut doc = SpecDoc::parse(&std::fs::read(dir.join("input.json")).unwrap()).unwrap();
    apply(&mut doc, &plan()).unwrap();
    let out = dir.join("output.json");
    if std::env::var_os("GPUSLICE_BLESS").is_some() {
        std::fs::write(&out, doc.to_bytes().unwrap()).unwrap();
    }
    let want: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        doc.0,
        want,
        "got:\n{}",
        String::from_utf8_lossy(&doc.to_bytes().unwrap())
    );
}

#[test]
fn open_plan_adds_only_interposer_and_env() {
    let input = br#"{"process":{"env":["A=1"]},"annotations":{}}"#;
    let mut doc = SpecDoc::parse(input).unwrap();
    let p = Plan {
        interposer: PathBuf::from("/l.so"),
        extra_env: vec![("GPUSLICE_MEMORY".into(), "1Gi".into())],
        ..Plan::default()
    };
    apply(&mut doc, &p).unwrap();
    assert_eq!(doc.0["mounts"].as_array().unwrap().len(), 1);
    assert_eq!(
        doc.0["process"]["env"],
        serde_json::json!([
            "A=1",
            "GPUSLICE_MEMORY=1Gi",
            "LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so"
        ])
    );
    assert!(doc.0.get("hooks").is_none() && doc.0.get("linux").is_none());
}
