//! Parsing of the `GPUSLICE_SIM_*` configuration.

use std::collections::HashMap;

use gpuslice_sim_core::config::{derived_uuid, parse_quantity};
use gpuslice_sim_core::{EngineMode, SimConfig, SimError};

fn parse(vars: &[(&str, &str)]) -> Result<SimConfig, SimError> {
    let m: HashMap<&str, &str> = vars.iter().copied().collect();
    SimConfig::from_lookup(|k| m.get(k).map(|v| v.to_string()))
}

#[test]
fn defaults_are_one_h100() {
    let c = parse(&[]).expect("defaults");
    assert_eq!(c.devices.len(), 1);
    let d = &c.devices[0];
    assert_eq!(d.name, "NVIDIA H100 80GB HBM3");
    assert_eq!(d.total_mem, 81559 << 20);
    assert_eq!((d.sm_count, d.cc_major, d.cc_minor), (132, 9, 0));
    assert_eq!(c.ctx_overhead, 518 << 20);
    assert_eq!(c.module_overhead, 64 << 20);
    assert_eq!(
        (c.ctx_overhead_of(0), c.module_overhead_of(0)),
        (518 << 20, 64 << 20)
    );
    assert_eq!(c.alloc_granularity, 2 << 20);
    assert_eq!(c.driver_version, 12080);
    assert_eq!(c.nvml_driver_version, "570.124.06");
    assert_eq!(c.ctx_switch_ns, 25_000);
    assert_eq!(c.engine, EngineMode::Timeslice);
    assert_eq!(c.timeslice_ns, 2_000_000);
    assert!(c.state_path.to_string_lossy().contains("gpuslice-sim-"));
}

#[test]
fn heterogeneous_node() {
    let c = parse(&[(
        "GPUSLICE_SIM_DEVICES",
        "name=NVIDIA H100 80GB HBM3,mem=80Gi,sms=132,cc=9.0;name=NVIDIA A100-SXM4-40GB,mem=40Gi,sms=108,cc=8.0",
    )])
    .expect("parses");
    assert_eq!(c.devices.len(), 2);
    assert_eq!(c.devices[1].name, "NVIDIA A100-SXM4-40GB");
    assert_eq!(c.devices[1].total_mem, 40 << 30);
    assert_eq!((c.devices[1].cc_major, c.devices[1].cc_minor), (8, 0));
    assert_eq!(c.devices[1].sm_count, 108);
    assert_eq!(c.devices[1].minor, 1);
    assert_ne!(c.devices[0].uuid, c.devices[1].uuid);
    assert_eq!(c.devices[0].uuid, derived_uuid(0), "deterministic");
    assert_eq!(c.devices[0].uuid.len(), 40);
    assert_eq!(c.devices[0].pci_bus_id, "00000000:18:00.0");
    assert_ne!(c.devices[0].pci_bus_id, c.devices[1].pci_bus_id);
    let fp = c.fingerprint();
    let c2 = parse(&[("GPUSLICE_SIM_DEVICES", "mem=1Gi")]).expect("parses");
    assert_ne!(fp, c2.fingerprint());
}

#[test]
fn each_device_class_has_its_own_context_and_module_cost() {
    let c = parse(&[
        (
            "GPUSLICE_SIM_DEVICES",
            "name=NVIDIA H200,mem=141Gi;name=NVIDIA A100-SXM4-40GB,mem=40Gi,ctx=300Mi,module=8Mi",
        ),
        ("GPUSLICE_SIM_CTX_OVERHEAD", "520Mi"),
    ])
    .expect("parses");
    assert_eq!(c.ctx_overhead_of(0), 520 << 20, "the node's figure");
    assert_eq!(c.module_overhead_of(0), 64 << 20, "the default");
    assert_eq!(c.ctx_overhead_of(1), 300 << 20, "the device's own");
    assert_eq!(c.module_overhead_of(1), 8 << 20);
    let other = parse(&[(
        "GPUSLICE_SIM_DEVICES",
        "name=NVIDIA H200,mem=141Gi;name=NVIDIA A100-SXM4-40GB,mem=40Gi,ctx=301Mi,module=8Mi",
    )])
    .expect("parses");
    assert_ne!(c.fingerprint(), other.fingerprint());
}

#[test]
fn explicit_uuid_and_pci() {
    let c = parse(&[(
        "GPUSLICE_SIM_DEVICES",
        "mem=1Gi,uuid=GPU-01234567-89ab-cdef-0123-456789abcdef,pci=00000000:07:00.0",
    )])
    .expect("parses");
    assert_eq!(
        c.devices[0].uuid,
        "GPU-01234567-89ab-cdef-0123-456789abcdef"
    );
    assert_eq!(c.devices[0].pci_bus_id, "00000000:07:00.0");
}

#[test]
fn quantities() {
    assert_eq!(parse_quantity("512Mi"), Some(512 << 20));
    assert_eq!(parse_quantity("1G"), Some(1_000_000_000));
    assert_eq!(parse_quantity("4096"), Some(4096));
    assert_eq!(parse_quantity("1.5Gi"), None);
    assert_eq!(parse_quantity("-1"), None);
    assert_eq!(parse_quantity("Gi"), None);
    assert_eq!(parse_quantity("99999999999Ti"), None);
}

fn assert_config_err(vars: &[(&str, &str)], var: &str, value: &str) {
    match parse(vars) {
        Err(SimError::Config(m)) => {
            assert!(m.contains(var), "message {m:?} does not name {var}");
            assert!(m.contains(value), "message {m:?} does not name {value:?}");
        }
        other => panic!("{vars:?}: expected Config error, got {other:?}"),
    }
}

#[test]
fn bad_values_name_variable_and_value() {
    for (var, value) in [
        ("GPUSLICE_SIM_DEVICES", "mem=lots"),
        ("GPUSLICE_SIM_DEVICES", "mem=0"),
        ("GPUSLICE_SIM_DEVICES", "name=X,colour=red"),
        ("GPUSLICE_SIM_DEVICES", "cc=9"),
        ("GPUSLICE_SIM_DEVICES", "sms=0"),
        ("GPUSLICE_SIM_DEVICES", "uuid=nope"),
        ("GPUSLICE_SIM_DEVICES", ""),
        ("GPUSLICE_SIM_DEVICES", "mem=1Gi;;mem=2Gi"),
        ("GPUSLICE_SIM_CTX_OVERHEAD", "300 MB"),
        ("GPUSLICE_SIM_MODULE_OVERHEAD", "64 MiB"),
        ("GPUSLICE_SIM_DEVICES", "mem=1Gi,ctx=lots"),
        ("GPUSLICE_SIM_DEVICES", "mem=1Gi,module=-1"),
        ("GPUSLICE_SIM_ALLOC_GRANULARITY", "3Mi"),
        ("GPUSLICE_SIM_DRIVER_VERSION", "twelve"),
        ("GPUSLICE_SIM_NVML_DRIVER_VERSION", "v570"),
        ("GPUSLICE_SIM_CTX_SWITCH_US", "-5"),
        ("GPUSLICE_SIM_ENGINE", "preemptive"),
        ("GPUSLICE_SIM_ENGINE", ""),
        ("GPUSLICE_SIM_TIMESLICE_US", "0"),
        ("GPUSLICE_SIM_TIMESLICE_US", "2ms"),
        ("GPUSLICE_SIM_TIMESLICE_US", "1000001"),
        ("GPUSLICE_SIM_STATE", ""),
    ] {
        assert_config_err(&[(var, value)], var, value);
    }
    let many = vec!["mem=1Gi"; 17].join(";");
    assert!(matches!(
        parse(&[("GPUSLICE_SIM_DEVICES", &many)]),
        Err(SimError::Config(_))
    ));
}

#[test]
fn engine_mode_and_timeslice() {
    let c = parse(&[
        ("GPUSLICE_SIM_ENGINE", "kernel"),
        ("GPUSLICE_SIM_TIMESLICE_US", "500"),
    ])
    .expect("parses");
    assert_eq!(c.engine, EngineMode::Kernel);
    assert_eq!(c.timeslice_ns, 500_000);
    let t = parse(&[("GPUSLICE_SIM_ENGINE", " timeslice ")]).expect("parses");
    assert_eq!(t.engine, EngineMode::Timeslice);
    assert_ne!(
        c.fingerprint(),
        parse(&[("GPUSLICE_SIM_TIMESLICE_US", "500")])
            .expect("parses")
            .fingerprint(),
        "processes of different engine modes must not share a state file"
    );
    assert_ne!(
        t.fingerprint(),
        parse(&[("GPUSLICE_SIM_TIMESLICE_US", "500")])
            .expect("parses")
            .fingerprint(),
        "nor of different time slices"
    );
}

#[test]
fn trace_file_is_optional_and_not_fingerprinted() {
    assert_eq!(parse(&[]).expect("parses").trace, None);
    let t = parse(&[("GPUSLICE_SIM_TRACE", "/tmp/x.trace")]).expect("parses");
    assert_eq!(
        t.trace.as_deref(),
        Some(std::path::Path::new("/tmp/x.trace"))
    );
    assert_eq!(
        t.fingerprint(),
        parse(&[]).expect("parses").fingerprint(),
        "traced and untraced processes share a node"
    );
    assert_config_err(&[("GPUSLICE_SIM_TRACE", "")], "GPUSLICE_SIM_TRACE", "");
}
